"""The exercise registry: every exercise of the curriculum, its check, its reference solution and the
typical wrong answers that the check must reject.

A notebook's exercise is three cells: a markdown task, a *stub* cell tagged ``exercise:<name>`` that
assigns ``<variable> = ...``, and a check cell ``check("<name>", <variable>)``.  Checks take only the
learner's answer and rebuild whatever data they need from the package with a fixed seed, so the tests
can prove, without running a notebook, that each check accepts the reference solution and rejects
every listed wrong answer with a hint.

* On a stub (``...``) :func:`check` prints what to do and returns ``False``: a notebook run as stored
  (CI's nbval run) never fails on an exercise the learner has not done yet.
* On a wrong answer it prints what is wrong (which value, expected shape or sign, a hint) and returns
  ``False``; on a right one it prints a confirmation and returns ``True``.
* With the environment variable ``GRPO_LESSONS_EXERCISES=strict`` a stub or a wrong answer raises
  :class:`ExerciseError` instead: the solutions run executes every notebook with the reference
  solutions pasted into the stub cells, in strict mode.

Solutions and wrong answers are stored as source code (``solution_code``, ``wrong_code``): they are
pasted into notebook cells or run by the tests, never executed by this package.  Exercises are
registered in :mod:`grpo_lessons.course.exercise_bank` (one module per notebook), imported on first use.
"""

from __future__ import annotations

import importlib
import math
import os
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = [
    "Exercise", "ExerciseError", "NotAttempted", "register", "check", "get_exercise", "all_exercises",
    "exercises_for", "is_stub", "learner_call", "close_to", "close_to_list", "check_function", "STRICT_ENV",
]

STRICT_ENV = "GRPO_LESSONS_EXERCISES"
KINDS = ("number", "code", "prediction")


class ExerciseError(AssertionError):
    """A wrong answer; the message says what is wrong and gives a hint."""


class NotAttempted(Exception):
    """The answer is still the stub (``...``), or a learner's function returns ``None`` / ``...``."""


@dataclass(frozen=True)
class Exercise:
    """One exercise: ``check(answer)`` raises :class:`ExerciseError` (wrong) or :class:`NotAttempted`."""

    name: str  # "<notebook number>-<slug>", unique
    notebook: str  # "13_dppo.ipynb"
    variable: str  # the name the stub cell assigns
    prompt: str  # one or two sentences: what to do
    kind: str  # "number" | "code" | "prediction"
    check: Callable[[Any], None]
    solution_code: str  # replaces the stub cell in the solutions run
    wrong_code: tuple[str, ...]  # typical wrong answers, each must be rejected

    def __post_init__(self) -> None:
        problems = []
        if not self.name or not self.name[:2].isdigit() or self.name[2:3] != "-":
            problems.append(f"name must look like 'NN-slug', got {self.name!r}")
        if not self.notebook.endswith(".ipynb") or self.notebook[:2] != self.name[:2]:
            problems.append(f"notebook {self.notebook!r} must be the NN_*.ipynb of the name")
        if self.kind not in KINDS:
            problems.append(f"kind must be one of {KINDS}, got {self.kind!r}")
        if not self.variable.isidentifier():
            problems.append(f"variable must be a Python name, got {self.variable!r}")
        if not self.wrong_code:
            problems.append("give at least one typical wrong answer (wrong_code)")
        if isinstance(self.wrong_code, str):
            problems.append("wrong_code is a tuple of code strings, not one string")
        if problems:
            raise ValueError(f"exercise {self.name!r}: " + "; ".join(problems))

    @property
    def stub_tag(self) -> str:
        """The cell-metadata tag that marks this exercise's stub cell."""
        return f"exercise:{self.name}"


EXERCISES: dict[str, Exercise] = {}
_loaded = False


def register(exercise: Exercise, *, replace: bool = False) -> Exercise:
    """Add an exercise to the registry (``replace=True`` to overwrite an entry)."""
    if exercise.name in EXERCISES and not replace:
        raise ValueError(f"exercise {exercise.name!r} is already registered")
    EXERCISES[exercise.name] = exercise
    return exercise


def _load_bank() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    from . import exercise_bank

    for mod in sorted(pkgutil.iter_modules(exercise_bank.__path__), key=lambda m: m.name):
        importlib.import_module(f"{exercise_bank.__name__}.{mod.name}")


def get_exercise(name: str) -> Exercise:
    _load_bank()
    try:
        return EXERCISES[name]
    except KeyError:
        raise ValueError(f"unknown exercise {name!r}; known: {', '.join(sorted(EXERCISES))}") from None


def all_exercises() -> list[Exercise]:
    _load_bank()
    return [EXERCISES[k] for k in sorted(EXERCISES)]


def exercises_for(notebook: str) -> list[Exercise]:
    return [e for e in all_exercises() if e.notebook == notebook]


