"""``policy_loss``: the GRPO pipeline from per-token log-probs to one scalar, for every variant.

Introduced in ``notebooks/03_clipped_surrogate_and_kl.ipynb``.  The pieces live in
:mod:`~grpo_lessons.ratios`, :mod:`~grpo_lessons.objectives`, :mod:`~grpo_lessons.aggregation`
and :mod:`~grpo_lessons.kl`; :mod:`~grpo_lessons.variants` says which pieces a variant uses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ._checks import as_float_tensor, check_2d, check_finite, check_mask, check_same_shape
from .aggregation import aggregate
from .kl import kl_estimate
from .objectives import OBJECTIVES
from .ratios import RATIO_LEVELS
from .variants import Variant, get_variant

__all__ = ["policy_loss", "LossOutput"]


@dataclass
class LossOutput:
    """Result of :func:`policy_loss`: ``.loss`` to back-propagate plus detached diagnostics."""

    loss: torch.Tensor  # scalar, with grad
    policy_loss: torch.Tensor  # scalar: the surrogate part alone (detached)
    kl: torch.Tensor | None  # scalar: the KL estimate aggregated like the loss (detached); None if beta == 0.
    #   On policy (ratio 1) loss == policy_loss + beta * kl exactly.
    kl_token_mean: float | None  # masked token mean of the KL term as it enters the loss: k3 x ratio when
    #   kl_importance_weighted (TRL's use_bias_correction_kl), else k3 -- exactly what TRL logs as "kl"
    clip_frac_low: float | None  # share of completion tokens with ratio < 1 - eps_low and A < 0
    clip_frac_high: float | None  # share with ratio > 1 + eps_high and A > 0
    ratio_mean: float  # masked mean of the importance ratio
    per_token_loss: torch.Tensor  # (B, T) before aggregation (detached)
    variant: str
    params: dict[str, Any]  # the hyper-parameters actually used

    @property
    def clip_frac(self) -> float | None:
        if self.clip_frac_low is None:
            return None
        return self.clip_frac_low + self.clip_frac_high

    def __float__(self) -> float:
        return float(self.loss.detach())


def _masked_mean(x: torch.Tensor, m: torch.Tensor) -> float:
    x = x.expand_as(m).to(m.dtype)
    return float((x * m).sum() / m.sum().clamp(min=1.0))


def policy_loss(
    logp,
    old_logp,
    adv,
    mask,
    variant: str | Variant = "dapo",
    epsilon: float | None = None,
    epsilon_high: float | None = None,
    beta: float = 0.0,
    ref_logp=None,
    max_completion_length: int | None = None,
    *,
    kl_kind: str = "k3",
    kl_importance_weighted: bool = True,
    num_items_in_batch: float | torch.Tensor | None = None,
    **options: Any,
) -> LossOutput:
    """The GRPO-family policy loss of one batch.

    Shapes: ``logp``, ``old_logp``, ``mask`` (and ``ref_logp``) are ``(B, T)`` — log-probs of the
    sampled completion tokens under the current / sampling policy and a 0/1 completion mask;
    ``adv`` is ``(B,)``, one advantage per completion.

    ``variant`` is a registry name (``grpo``, ``bnpo``, ``dr_grpo``, ``dapo``, ``gspo``,
    ``gspo_token``, ``sapo``, ``2-grpo``; named as TRL's ``loss_type`` where TRL has one).
    ``epsilon`` / ``epsilon_high`` (and objective options such as ``tau_pos``, ``tau_neg``)
    default to the *paper's* values in the registry: 0.2 for GRPO, 0.2 / 0.28 for DAPO,
    3e-4 / 4e-4 for GSPO.  Passing ``epsilon`` without ``epsilon_high`` gives the symmetric range
    ``[1 - epsilon, 1 + epsilon]`` (TRL's rule); passing neither keeps the variant's pair.

    ``beta * KL`` (needs ``ref_logp``): per token ``k3`` (or ``kl_kind``) of KL(pi_theta || pi_ref).
    With ``kl_importance_weighted=True`` (TRL's default ``use_bias_correction_kl=True``) the term is
    multiplied by the variant's importance ratio, so its gradient is an unbiased estimate of the
    gradient of the true KL when the batch is off-policy; ``False`` gives the plain k3 term of the
    DeepSeekMath paper.  On policy (ratio 1) both have the same *value*.

    Aggregation is the variant's (see :func:`grpo_lessons.aggregation.aggregate`); a row whose mask
    is all zero contributes 0 and, under ``grpo``/``sapo``/``gspo`` and ``dr_grpo``, still counts
    in the batch size ``B``.  ``max_completion_length`` is Dr. GRPO's constant (default ``T``);
    ``num_items_in_batch`` overrides the token count of token-mean variants (TRL's ``dapo``
    normalises by the whole generation batch under gradient accumulation).
    """
    v = get_variant(variant)
    lp = as_float_tensor(logp, "logp")
    if lp.dtype in (torch.float16, torch.bfloat16):  # the loss is computed in fp32 whatever comes in: bf16 cannot
        lp = lp.float()  # even represent GSPO's 1 + 4e-4 (its step at 1 is 2^-7), so nothing would ever clip
    olp = as_float_tensor(old_logp, "old_logp").to(lp.dtype)
    check_2d(lp, "logp")
    check_same_shape(lp, "logp", old_logp=olp, mask=mask if isinstance(mask, torch.Tensor) else None)
    m = check_mask(as_float_tensor(mask, "mask")).to(lp.dtype)
    check_same_shape(lp, "logp", mask=m)
    a = as_float_tensor(adv, "adv").to(lp.dtype)
    if a.dim() != 1 or a.shape[0] != lp.shape[0]:
        raise ValueError(
            f"adv must be (B,) = ({lp.shape[0]},), one advantage per completion; got shape {tuple(a.shape)}"
        )
    check_finite(a, "adv")
    check_finite(lp.detach(), "logp", where=m)
    check_finite(olp, "old_logp", where=m)
    if beta < 0:
        raise ValueError(f"beta must be >= 0, got {beta}")
    rlp = None
    if beta != 0.0:
        if ref_logp is None:
            raise ValueError("beta != 0 needs ref_logp, the reference model's log-probs of the same tokens")
        rlp = as_float_tensor(ref_logp, "ref_logp").to(lp.dtype)
        check_same_shape(lp, "logp", ref_logp=rlp)
        check_finite(rlp, "ref_logp", where=m)

    # Padding may hold anything (NaN from a sampler, -inf): zero it so 0 * NaN never reaches the sum.
    keep = m > 0
    lp = torch.where(keep, lp, torch.zeros_like(lp))
    olp = torch.where(keep, olp, torch.zeros_like(olp))
    if rlp is not None:
        rlp = torch.where(keep, rlp, torch.zeros_like(rlp))

    # Hyper-parameters: explicit arguments, then options, then the paper's defaults.
    fn, accepted = OBJECTIVES[v.objective]
    unknown = set(options) - set(accepted)
    if unknown:
        raise TypeError(
            f"variant {v.name!r} ({v.objective} objective) takes {accepted or 'no options'}; "
            f"got unexpected {sorted(unknown)}"
        )
    params = {k: v.loss_defaults.get(k) for k in accepted}
    params.update(options)
    if "epsilon" in accepted:
        if epsilon is not None:
            params["epsilon"] = epsilon
            # An explicit epsilon alone gives the symmetric range, as TRL's GRPOConfig does (epsilon_high
            # defaults to epsilon): keeping the variant's own epsilon_high would silently pair, e.g., GSPO's
            # 4e-4 with epsilon=0.2 -- a clip range of [0.8, 1.0004].
            params["epsilon_high"] = epsilon
        if epsilon_high is not None:
            params["epsilon_high"] = epsilon_high
        if params["epsilon_high"] is None:
            params["epsilon_high"] = params["epsilon"]
        if params["epsilon"] < 0 or params["epsilon_high"] < 0:
            raise ValueError(f"clip ranges must be >= 0, got {params}")
    elif epsilon is not None or epsilon_high is not None:
        raise TypeError(f"variant {v.name!r} has no clip range; epsilon/epsilon_high do not apply")

    # 1. importance ratio at the variant's level: (B, T) or (B, 1)
    log_ratio = RATIO_LEVELS[v.ratio_level](lp, olp, m)
    ratio = torch.exp(log_ratio)
    adv_col = a.unsqueeze(-1)  # (B, 1)

    # 2. the surrogate, per token
    out = fn(ratio, adv_col, **params)
    per_token = out.per_token_loss.expand_as(lp)  # (B, T)

    # 3. the KL anchor, per token
    kl_agg = kl_tok = None
    if rlp is not None:
        kl = kl_estimate(lp, rlp, kl_kind)  # (B, T)
        kl_agg = aggregate(kl.detach(), m, v.aggregation, max_completion_length=max_completion_length,
                           num_items_in_batch=num_items_in_batch)
        if kl_importance_weighted:
            kl = kl * ratio
        kl_tok = _masked_mean(kl.detach(), m)  # TRL logs the token mean of the term it adds (ratio-weighted)
        per_token = per_token + beta * kl

    # 4. aggregation: the one place the loss is normalised
    loss = aggregate(per_token, m, v.aggregation, max_completion_length=max_completion_length,
                     num_items_in_batch=num_items_in_batch)
    surrogate = aggregate(out.per_token_loss.expand_as(lp).detach(), m, v.aggregation,
                          max_completion_length=max_completion_length, num_items_in_batch=num_items_in_batch)

    return LossOutput(
        loss=loss,
        policy_loss=surrogate,
        kl=kl_agg,
        kl_token_mean=kl_tok,
        clip_frac_low=None if out.clipped_low is None else _masked_mean(out.clipped_low, m),
        clip_frac_high=None if out.clipped_high is None else _masked_mean(out.clipped_high, m),
        ratio_mean=_masked_mean(ratio.detach(), m),
        per_token_loss=per_token.detach(),
        variant=v.name,
        params=dict(params),
    )
