"""The variant study: every GRPO variant of the registry trained on a real model, three seeds each, one budget.

SmolLM2-135M-Instruct (offline) on the arithmetic task, on the trainer's fast CPU path (``precision="bf16-mixed"``:
a bf16 compute copy with fp32 master weights; the sampler is that bf16 copy, resynced with dithered rounding, as
in ``benchmarks/cpu_learning.py --preset ten-minutes``).  Every variant is chosen by its registry name and runs at
its paper defaults from the registry (clip ranges, gates, aggregation, advantage scale, beta, dynamic sampling,
overlong filtering: ``get_variant(name).loss_defaults`` / ``train_defaults`` as ``TrainConfig.resolve`` applies
them), except what the comparison must hold fixed:

* one learning rate for all, 3e-5: chosen once, on GRPO, by ``benchmarks/cpu_learning.py`` (the 30-minute and
  10-minute runs); the papers' 1e-6 is for models ten to a hundred times larger and moves a 135M model very little
  in 12 steps;
* the same number of completions sampled per step: 8 prompts x G = 8 = 64; 2-GRPO, defined by G = 2, gets 32
  prompts x 2 (its paper's "same budget" comparison); DAPO's dynamic sampling draws extra rounds when groups are
  all-equal (at most 4; the ``completions_sampled`` column counts them) and trains on 8 informative groups;
* the same steps, the same seeds 0, 1, 2, and ``mu = 2`` optimiser steps per sampled batch (TRL
  ``num_iterations = 2``).  Why mu = 2: with mu = 1 the batch is used once, right after sampling, so every
  importance ratio is exactly 1; the clipped, gated and IS-weighted objectives then give the same gradient and GRPO,
  GSPO and SAPO would be the same algorithm here (CISPO, DAPO and BNPO likewise, up to their masks).  The second
  pass has ratios away from 1, which is where those variants differ (the papers' settings are further off-policy:
  several mini-batch updates per rollout);
* 12 new tokens (the task's), T = 0.7; DAPO's soft overlong penalty is not applied (its 4096-token buffer belongs
  to a 20k-token budget; ``overlong_cache_len`` stays off), its overlong *filtering* is (registry default).

A paired design: the same seed gives the same first batch in every arm that samples the same way (the arms with
the same ``sampling`` label in ``study.json``; the trainer's ``batch_hash`` column shows it).

Measured per step (the trainer's ``metrics.csv``): reward, completion length, truncation, sampler token entropy, clip
fractions (low/high), KL to the start weights (``kl_start``, every 2 steps), advantage RMS, gradient norm; held-out
greedy accuracy on 100 prompts (one run's standard error at most 5 points) at steps 0, 4, 8, 12.  Step 0 is
evaluated once for the whole study and reused (the same weights and prompts give the same greedy answers).

Cost estimate (a quiet 2-core machine, 2 threads), from the committed 10-minute preset
(``benchmarks/results/cpu_learning_10min/metrics.csv``: 16 prompts x 8 on the same fast path, about 12 s a step --
sampling 3.4-4.0 s, forward 2.6 s, backward 5.0-5.5 s, optimiser 0.2 s -- and 26 s per greedy evaluation of 200
prompts): at 8 x 8 with mu = 2, sampling ~2 s + pi_old forward ~1.3 s + 2 x (1.3 + 2.7 + 0.2) s ~ 12 s a step, so
12 steps ~ 2.4 min, three evaluations of 100 prompts ~ 0.3 min, copying the model and writing/deleting the
checkpoint ~ 0.2 min: ~ 2.9 min a run.  The 11 required variants x 3 seeds = 33 runs ~ 1.6 hours, plus ~1 min to
load the model and evaluate it once; bnpo, gdpo and rloo (which the registry also has) add ~26 min
(``--variants`` with their names; the default list runs all 14).  GRPO's reference model (beta =
0.04) adds ~1.3 s a step, DAPO's extra sampling rounds up to ~2 s each, ``kl_start`` ~0.6 s a step on average.
Check the first runs' minutes (``run.json``; the runner prints the pace) and lower ``--steps`` if the machine is
slower.

    HF_HUB_OFFLINE=1 python benchmarks/variant_study.py                       # the 14 default variants (~2.1 h, resumable)
    HF_HUB_OFFLINE=1 python benchmarks/variant_study.py --quick               # tiny-qwen2, every arm, seconds
    HF_HUB_OFFLINE=1 python benchmarks/variant_study.py --variants grpo gspo dapo --seeds 0 1 2
    HF_HUB_OFFLINE=1 python benchmarks/variant_study.py --analyse-only        # summary, figures, RESULT.md again
    python benchmarks/variant_study.py --model Qwen/Qwen2.5-0.5B-Instruct --device cuda --prompts-per-step 32 \\
        --out benchmarks/results/variant_study_qwen05b                        # the GPU version (hub access needed)

Writes ``benchmarks/results/variant_study/``: ``runs/<variant>/seed<k>/metrics.csv`` (+ ``run.json``,
``config.json``), ``summary.csv`` (``variant, seed, accuracy_before, accuracy_after, ...``), ``analysis.json``,
``curves.png``, ``gains.png``, ``RESULT.md`` (benchmarks/_study.py).
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
#: The variants the study must cover, then the ones it adds when the registry has them.
REQUIRED = ("grpo", "dr_grpo", "dapo", "gspo", "2-grpo", "sapo", "cispo", "vespo", "dppo_binary_tv", "scalerl", "gopo")
OPTIONAL = ("bnpo", "gdpo", "rloo")
BASE = dict(task="arithmetic", steps=12, prompts_per_step=8, group_size=8, lr=3e-5, mu=2, max_new_tokens=12,
            temperature=0.7, eval_size=100, eval_every=4, eval_batch_size=50, micro_batch_size=32,
            precision="bf16-mixed", sampler_dtype="bfloat16", copy_rounding="dither", kl_start_every=2)
QUICK = dict(model="tiny-qwen2", steps=2, prompts_per_step=2, group_size=4, max_new_tokens=6, eval_size=4,
             eval_every=1, kl_start_every=1, micro_batch_size=8, lr=1e-3)


def default_variants() -> list[str]:
    """The required variants and the optional ones the registry has, in that order (ValueError if a required one
    is missing from the registry)."""
    have = set(list_variants())
    missing = [v for v in REQUIRED if v not in have]
    if missing:
        raise ValueError(f"the registry lacks required variants {missing}")
    return list(REQUIRED) + [v for v in OPTIONAL if v in have]


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


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(p, out=RESULTS / NAME)
    p.add_argument("--variants", nargs="+", default=None,
                   help="variant names, or 'all' (every registered variant); default: the required list and the "
                        "optional ones the registry has")
    p.add_argument("--mu", type=int, default=None, help="optimiser steps per sampled batch (default 2; see above)")
    p.add_argument("--beta", type=float, default=None, help="one KL coefficient for all (default: each variant's)")
    return p


def build(args) -> Study:
    base = apply_common(args, BASE, QUICK)
    if args.mu is not None:
        base["mu"] = args.mu
    if args.beta is not None:
        base["beta"] = args.beta
    if args.variants == ["all"]:
        variants = list_variants()
    elif args.variants:
        variants = list(args.variants)
        for v in variants:
            get_variant(v)  # an unknown name fails here, listing the known ones
    else:
        variants = default_variants()
    arms = arms_for(variants, base["prompts_per_step"], base["group_size"])
    return Study(
        name=NAME, title="GRPO variants on SmolLM2-135M-Instruct, arithmetic" if not args.quick
        else "GRPO variants (quick path, tiny-qwen2)",
        question="Which of the chapter's GRPO variants, each at its paper defaults and one shared learning rate, "
                 "changes held-out accuracy after the same short budget, and which changes length, entropy or "
                 "clipping on the way?",
        arms=arms, seeds=args.seeds, base=base, baseline="grpo" if "grpo" in variants else variants[0],
        rewards=quick_rewards if args.quick else None,  # None: the task's verifier
        curves=("accuracy", "reward_mean", "completion_len", "entropy", "clip_frac", "kl_start"),
        budget=f"about 2.9 min a run on a quiet 2-core CPU, {2.9 * len(arms) * len(args.seeds) / 60:.1f} h for "
               f"{len(arms)} variants x {len(args.seeds)} seeds (module docstring)",
        notes=["Each variant runs at its registry defaults; the shared settings are the learning rate, the "
               "completions per step, the steps, mu = 2 (so that the ratios leave 1 and clipping can act) and the "
               "sampler. GRPO's default beta = 0.04 loads a reference model; the others have beta = 0."],
    )


def main(argv=None) -> int:
    return main_for(build, parser(), argv, default_out=RESULTS / NAME)


if __name__ == "__main__":
    raise SystemExit(main())
