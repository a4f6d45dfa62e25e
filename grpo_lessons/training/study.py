"""The paired, seeded comparison of arms on a real model: a study is a name, arms, seeds and shared settings.

``grpo-lessons compare`` (:mod:`grpo_lessons.training.cli`) builds one from the command line; the scripts in
``benchmarks/`` build the committed studies with it.  The statistics are :mod:`grpo_lessons.core.stats`'s, shared
with the lab.

Each (arm, seed) is one run of the package's trainer through its public API (``TrainConfig`` + ``Trainer``; a
variant is chosen by its registry name, never by subclassing the trainer), written as

    <out>/runs/<arm>/seed<k>/metrics.csv    the trainer's own CSV (evaluations included)
    <out>/runs/<arm>/seed<k>/config.json    the trainer's resolved configuration
    <out>/runs/<arm>/seed<k>/run.json       arm, seed, minutes, load average at start/end, machine

and then, from those files alone,

    summary.csv     one row per run (accuracy before/after, gain, final length, entropy, clip fractions, minutes, ...)
    analysis.json   per arm: mean gain with its 95 % t-interval over seeds; the paired difference to the baseline arm
    curves.png      learning curves, mean over seeds with the min-max band (accuracy, reward, length, entropy, ...)
    gains.png       the intervals of the gains and of the paired differences
    RESULT.md       model, task, budget, machine and load, minutes; what differs with confidence and what does not

Design (DESIGN.md, "Evidence"): the same seeds in every arm, so two runs of one seed sample the same first batch
wherever the arm does not change sampling (``Arm.sampling`` says which arms share it; the trainer's ``batch_hash``
column shows it); three seeds at least; a difference whose interval covers 0 is reported as no difference.

Held-out accuracy before training is the same for every run that starts from the same weights and evaluates the
same prompts greedily with the same settings, so it is computed once per study (``initial_eval.json``) and passed
to each run (``Trainer(initial_eval=...)``); an arm that changes what the evaluation depends on (model, prompts,
token limit, reward functions, ...) gets its own.

Resumable: a run whose ``run.json`` says complete (written after its ``metrics.csv``) is skipped; a partial one is
deleted and redone; a complete one made with other settings stops the study with a message (delete it or use
another ``--out``).  A partial run is redone from its start, never resumed, so the runner keeps no checkpoint: each
run trains with ``checkpoint="never"`` (a full SmolLM2-135M checkpoint is ~1.6 GB; the CSV is what we keep).
"""

from __future__ import annotations

import argparse
import copy
import csv
import dataclasses
import gc
import json
import math
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..core.stats import no_spread_verdict
from . import stats as st
from .machine import machine
from .records import METRICS_NAME, load_history
from .stats import RUN_JSON, RUNS, SUMMARY_COLUMNS, run_dir, run_is_complete, summarize_run
from .train_config import TrainConfig, cpu_bf16_speedup

__all__ = ["Arm", "Rewards", "Study", "RunContext", "run_study", "analyse_study", "holm_verdicts", "summarize_run",
           "run_dir", "read_summary", "add_arguments", "apply_common", "RUNS", "RUN_JSON", "SUMMARY", "RESULT",
           "DEFAULT_CURVES", "quick_out", "digit_share", "quick_rewards"]

SUMMARY, RESULT = "summary.csv", "RESULT.md"
INITIAL_EVAL, REFERENCE, ANALYSIS, STUDY_JSON = "initial_eval.json", "reference.json", "analysis.json", "study.json"
DEFAULT_CURVES = ("accuracy", "reward_mean", "completion_len", "entropy", "clip_frac", "kl_start")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")
# The settings the held-out evaluation depends on: runs that agree on them share the step-0 evaluation.
EVAL_FIELDS = ("model", "task", "eval_size", "eval_batch_size", "max_new_tokens", "attn_implementation", "device",
               "dtype", "lora", "lora_r", "lora_alpha", "lora_targets")
# What the runner sets itself (no checkpoint: a partial run is redone, never resumed).
RUNNER_FIELDS = ("seed", "out", "resume", "checkpoint", "checkpoint_every")
# Settings that change what a run writes, not what it computes: a finished run made with others is still the same run.
_NOT_COMPARED = ("out", "resume", "checkpoint", "checkpoint_every")


@dataclass(frozen=True)
class Rewards:
    """The reward functions of a run (TRL signature), their weights, and what the held-out accuracy counts."""

    funcs: Sequence[Callable]
    weights: Sequence[float] | None = None
    accuracy_fn: Callable | None = None

    def key(self) -> list:
        names = [getattr(f, "__name__", type(f).__name__) for f in self.funcs]
        acc = None if self.accuracy_fn is None else getattr(self.accuracy_fn, "__name__", "accuracy_fn")
        return [names, None if self.weights is None else [float(w) for w in self.weights], acc]


@dataclass(frozen=True)
class Arm:
    """One arm: TrainConfig overrides on top of the study's shared settings.

    ``sampling``: arms with the same value sample the same first batch for a seed (the arm does not change what is
    sampled before the first update); a test checks it from the runs' ``batch_hash``.  ``rewards(seed)``: fresh
    reward functions for each run (a reward model with its own random generator), else the study's.
    ``derive(out, seed)``: settings computed from this study's finished runs of the same seed (e.g. a learning rate
    matched to another arm's measured advantage RMS); returns ``{"config": {...}, "note": str, ...numbers}``, all
    of it recorded in the run's ``run.json``.
    """

    name: str
    config: Mapping[str, Any] = field(default_factory=dict)
    label: str = ""
    sampling: str = "shared"
    rewards: Callable[[int], Rewards] | None = None
    derive: Callable[[Path, int], dict] | None = None


