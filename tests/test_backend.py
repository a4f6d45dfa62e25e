"""Nothing a notebook calls may switch matplotlib's backend.

A widget draws with ``plt.show()`` into the inline backend.  If any later cell calls code that runs
``matplotlib.use("Agg")``, the widget's readouts still change but its figure is drawn nowhere (this happened
in notebook 16, whose GOPO benchmark cell switched the backend).  So a backend switch is allowed only under
``if __name__ == "__main__":`` of a script, never in importable code, and never in a notebook.
"""

import ast
import csv
import json
import re
import sys
from pathlib import Path

import matplotlib
import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted((ROOT / "grpo_lessons").rglob("*.py")) + sorted((ROOT / "benchmarks").glob("*.py"))


def _is_main_guard(node: ast.AST) -> bool:
    if not isinstance(node, ast.If) or not isinstance(node.test, ast.Compare):
        return False
    t = node.test
    names = [t.left, *t.comparators]
    return (any(isinstance(n, ast.Name) and n.id == "__name__" for n in names)
            and any(isinstance(n, ast.Constant) and n.value == "__main__" for n in names))


def _switches(tree: ast.AST) -> list[int]:
    """Line numbers of ``<x>.use(...)`` on matplotlib and ``<x>.switch_backend(...)`` outside a main guard."""
    bad: list[int] = []

    def visit(node: ast.AST, guarded: bool) -> None:
        guarded = guarded or _is_main_guard(node)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and not guarded:
            owner = ast.unparse(node.func.value)
            uses = node.func.attr == "use" and owner in ("matplotlib", "mpl")
            if uses or node.func.attr == "switch_backend":
                bad.append(node.lineno)
        for child in ast.iter_child_nodes(node):
            visit(child, guarded)

    visit(tree, False)
    return bad


def test_the_guard_sees_a_switch_and_allows_one_under_main():
    assert _switches(ast.parse("import matplotlib\ndef f():\n    matplotlib.use('Agg')\n")) == [3]
    assert _switches(ast.parse("import matplotlib.pyplot as plt\nplt.switch_backend('agg')\n")) == [2]
    assert _switches(ast.parse("import matplotlib\nif __name__ == '__main__':\n    matplotlib.use('Agg')\n")) == []
    assert _switches(ast.parse("x = set()\nx.use(1)\n")) == []


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_backend_switch_in_importable_code(path):
    bad = _switches(ast.parse(path.read_text(), filename=str(path)))
    assert not bad, (f"{path.relative_to(ROOT)} switches matplotlib's backend at line(s) {bad}: only under "
                     "`if __name__ == \"__main__\":` (a notebook that calls it loses its widgets' figures)")


def test_no_notebook_switches_the_backend():
    pattern = re.compile(r"matplotlib\.use\(|\bmpl\.use\(|switch_backend\(|^%matplotlib (?!inline)", re.M)
    for p in sorted((ROOT / "notebooks").glob("*.ipynb")):
        for cell in json.loads(p.read_text())["cells"]:
            if cell["cell_type"] == "code":
                src = "".join(cell["source"])
                assert not pattern.search(src), f"{p.name}: a cell switches the backend: {src[:200]!r}"


@pytest.fixture
def svg_backend():
    """Select a backend that is neither Agg nor interactive, so that a switch to Agg shows."""
    import matplotlib.pyplot as plt

    before = matplotlib.get_backend()
    plt.close("all")
    matplotlib.use("svg")
    yield
    plt.close("all")
    matplotlib.use(before)


def test_training_plot_keeps_the_callers_backend(svg_backend, tmp_path):
    from grpo_lessons.training.plots import plot_training

    history = [{"step": 0, "accuracy": 0.3}, {"step": 1, "reward_mean": 0.2, "completion_len": 9.0},
               {"step": 2, "reward_mean": 0.4, "completion_len": 8.0, "accuracy": 0.5}]
    plot_training(history, path=tmp_path / "curves.png")
    assert matplotlib.get_backend() == "svg"
    assert (tmp_path / "curves.png").stat().st_size > 1000


def test_gopo_benchmark_keeps_the_backend_and_leaves_no_figure(svg_backend, tmp_path):
    """Notebook 16 runs the benchmark's quick path (training, summary, figures) after its widget has been drawn."""
    import matplotlib.pyplot as plt

    sys.path.insert(0, str(ROOT))
    try:
        from benchmarks.gopo_vs_grpo import main
    finally:
        sys.path.remove(str(ROOT))
    assert main(["--quick", "--out", str(tmp_path)]) == 0
    assert matplotlib.get_backend() == "svg"
    assert plt.get_fignums() == [], "the benchmark left its figure open: it would show up in the notebook"
    figures = sorted(tmp_path.glob("*.png"))
    assert figures and all(f.stat().st_size > 1000 for f in figures)
