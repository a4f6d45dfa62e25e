"""``policy_loss``: the GRPO pipeline from per-token log-probs to one scalar, for every variant.

Introduced in ``notebooks/03_clipped_surrogate_and_kl.ipynb``.  The pieces live in
:mod:`~grpo_lessons.core.ratios`, :mod:`~grpo_lessons.core.objectives`, :mod:`~grpo_lessons.core.aggregation`
and :mod:`~grpo_lessons.core.kl`; :mod:`~grpo_lessons.core.variants` says which pieces a variant uses.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

from ._checks import as_float_tensor, check_2d, check_finite, check_mask, check_same_shape
from .aggregation import aggregate
from .correction import CORRECTION_MODES, correction_stats, off_policy_sequence_mask, rollout_weights
from .entropy import high_entropy_mask
from .kl import kl_estimate
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
    #   CISPO: high = ratio above the cap with A > 0 (TRL's cispo_clip_ratio), low = 0;
    #   DPPO: tokens the trust region masks with A > 0 (high) / A <= 0 (low)
    ratio_mean: float  # masked mean of the importance ratio
    per_token_loss: torch.Tensor  # (B, T) before aggregation (detached)
    variant: str
    params: dict[str, Any]  # the hyper-parameters actually used (an option left at None, e.g. delta, is not listed)
    # rollout correction (TIS/MIS) and off-policy sequence mask; None when not used
    is_weight_mean: float | None = None  # masked token mean of the correction weight pi_old/mu after truncate/mask
    is_masked_frac: float | None = None  # share of tokens (token modes) or sequences (sequence modes) set to 0
    is_truncated_frac: float | None = None  # share clamped to [clip_min, clip_max] (truncate modes)
    off_policy_masked_frac: float | None = None  # share of sequences the off-policy sequence mask drops
    extras: dict[str, float] = field(default_factory=dict)  # objective diagnostics, e.g. "vespo/phi_mean"
    # the regularisers after the aggregation; None when not used
    policy_kl_loss: torch.Tensor | None = None  # scalar: the aggregated policy term + beta * KL, before the entropy
    #   bonus and the aux loss (detached) -- what TRL logs as "policy_loss"
    entropy_mean: float | None = None  # token mean of `entropy` over the completion tokens (TRL's "entropy")
    entropy_bonus: float | None = None  # the entropy term the loss subtracts entropy_coef times
    entropy_kept_frac: float | None = None  # share of completion tokens the top-entropy mask keeps
    aux_loss: float | None = None  # the MoE router aux loss the loss adds aux_loss_coef times
    # the detached tensors some of the numbers above reduce, for a trainer that reduces them otherwise (over several
    # processes, per sequence): "clipped_low" / "clipped_high" (B, T) or (B, 1) bool, the objective's flags;
    # "kl" (B, T), the KL term as it enters the loss; "<objective>/<name>" for each objective diagnostic, e.g.
    # "vespo/phi" (B, 1)
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)

    @property
    def clip_frac(self) -> float | None:
        if self.clip_frac_low is None:
            return None
        return self.clip_frac_low + self.clip_frac_high

    def __float__(self) -> float:
        return float(self.loss.detach())


def _finite_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


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
    sampling_logp=None,
    rollout_correction: str | None = None,
    rollout_clip_max: float | None = 3.0,
    rollout_clip_min: float | None = None,
    off_policy_mask_threshold: float | None = None,
    divergence=None,
    group_size: int | None = None,
    prompt_weights=None,
    entropy=None,
    entropy_coef: float = 0.0,
    entropy_aggregation: str | None = None,
    top_entropy_quantile: float = 1.0,
    entropy_mask=None,
    aux_loss=None,
    aux_loss_coef: float = 0.0,
    allow_unscored_tokens: bool = False,
    **options: Any,
) -> LossOutput:
    """The GRPO-family policy loss of one batch.

    Shapes: ``logp``, ``old_logp``, ``mask`` (and ``ref_logp``) are ``(B, T)`` — log-probs of the
    sampled completion tokens under the current / sampling policy and a 0/1 completion mask;
    ``adv`` is ``(B,)``, one advantage per completion.

    ``variant`` is a :class:`~grpo_lessons.core.variants.Variant` or the name of one in
    :data:`~grpo_lessons.core.variants.VARIANTS` (``grpo``, ``dapo``, ``gspo``, ``cispo``, ...: see
    :func:`~grpo_lessons.core.variants.list_variants`; named as TRL's ``loss_type`` where TRL has one); its
    ratio level, objective and aggregation are read from their registries.
    CISPO's ``epsilon_high`` is an absolute cap on the ratio (TRL's meaning; ``epsilon`` alone sets it,
    as TRL's fallback does); GMPO's ``epsilon`` / ``epsilon_high`` bound the *log* ratio (0.4 each, TRL's
    ``GMPOConfig``); DPPO takes ``kind``, ``delta_low``, ``delta_high``, ``ratio_cap`` and VESPO
    ``k_pos``, ``lambda_pos``, ``k_neg``, ``lambda_neg`` as options.
    ``epsilon`` / ``epsilon_high`` (and objective options such as ``tau_pos``, ``tau_neg``)
    default to the *paper's* values in the registry: 0.2 for GRPO, 0.2 / 0.28 for DAPO,
    3e-4 / 4e-4 for GSPO.  Passing ``epsilon`` without ``epsilon_high`` gives the symmetric range
    ``[1 - epsilon, 1 + epsilon]`` (TRL's rule); passing neither keeps the variant's pair.

    ``beta * KL`` (needs ``ref_logp``): per token ``k3`` (or ``kl_kind``) of KL(pi_theta || pi_ref).
    With ``kl_importance_weighted=True`` (TRL's default ``use_bias_correction_kl=True``) the term is
    multiplied by the variant's importance ratio, so its gradient is an unbiased estimate of the
    gradient of the true KL when the batch is off-policy; ``False`` gives the plain k3 term of the
    DeepSeekMath paper.  On policy (ratio 1) both have the same *value*.

    Aggregation is the variant's (see :func:`grpo_lessons.core.aggregation.aggregate`); a row whose mask
    is all zero contributes 0 and, under ``grpo``/``sapo``/``gspo`` and ``dr_grpo``, still counts
    in the batch size ``B``.  ``max_completion_length`` is Dr. GRPO's constant (default ``T``);
    ``num_items_in_batch`` overrides the token count of token-mean variants (TRL's ``dapo``
    normalises by the whole generation batch under gradient accumulation).  ``prompt_mean``
    (``scalerl``) needs ``group_size`` (rows of one prompt are contiguous), or ``prompt_weights``
    ``(B,)`` from :func:`grpo_lessons.core.aggregation.prompt_weights` of the whole batch for a micro-batch.

    Off-policy pieces (``notebooks/11_train_inference_mismatch.ipynb``), in TRL 1.16's order:

    * ``sampling_logp`` ``(B, T)``: the sampler's log-probs ``mu`` (vLLM); DPPO's anchor and the
      off-policy mask's reference when given (``pi_old`` otherwise).
    * ``rollout_correction`` (``token_truncate`` / ``token_mask`` / ``sequence_truncate`` /
      ``sequence_mask``, with ``rollout_clip_max`` / ``rollout_clip_min``; refused for an objective
      anchored at ``mu``, DPPO, whose weight ``min(pi_theta / mu, C)`` already corrects): the weight of
      :func:`grpo_lessons.core.correction.rollout_weights` multiplies the per-token loss after the
      objective and before ``beta * KL`` and aggregation (masked tokens stay in the denominator; the
      KL term is not weighted).  VESPO folds the weights into its sequence ratio instead, as TRL
      does.  TRL ``vllm_importance_sampling_correction=True`` + ``vllm_importance_sampling_mode``.
    * ``off_policy_mask_threshold``: DeepSeek-V3.2's sequence mask
      (:func:`grpo_lessons.core.correction.off_policy_sequence_mask`) multiplies the per-token loss
      right after the objective.  TRL ``off_policy_mask_threshold``.
    * ``divergence`` ``(B, T)``: the top-K divergence DPPO's ``dppo_topk_*`` variants need
      (:func:`grpo_lessons.core.divergence.topk_divergence`).
    * ``allow_unscored_tokens=True``: a NaN in ``sampling_logp`` at a completion token marks a token the
      sampler could not score (vLLM returns no log-prob for it) and is read as TRL 1.16 reads it in each
      place: the rollout correction gives it ``rho = 1`` (``mu`` taken as ``pi_old``), the off-policy
      mask counts it as KL 0 (``mu`` taken as ``pi_theta``: no evidence of drift, though it still counts
      in its sequence's token count), DPPO's anchor is ``pi_old`` there.  ``False`` (the default): such
      a NaN is an error.

    Entropy and the MoE aux loss (TRL 1.16's order and scaling):

    * ``top_entropy_quantile = rho < 1`` (needs ``entropy`` ``(B, T)``): the policy term keeps only the top-``rho``
      completion tokens by entropy (Wang et al. 2025, arXiv 2506.01939;
      :func:`grpo_lessons.core.entropy.high_entropy_mask` over this batch), multiplied in after the off-policy
      mask and before the sampler correction and ``beta * KL``; the normaliser still counts every token.
      ``entropy_mask`` ``(B, T)`` gives that mask ready-made instead (a trainer on several processes takes the
      quantile of the gathered batch).  TRL ``top_entropy_quantile``.
    * ``entropy_coef = c`` with ``entropy`` ``(B, T)`` (carrying its gradient): ``loss -= c * H`` with ``H`` the
      token mean of ``entropy`` over the completion tokens the policy term keeps (times the top-entropy mask),
      whatever the variant's aggregation: TRL ``entropy_coef`` ("the bonus is always the mean per-token entropy").
      ``entropy_aggregation=<aggregation name>`` aggregates ``H`` as that aggregation does instead (veRL's
      ``entropy_coeff`` with its ``loss_agg_mode``; the course's trainer passes the variant's own).
    * ``aux_loss`` (scalar, with its gradient: the router load-balancing loss a Mixture-of-Experts model returns
      with ``output_router_logits=True``) with ``aux_loss_coef = a``: ``loss += a * aux_loss``.  TRL adds it for
      every model whose config has ``output_router_logits`` (``router_aux_loss_coef``, default the model's own).
    The bonus and the aux loss are not divided by the aggregation's normaliser; a trainer that divides the loss
    for gradient accumulation and wants them divided differently (TRL divides them by the accumulation steps
    only) scales ``entropy_coef`` / ``aux_loss_coef`` to match.
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

    slp = opsm_ref = None  # the sampler's log-probs; what the off-policy mask compares pi_theta with
    if sampling_logp is not None:
        slp = as_float_tensor(sampling_logp, "sampling_logp").to(lp.dtype)
        check_same_shape(lp, "logp", sampling_logp=slp)
        unscored = keep & torch.isnan(slp) if allow_unscored_tokens else torch.zeros_like(keep)  # (B, T)
        check_finite(slp, "sampling_logp", where=keep & ~unscored)  # inf, and NaN unless allowed, are errors
        slp = torch.where(keep, slp, torch.zeros_like(slp))
        opsm_ref = torch.where(unscored, lp.detach(), slp)  # unscored: no KL evidence (TRL)
        slp = torch.where(unscored, olp, slp)  # unscored: rho = pi_old / mu = 1, DPPO anchored at pi_old (TRL)
    if rollout_correction is not None:
        CORRECTION_MODES.lookup(rollout_correction, "rollout_correction")
        if slp is None:
            raise ValueError("rollout_correction needs sampling_logp, the sampler's log-probs of the same tokens "
                             "(without a separate sampler there is nothing to correct)")
        if "anchor_logp" in v.objective_piece.inputs:
            # An objective anchored at mu (DPPO: -A sg(min(p / mu, C)) M log p, Qi et al. 2026, arXiv 2602.04879)
            # already corrects for the sampler -- p / mu = (p / pi_old)(pi_old / mu) -- so a rollout weight
            # min(pi_old / mu, C) on top would count the mismatch twice.  The paper has one weight, and the authors'
            # loss (sail-sg/Stable-RL) takes veRL's rollout IS weights as an argument and never multiplies by them.
            raise ValueError(
                f"variant {v.name!r} ({v.objective} objective) already weights each token by min(pi_theta / mu, C) with "
                "mu the sampler's probability: rollout_correction would weight the sampler mismatch a second time. "
                "Leave rollout_correction unset (ratio_cap is the objective's truncation C); off_policy_mask_threshold "
                "still applies")
    div = None
    if divergence is not None:
        div = as_float_tensor(divergence, "divergence").to(lp.dtype)
        check_same_shape(lp, "logp", divergence=div)
        check_finite(div, "divergence", where=keep)
        div = torch.where(keep, div, torch.zeros_like(div))

    ent = None
    if entropy is not None:
        ent = as_float_tensor(entropy, "entropy")
        if ent.dtype != lp.dtype:
            ent = ent.to(lp.dtype)
        check_same_shape(lp, "logp", entropy=ent)
        check_finite(ent.detach(), "entropy", where=keep)
        ent = torch.where(keep, ent, torch.zeros_like(ent))
    if not _finite_number(entropy_coef):
        raise ValueError(f"entropy_coef must be a finite number, got {entropy_coef!r}")
    if entropy_coef != 0.0 and ent is None:
        raise ValueError("entropy_coef != 0 needs entropy=, the (B, T) per-token entropies of the current policy "
                         "(grpo_lessons.core.shaping.token_entropy of the tempered logits)")
    if isinstance(top_entropy_quantile, bool) or not 0.0 <= float(top_entropy_quantile) <= 1.0:
        raise ValueError(f"top_entropy_quantile must be in [0, 1], got {top_entropy_quantile!r}")
    ent_mask = None
    if entropy_mask is not None:
        if top_entropy_quantile < 1.0:
            raise ValueError("pass top_entropy_quantile or entropy_mask, not both")
        ent_mask = check_mask(as_float_tensor(entropy_mask, "entropy_mask")).to(lp.dtype)
        check_same_shape(lp, "logp", entropy_mask=ent_mask)
        ent_mask = ent_mask * m
    elif top_entropy_quantile < 1.0:
        if ent is None:
            raise ValueError("top_entropy_quantile < 1 needs entropy=, the (B, T) per-token entropies")
        ent_mask = high_entropy_mask(ent, m, float(top_entropy_quantile))  # (B, T)
    aux = None
    if aux_loss is not None:
        aux = as_float_tensor(aux_loss, "aux_loss")
        if aux.dim() != 0:
            raise ValueError(f"aux_loss must be a scalar, got shape {tuple(aux.shape)}")
        check_finite(aux.detach(), "aux_loss")
    if not _finite_number(aux_loss_coef):
        raise ValueError(f"aux_loss_coef must be a finite number, got {aux_loss_coef!r}")
    if aux_loss_coef != 0.0 and aux is None:
        raise ValueError("aux_loss_coef != 0 needs aux_loss=, the MoE router load-balancing loss "
                         "(the model's output with output_router_logits=True)")

    # Hyper-parameters: explicit arguments, then options, then the paper's defaults.
    objective = v.objective_piece
    fn, accepted = objective.fn, objective.params
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
    elif "epsilon_high" in accepted:  # CISPO: epsilon_high is an absolute cap on r
        if epsilon_high is not None:
            params["epsilon_high"] = epsilon_high
        elif epsilon is not None:
            params["epsilon_high"] = epsilon  # TRL's fallback (epsilon_high defaults to epsilon)
    elif epsilon is not None or epsilon_high is not None:
        raise TypeError(f"variant {v.name!r} has no clip range; epsilon/epsilon_high do not apply")

    agg_kw = {"max_completion_length": max_completion_length, "num_items_in_batch": num_items_in_batch,
              "group_size": group_size, "prompt_weights": prompt_weights}

    # 1. importance ratio at the variant's level: (B, T) or (B, 1)
    log_ratio = v.ratio_piece.fn(lp, olp, m)
    ratio = torch.exp(log_ratio)
    adv_col = a.unsqueeze(-1)  # (B, 1)

    # 2. the surrogate, per token (the sampler correction weights are computed once, without gradient)
    is_w = None
    if rollout_correction is not None:
        is_w = rollout_weights(olp, slp, m, rollout_correction, clip_max=rollout_clip_max,
                               clip_min=rollout_clip_min)  # (B, T) or (B, 1)
    needs = objective.inputs
    if div is not None and "divergence" not in needs:
        raise ValueError(f"divergence= applies to DPPO's top-K variants, not to {v.name!r}")
    inputs = {"logp": lp, "log_ratio": (lp - olp).detach(), "mask": m, "is_weights": is_w,
              "anchor_logp": slp if slp is not None else olp, "divergence": div, "old_logp": olp.detach()}
    out = fn(ratio, adv_col, **{k: inputs[k] for k in needs}, **params)
    if lp.requires_grad and torch.is_grad_enabled() and not out.per_token_loss.requires_grad:
        # the value would be right and the update would hold no policy gradient (only beta * KL, if any)
        raise ValueError(
            f"objective {v.objective!r} returned a per-token loss with no gradient path to logp: build the loss from "
            "`ratio` or `logp`; the other inputs (log_ratio, old_logp, anchor_logp, ...) are detached and serve only "
            "as stop-gradient weights")
    per_token = out.per_token_loss.expand_as(lp)  # (B, T)

    # 3. off-policy sequence mask (DeepSeek-V3.2), then the sampler correction, as TRL orders them
    opsm = None
    if off_policy_mask_threshold is not None:
        opsm = off_policy_sequence_mask(a, lp, opsm_ref if opsm_ref is not None else olp, m,
                                        off_policy_mask_threshold)  # (B, 1)
        per_token = per_token * opsm
    if ent_mask is not None:  # the top-entropy tokens alone carry the policy gradient (arXiv 2506.01939)
        per_token = per_token * ent_mask
    if is_w is not None and "is_weights" not in needs:
        per_token = per_token * is_w
    surrogate_tok = per_token.detach()

    # 4. the KL anchor, per token (not weighted by the correction)
    kl_agg = kl_tok = None
    if rlp is not None:
        kl = kl_estimate(lp, rlp, kl_kind)  # (B, T)
        kl_agg = aggregate(kl.detach(), m, v.aggregation, **agg_kw)
        if kl_importance_weighted:
            kl = kl * ratio
        kl_term = kl.detach().expand_as(m)  # (B, T) the term as it enters the loss
        kl_tok = _masked_mean(kl_term, m)  # TRL logs the token mean of the term it adds (ratio-weighted)
        per_token = per_token + beta * kl

    # 5. aggregation: the one place the loss is normalised
    loss = aggregate(per_token, m, v.aggregation, **agg_kw)
    surrogate = aggregate(surrogate_tok, m, v.aggregation, **agg_kw)
    policy_kl = loss.detach()

    # 6. the regularisers: - entropy_coef * H (on the tokens the policy term keeps), + aux_loss_coef * aux
    bonus = None
    if ent is not None and entropy_coef != 0.0:
        m_eff = m if ent_mask is None else m * ent_mask  # (B, T)
        if entropy_aggregation is None:
            bonus = (ent * m_eff).sum() / m_eff.sum().clamp(min=1.0)  # TRL: the token mean, whatever the loss_type
        else:
            bonus = aggregate(ent, m_eff, entropy_aggregation, **agg_kw)
        loss = loss - entropy_coef * bonus
    if aux is not None and aux_loss_coef != 0.0:
        loss = loss + aux_loss_coef * aux.to(loss.dtype)

    diag: dict[str, Any] = {}
    if rollout_correction is not None:
        st = correction_stats(olp, slp, m, rollout_correction, clip_max=rollout_clip_max, clip_min=rollout_clip_min)
        diag = {"is_weight_mean": st["mean_weight"], "is_masked_frac": st["masked_frac"],
                "is_truncated_frac": st["truncated_frac"]}
    if opsm is not None:
        rows = (m.sum(-1) > 0).to(m.dtype)  # (B,)
        diag["off_policy_masked_frac"] = float(((1 - opsm.squeeze(-1)) * rows).sum() / rows.sum().clamp(min=1.0))
    extras, tensors = {}, {}
    for name, t in (out.extras or {}).items():
        extras[f"{v.objective}/{name}_mean"] = _masked_mean(t.detach(), m)
        tensors[f"{v.objective}/{name}"] = t.detach()
    for name, t in (("clipped_low", out.clipped_low), ("clipped_high", out.clipped_high)):
        if t is not None:
            tensors[name] = t.detach()
    if rlp is not None:
        tensors["kl"] = kl_term

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
        params={k: value for k, value in params.items() if value is not None},  # an option left off is unused
        extras=extras,
        policy_kl_loss=policy_kl,
        entropy_mean=None if ent is None else _masked_mean(ent.detach(), m),
        entropy_bonus=None if bonus is None else float(bonus.detach()),
        entropy_kept_frac=None if ent_mask is None else _masked_mean(ent_mask, m),
        aux_loss=None if aux is None else float(aux.detach()),
        tensors=tensors,
        **diag,
    )
