"""DPO's sigmoid loss, and DPO pairs built from GRPO groups whose two sides differ in approach.

Introduced in ``notebooks/17_diversity.ipynb`` (the chapter's "DPO with diverse pairs") and compared with
2-GRPO's pairwise form (:mod:`grpo_lessons.core.pairwise`, ``notebooks/09_two_grpo.ipynb``).

Rafailov et al. 2023, *Direct Preference Optimization*, arXiv 2305.18290, Eq. 7::

    L_DPO = -E log sigmoid( beta_DPO * [ (log pi(y_w|x) - log pi_ref(y_w|x)) - (log pi(y_l|x) - log pi_ref(y_l|x)) ] )

``beta_DPO`` (the argument ``beta``) is DPO's temperature, *not* GRPO's KL coefficient beta: it scales the
implicit reward ``beta_DPO * log pi/pi_ref``.  TRL 1.16: ``DPOTrainer`` with ``DPOConfig(loss_type="sigmoid",
beta=0.1)`` (its default), sequence log-probs summed over completion tokens.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Literal, NamedTuple

import torch
import torch.nn.functional as F

from ._checks import as_float_tensor, check_finite, check_same_shape

__all__ = ["dpo_loss", "dpo_implicit_rewards", "DPOPair", "diverse_dpo_pairs"]


def _pair_tensors(*named):
    ts = [as_float_tensor(t, name) for t, name in named]
    ref = ts[0]
    if ref.dim() != 1 or ref.numel() == 0:
        raise ValueError(f"{named[0][1]} must be (P,) sequence log-probs, one per pair, got {tuple(ref.shape)}")
    check_same_shape(ref, named[0][1], **{name: t for t, (_, name) in zip(ts[1:], named[1:])})
    for t, (_, name) in zip(ts, named):
        check_finite(t, name)
    return ts


def dpo_loss(
    policy_chosen_logps,
    policy_rejected_logps,
    ref_chosen_logps,
    ref_rejected_logps,
    beta: float = 0.1,
    reduction: Literal["mean", "none"] = "mean",
) -> torch.Tensor:
    """DPO's sigmoid loss (arXiv 2305.18290, Eq. 7): ``-log sigmoid(beta_DPO * (Δ_chosen - Δ_rejected))``.

    Inputs are ``(P,)`` *sequence* log-probabilities (summed over each completion's tokens) of the chosen
    and rejected completion of each pair under the policy and the frozen reference; ``Δ = log pi - log pi_ref``.
    ``beta`` is DPO's temperature beta_DPO (TRL ``DPOConfig.beta``, default 0.1), not GRPO's KL beta.
    Returns the mean over pairs (TRL's ``loss_type="sigmoid"``) or the ``(P,)`` per-pair losses with
    ``reduction="none"``.  ``-logsigmoid`` is computed stably (no ``log(sigmoid(x))`` underflow).
    Raises ``ValueError`` for shape mismatches, NaN/inf, ``beta <= 0``.
    """
    if not (isinstance(beta, (int, float)) and math.isfinite(beta) and beta > 0):
        raise ValueError(f"beta (DPO's temperature) must be a positive number, got {beta!r}")
    if reduction not in ("mean", "none"):
        raise ValueError(f"unknown reduction {reduction!r}; known: mean, none")
    pc, pr, rc, rr = _pair_tensors((policy_chosen_logps, "policy_chosen_logps"),
                                   (policy_rejected_logps, "policy_rejected_logps"),
                                   (ref_chosen_logps, "ref_chosen_logps"), (ref_rejected_logps, "ref_rejected_logps"))
    margin = (pc - rc) - (pr - rr)  # (P,) difference of the implicit rewards / beta
    per_pair = -F.logsigmoid(beta * margin)  # (P,)
    return per_pair.mean() if reduction == "mean" else per_pair


def dpo_implicit_rewards(policy_logps, ref_logps, beta: float = 0.1) -> torch.Tensor:
    """DPO's implicit reward ``beta_DPO * (log pi(y|x) - log pi_ref(y|x))`` of each completion, ``(P,)`` (detached);
    TRL logs its mean as ``rewards/chosen`` and ``rewards/rejected``."""
    p, r = _pair_tensors((policy_logps, "policy_logps"), (ref_logps, "ref_logps"))
    return (beta * (p - r)).detach()


class DPOPair(NamedTuple):
    """One preference pair from group ``group`` (indices into that group)."""

    group: int
    chosen: Any
    rejected: Any
    chosen_index: int
    rejected_index: int
    chosen_reward: float
    rejected_reward: float


def _default_key(text) -> str:
    from .diversity import solution_structure
    from .rewards.extract import completion_text

    s = solution_structure(text)
    return s if s is not None else " ".join(completion_text(text).split())


def diverse_dpo_pairs(
    groups: Sequence[Sequence[Any]],
    rewards: Sequence[Sequence[float]],
    *,
    key: Callable[[Any], Any] | None = None,
    min_gap: float = 0.0,
    pairs_per_group: int = 1,
) -> list[DPOPair]:
    """DPO pairs from GRPO groups whose chosen and rejected completions differ in *approach*, not only in reward.

    For each group (``groups[g]`` completions, ``rewards[g]`` their rewards; ``None``/NaN = unscorable, never
    used): candidates are taken best-first as *chosen*; each is paired with the highest-reward completion
    whose reward is lower by more than ``min_gap`` **and** whose ``key`` differs from the chosen one's -- a
    near miss by another route, rather than a copy of the winner that went wrong at the end.  Up to
    ``pairs_per_group`` pairs per group, no completion used twice.  A group with no such pair gives none.

    ``key`` (default): the Countdown solution structure (:func:`grpo_lessons.core.diversity.solution_structure`,
    commutativity/associativity ignored), else the whitespace-normalised text.  The chapter's "DPO with diverse
    pairs" row of Table 7.1.
    """
    from .diversity import _finite_rewards  # shared validation of reward lists

    if len(groups) != len(rewards):
        raise ValueError(f"{len(groups)} groups but {len(rewards)} reward lists")
    if not (isinstance(pairs_per_group, int) and pairs_per_group >= 1):
        raise ValueError(f"pairs_per_group must be a positive integer, got {pairs_per_group!r}")
    if not (math.isfinite(min_gap) and min_gap >= 0):
        raise ValueError(f"min_gap must be a finite number >= 0, got {min_gap!r}")
    key = key or _default_key
    pairs: list[DPOPair] = []
    for g, (group, rs) in enumerate(zip(groups, rewards)):
        items = list(group)
        r = _finite_rewards(rs, len(items))
        order = sorted((i for i, v in enumerate(r) if not math.isnan(v)), key=lambda i: (-r[i], i))
        keys = {i: key(items[i]) for i in order}
        used: set[int] = set()
        made = 0
        for c in order:
            if made >= pairs_per_group:
                break
            if c in used:
                continue
            for j in order:
                if j in used or j == c or not r[j] < r[c] - min_gap or keys[j] == keys[c]:
                    continue
                pairs.append(DPOPair(g, items[c], items[j], c, j, r[c], r[j]))
                used.update((c, j))
                made += 1
                break
    return pairs
