"""DAPO's dynamic sampling as a pure loop: drop groups whose rewards are all equal, refill from new prompts.

Introduced in ``notebooks/07_dapo.ipynb``.  Yu et al. 2025, DAPO, arXiv 2503.14476, Sec. 3.2 ("keep
sampling until the batch is fully filled with samples whose accuracy is neither 0 nor 1").

A group whose ``G`` rewards are all equal has advantage 0 for every completion, hence no gradient; a
batch with many such groups is effectively smaller.  Dynamic sampling keeps the number of *informative*
groups per batch fixed and pays for it in extra rollouts.  With pass rate ``p`` and Bernoulli rewards a
group is informative with probability ``q = 1 - p**G - (1-p)**G`` (:func:`informative_fraction`), so
filling ``n`` informative groups takes ``n / q`` groups on average — ``n G (1/q - 1)`` extra rollouts
(:func:`expected_sampling_cost`).

:func:`dynamic_sample` is the loop itself, over any ``sample_group(prompt)`` callback, with a bound on
the number of rounds and the counts a trainer should log.  It does not re-sample a dropped prompt: the
refill comes from the *next* prompts of the stream (drop and refill).  veRL: recipe ``filter_groups``
(``max_num_gen_batches``); TRL has no dynamic sampling.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from .shaping import informative_groups

__all__ = [
    "informative_fraction", "expected_sampling_cost", "DynamicSampleResult", "dynamic_sample",
    "simulate_dynamic_sampling",
]


def informative_fraction(p, group_size: int):
    """Share of groups with at least one success and one failure: ``1 - p**G - (1-p)**G``.

    ``p`` is a float (returns a float) or a tensor of pass rates (returns a tensor of the same shape).
    """
    if not isinstance(group_size, int) or group_size < 1:
        raise ValueError(f"group_size must be a positive integer, got {group_size!r}")
    if isinstance(p, torch.Tensor):
        if bool(((p < 0) | (p > 1)).any()):
            raise ValueError("pass rates must lie in [0, 1]")
        return 1.0 - p**group_size - (1.0 - p) ** group_size
    p = float(p)
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"pass rate p must be in [0, 1], got {p}")
    return 1.0 - p**group_size - (1.0 - p) ** group_size


def expected_sampling_cost(pass_rates, group_size: int, batch_groups: int) -> dict[str, float]:
    """Expected cost of filling ``batch_groups`` informative groups by drop and refill.

    ``pass_rates`` is one pass rate or a sequence of them (the prompt pool, each prompt drawn with equal
    chance); ``q`` is then the pool's mean informative fraction.  The number of groups sampled until
    ``n = batch_groups`` are informative is negative-binomial with mean ``n / q``.  Returns ``q``,
    ``expected_groups = n / q``, ``extra_groups = n (1/q - 1)``, ``extra_rollouts = G * extra_groups`` and
    ``overhead = 1/q - 1`` (extra rollouts per useful one); all ``inf`` when ``q = 0``.
    """
    if not isinstance(batch_groups, int) or batch_groups < 1:
        raise ValueError(f"batch_groups must be a positive integer, got {batch_groups!r}")
    rates = torch.as_tensor(pass_rates, dtype=torch.float64).reshape(-1)
    if rates.numel() == 0:
        raise ValueError("pass_rates is empty")
    q = float(informative_fraction(rates, group_size).mean())
    if q <= 0.0:
        inf = math.inf
        return {"q": 0.0, "expected_groups": inf, "extra_groups": inf, "extra_rollouts": inf, "overhead": inf}
    groups = batch_groups / q
    return {
        "q": q,
        "expected_groups": groups,
        "extra_groups": groups - batch_groups,
        "extra_rollouts": group_size * (groups - batch_groups),
        "overhead": 1.0 / q - 1.0,
    }


@dataclass
class DynamicSampleResult:
    """What :func:`dynamic_sample` returns: the batch and the counts to log."""

    groups: list[Any]  # the kept (informative) groups, in sampling order
    prompts: list[Any]  # the prompt of each kept group
    rounds: int  # sampling rounds used (1 = no refill was needed)
    sampled: int  # groups sampled in total (calls to sample_group)
    dropped: int  # groups dropped because their rewards were all equal
    surplus: int  # informative groups sampled beyond batch_size and discarded (oversampling)
    filled: bool  # True when len(groups) == batch_size
    dropped_prompts: list[Any] = field(default_factory=list)

    @property
    def extra_sampled(self) -> int:
        """Groups sampled beyond one per batch slot: ``sampled - len(groups)``."""
        return self.sampled - len(self.groups)

    def log_dict(self) -> dict[str, float]:
        """The counters as a flat dict for a metrics row."""
        return {"ds_rounds": self.rounds, "ds_sampled": self.sampled, "ds_dropped": self.dropped,
                "ds_surplus": self.surplus, "ds_filled": float(self.filled), "ds_kept": len(self.groups)}


def _rewards_of(group: Any) -> Sequence[float]:
    if isinstance(group, dict):
        return group["rewards"]
    if hasattr(group, "rewards"):
        return group.rewards
    return group


def dynamic_sample(
    prompts: Iterable[Any],
    sample_group: Callable[[Any], Any],
    batch_size: int,
    *,
    max_rounds: int = 8,
    oversample: float = 1.0,
    rewards_of: Callable[[Any], Sequence[float]] | None = None,
    on_exhausted: str = "partial",
) -> DynamicSampleResult:
    """Fill a batch of ``batch_size`` informative groups by drop and refill (DAPO Sec. 3.2).

    ``prompts`` is a stream (any iterable; consumed lazily, never rewound).  Each round draws
    ``ceil(need * oversample)`` new prompts, where ``need`` is the number of empty slots, calls
    ``sample_group(prompt)`` on each and keeps the groups whose rewards are not all equal
    (:func:`grpo_lessons.core.shaping.informative_groups`); informative groups beyond the batch are counted as
    ``surplus`` and discarded.  A dropped prompt is never sampled again in the same call.

    ``rewards_of(group)`` gives a group's ``G`` rewards; by default ``group["rewards"]``, ``group.rewards``
    or the group itself.  The loop stops when the batch is full, after ``max_rounds`` rounds, or when the
    stream ends; then ``on_exhausted="partial"`` returns the incomplete batch (``filled=False``) and
    ``"raise"`` raises ``RuntimeError`` with the counts (veRL's ``max_num_gen_batches`` behaviour).
    """
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    if not isinstance(max_rounds, int) or max_rounds < 1:
        raise ValueError(f"max_rounds must be a positive integer, got {max_rounds!r}")
    if not oversample >= 1.0:
        raise ValueError(f"oversample must be >= 1, got {oversample}")
    if on_exhausted not in ("partial", "raise"):
        raise ValueError(f"on_exhausted must be 'partial' or 'raise', got {on_exhausted!r}")
    get_rewards = rewards_of or _rewards_of
    stream = iter(prompts)
    kept: list[Any] = []
    kept_prompts: list[Any] = []
    dropped_prompts: list[Any] = []
    rounds = sampled = dropped = surplus = 0
    stream_done = False
    while len(kept) < batch_size and rounds < max_rounds and not stream_done:
        rounds += 1
        need = batch_size - len(kept)
        for _ in range(math.ceil(need * oversample)):
            try:
                prompt = next(stream)
            except StopIteration:
                stream_done = True
                break
            group = sample_group(prompt)
            sampled += 1
            r = torch.as_tensor(get_rewards(group), dtype=torch.float64).reshape(-1)
            if r.numel() == 0:
                raise ValueError(f"sample_group returned a group with no rewards for prompt {prompt!r}")
            if not bool(informative_groups(r, r.numel())[0]):
                dropped += 1
                dropped_prompts.append(prompt)
            elif len(kept) < batch_size:
                kept.append(group)
                kept_prompts.append(prompt)
            else:
                surplus += 1
    res = DynamicSampleResult(kept, kept_prompts, rounds, sampled, dropped, surplus,
                              len(kept) == batch_size, dropped_prompts)
    if not res.filled and on_exhausted == "raise":
        why = "the prompt stream ended" if stream_done else f"max_rounds={max_rounds} was reached"
        raise RuntimeError(
            f"dynamic sampling filled {len(kept)} of {batch_size} groups: {why} "
            f"after sampling {sampled} groups ({dropped} dropped as all-equal)"
        )
    return res


def simulate_dynamic_sampling(
    pass_rates, group_size: int, batch_size: int, *, n_batches: int = 200, max_rounds: int = 50, seed: int = 0
) -> dict[str, float]:
    """Monte-Carlo check of :func:`expected_sampling_cost`: Bernoulli rewards, prompts drawn from the pool.

    Runs :func:`dynamic_sample` ``n_batches`` times; returns the mean groups sampled per batch, the mean
    extra rollouts, the share of batches filled and the rounds used, next to the expected values.
    """
    g = torch.Generator().manual_seed(int(seed))
    rates = torch.as_tensor(pass_rates, dtype=torch.float64).reshape(-1)

    def prompt_stream():
        while True:
            yield int(torch.randint(len(rates), (1,), generator=g))

    def sample_group(j):
        return (torch.rand(group_size, generator=g, dtype=torch.float64) < rates[j]).double()

    sampled, rounds, filled = [], [], []
    for _ in range(n_batches):
        res = dynamic_sample(prompt_stream(), sample_group, batch_size, max_rounds=max_rounds)
        sampled.append(res.sampled)
        rounds.append(res.rounds)
        filled.append(res.filled)
    exp = expected_sampling_cost(rates, group_size, batch_size)
    mean_sampled = sum(sampled) / n_batches
    return {
        "mean_groups_sampled": mean_sampled,
        "mean_extra_rollouts": group_size * (mean_sampled - batch_size),
        "mean_rounds": sum(rounds) / n_batches,
        "filled_share": sum(filled) / n_batches,
        "expected_groups": exp["expected_groups"],
        "expected_extra_rollouts": exp["extra_rollouts"],
    }
