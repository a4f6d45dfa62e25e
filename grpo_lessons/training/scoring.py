"""Scoring: the rewards of a rollout (called the way TRL calls reward functions), the reward matrix of one
sampling round (reward functions plus DAPO's overlong penalty and the entropy bonus as extra columns), the
sampling columns of a ``metrics.csv`` row, and greedy held-out evaluation.

Introduced in ``notebooks/04_tasks_and_rewards.ipynb`` and ``notebooks/05_grpo_end_to_end.ipynb``; the trainer
(:mod:`grpo_lessons.training.trainer`, which re-exports :func:`score_completions` and :func:`evaluate`) calls
:func:`reward_matrix` once per sampling round and :func:`evaluate` every ``eval_every`` steps.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from .rollout import Rollout, generate_completions
from grpo_lessons.core.shaping import completion_entropy, soft_overlong_penalty, solved_groups

__all__ = ["reward_names", "score_completions", "matrix_weights", "reward_matrix", "sampling_stats",
           "sample_fields", "eval_fields", "correct_flags", "solved_prompts", "evaluate"]


def _fn_name(f) -> str:
    return getattr(f, "__name__", None) or type(f).__name__


def reward_names(reward_funcs: Sequence[Callable]) -> list[str]:
    """Unique column names for the reward functions (``arithmetic_reward``, ``format_reward``, ``f_2`` ...)."""
    names = []
    for i, f in enumerate(reward_funcs):
        n = _fn_name(f)
        names.append(n if n not in names else f"{n}_{i}")
    return names


def score_completions(rollout: Rollout, rows: Sequence[dict], reward_funcs: Sequence[Callable],
                      weights: Sequence[float] | None = None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Rewards ``(N,)`` of a rollout: ``sum_k w_k f_k(completions, **columns)``, and each ``f_k``'s ``(N,)``.

    Each reward function is called the way TRL calls it: ``completions`` (chat messages for conversational
    prompts), ``prompts``, ``completion_ids`` and every dataset column except ``prompt``, each repeated
    ``G`` times.  What it returns is checked: exactly ``N`` finite numbers, or ``None`` for "does not
    apply" (counted as 0, as TRL's ``nansum``).  Anything else raises ``ValueError`` naming the function.
    A completion for which *every* function returned ``None`` is unscorable: its total is NaN (TRL: left out
    of the group statistics, advantage 0; see :func:`grpo_lessons.core.variants.variant_advantages`).
    """
    from grpo_lessons.core.rewards import check_rewards

    G = rollout.group_size
    if len(rows) != rollout.num_prompts:
        raise ValueError(f"{len(rows)} dataset rows for a rollout of {rollout.num_prompts} prompts")
    if not reward_funcs:
        raise ValueError("no reward functions")
    weights = [1.0] * len(reward_funcs) if weights is None else [float(w) for w in weights]
    if len(weights) != len(reward_funcs):
        raise ValueError(f"{len(weights)} reward weights for {len(reward_funcs)} reward functions")
    N = len(rollout)
    keys = [k for k in dict.fromkeys(k for r in rows for k in r) if k not in ("prompt", "completions")]
    columns = {k: [r.get(k) for r in rows for _ in range(G)] for k in keys}  # each (N,)
    completions = rollout.completions()
    prompts = [p for p in rollout.prompts for _ in range(G)]
    ids = [row[m.bool()].tolist() for row, m in zip(rollout.completion_ids, rollout.completion_mask)]
    total = torch.zeros(N, dtype=torch.float32)
    scored = torch.zeros(N, dtype=torch.bool)
    parts = {}
    for name, f, w in zip(reward_names(reward_funcs), reward_funcs, weights):
        values = check_rewards(f(completions=completions, prompts=prompts, completion_ids=ids, **columns), N,
                               f"reward function {name!r}")
        r = torch.tensor(values, dtype=torch.float32)  # (N,), NaN where the function said None
        parts[name] = r
        total += w * torch.nan_to_num(r, nan=0.0)
        scored |= ~torch.isnan(r)
    return torch.where(scored, total, torch.full_like(total, float("nan"))), parts


def matrix_weights(reward_weights: Sequence[float], overlong_cache_len: int, entropy_reward: float) -> list[float]:
    """The reward matrix's column weights: the reward functions' ``w_k``, then 1 for the overlong penalty (when
    ``overlong_cache_len``) and ``alpha`` for the entropy bonus (when ``entropy_in="reward"``)."""
    return list(reward_weights) + ([1.0] if overlong_cache_len else []) + (
        [float(entropy_reward)] if entropy_reward else [])


