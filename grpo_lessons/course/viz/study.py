"""Reading a committed study: the table with intervals, learning curves with seed bands, a widget (20, 06-10).

A study (``benchmarks/variant_study.py``) trains every arm -- here, every variant -- with the same seeds and writes
each run as ``<study>/runs/<arm>/seed<k>/metrics.csv`` (the trainer's own log) with a ``run.json`` that says when
the run is finished.  :func:`load_study` reads the finished runs of such a folder (an unfinished study is fine: it
says "k of n runs finished"), :func:`study_table` computes per arm the mean gain in held-out accuracy with its 95 %
t-interval over seeds and the paired difference to the baseline arm (GRPO), seed by seed, with its interval;
:func:`plot_curves` and :func:`study_widget` draw a metric over steps as the mean over seeds with the min-max band.
The numbers come from :mod:`grpo_lessons.training.stats`, the same functions the study runner uses.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpo_lessons.training.plots import draw_seed_band
from grpo_lessons.training.records import METRICS_NAME, load_history
from grpo_lessons.training.plots import _PERCENT, CURVE_TITLES, curve_points, curve_title  # noqa: F401
from grpo_lessons.training.stats import (RUN_JSON, RUNS, Interval, mean_interval, paired_differences, paired_interval,
                                         run_dir, run_is_complete, seed_band, summarize_run, t_test_p, verdict)
from grpo_lessons.training.study import holm_verdicts

from ._common import _align, _dropdown, _interactive, _plt

__all__ = [
    "CURVE_TITLES", "curve_title", "DEFAULT_STUDY", "StudyNotFound", "StudyResults", "study_dir", "load_study",
    "study_table", "format_table", "metric_table", "format_metric_table", "interval_verdicts", "curve_points",
    "curve_bands", "plot_curves", "study_widget", "show_variant",
]

DEFAULT_STUDY = "variant_study"
#: The script in benchmarks/ that writes each committed study folder.
_SCRIPTS = {"variant_study": "variant_study.py", "gdpo_vs_grpo": "gdpo_study.py", "gopo_vs_grpo": "gopo_vs_grpo.py",
            "diversity_study": "diversity.py --study", "copy_rounding_training": "copy_rounding.py --train",
            "cpu_learning_10min_seeds": "cpu_learning.py --study", "offpolicy_run": "offpolicy_run.py",
            "dr_grpo_length": "length_study.py",
            "dynamic_sampling": "grpo-lessons compare --plugin benchmarks.dynamic_sampling_variant",
            "dynamic_sampling_equal_completions": "grpo-lessons compare --plugin benchmarks.dynamic_sampling_variant "
                                                  "--max-completions 256"}
#: The per-step metrics a curve can show (the trainer's ``metrics.csv`` columns) and their titles.


class StudyNotFound(FileNotFoundError):
    """The study folder is not there, or is not a study folder (no ``runs/``)."""


def study_dir(name: str = DEFAULT_STUDY) -> Path:
    """``benchmarks/results/<name>`` of the repository this package is installed from (editable install)."""
    import grpo_lessons

    return Path(grpo_lessons.__file__).resolve().parents[1] / "benchmarks" / "results" / name


@dataclass
class StudyResults:
    """The finished runs of one study folder: their summary rows and per-step histories, keyed by (arm, seed)."""

    path: Path
    title: str
    baseline: str
    arms: list[str]  # in the study's order (study.json), else as found, baseline first
    seeds: list[int]
    labels: dict[str, str]
    rows: dict[tuple[str, int], dict] = field(default_factory=dict)  # summarize_run of each finished run
    histories: dict[tuple[str, int], list[dict]] = field(default_factory=dict)  # metrics.csv of each finished run
    unfinished: list[tuple[str, int]] = field(default_factory=list)  # started (a folder), not finished
    reference: dict[str, Any] = field(default_factory=dict)  # the starting model's measurements (reference.json)

    @property
    def expected(self) -> int:
        return len(self.arms) * len(self.seeds)

    @property
    def finished(self) -> int:
        return len(self.rows)

    @property
    def complete(self) -> bool:
        return self.finished == self.expected

    def seeds_of(self, arm: str) -> list[int]:
        """The seeds of ``arm`` whose runs are finished."""
        return sorted(s for a, s in self.rows if a == arm)

    def status(self) -> str:
        """``"k of n runs finished"``, and which are missing while the study is incomplete."""
        text = f"{self.finished} of {self.expected} runs finished"
        if self.complete:
            return text + f" ({len(self.arms)} arms x seeds {self.seeds})"
        missing = [f"{a}/seed{s}" for a in self.arms for s in self.seeds if (a, s) not in self.rows]
        shown = ", ".join(missing[:6]) + (f" and {len(missing) - 6} more" if len(missing) > 6 else "")
        return f"{text}; not yet: {shown}"


def load_study(path: str | Path | None = None) -> StudyResults:
    """Read the finished runs of a study folder (default: the committed variant study).

    Arms, seeds and the baseline come from the folder's ``study.json`` when the study has written it, else from the
    run folders found (the baseline is ``grpo`` when present).  A run is finished when its ``run.json`` says so;
    unfinished runs are listed, not read.  Raises :class:`StudyNotFound` with what to do when there is no study.
    """
    path = study_dir() if path is None else Path(path)
    if not path.is_dir():
        raise StudyNotFound(
            f"no study folder at {path}. Committed studies live in the repository under "
            f"benchmarks/results/<study>/ (an installed package does not carry them): open the notebook from a clone "
            f"of the repository, or run the study's script in benchmarks/ to make one "
            f"({_SCRIPTS.get(path.name, 'e.g. variant_study.py')}).")
    definition: dict[str, Any] = {}
    if (path / "study.json").is_file():
        definition = json.loads((path / "study.json").read_text())
    if not (path / RUNS).is_dir() and not definition:
        raise StudyNotFound(f"{path} is not a study folder: it has neither {RUNS}/ nor study.json")
    found = {}
    if (path / RUNS).is_dir():
        for arm_dir in sorted(p for p in (path / RUNS).iterdir() if p.is_dir()):
            seeds = sorted(int(p.name[4:]) for p in arm_dir.iterdir()
                           if p.is_dir() and p.name.startswith("seed") and p.name[4:].isdigit())
            if seeds:
                found[arm_dir.name] = seeds
    if definition:
        arms = [a["name"] for a in definition.get("arms", [])]
        arms += [a for a in found if a not in arms]
        seeds = list(definition.get("seeds", []))
        labels = {a["name"]: a.get("label") or a["name"] for a in definition.get("arms", [])}
        baseline = definition.get("baseline") or (arms[0] if arms else "")
        title = definition.get("title") or path.name
    else:
        baseline = "grpo" if "grpo" in found else next(iter(found), "")
        arms = [baseline] * bool(baseline) + [a for a in found if a != baseline]
        seeds, labels, title = [], {}, path.name
    seeds = sorted(set(seeds) | {s for ss in found.values() for s in ss})
    res = StudyResults(path=path, title=title, baseline=baseline, arms=arms, seeds=seeds,
                       labels={a: labels.get(a, a) for a in arms})
    if (path / "reference.json").is_file():
        res.reference = {k: v for k, v in json.loads((path / "reference.json").read_text()).items()
                         if isinstance(v, (int, float))}
    for arm, arm_seeds in found.items():
        for seed in arm_seeds:
            rd = run_dir(path, arm, seed)
            if run_is_complete(rd):
                res.rows[(arm, seed)] = summarize_run(rd)
                res.histories[(arm, seed)] = load_history(rd / METRICS_NAME)
            else:
                res.unfinished.append((arm, seed))
    return res


def _mean(xs: Sequence[float | None]) -> float | None:
    xs = [float(x) for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def study_table(res: StudyResults, baseline: str | None = None) -> list[dict]:
    """One row per arm with a finished run, in the study's order.

    ``gain``: the :class:`~grpo_lessons.training.stats.Interval` of (accuracy after - before) over the arm's seeds;
    ``paired``: the interval of the seed-by-seed differences ``gain(arm) - gain(baseline)`` over the seeds both have
    (None for the baseline itself); ``gain_per_seed`` / ``paired_per_seed`` the numbers behind them; ``p`` the paired
    t-test's p-value and ``p_holm`` its Holm-corrected value over the table's comparisons to the baseline, with
    ``verdict`` the study runner's wording (a difference is called only where ``p_holm < 0.05``); ``final_length``
    and ``entropy``: the trainer's means over the last five training steps, averaged over seeds; ``clip_frac``: the
    mean clip fraction over all steps and seeds; ``minutes``: wall-clock minutes per run.  Fractions, not points.
    """
    baseline = baseline or res.baseline
    base = {s: res.rows[(baseline, s)]["gain"] for s in res.seeds_of(baseline)
            if res.rows[(baseline, s)].get("gain") is not None}
    table = []
    for arm in res.arms:
        rows = {s: res.rows[(arm, s)] for s in res.seeds_of(arm)}
        if not rows:
            continue
        gains = {s: r["gain"] for s, r in rows.items() if r.get("gain") is not None}
        paired, per_seed = None, {}
        if arm != baseline and set(gains) & set(base):
            per_seed = paired_differences(gains, base)
            paired = paired_interval(gains, base)
        table.append({
            "variant": arm, "label": res.labels.get(arm, arm), "seeds": sorted(rows), "n": len(gains),
            "gain": mean_interval(list(gains.values())) if gains else None, "gain_per_seed": gains,
            "paired": paired, "paired_per_seed": per_seed,
            "accuracy_before": _mean([r.get("accuracy_before") for r in rows.values()]),
            "accuracy_after": _mean([r.get("accuracy_after") for r in rows.values()]),
            "final_length": _mean([r.get("completion_len_last5") for r in rows.values()]),
            "entropy": _mean([r.get("entropy_last5") for r in rows.values()]),
            "clip_frac": _mean([r.get("clip_frac_mean") for r in rows.values()]),
            "minutes": _mean([r.get("minutes") for r in rows.values()]),
        })
    # Holm over the comparisons to the baseline, as the study runner's RESULT.md does
    entries = [{"p": t_test_p(r["paired"]), "sd": r["paired"].sd, "mean": r["paired"].mean}
               for r in table if r["paired"] is not None]
    holm_verdicts(entries)
    it = iter(entries)
    for r in table:
        e = next(it) if r["paired"] is not None else {}
        r["p"], r["p_holm"], r["verdict"] = e.get("p"), e.get("p_holm"), e.get("verdict")
    return table


def _iv(iv: Interval | None, scale: float = 100.0) -> str:
    if iv is None:
        return "-"
    if iv.low is None:
        return f"{iv.mean * scale:+.1f} (n = 1)"
    return f"{iv.mean * scale:+.1f} [{iv.low * scale:+.1f}, {iv.high * scale:+.1f}]"


def _num(x: float | None, spec: str) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-".rjust(int(spec.split(".")[0] or 0))
    return format(x, spec)


def format_table(table: list[dict], baseline: str = "grpo") -> str:
    """The table as text: gains and paired differences in points with their 95 % t-intervals, the paired difference's
    Holm-corrected p over the table's comparisons and its verdict: ``higher`` / ``lower`` only where that p is below
    0.05, ``covers 0`` where the interval does, ``not after Holm`` where the interval alone excludes 0, ``same on
    every seed`` where the differences have no spread to test."""
    w = max([15] + [len(str(r["variant"])) for r in table])  # the longest arm name sets the first column
    head = (f"{'variant':<{w}} {'seeds':>5}  {'gain, points [95% CI]':<24} {f'minus {baseline}, same seed':<24} "
            f"{'Holm p':>6} {'verdict':<14} {'length':>6} {'entropy':>7} {'clip':>6} {'min':>5}")
    lines = [head, "-" * len(head)]
    for r in table:
        p = r["paired"]
        q = r.get("p_holm")
        if r["variant"] == baseline:
            ver = "baseline"
        elif p is None or p.low is None:
            ver = "-"
        elif p.sd == 0.0:
            ver = "same on every seed" if p.mean != 0.0 else "0 on every seed"
        elif q is not None and q < 0.05:
            ver = "higher" if p.mean > 0 else "lower"
        else:
            ver = "covers 0" if not p.excludes_zero() else "not after Holm"
        lines.append(f"{r['variant']:<{w}} {r['n']:>5}  {_iv(r['gain']):<24} {_iv(p):<24} {_num(q, '6.3f')} {ver:<14} "
                     f"{_num(r['final_length'], '6.1f')} {_num(r['entropy'], '7.3f')} {_num(r['clip_frac'], '6.3f')} "
                     f"{_num(r['minutes'], '5.1f')}")
    return "\n".join(lines)


def metric_table(res: StudyResults, metrics: Sequence[str], baseline: str | None = None) -> list[dict]:
    """Any per-run summary columns (e.g. a study's diversity measures), one row per arm with a finished run: for each
    metric the :class:`~grpo_lessons.training.stats.Interval` of its value over the arm's seeds (``row[metric]``)
    and of the seed-by-seed difference to the baseline over the seeds both have (``row[metric + "_paired"]``, None
    for the baseline itself or without a common seed).  Values as the runs logged them (no scaling)."""
    baseline = baseline or res.baseline

    def values(arm: str, m: str) -> dict[int, float]:
        return {s: float(res.rows[(arm, s)][m]) for s in res.seeds_of(arm) if res.rows[(arm, s)].get(m) is not None}

    base = {m: values(baseline, m) for m in metrics}
    table = []
    for arm in res.arms:
        seeds = res.seeds_of(arm)
        if not seeds:
            continue
        row: dict[str, Any] = {"variant": arm, "label": res.labels.get(arm, arm), "seeds": seeds,
                               "is_baseline": arm == baseline}
        for m in metrics:
            vals = values(arm, m)
            row[m] = mean_interval(list(vals.values())) if vals else None
            row[m + "_paired"] = (paired_interval(vals, base[m]) if arm != baseline and set(vals) & set(base[m])
                                  else None)
        table.append(row)
    return table


def format_metric_table(table: list[dict], metrics: Sequence[str], *, paired: bool = False,
                        reference: dict | None = None, digits: int = 2) -> str:
    """:func:`metric_table` as text, one column per metric: the mean over seeds with its 95 % t-interval, or with
    ``paired=True`` the difference to the baseline on the same seed (``baseline`` in its row).  ``reference``: the
    starting model's values (:attr:`StudyResults.reference`), printed as a first row without an interval."""
    width = max(8, 3 * (digits + 4) + 4)

    def cell(iv: Interval | None, sign: bool) -> str:
        if iv is None:
            return "-"
        f = f"{{:{'+' if sign else ''}.{digits}f}}"
        if iv.low is None:
            return f.format(iv.mean) + " (n = 1)"
        return f"{f.format(iv.mean)} [{f.format(iv.low)}, {f.format(iv.high)}]"

    name_w = max([len(r["variant"]) for r in table] + [len("starting model")])
    lines = [f"{'':<{name_w}} " + " ".join(f"{m:>{width}}" for m in metrics)]
    if reference and not paired:
        lines.append(f"{'starting model':<{name_w}} " + " ".join(
            f"{('-' if reference.get(m) is None else format(reference[m], f'.{digits}f')):>{width}}" for m in metrics))
    for r in table:
        cells = []
        for m in metrics:
            if paired:
                iv = r.get(m + "_paired")
                cells.append("baseline" if r.get("is_baseline") else cell(iv, True))
            else:
                cells.append(cell(r.get(m), False))
        lines.append(f"{r['variant']:<{name_w}} " + " ".join(f"{c:>{width}}" for c in cells))
    return "\n".join(lines)


def interval_verdicts(table: list[dict]) -> dict[str, list[str]]:
    """Which variants' intervals exclude 0 and which cover it: ``gain_excludes_0``, ``gain_covers_0``,
    ``paired_excludes_0``, ``paired_covers_0``; ``no_interval`` for a variant with fewer than two seeds."""
    out: dict[str, list[str]] = {k: [] for k in ("gain_excludes_0", "gain_covers_0", "paired_excludes_0",
                                                 "paired_covers_0", "no_interval")}
    for r in table:
        g, p = r["gain"], r["paired"]
        if g is None or g.low is None:
            out["no_interval"].append(r["variant"])
            continue
        out["gain_excludes_0" if g.excludes_zero() else "gain_covers_0"].append(r["variant"])
        if p is not None and p.low is not None:
            out["paired_excludes_0" if p.excludes_zero() else "paired_covers_0"].append(r["variant"])
    return out


def curve_bands(res: StudyResults, metric: str, arms: Sequence[str] | None = None) -> dict[str, list[tuple]]:
    """Per arm, per step: ``(step, mean, min, max, n)`` of ``metric`` over the arm's finished seeds (steps where no
    seed logged it are left out; ``n`` says how many seeds did).  Accuracy in points."""
    out = {}
    for arm in (res.arms if arms is None else arms):
        band = seed_band([curve_points(res.histories[(arm, s)], metric) for s in res.seeds_of(arm)])
        if band:
            out[arm] = band
    return out


def _draw_bands(ax, res: StudyResults, metric: str, arms: Sequence[str]) -> None:
    bands = curve_bands(res, metric, arms)
    for i, arm in enumerate(arms):
        band = bands.get(arm)
        if not band:
            continue
        color = f"C{res.arms.index(arm) % 10}" if arm in res.arms else f"C{i % 10}"
        n = max(b[4] for b in band)
        draw_seed_band(ax, band, color=color, label=f"{arm} ({n} seed{'s' * (n != 1)})",
                       marker="o" if metric == "accuracy" else None)
    ax.set_title(curve_title(metric), fontsize=10)
    ax.set_xlabel("step")
    ax.grid(alpha=0.3)
    if not bands:
        ax.text(0.5, 0.5, "no finished run logs this metric" if arms else "pick at least one variant",
                ha="center", va="center", transform=ax.transAxes, color="grey")


def plot_curves(res: StudyResults, arms: Sequence[str] | None = None,
                metrics: Sequence[str] = ("accuracy", "completion_len", "entropy", "clip_frac")):
    """One panel per metric: for each arm the mean over its seeds (line) and the min-max over them (band)."""
    plt = _plt()
    arms = list(res.arms if arms is None else arms)
    # two panels a row, 7.8 in wide: at the inline backend's 100 dpi it fits the course site's ~760 px column
    cols = 1 if len(metrics) == 1 else 2
    rows = -(-len(metrics) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(7.8, 1.2 + 2.5 * rows), squeeze=False)
    flat = list(axes.flat)
    for ax in flat[len(metrics):]:
        fig.delaxes(ax)  # an odd number of metrics: no empty panel
    for ax, m in zip(flat, metrics):
        _draw_bands(ax, res, m, arms)
    legend = {}  # one entry per arm, from whichever panel drew it
    for ax in flat[:len(metrics)]:
        for h, label in zip(*ax.get_legend_handles_labels()):
            legend.setdefault(label, h)
    ncol = min(3, max(1, len(legend)))
    if legend:
        fig.legend(list(legend.values()), list(legend), loc="lower center", ncol=ncol, fontsize=9, frameon=False)
    fig.suptitle(f"{res.title}\nline: mean over seeds, band: min-max over seeds ({res.status().split(';')[0]})",
                 fontsize=9)
    legend_rows = -(-len(legend) // ncol)
    fig.tight_layout(rect=(0, (0.08 + 0.22 * legend_rows) / fig.get_figheight(), 1, 1))
    return fig


def study_widget(res: StudyResults | None = None, variants: Sequence[str] | None = None,
                 metric: str = "accuracy"):
    """Pick variants and a metric; their seed bands (mean line, min-max band) are overlaid on one plot."""
    import ipywidgets as widgets

    res = load_study() if res is None else res
    metrics = [m for m in CURVE_TITLES if any(m in h[0] for h in res.histories.values() if h)] or ["accuracy"]
    chosen = [v for v in (variants or [res.baseline]) if v in res.arms]
    pick = widgets.SelectMultiple(options=list(res.arms), value=tuple(chosen), rows=min(8, len(res.arms)),
                                  description="variants", style={"description_width": "initial"})
    which = _dropdown(metrics, metric if metric in metrics else metrics[0], "metric")
    _align([pick, which])

    def compute(variants, metric):
        return {"variants": list(variants), "metric": metric, "bands": curve_bands(res, metric, list(variants))}

    def draw(data):
        plt = _plt()
        fig, ax = plt.subplots(figsize=(7.5, 3.8))
        _draw_bands(ax, res, data["metric"], data["variants"])
        if data["bands"]:
            ax.legend(fontsize=8, loc="best")
        fig.suptitle("line: mean over seeds, band: min-max over seeds", fontsize=9)
        fig.tight_layout()
        return fig

    return _interactive(draw, compute, variants=pick, metric=which)


def show_variant(variant: str, path: str | Path | None = None,
                 metrics: Sequence[str] = ("accuracy", "completion_len", "entropy", "clip_frac")) -> None:
    """The last cell of notebooks 06-10: ``variant``'s row of the study table next to the baseline's, and its curves
    against the baseline's with seed bands.  Prints a message instead when there is no study folder."""
    try:
        res = load_study(path)
    except StudyNotFound as err:
        print(err)
        return
    print(f"{res.title}: {res.status()}")
    table = [r for r in study_table(res) if r["variant"] in (res.baseline, variant)]
    if not any(r["variant"] == variant for r in table):
        print(f"no finished run of {variant} yet")
    print(format_table(table, res.baseline))
    plot_curves(res, [a for a in (res.baseline, variant) if a in res.arms], metrics)
    _plt().show()
