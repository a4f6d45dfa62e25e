"""Dr. GRPO against GRPO at 48 new tokens: does GRPO's per-sequence mean let wrong answers grow longer?

Liu et al. 2025 (Dr. GRPO, arXiv 2503.20783, Sec. 3.1) argue that GRPO's loss, which averages each completion's
token terms over its own length, weighs a token of a short completion more than one of a long completion: a wrong
(negative-advantage) answer is penalised less per token the longer it is, so wrong answers drift longer, and right
answers are pushed towards shortness.  Dr. GRPO divides every completion's sum by one constant (and drops the group
standard deviation from the advantage), so length carries no weight.  The course's exact toy (notebook 06) shows it
over 20 seeds; this study asks whether SmolLM2-135M-Instruct shows it within a short CPU budget.

Single change: both arms have beta = 0, mu = 1, the same learning rate, batches and sampler; they differ only in the
variant's pieces (Dr. GRPO: constant normaliser, advantages not divided by the group's standard deviation).  Two runs
of one seed sample the same first batch.  The trainer logs the mean length of the sampled completions the task judges
right and wrong at every step (``completion_len_right``, ``completion_len_wrong``); each run's summary averages them
over its last five steps.

Task: arithmetic with 48 new tokens (at 12 tokens most completions are cut; here about a quarter are, so a wrong
answer has room to ramble).  Budget, fixed before the runs: 8 steps of 8 prompts x G = 8, fp32 on a 2-core CPU
(~20 s a step measured in a pilot step, evaluations of 100 prompts at steps 4 and 8): about 3.5 min a run, 2 arms x
5 seeds ~ 35 min.  Stopping rule written before the runs: all five seeds run; no seed is dropped or added after
looking at the results (the RESULT.md gives the seeds a five-seed SD says a given effect would need).

    HF_HUB_OFFLINE=1 python benchmarks/length_study.py --precision fp32 --seeds 0 1 2 3 4   # the study (~35 min)
    HF_HUB_OFFLINE=1 python benchmarks/length_study.py --quick                              # tiny-qwen2, seconds

Writes ``benchmarks/results/dr_grpo_length/`` (the study layout: runs, summary.csv, analysis.json, figures,
RESULT.md).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks._study import (RESULTS, Arm, Study, add_arguments, apply_common, main_for,  # noqa: E402
                               quick_rewards)

NAME = "dr_grpo_length"
BASE = dict(task="arithmetic", steps=8, prompts_per_step=8, group_size=8, lr=3e-5, beta=0.0, mu=1,
            max_new_tokens=48, temperature=0.7, eval_size=100, eval_every=4, precision="fp32")
QUICK = dict(steps=2, prompts_per_step=2, group_size=4, max_new_tokens=6, eval_size=4, eval_every=1,
             micro_batch_size=8, lr=1e-3)
METRICS = ("completion_len_wrong_last5", "completion_len_right_last5", "completion_len_last5",
           "train_accuracy_last5", "truncated_frac_last5", "eval_completion_len_after", "gain_last2")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(p, out=RESULTS / NAME)
    p.set_defaults(seeds=[0, 1, 2, 3, 4])
    return p


def build(args) -> Study:
    base = apply_common(args, BASE, QUICK)
    return Study(
        name=NAME, title="Dr. GRPO against GRPO at 48 new tokens: length of right and wrong answers"
        + (" (quick path)" if args.quick else ""),
        question="With room to ramble (48 new tokens), do GRPO's wrong answers grow longer than Dr. GRPO's, as the "
                 "length bias of GRPO's per-sequence mean predicts, and what happens to right answers and accuracy?",
        arms=[Arm("grpo", {"variant": "grpo"}, "GRPO (beta 0)"),
              Arm("dr_grpo", {"variant": "dr_grpo"}, "Dr. GRPO")],
        seeds=args.seeds, base=base, baseline="grpo", min_seeds=2 if args.quick else 3,
        rewards=quick_rewards if args.quick else None,  # an untrained tiny model is never right: a reward that varies
        curves=("completion_len_wrong", "completion_len_right", "completion_len", "train_accuracy", "accuracy",
                "truncated_frac"),
        extra_metrics=METRICS,
        budget="about 3.5 min a run, 35 min for 2 arms x 5 seeds on a quiet 2-core CPU in fp32 (module docstring); "
               "stopping rule: all five seeds, none added or dropped after looking",
        notes=["`completion_len_wrong_last5` / `completion_len_right_last5`: the mean length (tokens, EOS included) of "
               "the sampled completions the task judges wrong / right, over each run's last five steps; "
               "`gain_last2`: the mean of the last two held-out evaluations (steps 4 and 8) minus before.",
               "Both arms have beta = 0 and mu = 1 (on-policy: the ratio is 1, so clipping plays no part); Dr. GRPO "
               "changes the normaliser (a constant instead of each completion's length) and drops the division by "
               "the group's standard deviation."],
    )


def main(argv=None) -> int:
    return main_for(build, parser(), argv, default_out=RESULTS / NAME)


if __name__ == "__main__":
    raise SystemExit(main())
