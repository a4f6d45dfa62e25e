"""Our trainer vs TRL's GRPOTrainer on the same CPU, model, task and settings, run alternately in one process.

SmolLM2-135M-Instruct (offline), the arithmetic task, 8 prompts x G = 8, 12 new tokens, T = 0.7, beta = 0, one
optimiser update per sampled batch (TRL: ``num_iterations=1``, ``steps_per_generation`` = accumulation steps),
micro-batches of 32 completions on both sides, no gradient checkpointing.  Each TRL step is followed by one of ours
(a TRL callback runs it), so both see the same machine load.  Two precisions:

* ``fp32``: everything in float32 (the default of both).
* ``bf16``: ours with ``precision="bf16-mixed"`` + ``sampler_dtype="bfloat16"``; TRL with ``bf16=True`` (autocast).

Printed and written to ``--out`` (default ``benchmarks/results/trainer_vs_trl/``): seconds per step of each, the
ratio, a per-phase breakdown (generation + scoring, training forward, backward, optimiser; TRL's phases come from
timing its ``_generate_and_score_completions``, ``compute_loss`` and ``training_step``), and the machine's
measured fp32 / bf16 matmul GFLOP/s.  ``result.json`` + ``RESULT.md``.

    python benchmarks/trainer_vs_trl.py                 # the real comparison, ~6 min on 2 cores
    python benchmarks/trainer_vs_trl.py --steps 1       # shorter
    python benchmarks/trainer_vs_trl.py --quick         # tiny-qwen2, seconds: checks the script itself

The first step of each trainer is a warm-up and is reported separately, not averaged.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._machine import cpu_name  # noqa: E402

PHASES = ("generate", "forward", "backward", "optimizer")


def matmul_gflops(dtype: torch.dtype, n: int = 1024, seconds: float = 1.0) -> float:
    """Measured GFLOP/s of an n x n matmul in ``dtype`` with the current thread count."""
    a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
    a @ b
    reps, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        a @ b
        reps += 1
    return 2 * n ** 3 * reps / (time.perf_counter() - t0) / 1e9


def machine() -> dict:
    cpu = cpu_name()
    return {"cpu": cpu, "logical_cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "torch": torch.__version__, "python": platform.python_version(), "load_average": os.getloadavg()}


def settings(quick: bool) -> dict:
    if quick:
        return dict(model="tiny-qwen2", prompts=2, G=4, max_new_tokens=6, micro=8)
    return dict(model="smollm2", prompts=8, G=8, max_new_tokens=12, micro=32)


def rows_for(n: int) -> list[dict]:
    from grpo_lessons.training.data import get_task

    return get_task("arithmetic").rows("train")[:n]


# Our trainer as the issue measured it (13.4 s/step at these settings): fp32, PyTorch's fused CPU attention, glibc's
# default allocator, the per-parameter AdamW.  Run first, before anything in the process changes the allocator.
BASELINE = dict(attn_implementation=None, reuse_freed_memory=False, optimizer="adamw")


def our_trainer(s: dict, precision: str, rows: list[dict], out: str, **overrides):
    from grpo_lessons.core.rewards import arithmetic_reward
    from grpo_lessons.training.trainer import TrainConfig, Trainer

    bf16 = precision == "bf16"
    cfg = TrainConfig(model=s["model"], task="arithmetic", variant="grpo", steps=10_000, prompts_per_step=s["prompts"],
                      group_size=s["G"], lr=3e-5, beta=0.0, mu=1, max_new_tokens=s["max_new_tokens"], temperature=0.7,
                      eval_size=0, micro_batch_size=s["micro"], seed=0, out=out,
                      precision="bf16-mixed" if bf16 else "fp32", sampler_dtype="bfloat16" if bf16 else None,
                      **{"reuse_freed_memory": True, **overrides})
    return Trainer(cfg, train_rows=rows, reward_funcs=[arithmetic_reward])


class _Timer:
    """Wraps a bound method and adds up the seconds spent in it."""

    def __init__(self, obj, name: str) -> None:
        self.total, self._f = 0.0, getattr(obj, name)
        setattr(obj, name, self)

    def __call__(self, *a, **kw):
        t0 = time.perf_counter()
        try:
            return self._f(*a, **kw)
        finally:
            self.total += time.perf_counter() - t0


def run_pair(s: dict, precision: str, steps: int, rows: list[dict], tmp: str) -> dict:
    """``steps + 1`` TRL steps, each followed by one of our steps; returns both sides' per-step phase times."""
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOTrainer

    from grpo_lessons.training.models import resolve_model
    from grpo_lessons.core.rewards import arithmetic_reward
    from grpo_lessons.integrations.trl_bridge import grpo_config

    ours = our_trainer(s, precision, rows, os.path.join(tmp, f"ours-{precision}"))
    ours._start()
    model, tok = resolve_model(s["model"])
    n = s["prompts"] * s["G"]
    accum = n // s["micro"]
    cfg = grpo_config(
        "grpo", output_dir=os.path.join(tmp, f"trl-{precision}"), per_device_train_batch_size=s["micro"],
        gradient_accumulation_steps=accum, steps_per_generation=accum, num_generations=s["G"],
        max_completion_length=s["max_new_tokens"], temperature=0.7, top_k=0, top_p=1.0, beta=0.0, num_iterations=1,
        learning_rate=3e-5, max_steps=steps + 1, logging_steps=10**6, disable_tqdm=True, save_strategy="no", seed=0, use_cpu=True,
        bf16=precision == "bf16", gradient_checkpointing=False, log_completions=False, dataloader_num_workers=0)
    ds = Dataset.from_list([{"prompt": r["prompt"], "answer": r["answer"]} for r in rows])
    trl = GRPOTrainer(model=model, args=cfg, processing_class=tok, train_dataset=ds, reward_funcs=[arithmetic_reward])
    gen = _Timer(trl, "_generate_and_score_completions")
    loss = _Timer(trl, "compute_loss")
    tstep = _Timer(trl, "training_step")
    trl_rows, our_rows = [], []

    class Alternate(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            self.t0 = time.perf_counter()
            self.marks = (gen.total, loss.total, tstep.total)

        def on_step_end(self, args, state, control, **kw):
            total = time.perf_counter() - self.t0
            g, fwd, ts = gen.total - self.marks[0], loss.total - self.marks[1], tstep.total - self.marks[2]
            trl_rows.append({"seconds": total, "generate": g, "forward": fwd, "backward": ts - g - fwd,
                             "optimizer": total - ts})
            r = ours.step()  # ours right after: the same load
            our_rows.append({**our_phases(r), "reward_mean": r["reward_mean"], "mismatch_k3": r["mismatch_k3"]})
            print(f"  [{precision}] step {len(trl_rows)}: TRL {total:.2f} s, ours {r['seconds']:.2f} s", flush=True)

    trl.add_callback(Alternate())
    trl.train()
    return {"trl": trl_rows, "ours": our_rows}


def our_phases(row: dict) -> dict:
    """One of our ``metrics.csv`` rows as the benchmark's step record: seconds and the time of each phase."""
    return {"seconds": row["seconds"], "generate": row["time_sample"], "forward": row["time_forward"],
            "backward": row["time_backward"], "optimizer": row["time_optimizer"]}


def run_baseline(s: dict, steps: int, rows: list[dict], tmp: str) -> list[dict]:
    """``steps + 1`` of our fp32 steps with the issue's settings (:data:`BASELINE`), alone."""
    tr = our_trainer(s, "fp32", rows, os.path.join(tmp, "ours-baseline"), **BASELINE)
    tr._start()
    out = []
    for i in range(steps + 1):
        r = tr.step()
        out.append(our_phases(r))
        print(f"  [baseline] step {i + 1}: ours {r['seconds']:.2f} s", flush=True)
    return out


def summarise(rows: list[dict]) -> dict:
    timed = rows[1:] or rows  # the first step is a warm-up
    out = {"warmup_seconds": rows[0]["seconds"], "steps_timed": len(timed),
           "s_per_step": statistics.mean(r["seconds"] for r in timed)}
    for p in PHASES:
        out[p] = statistics.mean(r[p] for r in timed)
    return out


def markdown(res: dict) -> str:
    m, s = res["machine"], res["settings"]
    lines = [
        "# Our trainer vs TRL's GRPOTrainer (`benchmarks/trainer_vs_trl.py`)",
        "",
        f"{s['model']}, arithmetic, {s['prompts']} prompts x G = {s['G']}, {s['max_new_tokens']} new tokens, T = 0.7, "
        f"beta = 0, one update per batch, micro-batches of {s['micro']}; run alternately in one process, "
        f"{res['steps']} timed step(s) each after one warm-up step.",
        "",
        "| precision | TRL s/step | ours s/step | TRL / ours | ours: generate | forward | backward | optimiser "
        "| TRL: generate | forward | backward | optimiser |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    base = res.get("baseline")
    if base:
        lines.append(f"| fp32, the issue's settings | | {base['s_per_step']:.2f} | | "
                     + " | ".join(f"{base[p]:.2f}" for p in PHASES) + " | | | | |")
    for prec, r in res["results"].items():
        o, t = r["ours"], r["trl"]
        lines.append(f"| {prec} | {t['s_per_step']:.2f} | {o['s_per_step']:.2f} | {t['s_per_step'] / o['s_per_step']:.2f}x | "
                     + " | ".join(f"{o[p]:.2f}" for p in PHASES) + " | " + " | ".join(f"{t[p]:.2f}" for p in PHASES)
                     + " |")
    g = res["matmul_gflops"]
    if base:
        lines += ["", "Ours now vs ours with the issue's settings (fp32, PyTorch's fused CPU attention, glibc's default "
                  "allocator, per-parameter AdamW), measured first in the same process: "
                  + ", ".join(f"{prec} {base['s_per_step'] / r['ours']['s_per_step']:.2f}x faster"
                              for prec, r in res["results"].items()) + ". "
                  "Our trainer makes glibc keep freed memory for reuse process-wide, so TRL's steps, which run after "
                  "it in the same process, get that too."]
    lines += [
        "",
        f"Matmul ({res['matmul_n']} x {res['matmul_n']}, {m['torch_threads']} thread(s)): fp32 {g['float32']:.0f} GFLOP/s, "
        f"bf16 {g['bfloat16']:.0f} GFLOP/s.",
        "",
        f"Machine: {m['cpu']}, {m['logical_cpus']} logical CPUs, {m['torch_threads']} torch threads, torch {m['torch']}; "
        f"load average at start {tuple(round(x, 2) for x in m['load_average'])}, at end "
        f"{tuple(round(x, 2) for x in res['load_average_end'])}.",
        "",
        f"Note: {res['note']}",
        "",
    ]
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=2, help="timed steps per trainer and precision (after 1 warm-up)")
    p.add_argument("--quick", action="store_true", help="tiny-qwen2, 2 prompts x 4, 6 tokens: a seconds-long check")
    p.add_argument("--precisions", nargs="+", default=["fp32", "bf16"], choices=["fp32", "bf16"])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", default=None, help="default: benchmarks/results/trainer_vs_trl[/quick]")
    p.add_argument("--note", default="")
    p.add_argument("--no-baseline", action="store_true", help="skip our fp32 steps with the issue's settings")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    out = Path(args.out or ROOT / "benchmarks" / "results" / "trainer_vs_trl" / ("quick" if args.quick else ""))
    out.mkdir(parents=True, exist_ok=True)
    s = settings(args.quick)
    info = machine()
    mm_n = 256 if args.quick else 1024
    gflops = {str(d).split(".")[-1]: round(matmul_gflops(d, mm_n, 0.2 if args.quick else 2.0), 1)
              for d in (torch.float32, torch.bfloat16)}
    print(f"matmul GFLOP/s ({args.threads} threads): {gflops}", flush=True)
    rows = rows_for(64 if args.quick else 400)
    results = {}
    baseline = None
    with tempfile.TemporaryDirectory(prefix="trainer-vs-trl-") as tmp:
        if not args.no_baseline:
            baseline = summarise(run_baseline(s, args.steps, rows, tmp))
            print(f"baseline (the issue's settings): ours {baseline['s_per_step']:.2f} s/step", flush=True)
        for prec in args.precisions:
            pair = run_pair(s, prec, args.steps, rows, tmp)
            results[prec] = {"ours": summarise(pair["ours"]), "trl": summarise(pair["trl"]), "raw": pair}
            o, t = results[prec]["ours"]["s_per_step"], results[prec]["trl"]["s_per_step"]
            print(f"{prec}: TRL {t:.2f} s/step, ours {o:.2f} s/step, TRL/ours {t / o:.2f}x; ours by phase "
                  + ", ".join(f"{ph} {results[prec]['ours'][ph]:.2f}" for ph in PHASES), flush=True)
    res = {"settings": s, "steps": args.steps, "threads": args.threads, "matmul_gflops": gflops, "matmul_n": mm_n,
           "machine": info, "baseline": baseline, "baseline_settings": BASELINE,
           "results": results, "load_average_end": os.getloadavg(),
           "note": args.note or "2-core VM shared with other work while this ran unless the load average says otherwise"}
    (out / "result.json").write_text(json.dumps(res, indent=1, default=str) + "\n")
    (out / "RESULT.md").write_text(markdown(res))
    print(markdown(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
