"""Reward shaping and sample filtering around the loss: DAPO's overlong handling and dynamic sampling,
the entropy bonus and ScaleRL's retirement of solved prompts.

Introduced in ``notebooks/07_dapo.ipynb``.  Yu et al. 2025, DAPO, arXiv 2503.14476, Sec. 3.2-3.4.
The entropy bonus (``notebooks/17_diversity.ipynb``) and ``solved_groups`` (ScaleRL's
no-positive-resampling, ``notebooks/14_cispo_scalerl.ipynb``) are used by the trainer
(``TrainConfig(entropy_bonus=..., entropy_in=...)``, ``TrainConfig(retire_solved_at=...)``).
"""

from __future__ import annotations

import torch

from ._checks import as_float_tensor, check_finite

__all__ = ["soft_overlong_penalty", "truncation_mask", "informative_groups", "token_entropy",
           "completion_entropy", "solved_groups"]


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

    A reward matrix ``(N, K)`` (GDPO, which normalises each reward function apart) gives True where any
    column varies within the group.

    Groups with accuracy 0 or 1 (more generally, zero reward variance) give zero advantage and no
    gradient; DAPO drops them and samples more prompts until the batch is full (drop and refill).
    veRL recipe ``filter_groups``.  NaN marks an unscorable completion (every reward function returned
    ``None``): it is ignored, and a group with fewer than two scored completions is not informative.
    """
    r = as_float_tensor(rewards, "rewards")
    if bool(torch.isinf(r).any()):
        raise ValueError("rewards contain inf")
    if r.dim() == 2:
        return torch.stack([informative_groups(r[:, k], group_size) for k in range(r.shape[1])]).any(dim=0)
    if r.dim() != 1 or group_size < 1 or r.numel() % group_size:
        raise ValueError(f"rewards must be (N,) with N a multiple of group_size={group_size}, got {tuple(r.shape)}")
    g = r.view(-1, group_size)
    valid = ~torch.isnan(g)  # (P, G)
    hi = torch.where(valid, g, torch.full_like(g, -float("inf"))).amax(dim=1)
    lo = torch.where(valid, g, torch.full_like(g, float("inf"))).amin(dim=1)
    return (valid.sum(dim=1) >= 2) & (hi != lo)


def token_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of each position's next-token distribution, ``(B, T, V) -> (B, T)``: ``-sum_v p_v log p_v``.

    ``logits`` are the *tempered* logits ``z / T`` of the policy (what :func:`grpo_lessons.training.rollout.rollout_logps`
    returns with ``return_logits=True``), so this is the entropy of the distribution the tokens are sampled
    from, as TRL's ``entropy_from_logits`` after its division by the temperature and veRL's
    ``entropy_from_logits``.  Gradients flow through ``logits``.  ``TrainConfig(entropy_in="loss")``; notebook 17.
    """
    lg = logits.float()
    logp = torch.log_softmax(lg, dim=-1)  # (B, T, V)
    return -(logp.exp() * logp).sum(-1)  # (B, T)


def completion_entropy(entropy, mask) -> torch.Tensor:
    """Mean per-token entropy of each completion, ``(N, T), (N, T) -> (N,)`` (0 for an empty completion).

    The entropy bonus "in the reward": ``r_i += alpha * H_i`` with ``H_i`` this value of the *sampling*
    distribution (``Rollout.sampling_entropy``: ``softmax(logits / T)`` at the sampling temperature, every
    completion token including the EOS), computed before the advantages, so it moves the policy only through
    them.  With a low-precision sampler copy (``sampler_dtype``) it is that copy's distribution.
    ``TrainConfig(entropy_in="reward")``; notebook 17.  Raises ``ValueError`` for mismatched shapes.
    """
    h = as_float_tensor(entropy, "entropy")
    m = as_float_tensor(mask, "mask")
    if h.shape != m.shape or h.dim() != 2:
        raise ValueError(f"entropy and mask must both be (N, T); got {tuple(h.shape)} and {tuple(m.shape)}")
    return (h * m).sum(-1) / m.sum(-1).clamp(min=1.0)  # (N,)


def solved_groups(correct, group_size: int, threshold: float) -> torch.Tensor:
    """ScaleRL's no-positive-resampling test: ``(N,) -> (N // G,)`` bool, True where a group's pass rate >= threshold.

    ``correct`` ``(N,)``: 1 where a completion is right (the task's correctness reward is 1), 0 otherwise; NaN
    (unscorable) counts as not right.  Khatri et al. 2025 (arXiv 2510.13786, Sec. 3.2) retire a prompt for good
    once its pass rate reaches 0.9: it has little left to teach and would only add zero-advantage groups.
    Neither TRL nor veRL has it; ``TrainConfig(retire_solved_at=0.9)``, notebook 14.  Raises ``ValueError``
    for a threshold outside ``(0, 1]`` or bad shapes.
    """
    c = as_float_tensor(correct, "correct")
    if not 0 < float(threshold) <= 1:
        raise ValueError(f"threshold must be a pass rate in (0, 1], got {threshold!r}")
    if c.dim() != 1 or group_size < 1 or c.numel() % group_size:
        raise ValueError(f"correct must be (N,) with N a multiple of group_size={group_size}, got {tuple(c.shape)}")
    right = torch.nan_to_num(c, nan=0.0) >= 1.0 - 1e-9  # (N,)
    return right.view(-1, group_size).float().mean(dim=1) >= float(threshold) - 1e-9  # (P,)