@dataclass
class Study:
    """A comparison: ``arms`` run with every seed of ``seeds`` on ``base`` (TrainConfig fields every arm shares)."""

    name: str
    title: str
    question: str
    arms: Sequence[Arm]
    seeds: Sequence[int]
    base: Mapping[str, Any]
    baseline: str | None = None  # the arm the others are paired with (default: the first)
    rewards: Callable[[int], Rewards] | None = None  # default for the arms (None: the task's)
    train_rows: Sequence[dict] | None = None  # None: the task's train split
    eval_rows: Sequence[dict] | None = None  # None: the task's test split (its first eval_size rows)
    after_run: Callable[["RunContext", Any], dict] | None = None  # extra numbers per run from the trained model
    reference: Callable[[Any, Any], dict] | None = None  # numbers of the starting model, computed once
    extra_metrics: Sequence[str] = ()  # summary columns analysed like the gain (from after_run)
    curves: Sequence[str] = DEFAULT_CURVES
    budget: str = ""  # the cost estimate (RESULT.md)
    notes: Sequence[str] = ()  # sentences for RESULT.md (what the arms are, what the settings mean)
    claim: tuple[str, float, str] | None = None  # (summary column, threshold, the claim): checked run by run
    min_seeds: int = 3

    def __post_init__(self) -> None:
        names = [a.name for a in self.arms]
        if not names:
            raise ValueError(f"study {self.name!r} has no arms")
        if len(set(names)) != len(names):
            raise ValueError(f"study {self.name!r}: arm names repeat: {names}")
        for n in [self.name, *names]:
            if not _NAME.match(n):
                raise ValueError(f"{n!r} is not a usable directory name (letters, digits, _ . + -)")
        seeds = list(self.seeds)
        if len(set(seeds)) != len(seeds) or not all(isinstance(s, int) and s >= 0 for s in seeds):
            raise ValueError(f"seeds must be distinct integers >= 0, got {seeds}")
        if len(seeds) < self.min_seeds:
            raise ValueError(f"study {self.name!r}: {len(seeds)} seed(s); a comparison needs at least "
                             f"{self.min_seeds} (one run is a smoke test, never a result)")
        if self.baseline is None:
            self.baseline = names[0]
        if self.baseline not in names:
            raise ValueError(f"baseline {self.baseline!r} is not an arm ({names})")
        known = {f.name for f in dataclasses.fields(TrainConfig)}
        for where, d in [("base", self.base)] + [(f"arm {a.name!r}", a.config) for a in self.arms]:
            bad = sorted(set(d) - known)
            if bad:
                raise ValueError(f"study {self.name!r}, {where}: not TrainConfig fields: {bad}")
            taken = sorted(set(d) & set(RUNNER_FIELDS))
            if taken:
                raise ValueError(f"study {self.name!r}, {where}: {taken} are set by the runner per run")

    def arm(self, name: str) -> Arm:
        return next(a for a in self.arms if a.name == name)


@dataclass
class RunContext:
    """What ``Study.after_run`` gets besides the :class:`TrainResult`: where the run lives and its data."""

    study: Study
    arm: Arm
    seed: int
    run_dir: Path
    tokenizer: Any
    eval_rows: Sequence[dict]
    train_rows: Sequence[dict]


def digit_share(completions, **kwargs) -> list[float]:
    """A stand-in reward for the quick paths: the share of digit characters in the completion.  An untrained tiny
    model is never right, so the task's reward alone would give every group the same reward and nothing to compare;
    this one varies within every group.  The quick paths check the machinery, not learning."""
    from grpo_lessons.core.rewards import completion_text

    out = []
    for c in completions:
        t = completion_text(c)
        out.append(sum(ch.isdigit() for ch in t) / max(1, len(t)))
    return out


def quick_rewards(seed: int) -> Rewards:
    """The quick paths' rewards: the task's correctness (the accuracy) plus :func:`digit_share`."""
    from grpo_lessons.core.rewards import arithmetic_reward

    return Rewards([arithmetic_reward, digit_share], [1.0, 1.0], arithmetic_reward)


def quick_out(name: str) -> Path:
    """Where a ``--quick`` path writes by default: a temporary folder, never benchmarks/results."""
    return Path(tempfile.gettempdir()) / "grpo_lessons_studies" / name


def _write_json(path: Path, obj) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(obj, indent=1, default=str) + "\n")
    os.replace(tmp, path)


def _read_json(path: Path):
    return json.loads(Path(path).read_text())


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


# ---------------------------------------------------------------------------------------------
# running
# ---------------------------------------------------------------------------------------------


def _config(study: Study, arm: Arm, seed: int, out_dir: Path, derived: dict | None) -> TrainConfig:
    # a process that only trains: glibc may keep what it frees (the library default leaves the allocator alone)
    kw = {"reuse_freed_memory": True, **study.base, **arm.config, **((derived or {}).get("config") or {}), "seed": seed,
          "out": str(out_dir), "checkpoint": "never", "checkpoint_every": 0}
    cfg = TrainConfig(**kw)
    cfg.validate()
    return cfg


def _field_defaults() -> dict:
    """TrainConfig's field defaults, as a run's config.json writes them (JSON values)."""
    out = {}
    for f in dataclasses.fields(TrainConfig):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
            out[f.name] = f.default_factory()  # type: ignore[misc]
    return json.loads(json.dumps(out, default=str))


def _comparable(conf: dict) -> dict:
    return {k: v for k, v in conf.items() if k not in _NOT_COMPARED}


def _run_state(rd: Path, cfg: TrainConfig) -> str:
    """``"complete"`` (skip), ``"partial"`` (redo) or ``"absent"``; a complete run with other settings raises."""
    info_path, csv_path = rd / RUN_JSON, rd / METRICS_NAME
    if not rd.exists():
        return "absent"
    try:
        info = _read_json(info_path)
    except (OSError, ValueError):
        return "partial"
    if not info.get("complete") or not csv_path.is_file():
        return "partial"
    rows = load_history(csv_path)
    if not rows or rows[-1].get("step") != info.get("steps"):
        return "partial"
    old, new = _comparable(info.get("config", {})), _comparable(json.loads(json.dumps(cfg.resolved(), default=str)))
    # a field added to TrainConfig after the run was made: the run had its default (a newer package must still find
    # a committed study complete)
    for k in set(new) - set(old):
        old[k] = _field_defaults().get(k, old.get(k))
    diff = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
    if diff:
        raise RuntimeError(
            f"{rd} is a finished run made with other settings: {[(k, old.get(k), new.get(k)) for k in diff]}. "
            "Delete it (or the study folder) to redo it with these settings, or write to another --out.")
    return "complete"


