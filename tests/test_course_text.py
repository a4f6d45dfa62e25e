"""The course's text keeps its promises: one notation page that every notebook links, no symbol defined twice on
it, every "the chapter says" box quoting the chapter, no internal document named to learners, and plots whose
labels tell the truth (a masked region drawn in the colour the caption names, a title that reads like its slider,
a legend that does not cover the bars)."""

import json
import re
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
NOTATION = ROOT / "docs" / "notation.md"


def _cells(path: Path) -> list[dict]:
    return json.loads(path.read_text())["cells"]


def _markdown(path: Path) -> list[str]:
    return ["".join(c["source"]) for c in _cells(path) if c["cell_type"] == "markdown"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_notebook_links_the_notation_page_in_its_first_markdown_cell(path):
    assert NOTATION.is_file()
    assert "](../docs/notation.md)" in _markdown(path)[0]


def test_no_symbol_is_defined_twice_on_the_notation_page():
    rows = [line for line in NOTATION.read_text().splitlines() if line.startswith("| $")]
    assert len(rows) > 25, "the tables of the notation page were not found"
    symbols = [row.split("|")[1].strip() for row in rows]
    twice = {s for s in symbols if symbols.count(s) > 1}
    assert not twice, f"defined more than once on the notation page: {sorted(twice)}"
    for core in (r"$q$", r"$\rho_{i,t}$", r"$\mu$", r"$\bar r$", r"$s_i$", r"$W_i$", r"$\hat A_i$", r"$\kappa$",
                 r"$\omega_{i,t}$", r"$\operatorname{sg}[x]$"):
        assert core in symbols, f"{core} is not defined on the notation page"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_chapter_box_quotes_the_chapter(path):
    for text in _markdown(path):
        for box in re.split(r"\n(?=> \*\*The chapter says)", text):
            if "**The chapter says" in box:
                assert re.search(r"\"[^\"]{6,}\"|“[^”]{6,}”|`[^`]{20,}`", box), (  # prose, or a line of its code
                    f"{path.name}: a 'the chapter says' box without a quote of the chapter: {box[:160]!r}")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_learner_text_names_no_internal_document(path):
    for text in _markdown(path):
        assert not re.search(r"\bthe spec\b|\bspec's\b", text, re.I), f"{path.name}: 'the spec' in {text[:120]!r}"
        assert "PROBE.md" not in text, f"{path.name}: names an internal file: {text[:120]!r}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_old_notation_does_not_come_back(path):
    """The token ratio is rho (not r_{i,t}, which is a reward's index form) and stop-gradient is sg[.]."""
    for text in _markdown(path):
        assert not re.search(r"(?<![a-z_])r_\{i,t\}", text), f"{path.name}: r_{{i,t}} for the ratio: {text[:120]!r}"
        assert r"\mathrm{sg}" not in text, f"{path.name}: write the stop-gradient as \\operatorname{{sg}}[.]"


def test_gdpo_title_reads_like_its_log_slider():
    from grpo_lessons.course.viz import rewards as viz

    fig = viz.plot_gdpo_comparison(viz.gdpo_comparison(scale=10 ** 1.8, weight=1.0))  # the slider shows 63.1
    title = fig._suptitle.get_text()
    assert "63.1" in title and "63.0957" not in title, title


def test_trust_region_masked_cells_are_white_as_the_caption_says():
    from grpo_lessons.course.viz import offpolicy as viz

    fig = viz.plot_trust_region(viz.trust_region_grid(sign=1.0), {"mu": [0.5], "pi": [0.7], "adv": [1.0]})
    caption = " ".join(t.get_text() for t in fig.texts)
    assert "white: masked" in caption
    for ax in fig.axes[:3]:
        image = ax.images[0]
        masked = image.cmap(image.norm(0.0))
        kept = image.cmap(image.norm(1.0))
        assert masked == (1.0, 1.0, 1.0, 1.0), masked
        assert kept[1] > kept[0] and kept[1] > kept[2], kept  # green


def test_mismatch_plot_labels_both_axes_and_keeps_its_legend_off_the_bars():
    from grpo_lessons.course.viz import offpolicy as viz

    d = viz.mismatch_simulator(mismatch=0.2, length=16, mode="sequence_mask", cap=3.0, samples=400)
    fig = viz.plot_mismatch_simulator(d)
    hist, bars = fig.axes[:2]
    assert hist.get_ylabel() and bars.get_ylabel()
    fig.canvas.draw()
    legend = bars.get_legend().get_window_extent()
    assert legend.y1 <= bars.get_window_extent().y0 + 1, "the legend overlaps the bar axes"


def test_vespo_mask_collapse_value_quoted_in_notebook_12():
    """Notebook 12 argues that one masked token makes W about 1e-8 and phi at most about 2e-15 for A >= 0."""
    from grpo_lessons.core.objectives import vespo_phi

    one = torch.ones(1, 5, dtype=torch.float64)
    masked = torch.tensor([[1.0, 1.0, 0.0, 1.0, 1.0]], dtype=torch.float64)
    phi = vespo_phi(torch.zeros(1, 5, dtype=torch.float64), one, one[:, :1], is_weights=masked).item()
    assert 1e-15 < phi < 3e-15


def test_gdpo_weights_and_refilling_are_described_as_they_behave():
    """GDPO's per-reward z-scores let a reward that few completions earn outweigh a common one at equal weights, and
    refilling the batch does not make a too-hard prompt teach: the notebooks must not say otherwise."""
    from grpo_lessons.core.advantages import decoupled_advantages, group_advantages

    right = torch.tensor([1, 1, 1, 1, 1, 0, 0, 0], dtype=torch.float64)
    formatted = torch.tensor([0, 0, 0, 0, 0, 1, 0, 0], dtype=torch.float64)
    A = decoupled_advantages(torch.stack([right, formatted], 1), 8, weights=[1.0, 1.0])
    assert A[5] > A[0] > 0  # the formatted wrong answer above every right one
    assert group_advantages(right + formatted, 8)[5] == group_advantages(right + formatted, 8)[0]
    text = {p.name: " ".join(" ".join(_markdown(p)).split()) for p in NOTEBOOKS}
    assert not [n for n, t in text.items() if "mean what they say" in t], "GDPO's weights do not mean what they say"
    assert "refilling the batch does (" not in text["02_group_advantages.ipynb"]
    assert "neither does filtering and refilling" in text["02_group_advantages.ipynb"]
