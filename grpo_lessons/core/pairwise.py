"""2-GRPO written as what it is: a pairwise contrastive (DPO-like) update on (winner, loser) pairs.

Introduced in ``notebooks/09_two_grpo.ipynb``.  Wu et al. 2025, *It Takes Two: Your GRPO Is Secretly
DPO*, arXiv 2510.00977.

With ``G = 2`` a group is one pair.  If the two rewards differ by ``d > 0`` the group-normalised
advantages are ``+c`` for the higher-reward completion ``o+`` and ``-c`` for the other ``o-``, with

    c = (d / 2) / (std + eps),   std = d / sqrt(2)  (Bessel, TRL)   or   d / 2  (population, the paper)

so ``c = 0.7071`` (TRL) or ``1`` (the paper) *whatever the reward gap* — the pair's reward scale is
normalised away.  Equal rewards give ``c = 0`` and no gradient.  Because ``min(r A, clip(r) A)`` is
``c * min(r, 1 + eps_high)`` for ``A = +c`` and ``-c * max(r, 1 - eps_low)`` for ``A = -c``, the GRPO
loss of one pair under GRPO's per-sequence, per-token mean is

    L_pair = -(c / 2) * [ mean_t min(r+_t, 1 + eps_high)  -  mean_t max(r-_t, 1 - eps_low) ]

— raise the winner, lower the loser, each until its own clip bound: a contrastive objective.  On
policy its gradient is ``-(c/2) (mean_t grad log pi(o+_t) - mean_t grad log pi(o-_t))``.  DPO's is
``-beta sigmoid(-beta margin) (sum_t grad log pi(o+_t) - sum_t grad log pi(o-_t))``: *sums* over tokens.
The two point the same way only when ``|o+| = |o-|`` (then the means are the sums / |o|, one positive
factor); for unequal lengths 2-GRPO weighs each token of the shorter completion more, and the directions
differ (``tests`` measure the angle: exactly 0 for equal lengths, not 0 for unequal ones).  So 2-GRPO is
"DPO-like" -- winner up, loser down, a constant weight where DPO has ``beta sigmoid(-beta margin)`` -- and
equals DPO's direction with length-normalised log-likelihoods (as in SimPO), not DPO's own.

:func:`pairwise_grpo_loss` computes this form; the test suite checks that it equals
``policy_loss(..., variant="2-grpo")`` with ``group_advantages(rewards, 2)`` in value and gradient.
:func:`chapter_pair_loss` is the chapter's ``-log sigmoid(beta * (...))`` approximation, for comparison.
:func:`two_grpo_budget` is the paper's budget arithmetic (same rollouts per batch, 8x the prompts).
DPO itself -- ``pi_ref`` in the place of ``pi_old``, temperature beta_DPO -- is :func:`grpo_lessons.core.dpo.dpo_loss`
(re-exported here), checked against TRL's ``DPOTrainer``; :func:`grpo_lessons.core.dpo.diverse_dpo_pairs` builds its
pairs from GRPO groups.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F

from ._checks import as_float_tensor, check_2d, check_finite, check_mask, check_same_shape
from .dpo import diverse_dpo_pairs, dpo_loss

__all__ = [
    "PairwiseLoss", "pair_advantage", "split_pairs", "pairwise_grpo_loss", "chapter_pair_loss",
    "two_grpo_budget", "informative_pair_probability", "dpo_loss", "diverse_dpo_pairs",
]


class PairwiseLoss(NamedTuple):
    """Result of :func:`pairwise_grpo_loss`; per-pair tensors are ``(P,)``."""

    loss: torch.Tensor  # scalar, with grad: mean over pairs of L_pair
    c: torch.Tensor  # (P,) the advantage magnitude of each pair (0 for a tie)
    winner: torch.Tensor  # (P,) row index of o+ in the (2P, T) batch
    loser: torch.Tensor  # (P,) row index of o-
    winner_term: torch.Tensor  # (P,) mean_t min(r+_t, 1 + eps_high)   (detached)
    loser_term: torch.Tensor  # (P,) mean_t max(r-_t, 1 - eps_low)    (detached)


def pair_advantage(reward_gap, eps: float = 1e-4, unbiased_std: bool = True) -> torch.Tensor:
    """``c`` of a G = 2 group from the reward gap ``d = |r_1 - r_2|`` (any shape): ``(d/2) / (std + eps)``.

    ``std = d / sqrt(2)`` with Bessel's correction (TRL, the package default) or ``d / 2`` without
    (the paper's convention, which makes ``c = 1``).  ``d = 0`` gives exactly 0.
    """
    if isinstance(reward_gap, torch.Tensor):
        d = as_float_tensor(reward_gap, "reward_gap").abs()
    else:
        d = torch.as_tensor(reward_gap, dtype=torch.float64).abs()
    std = d / math.sqrt(2.0) if unbiased_std else d / 2.0
    return torch.where(d > 0, (d / 2.0) / (std + eps), torch.zeros_like(d))


def split_pairs(rewards) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Rewards ``(2P,)`` in TRL's group order -> ``(winner rows, loser rows, reward gaps)``, each ``(P,)``.

    In a tie the first completion of the pair is called the winner (its advantage is 0 anyway).
    """
    r = as_float_tensor(rewards, "rewards")
    if r.dim() != 1 or r.numel() == 0 or r.numel() % 2:
        raise ValueError(f"rewards must be (2P,) — pairs of completions, G = 2 — got shape {tuple(r.shape)}")
    check_finite(r, "rewards")
    pairs = r.view(-1, 2)  # (P, 2)
    first_wins = pairs[:, 0] >= pairs[:, 1]  # (P,)
    base = 2 * torch.arange(pairs.shape[0])
    winner = base + (~first_wins).long()
    loser = base + first_wins.long()
    return winner, loser, pairs[:, 0] - pairs[:, 1]


def _masked_row_mean(x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    return (x * m).sum(-1) / m.sum(-1).clamp(min=1.0)  # (rows,) an empty row gives 0


def pairwise_grpo_loss(
    logp,
    old_logp,
    mask,
    rewards,
    *,
    epsilon: float = 0.2,
    epsilon_high: float | None = None,
    eps: float = 1e-4,
    unbiased_std: bool = True,
) -> PairwiseLoss:
    """The G = 2 GRPO loss in its pairwise contrastive form (arXiv 2510.00977; see the module docstring).

    Shapes: ``logp``, ``old_logp``, ``mask`` are ``(2P, T)`` with the two completions of each prompt in
    adjacent rows (TRL's order); ``rewards`` is ``(2P,)``.  Returns
    ``mean_p -(c_p/2) [mean_t min(r+_t, 1+eps_high) - mean_t max(r-_t, 1-eps_low)]`` — equal, in value and
    gradient, to ``policy_loss(logp, old_logp, group_advantages(rewards, 2), mask, variant="2-grpo")``
    (beta = 0).  TRL: ``loss_type="grpo", num_generations=2``.
    """
    lp = as_float_tensor(logp, "logp")
    olp = as_float_tensor(old_logp, "old_logp").to(lp.dtype)
    check_2d(lp, "logp")
    m = check_mask(as_float_tensor(mask, "mask")).to(lp.dtype)
    check_same_shape(lp, "logp", old_logp=olp, mask=m)
    winner, loser, gap = split_pairs(rewards)
    if winner.numel() * 2 != lp.shape[0]:
        raise ValueError(f"{lp.shape[0]} rows of log-probs but {2 * winner.numel()} rewards")
    keep = m > 0  # padding may hold NaN: zero it so it never reaches a sum
    lp = torch.where(keep, lp, torch.zeros_like(lp))
    olp = torch.where(keep, olp, torch.zeros_like(olp))
    eps_high = epsilon if epsilon_high is None else epsilon_high

    c = pair_advantage(gap.to(lp.dtype), eps=eps, unbiased_std=unbiased_std)  # (P,)
    ratio = torch.exp(lp - olp)  # (2P, T)
    up = torch.clamp(ratio[winner], max=1.0 + eps_high)  # (P, T) the winner stops pulling above 1 + eps_high
    down = torch.clamp(ratio[loser], min=1.0 - epsilon)  # (P, T) the loser stops pushing below 1 - eps_low
    win_term = _masked_row_mean(up, m[winner])  # (P,)
    lose_term = _masked_row_mean(down, m[loser])  # (P,)
    per_pair = -(c / 2.0) * (win_term - lose_term)  # (P,)
    return PairwiseLoss(per_pair.mean(), c, winner, loser, win_term.detach(), lose_term.detach())


def chapter_pair_loss(logp, old_logp, mask, rewards, beta: float = 0.1) -> torch.Tensor:
    """The chapter's 2-GRPO formula: ``-mean_p log sigmoid(beta (log pi/pi_old (o+) - log pi/pi_old (o-)))``.

    Sequence log-ratios are *sums* over tokens; tied pairs are skipped.  This is a DPO loss with
    ``pi_old`` in the place of ``pi_ref`` — an analogy the paper draws, not the 2-GRPO objective: no
    clipping, no per-token mean, and a sigmoid weight instead of GRPO's constant ``c``.  Shapes as in
    :func:`pairwise_grpo_loss`; returns a scalar.
    """
    lp = as_float_tensor(logp, "logp")
    olp = as_float_tensor(old_logp, "old_logp").to(lp.dtype)
    m = check_mask(as_float_tensor(mask, "mask")).to(lp.dtype)
    winner, loser, gap = split_pairs(rewards)
    seq = ((lp - olp) * m).sum(-1)  # (2P,) log pi/pi_old of each whole completion
    margin = seq[winner] - seq[loser]  # (P,)
    informative = gap != 0
    if not bool(informative.any()):
        return (margin * 0.0).sum()
    return -F.logsigmoid(beta * margin[informative]).mean()


def informative_pair_probability(p: float) -> float:
    """Chance that a pair of Bernoulli(p) rewards differ, ``2 p (1 - p)``: at most 1/2, at p = 1/2."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"pass rate p must be in [0, 1], got {p}")
    return 2.0 * p * (1.0 - p)


def two_grpo_budget(
    rollouts_per_batch: int = 512,
    dataset_prompts: int = 8192,
    epochs: int = 1,
    group_size: int = 2,
    reference_group_size: int = 16,
) -> dict[str, dict[str, float]]:
    """2-GRPO's budget arithmetic: the same rollouts per batch as G-GRPO, spread over ``G_ref / 2`` times the prompts.

    For each configuration (``"2-GRPO"`` with ``group_size``, ``"16-GRPO"`` with ``reference_group_size``):
    prompts per batch = rollouts per batch / G, optimiser steps = epochs * dataset_prompts / prompts per
    batch, total rollouts = epochs * dataset_prompts * G.  So with equal epochs 2-GRPO samples
    ``2/16 = 12.5%`` of the rollouts in ``1/8`` of the steps; the paper (arXiv 2510.00977) measures 21% of
    the wall-clock time (the rest is fixed cost per step).  ``"ratio"`` holds 2-GRPO / reference.
    """
    for name, val in (("rollouts_per_batch", rollouts_per_batch), ("dataset_prompts", dataset_prompts),
                      ("epochs", epochs), ("group_size", group_size), ("reference_group_size", reference_group_size)):
        if not isinstance(val, int) or val < 1:
            raise ValueError(f"{name} must be a positive integer, got {val!r}")
    if group_size == reference_group_size:
        raise ValueError("group_size and reference_group_size must differ: there is nothing to compare")
    out: dict[str, dict[str, float]] = {}
    for label, g in ((f"{group_size}-GRPO", group_size), (f"{reference_group_size}-GRPO", reference_group_size)):
        if rollouts_per_batch % g:
            raise ValueError(f"rollouts_per_batch={rollouts_per_batch} is not a multiple of G={g}")
        prompts = rollouts_per_batch // g
        out[label] = {
            "group_size": g,
            "prompts_per_batch": prompts,
            "rollouts_per_batch": rollouts_per_batch,
            "steps": epochs * dataset_prompts / prompts,
            "total_rollouts": epochs * dataset_prompts * g,
        }
    a, b = out[f"{group_size}-GRPO"], out[f"{reference_group_size}-GRPO"]
    out["ratio"] = {k: a[k] / b[k] for k in ("prompts_per_batch", "rollouts_per_batch", "steps", "total_rollouts")}
    return out
