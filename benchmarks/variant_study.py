"""The variant study: GRPO at beta = 0 against the variants the course's notebooks read, and against single changes.

SmolLM2-135M-Instruct (offline) on the arithmetic task.  Every arm is chosen by its registry name; the baseline is
GRPO with beta = 0, and every arm has beta = 0 unless beta is what it changes, so that a difference comes from the
arm's named pieces, not from a KL term only one arm has (GRPO's paper default, beta = 0.04, is its own arm).  The
arms:

* ``grpo``: the baseline (group z-scores, token ratios clipped to [0.8, 1.2], each completion's mean);
* single changes on GRPO: ``grpo_beta`` (beta = 0.04: a reference model and the k3 penalty),
  ``grpo_clip_higher`` (DAPO's epsilon_high = 0.28 alone);
* the variants notebooks 06-10 read, at their registry defaults: ``dr_grpo``, ``dapo`` (clip-higher, token-mean
  loss, dynamic sampling, overlong filtering), ``gspo``, ``sapo``, ``2-grpo``;
* equal samples: ``2-grpo`` samples the same completions per step as GRPO (G = 2 over four times the prompts), and
  ``dapo_equal_completions`` is DAPO stopped once it has sampled as many completions as GRPO does in its steps
  (dynamic sampling refills all-equal groups, so plain ``dapo`` spends more samples per step).

Shared: one learning rate (2e-5, lower than the earlier 3e-5 so that the second pass keeps most ratios inside GRPO's
clip range), mu = 2 optimiser steps per sampled batch (with mu = 1 every ratio is exactly 1 and the clipped, gated
and IS-weighted objectives give the same gradient), 8 prompts x G = 8 per step, 4 steps, 12 new tokens, T = 0.7,
fp32, the trained weights sample.  The same seed gives the same first batch in every arm that samples the same way
(``study.json``'s ``sampling`` labels; the trainer's ``batch_hash`` column shows it).  Held-out greedy accuracy on 100
prompts at steps 0, 2 and 4; each arm is judged on its gain and on ``gain_last2`` (the mean of the last two
evaluations minus before), with Holm's correction over the comparisons to the baseline.

Budget, written before the runs: ~1.1 min a run (fp32, 2 cores), 9 arms x 5 seeds ~ 50 min.  Stopping rule: all
five seeds of every arm run; none is added or dropped after looking.

    HF_HUB_OFFLINE=1 python benchmarks/variant_study.py --precision fp32        # the study (~50 min, resumable)
    HF_HUB_OFFLINE=1 python benchmarks/variant_study.py --quick                 # tiny-qwen2, every arm, seconds
    HF_HUB_OFFLINE=1 python benchmarks/variant_study.py --variants grpo gspo cispo vespo --seeds 0 1 2
                                                           # any registered variants at one budget, beta 0 for all
    HF_HUB_OFFLINE=1 python benchmarks/variant_study.py --analyse-only          # summary, figures, RESULT.md again
    python benchmarks/variant_study.py --model Qwen/Qwen2.5-0.5B-Instruct --device cuda --prompts-per-step 32 \\
        --out benchmarks/results/variant_study_qwen05b                          # the GPU version (hub access needed)

Writes ``benchmarks/results/variant_study/``: ``runs/<arm>/seed<k>/metrics.csv`` (+ ``run.json``, ``config.json``),
``summary.csv``, ``analysis.json``, ``curves.png``, ``gains.png``, ``RESULT.md`` (the package's study runner).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks._study import RESULTS, Arm, Study, add_arguments, apply_common, main_for, quick_rewards  # noqa: E402

from grpo_lessons.core.variants import get_variant, list_variants  # noqa: E402

NAME = "variant_study"
#: The variants notebooks 06-10 read from this study (each needs an arm of its name).
REQUIRED = ("grpo", "dr_grpo", "dapo", "gspo", "2-grpo", "sapo")
#: Single changes on the baseline: (arm name, TrainConfig overrides on top of ``{"variant": "grpo"}``, label).
SINGLE_CHANGES = (("grpo_beta", {"beta": 0.04}, "GRPO, beta = 0.04 (its paper default; the only change)"),
                  ("grpo_clip_higher", {"epsilon_high": 0.28}, "GRPO + clip-higher (epsilon_high = 0.28, alone)"))
BASE = dict(task="arithmetic", steps=4, prompts_per_step=8, group_size=8, lr=2e-5, beta=0.0, mu=2, max_new_tokens=12,
            temperature=0.7, eval_size=100, eval_every=2, eval_batch_size=50, micro_batch_size=32,
            precision="bf16-mixed", sampler_dtype="bfloat16", copy_rounding="dither", kl_start_every=1)
QUICK = dict(model="tiny-qwen2", steps=2, prompts_per_step=2, group_size=4, max_new_tokens=6, eval_size=4,
             eval_every=1, kl_start_every=1, micro_batch_size=8, lr=1e-3)
METRICS = ("gain_last2", "entropy_last5", "clip_frac_mean", "clip_frac_high_mean", "kl_start_last",
           "completions_sampled_total", "frac_zero_std_mean")


def default_variants() -> list[str]:
    """The variants the notebooks read (ValueError if the registry lacks one)."""
    have = set(list_variants())
    missing = [v for v in REQUIRED if v not in have]
    if missing:
        raise ValueError(f"the registry lacks required variants {missing}")
    return list(REQUIRED)


def sampling_label(variant: str, prompts: int, group_size: int) -> str:
    """Arms with the same label sample the same first batch for a seed: the same prompts and G, no refill of
    all-equal groups (dynamic sampling keeps other groups), the same draw (DPPO top-K records the sampler's top-K)."""
    v = get_variant(variant)
    g = v.fixed_group_size or group_size
    label = f"{prompts * group_size // g} prompts x G={g}"
    if v.train_defaults.get("dynamic_sampling"):
        label += ", dynamic sampling"
    if v.objective_piece.divergence_kind(v.loss_defaults) is not None:  # DPPO's top-K variants record the top-K
        label += ", top-K recorded"
    return label


def arms_for(variants: list[str], prompts: int, group_size: int) -> list[Arm]:
    """One arm per variant, named by it; a variant defined by its G (2-GRPO) gets the prompts that keep the
    completions per step equal."""
    arms = []
    for name in variants:
        v = get_variant(name)
        cfg = {"variant": name}
        if v.fixed_group_size is not None:
            g = v.fixed_group_size
            if (prompts * group_size) % g:
                raise ValueError(f"{prompts} x {group_size} completions cannot be split into groups of {g} for {name}")
            cfg.update(group_size=g, prompts_per_step=prompts * group_size // g)
        arms.append(Arm(name=name, config=cfg, label=v.title, sampling=sampling_label(name, prompts, group_size)))
    return arms


def default_arms(base: dict) -> list[Arm]:
    """The study's design: the baseline, the single changes, the notebooks' variants, DAPO at equal samples."""
    prompts, g = base["prompts_per_step"], base["group_size"]
    by_name = {a.name: a for a in arms_for(default_variants(), prompts, g)}
    shared = by_name["grpo"].sampling
    singles = [Arm(name, {"variant": "grpo", **cfg}, label, sampling=shared) for name, cfg, label in SINGLE_CHANGES]
    budget = base["steps"] * prompts * g  # what GRPO samples in its steps
    dapo = by_name["dapo"]
    equal = Arm("dapo_equal_completions", {**dapo.config, "steps": 4 * base["steps"], "max_completions": budget},
                f"DAPO at GRPO's sample budget ({budget} completions)", sampling=dapo.sampling)
    return [by_name["grpo"], *singles, *(by_name[v] for v in REQUIRED[1:]), equal]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(p, out=RESULTS / NAME)
    p.add_argument("--variants", nargs="+", default=None,
                   help="variant names, or 'all' (every registered variant), one arm each at one budget; default: "
                        "the study's design (the baseline, single changes, the notebooks' variants, DAPO at equal "
                        "samples)")
    p.add_argument("--mu", type=int, default=None, help="optimiser steps per sampled batch (default 2; see above)")
    p.add_argument("--beta", type=float, default=None,
                   help="one KL coefficient for every arm (default 0; grpo_beta keeps its 0.04)")
    return p


def build(args) -> Study:
    base = apply_common(args, BASE, QUICK)
    if args.mu is not None:
        base["mu"] = args.mu
    if args.beta is not None:
        base["beta"] = args.beta
    if args.variants == ["all"]:
        arms = arms_for(list_variants(), base["prompts_per_step"], base["group_size"])
    elif args.variants:
        for v in args.variants:
            get_variant(v)  # an unknown name fails here, listing the known ones
        arms = arms_for(list(args.variants), base["prompts_per_step"], base["group_size"])
    else:
        arms = default_arms(base)
    names = [a.name for a in arms]
    return Study(
        name=NAME, title="GRPO variants on SmolLM2-135M-Instruct, arithmetic" if not args.quick
        else "GRPO variants (quick path, tiny-qwen2)",
        question="Against GRPO at beta = 0, does a single change (the KL term, clip-higher) or a variant at its "
                 "paper defaults change held-out accuracy after the same short budget, and what does each change "
                 "on the way (entropy, clipping, KL to the start, samples spent)?",
        arms=arms, seeds=args.seeds, base=base, baseline="grpo" if "grpo" in names else names[0],
        rewards=quick_rewards if args.quick else None,  # None: the task's verifier
        curves=("accuracy", "reward_mean", "completion_len", "entropy", "clip_frac", "kl_start"),
        extra_metrics=METRICS,
        budget=f"about 1.1 min a run on a quiet 2-core CPU in fp32, {1.1 * len(arms) * len(args.seeds):.0f} min for "
               f"{len(arms)} arms x {len(args.seeds)} seeds (module docstring); stopping rule: every seed of every "
               "arm runs, none added or dropped after looking",
        notes=["Every arm has beta = 0 except `grpo_beta`; the shared settings are the learning rate, the completions "
               "per step, the steps, mu = 2 (so that the ratios leave 1 on the second pass and clipping can act) and "
               "the sampler. `dapo` samples extra rounds to refill all-equal groups (`completions_sampled_total`); "
               "`dapo_equal_completions` stops at GRPO's sample budget, so it takes fewer steps.",
               "`gain_last2`: the mean of the last two held-out evaluations (steps 2 and 4) minus before; "
               "`kl_start_last`: the KL to the start weights at the last step; `clip_frac_mean`: the share of "
               "clipped tokens (sequences for GSPO) over both passes and all steps."],
    )


def main(argv=None) -> int:
    return main_for(build, parser(), argv, default_out=RESULTS / NAME)


if __name__ == "__main__":
    raise SystemExit(main())
