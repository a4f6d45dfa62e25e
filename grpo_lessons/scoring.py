"""Scoring: rewards of a rollout (the way TRL calls reward functions) and greedy held-out evaluation.

Introduced in ``notebooks/04_tasks_and_rewards.ipynb`` and ``notebooks/05_grpo_end_to_end.ipynb``; the trainer
(:mod:`grpo_lessons.trainer`, which re-exports these) calls :func:`score_completions` once per sampling round
and :func:`evaluate` every ``eval_every`` steps.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from .rollout import Rollout, generate_completions

__all__ = ["reward_names", "score_completions", "evaluate"]


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
    """
    from .rewards import check_rewards

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
    parts = {}
    for name, f, w in zip(reward_names(reward_funcs), reward_funcs, weights):
        values = check_rewards(f(completions=completions, prompts=prompts, completion_ids=ids, **columns), N,
                               f"reward function {name!r}")
        r = torch.tensor(values, dtype=torch.float32)  # (N,), NaN where the function said None
        parts[name] = r
        total += w * torch.nan_to_num(r, nan=0.0)
    return total, parts


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
        "reward_mean": sum(rewards) / len(rewards) if rewards else None,
        "completion_len": sum(lengths) / len(lengths),
        "n": len(correct),
    }
