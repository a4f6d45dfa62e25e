"""Group-relative advantages: the critic-free baseline of GRPO.

Introduced in ``notebooks/02_group_advantages.ipynb``.

Rewards arrive flat, ``(N,)``, with the ``G = group_size`` completions of one prompt
contiguous: ``[p0_c0, p0_c1, ..., p0_c{G-1}, p1_c0, ...]`` (the order TRL uses).
"""

from __future__ import annotations

from typing import Literal

import torch

from ._checks import as_float_tensor, check_choice, check_finite

__all__ = ["group_advantages", "SCALES", "zero_gradient_probability"]

Scale = Literal["group", "none", "batch", "batch_centered"]
SCALES: tuple[str, ...] = ("group", "none", "batch", "batch_centered")


def _std(x: torch.Tensor, dim: int | None, unbiased: bool) -> torch.Tensor:
    if dim is None:
        return x.std(correction=1 if unbiased else 0)
    return x.std(dim=dim, keepdim=True, correction=1 if unbiased else 0)


def group_advantages(
    rewards,
    group_size: int,
    scale: Scale = "group",
    eps: float = 1e-4,
    unbiased_std: bool = True,
) -> torch.Tensor:
    """Advantages ``(N,) -> (N,)`` from rewards of contiguous groups of ``group_size``.

    * ``scale="group"`` — GRPO (Shao et al. 2024, arXiv 2402.03300, Sec. 4.1.2):
      ``A_i = (r_i - mean_g) / (std_g + eps)``.  TRL ``scale_rewards="group"``; veRL ``grpo``.
    * ``scale="none"`` — Dr. GRPO (Liu et al. 2025, arXiv 2503.20783): ``A_i = r_i - mean_g``.
      TRL ``scale_rewards="none"``; veRL ``norm_adv_by_std_in_grpo=False``.
    * ``scale="batch"`` — TRL ``scale_rewards="batch"``: group mean, then the std of the **raw**
      rewards over the batch, ``A_i = (r_i - mean_g) / (std(r) + eps)``.
    * ``scale="batch_centered"`` — ScaleRL's batch-level advantage normalisation (Khatri et al. 2025,
      arXiv 2510.13786, Sec. 3.2): group mean, then the std of the **centred** advantages over the
      batch, ``A_i = (r_i - mean_g) / (std({r_j - mean_g(j)}) + eps)``.  The two differ whenever
      group means differ: rewards ``[1,0,0,0 | 1,1,1,1 | 0,1,1,0]`` give ``A_0 = 1.45623`` under
      ``"batch"`` (std 0.514929) and ``1.87988`` under ``"batch_centered"`` (std 0.398862).
      TRL has no setting for it; :class:`grpo_lessons.trl_bridge.GRPOLessonsTrainer` rescales
      TRL's ``scale_rewards="none"`` advantages.

    Std convention: Bessel-corrected (``n - 1``) by default, plus ``eps = 1e-4`` outside the
    square root — exactly TRL's.  veRL uses the same unbiased std with ``eps = 1e-6``.
    A group whose rewards are all equal gets advantages of exactly ``0.0`` (no gradient),
    whatever the rounding of its mean.

    Raises ``ValueError`` if ``N`` is not a multiple of ``group_size``, if any reward is NaN/inf
    (the positions are named), or if a standard deviation is needed from fewer than 2 values.
    """
    r = as_float_tensor(rewards, "rewards")
    if r.dim() != 1:
        raise ValueError(f"rewards must be 1-D (N,), got shape {tuple(r.shape)}")
    check_choice(scale, SCALES, "scale")
    if not isinstance(group_size, int) or isinstance(group_size, bool) or group_size < 1:
        raise ValueError(f"group_size must be a positive integer, got {group_size!r}")
    n = r.numel()
    if n == 0:
        raise ValueError("rewards is empty: there is no group to compute advantages for")
    if n % group_size != 0:
        raise ValueError(
            f"{n} rewards cannot be split into groups of {group_size}: N must be a multiple of group_size"
        )
    check_finite(r, "rewards")
    if scale == "group" and group_size < 2:
        raise ValueError("scale='group' needs group_size >= 2: the std of a single reward is undefined")
    if scale in ("batch", "batch_centered") and n < 2:
        raise ValueError("scale='batch' needs at least 2 rewards in the batch for a std")

    g = r.view(-1, group_size)  # (num_prompts, G)
    centred = g - g.mean(dim=1, keepdim=True)  # (num_prompts, G)
    constant = g.amax(dim=1, keepdim=True) == g.amin(dim=1, keepdim=True)  # (num_prompts, 1)
    centred = torch.where(constant, torch.zeros_like(centred), centred)  # exact zeros, not 1e-9 noise

    if scale == "group":
        adv = centred / (_std(g, dim=1, unbiased=unbiased_std) + eps)
    elif scale == "batch":
        adv = centred / (_std(r, dim=None, unbiased=unbiased_std) + eps)
    elif scale == "batch_centered":
        adv = centred / (_std(centred.reshape(-1), dim=None, unbiased=unbiased_std) + eps)
    else:
        adv = centred
    return adv.reshape(-1)  # (N,)


def zero_gradient_probability(p: float, group_size: int) -> float:
    """Chance that a group of ``G`` Bernoulli(p) rewards is all-equal: ``p**G + (1-p)**G``."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"pass rate p must be in [0, 1], got {p}")
    if group_size < 1:
        raise ValueError(f"group_size must be >= 1, got {group_size}")
    return p**group_size + (1.0 - p) ** group_size
