"""How far does a bf16 sampler copy drift from the fp32 weights it was copied from, as training moves them?

Trains SmolLM2-135M-Instruct with the project's fp32 trainer (GRPO, arithmetic, 8 prompts x G = 8, lr 3e-5, 12 new
tokens, T = 0.7) and before each update copies the current fp32 weights into bf16 three ways -- round to nearest
(``copy_rounding="nearest"``, what ``model.to(torch.bfloat16)`` does), a fixed random threshold per weight
(``"dither"``, :class:`grpo_lessons.training.train_setup.LowPrecisionSync`) and a fresh random rounding at every copy
(stochastic rounding, for reference) -- then scores the step's sampled completions with each copy and with the fp32
model.  Printed per step: KL(copy || fp32) per token as the mean k3 of ``r = pi_fp32 / pi_copy`` over the sampled
tokens, the extreme token ratios, and the share of bf16 weights that changed since step 0.

    python benchmarks/copy_rounding.py                  # 6 steps, about 2 minutes on 2 cores
    python benchmarks/copy_rounding.py --quick          # tiny-qwen2: checks the script in seconds

Writes ``result.json`` and ``RESULT.md`` to ``--out`` (default ``benchmarks/results/copy_rounding/``).

``--train``: which sampler *learns*? The training comparison behind the 10-minute preset, as a study of the runner
(benchmarks/_study.py) with three seeds: SmolLM2-135M-Instruct, GRPO (beta = 0), arithmetic, 8 prompts x G = 8,
lr 3e-5, T = 0.7, 12 new tokens, at the precision ``--precision auto`` picks (``bf16-mixed``, a bf16 compute copy with
fp32 master weights, where the CPU multiplies bf16 in hardware; else fp32, and each bf16 arm samples from a separate
bf16 copy), 20 steps, held-out greedy accuracy on 100 prompts at steps 0, 10, 20.  Arms: the bf16 copy samples,
rounded to nearest after each update (``nearest_bf16_sampler``); the same with a separate bf16 sampler whose LM head is fp32
(``nearest_bf16_sampler_fp32_head``); the fp32 weights sample (``fp32_sampler``, the baseline); the bf16 copy with
dithered rounding, the trainer's default (``dither_bf16_sampler``).  Each arm samples from other weights, so no two
share a first batch beyond its prompts.  Budget (a quiet 2-core machine): ~6.5 s a step (~8.5 s with the fp32
sampler), 20 steps ~ 2.2-2.8 min, two evaluations of 100 prompts ~ 0.5 min: ~ 3 min a run, 4 arms x 3 seeds ~ 38 min.
The committed study ran in fp32 on an AVX2 CPU (``--precision fp32``): 2.6-3.0 min a run, 33 min in all.

    HF_HUB_OFFLINE=1 python benchmarks/copy_rounding.py --train            # ~38 min, resumable
    HF_HUB_OFFLINE=1 python benchmarks/copy_rounding.py --train --quick    # tiny-qwen2, seconds

It writes ``benchmarks/results/copy_rounding_training/`` (``runs/<arm>/seed<k>/metrics.csv``, summary, analysis,
figures, RESULT.md).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._machine import machine  # noqa: E402

from grpo_lessons.training.rollout import rollout_logps  # noqa: E402
from grpo_lessons.training.train_setup import LowPrecisionSync, low_precision_copy, round_to_bf16  # noqa: E402
from grpo_lessons.training.trainer import TrainConfig, Trainer  # noqa: E402
from grpo_lessons.training.update import mismatch_stats  # noqa: E402

ROUNDINGS = ("nearest", "dither", "stochastic")

TRAIN_NAME = "copy_rounding_training"
TRAIN_BASE = dict(task="arithmetic", variant="grpo", beta=0.0, steps=20, prompts_per_step=8, group_size=8, lr=3e-5,
                  max_new_tokens=12, temperature=0.7, eval_size=100, eval_every=10, precision="bf16-mixed",
                  kl_start_every=5)
TRAIN_QUICK = dict(steps=2, prompts_per_step=2, group_size=4, max_new_tokens=6, eval_size=4, eval_every=1,
                   micro_batch_size=8, lr=1e-3, kl_start_every=1)


def training_study(args):
    """The ``--train`` study: four samplers, the same trainer (``TrainConfig`` fields only)."""
    from benchmarks._study import Arm, Study, apply_common, quick_rewards

    base = apply_common(args, TRAIN_BASE, TRAIN_QUICK)
    arms = [
        Arm("fp32_sampler", {"sampler_dtype": None}, "the fp32 weights sample", sampling="fp32 weights"),
        Arm("nearest_bf16_sampler", {"sampler_dtype": "bfloat16", "copy_rounding": "nearest"},
            "the bf16 copy samples, rounded to nearest", sampling="bf16 nearest"),
        Arm("nearest_bf16_sampler_fp32_head", {"sampler_dtype": "bfloat16", "copy_rounding": "nearest",
                                               "sampler_fp32_head": True},
            "bf16 sampler with an fp32 LM head, rounded to nearest", sampling="bf16 nearest, fp32 head"),
        Arm("dither_bf16_sampler", {"sampler_dtype": "bfloat16", "copy_rounding": "dither"},
            "the bf16 copy samples, dithered rounding (default)", sampling="bf16 dither"),
    ]
    return Study(
        name=TRAIN_NAME, title="Which bf16 sampler learns?" + (" (quick path)" if args.quick else ""),
        question=f"Training with {base['precision']} precision, does it matter how the sampler's bf16 weights are "
                 "refreshed after each update (round to nearest, nearest with an fp32 LM head, dithered) compared "
                 "with sampling from the fp32 weights?",
        arms=arms, seeds=args.seeds, base=base, baseline="fp32_sampler",
        rewards=quick_rewards if args.quick else None,
        curves=("accuracy", "reward_mean", "entropy", "mismatch_k3", "completion_len", "kl_start"),
        budget="about 3 min a run, 38 min for 4 arms x 3 seeds on a quiet 2-core CPU (module docstring)",
        notes=["`copy_rounding` sets how every bf16 copy is refreshed, the compute copy included; with the fp32 "
               "sampler the compute copy is dithered (the default)." if base["precision"] == "bf16-mixed" else
               "The trainer computes in fp32 (no compute copy); each bf16 arm samples from a separate bf16 copy, "
               "refreshed after every update with the arm's `copy_rounding`."],
    )


def training_main(argv) -> int:
    from benchmarks._study import RESULTS, add_arguments, main_for

    p = argparse.ArgumentParser(description="copy_rounding.py --train: which bf16 sampler learns (a study)")
    add_arguments(p, out=RESULTS / TRAIN_NAME)
    return main_for(training_study, p, argv, default_out=RESULTS / TRAIN_NAME)


def stochastic_copy(pairs, gen: torch.Generator) -> None:
    """bf16 <- fp32 rounded up with probability equal to the dropped fraction, drawn afresh for every weight."""
    with torch.no_grad():
        for dst, src in pairs:
            dst.copy_(round_to_bf16(src.detach(), torch.randint(0, 1 << 16, src.shape, dtype=torch.int32, generator=gen)))


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--train" in argv:
        argv.remove("--train")
        return training_main(argv)
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    out = Path(args.out or ROOT / "benchmarks" / "results" / "copy_rounding" / ("quick" if args.quick else ""))
    out.mkdir(parents=True, exist_ok=True)
    model = "tiny-qwen2" if args.quick else "smollm2"
    with tempfile.TemporaryDirectory() as tmp:
        cfg = TrainConfig(model=model, steps=args.steps, beta=0.0, eval_size=0, out=tmp, precision="fp32",
                          prompts_per_step=2 if args.quick else 8, group_size=4 if args.quick else 8,
                          max_new_tokens=6 if args.quick else 12, lr=3e-5, seed=0, reuse_freed_memory=True)
        tr = Trainer(cfg)
        tr._start()
        copies = {r: low_precision_copy(tr.model, torch.bfloat16, trainable=False) for r in ROUNDINGS}
        pairs = {r: [(dict(c.named_parameters(remove_duplicate=False))[n], p)
                     for n, p in tr.model.named_parameters(remove_duplicate=False)] for r, c in copies.items()}
        syncs = {r: LowPrecisionSync(pairs[r], r) for r in ("nearest", "dither")}
        gen = torch.Generator().manual_seed(12345)  # not LowPrecisionSync's seed: other draws than the dither's
        first = {n: p.detach().to(torch.bfloat16) for n, p in tr.model.named_parameters()}
        total = sum(p.numel() for p in tr.model.parameters())
        rows = []
        for step in range(args.steps):
            batch = tr.prepare(tr.sample())
            row = {"updates_so_far": step}
            with torch.no_grad():
                lp32 = rollout_logps(tr.model, batch.rollout, cfg.temperature)
                for r in ROUNDINGS:
                    syncs[r]() if r in syncs else stochastic_copy(pairs[r], gen)
                    lp = rollout_logps(copies[r], batch.rollout, cfg.temperature)
                    st = mismatch_stats(lp, lp32, batch.loss_mask)  # r = pi_fp32 / pi_copy on the sampled tokens
                    row[r] = {"k3": st["mismatch_k3"], "ratio_min": st["mismatch_ratio_min"],
                              "ratio_max": st["mismatch_ratio_max"]}
                row["bf16_weights_changed_nearest"] = sum(
                    int((p.detach().to(torch.bfloat16) != first[n]).sum()) for n, p in tr.model.named_parameters()
                ) / total
            rows.append(row)
            print(f"after {step} updates: " + ", ".join(f"{r} k3 {row[r]['k3']:.5f} (ratios {row[r]['ratio_min']:.2f}"
                                                         f"-{row[r]['ratio_max']:.2f})" for r in ROUNDINGS)
                  + f"; bf16 weights changed (nearest) {row['bf16_weights_changed_nearest']:.1%}", flush=True)
            tr.update(batch)
            tr.step_count += 1
    res = {"model": model, "config": cfg.resolved(), "machine": machine(), "rows": rows}
    (out / "result.json").write_text(json.dumps(res, indent=1, default=str) + "\n")
    lines = ["# A bf16 copy of the weights, three ways to round (`benchmarks/copy_rounding.py`)", "",
             f"{model}, GRPO with the fp32 trainer, 8 prompts x G = 8, lr 3e-5, T = 0.7. Per step, before its update: "
             "KL(bf16 copy || fp32) per sampled token (mean k3) and the extreme token ratios pi_fp32 / pi_copy.", "",
             "| updates so far | nearest k3 | ratios | dither k3 | ratios | stochastic k3 | ratios | bf16 weights changed |",
             "|---|---|---|---|---|---|---|---|"]
    for row in rows:
        lines.append(f"| {row['updates_so_far']} | " + " | ".join(
            f"{row[r]['k3']:.4f} | {row[r]['ratio_min']:.2f}-{row[r]['ratio_max']:.2f}" for r in ROUNDINGS)
            + f" | {row['bf16_weights_changed_nearest']:.1%} |")
    m = res["machine"]
    lines += ["", f"Machine: {m.get('cpu')}, {m.get('logical_cpus')} logical CPUs, torch {m.get('torch')}.", ""]
    (out / "RESULT.md").write_text("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
