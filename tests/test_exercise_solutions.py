"""Every notebook's exercises, run in the notebook with the reference solutions pasted into the stub cells.

The registry's own tests prove each check accepts its solution (in an empty namespace, so solutions are
self-contained); nbval proves the stored notebooks run with their stubs.  This test closes the loop in the
notebook itself: for each notebook that has exercises (found through the registry, so notebooks added
later are covered), the cell tagged ``exercise:<name>`` gets ``solution_code`` and the notebook's own check
cells run in a fresh kernel with ``GRPO_LESSONS_EXERCISES=strict``: a missing tag, a check cell naming
another exercise or variable, or a solution the notebook's check rejects all fail here.

To stay cheap it runs the exercise block of each notebook (each stub cell through its check cell, with
whatever cells sit between them), not the lessons around it, which nbval already runs; set
``GRPO_LESSONS_SOLUTIONS_FULL=1`` to run the whole notebook with the solutions instead.
"""

import os
from pathlib import Path

import nbformat
import pytest

from grpo_lessons.course.exercises import STRICT_ENV, all_exercises

nbclient = pytest.importorskip("nbclient")

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted({e.notebook for e in all_exercises()})
FULL = os.environ.get("GRPO_LESSONS_SOLUTIONS_FULL", "") not in ("", "0")


def _with_solutions(nb_name: str) -> nbformat.NotebookNode:
    nb = nbformat.read(ROOT / "notebooks" / nb_name, as_version=4)
    by_tag = {e.stub_tag: e for e in all_exercises() if e.notebook == nb_name}
    keep: set[int] = set()
    seen = set()
    for i, cell in enumerate(nb.cells):
        tags = [t for t in cell.get("metadata", {}).get("tags", []) if t in by_tag]
        if not tags:
            continue
        ex = by_tag[tags[0]]
        seen.add(ex.stub_tag)
        cell.source = ex.solution_code
        j = next((k for k in range(i + 1, len(nb.cells)) if nb.cells[k].cell_type == "code"
                  and f'check("{ex.name}"' in nb.cells[k].source), None)
        assert j is not None, f"{nb_name}: no check cell for {ex.name} after its stub"
        keep.update(k for k in range(i, j + 1) if nb.cells[k].cell_type == "code")
    missing = set(by_tag) - seen
    assert not missing, f"{nb_name}: no stub cell tagged {sorted(missing)}"
    if not FULL:
        head = nbformat.v4.new_code_cell("from grpo_lessons.course.exercises import check")
        nb.cells = [head] + [c for k, c in enumerate(nb.cells) if k in keep]
    return nb


@pytest.mark.parametrize("nb_name", NOTEBOOKS)
def test_notebook_checks_pass_with_the_solutions(nb_name, monkeypatch):
    monkeypatch.setenv(STRICT_ENV, "strict")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    nb = _with_solutions(nb_name)
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": str(ROOT / "notebooks")}})
    client.execute()  # raises CellExecutionError on any error, including a strict check that fails
    outs = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    n_checks = sum(f'check("{e.name}"' in "".join(c.source for c in nb.cells) for e in all_exercises()
                   if e.notebook == nb_name)
    assert outs.count(": correct.") >= n_checks, outs


def test_a_wrong_answer_fails_the_strict_run(monkeypatch):
    """The machinery itself can fail: a notebook whose stub gets a wrong answer must raise in strict mode."""
    monkeypatch.setenv(STRICT_ENV, "strict")
    ex = next(e for e in all_exercises() if e.notebook == NOTEBOOKS[0])
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("from grpo_lessons.course.exercises import check"),
        nbformat.v4.new_code_cell(ex.wrong_code[0]),
        nbformat.v4.new_code_cell(f'check("{ex.name}", {ex.variable})')])
    with pytest.raises(nbclient.exceptions.CellExecutionError):
        nbclient.NotebookClient(nb, timeout=120, kernel_name="python3").execute()
