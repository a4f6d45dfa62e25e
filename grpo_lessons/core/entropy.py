"""Entropy in the loss: the top-entropy token mask, the entropy bonus and its adaptive coefficient.

The entropy bonus in the loss is introduced in ``notebooks/17_diversity.ipynb``.  :func:`grpo_lessons.policy_loss`
takes the mask and the bonus as options (``top_entropy_quantile`` / ``entropy_mask``, ``entropy`` with
``entropy_coef``); the adaptive coefficient is state a trainer keeps from one optimizer step to the next
(:func:`adaptive_entropy_coef`, :func:`gated_entropy_coef`).  The per-token entropy itself is :func:`grpo_lessons.core.shaping.token_entropy` of the tempered logits.
"""

from __future__ import annotations

import math

import torch

from ._checks import as_float_tensor, check_2d, check_finite, check_mask, check_same_shape

__all__ = ["high_entropy_mask", "entropy_pool", "adaptive_entropy_coef", "gated_entropy_coef"]


def entropy_pool(entropy: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The completion tokens' entropies, ``(B, T), (B, T) -> (n,)``, detached, in float32 or wider: what the
    top-entropy threshold is a quantile of (a trainer on several processes gathers every process's pool)."""
    work = torch.promote_types(entropy.dtype, torch.float32)  # bf16 entropies are compared in fp32, as TRL does
    return entropy.detach()[mask.bool()].to(work)  # (n,)


def high_entropy_mask(entropy, mask, top_quantile: float, *, pool=None) -> torch.Tensor:
    """The top-entropy token mask ``(B, T)`` of 0/1: the completion tokens whose entropy is in the top ``rho``.

    Wang et al. 2025, "Beyond the 80/20 Rule: High-Entropy Minority Tokens Drive Effective Reinforcement Learning
    for LLM Reasoning", arXiv 2506.01939: the policy gradient is kept only on the ``rho = top_quantile`` share of
    tokens with the highest entropy ("forking tokens"; the paper's ``rho = 0.2``), the others get none.
    A token is kept when ``H_t >= tau`` with ``tau`` the ``1 - rho`` quantile (linear interpolation, as
    ``torch.quantile``) of ``pool``: by default this batch's completion tokens (:func:`entropy_pool`); a trainer
    that splits one batch over processes passes the gathered pool so every process uses the same ``tau``.
    ``rho = 1`` keeps every completion token, ``rho = 0`` the highest-entropy one(s).  Padding is never kept; an
    empty pool keeps nothing.  TRL ``GRPOConfig(top_entropy_quantile=rho)`` (``GRPOTrainer.get_high_entropy_mask``).
    """
    h = as_float_tensor(entropy, "entropy").detach()
    check_2d(h, "entropy")
    m = check_mask(as_float_tensor(mask, "mask"))
    check_same_shape(h, "entropy", mask=m)
    if isinstance(top_quantile, bool) or not 0.0 <= float(top_quantile) <= 1.0:
        raise ValueError(f"top_quantile must be in [0, 1] (the share of tokens kept), got {top_quantile!r}")
    check_finite(h, "entropy", where=m > 0)
    work = torch.promote_types(h.dtype, torch.float32)  # compare in at least fp32 (a bf16 h is exact in it)
    p = entropy_pool(h, m) if pool is None else as_float_tensor(pool, "pool").detach().flatten()  # (n,)
    check_finite(p, "pool")
    if p.numel() == 0:
        return torch.zeros_like(h)
    p = p.to(torch.promote_types(p.dtype, work))
    tau = torch.quantile(p, 1.0 - float(top_quantile))  # the (1 - rho) quantile
    keep = (h.to(tau.dtype) * m.to(tau.dtype) >= tau) & (m > 0)  # (B, T)
    return keep.to(h.dtype)


def gated_entropy_coef(coef: float, last_entropy: float, target: float) -> float:
    """The coefficient an adaptive entropy bonus applies this step: ``coef`` when the last measured entropy is at
    or below ``target``, else 0 (Skywork-OR1, He et al. 2025, arXiv 2505.22312: the entropy loss is
    switched on only once entropy has fallen to the target).  TRL ``use_adaptive_entropy``; ``last_entropy`` is
    ``inf`` before the first measurement, so the first step applies none."""
    return float(coef) if float(last_entropy) <= float(target) else 0.0


def adaptive_entropy_coef(coef: float, entropy: float, *, target: float, step: float, coef_min: float = 0.0,
                          coef_max: float = 1.0) -> float:
    """The next step's adaptive entropy coefficient: ``coef + step`` (capped at ``coef_max``) when the measured
    mean token ``entropy`` is at or below ``target``, else ``coef - step`` (floored at ``coef_min``).

    Skywork-OR1 (He et al. 2025, arXiv 2505.22312): ``c_{k+1} = c_k + Delta`` when ``e_k < tgt``,
    ``c_k - Delta`` when ``e_k > tgt``; TRL 1.16 (``entropy_target``, ``entropy_coef_delta``, ``entropy_coef_min/max``)
    raises it also when ``e_k == tgt``, as here.  ``entropy`` is the token-weighted mean over a whole optimizer step
    (every micro-batch and process), measured on the tokens the bonus acts on.
    """
    for name, value in (("entropy", entropy), ("target", target), ("step", step), ("coef_min", coef_min),
                        ("coef_max", coef_max), ("coef", coef)):
        if not math.isfinite(float(value)):
            raise ValueError(f"adaptive entropy: {name} must be finite, got {value!r}")
    if step < 0 or coef_min > coef_max:
        raise ValueError(f"adaptive entropy: need step >= 0 and coef_min <= coef_max, got step={step}, "
                         f"coef_min={coef_min}, coef_max={coef_max}")
    if float(entropy) <= float(target):
        return min(float(coef) + float(step), float(coef_max))
    return max(float(coef) - float(step), float(coef_min))
