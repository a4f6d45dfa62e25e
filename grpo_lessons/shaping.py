"""Reward shaping and sample filtering around the loss: DAPO's overlong handling and dynamic sampling.

Introduced in ``notebooks/07_dapo.ipynb``.  Yu et al. 2025, DAPO, arXiv 2503.14476, Sec. 3.2-3.4.
"""

from __future__ import annotations

import torch

from ._checks import as_float_tensor, check_finite

__all__ = ["soft_overlong_penalty", "truncation_mask", "informative_groups"]


def soft_overlong_penalty(lengths, max_len: int, cache_len: int, factor: float = 1.0) -> torch.Tensor:
    """DAPO Eq. (13), added to the reward; ``(N,) -> (N,)``, values in ``[-factor, 0]``.

    ``0`` if ``|y| <= max_len - cache_len``; ``((max_len - cache_len) - |y|) / cache_len`` inside the
    buffer (linear from 0 to -1 at ``|y| = max_len``); ``-1`` beyond ``max_len``; times ``factor``.
    Paper: ``max_len = 20480``, ``cache_len = 4096``.  veRL: dapo reward manager ``overlong_buffer``
    (``len``, ``penalty_factor``).  The chapter's ``(|o| - L_cache)/(L_max - L_cache)`` uses ``L_cache`` as a
    length threshold instead of a buffer size and is not the paper's formula.
    """
    n = as_float_tensor(lengths, "lengths")
    check_finite(n, "lengths")
    if cache_len <= 0 or cache_len > max_len:
        raise ValueError(f"need 0 < cache_len <= max_len, got cache_len={cache_len}, max_len={max_len}")
    if bool((n < 0).any()):
        raise ValueError("lengths must be >= 0")
    start = max_len - cache_len
    inside = (start - n) / cache_len  # 0 at the buffer's start, -1 at max_len
    pen = torch.where(n <= start, torch.zeros_like(n), torch.where(n <= max_len, inside, -torch.ones_like(n)))
    return factor * pen


def truncation_mask(truncated) -> torch.Tensor:
    """DAPO overlong filtering: ``1.0`` for completions that ended with EOS, ``0.0`` for truncated ones; ``(N,)``.

    Multiply the completion mask by it (``mask * truncation_mask(t)[:, None]``) so truncated completions
    contribute no loss.  TRL ``mask_truncated_completions=True``.
    """
    t = torch.as_tensor(truncated)
    return (~t.bool()).to(torch.float32)


def informative_groups(rewards, group_size: int) -> torch.Tensor:
    """DAPO dynamic sampling's test: ``(N,) -> (N // G,)`` bool, True where a group's rewards are not all equal.

    Groups with accuracy 0 or 1 (more generally, zero reward variance) give zero advantage and no
    gradient; DAPO drops them and samples more prompts until the batch is full (drop and refill).
    veRL recipe ``filter_groups``.
    """
    r = as_float_tensor(rewards, "rewards")
    check_finite(r, "rewards")
    if r.dim() != 1 or group_size < 1 or r.numel() % group_size:
        raise ValueError(f"rewards must be (N,) with N a multiple of group_size={group_size}, got {tuple(r.shape)}")
    g = r.view(-1, group_size)
    return g.amax(dim=1) != g.amin(dim=1)
