"""Importance ratios between the current policy and the one that sampled the completions.

Introduced in ``notebooks/03_clipped_surrogate_and_kl.ipynb`` (token) and
``notebooks/08_gspo.ipynb`` (sequence, sequence-token).

Every function returns a *log* ratio; shapes are ``(B, T)`` for token-level weights and
``(B, 1)`` for sequence-level ones (they broadcast over the tokens of the row).  Each is an entry of
:data:`RATIO_LEVELS`; :func:`register_ratio_level` adds one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from .registry import Registry

__all__ = ["token_log_ratio", "sequence_log_ratio", "sequence_token_log_ratio", "RATIO_LEVELS", "RatioLevel",
           "register_ratio_level"]

LogRatioFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


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


@dataclass(frozen=True)
class RatioLevel:
    """An entry of :data:`RATIO_LEVELS`: ``fn(logp, old_logp, mask) -> log ratio`` (``(B, T)`` or ``(B, 1)``).

    ``trl``: TRL 1.16's ``importance_sampling_level`` that computes the same ratio, or ``None`` when TRL has
    none (the TRL bridge tells TRL ``"token"`` and computes the ratio in its own loss).  Calling the entry calls
    ``fn``.
    """

    name: str
    fn: LogRatioFn
    trl: str | None

    def __call__(self, logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.fn(logp, old_logp, mask)


#: Importance-ratio levels by name (a variant's ``ratio_level``).
RATIO_LEVELS: Registry[RatioLevel] = Registry("ratio level")
_REQUIRED: Any = object()


def register_ratio_level(name: str, fn: LogRatioFn, *, trl: str | None = _REQUIRED, replace: bool = False) -> RatioLevel:
    """Add a ratio level to :data:`RATIO_LEVELS`; ``trl`` (required) is TRL's ``importance_sampling_level`` for it
    or ``None``."""
    if trl is _REQUIRED:
        raise TypeError(f"register_ratio_level({name!r}): say how TRL computes it: trl='token'/'sequence' (its "
                        "importance_sampling_level) or trl=None (TRL cannot; the bridge's loss does)")
    if not callable(fn):
        raise TypeError(f"ratio level {name!r}: fn must be callable, got {type(fn).__name__}")
    return RATIO_LEVELS.add(name, RatioLevel(name, fn, trl), replace=replace)


register_ratio_level("token", token_log_ratio, trl="token")
register_ratio_level("sequence", sequence_log_ratio, trl="sequence")
register_ratio_level("sequence_token", sequence_token_log_ratio, trl=None)  # GSPO-token: not in TRL 1.16
