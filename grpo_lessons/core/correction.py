"""Train/inference mismatch: importance weights between the sampler and the trainer (TIS / MIS / OPSM).

Introduced in ``notebooks/11_train_inference_mismatch.ipynb``.

The sampler (vLLM, bf16 kernels) draws completions from a policy ``mu`` that is not exactly the
trainer's ``pi_old``, although both hold the same weights.  A *rollout correction* multiplies each
token's loss by a weight ``rho = pi_old / mu`` (no gradient), truncated or masked so that one rare
token cannot blow the step up:

* **TIS** (truncated importance sampling; Yao et al. 2025, "Your Efficient RL Framework Secretly
  Brings You Off-Policy RL Training"): ``min(rho, C)``.
* **MIS** (masked importance sampling; Liu et al. 2025 "When Speed Kills Stability", IcePop,
  arXiv 2510.18855): ``rho`` where ``C_min <= rho <= C_max``, ``0`` outside.
* **OPSM** (off-policy sequence mask, DeepSeek-V3.2): drop a negative-advantage sequence whose
  mean ``log mu - log pi_theta`` is above a threshold.

TRL 1.16 computes the first two in ``GRPOTrainer._generate_and_score_completions``
(``vllm_importance_sampling_correction``, ``vllm_importance_sampling_mode``,
``vllm_importance_sampling_clip_min/max``) and the third in ``get_off_policy_mask``
(``off_policy_mask_threshold``); the functions below compute the same numbers.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import torch

from ._checks import as_float_tensor, check_2d, check_finite, check_mask, check_same_shape
from .registry import Registry

__all__ = ["rollout_weights", "off_policy_sequence_mask", "CORRECTION_MODES", "RolloutCorrection",
           "register_rollout_correction", "correction_stats"]

CorrectionMode = Literal["token_truncate", "token_mask", "sequence_truncate", "sequence_mask"]
BoundFn = Callable[[torch.Tensor, "float | None", "float | None"], torch.Tensor]


@dataclass(frozen=True)
class RolloutCorrection:
    """An entry of :data:`CORRECTION_MODES`: how ``rho = pi_old / mu`` becomes a loss weight.

    * ``sequence`` — one weight per sequence, ``rho_seq = prod_t rho_t`` ``(B, 1)``, instead of one per token.
    * ``bound`` — ``(rho, clip_min, clip_max) -> weights``: truncate (clamp) or mask (0 outside) ``rho``;
      a ``None`` bound is no bound.
    * ``masks`` — whether ``bound`` sets weights outside ``[clip_min, clip_max]`` to 0 (counted as masked by
      :func:`correction_stats`) rather than clamping them (counted as truncated).
    * ``trl`` — TRL 1.16's ``vllm_importance_sampling_mode`` computing the same weights, or ``None``.
    """

    name: str
    sequence: bool
    bound: BoundFn
    masks: bool
    trl: str | None


#: Rollout corrections by name: token/sequence x truncate/mask (TRL's four ``vllm_importance_sampling_mode``s).
CORRECTION_MODES: Registry[RolloutCorrection] = Registry("rollout correction mode")
_REQUIRED: Any = object()


def register_rollout_correction(name: str, bound: BoundFn, *, sequence: bool, masks: bool,
                                trl: str | None = _REQUIRED, replace: bool = False) -> RolloutCorrection:
    """Add a rollout correction to :data:`CORRECTION_MODES` (see :class:`RolloutCorrection`); ``trl`` is required
    (TRL's ``vllm_importance_sampling_mode`` for it, or ``None``)."""
    if trl is _REQUIRED:
        raise TypeError(f"register_rollout_correction({name!r}): say how TRL computes it: trl=<its "
                        "vllm_importance_sampling_mode> or trl=None")
    if not callable(bound):
        raise TypeError(f"rollout correction {name!r}: bound must be callable, got {type(bound).__name__}")
    return CORRECTION_MODES.add(name, RolloutCorrection(name, bool(sequence), bound, bool(masks), trl), replace=replace)


def _truncate(rho: torch.Tensor, clip_min: float | None, clip_max: float | None) -> torch.Tensor:
    """TIS: ``clamp(rho, clip_min, clip_max)``."""
    if clip_min is None and clip_max is None:
        return rho
    return torch.clamp(rho, min=clip_min, max=clip_max)


def _mask(rho: torch.Tensor, clip_min: float | None, clip_max: float | None) -> torch.Tensor:
    """MIS / IcePop: ``rho`` where ``clip_min <= rho <= clip_max``, else 0 (kept weights keep their value)."""
    lo = -math.inf if clip_min is None else float(clip_min)
    hi = math.inf if clip_max is None else float(clip_max)
    return torch.where((rho < lo) | (rho > hi), torch.zeros_like(rho), rho)


register_rollout_correction("token_truncate", _truncate, sequence=False, masks=False, trl="token_truncate")  # TIS
register_rollout_correction("token_mask", _mask, sequence=False, masks=True, trl="token_mask")  # MIS / IcePop
register_rollout_correction("sequence_truncate", _truncate, sequence=True, masks=False, trl="sequence_truncate")
register_rollout_correction("sequence_mask", _mask, sequence=True, masks=True, trl="sequence_mask")


def _check_clip(clip_min: float | None, clip_max: float | None) -> None:
    for name, value in (("clip_min", clip_min), ("clip_max", clip_max)):
        if value is not None and (not math.isfinite(float(value)) or float(value) < 0):
            raise ValueError(f"{name} must be a finite number >= 0 (a bound on pi_old/mu), got {value!r}")
    if clip_min is not None and clip_max is not None and float(clip_min) >= float(clip_max):
        raise ValueError(f"clip_min ({clip_min}) must be < clip_max ({clip_max})")


@torch.no_grad()
def rollout_weights(
    old_logp,
    sampling_logp,
    mask,
    mode: CorrectionMode,
    clip_max: float | None = 3.0,
    clip_min: float | None = None,
) -> torch.Tensor:
    """Importance weights ``rho = pi_old / mu`` of the sampled tokens, truncated or masked; no gradient.

    Shapes: ``old_logp`` (the trainer's log-probs at generation time), ``sampling_logp`` (the
    sampler's), ``mask`` (0/1) are ``(B, T)``.  Returns ``(B, T)`` for ``token_*`` modes and
    ``(B, 1)`` for ``sequence_*`` modes (broadcast over the row's tokens).

    Exactly TRL 1.16's computation (``vllm_importance_sampling_mode``):
    ``d = nan_to_num((old_logp - sampling_logp) * mask)``, summed over the row for the sequence
    modes (``rho_seq = prod_t rho_t``, no length normalisation), ``rho = exp(d)`` (no safety clamp);
    ``*_truncate``: ``clamp(rho, clip_min, clip_max)`` (TIS, Yao et al. 2025); ``*_mask``: ``rho``
    where ``clip_min <= rho <= clip_max`` else ``0`` — the kept weights keep their value (MIS /
    IcePop, arXiv 2510.18855).  A ``None`` bound is no bound.  Padding gets ``rho = 1``.
    TRL defaults: ``clip_max=3.0``, ``clip_min=None``.  veRL's ``rollout_rs`` *removes* rejected
    tokens from the mask (and the denominator); here, as in TRL, a masked token keeps counting.

    NaN/inf in either input at a completion token is an error: TRL silently turns a NaN sampler
    log-prob (a token vLLM could not score) into ``rho = 1``; to do the same, pass
    ``torch.where(sampling_logp.isnan(), old_logp, sampling_logp)``, or call :func:`grpo_lessons.policy_loss` with
    ``allow_unscored_tokens=True`` (the bridge trainer does), which also reads them as TRL's off-policy mask does.

    Raises ``ValueError`` for a shape mismatch, an unknown ``mode``, ``clip_min >= clip_max`` or a
    negative bound, or NaN/inf of ``old_logp`` where ``mask`` is 1.
    """
    entry = CORRECTION_MODES.lookup(mode)
    _check_clip(clip_min, clip_max)
    olp = as_float_tensor(old_logp, "old_logp")
    check_2d(olp, "old_logp")
    slp = as_float_tensor(sampling_logp, "sampling_logp").to(olp.dtype)
    check_same_shape(olp, "old_logp", sampling_logp=slp)
    m = check_mask(as_float_tensor(mask, "mask")).to(olp.dtype)
    check_same_shape(olp, "old_logp", mask=m)
    keep = m > 0
    check_finite(olp, "old_logp", where=keep)
    check_finite(slp, "sampling_logp", where=keep)

    return entry.bound(_rho(olp, slp, keep, entry.sequence), clip_min, clip_max)


def _rho(olp: torch.Tensor, slp: torch.Tensor, keep: torch.Tensor, sequence: bool) -> torch.Tensor:
    """Unbounded ``rho = pi_old / mu``: ``(B, T)``, or ``(B, 1)`` when ``sequence``; padding gives 1."""
    d = torch.where(keep, olp - slp, torch.zeros_like(olp))  # (B, T) log pi_old - log mu; padding 0
    if sequence:
        d = d.sum(-1, keepdim=True)  # (B, 1) log prod_t rho_t
    return torch.exp(d)  # (B, T) or (B, 1)


@torch.no_grad()
def correction_stats(
    old_logp, sampling_logp, mask, mode: CorrectionMode, clip_max: float | None = 3.0, clip_min: float | None = None
) -> dict[str, float]:
    """What a correction did to a batch: ``mean_weight`` (masked mean of the final weight over tokens),
    ``masked_frac`` (share of tokens, or of sequences for ``sequence_*``, whose weight is set to 0) and
    ``truncated_frac`` (share whose raw ``rho`` lay outside ``[clip_min, clip_max]`` and was clamped)."""
    m = as_float_tensor(mask, "mask")
    entry = CORRECTION_MODES.lookup(mode)
    w = rollout_weights(old_logp, sampling_logp, mask, mode, clip_max=clip_max, clip_min=clip_min)  # checks inputs
    olp = as_float_tensor(old_logp, "old_logp")
    raw = _rho(olp, as_float_tensor(sampling_logp, "sampling_logp").to(olp.dtype), m > 0, entry.sequence)
    lo = -math.inf if clip_min is None else float(clip_min)
    hi = math.inf if clip_max is None else float(clip_max)
    outside = ((raw < lo) | (raw > hi)).to(m.dtype)  # (B, T) or (B, 1)
    if entry.sequence:
        rows = (m.sum(-1) > 0).to(m.dtype)  # (B,) rows with at least one completion token
        share = float((outside.squeeze(-1) * rows).sum() / rows.sum().clamp(min=1.0))
    else:
        share = float((outside * m).sum() / m.sum().clamp(min=1.0))
    mean_w = float((w.expand_as(m) * m).sum() / m.sum().clamp(min=1.0))
    masked = share if entry.masks else 0.0
    truncated = 0.0 if entry.masks else share
    return {"mean_weight": mean_w, "masked_frac": masked, "truncated_frac": truncated}


@torch.no_grad()
def off_policy_sequence_mask(adv, logp, sampling_logp, mask, threshold: float) -> torch.Tensor:
    """DeepSeek-V3.2's off-policy sequence mask, ``(B, 1)``: 1 keeps the sequence, 0 drops it.

    ``adv`` ``(B,)`` (or ``(B, 1)``); ``logp`` (current policy, detached here), ``sampling_logp``
    (the sampler's ``mu``, or ``pi_old`` when there is no separate sampler) and ``mask`` ``(B, T)``.
    Per sequence ``D_i = mean_t (log mu - log pi_theta)`` over its completion tokens (NaN
    sampler log-probs count as 0); keep it if ``A_i >= 0`` or ``D_i <= threshold``.  Only
    negative-advantage sequences that drifted far are dropped: pushing down a sequence the current
    policy no longer produces is the update most likely to be harmful.  Recomputed at every
    forward (``logp`` changes).  TRL ``off_policy_mask_threshold`` (``GRPOTrainer.get_off_policy_mask``).
    """
    lp = as_float_tensor(logp, "logp").detach()
    check_2d(lp, "logp")
    slp = as_float_tensor(sampling_logp, "sampling_logp").to(lp.dtype)
    m = check_mask(as_float_tensor(mask, "mask")).to(lp.dtype)
    check_same_shape(lp, "logp", sampling_logp=slp, mask=m)
    a = as_float_tensor(adv, "adv").reshape(-1, 1).to(lp.dtype)  # (B, 1)
    if a.shape[0] != lp.shape[0]:
        raise ValueError(f"adv has {a.shape[0]} rows but logp has {lp.shape[0]}")
    if not math.isfinite(float(threshold)):
        raise ValueError(f"threshold must be a finite number, got {threshold!r}")
    keep = m > 0
    d = torch.nan_to_num(torch.where(keep, slp - lp, torch.zeros_like(lp)), nan=0.0)  # (B, T)
    mean_d = d.sum(-1, keepdim=True) / m.sum(-1, keepdim=True).clamp(min=1.0)  # (B, 1)
    return ((a >= 0) | (mean_d <= threshold)).to(lp.dtype)  # (B, 1)
