"""Importance ratios between the current policy and the one that sampled the completions.

Introduced in ``notebooks/03_clipped_surrogate_and_kl.ipynb`` (token) and
``notebooks/08_gspo.ipynb`` (sequence, sequence-token).

Every function returns a *log* ratio; shapes are ``(B, T)`` for token-level weights and
``(B, 1)`` for sequence-level ones (they broadcast over the tokens of the row).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

__all__ = ["token_log_ratio", "sequence_log_ratio", "sequence_token_log_ratio", "RATIO_LEVELS"]


def token_log_ratio(logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``log r_{i,t} = log pi_theta(o_{i,t}) - log pi_old(o_{i,t})``; ``(B, T)``.  TRL ``importance_sampling_level="token"``."""
    return logp - old_logp  # (B, T)


def sequence_log_ratio(logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """GSPO's ``log s_i = (1/|o_i|) sum_t log r_{i,t}`` (geometric-mean ratio); ``(B, 1)``.

    Zheng et al. 2025, arXiv 2507.18071, Eq. (7).  TRL ``importance_sampling_level="sequence"``;
    veRL ``policy_loss.loss_mode="gspo"``.  A row with an empty mask gets ``log s = 0``.
    """
    lengths = mask.sum(-1).clamp(min=1.0)  # (B,)
    return (((logp - old_logp) * mask).sum(-1) / lengths).unsqueeze(-1)  # (B, 1)


def sequence_token_log_ratio(logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """GSPO-token: ``s_{i,t} = sg[s_i] * pi_theta(o_{i,t}) / sg[pi_theta(o_{i,t})]``; ``(B, T)``.

    Same value as ``s_i`` on every token, but each token's gradient is its own ``grad log pi``
    (arXiv 2507.18071, Eq. (13)); with an advantage constant along the sequence it reproduces
    GSPO's value and gradient.
    """
    seq = sequence_log_ratio(logp, old_logp, mask).detach()  # (B, 1)
    return seq + logp - logp.detach()  # (B, T)


RATIO_LEVELS: dict[str, Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "token": token_log_ratio,
    "sequence": sequence_log_ratio,
    "sequence_token": sequence_token_log_ratio,
}