def _eval_key(cfg: TrainConfig, rewards: Rewards | None) -> str:
    conf = cfg.resolved()
    return json.dumps({"settings": {k: conf.get(k) for k in EVAL_FIELDS},
                       "rewards": None if rewards is None else rewards.key()}, sort_keys=True, default=str)


def _collect(models: "_Models") -> None:
    """Free a finished run's model copies, optimiser state and reference (gigabytes for a real model; the cycle
    collector takes a noticeable fraction of a second, so a tiny model's quick path skips it)."""
    if models.large:
        gc.collect()


class _Models:
    """Each model is loaded once per study (``resolve_model``); every run trains a deep copy of it."""

    def __init__(self) -> None:
        self.cache: dict[tuple, tuple[Any, Any]] = {}
        self.large = False  # any model over 10M parameters

    def get(self, cfg: TrainConfig):
        from grpo_lessons.training.models import resolve_model

        key = (cfg.model, cfg.dtype, cfg.device)
        if key not in self.cache:
            t0 = time.perf_counter()
            self.cache[key] = resolve_model(cfg.model, dtype=cfg.dtype, device=cfg.device)
            self.large |= sum(p.numel() for p in self.cache[key][0].parameters()) > 10_000_000
            print(f"loaded {cfg.model} in {time.perf_counter() - t0:.0f} s", flush=True)
        return self.cache[key]


def _data(study: Study, cfg: TrainConfig) -> tuple[list[dict], list[dict]]:
    from grpo_lessons.training.data import get_task

    task = None
    if study.train_rows is None or study.eval_rows is None:
        task = get_task(cfg.task)
    train = list(task.rows("train") if study.train_rows is None else study.train_rows)
    evals = list(task.rows("test") if study.eval_rows is None else study.eval_rows)
    return train, evals


def _rewards(study: Study, arm: Arm, seed: int) -> Rewards | None:
    make = arm.rewards or study.rewards
    return None if make is None else make(seed)


def _trainer(study: Study, cfg: TrainConfig, models: _Models, rewards: Rewards | None, initial_eval=None):
    from grpo_lessons.training.trainer import Trainer

    model, tok = models.get(cfg)
    train_rows, eval_rows = _data(study, cfg)
    kw = {} if rewards is None else {"reward_funcs": list(rewards.funcs), "reward_weights": rewards.weights,
                                     "accuracy_fn": rewards.accuracy_fn}
    return Trainer(cfg, model=copy.deepcopy(model), tokenizer=tok, train_rows=train_rows, eval_rows=eval_rows,
                   initial_eval=initial_eval, **kw)


def _initial_eval(study: Study, out: Path, cfg: TrainConfig, arm: Arm, models: _Models) -> dict | None:
    """The step-0 evaluation for runs with ``cfg``'s evaluation settings: from ``initial_eval.json`` when it has it,
    else computed once by the trainer's own :meth:`~Trainer.evaluate` (same attention, prompts, batch size), with
    reward functions of its own (a reward model with a random generator must not spend the run's draws)."""
    rewards = _rewards(study, arm, cfg.seed)
    if not cfg.eval_size:
        return None
    path = out / INITIAL_EVAL
    known = _read_json(path) if path.is_file() else []
    key = _eval_key(cfg, rewards)
    for entry in known:
        if entry["key"] == key:
            return entry["eval"]
    with tempfile.TemporaryDirectory() as tmp:
        trainer = _trainer(study, dataclasses.replace(cfg, out=tmp, beta=0.0, kl_start_every=0), models,
                           rewards)
        t0 = time.perf_counter()
        ev = trainer.evaluate()
        seconds = time.perf_counter() - t0
        del trainer
        _collect(models)
    known.append({"key": key, "eval": ev, "seconds": round(seconds, 1), "load_average": _load(),
                  "note": "greedy held-out evaluation of the starting weights, computed once and reused by every "
                          "run with these evaluation settings"})
    _write_json(path, known)
    print(f"held-out accuracy before training: {ev['accuracy']:.3f} on {ev['n']} prompts ({seconds:.0f} s), "
          "reused by every run", flush=True)
    return ev


def _progress(study: Study, arm: Arm, seed: int):
    def report(history):
        r = history[-1]
        parts = [f"{study.name}/{arm.name}/seed{seed} step {r['step']}:"]
        for k, fmt in (("reward_mean", ".3f"), ("completion_len", ".1f"), ("grad_norm", ".2f"), ("kl_start", ".4f"),
                       ("accuracy", ".3f"), ("seconds", ".1f")):
            if r.get(k) is not None:
                parts.append(f"{k} {format(r[k], fmt)}")
        print(" ".join(parts), flush=True)
    return report


def run_one(study: Study, arm: Arm, seed: int, out: Path, models: _Models) -> dict:
    """Run (or skip, when complete) one (arm, seed); returns its ``run.json``."""
    rd = run_dir(out, arm.name, seed)
    derived = arm.derive(out, seed) if arm.derive is not None else None
    cfg = _config(study, arm, seed, rd, derived)
    state = _run_state(rd, cfg)
    if state == "complete":
        print(f"{study.name}/{arm.name}/seed{seed}: complete, skipped", flush=True)
        return _read_json(rd / RUN_JSON)
    if state == "partial":
        print(f"{study.name}/{arm.name}/seed{seed}: partial, redone", flush=True)
        shutil.rmtree(rd)
    rd.mkdir(parents=True)
    ev = _initial_eval(study, out, cfg, arm, models)
    rewards = _rewards(study, arm, seed)  # fresh: the same reward-model draws in every arm of this seed
    info = {"study": study.name, "arm": arm.name, "label": arm.label or arm.name, "seed": seed,
            "sampling": arm.sampling, "complete": False, "machine": machine(), "load_average_at_start": _load(),
            "initial_eval_reused": ev is not None, "derived": derived}
    _write_json(rd / RUN_JSON, info)
    t0 = time.perf_counter()
    trainer = _trainer(study, cfg, models, rewards, initial_eval=ev)
    result = trainer.run(progress=False, callback=_progress(study, arm, seed))
    extra = {}
    if study.after_run is not None:
        train_rows, eval_rows = _data(study, cfg)
        extra = study.after_run(RunContext(study, arm, seed, rd, trainer.tokenizer, eval_rows, train_rows), result)
    steps = trainer.step_count
    del trainer, result
    _collect(models)
    info.update(complete=True, steps=steps, minutes=round((time.perf_counter() - t0) / 60, 3),
                load_average_at_end=_load(), config=json.loads(json.dumps(cfg.resolved(), default=str)),
                extra=extra)
    _write_json(rd / RUN_JSON, info)  # last: its "complete" says metrics.csv is whole
    return info


