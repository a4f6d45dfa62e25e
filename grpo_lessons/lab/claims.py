"""The claims table: what each paper says its change does, tested on an exact policy over many seeds.

A :class:`Claim` is one paired comparison: two :class:`~grpo_lessons.lab.run.LabConfig` arms that differ in exactly
the change the paper makes (checked by :func:`arm_difference`), a metric of the mechanism the paper names, and the
sign the paper predicts for *variant minus baseline* on that metric.  :func:`run_claim` runs both arms on the same
seeds (common random numbers: one seed, one pair), takes the paired t-interval of the differences
(:func:`grpo_lessons.core.stats.paired_interval`) and gives the verdict of
:func:`grpo_lessons.core.stats.claim_verdict`: *reproduced* (the interval excludes 0 on the paper's side),
*reversed* (it excludes 0 on the other side) or *not reproduced*.  :func:`run_sweep` repeats the comparison along the
knob that matters, to show the regime where a verdict holds.

``grpo-lessons lab --list`` lists the claims and ``grpo-lessons lab --claim NAME --seeds N --first-seed K`` reruns
one (:mod:`grpo_lessons.lab.cli`).
"""

from __future__ import annotations

import csv
import dataclasses
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpo_lessons.core.registry import Registry
from grpo_lessons.core.stats import claim_verdict, holm, mean_interval, t_test_p

from .policy import METRIC_DOCS
from .run import PROBE_DOCS, STEP_DOCS, LabConfig, probe, train

__all__ = ["Claim", "CLAIMS", "register_claim", "get_claim", "measure", "run_claim", "run_sweep", "arm_difference",
           "COLUMNS", "COLUMN_DOCS", "write_rows", "read_rows", "format_row", "all_metric_docs"]

#: The claims table's columns, in order.
COLUMNS = ["claim", "variant", "baseline", "metric", "paper_direction", "seeds", "diff", "low", "high", "verdict",
           "regime", "p", "p_holm"]

COLUMN_DOCS: dict[str, str] = {
    "claim": "the claim's name (grpo-lessons lab --list describes each)",
    "variant": "the arm that makes the paper's change",
    "baseline": "the arm without it: the same configuration with only that change undone",
    "metric": "what is compared, a measure of the mechanism the paper names (exact, from the policy's tables)",
    "paper_direction": "the sign the paper predicts for diff: + (the variant is higher) or - (lower)",
    "seeds": "number of paired seeds (one seed = both arms with the same random numbers)",
    "diff": "mean over seeds of (variant - baseline) on the metric",
    "low": "lower end of the 95 % paired t-interval of diff",
    "high": "upper end of the 95 % paired t-interval of diff",
    "verdict": "reproduced: the interval excludes 0 on the paper's side; reversed: on the other side; "
               "not reproduced: it covers 0",
    "regime": "the settings of this row, and where along the swept knob the verdict holds",
    "p": "two-sided paired t-test p-value of diff = 0",
    "p_holm": "p after Holm's correction over every claim in the table",
}


def all_metric_docs() -> dict[str, str]:
    """Every metric a claim can compare (exact metrics, step metrics, probe metrics) with what it means."""
    return {**METRIC_DOCS, **STEP_DOCS, **PROBE_DOCS}


