"""Probe the base model on candidate task configurations: is its accuracy between 0 and 1?

GRPO learns only from groups whose rewards differ, so a task the base model never (or always)
solves gives no gradient.  For each configuration this samples ``--prompts`` training prompts,
``--samples`` completions each at ``--temperature`` (default 1.0; top_k 0, top_p 1: TRL's defaults) plus one
greedy completion, and prints the pass rates and the share of groups with mixed rewards.

    HF_HUB_OFFLINE=1 python data/probe.py --configs 2digit_add/plain countdown --json probe.json

The numbers recorded in data/PROBE.md come from this script.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from dataclasses import replace

import torch

from grpo_lessons.training.data import ARITHMETIC_LEVELS, CountdownSpec, arithmetic_rows, countdown_rows
from grpo_lessons.training.models import resolve_model
from grpo_lessons.core.rewards import arithmetic_reward, countdown_reward, format_reward


def rows_for(config: str, n: int) -> tuple[list[dict], callable]:
    if config.startswith("countdown"):
        k = int(config.split(":")[1]) if ":" in config else 3
        return countdown_rows(n, 0, CountdownSpec(n_numbers=k)), countdown_reward
    level, style = config.split("/")
    return arithmetic_rows(n, 0, replace(ARITHMETIC_LEVELS[level], prompt_style=style)), arithmetic_reward


@torch.no_grad()
def generate(model, tok, prompts, *, n: int, sample: bool, max_new_tokens: int, batch: int, seed: int,
             temperature: float = 1.0):
    texts = []
    for i in range(0, len(prompts), batch):
        chunk = prompts[i:i + batch]
        enc = tok.apply_chat_template(chunk, add_generation_prompt=True, return_tensors="pt", padding=True,
                                      return_dict=True)
        torch.manual_seed(seed + i)
        kw = dict(do_sample=True, temperature=temperature, top_k=0, top_p=1.0) if sample else dict(do_sample=False)
        out = model.generate(**enc, max_new_tokens=max_new_tokens, num_return_sequences=n, **kw)
        texts += tok.batch_decode(out[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
    return texts


def probe(model, tok, config: str, args) -> dict:
    rows, reward = rows_for(config, args.prompts)
    cols = {k: [r[k] for r in rows] for k in ("answer", "numbers", "target") if k in rows[0]}
    prompts = [r["prompt"] for r in rows]
    t0 = time.perf_counter()
    greedy = generate(model, tok, prompts, n=1, sample=False, max_new_tokens=args.max_new_tokens,
                      batch=args.batch, seed=args.seed)
    g = reward(greedy, **cols)
    sampled = generate(model, tok, prompts, n=args.samples, sample=True, max_new_tokens=args.max_new_tokens,
                       batch=max(1, args.batch // args.samples), seed=args.seed, temperature=args.temperature)
    rep = {k: [v for v in vs for _ in range(args.samples)] for k, vs in cols.items()}
    s = reward(sampled, **rep)
    groups = [s[i:i + args.samples] for i in range(0, len(s), args.samples)]
    fmt = format_reward(sampled)
    return {
        "config": config,
        "temperature": args.temperature,
        "greedy_acc": sum(g) / len(g),
        "sampled_acc": sum(s) / len(s),
        "mixed_groups": sum(0 < sum(gr) < len(gr) for gr in groups) / len(groups),
        "format_rate": sum(fmt) / len(fmt),
        "seconds": round(time.perf_counter() - t0, 1),
        "example_greedy": greedy[:3],
        "example_sampled": sampled[:3],
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2")
    p.add_argument("--configs", nargs="+", default=["2digit_add/plain", "2digit_add/only_number",
                                                    "2digit_add/answer_tag", "2digit/plain", "mixed/plain",
                                                    "countdown"])
    p.add_argument("--prompts", type=int, default=48)
    p.add_argument("--samples", type=int, default=4)
    p.add_argument("--max-new-tokens", type=int, default=40)
    p.add_argument("--batch", type=int, default=48)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--threads", type=int, default=1,
                   help="torch threads (1 is fastest when other jobs share the cores)")
    p.add_argument("--json", help="append one JSON line per configuration here")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    model, tok = resolve_model(args.model)
    print(f"machine: {platform.machine()}, {torch.get_num_threads()} torch threads, torch {torch.__version__}")
    print(f"{'config':28s} {'greedy':>7s} {'sampled':>8s} {'mixed':>6s} {'format':>7s} {'s':>6s}")
    for config in args.configs:
        r = probe(model, tok, config, args)
        print(f"{config:28s} {r['greedy_acc']:7.1%} {r['sampled_acc']:8.1%} {r['mixed_groups']:6.1%} "
              f"{r['format_rate']:7.1%} {r['seconds']:6.1f}", flush=True)
        if args.json:
            with open(args.json, "a") as f:
                f.write(json.dumps({**vars(args), **r}) + "\n")


if __name__ == "__main__":
    main()