def run_study(study: Study, out: Path | str, *, arms: Sequence[str] | None = None) -> dict:
    """Run every (seed, arm) not yet complete -- seed by seed, so an interrupted study has whole pairs -- then write
    the summary, the analysis, the figures and ``RESULT.md``.  Returns the analysis."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    chosen = [a for a in study.arms if arms is None or a.name in arms]
    unknown = sorted(set(arms or ()) - {a.name for a in study.arms})
    if unknown:
        raise ValueError(f"unknown arm(s) {unknown}; this study has {[a.name for a in study.arms]}")
    _write_json(out / STUDY_JSON, _definition(study))
    models = _Models()
    if study.reference is not None and not (out / REFERENCE).is_file():
        arm = study.arm(study.baseline)
        with tempfile.TemporaryDirectory() as tmp:  # the starting weights as a run sees them (attention included)
            cfg = dataclasses.replace(_config(study, arm, study.seeds[0], Path(tmp), None), beta=0.0, kl_start_every=0)
            trainer = _trainer(study, cfg, models, _rewards(study, arm, study.seeds[0]))
            _write_json(out / REFERENCE, study.reference(trainer.model, trainer.tokenizer))
            del trainer
            _collect(models)
    total, done, spent = len(chosen) * len(study.seeds), 0, []
    for seed in study.seeds:
        for arm in chosen:
            t0 = time.perf_counter()
            info = run_one(study, arm, seed, out, models)
            done += 1
            if time.perf_counter() - t0 > 1.0 and info.get("minutes") is not None:
                spent.append(info["minutes"])
                left = (total - done) * sum(spent) / len(spent)
                print(f"[{done}/{total}] {arm.name} seed {seed}: {info['minutes']:.1f} min; about {left:.0f} min "
                      "left at this pace", flush=True)
    return analyse_study(study, out)


def _definition(study: Study) -> dict:
    return {"name": study.name, "title": study.title, "question": study.question, "seeds": list(study.seeds),
            "baseline": study.baseline, "base": dict(study.base), "budget": study.budget,
            "arms": [{"name": a.name, "label": a.label, "config": dict(a.config), "sampling": a.sampling,
                      "derived": a.derive is not None, "rewards": None if (a.rewards or study.rewards) is None
                      else (a.rewards or study.rewards)(study.seeds[0]).key()} for a in study.arms]}


# ---------------------------------------------------------------------------------------------
# summary: one row per run, from its files alone (``summarize_run``: grpo_lessons.training.stats, which the
# course's reader of a study uses too)
# ---------------------------------------------------------------------------------------------


def _mean(xs) -> float | None:
    xs = [float(x) for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def _complete_runs(study: Study, out: Path) -> list[Path]:
    return [run_dir(out, arm.name, seed) for arm in study.arms for seed in study.seeds
            if run_is_complete(run_dir(out, arm.name, seed))]


def read_summary(path: Path) -> list[dict]:
    """``summary.csv`` back as dicts of numbers (empty cells: None)."""
    return load_history(path)


def _write_summary(rows: list[dict], path: Path) -> None:
    cols = list(SUMMARY_COLUMNS) + [k for r in rows for k in r if k not in SUMMARY_COLUMNS]
    cols = list(dict.fromkeys(cols))
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(cols)
        for r in rows:
            w.writerow(["" if r.get(c) is None else (repr(r[c]) if isinstance(r[c], float) else r[c]) for c in cols])
    os.replace(tmp, path)


# ---------------------------------------------------------------------------------------------
# analysis
# ---------------------------------------------------------------------------------------------


def _interval_dict(iv: st.Interval) -> dict:
    return {"mean": iv.mean, "low": iv.low, "high": iv.high, "n": iv.n, "sd": iv.sd}


def analyse_study(study: Study, out: Path | str) -> dict:
    """``summary.csv``, ``analysis.json``, the figures and ``RESULT.md`` from the complete runs under ``out``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    if not (out / STUDY_JSON).is_file():  # what the runs were made with: run_study writes it, a re-analysis keeps it
        _write_json(out / STUDY_JSON, _definition(study))
    rows = [summarize_run(rd) for rd in _complete_runs(study, out)]
    _write_summary(rows, out / SUMMARY)
    by_arm: dict[str, dict[int, dict]] = {}
    for r in rows:
        by_arm.setdefault(r["arm"], {})[int(r["seed"])] = r
    base = by_arm.get(study.baseline, {})
    metrics = ["gain", "accuracy_after", *study.extra_metrics]
    arms = {}
    for arm in study.arms:
        runs = by_arm.get(arm.name, {})
        entry = {"label": arm.label or arm.name, "seeds": sorted(runs), "sampling": arm.sampling}
        for m in metrics:
            vals = {s: r[m] for s, r in runs.items() if r.get(m) is not None}
            if not vals:
                continue
            iv = st.mean_interval(list(vals.values()))
            entry[m] = {"per_seed": vals, **_interval_dict(iv)}
            bvals = {s: r[m] for s, r in base.items() if r.get(m) is not None}
            if arm.name != study.baseline and set(vals) & set(bvals):
                piv = st.paired_interval(vals, bvals)
                entry[m]["paired_vs_baseline"] = {"per_seed": st.paired_differences(vals, bvals),
                                                  **_interval_dict(piv), "p": st.t_test_p(piv)}
        entry["minutes"] = _mean([r.get("minutes") for r in runs.values()])
        arms[arm.name] = entry
    for m in metrics:  # Holm over this metric's comparisons to the baseline, then each verdict
        holm_verdicts([arms[a.name][m]["paired_vs_baseline"] for a in study.arms
                        if m in arms[a.name] and "paired_vs_baseline" in arms[a.name][m]])
    befores = sorted({r["accuracy_before"] for r in rows if r.get("accuracy_before") is not None})
    analysis = {"study": study.name, "baseline": study.baseline, "seeds": list(study.seeds), "runs": len(rows),
                "expected_runs": len(study.arms) * len(study.seeds), "accuracy_before_values": befores,
                "arms": arms, "shared_first_batch": _shared_batches(study, rows)}
    _write_json(out / ANALYSIS, analysis)
    if rows:
        _plot_curves(study, out)
        _plot_gains(study, analysis, out)
    (out / RESULT).write_text(_markdown(study, out, rows, analysis))
    return analysis


