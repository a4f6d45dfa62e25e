"""GOPO against GRPO on a miscalibrated, noisy reward model (notebook 16): a short real CPU run.

SmolLM2-135M-Instruct on the arithmetic task, but trained on a *stand-in reward model* instead of the
verifier: a true quality score ``s`` (1 for the right answer, up to 0.5 for a near miss, 0 for no number)
passed through a monotone distortion and heavy-tailed noise,

    rm = exp(3 s) + noise * t_2        (Student-t with 2 degrees of freedom: rare, large errors)

GRPO uses the reward model's magnitudes (``group_advantages``); GOPO only its ranks within each group
(``grpo_lessons.core.advantages.rank_advantages``, average ranks for ties).  Both runs use the same seed, model,
prompts and budget; the held-out accuracy (greedy, scored by the real verifier) is measured before and after.

    HF_HUB_OFFLINE=1 python benchmarks/gopo_vs_grpo.py                 # the committed run (~10 min on 2 cores)
    HF_HUB_OFFLINE=1 python benchmarks/gopo_vs_grpo.py --quick --out /tmp/gopo   # tiny-qwen2, seconds

Writes ``steps.csv`` (one row per step and method), ``result.json`` (summary, configuration, machine, load),
``RESULT.md`` and ``curves.png`` to ``--out`` (default ``benchmarks/results/gopo_vs_grpo/``).
"""

from __future__ import annotations

import argparse
import copy
import csv
import json
import math
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._machine import machine  # noqa: E402

from grpo_lessons.training.data import get_task  # noqa: E402
from grpo_lessons.core.rewards import arithmetic_reward, completion_text, extract_answer, parse_number  # noqa: E402
from grpo_lessons.training.trainer import TrainConfig, Trainer  # noqa: E402

DEFAULT_OUT = ROOT / "benchmarks" / "results" / "gopo_vs_grpo"


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


class RankTrainer(Trainer):
    """The trainer with GOPO's advantages: ranks within each group instead of z-scores of the magnitudes."""

    def sample_batch(self):
        from grpo_lessons.core.advantages import rank_advantages

        batch = super().sample_batch()
        if len(batch.rewards):
            batch.advantages = rank_advantages(batch.rewards, self.cfg.group_size).to(batch.advantages.dtype)
        return batch


def run(args) -> dict:
    from grpo_lessons.training.models import resolve_model

    info = machine()
    model_name = "tiny-qwen2" if args.quick else "smollm2"
    base, tok = resolve_model(model_name)
    task = get_task("arithmetic")
    train_rows = task.rows("train")
    eval_rows = task.rows("test")[:args.eval_size]
    results, rows_out = {}, []
    for method, cls in (("grpo", Trainer), ("gopo", RankTrainer)):
        t0 = time.perf_counter()
        run_dir = Path(tempfile.mkdtemp(prefix=f"gopo_{method}_"))
        cfg = TrainConfig(model=model_name, task="arithmetic", variant="grpo", steps=args.steps,
                          prompts_per_step=args.prompts_per_step, group_size=args.group_size, lr=args.lr, beta=0.0,
                          max_new_tokens=args.max_new_tokens, temperature=args.temperature, eval_size=args.eval_size,
                          eval_every=0, seed=args.seed, out=str(run_dir), reuse_freed_memory=True)
        rm = make_reward_model(args.noise, args.strength, args.seed)
        trainer = cls(cfg, model=copy.deepcopy(base), tokenizer=tok, train_rows=train_rows, eval_rows=eval_rows,
                      reward_funcs=[rm, arithmetic_reward, true_score], reward_weights=[1.0, 0.0, 0.0],
                      accuracy_fn=arithmetic_reward)

        def report(h, m=method):
            r = h[-1]
            if r.get("reward_mean") is not None:
                print(f"  {m} step {r['step']}: rm {r['reward_mean']:.2f} correct "
                      f"{r.get('reward_arithmetic_reward', 0):.3f} {r['seconds']:.1f}s", flush=True)

        res = trainer.run(progress=False, callback=report)
        wall = time.perf_counter() - t0
        for r in res.history:
            if r.get("reward_mean") is None:
                continue
            rows_out.append({"method": method, "step": r["step"], "rm_reward": r["reward_mean"],
                             "correct": r.get("reward_arithmetic_reward"), "true_score": r.get("reward_true_score"),
                             "completion_len": r["completion_len"], "grad_norm": r.get("grad_norm"),
                             "seconds": r["seconds"]})
        results[method] = {"accuracy_before": res.initial_eval["accuracy"] if res.initial_eval else None,
                           "accuracy_after": res.final_eval["accuracy"] if res.final_eval else None,
                           "train_correct_first5": _mean([r["correct"] for r in rows_out if r["method"] == method][:5]),
                           "train_correct_last5": _mean([r["correct"] for r in rows_out if r["method"] == method][-5:]),
                           "minutes": round(wall / 60, 2)}
        print(method, results[method], flush=True)
        del trainer, res
        shutil.rmtree(run_dir, ignore_errors=True)
    info["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    summary = {"model": model_name, "task": "arithmetic", "results": results,
               "reward_model": f"exp({args.strength:g} * s) + {args.noise:g} * t_2 noise; s = 1 right, "
                               "0.5 * (1 - |err|/10) near miss, 0 otherwise",
               "config": {k: v for k, v in vars(args).items() if k != "out"}, "machine": info,
               "eval": f"greedy accuracy on {len(eval_rows)} held-out prompts, scored by the verifier"}
    return {"summary": summary, "steps": rows_out}


