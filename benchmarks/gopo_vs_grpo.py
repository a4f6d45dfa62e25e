"""GOPO against GRPO on a miscalibrated, noisy reward model (notebook 16), three seeds, through the study runner.

SmolLM2-135M-Instruct on the arithmetic task, but trained on a *stand-in reward model* instead of the verifier: a
true quality score ``s`` (1 for the right answer, up to 0.5 for a near miss, 0 for no number) passed through a
monotone distortion and heavy-tailed noise,

    rm = exp(3 s) + 2 * t_2        (Student-t with 2 degrees of freedom: rare, large errors)

Arms (every one chosen by its registry name; beta = 0 for all, so the arms differ only in what is named):

* ``grpo``: the reward model's magnitudes, z-scored within each group (``variant="grpo"``);
* ``gopo``: only their ranks within each group, ``A = 2 - 4 (rank - 1) / (G - 1)`` (``variant="gopo"``; the registry's
  GOPO also averages the loss over all tokens of the batch, GRPO per sequence first);
* ``gopo_lr_matched``: GOPO at the learning rate that equalises the advantage RMS with GRPO's.  GOPO's rank
  advantages have a larger RMS than GRPO's z-scores (about 1.31 against 0.94 with G = 8), so part of any
  difference could be the step size rather than the ranking.  The factor is derived, per seed, from the two finished
  runs of that seed -- ``lr x mean adv_rms(grpo) / mean adv_rms(gopo)`` over their steps (the trainer's ``adv_rms``
  column) -- and recorded in the run's ``run.json`` and in RESULT.md.  Caveat: AdamW divides each update by the
  running RMS of its gradients, so a constant advantage scale largely cancels (and the gradient-norm clip at 1.0 acts
  first); this arm therefore measures GOPO at a smaller learning rate, which bounds how much of a difference is
  step size.

The three arms sample the same first batch for a seed (same sampler, prompts and reward model draws); they differ
from the first update on.  Held-out accuracy is greedy, scored by the real verifier, on 100 prompts.

Budget (a quiet 2-core machine): 16 steps of 8 prompts x G = 8 on the fast path (bf16-mixed, bf16 sampler with
dithered rounding; ~6.5 s a step from the committed 10-minute preset's per-step times at half the batch) ~ 1.7 min,
evaluations at steps 4..16 on 100 prompts ~ 0.5 min: ~ 2.3 min a run, 3 arms x 3 seeds ~ 21 min.

    HF_HUB_OFFLINE=1 python benchmarks/gopo_vs_grpo.py                 # the study (~21 min, resumable)
    HF_HUB_OFFLINE=1 python benchmarks/gopo_vs_grpo.py --quick --out /tmp/gopo   # tiny-qwen2, seconds

Writes ``benchmarks/results/gopo_vs_grpo/``: ``runs/<arm>/seed<k>/metrics.csv`` and the study's summary, analysis,
figures and RESULT.md (benchmarks/_study.py).
"""

from __future__ import annotations

import argparse
import math
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks._study import (RESULTS, Arm, Rewards, Study, add_arguments, apply_common, main_for,  # noqa: E402
                               run_dir)

from grpo_lessons.core.rewards import arithmetic_reward, completion_text, extract_answer, parse_number  # noqa: E402
from grpo_lessons.training.records import METRICS_NAME, load_history  # noqa: E402

NAME = "gopo_vs_grpo"
BASE = dict(task="arithmetic", steps=16, prompts_per_step=8, group_size=8, lr=3e-5, beta=0.0, max_new_tokens=12,
            temperature=0.7, eval_size=100, eval_every=4, precision="bf16-mixed", sampler_dtype="bfloat16",
            copy_rounding="dither")
QUICK = dict(steps=2, prompts_per_step=2, group_size=4, max_new_tokens=6, eval_size=4, eval_every=1,
             micro_batch_size=8, lr=1e-3)


def true_score(completions, answer, **kwargs) -> list[float]:
    """1 for the right answer; 0.5 * (1 - |error| / 10) for a number within 10 of it; else 0."""
    out = []
    for c, a in zip(completions, answer if isinstance(answer, (list, tuple)) else [answer] * len(completions)):
        pred, gold = extract_answer(completion_text(c)), parse_number(a)
        if pred is None or gold is None:
            out.append(0.0)
        elif pred == gold:
            out.append(1.0)
        else:
            out.append(0.5 * max(0.0, 1.0 - abs(float(pred - gold)) / 10.0))
    return out


