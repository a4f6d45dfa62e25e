"""Diversity benchmark: does a short GRPO run narrow SmolLM2-135M-Instruct, and what do the chapter's
diversity-promoting methods do to it?

Two phases, so that the expensive one runs once:

1. ``sample`` (minutes): load the model, sample ``K`` completions for ``P`` held-out arithmetic prompts from the
   base model, then train three (five, with the entropy bonus) short GRPO runs with
   :func:`grpo_lessons.training.trainer.train` -- beta = 0 and two KL coefficients (and, when the trainer has it,
   the entropy bonus added to the reward and to the loss) -- and sample the same prompts again after each.
   The base model is also sampled on training prompts (the pool for rejection sampling and for DPO pairs)
   and, with log-probabilities, for best-of-N with the model's own confidence as the scorer.  Everything
   sampled is written to ``samples.json``.
2. ``metrics`` (seconds): reads ``samples.json`` and scores it with :mod:`grpo_lessons.core.diversity`
   (distinct-1/2, pairwise edit diversity, answer entropy per group, pass@k), best-of-N (verifier,
   model confidence, majority vote), the rejection-sampling set and the diverse DPO pairs; writes
   ``table.csv``, ``result.json``, ``RESULT.md`` and ``diversity.png``.

    HF_HUB_OFFLINE=1 python benchmarks/diversity.py                  # the committed run (about 20 min on 2 cores)
    HF_HUB_OFFLINE=1 python benchmarks/diversity.py --metrics-only   # re-score the committed samples
    HF_HUB_OFFLINE=1 python benchmarks/diversity.py --quick --out /tmp/div   # tiny-qwen2, seconds (a test runs it)

This is a script, not a test: the full run takes tens of minutes.

``--study``: the trained rows again, as a study of the runner (benchmarks/_study.py) with three seeds each -- the
arms are the training runs above (GRPO with beta = 0, beta = 0.04, beta = 0.4, the entropy bonus in the reward and
in the loss, alpha = 0.01), 15 steps of 8 prompts x G = 8 by default, lr 3e-5, at the precision ``--precision auto``
picks (the bf16 fast path where the CPU multiplies bf16 in hardware, else fp32).  After each run the trained fp32
weights sample 16 completions at T = 0.7 for each of 32 held-out prompts (``samples.json`` in the run's folder) and
the diversity metrics become columns of the study's summary, compared across arms with t-intervals like the
accuracy; the starting model's row is sampled once (``reference.json``).  All arms share the first batch for a seed.
Budget (a quiet 2-core machine): ~6.5 s a step on the bf16 fast path, ~2.6 min a run, 5 arms x 3 seeds ~ 40 min.
The committed study is the one-seed table's budget over three seeds, in fp32 on an AVX2 CPU (``--precision fp32
--steps 15 --prompts-per-step 4``): 1.4-1.9 min a run, 23 min in all.

    HF_HUB_OFFLINE=1 python benchmarks/diversity.py --study           # ~40 min, resumable
    HF_HUB_OFFLINE=1 python benchmarks/diversity.py --study --quick   # tiny-qwen2, seconds

It writes ``benchmarks/results/diversity_study/`` (``runs/<arm>/seed<k>/metrics.csv`` and ``samples.json``,
summary, analysis, figures, RESULT.md).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import os
import random
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._machine import machine  # noqa: E402

from grpo_lessons.training.data import get_task  # noqa: E402
from grpo_lessons.core.rewards import arithmetic_reward, extract_answer  # noqa: E402

DEFAULT_OUT = ROOT / "benchmarks" / "results" / "diversity"


# ---------------------------------------------------------------------------------------------
# machine
# ---------------------------------------------------------------------------------------------

# ---------------------------------------------------------------------------------------------
# phase 1: sampling and training
# ---------------------------------------------------------------------------------------------

def sample_groups(model, tok, rows, k, *, max_new_tokens, temperature, seed, logps=False, batch_prompts=8):
    """``k`` completions per row: texts, rewards (the task's verifier) and, optionally, mean token log-probs."""
    from grpo_lessons.training.rollout import generate_completions

    torch.manual_seed(seed)
    texts, rewards, conf = [], [], []
    for s in range(0, len(rows), batch_prompts):
        part = rows[s:s + batch_prompts]
        ro = generate_completions(model, tok, [r["prompt"] for r in part], k, max_new_tokens=max_new_tokens,
                                  temperature=temperature, compute_logps=logps)
        r = arithmetic_reward(ro.texts, answer=[part[i // k]["answer"] for i in range(len(ro))])
        for g in range(len(part)):
            texts.append(ro.texts[g * k:(g + 1) * k])
            rewards.append(r[g * k:(g + 1) * k])
            if logps:
                m = ro.completion_mask[g * k:(g + 1) * k].float()  # (k, T)
                lp = (ro.logps[g * k:(g + 1) * k] * m).sum(1) / m.sum(1).clamp(min=1)  # (k,) mean log-prob
                conf.append([round(float(x), 5) for x in lp])
    out = {"questions": [r["question"] for r in rows], "answers": [r["answer"] for r in rows],
           "texts": texts, "rewards": rewards}
    if logps:
        out["mean_logp"] = conf
    return out


def trainer_supports(field: str) -> bool:
    from grpo_lessons.training.trainer import TrainConfig

    return field in {f.name for f in dataclasses.fields(TrainConfig)}


def run_methods(args) -> list[dict]:
    """(name, label, TrainConfig overrides) of the training runs, entropy rows only when the trainer has them."""
    methods = [{"name": "grpo", "label": "GRPO, beta = 0", "cfg": {"beta": 0.0}}]
    for b in args.betas:
        methods.append({"name": f"grpo_kl{b:g}", "label": f"GRPO + KL, beta = {b:g}", "cfg": {"beta": b}})
    if trainer_supports("entropy_bonus") and not args.no_entropy:
        for where in ("reward", "loss"):
            methods.append({"name": f"entropy_{where}", "label": f"GRPO + entropy bonus in the {where}, "
                            f"alpha = {args.entropy_alpha:g}",
                            "cfg": {"beta": 0.0, "entropy_bonus": args.entropy_alpha, "entropy_in": where}})
    return methods


def sample_phase(args, out: Path) -> dict:
    from grpo_lessons.training.models import resolve_model
    from grpo_lessons.training.trainer import TrainConfig, train

    info = machine()
    t_all = time.perf_counter()
    model_name = "tiny-qwen2" if args.quick else "smollm2"
    base, tok = resolve_model(model_name)
    task = get_task("arithmetic")
    eval_rows = task.rows("test")[:args.prompts]
    pool_rows = task.rows("train")[-args.pool_prompts:]  # the end of the train split: not the first steps' prompts
    mnt = args.max_new_tokens
    samples = {"config": {k: v for k, v in vars(args).items() if k != "out"}, "model": model_name,
               "task": "arithmetic", "methods": {}, "pool": None, "machine": info, "timing_s": {}}
    print(f"{model_name}: {len(eval_rows)} eval prompts x {args.k}, pool {len(pool_rows)} x {args.k}", flush=True)

    old = out / "samples.json"
    if args.append and old.is_file():  # add the methods that are missing (e.g. the entropy rows) to a finished run
        samples = json.loads(old.read_text())
        samples.setdefault("appended", []).append({"date": info["date"], "load_average_at_start":
                                                   info["load_average_at_start"]})
    t0 = time.perf_counter()
    if "base" not in samples["methods"]:
        samples["methods"]["base"] = dict(sample_groups(base, tok, eval_rows, args.k, max_new_tokens=mnt,
                                                      temperature=args.temperature, seed=args.seed, logps=True),
                                        label="base model (no training)", train_minutes=0.0)
        samples["pool"] = sample_groups(base, tok, pool_rows, args.k, max_new_tokens=mnt, temperature=args.temperature,
                                        seed=args.seed + 1)
        samples["timing_s"]["base_sampling"] = round(time.perf_counter() - t0, 1)
        print(f"base sampled in {samples['timing_s']['base_sampling']:.0f} s", flush=True)
        _save(out, samples)

    for m in run_methods(args):
        if m["name"] in samples["methods"]:
            continue
        t0 = time.perf_counter()
        run_dir = Path(tempfile.mkdtemp(prefix=f"div_{m['name']}_"))
        cfg = TrainConfig(model=model_name, task="arithmetic", variant="grpo", steps=args.steps,
                          prompts_per_step=args.prompts_per_step, group_size=args.group_size, lr=args.lr,
                          max_new_tokens=mnt, temperature=args.temperature, eval_size=0, seed=args.seed,
                          out=str(run_dir), reuse_freed_memory=True, **m["cfg"])
        try:
            res = train(cfg, progress=False, model=copy.deepcopy(base), tokenizer=tok,
                        reward_funcs=[arithmetic_reward],
                        callback=lambda h, name=m["name"]: print(
                            f"  {name} step {h[-1]['step']}: reward {h[-1]['reward_mean']:.3f} "
                            f"kl {h[-1].get('kl')} {h[-1]['seconds']:.1f}s", flush=True) if h else None)
        finally:
            pass
        train_s = time.perf_counter() - t0
        hist = [{k: v for k, v in r.items() if v is not None} for r in res.history]
        entry = sample_groups(res.model, tok, eval_rows, args.k, max_new_tokens=mnt, temperature=args.temperature,
                              seed=args.seed, logps=True)
        entry.update(label=m["label"], train_minutes=round(train_s / 60, 2), history=hist, config=m["cfg"])
        samples["methods"][m["name"]] = entry
        samples["timing_s"][m["name"]] = round(time.perf_counter() - t0, 1)
        del res
        shutil.rmtree(run_dir, ignore_errors=True)
        print(f"{m['name']}: trained {args.steps} steps in {train_s / 60:.1f} min", flush=True)
        _save(out, samples)

    samples["machine"]["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    samples["timing_s"]["total"] = round(time.perf_counter() - t_all, 1)
    _save(out, samples)
    return samples


def _save(out: Path, samples: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / "samples.json.tmp"
    tmp.write_text(json.dumps(samples, indent=0, default=str))
    os.replace(tmp, out / "samples.json")


# ---------------------------------------------------------------------------------------------
# phase 2: metrics
# ---------------------------------------------------------------------------------------------

def _answer_key(text: str) -> str | None:
    a = extract_answer(text)
    return None if a is None else str(a)


def best_of_n_curves(texts, rewards, conf, ns, *, trials: int = 200, seed: int = 0) -> dict:
    """Accuracy of best-of-N for N in ``ns`` with three pickers: the verifier (= pass@N), the model's mean
    log-prob, and a majority vote over the extracted answers; averaged over random subsets of the K samples."""
    from grpo_lessons.core.diversity import pass_at_k

    rng = random.Random(seed)
    P, K = len(texts), len(texts[0])
    curves = {"n": list(ns), "verifier": [], "pass_at_k": [], "confidence": [], "majority": []}
    for n in ns:
        ver = conf_acc = maj = 0.0
        for _ in range(trials):
            for p in range(P):
                idx = rng.sample(range(K), n)
                rs = [rewards[p][i] for i in idx]
                ver += max(rs)
                if conf is not None:
                    best = max(idx, key=lambda i: conf[p][i])
                    conf_acc += rewards[p][best]
                keys = [(_answer_key(texts[p][i]), i) for i in idx]
                counts = Counter(k for k, _ in keys if k is not None)
                if counts:
                    top = counts.most_common(1)[0][0]
                    first = next(i for k, i in keys if k == top)
                    maj += rewards[p][first]
        denom = trials * P
        curves["verifier"].append(ver / denom)
        curves["confidence"].append(conf_acc / denom if conf is not None else None)
        curves["majority"].append(maj / denom)
        curves["pass_at_k"].append(sum(pass_at_k(K, int(sum(r)), n) for r in rewards) / P)
    return curves


def group_metrics(texts, rewards) -> dict:
    """Diversity and accuracy of one method's samples (groups of K completions for the same prompt)."""
    from grpo_lessons.core import diversity as dv

    K = len(texts[0])
    flat = [t for g in texts for t in g]
    per_group = lambda f: sum(f(g) for g in texts) / len(texts)  # noqa: E731
    answers = [[_answer_key(t) for t in g] for g in texts]
    return {
        "distinct_1": per_group(lambda g: dv.distinct_n(g, 1)),
        "distinct_2": per_group(lambda g: dv.distinct_n(g, 2)),
        "edit_diversity": per_group(dv.pairwise_edit_diversity),
        "answer_entropy": per_group(lambda g: dv.answer_entropy(g, "arithmetic")),
        "distinct_answers": sum(len(set(a)) for a in answers) / len(answers),
        "unique_texts": sum(len(set(g)) for g in texts) / len(texts),
        "pass@1": sum(dv.pass_at_k(K, int(sum(r)), 1) for r in rewards) / len(rewards),
        "pass@8": sum(dv.pass_at_k(K, int(sum(r)), min(8, K)) for r in rewards) / len(rewards),
        "mean_length_chars": sum(len(t) for t in flat) / len(flat),
    }


def metrics_phase(samples: dict, out: Path) -> dict:
    from grpo_lessons.core import diversity as dv

    cfg = samples["config"]
    K = cfg["k"]
    table = []
    for name, m in samples["methods"].items():
        row = {"method": name, "label": m["label"], "train_minutes": m.get("train_minutes", 0.0)}
        row.update(group_metrics(m["texts"], m["rewards"]))
        hist = m.get("history") or []
        kls = [h["kl"] for h in hist if h.get("kl") is not None]
        row["final_kl"] = kls[-1] if kls else None
        table.append(row)
    ns = [n for n in (1, 2, 4, 8, 16) if n <= K]
    bon = {name: best_of_n_curves(m["texts"], m["rewards"], m.get("mean_logp"), ns, trials=cfg.get("bon_trials", 100))
           for name, m in samples["methods"].items() if name in ("base", "grpo")}

    # rejection sampling: keep the top-k rewarded completions of each pool prompt (only right ones)
    pool = samples["pool"]
    rs_summary = {}
    for label, thr in (("right only", 1.0), ("top-k, no threshold", None)):
        kept = dv.rejection_sample(pool["texts"], pool["rewards"], cfg["rs_top_k"], min_reward=thr)
        flat = [t for g in kept for t in g]
        right = [r for g, rs, ts in zip(kept, pool["rewards"], pool["texts"]) for t in g for r in [rs[ts.index(t)]]]
        rs_summary[label] = {"set_size": len(flat), "prompts": len(kept), "prompts_covered": sum(1 for g in kept if g),
                             "accuracy": sum(right) / len(right) if right else None,
                             "unique_texts": len(set(flat)),
                             "duplicate_share": 1 - sum(len(set(g)) for g in kept) / len(flat) if flat else None}
    rs_summary["pool_pass@1"] = sum(sum(r) for r in pool["rewards"]) / sum(len(r) for r in pool["rewards"])

    # DPO pairs that differ in approach, from the pool's groups (chosen right, rejected wrong with another key)
    from grpo_lessons.core.dpo import diverse_dpo_pairs

    pairs = diverse_dpo_pairs(pool["texts"], pool["rewards"], min_gap=0.5)
    pair_summary = {"pairs": len(pairs), "groups": len(pool["texts"]),
                    "groups_with_mixed_rewards": sum(1 for r in pool["rewards"] if 0 < sum(r) < len(r)),
                    "examples": [{"chosen": p.chosen, "rejected": p.rejected} for p in pairs[:5]]}
    result = {"table": table, "best_of_n": bon, "rejection_sampling": rs_summary, "dpo_pairs": pair_summary,
              "machine": samples["machine"], "config": cfg, "model": samples["model"], "timing_s": samples["timing_s"],
              "appended": samples.get("appended")}
    _write_outputs(result, out)
    return result


def _write_outputs(result: dict, out: Path) -> None:
    import csv

    out.mkdir(parents=True, exist_ok=True)
    keys = list(result["table"][0])
    with open(out / "table.csv", "w", newline="") as f:
        w = csv.DictWriter(f, keys)
        w.writeheader()
        for r in result["table"]:
            w.writerow({k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()})
    (out / "result.json").write_text(json.dumps(result, indent=1, default=str) + "\n")
    import matplotlib.pyplot as plt

    from grpo_lessons.course.viz import rewards as viz

    fig = viz.plot_diversity_table(result["table"], keys=("distinct_1", "distinct_2", "edit_diversity",
                                                          "answer_entropy", "pass@1", "pass@8"))
    fig.savefig(out / "diversity.png", dpi=110)
    plt.close(fig)
    fig = viz.plot_best_of_n(result["best_of_n"], title=f"{result['model']}, arithmetic, best-of-N against N")
    fig.savefig(out / "best_of_n.png", dpi=110)
    plt.close(fig)
    (out / "RESULT.md").write_text(markdown(result))


def _f(x, spec=".3f"):
    return "-" if x is None else format(x, spec)


def markdown(result: dict) -> str:
    m, c = result["machine"], result["config"]
    cols = ["distinct_1", "distinct_2", "edit_diversity", "answer_entropy", "distinct_answers", "pass@1", "pass@8",
            "final_kl", "train_minutes"]
    lines = ["# Diversity benchmark (`benchmarks/diversity.py`)", "",
             f"Model {result['model']} (full precision, CPU), arithmetic task. Each method: {c['k']} samples at "
             f"T = {c['temperature']} for each of {c['prompts']} held-out prompts (max {c['max_new_tokens']} new tokens). "
             f"Training runs: {c['steps']} GRPO steps of {c['prompts_per_step']} prompts x G = {c['group_size']}, "
             f"lr {c['lr']}, seed {c['seed']}, the package's trainer. Diversity metrics are per prompt (over its "
             f"{c['k']} samples), averaged over prompts; pass@k is the unbiased estimator from the {c['k']} samples.", "",
             "| method | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
    for r in result["table"]:
        lines.append(f"| {r['label']} | " + " | ".join(_f(r.get(k), ".2f" if k == "train_minutes" else ".3f")
                                                       for k in cols) + " |")
    lines += ["", "Best-of-N accuracy (verifier = pass@N; model confidence = mean token log-prob; majority vote "
              "over final answers), averaged over random subsets of the samples:", ""]
    for name, cur in result["best_of_n"].items():
        lines.append(f"- {name}: N = {cur['n']}; verifier {[round(x, 3) for x in cur['verifier']]}; "
                     f"pass@k {[round(x, 3) for x in cur['pass_at_k']]}; confidence "
                     f"{[None if x is None else round(x, 3) for x in cur['confidence']]}; majority "
                     f"{[round(x, 3) for x in cur['majority']]}")
    lines += ["", f"Rejection sampling (top-{c['rs_top_k']} per prompt, {c['pool_prompts']} training prompts x {c['k']} "
              f"samples from the base model): {json.dumps(result['rejection_sampling'])}", "",
              f"DPO pairs that differ in approach, from the same groups: {json.dumps(result['dpo_pairs'])}", "",
              *([f"Rows added later with `--append` (started {', '.join(a['date'] for a in result['appended'])}, load "
                 f"{', '.join(str(a['load_average_at_start']) for a in result['appended'])}): "
                 + ", ".join(r["method"] for r in result["table"] if r["method"].startswith("entropy"))
                 + ". They ran with a later version of the trainer (the one with the entropy bonus); their sampled "
                   "training batches differ from the GRPO row's from the first step, so the rows are not paired.", ""]
                if result.get("appended") else []),
              f"Machine: {m['cpu']}, {m['logical_cpus']} logical CPUs, no GPU, {m['torch_threads']} torch thread(s), "
              f"torch {m['torch']}; started {m['date']}; load average at start {m['load_average_at_start']}, at end "
              f"{m.get('load_average_at_end')}. The CPU was shared with other engineers' tests and benchmarks, so "
              f"the minutes are inflated. Timing (s): {json.dumps(result['timing_s'])}.", "",
              "Files: `samples.json` (every sampled completion and reward), `table.csv`, `result.json`, "
              "`diversity.png`, `best_of_n.png`.", ""]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# --study: the trained rows over seeds, through the study runner
# ---------------------------------------------------------------------------------------------

STUDY_NAME = "diversity_study"
STUDY_BASE = dict(task="arithmetic", variant="grpo", steps=15, prompts_per_step=8, group_size=8, lr=3e-5,
                  max_new_tokens=12, temperature=0.7, eval_size=100, eval_every=0, precision="bf16-mixed",
                  sampler_dtype="bfloat16", kl_start_every=5)
STUDY_QUICK = dict(steps=2, prompts_per_step=2, group_size=4, max_new_tokens=6, eval_size=4, eval_every=0,
                   micro_batch_size=8, lr=1e-3, kl_start_every=1)
DIVERSITY_METRICS = ("distinct_1", "distinct_2", "edit_diversity", "answer_entropy", "distinct_answers", "pass@1",
                     "pass@8")


def diversity_study(args):
    """The ``--study``: one arm per training run of :func:`run_methods`; ``after_run`` samples the trained weights."""
    from benchmarks._study import Arm, Study, apply_common, quick_rewards

    base = apply_common(args, STUDY_BASE, STUDY_QUICK)
    mnt, temp = base["max_new_tokens"], base["temperature"]
    eval_rows = get_task("arithmetic").rows("test")[:args.prompts]

    def metrics(samples: dict) -> dict:
        return {k: v for k, v in group_metrics(samples["texts"], samples["rewards"]).items() if k in DIVERSITY_METRICS}

    def after_run(ctx, result) -> dict:
        samples = sample_groups(result.model, ctx.tokenizer, eval_rows, args.k, max_new_tokens=mnt, temperature=temp,
                                seed=ctx.seed)
        (ctx.run_dir / "samples.json").write_text(json.dumps(samples, indent=0))
        return metrics(samples)

    def reference(model, tok) -> dict:
        samples = sample_groups(model, tok, eval_rows, args.k, max_new_tokens=mnt, temperature=temp,
                                seed=args.seeds[0])
        return {**metrics(samples), "samples": samples}

    arms = [Arm(m["name"], m["cfg"], m["label"]) for m in run_methods(args)]
    return Study(
        name=STUDY_NAME, title="Diversity after short GRPO runs: KL and entropy bonuses"
        + (" (quick path)" if args.quick else ""),
        question=f"After the same short GRPO run, do a KL penalty or an entropy bonus keep the sampled completions "
                 f"more diverse ({args.k} samples at T = {temp:g} for each of {len(eval_rows)} held-out prompts), and "
                 "at what cost in accuracy?",
        arms=arms, seeds=args.seeds, base=base, baseline=arms[0].name, after_run=after_run, reference=reference,
        rewards=quick_rewards if args.quick else None, extra_metrics=DIVERSITY_METRICS,
        curves=("accuracy", "reward_mean", "entropy", "kl_start", "completion_len", "kl"),
        budget="about 2.6 min a run, 40 min for 5 arms x 3 seeds on a quiet 2-core CPU (module docstring)",
        notes=["Diversity metrics are per prompt over its samples, averaged over prompts; pass@k is the unbiased "
               "estimator from the samples. The starting model's row comes from `reference.json` (sampled once)."],
    )


def study_main(argv) -> int:
    from benchmarks._study import RESULTS, add_arguments, main_for

    p = argparse.ArgumentParser(description="diversity.py --study: the trained rows over seeds (a study)")
    add_arguments(p, out=RESULTS / STUDY_NAME)
    p.add_argument("--prompts", type=int, default=32, help="held-out prompts sampled K times after each run")
    p.add_argument("--k", type=int, default=16, help="samples per prompt")
    p.add_argument("--betas", type=float, nargs="*", default=[0.04, 0.4])
    p.add_argument("--entropy-alpha", type=float, default=0.01)
    p.add_argument("--no-entropy", action="store_true")

    def build(args):
        if args.quick:
            args.prompts, args.k, args.betas = 3, 4, [0.1]
        return diversity_study(args)

    return main_for(build, p, argv, default_out=RESULTS / STUDY_NAME)


# ---------------------------------------------------------------------------------------------

def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=str(DEFAULT_OUT))
    p.add_argument("--quick", action="store_true", help="tiny-qwen2, 2 steps, a handful of prompts (seconds)")
    p.add_argument("--metrics-only", action="store_true", help="re-score an existing samples.json")
    p.add_argument("--append", action="store_true", help="keep the methods already in samples.json, run the others")
    p.add_argument("--prompts", type=int, default=32, help="held-out prompts sampled K times per method")
    p.add_argument("--pool-prompts", type=int, default=32, help="training prompts for rejection sampling / DPO pairs")
    p.add_argument("--k", type=int, default=16, help="samples per prompt")
    p.add_argument("--steps", type=int, default=15)
    p.add_argument("--prompts-per-step", type=int, default=4)
    p.add_argument("--group-size", type=int, default=8)
    p.add_argument("--lr", type=float, default=3e-5)
    p.add_argument("--betas", type=float, nargs="*", default=[0.04, 0.4])
    p.add_argument("--entropy-alpha", type=float, default=0.01)
    p.add_argument("--no-entropy", action="store_true")
    p.add_argument("--max-new-tokens", type=int, default=12)
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--rs-top-k", type=int, default=2)
    p.add_argument("--bon-trials", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    if args.quick:
        args.prompts, args.pool_prompts, args.k, args.steps, args.prompts_per_step = 3, 3, 4, 1, 2
        args.group_size, args.max_new_tokens, args.bon_trials, args.betas = 4, 6, 5, [0.1]
    return args


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--study" in argv:
        argv.remove("--study")
        return study_main(argv)
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    out = Path(args.out)
    if args.metrics_only:
        samples = json.loads((out / "samples.json").read_text())
    else:
        samples = sample_phase(args, out)
    result = metrics_phase(samples, out)
    for r in result["table"]:
        print(r)
    return 0


if __name__ == "__main__":
    import matplotlib

    matplotlib.use("Agg")  # a script: draw to files only (never in importable code, which notebooks call)
    raise SystemExit(main())