def _mean(xs):
    xs = [x for x in xs if x is not None]
    return round(sum(xs) / len(xs), 4) if xs else None


def write(out: Path, res: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "steps.csv", "w", newline="") as f:
        w = csv.DictWriter(f, list(res["steps"][0]))
        w.writeheader()
        w.writerows(res["steps"])
    s = res["summary"]
    (out / "result.json").write_text(json.dumps(s, indent=1) + "\n")
    import matplotlib.pyplot as plt  # never matplotlib.use() here: notebook 16 calls this, and its widgets need inline

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.4))
    for m, color in (("grpo", "#1f77b4"), ("gopo", "#ff7f0e")):
        rows = [r for r in res["steps"] if r["method"] == m]
        axes[0].plot([r["step"] for r in rows], [r["correct"] for r in rows], "-o", ms=3, color=color, label=m.upper())
        axes[1].plot([r["step"] for r in rows], [r["rm_reward"] for r in rows], "-o", ms=3, color=color, label=m.upper())
    axes[0].set_ylabel("share of sampled completions right")
    axes[1].set_ylabel("reward model's mean score")
    for ax in axes:
        ax.set_xlabel("step")
        ax.legend()
    m = s["machine"]
    fig.suptitle(f"{s['model']}, noisy reward model; {m['cpu']}, {m['logical_cpus']} CPUs, load {m['load_average_at_start'][0]}",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(out / "curves.png", dpi=110)
    plt.close(fig)  # written to a file, not shown in the caller's notebook
    c = s["config"]
    lines = ["# GOPO against GRPO on a noisy reward model (`benchmarks/gopo_vs_grpo.py`)", "",
             f"Model {s['model']}, arithmetic prompts, reward model `{s['reward_model']}`. {c['steps']} steps of "
             f"{c['prompts_per_step']} prompts x G = {c['group_size']}, lr {c['lr']}, beta 0, T = {c['temperature']}, "
             f"seed {c['seed']}. {s['eval']}.", "",
             "| method | held-out accuracy before | after | sampled right, first 5 steps | last 5 steps | minutes |",
             "|---|---|---|---|---|---|"]
    for k, r in s["results"].items():
        fmt = lambda x: "-" if x is None else f"{x:.1%}"  # noqa: E731
        lines.append(f"| {k.upper()} | {fmt(r['accuracy_before'])} | {fmt(r['accuracy_after'])} | "
                     f"{fmt(r['train_correct_first5'])} | {fmt(r['train_correct_last5'])} | {r['minutes']} |")
    lines += ["", f"Machine: {m['cpu']}, {m['logical_cpus']} logical CPUs, no GPU, {m['torch_threads']} torch thread(s); "
              f"load average at start {m['load_average_at_start']}, at end {m.get('load_average_at_end')} "
              "(the CPU was shared with other work: times are inflated).", "",
              "One seed and a few steps: differences of a few points are within noise "
              f"(+-{100 * math.sqrt(0.25 / max(1, c['eval_size'])):.0f} points of sampling error on the held-out accuracy).", ""]
    (out / "RESULT.md").write_text("\n".join(lines))


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=str(DEFAULT_OUT))
    p.add_argument("--quick", action="store_true")
    p.add_argument("--steps", type=int, default=15)
    p.add_argument("--prompts-per-step", type=int, default=4)
    p.add_argument("--group-size", type=int, default=8)
    p.add_argument("--lr", type=float, default=3e-5)
    p.add_argument("--max-new-tokens", type=int, default=12)
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--eval-size", type=int, default=100)
    p.add_argument("--noise", type=float, default=2.0)
    p.add_argument("--strength", type=float, default=3.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    if args.quick:
        args.steps, args.prompts_per_step, args.group_size, args.max_new_tokens, args.eval_size = 1, 2, 4, 6, 4
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    res = run(args)
    write(Path(args.out), res)
    print(json.dumps(res["summary"]["results"]))
    return 0


if __name__ == "__main__":
    import matplotlib

    matplotlib.use("Agg")  # a script: draw to files only (never in importable code, which notebooks call)
    raise SystemExit(main())
