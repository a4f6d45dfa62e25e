"""Every exercise of the curriculum: its check accepts the reference solution, rejects each typical wrong
answer with a hint, calls a stub "not attempted" without failing, and is wired into its notebook."""

import json
from pathlib import Path

import pytest

from grpo_lessons.course.exercises import Exercise, ExerciseError, NotAttempted, all_exercises, check, register

ROOT = Path(__file__).resolve().parents[1]
EXERCISES = all_exercises()


def _value(ex, code):
    ns: dict = {}
    exec(compile(code, f"<{ex.name}>", "exec"), ns)  # reference code from the registry, not model output
    assert ex.variable in ns, f"{ex.name}: code does not assign {ex.variable}"
    return ns[ex.variable]


@pytest.mark.parametrize("ex", EXERCISES, ids=lambda e: e.name)
def test_solution_passes(ex):
    ex.check(_value(ex, ex.solution_code))


@pytest.mark.parametrize("ex", EXERCISES, ids=lambda e: e.name)
def test_each_wrong_answer_fails_with_a_hint(ex):
    for code in ex.wrong_code:
        with pytest.raises(ExerciseError) as err:
            ex.check(_value(ex, code))
        assert len(str(err.value)) > 15, f"{ex.name}: a wrong answer needs a hint, got {str(err.value)!r}"


@pytest.mark.parametrize("ex", EXERCISES, ids=lambda e: e.name)
def test_stub_is_not_attempted_and_calm(ex, monkeypatch, capsys):
    monkeypatch.delenv("GRPO_LESSONS_EXERCISES", raising=False)
    assert check(ex.name, ...) is False
    assert "not attempted" in capsys.readouterr().out
    monkeypatch.setenv("GRPO_LESSONS_EXERCISES", "strict")
    with pytest.raises(ExerciseError):
        check(ex.name, ...)


@pytest.mark.parametrize("ex", EXERCISES, ids=lambda e: e.name)
def test_notebook_has_stub_and_check_cells(ex):
    nb = json.loads((ROOT / "notebooks" / ex.notebook).read_text())
    cells = nb["cells"]
    stubs = [i for i, c in enumerate(cells) if ex.stub_tag in c.get("metadata", {}).get("tags", [])]
    assert len(stubs) == 1, f"{ex.notebook}: expected one cell tagged {ex.stub_tag}, found {len(stubs)}"
    src = "".join(cells[stubs[0]]["source"])
    assert "..." in src and ex.variable in src, f"{ex.name}: the stub cell must assign {ex.variable} = ..."
    later = "".join("".join(c["source"]) for c in cells[stubs[0] + 1:] if c["cell_type"] == "code")
    assert f'check("{ex.name}"' in later, f"{ex.name}: no check cell after the stub"


def test_registry_rejects_malformed_entries():
    with pytest.raises(ValueError):
        Exercise(name="x", notebook="a.ipynb", variable="1a", prompt="", kind="essay",
                 check=lambda a: None, solution_code="", wrong_code=())


def test_check_reports_wrong_without_raising_unless_strict(monkeypatch, capsys):
    def _check(a):
        if a != 3:
            raise ExerciseError("expected the number of tokens, three")

    ex = register(Exercise(name="99-demo", notebook="99_demo.ipynb", variable="n", prompt="How many?",
                           kind="number", check=_check, solution_code="n = 3", wrong_code=("n = 2",)),
                  replace=True)
    try:
        monkeypatch.delenv("GRPO_LESSONS_EXERCISES", raising=False)
        assert check(ex.name, 2) is False and "three" in capsys.readouterr().out
        assert check(ex.name, 3) is True
        monkeypatch.setenv("GRPO_LESSONS_EXERCISES", "strict")
        with pytest.raises(ExerciseError):
            check(ex.name, 2)
    finally:
        from grpo_lessons.course import exercises

        exercises.EXERCISES.pop(ex.name, None)


def test_not_attempted_is_distinct_from_wrong():
    assert not issubclass(NotAttempted, ExerciseError)
