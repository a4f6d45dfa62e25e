"""Per-token surrogate objectives, written as losses to *minimise* (the sign is already flipped).

Introduced in ``notebooks/03_clipped_surrogate_and_kl.ipynb`` (clip) and
``notebooks/10_sapo.ipynb`` (soft gate).

Each objective takes ``ratio`` (``(B, T)`` or ``(B, 1)``), ``adv`` (``(B, 1)``) and its own
hyper-parameters, and returns the per-token loss together with boolean "clipped" masks used
for diagnostics (``None`` where the notion does not apply).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch

__all__ = ["ObjectiveOut", "clipped_surrogate", "sapo_surrogate", "OBJECTIVES"]


class ObjectiveOut(NamedTuple):
    per_token_loss: torch.Tensor  # broadcastable to (B, T)
    clipped_low: torch.Tensor | None  # ratio below 1 - eps_low with A < 0: the min picks the flat branch
    clipped_high: torch.Tensor | None  # ratio above 1 + eps_high with A > 0


def clipped_surrogate(
    ratio: torch.Tensor, adv: torch.Tensor, *, epsilon: float, epsilon_high: float | None = None
) -> ObjectiveOut:
    """PPO/GRPO clip: ``-min(r A, clip(r, 1 - eps_low, 1 + eps_high) A)``.

    Shao et al. 2024 Eq. (3) with ``eps_low = eps_high = epsilon``; DAPO's clip-higher
    (Yu et al. 2025, arXiv 2503.14476, Eq. (10)) with ``epsilon_high > epsilon``.  The min makes
    the upper bound bind only for ``A > 0`` and the lower bound only for ``A < 0``.
    TRL ``epsilon`` / ``epsilon_high``; veRL ``clip_ratio_low`` / ``clip_ratio_high``.
    """
    eps_high = epsilon if epsilon_high is None else epsilon_high
    loss1 = -adv * ratio  # unclipped branch
    loss2 = -adv * torch.clamp(ratio, 1.0 - epsilon, 1.0 + eps_high)  # clipped branch
    per_token = torch.maximum(loss1, loss2)  # max of losses == -min of objectives
    clipped_low = (ratio < 1.0 - epsilon) & (adv < 0)
    clipped_high = (ratio > 1.0 + eps_high) & (adv > 0)
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


# name -> (function, the hyper-parameters it takes); later objectives are added here.
OBJECTIVES: dict[str, tuple[Callable[..., ObjectiveOut], tuple[str, ...]]] = {
    "clip": (clipped_surrogate, ("epsilon", "epsilon_high")),
    "sapo": (sapo_surrogate, ("tau_pos", "tau_neg")),
}