def holm_verdicts(entries: list[dict], level: float = 0.05) -> None:
    """Fill ``p_holm`` and ``verdict`` of each paired entry: Holm's correction over the study's comparisons to the
    baseline on one metric; a difference is called only where its corrected p is below ``level`` (and its interval
    then excludes 0 too).  Identical differences on every seed (an accuracy that moved in the same whole steps) have
    no spread to test and say so instead of a zero-width interval."""
    adj = st.holm([e.get("p") for e in entries])
    for e, q in zip(entries, adj):
        e["p_holm"] = q
        if e.get("sd") is None:
            e["verdict"] = "one seed: no interval"
        elif e["sd"] == 0.0:
            e["verdict"] = no_spread_verdict(e["mean"])
        elif q is not None and q < level:
            e["verdict"] = ("higher" if e["mean"] > 0 else "lower") + f" (Holm p = {q:.2g} over {len(entries)})"
        else:
            e["verdict"] = f"no difference shown (Holm p = {q:.2g} over {len(entries)})"


def _shared_batches(study: Study, rows: list[dict]) -> dict:
    """Per sampling group and seed: do the arms' first batches agree (their ``first_batch_hash``)?"""
    groups: dict[str, list[str]] = {}
    for a in study.arms:
        groups.setdefault(a.sampling, []).append(a.name)
    hashes = {(r["arm"], int(r["seed"])): r.get("first_batch_hash") for r in rows}
    res = {}
    for g, names in groups.items():
        if len(names) < 2:
            continue
        per_seed = {}
        for s in study.seeds:
            hs = {hashes[(n, s)] for n in names if (n, s) in hashes}
            if len(hs) >= 1 and sum((n, s) in hashes for n in names) >= 2:
                per_seed[s] = len(hs) == 1
        res[g] = {"arms": names, "identical_per_seed": per_seed}
    return res


def _curve_data(study: Study, out: Path, metrics: Sequence[str]) -> dict[str, dict[str, list]]:
    """Per metric, per arm: the seed band of the runs under ``out`` (each run's ``metrics.csv`` read once)."""
    from .plots import curve_points

    histories = {}
    for arm in study.arms:
        for seed in study.seeds:
            rd = run_dir(out, arm.name, seed)
            if run_is_complete(rd):  # an unfinished run (run.json "complete": false) is in no band
                histories.setdefault(arm.name, []).append(load_history(rd / METRICS_NAME))
    data: dict[str, dict[str, list]] = {}
    for metric in metrics:
        for arm, hs in histories.items():
            band = st.seed_band([curve_points(h, metric) for h in hs])
            if band:
                data.setdefault(metric, {})[arm] = band
    return data


def _colors(n: int):
    from matplotlib import colormaps

    cmap = colormaps["tab10" if n <= 10 else "tab20"]
    return [cmap(i % cmap.N) for i in range(n)]