@dataclass(frozen=True)
class Claim:
    """One row of the claims table (see the module docstring).

    ``reduce``: ``"final"`` (the metric after the last step), ``"mean"`` (a step metric averaged over the steps) or
    ``"probe"`` (measured by :func:`~grpo_lessons.lab.run.probe` on the starting policy).  ``sweep``: the knob that
    matters, as ``(field of LabConfig, values)``; a value replaces that field in both arms (in the variant's arm only
    when ``sweep_variant_only``: the knob is the size of the change itself)."""

    name: str
    paper: str
    statement: str
    variant_label: str
    baseline_label: str
    arm: LabConfig
    base: LabConfig
    metric: str
    direction: str
    reduce: str = "final"
    sweep: tuple[str, tuple[Any, ...]] | None = None
    notebook: str = ""
    note: str = ""
    probe_batches: int = 48
    sweep_variant_only: bool = False  # the knob is the change itself: set it in the variant's arm only

    def __post_init__(self) -> None:
        if self.direction not in ("+", "-"):
            raise ValueError(f"claim {self.name!r}: direction must be '+' or '-'")
        if self.reduce not in ("final", "mean", "probe"):
            raise ValueError(f"claim {self.name!r}: reduce must be final, mean or probe")
        if self.metric not in all_metric_docs():
            raise ValueError(f"claim {self.name!r}: unknown metric {self.metric!r}")
        if self.arm == self.base:
            raise ValueError(f"claim {self.name!r}: the two arms are the same configuration")

    def regime(self) -> str:
        """The settings both arms share, in words."""
        a = self.base
        task = ", ".join(f"{k}={v}" for k, v in sorted(dict(a.task).items())) or "default task"
        bits = [f"G={a.group_size}", f"lr={a.lr:g}", f"steps={a.steps}"]
        if a.num_iterations > 1 or a.minibatches > 1:
            bits.append(f"{a.num_iterations} passes x {a.minibatches} minibatches")
        if a.sampler_shift:
            bits.append(f"sampler shift {a.sampler_shift:g}")
        if a.reward != "correct":
            bits.append(f"reward {a.reward}")
        if self.reduce == "probe":
            bits = [f"G={a.group_size}", f"{self.probe_batches} batches at the starting policy"]
            if a.sampler_shift:
                bits.append(f"sampler shift {a.sampler_shift:g}")
        return "; ".join(bits) + f"; {task}"

    def with_knob(self, value: Any) -> "Claim":
        """This claim with its swept knob set to ``value`` in both arms."""
        if self.sweep is None:
            raise ValueError(f"claim {self.name!r} has no sweep")
        knob = self.sweep[0]
        base = self.base if self.sweep_variant_only else self.base.replace(**{knob: value})
        return dataclasses.replace(self, arm=self.arm.replace(**{knob: value}), base=base)


#: Claims by name, in the order of the course.
CLAIMS: Registry[Claim] = Registry("claim")


def register_claim(claim: Claim, *, replace: bool = False) -> Claim:
    """Add ``claim`` to :data:`CLAIMS` (``replace=True`` to overwrite one of the same name)."""
    if not isinstance(claim, Claim):
        raise TypeError(f"register_claim() takes a Claim, got {type(claim).__name__}")
    return CLAIMS.add(claim.name, claim, replace=replace)


def get_claim(name: str) -> Claim:
    """The claim called ``name``; ``ValueError`` listing the known claims otherwise."""
    return CLAIMS.lookup(name, "claim")


def arm_difference(claim: Claim) -> dict[str, tuple[Any, Any]]:
    """``{field: (variant's value, baseline's value)}`` for every configuration field the arms differ in."""
    out = {}
    for f in dataclasses.fields(LabConfig):
        a, b = getattr(claim.arm, f.name), getattr(claim.base, f.name)
        if a != b:
            out[f.name] = (a, b)
    return out


def measure(claim: Claim, cfg: LabConfig, seed: int) -> float:
    """The claim's metric for one arm and one seed."""
    if claim.reduce == "probe":
        return float(probe(cfg, seed, batches=claim.probe_batches)[claim.metric])
    run = train(cfg, seed)
    return float(run.final(claim.metric) if claim.reduce == "final" else run.mean(claim.metric))


def _seeds(seeds: int, first_seed: int) -> list[int]:
    if isinstance(seeds, bool) or not isinstance(seeds, int) or seeds < 2:
        raise ValueError(f"a paired interval needs at least 2 seeds, got {seeds!r}")
    return list(range(int(first_seed), int(first_seed) + int(seeds)))


def _fmt(x: float) -> str:
    return f"{x:.6g}"


