"""The lab in the notebooks: a claim run live over a few seeds, its curves, a widget on its knob, and the committed
claims table read back.

Notebooks 06-18 end with their variant's claim (:mod:`grpo_lessons.lab.claims`): :func:`claim_experiment` runs it
live on fewer seeds than the committed table (seconds), :func:`plot_claim` draws the paired seeds and the interval,
:func:`claim_curves` / :func:`plot_claim_curves` follow the metric step by step for both arms of one seed,
:func:`claim_widget` reruns it along the claim's knob, and :func:`committed_row` / :func:`claims_table` read the
committed ``benchmarks/results/claims/claims.csv`` (20 seeds per claim).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from grpo_lessons.lab.claims import (CLAIMS, COLUMNS, all_metric_docs, format_row, get_claim, read_rows, run_claim)
from grpo_lessons.lab.run import train

from ._common import _dropdown, _int_slider, _interactive, _plt

__all__ = ["CLAIMS_CSV", "claims_csv", "committed_row", "committed_sweep", "claims_table", "format_claims_table", "claim_experiment",
           "plot_claim", "claim_curves", "plot_claim_curves", "claim_widget", "verdict_counts"]

#: Where the committed claims table lives, relative to the repository root.
CLAIMS_CSV = Path("benchmarks") / "results" / "claims" / "claims.csv"


def claims_csv(root: Path | str | None = None) -> Path:
    """The committed claims table: ``root/benchmarks/results/claims/claims.csv``; without ``root``, the first found
    from the working directory upwards (a notebook runs in ``notebooks/``), else in the checkout the package is
    installed from (``pip install -e .``: a notebook copied elsewhere still finds it)."""
    if root is not None:
        return Path(root) / CLAIMS_CSV
    import grpo_lessons

    here = Path.cwd().resolve()
    for d in (here, *here.parents, Path(grpo_lessons.__file__).resolve().parents[1]):
        if (d / CLAIMS_CSV).is_file():
            return d / CLAIMS_CSV
    raise FileNotFoundError(f"no {CLAIMS_CSV} above {here} nor in the checkout the package is installed from: run "
                            "`python benchmarks/claims.py` from the repository root to make it")


def claims_table(path: Path | str | None = None) -> list[dict[str, Any]]:
    """The committed table's rows (numbers as numbers)."""
    return read_rows(claims_csv() if path is None else path)


def committed_row(name: str, path: Path | str | None = None) -> dict[str, Any]:
    """The committed row of claim ``name``."""
    get_claim(name)  # a clear error for an unknown claim
    for r in claims_table(path):
        if r["claim"] == name:
            return r
    raise KeyError(f"claim {name!r} is not in the committed table; rerun `python benchmarks/claims.py`")


def verdict_counts(rows) -> dict[str, int]:
    """How many rows are reproduced, not reproduced and reversed."""
    out = {"reproduced": 0, "not reproduced": 0, "reversed": 0}
    for r in rows:
        out[r["verdict"]] = out.get(r["verdict"], 0) + 1
    return out