def reward_matrix(rollout: Rollout, rewards: torch.Tensor, parts: dict[str, torch.Tensor], weights: Sequence[float], *,
                  max_new_tokens: int, overlong_cache_len: int = 0,
                  entropy_reward: float = 0.0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The shaped rewards of one sampling round: ``(total (N,), overlong penalty (N,), R (N, K'))``.

    ``R`` holds each reward function's column (``parts`` from :func:`score_completions`), then DAPO's soft overlong
    penalty (:func:`grpo_lessons.core.shaping.soft_overlong_penalty`, when ``overlong_cache_len``) and the sampler's mean
    token entropy ``H_i`` (:func:`grpo_lessons.core.shaping.completion_entropy`, when ``entropy_reward = alpha > 0``) as
    extra "reward functions"; ``weights`` (:func:`matrix_weights`) weight its columns.  ``total`` is the weighted
    ``nansum`` per row, NaN where ``rewards`` is NaN (no reward function scored it: shaping does not either).
    GDPO/GOPO normalise ``R``'s columns apart (:func:`grpo_lessons.core.variants.variant_advantages`).
    """
    penalty = torch.zeros_like(rewards)
    columns = list(parts.values())  # each (N,)
    if overlong_cache_len:
        penalty = soft_overlong_penalty(rollout.lengths.float(), max_new_tokens, overlong_cache_len)
        columns.append(penalty)
    if entropy_reward:
        columns.append(completion_entropy(rollout.sampling_entropy, rollout.completion_mask))  # H_i, weight alpha
    R = torch.stack([c.to(rewards.device, rewards.dtype) for c in columns], dim=1)  # (N, K') on the rewards' device
    unscorable = torch.isnan(rewards)  # (N,) every reward function said None: shaping does not score it
    R[unscorable] = float("nan")
    w = torch.tensor(list(weights), dtype=R.dtype)
    total = torch.where(unscorable, rewards, (R * w).nansum(dim=1))  # (N,)
    return total, penalty, R


def correct_flags(rollout: Rollout, rows: Sequence[dict], parts: dict[str, torch.Tensor],
                  reward_funcs: Sequence[Callable], accuracy_fn: Callable) -> torch.Tensor:
    """``(N,)`` bool: which completions ``accuracy_fn`` judges right (it gives >= 1; an unscorable one is wrong).

    Its column of ``parts`` when it is one of ``reward_funcs`` (no second scoring), else scored here."""
    i = next((k for k, f in enumerate(reward_funcs) if f is accuracy_fn), None)
    if i is not None:
        acc = list(parts.values())[i]
    else:
        acc = next(iter(score_completions(rollout, rows, [accuracy_fn])[1].values()))
    return torch.nan_to_num(acc.float(), nan=0.0) >= 1.0 - 1e-9  # as solved_groups and the held-out accuracy


def solved_prompts(indices: Sequence[int], rollout: Rollout, rows: Sequence[dict], parts: dict[str, torch.Tensor],
                   reward_funcs: Sequence[Callable], accuracy_fn: Callable, group_size: int,
                   threshold: float, correct: torch.Tensor | None = None) -> list[int]:
    """The dataset ``indices`` (one per group) whose group pass rate reaches ``threshold`` (ScaleRL's
    no-positive-resampling, :func:`grpo_lessons.core.shaping.solved_groups`).

    Right = ``accuracy_fn`` gives >= 1 (:func:`correct_flags`; pass ``correct`` when it is known already).
    """
    if correct is None:
        correct = correct_flags(rollout, rows, parts, reward_funcs, accuracy_fn)
    solved = solved_groups(correct.float(), group_size, threshold)  # (P,)
    return [idx for idx, s in zip(indices, solved.tolist()) if s]


def sampling_stats(seen: list[tuple[Rollout, torch.Tensor, dict, torch.Tensor]], zero_std: int, groups_seen: int,
                   rounds: int, correct: Sequence[torch.Tensor] | None = None) -> dict:
    """What one step's sampling saw, over every round (kept groups or not): ``seen`` holds each round's
    ``(rollout, rewards (N,), per-function rewards, overlong penalty (N,))``; ``correct`` each round's
    :func:`correct_flags` (``(N,)`` bool), for the lengths of right and wrong completions."""
    ros = [s[0] for s in seen]
    all_r = torch.cat([s[1] for s in seen])
    return {
        **({"correct": torch.cat(list(correct))} if correct is not None else {}),
        "rewards": all_r,
        "reward_parts": {k: torch.cat([s[2][k] for s in seen]) for k in seen[0][2]},
        "overlong_penalty": torch.cat([s[3] for s in seen]),
        "lengths": torch.cat([x.lengths for x in ros]).float(),
        "truncated": torch.cat([x.truncated for x in ros]).float(),
        "empty": torch.cat([(x.lengths - x.is_eos.long()) == 0 for x in ros]).float(),
        "entropy": torch.cat([completion_entropy(x.sampling_entropy, x.completion_mask).cpu() for x in ros]),
        "frac_zero_std_groups": zero_std / groups_seen,
        "resample_rounds": rounds,
        "completions_sampled": int(all_r.numel()),
    }


def sample_fields(st: dict, reward_columns: Sequence[str], *, overlong: bool, entropy_reward: float,
                  pool=None) -> dict:
    """The sampling columns of a ``metrics.csv`` row from :func:`sampling_stats` (``pool``: the
    :class:`~grpo_lessons.training.records.PromptStream` when ``retire_solved_at`` is set)."""
    r = st["rewards"]
    scored = r[~torch.isnan(r)]  # unscorable completions (NaN) are left out
    return {
        "reward_mean": float(scored.mean()) if scored.numel() else None,
        "reward_std": float(scored.std()) if scored.numel() > 1 else 0.0,
        **{c: _nanmean(st["reward_parts"][n]) for c, n in zip(reward_columns, st["reward_parts"])},
        "completion_len": float(st["lengths"].mean()),
        **_lengths_by_correctness(st),
        "truncated_frac": float(st["truncated"].mean()),
        "empty_frac": float(st["empty"].mean()),
        "overlong_penalty": float(st["overlong_penalty"].mean()) if overlong else None,
        "frac_zero_std_groups": st["frac_zero_std_groups"],
        "resample_rounds": st["resample_rounds"],
        "completions_sampled": st["completions_sampled"],
        "entropy": float(st["entropy"].mean()),
        **({"entropy_bonus": entropy_reward * float(st["entropy"].mean())} if entropy_reward else {}),
        **({"retired": len(pool.retired), "pool_size": pool.pool_size} if pool is not None else {}),
    }


def _lengths_by_correctness(st: dict) -> dict:
    """``completion_len_right`` / ``completion_len_wrong`` (mean tokens, EOS included, of the sampled completions the
    accuracy function judges right / wrong; None when there is none) and ``train_accuracy`` (the right share)."""
    if "correct" not in st:
        return {}
    right, lengths = st["correct"].bool(), st["lengths"]
    if right.shape != lengths.shape:
        raise ValueError(f"correct flags {tuple(right.shape)} do not match the lengths {tuple(lengths.shape)}")
    mean = lambda sel: float(lengths[sel].mean()) if bool(sel.any()) else None  # noqa: E731
    return {"completion_len_right": mean(right), "completion_len_wrong": mean(~right),
            "train_accuracy": float(right.float().mean()) if right.numel() else None}


def eval_fields(ev: dict | None) -> dict:
    """The evaluation columns of a ``metrics.csv`` row from :func:`evaluate`'s result (none when ``None``)."""
    if ev is None:
        return {}
    return {"accuracy": ev["accuracy"], "eval_reward_mean": ev["reward_mean"],
            "eval_completion_len": ev["completion_len"]}


@torch.no_grad()
def evaluate(model, tokenizer, rows: Sequence[dict], accuracy_fn: Callable, *, max_new_tokens: int,
             batch_size: int = 50, reward_funcs: Sequence[Callable] | None = None,
             reward_weights: Sequence[float] | None = None) -> dict:
    """Greedy held-out evaluation: ``accuracy`` = share of rows where ``accuracy_fn`` gives >= 1.

    Also the mean weighted reward (when ``reward_funcs`` is given) and the mean completion length.
    """
    if not rows:
        raise ValueError("the evaluation set is empty")
    correct, rewards, lengths = [], [], []
    for s in range(0, len(rows), batch_size):
        chunk = list(rows[s:s + batch_size])
        ro = generate_completions(model, tokenizer, [r["prompt"] for r in chunk], 1, max_new_tokens=max_new_tokens,
                                  temperature=None, compute_logps=False)
        _, acc = score_completions(ro, chunk, [accuracy_fn])
        correct += [bool(v >= 1.0 - 1e-9) for v in next(iter(acc.values())).tolist()]
        if reward_funcs:
            total, _ = score_completions(ro, chunk, reward_funcs, reward_weights)
            rewards += total.tolist()
        lengths += ro.lengths.tolist()
    return {
        "accuracy": sum(correct) / len(correct),
        "reward_mean": _nanmean(torch.tensor(rewards)) if rewards else None,
        "completion_len": sum(lengths) / len(lengths),
        "n": len(correct),
    }


def _nanmean(t: torch.Tensor) -> float | None:
    t = t[~torch.isnan(t)]
    return float(t.mean()) if t.numel() else None
