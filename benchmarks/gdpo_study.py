"""GDPO against GRPO on two rewards of different scales: the chapter's multi-reward claim, paired seeds.

The chapter motivates GDPO by "reward-scale imbalance in multi-objective settings": GRPO adds the rewards first and
then z-scores the sum within each group, so the reward with the larger spread decides the advantage; GDPO (Liu et al.
2026, arXiv 2601.05242; TRL ``multi_objective_aggregation="normalize_then_sum"``) z-scores each reward within the
group first, sums with the weights, and renormalises over the batch, so each reward counts by its weight whatever
its scale.

SmolLM2-135M-Instruct on the arithmetic task with two rewards, weights 1 and 1:

* correctness, ``arithmetic_reward``: 0 or 1 (what the held-out accuracy counts);
* brevity, ``brevity``: ``5 * (1 - L / 12)`` for a completion of ``L`` tokens (0 to ~4.6): five times the range of
  correctness.  Within a group it varies with every token of length, correctness only when the group is mixed.

Arms (registry names, beta = 0 for both, so they differ only in how the advantage combines the two rewards):
``grpo`` (sum, then normalise) and ``gdpo`` (normalise each, then sum).  They sample the same first batch for a seed.
The trainer logs each reward's mean per step (``reward_arithmetic_reward``, ``reward_brevity``); held-out accuracy
and greedy completion length on 100 prompts every 4 steps.

Budget (a quiet 2-core machine): 16 steps of 8 prompts x G = 8 on the fast path (bf16-mixed, bf16 sampler with
dithered rounding, ~6.5 s a step) ~ 1.7 min, four evaluations of 100 prompts ~ 0.5 min: ~ 2.3 min a run, 2 arms x 3
seeds ~ 15 min.

    HF_HUB_OFFLINE=1 python benchmarks/gdpo_study.py                  # the study (~15 min, resumable)
    HF_HUB_OFFLINE=1 python benchmarks/gdpo_study.py --quick          # tiny-qwen2, seconds

The committed study (six paired seeds, the short budget; seeds 3-5 were added to the first three, which the runner
kept as finished):

    HF_HUB_OFFLINE=1 python benchmarks/gdpo_study.py --steps 4 --prompts-per-step 4 --eval-every 4 --precision fp32 \
        --seeds 0 1 2 3 4 5

Writes ``benchmarks/results/gdpo_vs_grpo/``: ``runs/{grpo,gdpo}/seed<k>/metrics.csv`` and the study's summary,
analysis, figures and RESULT.md (benchmarks/_study.py).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks._study import (RESULTS, Arm, Rewards, Study, add_arguments, apply_common, digit_share,  # noqa: E402
                               main_for)

from grpo_lessons.core.rewards import arithmetic_reward  # noqa: E402

NAME = "gdpo_vs_grpo"
BASE = dict(task="arithmetic", steps=16, prompts_per_step=8, group_size=8, lr=3e-5, beta=0.0, max_new_tokens=12,
            temperature=0.7, eval_size=100, eval_every=4, precision="bf16-mixed", sampler_dtype="bfloat16",
            copy_rounding="dither")
QUICK = dict(steps=2, prompts_per_step=2, group_size=4, max_new_tokens=6, eval_size=4, eval_every=1,
             micro_batch_size=8, lr=1e-3)


def make_brevity(scale: float, max_new_tokens: int):
    """A TRL-signature reward ``scale * (1 - L / max_new_tokens)``, ``L`` the completion's token count (EOS included)."""
    if not scale > 0 or max_new_tokens < 1:
        raise ValueError(f"scale must be > 0 and max_new_tokens >= 1, got {scale!r}, {max_new_tokens!r}")

    def brevity(completions, completion_ids, **kwargs) -> list[float]:
        if len(completion_ids) != len(completions):
            raise ValueError(f"{len(completion_ids)} token lists for {len(completions)} completions")
        return [scale * (1.0 - min(len(ids), max_new_tokens) / max_new_tokens) for ids in completion_ids]

    return brevity


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(p, out=RESULTS / NAME)
    p.add_argument("--length-scale", type=float, default=5.0, help="the brevity reward's range (correctness: 1)")
    return p


def build(args) -> Study:
    base = apply_common(args, BASE, QUICK)
    brevity = make_brevity(args.length_scale, base["max_new_tokens"])
    if args.quick:  # an untrained tiny model is never right and always uses every token: add a reward that varies
        rewards = Rewards([arithmetic_reward, brevity, digit_share], [1.0, 1.0, 1.0], arithmetic_reward)
    else:
        rewards = Rewards([arithmetic_reward, brevity], [1.0, 1.0], arithmetic_reward)
    return Study(
        name=NAME, title="GDPO against GRPO, correctness + a 5x larger brevity reward"
        + (" (quick path)" if args.quick else ""),
        question=f"With correctness (0/1) and a brevity reward of {args.length_scale:g}x its range, weighted 1 and 1, "
                 "does normalising each reward apart (GDPO) keep more of the correctness signal than normalising "
                 "their sum (GRPO): higher held-out accuracy, and at what length?",
        arms=[Arm("grpo", {"variant": "grpo"}, "GRPO: sum, then normalise"),
              Arm("gdpo", {"variant": "gdpo"}, "GDPO: normalise each, then sum")],
        seeds=args.seeds, base=base, baseline="grpo", rewards=lambda seed: rewards,
        curves=("accuracy", "reward_arithmetic_reward", "reward_brevity", "completion_len", "eval_completion_len",
                "adv_rms"),
        extra_metrics=("eval_completion_len_after",),
        budget="about 2.3 min a run, 15 min for 2 arms x 3 seeds on a quiet 2-core CPU (module docstring)",
        notes=["`reward_arithmetic_reward` and `reward_brevity` are the two rewards' means over each step's sampled "
               "completions; `eval_completion_len` is the greedy completion length on the held-out prompts."],
    )


def main(argv=None) -> int:
    return main_for(build, parser(), argv, default_out=RESULTS / NAME)


if __name__ == "__main__":
    raise SystemExit(main())