def make_reward_model(noise: float, strength: float, seed: int):
    """A TRL-signature reward: ``exp(strength * s) + noise * t_2`` with its own seeded generator."""
    rng = random.Random(seed)

    def reward_model(completions, answer, **kwargs) -> list[float]:
        s = true_score(completions, answer)
        out = []
        for x in s:
            t = rng.gauss(0, 1) / math.sqrt((rng.gauss(0, 1) ** 2 + rng.gauss(0, 1) ** 2) / 2)  # Student-t, 2 dof
            out.append(math.exp(strength * x) + noise * t)
        return out

    return reward_model


def mean_adv_rms(out: Path, arm: str, seed: int) -> float:
    """The mean of a finished run's logged ``adv_rms`` over its training steps."""
    rd = run_dir(out, arm, seed)
    path = rd / METRICS_NAME
    if not (rd / "run.json").is_file() or not path.is_file():
        raise RuntimeError(f"gopo_lr_matched needs the finished {arm} run of seed {seed} ({rd}) first: run the "
                           "study's arms in order (the runner does, seed by seed)")
    vals = [r["adv_rms"] for r in load_history(path) if r.get("adv_rms") is not None]
    if not vals:
        raise RuntimeError(f"{path} logs no adv_rms")
    return sum(vals) / len(vals)


def matched_lr(lr: float):
    """``derive`` for the lr-matched arm: ``lr x mean adv_rms(grpo) / mean adv_rms(gopo)`` of the same seed."""
    def derive(out: Path, seed: int) -> dict:
        a, b = mean_adv_rms(out, "grpo", seed), mean_adv_rms(out, "gopo", seed)
        factor = a / b
        return {"config": {"lr": lr * factor}, "lr_factor": factor, "adv_rms_grpo": a, "adv_rms_gopo": b,
                "note": f"lr = {lr:g} x {factor:.4f} = {lr * factor:.4g} (mean adv_rms: grpo {a:.4f} / gopo {b:.4f})"}
    return derive


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(p, out=RESULTS / NAME)
    p.add_argument("--noise", type=float, default=2.0, help="scale of the reward model's t_2 noise")
    p.add_argument("--strength", type=float, default=3.0, help="the distortion exp(strength * s)")
    return p


def build(args) -> Study:
    base = apply_common(args, BASE, QUICK)

    def rewards(seed: int) -> Rewards:  # a fresh reward model per run: the same noise draws in every arm of a seed
        rm = make_reward_model(args.noise, args.strength, seed)
        rm.__name__ = "reward_model"
        return Rewards([rm, arithmetic_reward, true_score], [1.0, 0.0, 0.0], arithmetic_reward)

    arms = [Arm("grpo", {"variant": "grpo"}, "GRPO: z-scores of the reward model's scores"),
            Arm("gopo", {"variant": "gopo"}, "GOPO: ranks within the group"),
            Arm("gopo_lr_matched", {"variant": "gopo"}, "GOPO at the lr that equalises the advantage RMS",
                derive=matched_lr(base["lr"]))]
    return Study(
        name=NAME, title="GOPO against GRPO on a noisy reward model" + (" (quick path)" if args.quick else ""),
        question=f"With a reward model `exp({args.strength:g} s) + {args.noise:g} t_2` (s: the answer's true quality), "
                 "does using only the ranks of its scores (GOPO) train better than their z-scores (GRPO), judged by "
                 "the real verifier on held-out prompts?",
        arms=arms, seeds=args.seeds, base=base, baseline="grpo", rewards=rewards,
        curves=("accuracy", "reward_arithmetic_reward", "reward_true_score", "reward_mean", "adv_rms",
                "completion_len"),
        budget="about 2.3 min a run, 21 min for 3 arms x 3 seeds on a quiet 2-core CPU (module docstring)",
        notes=["Columns: `reward_mean` is the reward model's score, `reward_arithmetic_reward` the share of sampled "
               "completions the verifier accepts, `reward_true_score` the hidden quality (weights 0: logged, not "
               "trained on).",
               "`gopo_lr_matched` scales GOPO's learning rate by the measured RMS ratio. AdamW normalises the update "
               "by the gradients' running RMS, so a constant advantage scale mostly cancels; read this arm as GOPO "
               "at a smaller learning rate."],
    )


def main(argv=None) -> int:
    return main_for(build, parser(), argv, default_out=RESULTS / NAME)


if __name__ == "__main__":
    raise SystemExit(main())