def _num(x: float | None, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return ""
    return f"{x:+.{digits}g}"


def format_claims_table(rows, *, markdown: bool = True, regime: bool = False) -> str:
    """The rows as a Markdown table (claim, arms, metric, paper's sign, seeds, diff [low, high], verdict, Holm p)."""
    head = ["claim", "variant - baseline", "metric", "paper", "seeds", "diff [95 % interval]", "verdict", "p (Holm)"]
    if regime:
        head.append("regime")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        ph = r.get("p_holm")
        cells = [f"`{r['claim']}`", f"{r['variant']} - {r['baseline']}", r["metric"], r["paper_direction"],
                 str(r["seeds"]), f"{_num(r['diff'])} [{_num(r['low'])}, {_num(r['high'])}]", r["verdict"],
                 "" if ph is None else f"{ph:.2g}" if ph >= 1e-15 else "< 1e-15"]
        if regime:
            cells.append(r["regime"])
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _with_knob(c, knob: dict):
    if not knob:
        return c
    if len(knob) != 1 or c.sweep is None or next(iter(knob)) != c.sweep[0]:
        raise ValueError(f"claim {c.name!r} sweeps {c.sweep[0] if c.sweep else 'nothing'}; got {sorted(knob)}")
    return c.with_knob(next(iter(knob.values())))


def committed_sweep(name: str, path: Path | str | None = None) -> list[dict[str, Any]]:
    """The committed rows of claim ``name`` along its knob (``knob``, ``value`` and the interval at each value)."""
    get_claim(name)
    csv_path = (claims_csv() if path is None else Path(path)).with_name("sweeps.csv")
    return [r for r in read_rows(csv_path) if r["claim"] == name]


def claim_experiment(name: str, seeds: int = 8, first_seed: int = 0, **knob) -> dict[str, Any]:
    """Run claim ``name`` live on ``seeds`` paired seeds (``knob``: one swept field set to a value in both arms,
    e.g. ``lr=0.2``); returns the row of :func:`grpo_lessons.lab.claims.run_claim`."""
    c = _with_knob(get_claim(name), knob)
    row = run_claim(c, seeds, first_seed)
    row["claim_obj"] = c
    return row


def _interval(ax, x: float, r: dict[str, Any]) -> None:
    color = {"reproduced": "C2", "reversed": "C3"}.get(r["verdict"], "C7")
    ax.errorbar([x], [r["diff"]], yerr=[[r["diff"] - r["low"]], [r["high"] - r["diff"]]], fmt="o", color=color,
                capsize=4)


def plot_claim(row: dict[str, Any], committed: dict[str, Any] | None = None, sweep: list[dict] | None = None):
    """Left: each seed's metric in the two arms, joined (a paired design).  Middle: the paired difference's 95 %
    interval (green reproduced, red reversed, grey not reproduced), beside the committed row's when given.  Right,
    when ``sweep`` rows are given: the interval at each value of the claim's knob."""
    plt = _plt()
    ratios = [1.4, 0.8] + ([1.1] if sweep else [])
    fig, axes = plt.subplots(1, len(ratios), figsize=(min(7.8, 3.0 * sum(ratios) + 0.6), 3.3),  # the site's width
                             gridspec_kw={"width_ratios": ratios})
    va, vb = row["values"]["variant"], row["values"]["baseline"]
    ax = axes[0]
    for s in va:
        ax.plot([0, 1], [vb[s], va[s]], color="0.6", lw=0.8, marker="o", ms=3)
    ax.set_xticks([0, 1], [row["baseline"], row["variant"]], fontsize=8)
    ax.set_xlim(-0.3, 1.3)
    ax.set_ylabel(row["metric"])
    ax.set_title(f"{row['seeds']} seeds, one line each", fontsize=9)
    ax.grid(alpha=0.3)
    ax = axes[1]
    items = [("this run", row)] + ([("committed", committed)] if committed else [])
    for i, (_, r) in enumerate(items):
        _interval(ax, i, r)
    ax.axhline(0, color="k", lw=0.8)
    ax.set_xticks(range(len(items)), [f"{lab}\n{r['verdict']}" for lab, r in items], fontsize=8)
    ax.set_xlim(-0.6, len(items) - 0.4)
    ax.set_ylabel("variant - baseline")
    ax.set_title(f"95 % interval; paper: {row['paper_direction']}", fontsize=9)
    ax.grid(alpha=0.3)
    if sweep:
        ax = axes[2]
        for i, r in enumerate(sweep):
            _interval(ax, i, r)
        ax.axhline(0, color="k", lw=0.8)
        ax.set_xticks(range(len(sweep)), [str(r["value"]) for r in sweep], fontsize=8)
        ax.set_xlim(-0.5, len(sweep) - 0.5)
        ax.set_xlabel(sweep[0]["knob"], fontsize=9)
        ax.set_title("along the knob", fontsize=9)
        ax.grid(alpha=0.3)
    fig.suptitle(f"{row['claim']}: {row['metric']}, {row['variant']} - {row['baseline']}", fontsize=10)
    fig.tight_layout()
    return fig


def claim_curves(name: str, seed: int = 0, metric: str | None = None, **knob) -> dict[str, Any]:
    """Both arms of claim ``name`` trained on ``seed``: the metric (default the claim's; any exact metric for a
    probe claim's arms) after every step.  Returns ``steps``, ``variant`` and ``baseline`` lists and the labels."""
    c = _with_knob(get_claim(name), knob)
    m = metric or (c.metric if c.reduce != "probe" else "p_correct")
    if m not in all_metric_docs():
        raise ValueError(f"unknown metric {m!r}")
    ra, rb = train(c.arm, seed), train(c.base, seed)
    return {"claim": c.name, "metric": m, "steps": [h["step"] for h in ra.history],
            "steps_baseline": [h["step"] for h in rb.history], "variant": ra.series(m), "baseline": rb.series(m),
            "variant_label": c.variant_label, "baseline_label": c.baseline_label, "seed": seed}


def plot_claim_curves(d: dict[str, Any]):
    """Both arms' metric after every step (from :func:`claim_curves`)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.0, 3.0))
    ax.plot(d["steps"], d["variant"], color="C0", lw=2, label=d["variant_label"])
    ax.plot(d["steps_baseline"], d["baseline"], color="C3", lw=2, ls="--", label=d["baseline_label"])
    ax.set_xlabel("step")
    ax.set_ylabel(d["metric"])
    ax.set_title(f"{d['claim']}, seed {d['seed']} (exact metric)", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def claim_widget(name: str, seeds: int = 6):
    """A dropdown on the claim's swept knob and a seeds slider: each change reruns the claim live and redraws."""
    c = get_claim(name)
    if c.sweep is None:
        raise ValueError(f"claim {name!r} has no knob to sweep")
    knob, values = c.sweep
    base_value = getattr(c.arm if c.sweep_variant_only else c.base, knob)
    value = base_value if base_value in values else values[0]

    def compute(value, seeds):
        return claim_experiment(name, seeds=seeds, **{knob: value})

    def draw(row):
        return plot_claim(row)

    return _interactive(draw, compute, value=_dropdown(values, value, knob),
                        seeds=_int_slider(int(seeds), 2, 20, 1, "seeds"))


def describe(name: str) -> str:
    """The claim in one paragraph: statement, paper, arms, metric, direction, knob."""
    c = get_claim(name)
    docs = all_metric_docs()
    sweep = f" The knob that matters: {c.sweep[0]} in {list(c.sweep[1])}." if c.sweep else ""
    how = {"final": "after the last step", "mean": "averaged over the steps", "probe": "at the starting policy"}
    return (f"{c.statement} ({c.paper}). Arms: {c.variant_label} against {c.baseline_label}. Metric: {c.metric} "
            f"{how[c.reduce]} -- {docs[c.metric]}. The paper predicts {c.direction}.{sweep}"
            + (f" Note: {c.note}." if c.note else ""))


__all__ += ["describe", "COLUMNS", "CLAIMS", "format_row"]
