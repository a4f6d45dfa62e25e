"""A bf16 sampler with and without a rollout correction, against the fp32 sampler: three seeds, through the runner.

SmolLM2-135M-Instruct on the arithmetic task, GRPO (beta = 0), the trainer in fp32.  Arms:

* ``fp32_sampler``: the trained fp32 weights sample (on policy: the reference);
* ``bf16_sampler``: a bf16 copy of the weights samples (resynced after every update with dithered rounding) while
  the trainer computes ``pi_old`` in fp32, so every batch is slightly off-policy (notebook 11); no correction;
* ``bf16_sampler_tis``: the same, with truncated importance sampling per token (``rollout_correction=
  "token_truncate"``, weights ``min(pi_old / mu, 3)``).

``bf16_sampler`` and ``bf16_sampler_tis`` sample the same first batch for a seed (the correction acts in the loss);
``fp32_sampler`` samples with other weights.  Recorded per step by the trainer: reward, the mismatch columns (k3 per
token between the sampler and ``pi_old``, the min/mean/max token ratio), the share of tokens the correction
truncated, entropy, clip fractions; held-out greedy accuracy on 100 prompts every 5 steps.

Budget (a quiet 2-core machine): 15 steps of 8 prompts x G = 8 with the fp32 trainer (forward + backward ~7 s,
sampling ~2.2 s from the bf16 copy or ~4 s in fp32, optimiser ~0.3 s: the profiled figures in
grpo_lessons.training.train_setup) ~ 2.7 min, three evaluations of 100 prompts ~ 0.7 min: ~ 3.5 min a run,
3 arms x 3 seeds ~ 32 min.

    HF_HUB_OFFLINE=1 python benchmarks/offpolicy_run.py                  # the study (~32 min, resumable)
    HF_HUB_OFFLINE=1 python benchmarks/offpolicy_run.py --quick          # tiny-qwen2, seconds

Writes ``benchmarks/results/offpolicy_run/``: ``runs/<arm>/seed<k>/metrics.csv`` and the study's summary,
analysis, figures and RESULT.md (benchmarks/_study.py).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks._study import RESULTS, Arm, Study, add_arguments, apply_common, main_for, quick_rewards  # noqa: E402

NAME = "offpolicy_run"
BASE = dict(task="arithmetic", variant="grpo", beta=0.0, steps=15, prompts_per_step=8, group_size=8, lr=3e-5,
            max_new_tokens=12, temperature=0.7, eval_size=100, eval_every=5, precision="fp32")
QUICK = dict(steps=2, prompts_per_step=2, group_size=4, max_new_tokens=6, eval_size=4, eval_every=1,
             micro_batch_size=8, lr=1e-3)
ARMS = (
    Arm("fp32_sampler", {"sampler_dtype": None}, "fp32 sampler (on policy)", sampling="fp32 weights"),
    Arm("bf16_sampler", {"sampler_dtype": "bfloat16"}, "bf16 sampler, no correction", sampling="bf16 copy"),
    Arm("bf16_sampler_tis", {"sampler_dtype": "bfloat16", "rollout_correction": "token_truncate",
                             "rollout_clip_max": 3.0}, "bf16 sampler + TIS (token_truncate, cap 3)",
        sampling="bf16 copy"),
)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(p, out=RESULTS / NAME)
    return p


def build(args) -> Study:
    base = apply_common(args, BASE, QUICK)
    return Study(
        name=NAME, title="bf16 sampler with and without TIS, against the fp32 sampler"
        + (" (quick path)" if args.quick else ""),
        question="Does sampling from a bf16 copy of the weights (a train/inference gap) change what GRPO learns, and "
                 "does truncated importance sampling (TIS) change it back?",
        arms=list(ARMS), seeds=args.seeds, base=base, baseline="fp32_sampler",
        rewards=quick_rewards if args.quick else None,
        curves=("accuracy", "reward_mean", "mismatch_k3", "correction_truncated_frac", "entropy", "completion_len"),
        budget="about 3.5 min a run, 32 min for 3 arms x 3 seeds on a quiet 2-core CPU (module docstring)",
        notes=["`mismatch_k3`: mean k3 per token between the sampler's log-probs and the trainer's pi_old; "
               "`correction_truncated_frac`: the share of tokens whose TIS weight hit the cap."],
    )


def main(argv=None) -> int:
    return main_for(build, parser(), argv, default_out=RESULTS / NAME)


if __name__ == "__main__":
    raise SystemExit(main())
