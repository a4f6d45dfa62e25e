"""``policy_loss``: the GRPO pipeline from per-token log-probs to one scalar, for every variant.

Introduced in ``notebooks/03_clipped_surrogate_and_kl.ipynb``.  The pieces live in
:mod:`~grpo_lessons.core.ratios`, :mod:`~grpo_lessons.core.objectives`, :mod:`~grpo_lessons.core.aggregation`
and :mod:`~grpo_lessons.core.kl`; :mod:`~grpo_lessons.core.variants` says which pieces a variant uses.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from ._checks import as_float_tensor, check_2d, check_finite, check_mask, check_same_shape
from .aggregation import aggregate
from .correction import CORRECTION_MODES, correction_stats, off_policy_sequence_mask, rollout_weights
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
    params: dict[str, Any]  # the hyper-parameters actually used
    # rollout correction (TIS/MIS) and off-policy sequence mask; None when not used
    is_weight_mean: float | None = None  # masked token mean of the correction weight pi_old/mu after truncate/mask
    is_masked_frac: float | None = None  # share of tokens (token modes) or sequences (sequence modes) set to 0
    is_truncated_frac: float | None = None  # share clamped to [clip_min, clip_max] (truncate modes)
    off_policy_masked_frac: float | None = None  # share of sequences the off-policy sequence mask drops
    extras: dict[str, float] = field(default_factory=dict)  # objective diagnostics, e.g. "vespo/phi_mean"

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
    sampling_logp=None,
    rollout_correction: str | None = None,
    rollout_clip_max: float | None = 3.0,
    rollout_clip_min: float | None = None,
    off_policy_mask_threshold: float | None = None,
    divergence=None,
    group_size: int | None = None,
    prompt_weights=None,
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
    as TRL's fallback does); DPPO takes ``kind``, ``delta_low``, ``delta_high``, ``ratio_cap`` and VESPO
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
      ``sequence_mask``, with ``rollout_clip_max`` / ``rollout_clip_min``): the weight of
      :func:`grpo_lessons.core.correction.rollout_weights` multiplies the per-token loss after the
      objective and before ``beta * KL`` and aggregation (masked tokens stay in the denominator; the
      KL term is not weighted).  VESPO folds the weights into its sequence ratio instead, as TRL
      does.  TRL ``vllm_importance_sampling_correction=True`` + ``vllm_importance_sampling_mode``.
    * ``off_policy_mask_threshold``: DeepSeek-V3.2's sequence mask
      (:func:`grpo_lessons.core.correction.off_policy_sequence_mask`) multiplies the per-token loss
      right after the objective.  TRL ``off_policy_mask_threshold``.
    * ``divergence`` ``(B, T)``: the top-K divergence DPPO's ``dppo_topk_*`` variants need
      (:func:`grpo_lessons.core.divergence.topk_divergence`).
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

    slp = None
    if sampling_logp is not None:
        slp = as_float_tensor(sampling_logp, "sampling_logp").to(lp.dtype)
        check_same_shape(lp, "logp", sampling_logp=slp)
        check_finite(slp, "sampling_logp", where=keep)
        slp = torch.where(keep, slp, torch.zeros_like(slp))
    if rollout_correction is not None:
        CORRECTION_MODES.lookup(rollout_correction, "rollout_correction")
        if slp is None:
            raise ValueError("rollout_correction needs sampling_logp, the sampler's log-probs of the same tokens "
                             "(without a separate sampler there is nothing to correct)")
    div = None
    if divergence is not None:
        div = as_float_tensor(divergence, "divergence").to(lp.dtype)
        check_same_shape(lp, "logp", divergence=div)
        check_finite(div, "divergence", where=keep)
        div = torch.where(keep, div, torch.zeros_like(div))

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
              "anchor_logp": slp if slp is not None else olp, "divergence": div}
    out = fn(ratio, adv_col, **{k: inputs[k] for k in needs}, **params)
    per_token = out.per_token_loss.expand_as(lp)  # (B, T)

    # 3. off-policy sequence mask (DeepSeek-V3.2), then the sampler correction, as TRL orders them
    opsm = None
    if off_policy_mask_threshold is not None:
        opsm = off_policy_sequence_mask(a, lp, slp if slp is not None else olp, m, off_policy_mask_threshold)  # (B, 1)
        per_token = per_token * opsm
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
        kl_tok = _masked_mean(kl.detach(), m)  # TRL logs the token mean of the term it adds (ratio-weighted)
        per_token = per_token + beta * kl

    # 5. aggregation: the one place the loss is normalised
    loss = aggregate(per_token, m, v.aggregation, **agg_kw)
    surrogate = aggregate(surrogate_tok, m, v.aggregation, **agg_kw)

    diag: dict[str, Any] = {}
    if rollout_correction is not None:
        st = correction_stats(olp, slp, m, rollout_correction, clip_max=rollout_clip_max, clip_min=rollout_clip_min)
        diag = {"is_weight_mean": st["mean_weight"], "is_masked_frac": st["masked_frac"],
                "is_truncated_frac": st["truncated_frac"]}
    if opsm is not None:
        rows = (m.sum(-1) > 0).to(m.dtype)  # (B,)
        diag["off_policy_masked_frac"] = float(((1 - opsm.squeeze(-1)) * rows).sum() / rows.sum().clamp(min=1.0))
    extras = {}
    for name, t in (out.extras or {}).items():
        extras[f"{v.objective}/{name}_mean"] = _masked_mean(t.detach(), m)

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
        extras=extras,
        **diag,
    )
