"""Verbalized Sampling on SmolLM2-135M-Instruct: does a 135M model follow the format, and is the result more diverse
than direct sampling?  (notebook 18)

For each of a set of short open-ended requests ("Name a color.", "Suggest a name for a pet dog.", ...):

* **direct**: ``k`` samples of the plain request at temperature ``T``;
* **verbalized** (two prompt styles, the paper's tags and the chapter's ``[response] (probability: X.XX)``):
  ``R`` generations of :func:`grpo_lessons.core.verbalized.verbalized_prompt`, each parsed by
  :func:`grpo_lessons.core.verbalized.parse_verbalized` and one candidate drawn from it by
  :func:`grpo_lessons.core.verbalized.sample_verbalized`.

Reported: the parse success rate (at least one candidate; at least two), candidates per response, which fallback
the parser needed, the diversity of the candidates *within* one verbalized response against ``k`` direct samples,
and the diversity of what each method finally returns (``R`` draws per request) -- distinct-1/2 and pairwise edit
diversity from :mod:`grpo_lessons.core.diversity`.

    HF_HUB_OFFLINE=1 python benchmarks/verbalized.py                 # the committed run (minutes on 2 cores)
    HF_HUB_OFFLINE=1 python benchmarks/verbalized.py --quick --out /tmp/vs   # tiny-qwen2, seconds (a test runs it)

Writes ``generations.json`` (every generation and its parse), ``summary.csv``, ``result.json``, ``RESULT.md`` and
``verbalized.png`` to ``--out`` (default ``benchmarks/results/verbalized/``).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._machine import machine  # noqa: E402

DEFAULT_OUT = ROOT / "benchmarks" / "results" / "verbalized"

#: Short open-ended requests: many good answers each, short enough for a 135M model.
REQUESTS = (
    "Name a color.",
    "Name a fruit.",
    "Suggest a name for a pet dog.",
    "Name an animal that lives in the ocean.",
    "Name a city in Europe.",
    "Suggest a hobby for a rainy day.",
    "Give a word that rhymes with 'light'.",
    "Suggest a title for a short story about a robot.",
    "Name a musical instrument.",
    "Suggest a healthy breakfast.",
    "Name a famous scientist.",
    "Write a one-sentence joke about cats.",
    "Suggest a board game to play with friends.",
    "Name a vegetable.",
    "Suggest a name for a coffee shop.",
    "Write a one-line poem about the sea.",
)


def generate(model, tok, prompts, n, *, max_new_tokens, temperature, seed, batch_prompts=8) -> list[list[str]]:
    """``n`` sampled completions for each chat prompt, in groups."""
    from grpo_lessons.training.rollout import generate_completions

    torch.manual_seed(seed)
    out = []
    for s in range(0, len(prompts), batch_prompts):
        part = prompts[s:s + batch_prompts]
        ro = generate_completions(model, tok, part, n, max_new_tokens=max_new_tokens, temperature=temperature,
                                  compute_logps=False)
        out.extend(ro.texts[g * n:(g + 1) * n] for g in range(len(part)))
    return out


def sample_phase(args) -> dict:
    from grpo_lessons.training.models import resolve_model
    from grpo_lessons.core.verbalized import verbalized_prompt

    info = machine()
    model_name = "tiny-qwen2" if args.quick else "smollm2"
    model, tok = resolve_model(model_name)
    requests = list(REQUESTS[:args.requests])
    gens = {"config": {k: v for k, v in vars(args).items() if k != "out"}, "model": model_name, "requests": requests,
            "machine": info, "timing_s": {},
            "prompt_examples": {style: verbalized_prompt(requests[0], k=args.k, style=style) for style in args.styles}}
    t0 = time.perf_counter()
    gens["direct"] = generate(model, tok, [[{"role": "user", "content": r}] for r in requests], args.k,
                              max_new_tokens=args.direct_tokens, temperature=args.temperature, seed=args.seed)
    gens["timing_s"]["direct"] = round(time.perf_counter() - t0, 1)
    print(f"direct: {gens['timing_s']['direct']} s", flush=True)
    for style in args.styles:
        t0 = time.perf_counter()
        prompts = [[{"role": "user", "content": verbalized_prompt(r, k=args.k, style=style)}] for r in requests]
        gens[f"verbalized_{style}"] = generate(model, tok, prompts, args.r, max_new_tokens=args.vs_tokens,
                                               temperature=args.temperature, seed=args.seed + 1)
        gens["timing_s"][f"verbalized_{style}"] = round(time.perf_counter() - t0, 1)
        print(f"verbalized ({style}): {gens['timing_s'][f'verbalized_{style}']} s", flush=True)
    gens["machine"]["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    return gens


def _mean(xs):
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def _div(texts) -> dict:
    from grpo_lessons.core import diversity as dv

    texts = [t for t in texts if t.strip()]
    if len(texts) < 2:
        return {"distinct_1": None, "distinct_2": None, "edit_diversity": None, "unique": len(set(texts))}
    return {"distinct_1": dv.distinct_n(texts, 1), "distinct_2": dv.distinct_n(texts, 2),
            "edit_diversity": dv.pairwise_edit_diversity(texts), "unique": len({" ".join(t.split()).casefold() for t in texts})}


def metrics_phase(gens: dict) -> dict:
    from grpo_lessons.core.verbalized import parse_verbalized, sample_verbalized

    rng = random.Random(gens["config"]["seed"])
    summary, examples = {}, {}
    # direct: diversity of the k samples of each request, and of the first r (what the method returns r times)
    r = gens["config"]["r"]
    direct = gens["direct"]
    summary["direct"] = {
        "generations": sum(len(g) for g in direct),
        "within_" + "distinct_1": _mean([_div(g)["distinct_1"] for g in direct]),
        "within_distinct_2": _mean([_div(g)["distinct_2"] for g in direct]),
        "within_edit_diversity": _mean([_div(g)["edit_diversity"] for g in direct]),
        "within_unique": _mean([_div(g)["unique"] for g in direct]),
        "returned_distinct_1": _mean([_div(g[:r])["distinct_1"] for g in direct]),
        "returned_edit_diversity": _mean([_div(g[:r])["edit_diversity"] for g in direct]),
        "returned_unique": _mean([_div(g[:r])["unique"] for g in direct]),
        "mean_chars": _mean([len(t) for g in direct for t in g]),
    }
    examples["direct"] = {q: g[:3] for q, g in list(zip(gens["requests"], direct))[:4]}
    for key in [k for k in gens if k.startswith("verbalized_")]:
        parses = [[parse_verbalized(t) for t in g] for g in gens[key]]
        flat = [p for g in parses for p in g]
        fallbacks = {}
        for p in flat:
            name = "no candidate" if not p else (p.fallback or "none needed")
            fallbacks[name] = fallbacks.get(name, 0) + 1
        formats = {}
        for p in flat:
            if p:
                formats[p.format] = formats.get(p.format, 0) + 1
        returned = [[(sample_verbalized(p, rng).text if p else "") for p in g] for g in parses]
        summary[key] = {
            "generations": len(flat),
            "parse_rate": sum(1 for p in flat if p) / len(flat),
            "parse_rate_2plus": sum(1 for p in flat if len(p) >= 2) / len(flat),
            "candidates_per_response": _mean([len(p) for p in flat]),
            "candidates_per_parsed_response": _mean([len(p) for p in flat if p]),
            "fallbacks": fallbacks,
            "formats": formats,
            "within_distinct_1": _mean([_div([c.text for c in p])["distinct_1"] for p in flat if len(p) >= 2]),
            "within_distinct_2": _mean([_div([c.text for c in p])["distinct_2"] for p in flat if len(p) >= 2]),
            "within_edit_diversity": _mean([_div([c.text for c in p])["edit_diversity"] for p in flat if len(p) >= 2]),
            "within_unique": _mean([_div([c.text for c in p])["unique"] for p in flat if len(p) >= 2]),
            "returned_distinct_1": _mean([_div(g)["distinct_1"] for g in returned]),
            "returned_edit_diversity": _mean([_div(g)["edit_diversity"] for g in returned]),
            "returned_unique": _mean([_div(g)["unique"] for g in returned]),
            "mean_chars": _mean([len(t) for g in gens[key] for t in g]),
        }
        examples[key] = [{"request": q, "output": g[0][:600], "parsed": [[c.text[:80], round(c.prob, 3)] for c in p[0]],
                          "fallback": p[0].fallback}
                         for q, g, p in list(zip(gens["requests"], gens[key], parses))[:4]]
    return {"summary": summary, "examples": examples, "model": gens["model"], "machine": gens["machine"],
            "prompt_examples": gens.get("prompt_examples"),
            "config": gens["config"], "timing_s": gens["timing_s"], "requests": gens["requests"]}


def _f(x, spec=".3f"):
    return "-" if x is None else format(x, spec)


def write(out: Path, gens: dict, res: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "generations.json").write_text(json.dumps(gens, indent=0) + "\n")
    (out / "result.json").write_text(json.dumps(res, indent=1) + "\n")
    keys = ["generations", "parse_rate", "parse_rate_2plus", "candidates_per_response", "within_distinct_1",
            "within_distinct_2", "within_edit_diversity", "within_unique", "returned_distinct_1",
            "returned_edit_diversity", "returned_unique", "mean_chars"]
    with open(out / "summary.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["method", *keys])
        for m, s in res["summary"].items():
            w.writerow([m, *[(round(s[k], 4) if isinstance(s.get(k), float) else s.get(k)) for k in keys]])
    import matplotlib.pyplot as plt

    from grpo_lessons.course.viz import rewards as viz

    plot = {m: {"parse_rate": s.get("parse_rate", 1.0 if m == "direct" else None),
                "within distinct-1": s["within_distinct_1"], "within edit div.": s["within_edit_diversity"],
                "returned distinct-1": s["returned_distinct_1"], "returned edit div.": s["returned_edit_diversity"]}
            for m, s in res["summary"].items()}
    fig = viz.plot_verbalized(plot, keys=("parse_rate", "within distinct-1", "within edit div.", "returned distinct-1",
                                          "returned edit div."))
    fig.savefig(out / "verbalized.png", dpi=110)
    plt.close(fig)
    c, m = res["config"], res["machine"]
    lines = ["# Verbalized Sampling against direct sampling (`benchmarks/verbalized.py`)", "",
             f"Model {res['model']} (CPU, full precision). {len(res['requests'])} short open-ended requests; direct: "
             f"{c['k']} samples each; verbalized: {c['r']} generations each of the {c['k']}-candidate prompt "
             f"(styles: {', '.join(c['styles'])}), max {c['vs_tokens']} new tokens, T = {c['temperature']}, seed {c['seed']}.",
             "*within*: diversity among the candidates of one verbalized response (responses with >= 2 candidates) or "
             f"among the {c['k']} direct samples; *returned*: among the {c['r']} final outputs per request (one drawn "
             "candidate per verbalized generation, the first direct samples).", "",
             "| method | " + " | ".join(keys) + " |", "|---|" + "---|" * len(keys)]
    for meth, s in res["summary"].items():
        lines.append(f"| {meth} | " + " | ".join(_f(s.get(k)) if s.get(k) is None or isinstance(s.get(k), float) else str(s[k])
                                                for k in keys) + " |")
    lines += ["", "Parser fallbacks: " + "; ".join(f"{k}: {v.get('fallbacks')} (formats {v.get('formats')})"
                                                  for k, v in res["summary"].items() if k != "direct"), "",
              f"Machine: {m['cpu']}, {m['logical_cpus']} logical CPUs, no GPU, {m['torch_threads']} torch thread(s); "
              f"started {m['date']}; load average at start {m['load_average_at_start']}, at end "
              f"{m.get('load_average_at_end')} (shared with other work). Timing (s): {json.dumps(res['timing_s'])}.", "",
              "Files: `generations.json` (every output), `summary.csv`, `result.json` (with examples), `verbalized.png`.", ""]
    (out / "RESULT.md").write_text("\n".join(lines))


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=str(DEFAULT_OUT))
    p.add_argument("--quick", action="store_true", help="tiny-qwen2, 2 requests, short outputs (seconds)")
    p.add_argument("--metrics-only", action="store_true", help="re-score an existing generations.json")
    p.add_argument("--requests", type=int, default=len(REQUESTS))
    p.add_argument("--k", type=int, default=5, help="candidates asked for / direct samples per request")
    p.add_argument("--r", type=int, default=3, help="verbalized generations per request and style")
    p.add_argument("--styles", nargs="+", default=["tags", "chapter"])
    p.add_argument("--direct-tokens", type=int, default=32)
    p.add_argument("--vs-tokens", type=int, default=160)
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    if args.quick:
        args.requests, args.k, args.r, args.direct_tokens, args.vs_tokens = 2, 3, 2, 8, 24
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    out = Path(args.out)
    gens = json.loads((out / "generations.json").read_text()) if args.metrics_only else sample_phase(args)
    res = metrics_phase(gens)
    write(out, gens, res)
    for k, v in res["summary"].items():
        print(k, {a: (round(b, 3) if isinstance(b, float) else b) for a, b in v.items()})
    return 0


if __name__ == "__main__":
    import matplotlib

    matplotlib.use("Agg")  # a script: draw to files only (never in importable code, which notebooks call)
    raise SystemExit(main())
