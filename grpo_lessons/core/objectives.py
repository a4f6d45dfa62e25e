"""Per-token surrogate objectives, written as losses to *minimise* (the sign is already flipped).

Introduced in ``notebooks/03_clipped_surrogate_and_kl.ipynb`` (clip),
``notebooks/10_sapo.ipynb`` (soft gate), ``notebooks/12_vespo.ipynb`` (VESPO),
``notebooks/13_dppo.ipynb`` (DPPO) and ``notebooks/14_cispo_scalerl.ipynb`` (CISPO); GMPO's geometric mean of
log-space-clipped token ratios is the worked example of ``docs/adding-a-variant.md``.

Each objective takes ``ratio`` (``(B, T)`` or ``(B, 1)``), ``adv`` (``(B, 1)``) and its own
hyper-parameters, and returns the per-token loss together with boolean "clipped" masks used
for diagnostics (``None`` where the notion does not apply).  The policy-gradient objectives
(CISPO, VESPO, DPPO: a stop-gradient weight times ``A log pi``) also need the log-probs and
more; each entry of :data:`OBJECTIVES` names what :func:`grpo_lessons.policy_loss` passes it
(:attr:`Objective.inputs`).  :func:`register_objective` adds one.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, NamedTuple

import torch

from .registry import Registry

__all__ = [
    "ObjectiveOut",
    "clipped_surrogate",
    "sapo_surrogate",
    "cispo_surrogate",
    "vespo_phi",
    "vespo_surrogate",
    "dppo_trust_mask",
    "dppo_surrogate",
    "gmpo_surrogate",
    "DPPO_KINDS",
    "OBJECTIVES",
    "Objective",
    "register_objective",
    "OBJECTIVE_INPUTS",
]


class ObjectiveOut(NamedTuple):
    per_token_loss: torch.Tensor  # broadcastable to (B, T)
    clipped_low: torch.Tensor | None  # ratio below 1 - eps_low with A < 0: the min picks the flat branch
    clipped_high: torch.Tensor | None  # ratio above 1 + eps_high with A > 0
    extras: dict | None = None  # objective-specific diagnostics (tensors, detached)


def clipped_surrogate(
    ratio: torch.Tensor, adv: torch.Tensor, *, epsilon: float, epsilon_high: float | None = None,
    delta: float | None = None,
) -> ObjectiveOut:
    """PPO/GRPO clip: ``-min(r A, clip(r, 1 - eps_low, 1 + eps_high) A)``.

    Shao et al. 2024 Eq. (3) with ``eps_low = eps_high = epsilon``; DAPO's clip-higher
    (Yu et al. 2025, arXiv 2503.14476, Eq. (10)) with ``epsilon_high > epsilon``.  The min makes
    the upper bound bind only for ``A > 0`` and the lower bound only for ``A < 0``.
    TRL ``epsilon`` / ``epsilon_high``; veRL ``clip_ratio_low`` / ``clip_ratio_high``.

    ``delta``: INTELLECT-2's two-sided clip (Prime Intellect 2025, arXiv 2505.07291): the unclipped branch uses
    ``min(r, delta)``, ``-min(min(r, delta) A, clip(r, 1 - eps_low, 1 + eps_high) A)``, so a token with ``A < 0``
    whose ratio ran far up (where the plain clip leaves ``r A`` unbounded) contributes at most ``delta A`` and no
    gradient beyond ``delta``; for ``A > 0`` nothing changes when ``delta >= 1 + eps_high`` (TRL advises
    ``delta > 1 + epsilon``).  TRL ``GRPOConfig(delta=...)``; the clip fractions are read off ``min(r, delta)``,
    as TRL's.
    """
    eps_high = epsilon if epsilon_high is None else epsilon_high
    if delta is not None:
        if not delta > 0:
            raise ValueError(f"delta (the two-sided clip's bound on r) must be > 0, got {delta!r}")
        ratio_1 = torch.clamp(ratio, max=delta)  # the two-sided bound on the unclipped branch
    else:
        ratio_1 = ratio
    loss1 = -adv * ratio_1  # unclipped branch
    loss2 = -adv * torch.clamp(ratio, 1.0 - epsilon, 1.0 + eps_high)  # clipped branch
    per_token = torch.maximum(loss1, loss2)  # max of losses == -min of objectives
    clipped_low = (ratio_1 < 1.0 - epsilon) & (adv < 0)
    clipped_high = (ratio_1 > 1.0 + eps_high) & (adv > 0)
    return ObjectiveOut(per_token, clipped_low, clipped_high)


def sapo_surrogate(
    ratio: torch.Tensor, adv: torch.Tensor, *, tau_pos: float = 1.0, tau_neg: float = 1.05
) -> ObjectiveOut:
    """SAPO soft gate: ``-f(r) A`` with ``f(r) = sigmoid(tau (r - 1)) * 4 / tau``.

    Gao et al. 2025, arXiv 2511.20347.  ``tau = tau_pos`` where ``A > 0`` else ``tau_neg``.
    The gradient weight ``df/dr = 4 sigma (1 - sigma)`` equals 1 at ``r = 1`` (REINFORCE on
    policy) and decays smoothly instead of dropping to zero.  TRL ``loss_type="sapo"``,
    ``sapo_temperature_pos`` / ``sapo_temperature_neg``; veRL ``loss_mode="sapo"``.
    """
    if tau_pos <= 0 or tau_neg <= 0:
        raise ValueError(f"SAPO temperatures must be positive, got tau_pos={tau_pos}, tau_neg={tau_neg}")
    tau = torch.where(adv > 0, torch.as_tensor(tau_pos, dtype=ratio.dtype), torch.as_tensor(tau_neg, dtype=ratio.dtype))
    gate = torch.sigmoid(tau * (ratio - 1.0)) * 4.0 / tau
    return ObjectiveOut(-gate * adv, None, None)


def cispo_surrogate(
    ratio: torch.Tensor, adv: torch.Tensor, *, logp: torch.Tensor, epsilon_high: float = 5.0
) -> ObjectiveOut:
    """CISPO: ``-sg(min(r, eps_max)) A log pi_theta`` per token.

    MiniMax-M1 (arXiv 2506.13585, Eq. (4)) clips the importance-sampling *weight*
    ``clip(r, 1 - eps_low, 1 + eps_high)`` and keeps every token's gradient (PPO's clip zeroes it);
    the paper sets no lower bound (a large ``eps_low``), so only the cap remains.  Here
    ``epsilon_high`` is the **absolute** cap on ``r`` (ScaleRL's ``eps_max``), exactly TRL 1.16
    ``loss_type="cispo"``: ``clamp(r, max=epsilon_high)``.  TRL's unset ``epsilon_high`` falls back
    to ``epsilon`` = 0.2, which scales every on-policy token by 0.2; the registry uses 5.0.
    veRL ``cispo`` uses ``1 + clip_ratio_high`` instead (a relative cap) and a lower clip.

    The *value* is not 0 on policy (it holds ``log pi``), unlike the clipped surrogate; only its
    gradient ``-w A grad log pi`` matters.  ``clipped_high`` marks ``r > eps_max`` with ``A > 0``
    (TRL's ``cispo_clip_ratio``); there is no lower clip, so ``clipped_low`` is all False.
    """
    if not epsilon_high > 0:
        raise ValueError(f"CISPO's cap epsilon_high must be > 0 (an absolute bound on r), got {epsilon_high}")
    weight = torch.clamp(ratio, max=epsilon_high).detach()  # (B, T) sg(min(r, eps_max))
    per_token = -weight * adv * logp  # (B, T)
    capped = ratio.detach() > epsilon_high
    return ObjectiveOut(per_token, torch.zeros_like(capped), capped & (adv > 0), {"is_weight": weight})


_LOG_1E8 = math.log(1e-8)


@torch.no_grad()
def vespo_phi(
    log_ratio: torch.Tensor,
    mask: torch.Tensor,
    adv: torch.Tensor,
    *,
    is_weights: torch.Tensor | None = None,
    k_pos: float = 2.0,
    lambda_pos: float = 3.0,
    k_neg: float = 3.0,
    lambda_neg: float = 2.0,
) -> torch.Tensor:
    """VESPO's sequence weight ``phi(W) = W^k exp(lambda (1 - W))``, ``(B, 1)``, no gradient.

    Shen et al. 2026, arXiv 2602.10693.  ``log_ratio`` ``(B, T)`` holds ``log pi_theta - log pi_old``
    per token, ``mask`` ``(B, T)``, ``adv`` ``(B, 1)``.  ``log W = sum_t clamp(log r_t, -20, 20) m_t``
    (the full sequence product, no length normalisation), plus ``sum_t clamp(log w_t, log 1e-8, 20)``
    of the sampler-correction weights ``is_weights`` when given (``(B, T)`` token weights, summed
    over completion tokens, or ``(B, 1)``); then ``log W`` is clamped to ``[log 1e-8, 20]`` and
    ``log phi = lambda + k log W - lambda W``, NaN/inf -> 0.  ``A >= 0`` takes ``(k_pos, lambda_pos)``,
    ``A < 0`` ``(k_neg, lambda_neg)``; ``lambda`` is floored at 1e-4.  ``phi(1) = 1`` and phi peaks
    at ``W = k / lambda``.  TRL 1.16 ``GRPOTrainer.get_gamma_weights`` (``vespo_k_pos`` ...).
    A masked token (weight 0) puts ``log 1e-8`` into ``log W`` and so drops its whole sequence.
    """
    m = mask.to(log_ratio.dtype)
    log_w = (torch.clamp(log_ratio, -20.0, 20.0) * m).sum(-1, keepdim=True)  # (B, 1)
    if is_weights is not None:
        log_is = torch.clamp(torch.log(is_weights.to(log_ratio.dtype)), _LOG_1E8, 20.0)
        if log_is.shape[-1] != 1:
            log_is = log_is * m  # (B, T) token weights: completion tokens only
        log_w = log_w + log_is.sum(-1, keepdim=True)  # (B, 1)
    log_w = torch.clamp(log_w, _LOG_1E8, 20.0)
    nonneg = adv >= 0  # (B, 1)
    k = torch.where(nonneg, torch.as_tensor(k_pos, dtype=log_w.dtype), torch.as_tensor(k_neg, dtype=log_w.dtype))
    lam = torch.where(nonneg, torch.as_tensor(lambda_pos, dtype=log_w.dtype),
                      torch.as_tensor(lambda_neg, dtype=log_w.dtype)).clamp(min=1e-4)
    log_phi = lam + k * log_w - lam * torch.exp(log_w)  # (B, 1)
    return torch.exp(log_phi).nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)  # (B, 1)


def vespo_surrogate(
    ratio: torch.Tensor,
    adv: torch.Tensor,
    *,
    logp: torch.Tensor,
    log_ratio: torch.Tensor,
    mask: torch.Tensor,
    is_weights: torch.Tensor | None = None,
    k_pos: float = 2.0,
    lambda_pos: float = 3.0,
    k_neg: float = 3.0,
    lambda_neg: float = 2.0,
) -> ObjectiveOut:
    """VESPO: ``-sg[phi(W)] A log pi_theta`` per token, ``phi`` from :func:`vespo_phi`.

    Shen et al. 2026, arXiv 2602.10693: a smooth, asymmetric weight on the whole sequence's
    importance ratio replaces the hard clip; on policy ``W = 1``, ``phi = 1``: REINFORCE.  The
    sampler-correction weights enter ``W`` (``is_weights``) instead of multiplying the loss.
    TRL 1.16 ``loss_type="vespo"``.  Aggregation: DAPO's global token mean.
    """
    phi = vespo_phi(log_ratio, mask, adv, is_weights=is_weights, k_pos=k_pos, lambda_pos=lambda_pos,
                    k_neg=k_neg, lambda_neg=lambda_neg)  # (B, 1)
    return ObjectiveOut(-phi * adv * logp, None, None, {"phi": phi})


DPPO_KINDS: tuple[str, ...] = ("binary_tv", "binary_kl", "topk_tv", "topk_kl")


@torch.no_grad()
def dppo_trust_mask(
    logp: torch.Tensor,
    anchor_logp: torch.Tensor,
    adv: torch.Tensor,
    *,
    kind: str,
    delta_low: float,
    delta_high: float,
    divergence: torch.Tensor | None = None,
) -> torch.Tensor:
    """DPPO's trust-region mask ``M = 1 - invalid``, ``(B, T)`` of 0/1 (no gradient).

    Qi et al. 2026, arXiv 2602.04879.  Per token ``p = pi_theta(y_t)``, ``mu = exp(anchor_logp)``
    (the rollout policy's probability).  A token is *invalid* only when it moved further in the
    direction its advantage asks for and beyond ``delta``:

    * ``binary_tv``: ``A > 0 and p - mu > delta_high``, or ``A <= 0 and p - mu < -delta_low``;
    * ``binary_kl``: ``D = mu log(mu/p) + (1-mu) log((1-mu+1e-8)/(1-p+1e-8))``;
      ``A > 0, D > delta_high, p > mu`` or ``A <= 0, D > delta_low, p < mu``;
    * ``topk_tv`` / ``topk_kl``: the same rule with ``D = divergence`` ``(B, T)`` computed over the
      sampler's top-K (:func:`grpo_lessons.core.divergence.topk_divergence`).

    The authors' code (sail-sg/Stable-RL, veRL ``dppo_*`` loss modes) computes the same masks.
    """
    if kind not in DPPO_KINDS:
        raise ValueError(f"unknown DPPO divergence kind {kind!r}; known: {', '.join(DPPO_KINDS)}")
    if delta_low < 0 or delta_high < 0:
        raise ValueError(f"DPPO thresholds must be >= 0, got delta_low={delta_low}, delta_high={delta_high}")
    p = torch.exp(logp.detach())  # (B, T)
    mu = torch.exp(anchor_logp)  # (B, T)
    if kind == "binary_tv":
        bad_pos = (p - mu) > delta_high
        bad_neg = (p - mu) < -delta_low
    else:
        if kind == "binary_kl":
            d = mu * (anchor_logp - logp.detach()) + (1 - mu) * torch.log((1 - mu + 1e-8) / (1 - p + 1e-8))  # (B, T)
        else:
            if divergence is None:
                raise ValueError(f"DPPO {kind!r} needs divergence=, the (B, T) top-K divergence "
                                 "(grpo_lessons.core.divergence.topk_divergence)")
            d = divergence.to(p.dtype)
            if d.shape != p.shape:
                raise ValueError(f"divergence has shape {tuple(d.shape)}, logp has {tuple(p.shape)}")
        bad_pos = (d > delta_high) & (p > mu)
        bad_neg = (d > delta_low) & (p < mu)
    invalid = torch.where(adv > 0, bad_pos, bad_neg)  # (B, T)
    return (~invalid).to(logp.dtype)


def dppo_surrogate(
    ratio: torch.Tensor,
    adv: torch.Tensor,
    *,
    logp: torch.Tensor,
    anchor_logp: torch.Tensor,
    divergence: torch.Tensor | None = None,
    kind: str = "binary_tv",
    delta_low: float = 0.15,
    delta_high: float = 0.15,
    ratio_cap: float = 3.0,
) -> ObjectiveOut:
    """DPPO: ``-A sg(min(p / mu, C)) M log p`` per token (Qi et al. 2026, arXiv 2602.04879).

    ``anchor_logp`` is ``log mu``: the sampler's log-probs when there are any (the paper), else
    ``pi_old`` (the paper's "recompute" ablation, veRL's ``dppo_tv``/``dppo_kl``).  ``M`` is
    :func:`dppo_trust_mask`; ``C = ratio_cap`` (``clip_ratio_c`` = 3.0 in the authors' config);
    ``log(p/mu)`` is clamped at 20 before ``exp`` as in their code.  Not in TRL.
    ``clipped_high`` / ``clipped_low`` mark tokens masked with ``A > 0`` / ``A <= 0``.
    """
    if not ratio_cap > 0:
        raise ValueError(f"ratio_cap must be > 0, got {ratio_cap}")
    keep = dppo_trust_mask(logp, anchor_logp, adv, kind=kind, delta_low=delta_low, delta_high=delta_high,
                           divergence=divergence)  # (B, T)
    weight = torch.exp(torch.clamp(logp.detach() - anchor_logp, max=20.0)).clamp(max=ratio_cap)  # (B, T)
    per_token = -adv * weight * keep * logp  # (B, T)
    dropped = keep == 0
    return ObjectiveOut(per_token, dropped & (adv <= 0), dropped & (adv > 0), {"is_weight": weight, "keep": keep})


def gmpo_surrogate(
    ratio: torch.Tensor,
    adv: torch.Tensor,
    *,
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    mask: torch.Tensor,
    epsilon: float = 0.4,
    epsilon_high: float | None = None,
) -> ObjectiveOut:
    """GMPO: ``-A_i exp((1/|o_i|) sum_t clip_A(log r_{i,t}))`` per sequence, a ``(B, 1)`` loss.

    Zhao et al. 2025, Geometric-Mean Policy Optimization, arXiv 2507.20673: the geometric mean of the token
    ratios replaces GRPO's arithmetic mean, each token ratio first clipped in log space on the side its
    advantage pushes.  With ``l = log pi_theta - log pi_old``:

    * ``A > 0``: ``min(l, clamp(l, -eps_low, eps_high))``, so ``l`` is capped at ``+eps_high``;
    * ``A < 0``: ``max(l, clamp(l, -eps_low, eps_high))``, so ``l`` is floored at ``-eps_low``;

    which is the paper's ``sgn(A) * prod_t |min(r A, clip(r, e^-eps_low, e^eps_high) A)|^(1/|o|)`` written with
    logs.  ``epsilon`` / ``epsilon_high`` are **log-space** bounds (the paper's 0.4 on both sides: ratios in
    ``[e^-0.4, e^0.4] = [0.67, 1.49]``); an unset ``epsilon_high`` is ``epsilon``.  A clipped token has zero
    gradient; an unclipped token of sequence ``i`` gets ``-A_i w_i / |o_i|`` on ``log pi_theta``.
    TRL 1.16 ``trl.experimental.gmpo.GMPOTrainer`` with ``GMPOConfig(epsilon=0.4)`` (same field names, same
    log-space meaning); aggregation: a plain mean over sequences (``seq_mean_token_mean`` of this ``(B, 1)``
    loss).  ``clipped_low`` / ``clipped_high`` mark ``l < -eps_low`` with ``A < 0`` / ``l > eps_high`` with
    ``A > 0``, as TRL's ``clip_ratio/low_mean`` / ``high_mean``.
    """
    eps_low = epsilon
    eps_high = epsilon if epsilon_high is None else epsilon_high
    if not (eps_low >= 0 and eps_high >= 0):
        raise ValueError(f"GMPO's log-space clip bounds must be >= 0, got epsilon={epsilon}, "
                         f"epsilon_high={epsilon_high}")
    log_r = logp - old_logp  # (B, T) log r_{i,t}, with gradient
    bounded = torch.clamp(log_r, -eps_low, eps_high)  # (B, T)
    clipped_log_r = torch.where(adv > 0, torch.minimum(log_r, bounded), torch.maximum(log_r, bounded))  # (B, T)
    m = mask.to(log_r.dtype)
    lengths = m.sum(-1, keepdim=True).clamp(min=1.0)  # (B, 1) |o_i|
    log_w = (clipped_log_r * m).sum(-1, keepdim=True) / lengths  # (B, 1) log of the geometric mean
    w = torch.exp(log_w)  # (B, 1) w_i = prod_t clip_A(r_{i,t})^(1/|o_i|)
    lr = log_r.detach()
    return ObjectiveOut(-adv * w, (lr < -eps_low) & (adv < 0), (lr > eps_high) & (adv > 0),
                        {"seq_weight": w.detach()})


#: The tensors :func:`grpo_lessons.policy_loss` can pass an objective besides ``(ratio, adv)``:
#: ``logp`` (B, T) current log-probs with grad; ``log_ratio`` (B, T) log pi_theta - log pi_old, detached (for a
#: stop-gradient weight: a loss built from it alone has no policy gradient, and policy_loss refuses it);
#: ``mask`` (B, T); ``is_weights`` the rollout-correction weights or None (an objective that takes them folds
#: them in itself and policy_loss does not multiply them afterwards); ``anchor_logp`` (B, T) log mu (sampler,
#: else pi_old); ``divergence`` (B, T) or None; ``old_logp`` (B, T) log pi_old, no grad (an objective that builds
#: its own ratio from the log-probs, as GMPO clips log r per token before its geometric mean).
OBJECTIVE_INPUT_NAMES: tuple[str, ...] = ("logp", "log_ratio", "mask", "is_weights", "anchor_logp", "divergence",
                                          "old_logp")


@dataclass(frozen=True)
class Objective:
    """An entry of :data:`OBJECTIVES`: ``fn(ratio, adv, **inputs, **params) -> ObjectiveOut``.

    * ``params`` — the hyper-parameters ``fn`` accepts (``policy_loss`` fills them from the variant's defaults).
    * ``inputs`` — which of :data:`OBJECTIVE_INPUT_NAMES` ``fn`` takes.
    * ``trl`` — ``{aggregation: TRL loss_type}``: the aggregations with which TRL 1.16's ``GRPOTrainer``
      computes this objective and the ``loss_type`` that selects each; ``None`` when TRL has no such objective.
    * ``trl_micro_batch`` — ``{aggregation: TRL loss_type}`` for the loss types that compute this objective with
      this aggregation but count the tokens of each micro-batch instead of the whole generation batch (TRL's
      ``bnpo`` beside ``dapo``).
    * ``trl_fields`` — ``{hyper-parameter: GRPOConfig field or None}``, one entry per parameter: the field the TRL
      bridge reads it from, or ``None`` where ``GRPOConfig`` has none (the trainer's ``loss_options`` set it).
    * ``topk_divergence`` — ``params -> "tv" | "kl" | None``: which top-K divergence the objective needs as
      its ``divergence`` input with these parameters (DPPO's top-K variants), ``None`` for none.

    The gradient contract: ``fn``'s loss carries the policy gradient through ``ratio`` or ``logp``; the other
    inputs are detached and serve as stop-gradient weights.  :func:`grpo_lessons.policy_loss` refuses a loss with
    no gradient path to ``logp``.
    """

    name: str
    fn: Callable[..., ObjectiveOut]
    params: tuple[str, ...]
    inputs: tuple[str, ...] = ()
    trl: Mapping[str, str] | None = None
    trl_fields: Mapping[str, str | None] = field(default_factory=dict)
    trl_micro_batch: Mapping[str, str] = field(default_factory=dict)
    topk_divergence: Callable[[Mapping[str, Any]], str | None] | None = None

    def __post_init__(self) -> None:
        if self.trl is not None:
            object.__setattr__(self, "trl", MappingProxyType(dict(self.trl)))
        object.__setattr__(self, "trl_fields", MappingProxyType(dict(self.trl_fields)))
        object.__setattr__(self, "trl_micro_batch", MappingProxyType(dict(self.trl_micro_batch)))

    @property
    def trl_loss_types(self) -> dict[str, tuple[str, bool]]:
        """``{TRL loss_type: (aggregation, tokens counted per micro-batch)}`` for every loss type computing it."""
        out = {lt: (agg, False) for agg, lt in (self.trl or {}).items()}
        out.update({lt: (agg, True) for agg, lt in self.trl_micro_batch.items()})
        return out

    def divergence_kind(self, params: Mapping[str, Any]) -> str | None:
        """``"tv"`` / ``"kl"`` when, with ``params``, the objective needs a top-K divergence; else ``None``."""
        return None if self.topk_divergence is None else self.topk_divergence(params)


#: Per-token objectives by name (a variant's ``objective``).
OBJECTIVES: Registry[Objective] = Registry("objective")
_REQUIRED: Any = object()


def register_objective(name: str, fn: Callable[..., ObjectiveOut], *, params: tuple[str, ...] = (),
                       inputs: tuple[str, ...] = (), trl: Mapping[str, str] | None = _REQUIRED,
                       trl_fields: Mapping[str, str | None] | None = None,
                       trl_micro_batch: Mapping[str, str] | None = None, trl_fallback: str | None = None,
                       topk_divergence: Callable[[Mapping[str, Any]], str | None] | None = None,
                       replace: bool = False) -> Objective:
    """Add an objective to :data:`OBJECTIVES` (see :class:`Objective`).

    ``trl`` is required (``None``: not in TRL), and so is a ``trl_fields`` entry for every parameter (``None`` where
    ``GRPOConfig`` has no field for it): a parameter left out would be read from nowhere and a config's value for it
    silently ignored.  ``trl_fallback`` is accepted from older registrations and ignored: for a combination TRL does
    not compute, ``grpo_config`` writes a ``loss_type`` naming the objective, which TRL's own trainer refuses.
    """
    if trl is _REQUIRED:
        raise TypeError(f"register_objective({name!r}): say how TRL computes it: trl={{aggregation: loss_type}} or "
                        "trl=None (TRL cannot; the bridge's loss does)")
    if not callable(fn):
        raise TypeError(f"objective {name!r}: fn must be callable, got {type(fn).__name__}")
    unknown = set(inputs) - set(OBJECTIVE_INPUT_NAMES)
    if unknown:
        raise ValueError(f"objective {name!r}: unknown inputs {sorted(unknown)}; policy_loss passes "
                         f"{', '.join(OBJECTIVE_INPUT_NAMES)}")
    fields = dict(trl_fields or {})
    missing = [p for p in params if p not in fields]
    if missing:
        raise TypeError(f"register_objective({name!r}): trl_fields must say which GRPOConfig field sets each parameter; "
                        f"missing {missing}: add e.g. trl_fields={{{missing[0]!r}: {missing[0]!r}}}, or "
                        f"{{{missing[0]!r}: None}} where GRPOConfig has no such field")
    extra = [p for p in fields if p not in params]
    if extra:
        raise ValueError(f"register_objective({name!r}): trl_fields names {extra}, which are not among params {params}")
    if trl_fallback is not None:
        warnings.warn(f"register_objective({name!r}): trl_fallback is no longer used (grpo_config names a combination "
                      "TRL lacks in loss_type, so TRL's own trainer refuses it)", DeprecationWarning, stacklevel=2)
    entry = Objective(name, fn, tuple(params), tuple(inputs), trl=trl, trl_fields=fields,
                      trl_micro_batch=dict(trl_micro_batch or {}), topk_divergence=topk_divergence)
    return OBJECTIVES.add(name, entry, replace=replace)


def _dppo_topk(params: Mapping[str, Any]) -> str | None:
    kind = str(params.get("kind", ""))
    return kind[len("topk_"):] if kind.startswith("topk_") else None


_EPS_FIELDS = {"epsilon": "epsilon", "epsilon_high": "epsilon_high"}
register_objective("clip", clipped_surrogate, params=("epsilon", "epsilon_high", "delta"),
                   trl_fields={**_EPS_FIELDS, "delta": "delta"},
                   trl={"seq_mean_token_mean": "grpo", "token_mean": "dapo", "seq_mean_token_sum_norm": "dr_grpo",
                        "seq_mean_token_sum": "luspo"},
                   trl_micro_batch={"token_mean": "bnpo"})  # bnpo: dapo's token mean over each micro-batch's tokens
register_objective("sapo", sapo_surrogate, params=("tau_pos", "tau_neg"), trl={"seq_mean_token_mean": "sapo"},
                   trl_fields={"tau_pos": "sapo_temperature_pos", "tau_neg": "sapo_temperature_neg"})
register_objective("cispo", cispo_surrogate, params=("epsilon_high",), inputs=("logp",),
                   trl={"token_mean": "cispo"}, trl_fields={"epsilon_high": "epsilon_high"})
register_objective("vespo", vespo_surrogate, params=("k_pos", "lambda_pos", "k_neg", "lambda_neg"),
                   inputs=("logp", "log_ratio", "mask", "is_weights"), trl={"token_mean": "vespo"},
                   trl_fields={p: f"vespo_{p}" for p in ("k_pos", "lambda_pos", "k_neg", "lambda_neg")})
register_objective("dppo", dppo_surrogate, params=("kind", "delta_low", "delta_high", "ratio_cap"),
                   inputs=("logp", "anchor_logp", "divergence"), trl=None,
                   trl_fields={p: None for p in ("kind", "delta_low", "delta_high", "ratio_cap")},  # loss_options
                   topk_divergence=_dppo_topk)
# GMPO: TRL's GRPOTrainer has no such loss_type (TRL ships it as trl.experimental.gmpo.GMPOTrainer); the bridge's
# loss computes it, and grpo_config writes loss_type="gmpo", which TRL's GRPOTrainer refuses.  GMPOConfig's epsilon /
# epsilon_high are the same GRPOConfig fields, read as log-space bounds.
register_objective("gmpo", gmpo_surrogate, params=("epsilon", "epsilon_high"), inputs=("logp", "old_logp", "mask"),
                   trl=None, trl_fields=_EPS_FIELDS)


class _InputsView(Mapping):
    """``{objective name: its inputs}``, read off :data:`OBJECTIVES` (the older ``OBJECTIVE_INPUTS`` dict)."""

    def __getitem__(self, name: str) -> tuple[str, ...]:
        return OBJECTIVES[name].inputs

    def __iter__(self):
        return iter(OBJECTIVES)

    def __len__(self) -> int:
        return len(OBJECTIVES)


OBJECTIVE_INPUTS: Mapping[str, tuple[str, ...]] = _InputsView()
