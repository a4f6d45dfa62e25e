"""Each variant against plain GRPO on the same task, seed, initial weights and rollout budget (not a test).

    python benchmarks/compare_variants.py --model smollm2 --steps 30            # the honest comparison
    python benchmarks/compare_variants.py --model tiny-qwen2 --toy-reward       # seconds: mechanics only

For every variant in ``--variants`` (plain ``grpo`` is always run first) it trains with
``grpo_lessons.training.trainer`` through :func:`grpo_lessons.course.viz.comparison.run_comparison`: the same ``TrainConfig`` except
the variant (2-GRPO gets G = 2 and G/2 times the prompts: the same completions per step). The registry's paper
defaults that change the *budget* (G = 16 for DAPO, beta = 0.04 for GRPO) are not applied; each variant's own
trainer switches (DAPO: dynamic sampling, overlong filtering) are, so DAPO may sample more completions — the
``completions_sampled`` column says how many.

Writes, under ``--out`` (default ``benchmarks/results/compare_variants/``), with ``<tag>`` = ``--tag`` or the model:
``<tag>_steps.csv`` (one row per variant and step), ``<tag>_summary.csv`` (per variant: means over the steps, first and
last held-out accuracy, wall time), ``<tag>.png`` (curves) and ``<tag>_machine.json`` (the machine, library versions,
thread count, load average, the command and the configuration).

The tiny model is untrained and scores 0 on arithmetic; ``--toy-reward`` scores "the completion begins with a digit"
instead, so that groups are mixed and the losses have something to push on. Its numbers measure the machinery
(time per step, clipping, rollouts), never which variant learns better.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import sys
import time
from pathlib import Path

DEFAULT_VARIANTS = ("dr_grpo", "dapo", "gspo", "sapo", "2-grpo")


def starts_with_digit(completions, **kwargs):
    """Toy reward for an untrained model: 1.0 if the completion begins with a digit."""
    from grpo_lessons.core.rewards.extract import completion_text

    return [1.0 if completion_text(c)[:1].isdigit() else 0.0 for c in completions]


def machine_info(threads: int) -> dict:
    import torch
    import transformers
    import trl

    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as f:
            names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
        cpu = names[0] if names else cpu
    except OSError:
        pass
    try:
        load = os.getloadavg()
    except OSError:
        load = None
    return {
        "platform": platform.platform(), "python": sys.version.split()[0], "cpu": cpu, "cpu_count": os.cpu_count(),
        "torch_threads": threads, "load_average_at_start": load, "torch": torch.__version__,
        "transformers": transformers.__version__, "trl": trl.__version__,
        "cuda": torch.cuda.is_available(), "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="tiny-qwen2", help="tiny-qwen2, tiny-qwen3, smollm2, a hub name or a path")
    p.add_argument("--task", default="arithmetic")
    p.add_argument("--variants", nargs="+", default=list(DEFAULT_VARIANTS), help="compared against grpo")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--prompts", type=int, default=4, help="prompts per step (2-GRPO: x group_size/2)")
    p.add_argument("--group-size", type=int, default=4)
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--lr", type=float, default=2e-5)
    p.add_argument("--mu", type=int, default=1, help="optimiser steps per batch (TRL num_iterations)")
    p.add_argument("--beta", type=float, default=0.0, help="KL coefficient for every variant (same budget)")
    p.add_argument("--eval-size", type=int, default=0, help="held-out prompts evaluated at the start and the end")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="torch threads (1 is fastest on a busy 2-core machine)")
    p.add_argument("--toy-reward", action="store_true",
                   help="score 'begins with a digit' (for the untrained tiny model)")
    p.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "compare_variants"))
    p.add_argument("--tag", default=None, help="file name prefix (default: the model name)")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import torch

    torch.set_num_threads(args.threads)
    import matplotlib.pyplot as plt

    from grpo_lessons.training.models import resolve_model
    from grpo_lessons.course.viz import comparison as viz

    variants = ["grpo"] + [v for v in args.variants if v != "grpo"]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tag = args.tag or args.model.replace("/", "_")
    info = machine_info(args.threads)
    t_start = time.perf_counter()
    model, tok = resolve_model(args.model)
    load_s = time.perf_counter() - t_start
    config = dict(task=args.task, steps=args.steps, group_size=args.group_size, prompts_per_step=args.prompts,
                  max_new_tokens=args.max_new_tokens, lr=args.lr, mu=args.mu, beta=args.beta,
                  eval_size=args.eval_size, seed=args.seed)
    trainer_kwargs = {"reward_funcs": [starts_with_digit]} if args.toy_reward else None
    histories, wall = {}, {}
    for v in variants:  # one at a time, so each wall time is its own
        t0 = time.perf_counter()
        histories.update(viz.run_comparison([v], model=args.model, model_obj=model, tokenizer=tok,
                                            trainer_kwargs=trainer_kwargs, keep_eval_rows=True, **config))
        wall[v] = time.perf_counter() - t0
        print(f"{v}: {wall[v]:.1f} s", flush=True)
    summary = viz.comparison_summary(histories)

    keys = ["variant"] + list(next(iter(histories.values()))[0].keys())
    with open(out / f"{tag}_steps.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        for v, hist in histories.items():
            for row in hist:
                w.writerow({"variant": v, **row})
    cols = ["variant", "wall_s"] + list(next(iter(summary.values())).keys())
    with open(out / f"{tag}_summary.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols)
        w.writeheader()
        for v, s in summary.items():
            w.writerow({"variant": v, "wall_s": round(wall[v], 2), **s})
    fig = viz.plot_comparison({v: [r for r in h if r.get("reward_mean") is not None] for v, h in histories.items()},
                              keys=("reward_mean", "clip_frac", "grad_norm", "completion_len"))
    fig.suptitle(f"{args.model}, {args.task}{' (toy reward)' if args.toy_reward else ''}: {args.steps} steps, "
                 f"{args.prompts * args.group_size} completions/step, seed {args.seed} — {info['cpu']}", fontsize=8)
    fig.tight_layout()
    fig.savefig(out / f"{tag}.png", dpi=110)
    plt.close(fig)
    info.update({"command": " ".join([Path(sys.argv[0]).name] + (argv if argv is not None else sys.argv[1:])),
                 "model": args.model, "toy_reward": args.toy_reward, "config": config, "variants": variants,
                 "model_load_s": round(load_s, 2), "wall_s_per_variant": {v: round(s, 2) for v, s in wall.items()},
                 "total_wall_s": round(time.perf_counter() - t_start, 2)})
    (out / f"{tag}_machine.json").write_text(json.dumps(info, indent=1, default=str) + "\n")

    print(f"\n{'variant':>8} | {'wall s':>6} | {'reward':>6} | {'acc first->last':>15} | {'clip':>6} | {'grad':>6} | "
          f"{'len':>5} | {'zero-std':>8} | rollouts")
    f = lambda x, spec: format("-", ">" + spec.split(".")[0]) if x is None else format(x, spec)  # noqa: E731
    for v, s in summary.items():
        acc = "-" if s["accuracy_first"] is None else f"{s['accuracy_first']:.2f}->{s['accuracy_last']:.2f}"
        print(f"{v:>8} | {wall[v]:>6.1f} | {f(s['reward_mean'], '6.3f')} | {acc:>15} | {f(s['clip_frac'], '6.3f')} | "
              f"{f(s['grad_norm'], '6.3f')} | {f(s['completion_len'], '5.1f')} | "
              f"{f(s['frac_zero_std_groups'], '8.2f')} | "
              f"{f(s['completions_sampled'], '.0f')}")
    print(f"\nwrote {out}/{tag}_{{steps,summary}}.csv, {tag}.png, {tag}_machine.json")
    return 0


if __name__ == "__main__":
    import matplotlib

    matplotlib.use("Agg")  # a script: draw to files only (never in importable code, which notebooks call)
    raise SystemExit(main())
