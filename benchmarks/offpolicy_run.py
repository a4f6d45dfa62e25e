"""A short real CPU training run with a bf16 sampler, with and without a rollout correction.

SmolLM2-135M-Instruct on the arithmetic task, GRPO (beta = 0), ``TrainConfig(sampler_dtype="bfloat16")``:
the completions are sampled by a bf16 copy of the weights (resynced after every update) while the trainer
computes ``pi_old`` in fp32, so every batch is slightly off-policy (notebook 11).  Two runs with the same
seed: no correction, and ``rollout_correction="token_truncate"`` (TIS, cap 3); and, as the on-policy
reference, the fp32 model sampling itself.  Recorded per step: reward,
the trainer's mismatch columns (k3 and the min/mean/max token ratio pi_old/mu), the share the correction
changed, and the minutes.  One seed and ten steps: this shows what the correction does to a real batch
and what it costs, not which setting trains better.

    HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 python benchmarks/offpolicy_run.py            # ~12 min on 2 loaded cores
    HF_HUB_OFFLINE=1 python benchmarks/offpolicy_run.py --steps 1 --eval-size 4 --out /tmp/opr   # a probe

Writes ``benchmarks/results/offpolicy_run/``: ``<run>/metrics.csv`` (the trainer's log), ``summary.json``
(per run: reward per step, mismatch, corrected share, minutes, held-out accuracy; the machine and load) and
``runs.png``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from grpo_lessons.training.trainer import TrainConfig, train  # noqa: E402

# name -> (sampler dtype, rollout correction); the fp32-sampler run is the on-policy reference
RUNS = {"fp32_sampler": (None, None), "bf16_sampler_no_correction": ("bfloat16", None),
        "bf16_sampler_token_truncate": ("bfloat16", "token_truncate")}


def plot_runs(out: Path) -> None:
    """``runs.png``: reward per step and the mismatch k3 per step of each run, from ``summary.json``."""
    import matplotlib.pyplot as plt

    summary = json.loads((out / "summary.json").read_text())
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 3.6))
    for name, run in summary["runs"].items():
        steps = [r["step"] for r in run["per_step"]]
        a1.plot(steps, [r["reward_mean"] for r in run["per_step"]], marker="o", ms=3, label=name)
        k3 = [r.get("mismatch_k3") for r in run["per_step"]]
        if any(v is not None for v in k3):
            a2.plot(steps, k3, marker="o", ms=3, label=name)
    a1.set_xlabel("step")
    a1.set_ylabel("mean training reward (64 completions)")
    a1.legend(fontsize=8)
    a1.set_title("one seed: no ranking", fontsize=10)
    a2.set_xlabel("step")
    a2.set_ylabel("mismatch k3 per token (bf16 sampler vs fp32)")
    a2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "runs.png", dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "offpolicy_run"))
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--eval-size", type=int, default=50)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--plot-only", action="store_true", help="redraw runs.png from an existing summary.json")
    a = p.parse_args(argv)
    if a.plot_only:
        plot_runs(Path(a.out))
        return 0
    torch.set_num_threads(a.threads)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    cpu = platform.processor() or ""
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    summary = {"machine": {"cpu": cpu, "logical_cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(),
                           "gpu": None, "load_average_at_start": list(os.getloadavg())},
               "note": "one seed, 10 steps: what the correction does and costs, not a ranking", "runs": {}}
    for name, (sampler_dtype, correction) in RUNS.items():
        t0 = time.time()
        cfg = TrainConfig(model="smollm2", task="arithmetic", variant="grpo", beta=0.0, steps=a.steps, seed=a.seed,
                          eval_size=a.eval_size, eval_every=0, sampler_dtype=sampler_dtype,
                          rollout_correction=correction, out=str(out / name), reuse_freed_memory=True)
        res = train(cfg, progress=False)
        minutes = (time.time() - t0) / 60
        steps = [h for h in res.history if h.get("reward_mean") is not None]
        keys = ("reward_mean", "mismatch_k3", "mismatch_ratio_min", "mismatch_ratio_mean", "mismatch_ratio_max",
                "correction_truncated_frac", "correction_masked_frac", "loss", "grad_norm", "seconds")
        summary["runs"][name] = {
            "sampler_dtype": sampler_dtype, "rollout_correction": correction,
            "per_step": [{k: h.get(k) for k in ("step", *keys) if k in h} for h in steps],
            "reward_mean_over_steps": sum(h["reward_mean"] for h in steps) / max(len(steps), 1),
            "accuracy_before": (res.initial_eval or {}).get("accuracy"),
            "accuracy_after": (res.final_eval or {}).get("accuracy"),
            "minutes_total": round(minutes, 2),
            "config": res.config,
        }
        ck = out / name / "checkpoint.pt"
        if ck.exists():
            ck.unlink()  # hundreds of MB; the metrics are what we keep
        print(f"{name}: {minutes:.1f} min, reward over steps {summary['runs'][name]['reward_mean_over_steps']:.3f}, "
              f"accuracy {summary['runs'][name]['accuracy_before']} -> {summary['runs'][name]['accuracy_after']}",
              flush=True)
    summary["machine"]["load_average_at_end"] = list(os.getloadavg())
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    plot_runs(out)
    return 0


if __name__ == "__main__":
    import matplotlib

    matplotlib.use("Agg")  # a script: draw to files only (never in importable code, which notebooks call)
    raise SystemExit(main())