def run_claim(claim: Claim | str, seeds: int = 20, first_seed: int = 0, *, progress: Callable[[str], None] | None = None,
              regime: str | None = None) -> dict[str, Any]:
    """Run both arms of ``claim`` on seeds ``first_seed .. first_seed + seeds - 1``; returns one claims-table row
    (:data:`COLUMNS`, ``p_holm`` left empty) plus ``values`` (per-seed metric of each arm) and ``seconds``."""
    c = get_claim(claim) if isinstance(claim, str) else claim
    t0 = time.perf_counter()
    a_vals, b_vals = {}, {}
    for k, s in enumerate(_seeds(seeds, first_seed)):
        a_vals[s] = measure(c, c.arm, s)
        b_vals[s] = measure(c, c.base, s)
        if progress is not None:
            progress(f"{c.name}: seed {s} ({k + 1}/{seeds})")
    bad = [s for s in a_vals if not (math.isfinite(a_vals[s]) and math.isfinite(b_vals[s]))]
    if bad:
        raise ValueError(f"claim {c.name!r}: the metric {c.metric!r} is not finite on seeds {bad}")
    diffs = [a_vals[s] - b_vals[s] for s in a_vals]
    iv = mean_interval(diffs)
    verdict = claim_verdict(iv, c.direction)
    p = t_test_p(iv)
    reg = regime if regime is not None else c.regime()
    if iv.sd == 0.0:
        reg += "; every seed gave the same difference"
    return {
        "claim": c.name, "variant": c.variant_label, "baseline": c.baseline_label, "metric": c.metric,
        "paper_direction": c.direction, "seeds": len(diffs), "diff": iv.mean, "low": iv.low, "high": iv.high,
        "verdict": verdict, "regime": reg, "p": p, "p_holm": None,
        "values": {"variant": a_vals, "baseline": b_vals}, "seconds": time.perf_counter() - t0,
    }


def run_sweep(claim: Claim | str, seeds: int = 20, first_seed: int = 0, *,
              progress: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    """:func:`run_claim` at every value of the claim's swept knob (one row each, ``knob`` and ``value`` added)."""
    c = get_claim(claim) if isinstance(claim, str) else claim
    if c.sweep is None:
        return []
    knob, values = c.sweep
    rows = []
    for v in values:
        row = run_claim(c.with_knob(v), seeds, first_seed, progress=progress)
        row.update(knob=knob, value=v)
        rows.append(row)
    return rows


def sweep_summary(claim: Claim, rows: Sequence[dict]) -> str:
    """One sentence: the verdict at each value of the swept knob."""
    if not rows:
        return ""
    knob = rows[0]["knob"]
    parts = [f"{r['value']}: {r['verdict']} ({r['diff']:+.3g})" for r in rows]
    return f"swept {knob}: " + ", ".join(parts)


def with_holm(rows: list[dict]) -> list[dict]:
    """``rows`` with ``p_holm`` filled by Holm's correction over all of them."""
    adj = holm([r["p"] for r in rows])
    for r, q in zip(rows, adj):
        r["p_holm"] = q
    return rows


def write_rows(rows: Iterable[dict], path: Path | str, columns: Sequence[str] = COLUMNS) -> None:
    """Write claims-table rows as CSV (floats with 6 significant digits, ``None`` as an empty cell)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(columns), extrasaction="ignore", lineterminator="\n")
        w.writeheader()
        for r in rows:
            w.writerow({k: (_fmt(r[k]) if isinstance(r.get(k), float) else ("" if r.get(k) is None else r[k]))
                        for k in columns})


def read_rows(path: Path | str) -> list[dict[str, Any]]:
    """The rows of a claims CSV, numbers as numbers."""
    out = []
    with Path(path).open(newline="") as f:
        for r in csv.DictReader(f):
            row: dict[str, Any] = dict(r)
            for k in ("diff", "low", "high", "p", "p_holm"):
                if row.get(k) not in (None, ""):
                    row[k] = float(row[k])
                elif k in row:
                    row[k] = None
            if row.get("seeds"):
                row["seeds"] = int(row["seeds"])
            out.append(row)
    return out


def format_row(row: dict) -> str:
    """A row as one readable line."""
    return (f"{row['claim']}: {row['variant']} - {row['baseline']} on {row['metric']} "
            f"(paper: {row['paper_direction']}) = {row['diff']:+.4g} [{row['low']:+.4g}, {row['high']:+.4g}] over "
            f"{row['seeds']} seeds -> {row['verdict']}")