def _plot_curves(study: Study, out: Path) -> None:
    from matplotlib.figure import Figure

    from .plots import curve_title
    from grpo_lessons.training.plots import draw_seed_band

    data_by_metric = _curve_data(study, out, study.curves)
    metrics = [m for m in study.curves if m in data_by_metric]
    if not metrics:
        return
    cols = min(3, len(metrics))
    nrows = math.ceil(len(metrics) / cols)
    fig = Figure(figsize=(5.2 * cols, 3.6 * nrows + 0.8))
    axes = fig.subplots(nrows, cols, squeeze=False).ravel()
    colors = _colors(len(study.arms))
    styles = ["-", "--", ":"]
    for ax, m in zip(axes, metrics):
        data = data_by_metric[m]
        for i, (arm, c) in enumerate(zip(study.arms, colors)):
            band = data.get(arm.name)
            if not band:
                continue
            draw_seed_band(ax, band, color=c, label=arm.name, linestyle=styles[(i // 10) % 3],
                           marker="o" if m == "accuracy" else None, alpha=0.12)
        ax.set_title(curve_title(m), fontsize=10)
        ax.set_xlabel("step")
    for ax in axes[len(metrics):]:
        ax.set_visible(False)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="center right", fontsize=8, frameon=False)
    fig.suptitle(f"{study.title} (line: mean over seeds {list(study.seeds)}, band: min-max)", fontsize=11)
    w, h = fig.get_figwidth(), fig.get_figheight()
    fig.subplots_adjust(left=0.7 / w, right=1 - 1.6 / w, bottom=0.6 / h, top=1 - 0.7 / h, wspace=0.25,
                        hspace=0.45)  # fixed margins: tight_layout costs more than the whole quick run
    fig.savefig(out / "curves.png", dpi=100)


def _plot_gains(study: Study, analysis: dict, out: Path) -> None:
    from matplotlib.figure import Figure

    arms = [a for a in study.arms if "gain" in analysis["arms"].get(a.name, {})]
    if not arms:
        return
    fig = Figure(figsize=(10, 0.4 * len(arms) + 1.8))
    ax1, ax2 = fig.subplots(1, 2, sharey=True)
    ys = list(range(len(arms)))[::-1]
    for y, arm in zip(ys, arms):
        g = analysis["arms"][arm.name]["gain"]
        _interval_bar(ax1, y, g, 100.0)
        p = g.get("paired_vs_baseline")
        if p is not None:
            _interval_bar(ax2, y, p, 100.0)
    ax1.set_yticks(ys)
    ax1.set_yticklabels([a.name for a in arms], fontsize=9)
    ax1.axvline(0, color="grey", lw=0.8)
    ax2.axvline(0, color="grey", lw=0.8)
    ax1.set_title("accuracy gain (points)", fontsize=10)
    ax2.set_title(f"gain minus {study.baseline}'s, same seed (points)", fontsize=10)
    fig.suptitle(f"{study.title}\ndots: seeds; diamond and bar: mean and 95 % t-interval", fontsize=10)
    w, h = fig.get_figwidth(), fig.get_figheight()
    fig.subplots_adjust(left=2.0 / w, right=1 - 0.3 / w, bottom=0.5 / h, top=1 - 0.9 / h, wspace=0.08)
    fig.savefig(out / "gains.png", dpi=100)


def _interval_bar(ax, y: float, iv: dict, scale: float) -> None:
    ax.plot([v * scale for v in iv["per_seed"].values()], [y] * len(iv["per_seed"]), "o", ms=3, color="grey")
    if iv.get("low") is not None:
        ax.plot([iv["low"] * scale, iv["high"] * scale], [y, y], "-", lw=2.5, color="C0")
    ax.plot([iv["mean"] * scale], [y], "D", ms=5, color="C0")


def _pct(x, signed=False) -> str:
    if x is None:
        return "-"
    return f"{100 * x:+.1f}" if signed else f"{100 * x:.1f}"


def _ci(entry: dict, scale=100.0, signed=True, digits=1) -> str:
    spec = f"+.{digits}f" if signed else f".{digits}f"
    s = format(entry["mean"] * scale, spec)
    if entry.get("low") is None:
        return s + " (n = 1)"
    return f"{s} [{format(entry['low'] * scale, spec)}, {format(entry['high'] * scale, spec)}]"


def _resolved_differences(arm: str, infos: list[dict], base_conf: dict) -> str:
    """What the trainer actually ran for ``arm`` beyond its overrides: resolved settings that differ from the
    baseline's (the variant's defaults: beta, dynamic sampling, ...) and the variant's loss settings."""
    from grpo_lessons.core.variants import get_variant

    mine = next((i["config"] for i in infos if i["arm"] == arm), None)
    if mine is None:
        return ""
    skip = {"out", "seed", "variant", "group_size", "prompts_per_step", "lr"}
    diff = {k: mine[k] for k in mine if k not in skip and mine.get(k) != base_conf.get(k)}
    loss = dict(get_variant(mine["variant"]).loss_defaults)
    text = f"; loss settings (registry) `{json.dumps(loss, default=str)}`"
    if diff:
        text += f"; resolved, unlike the baseline: `{json.dumps(diff, default=str)}`"
    return text


def _markdown(study: Study, out: Path, rows: list[dict], an: dict) -> str:
    infos = [_read_json(rd / RUN_JSON) for rd in _complete_runs(study, out)]
    base_infos = [i for i in infos if i["arm"] == study.baseline] or infos
    conf = base_infos[0]["config"] if base_infos else {}
    m = infos[0]["machine"] if infos else {}
    loads = [i.get("load_average_at_start", [None])[0] for i in infos] + \
            [i.get("load_average_at_end", [None])[0] for i in infos]
    loads = [x for x in loads if x is not None]
    minutes = [i["minutes"] for i in infos if i.get("minutes") is not None]
    L = [f"# {study.title}", "", study.question, ""]
    if len(rows) < an["expected_runs"]:
        L += [f"**Incomplete: {len(rows)} of {an['expected_runs']} runs are finished.**", ""]
    G, P = conf.get("group_size"), conf.get("prompts_per_step")
    L += ["## Setup", "",
          f"- Model `{conf.get('model')}`, task `{conf.get('task')}`, {len(study.seeds)} seeds {list(study.seeds)} "
          f"(the same in every arm), baseline arm `{study.baseline}`.",
          f"- Budget per run: {conf.get('steps')} steps"
          + (f" or {conf.get('max_minutes'):g} minutes of training" if conf.get("max_minutes") else "")
          + f" of {P} prompts x G = {G} (baseline), mu = {conf.get('mu')}, lr {conf.get('lr')}, "
          f"T = {conf.get('temperature')}, {conf.get('max_new_tokens')} new tokens, precision {conf.get('precision')}, "
          f"sampler {conf.get('sampler_dtype') or 'the trained weights'}.",
          f"- Held-out accuracy: greedy, {conf.get('eval_size')} prompts not in the training set, every "
          f"{conf.get('eval_every')} steps and at the end (one run's standard error at 50 %: "
          f"{100 * math.sqrt(0.25 / max(1, conf.get('eval_size') or 1)):.1f} points).",
          ]
    befores = an["accuracy_before_values"]
    if len(befores) == 1:
        reused = all(r.get("initial_eval_reused") for r in rows)
        L.append(f"- Accuracy before training: {_pct(befores[0])} % for every run"
                 + (" (computed once and reused: greedy decoding of the same weights on the same prompts gives the "
                    "same number in every run)." if reused else "."))
    elif befores:
        L.append(f"- Accuracy before training differs between arms (they change the evaluation): "
                 f"{[_pct(b) for b in befores]} %.")
    if study.budget:
        L.append(f"- Planned budget (written before the runs; measured minutes on the next line): {study.budget}")
    # runs added to a study later may come from another machine: name each CPU with the runs it made
    def cpu(i: dict) -> str:
        return str((i.get("machine") or {}).get("cpu"))

    cpus: dict[str, list[str]] = {}
    for i in infos:
        cpus.setdefault(cpu(i), []).append(f"{i['arm']}/seed{i['seed']}")
    where = str(m.get("cpu"))
    if len(cpus) > 1:
        where = "; ".join(f"{c} ({', '.join(runs)})" for c, runs in cpus.items())
        if all(len({cpu(i) for i in infos if i["seed"] == s}) == 1 for s in {i["seed"] for i in infos}):
            where += " -- the two runs of a seed on the same machine"
    L.append(f"- Machine: {where}, {m.get('logical_cpus')} logical CPUs, {m.get('torch_threads')} torch "
             f"thread(s), GPU {m.get('gpu')}, torch {m.get('torch')}. Load average (1 min) at the runs' starts and "
             f"ends: {min(loads) if loads else '-'} to {max(loads) if loads else '-'}. Minutes per run: "
             f"{min(minutes) if minutes else 0:.1f} to {max(minutes) if minutes else 0:.1f} "
             f"({sum(minutes):.0f} in all).")
    L += ["", "Arms (settings that differ from the shared ones):", ""]
    for a in study.arms:
        der = [i.get("derived") for i in infos if i["arm"] == a.name and i.get("derived")]
        extra = ""
        if der:
            extra = "; derived per seed: " + "; ".join(f"seed {i['seed']}: {i['derived'].get('note', '')}"
                                                      for i in infos if i["arm"] == a.name and i.get("derived"))
        L.append(f"- `{a.name}`: {a.label or a.name} -- `{json.dumps(dict(a.config), default=str)}`"
                 f"{_resolved_differences(a.name, infos, conf)}{extra}")
    groups = an["shared_first_batch"]
    if groups:
        L += ["", "First batches (the trainer's `batch_hash` of step 1, per seed):", ""]
        for g, d in groups.items():
            same = d["identical_per_seed"]
            L.append(f"- {', '.join(f'`{n}`' for n in d['arms'])} sample the same first batch: "
                     + (", ".join(f"seed {s} {'identical' if ok else 'DIFFERENT'}" for s, ok in same.items())
                        if same else "not checked yet"))
    for note in study.notes:
        L += ["", note]

    L += ["", "## Held-out accuracy", "",
          "Gain = accuracy after minus before, in points; mean over seeds [95 % t-interval]. Paired difference = "
          f"the arm's gain minus `{study.baseline}`'s gain with the same seed, mean [95 % t-interval].", "",
          "| arm | seeds | after | gain | paired difference to baseline | verdict |", "|---|---|---|---|---|---|"]
    findings, none = [], []
    for a in study.arms:
        e = an["arms"].get(a.name, {})
        if "gain" not in e:
            L.append(f"| {a.label or a.name} | 0 | - | - | - | not run yet |")
            continue
        p = e["gain"].get("paired_vs_baseline")
        ver = "baseline" if a.name == study.baseline else (p["verdict"] if p else "-")
        L.append(f"| {a.label or a.name} | {e['gain']['n']} | {_ci(e['accuracy_after'], signed=False)} | "
                 f"{_ci(e['gain'])} | {_ci(p) if p else '-'} | {ver} |")
        if p and p.get("low") is not None:
            called = p.get("verdict", "").startswith(("higher", "lower"))  # Holm-corrected (analysis.json)
            (findings if called else none).append((a, p))
    L += [""]
    for a in study.arms:
        e = an["arms"].get(a.name, {}).get("gain")
        if e and e.get("low") is not None and e["low"] > 0:
            L.append(f"- `{a.name}` improves held-out accuracy: {_ci(e)} points.")
        elif e and e.get("low") is not None and e["high"] < 0:
            L.append(f"- `{a.name}` lowers held-out accuracy: {_ci(e)} points.")
    L.append("")
    if findings:
        for a, p in findings:
            L.append(f"- **`{a.name}` differs from `{study.baseline}`**: its gain is {_ci(p)} points "
                     f"{'higher' if p['mean'] > 0 else 'lower'} with the same seed (Holm p = {p['p_holm']:.2g} over "
                     "the comparisons to the baseline).")
    if none:
        L.append(f"- No difference from `{study.baseline}` is shown for {', '.join(f'`{a.name}`' for a, _ in none)}: "
                 "after Holm's correction over the comparisons to the baseline none is called, and the data do not "
                 "rank them (no difference shown is not the same as no difference).")
    if not findings and not none:
        L.append("- No paired comparison yet (the baseline and an arm need a common seed).")
    if study.claim is not None:
        col, thr, text = study.claim
        L += ["", f"### Claim: {text}", ""]
        for r in sorted(rows, key=lambda r: (r["arm"], r["seed"])):
            v = r.get(col)
            L.append(f"- `{r['arm']}` seed {r['seed']}: {col} = {'-' if v is None else format(v, '.3f')} -- "
                     + ("met" if v is not None and v >= thr else "**not met**"))
        ok = [r.get(col) is not None and r[col] >= thr for r in rows]
        L.append(f"- Met in {sum(ok)} of {len(ok)} runs.")
    for metric in study.extra_metrics:
        L += ["", f"### {metric}", "", "| arm | mean [95 % t-interval] | paired difference to baseline | verdict |",
              "|---|---|---|---|"]
        ref = _read_json(out / REFERENCE) if (out / REFERENCE).is_file() else {}
        if metric in ref:
            L.append(f"| starting model (no training) | {ref[metric]:.3f} | - | - |")
        for a in study.arms:
            e = an["arms"].get(a.name, {}).get(metric)
            if not e:
                continue
            p = e.get("paired_vs_baseline")
            L.append(f"| {a.label or a.name} | {_ci(e, 1.0, False, 3)} | {_ci(p, 1.0, True, 3) if p else '-'} | "
                     f"{'baseline' if a.name == study.baseline else (p['verdict'] if p else '-')} |")
    L += ["", "## Every run", "",
          "| arm | seed | before | after | gain | steps | final length | entropy | clip low/high | KL to start | "
          "adv RMS | minutes | load start/end |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: ([a.name for a in study.arms].index(r["arm"]), r["seed"])):
        def f(k, spec=".3f"):
            return "-" if r.get(k) is None else format(r[k], spec)
        L.append(f"| {r['arm']} | {r['seed']} | {_pct(r['accuracy_before'])} | {_pct(r['accuracy_after'])} | "
                 f"{_pct(r['gain'], True)} | {r['steps']} | {f('completion_len_last5', '.1f')} | "
                 f"{f('entropy_last5')} | {f('clip_frac_low_mean', '.4f')}/{f('clip_frac_high_mean', '.4f')} | "
                 f"{f('kl_start_last', '.4f')} | {f('adv_rms_mean')} | {f('minutes', '.1f')} | "
                 f"{f('load_start', '.2f')}/{f('load_end', '.2f')} |")
    L += ["", "Final length: the final completion length, the mean number of tokens of the completions sampled for "
          "training (`completion_len`) over the last five training steps (the greedy held-out length is "
          "`eval_completion_len`); entropy: the same mean of the sampler's token entropy; clip fractions, advantage "
          "RMS: means over all steps; KL to start: the last logged value.", "",
          "Files: `runs/<arm>/seed<k>/metrics.csv` (the trainer's log), `run.json`, `config.json`; `summary.csv`, "
          "`analysis.json`, `curves.png`, `gains.png`" + (", `initial_eval.json`" if (out / INITIAL_EVAL).is_file()
                                                         else "") + ".", ""]
    return "\n".join(L)


# ---------------------------------------------------------------------------------------------
# the command line every study script shares
# ---------------------------------------------------------------------------------------------


def _shown(path: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def add_arguments(p: argparse.ArgumentParser, *, out: Path) -> None:
    """The flags every study script has (each script sets its own defaults with ``p.set_defaults``)."""
    p.add_argument("--out", default=None, help=f"the study folder (default: {_shown(out)}; with --quick a "
                                               "temporary folder)")
    p.add_argument("--quick", action="store_true", help="tiny-qwen2, a step or two, a handful of prompts: seconds")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--arms", nargs="+", default=None,
                   help="run only these arms (the analysis covers every arm); with --analyse-only, analyse only these "
                        "(default there: the arms the folder's study.json recorded)")
    p.add_argument("--analyse-only", action="store_true", help="rewrite summary, analysis, figures from the runs "
                                                                 "(the seeds the folder's study.json recorded, "
                                                                 "unless --seeds names others)")
    p.add_argument("--threads", type=int, default=2, help="torch threads (2 on a quiet 2-core machine)")
    p.add_argument("--model", default="smollm2", help="smollm2 (offline), a hub name such as Qwen/Qwen2.5-0.5B-Instruct")
    p.add_argument("--device", default="cpu", help="cpu or cuda (cuda: fp32 weights, bf16-mixed compute)")
    p.add_argument("--steps", type=int)
    p.add_argument("--prompts-per-step", type=int)
    p.add_argument("--eval-size", type=int)
    p.add_argument("--eval-every", type=int)
    p.add_argument("--lr", type=float)
    p.add_argument("--precision", choices=["auto", "bf16-mixed", "fp32"], default="auto",
                   help="auto (default): the study's bf16 fast path (bf16-mixed compute, bf16 sampler) where the CPU "
                        "multiplies bf16 in hardware, else fp32 throughout (a CPU with AVX2 only emulates bf16 "
                        "matrix products, tens of times slower); on CUDA the study's own settings")


def apply_common(args, base: dict, quick: dict) -> dict:
    """The shared TrainConfig fields after the command line: ``quick`` replaces settings under ``--quick``;
    explicit ``--steps`` etc. win; ``--device cuda`` means fp32 weights with bf16-mixed compute and a bf16 sampler;
    ``--precision auto`` keeps the bf16 fast path only on a CPU that multiplies bf16 in hardware (else fp32)."""
    base = dict(base)
    if args.quick:
        base.update(quick)
        base["model"] = quick.get("model", "tiny-qwen2")
    else:
        base["model"] = args.model
    for flag, key in (("steps", "steps"), ("prompts_per_step", "prompts_per_step"), ("eval_size", "eval_size"),
                      ("eval_every", "eval_every"), ("lr", "lr")):
        if getattr(args, flag) is not None:
            base[key] = getattr(args, flag)
    if args.device != "cpu":
        base.update(device=args.device, dtype="float32")  # fp32 master weights; the study's precision stays
    precision = getattr(args, "precision", "auto")
    if precision == "auto" and args.device == "cpu":
        precision = "bf16-mixed" if cpu_bf16_speedup() >= 1.0 else "fp32"
    if precision == "fp32":
        base.update(precision="fp32", sampler_dtype=None)  # one fp32 model samples and trains: no copies to round
    elif precision == "bf16-mixed":
        base.update(precision="bf16-mixed")
    return base


def _recorded_arms_only(study: Study, out: Path, arms: Sequence[str] | None) -> Study:
    """For ``--analyse-only``: the arms named by ``--arms``, else those the folder's ``study.json`` recorded when the
    study ran, so that an arm added to a script's defaults later does not turn a finished study into an "incomplete"
    one.  The baseline always stays."""
    keep = set(arms or [])
    if not keep and (out / STUDY_JSON).is_file():
        keep = {a["name"] for a in _read_json(out / STUDY_JSON).get("arms", [])}
    if not keep:
        return study
    unknown = keep - {a.name for a in study.arms}
    if unknown:
        raise SystemExit(f"--analyse-only: {sorted(unknown)} are not arms of {study.name} "
                         f"(its arms: {[a.name for a in study.arms]})")
    return dataclasses.replace(study, arms=[a for a in study.arms if a.name in keep or a.name == study.baseline])


def main_for(build: Callable[[Any], Study], parser: argparse.ArgumentParser, argv=None, *,
             default_out: Path) -> int:
    """Parse, build the study, run it (or only analyse it) and print where RESULT.md is."""
    args = parser.parse_args(argv)
    given = sys.argv[1:] if argv is None else list(argv)
    seeds_given = any(a == "--seeds" or a.startswith("--seeds=") for a in given)
    torch.set_num_threads(args.threads)
    study = build(args)
    out = Path(args.out) if args.out else (quick_out(study.name) if args.quick else default_out)
    if args.analyse_only:
        recorded = _read_json(out / STUDY_JSON).get("seeds") if (out / STUDY_JSON).is_file() else None
        if recorded and not seeds_given:  # a study extended to more seeds is re-analysed on all of them
            args.seeds = [int(x) for x in recorded]
            study = build(args)  # what the script derives from the seeds (its planned budget) follows them
        study = _recorded_arms_only(study, out, args.arms)
        analyse_study(study, out)
    else:
        run_study(study, out, arms=args.arms)
    print(f"wrote {out / RESULT}", flush=True)
    return 0
