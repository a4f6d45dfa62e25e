"""grpo_lessons.course.viz.lab and the site's claims page: a claim run live, its figures and widget, the committed
table read back and formatted, and the page generated from it."""

import importlib.util
import math
from pathlib import Path

import matplotlib
import pytest

matplotlib.use("Agg")

from grpo_lessons.course.viz import lab as vl  # noqa: E402
from grpo_lessons.lab import CLAIMS  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def test_claim_experiment_is_the_claims_row_and_takes_its_knob_only():
    row = vl.claim_experiment("gdpo_distinct_advantages", seeds=3)
    assert row["seeds"] == 3 and row["verdict"] in ("reproduced", "not reproduced", "reversed")
    assert row["low"] <= row["diff"] <= row["high"]
    at4 = vl.claim_experiment("gdpo_distinct_advantages", seeds=3, group_size=4)
    assert at4["diff"] != row["diff"]
    with pytest.raises(ValueError, match="sweeps group_size"):
        vl.claim_experiment("gdpo_distinct_advantages", seeds=3, lr=0.1)


def test_the_committed_table_reads_back_and_formats():
    rows = vl.claims_table()
    assert [r["claim"] for r in rows] == list(CLAIMS)
    counts = vl.verdict_counts(rows)
    assert sum(counts.values()) == len(rows)
    md = vl.format_claims_table(rows)
    assert md.count("\n") == len(rows) + 1 and all(f"`{n}`" in md for n in CLAIMS)
    r = vl.committed_row("dr_grpo_wrong_length")
    assert r["seeds"] >= 20 and not math.isnan(r["diff"])
    with pytest.raises(ValueError, match="unknown claim"):
        vl.committed_row("nope")


def test_the_table_is_found_from_a_notebook_copied_elsewhere(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a copy of a notebook outside the checkout (the browser test runs them so)
    assert vl.claims_csv() == ROOT / "benchmarks" / "results" / "claims" / "claims.csv"


def test_a_missing_table_names_the_script(tmp_path, monkeypatch):
    import grpo_lessons

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(grpo_lessons, "__file__", str(tmp_path / "pkg" / "grpo_lessons" / "__init__.py"))
    with pytest.raises(FileNotFoundError, match="benchmarks/claims.py"):
        vl.claims_csv()


def test_figures_and_the_widget_build():
    row = vl.claim_experiment("rloo_group_mean_shrinks", seeds=3)
    fig = vl.plot_claim(row, vl.committed_row("rloo_group_mean_shrinks"))
    assert len(fig.axes) == 2
    d = vl.claim_curves("typicality_bias_collapses", seed=0)
    assert d["metric"] == "right_entropy" and len(d["variant"]) == len(d["steps"])
    assert d["variant"][-1] < d["baseline"][-1]  # the biased reward collapses the right answers' spread
    fig = vl.plot_claim_curves(d)
    assert fig.axes[0].get_ylabel() == "right_entropy"
    w = vl.claim_widget("rloo_group_mean_shrinks", seeds=2)
    assert w.result["seeds"] == 2
    assert "Metric:" in vl.describe("dr_grpo_wrong_length")


def _hook():
    spec = importlib.util.spec_from_file_location("claims_hook", ROOT / "docs" / "_hooks" / "claims.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_site_page_holds_every_claim_and_its_figure():
    hook = _hook()
    page = hook.on_page_markdown("a\n<!-- claims-table -->\nb\n<!-- claims-details -->\n", None, None, None)
    assert "<!--" not in page
    for name in CLAIMS:
        assert f"`{name}`" in page
        assert f"benchmarks/results/claims/figures/{name}.png" in page
    assert "claims:" in page and "reproduced" in page