def is_stub(answer: Any) -> bool:
    """``...`` (or a container holding it) is the stub a notebook ships with."""
    if answer is Ellipsis:
        return True
    if isinstance(answer, (list, tuple)):
        return any(a is Ellipsis for a in answer)
    if isinstance(answer, dict):
        return any(a is Ellipsis for a in answer.values())
    return False


def learner_call(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Call a learner's function; a stub (not callable, or returning ``None`` / ``...``) is NotAttempted."""
    if is_stub(fn):
        raise NotAttempted
    if not callable(fn):
        raise ExerciseError(f"expected a function, got {type(fn).__name__}")
    try:
        out = fn(*args, **kwargs)
    except (NotAttempted, ExerciseError):
        raise
    except NotImplementedError:
        raise NotAttempted from None
    except Exception as err:  # the learner's code failing is a wrong answer, shown with its error
        raise ExerciseError(f"your function raised {type(err).__name__}: {err}") from None
    if out is None or out is Ellipsis:
        raise NotAttempted
    return out


def close_to(answer: Any, expected: float, *, what: str, rel: float = 1e-3, abs_tol: float = 1e-4,
             hint: str = "") -> None:
    """Check a number; the error names ``what`` and how far off the answer is."""
    try:
        x = float(answer)
    except (TypeError, ValueError):
        raise ExerciseError(f"{what} should be a number, got {type(answer).__name__} {answer!r}") from None
    if math.isnan(x):
        raise ExerciseError(f"{what} is NaN. {hint}".strip())
    if not math.isclose(x, expected, rel_tol=rel, abs_tol=abs_tol):
        side = "too large" if x > expected else "too small"
        sign = " (wrong sign)" if x * expected < 0 else ""
        raise ExerciseError(f"{what} = {x:.6g} is {side}{sign}. {hint}".strip())


def close_to_list(answer: Any, expected: Any, *, what: str, atol: float = 1e-4, hint: str = "") -> None:
    """Check a list of numbers (or booleans) element by element; the error names the first wrong entry."""
    exp = [float(e) for e in (expected.tolist() if hasattr(expected, "tolist") else expected)]
    try:
        got = [float(a) for a in (answer.tolist() if hasattr(answer, "tolist") else answer)]
    except (TypeError, ValueError):
        raise ExerciseError(f"{what} should be a list of {len(exp)} numbers, got {answer!r}") from None
    if len(got) != len(exp):
        raise ExerciseError(f"{what} should have {len(exp)} entries, got {len(got)}. {hint}".strip())
    for i, (g, e) in enumerate(zip(got, exp)):
        if not (abs(g - e) <= atol + 1e-6 * abs(e)):
            sign = " (wrong sign)" if g * e < 0 else ""
            raise ExerciseError(f"{what}: entry {i} is {g:.6g}{sign}, which is not right. {hint}".strip())


def check_function(fn: Any, reference: Callable[..., Any], cases: list[tuple], *, what: str,
                   atol: float = 1e-5, hint: str = "") -> None:
    """Call a learner's function on each argument tuple of ``cases`` and compare with ``reference``.

    Tensors, lists and numbers are compared element by element; the error shows the first failing input.
    """
    import torch

    for args in cases:
        got = learner_call(fn, *args)
        want = reference(*args)
        g = torch.as_tensor(got, dtype=torch.float64) if not isinstance(got, torch.Tensor) else got.detach().double()
        w = torch.as_tensor(want, dtype=torch.float64) if not isinstance(want, torch.Tensor) else want.detach().double()
        shown = ", ".join(repr(a.tolist() if hasattr(a, "tolist") else a) for a in args)
        if g.shape != w.shape:
            raise ExerciseError(f"{what}({shown}) has shape {tuple(g.shape)}, expected {tuple(w.shape)}. {hint}".strip())
        if not torch.allclose(g, w, atol=atol, rtol=1e-5, equal_nan=True):
            raise ExerciseError(f"{what}({shown}) returned {g.tolist()}, expected {w.tolist()}. {hint}".strip())


def _strict() -> bool:
    return os.environ.get(STRICT_ENV, "").strip().lower() == "strict"


def check(name: str, answer: Any) -> bool:
    """Check a learner's answer to exercise ``name``; print what is right or wrong (see module doc)."""
    ex = get_exercise(name)
    try:
        if is_stub(answer):
            raise NotAttempted
        ex.check(answer)
    except NotAttempted:
        if _strict():
            raise ExerciseError(f"[{name}] not attempted: {ex.prompt}") from None
        print(f"Exercise {name}: not attempted yet. {ex.prompt}\n"
              f"Replace the `...` in `{ex.variable} = ...` above, run that cell, then run this one again.")
        return False
    except ExerciseError as err:
        if _strict():
            raise
        print(f"Exercise {name}: not quite. {err}")
        return False
    print(f"Exercise {name}: correct.")
    return True
