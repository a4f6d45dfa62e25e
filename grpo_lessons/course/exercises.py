"""The exercise registry: every exercise of the curriculum, its check, its reference solution and the
typical wrong answers that the check must reject.

A notebook's exercise is three cells: a markdown task, a *stub* cell tagged ``exercise:<name>`` that
assigns ``<variable> = ...`` (or defines a function whose body is ``...``), and a check cell
``check("<name>", <variable>)``.  Checks take only the learner's answer and rebuild whatever data they
need from the package with a fixed seed, so the tests can prove, without running a notebook, that each
check accepts the reference solution and rejects every listed wrong answer with a hint.

* On a stub (``...``) :func:`check` prints what to do and returns ``False``: a notebook run as stored
  (CI's nbval run) never fails on an exercise the learner has not done yet.
* On a wrong answer it prints what is wrong (which value, expected shape or sign, a hint) and returns
  ``False``; on a right one it prints a confirmation and returns ``True``.
* With the environment variable ``GRPO_LESSONS_EXERCISES=strict`` a stub or a wrong answer raises
  :class:`ExerciseError` instead: the solutions run executes every notebook with the reference
  solutions pasted into the stub cells, in strict mode.

A learner's *function* is always called through :func:`learner_call`, which makes the check honest:

* the function gets **copies** of the check's inputs, and the check's expected values come from the
  originals, so a function that overwrites its inputs (with zeros, say) cannot change what it is compared
  with; a function that changes its inputs in place is told so, since that is a bug in training code too;
* the call runs under a **package-call guard**: a code exercise asks the learner to write a piece of the
  package, so a function that calls into ``grpo_lessons`` (the function the check compares against, an
  alias of it, or any other package function not listed in ``Exercise.allowed_calls``) gets a calm
  :class:`PackageCall` message asking for its own version.  The guard watches Python calls with
  :func:`sys.setprofile` for the length of the learner's call only and records every package function
  entered *from outside the package*, whatever name or module path reached it.  Threads the function starts
  (``threading.Thread``, a ``ThreadPoolExecutor``) are watched too, through :func:`threading.setprofile`.  The
  function cannot switch the watch off: an audit hook (:func:`sys.addaudithook`, installed with the first guard)
  refuses ``sys.setprofile`` (or a profiler such as ``cProfile``) in a watched thread while the guard is on, and
  the guard checks after the call that its hooks are still in place; either is a :class:`GuardSwitchedOff`.  It is
  an honesty aid, not a sandbox: threads that were already running before the call are not watched;
* a function that returns ``None`` is told it returned ``None`` (a forgotten ``return``); only the stub itself, a
  function whose body does nothing (``...``, ``pass``), is "not attempted".

Solutions and wrong answers are stored as source code (``solution_code``, ``wrong_code``,
``package_code``): they are pasted into notebook cells or run by the tests, never executed by this
package.  Exercises are registered in :mod:`grpo_lessons.course.exercise_bank` (one module per
notebook), imported on first use.
"""

from __future__ import annotations

import contextlib
import contextvars
import dis
import importlib
import math
import os
import pkgutil
import sys
import threading
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = [
    "Exercise", "ExerciseError", "NotAttempted", "PackageCall", "GuardSwitchedOff", "register", "check", "get_exercise",
    "all_exercises", "exercises_for", "is_stub", "learner_call", "call_learner", "close_to", "close_to_list",
    "check_function", "STRICT_ENV", "KINDS",
]

STRICT_ENV = "GRPO_LESSONS_EXERCISES"
#: code: write a function; number: compute a value; prediction: say what a cell below (or a setting) will
#: give before seeing it; choice: pick one of a few named options (True/False, an index).
KINDS = ("code", "number", "prediction", "choice")

_PACKAGE = __name__.split(".")[0]  # "grpo_lessons"
#: Package functions any learner function may call: the notebooks' comparison helper only prints.
_ALWAYS_ALLOWED = (f"{_PACKAGE}.course.teaching.",)
#: Switches the tests turn off to prove that a cheat would otherwise pass (never off in a notebook).
GUARD_PACKAGE_CALLS = True
GUARD_INPLACE = True
_ALLOWED: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar("allowed_calls", default=())


class ExerciseError(AssertionError):
    """A wrong answer; the message says what is wrong and gives a hint."""


class PackageCall(ExerciseError):
    """The learner's function called the package function it was asked to write (or another one)."""

    def __init__(self, names: list[str]) -> None:
        self.names = names
        shown = ", ".join(f"`{n.rsplit('.', 1)[-1]}` ({n.rsplit('.', 1)[0]})" for n in names[:3])
        super().__init__(
            f"your function calls the package's own {shown}. That is the answer key: the check compares with "
            "the package, so calling it compares the package with itself and says nothing about your version. "
            "Write the computation yourself (torch or plain Python); once it passes, `cmp(...)` compares it "
            "with the package's.")


class GuardSwitchedOff(ExerciseError):
    """The learner's function switched off the watch on package calls (``sys.setprofile``, a profiler,
    ``threading.setprofile``)."""

    def __init__(self, how: str) -> None:
        self.how = how
        super().__init__(
            f"your function switched off the check's watch on package calls ({how}). The check cannot tell your "
            "version from the package's then. Remove that line and write the computation yourself (torch or plain "
            "Python); once it passes, `cmp(...)` compares it with the package's.")


class NotAttempted(Exception):
    """The answer is still the stub (``...``), or a learner's function whose body does nothing (or returns ``...``)."""


@dataclass(frozen=True)
class Exercise:
    """One exercise: ``run(answer)`` raises :class:`ExerciseError` (wrong) or :class:`NotAttempted`.

    ``check`` is the raw checker; call :meth:`run` (or :func:`check`), which also applies the exercise's
    ``allowed_calls`` to the package-call guard.  A ``code`` exercise names its ``reference``: a function
    with the learner's signature that computes the right answer from the package (what the check
    compares with), and may give ``package_code``: a "solution" that calls the package's public function,
    which the guard must reject.  ``reveal_cell`` is the id of a notebook cell that shows the answer; the
    exercise's check cell must come before it (a prediction).
    """

    name: str  # "<notebook number>-<slug>", unique
    notebook: str  # "13_dppo.ipynb"
    variable: str  # the name the stub cell assigns
    prompt: str  # one or two sentences: what to do
    kind: str  # one of KINDS
    check: Callable[[Any], None]
    solution_code: str  # replaces the stub cell in the solutions run
    wrong_code: tuple[str, ...]  # typical wrong answers, each must be rejected
    reference: Callable[..., Any] | None = None  # code: the right answer, with the learner's signature
    package_code: str = ""  # code: a one-line "solution" calling the package's function (must be rejected)
    allowed_calls: tuple[str, ...] = ()  # code: package functions the learner may use ("module.function")
    reveal_cell: str = ""  # the id of the notebook cell that shows the answer; the check must come first

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
        if self.kind == "code" and not callable(self.reference):
            problems.append("a code exercise names its reference: the function its check compares with")
        if isinstance(self.allowed_calls, str):
            problems.append("allowed_calls is a tuple of qualified names, not one string")
        if problems:
            raise ValueError(f"exercise {self.name!r}: " + "; ".join(problems))

    @property
    def stub_tag(self) -> str:
        """The cell-metadata tag that marks this exercise's stub cell."""
        return f"exercise:{self.name}"

    def run(self, answer: Any) -> None:
        """Check ``answer``; raise :class:`NotAttempted` on a stub, :class:`ExerciseError` when wrong."""
        if is_stub(answer):
            raise NotAttempted
        token = _ALLOWED.set(tuple(self.allowed_calls))
        try:
            self.check(answer)
        finally:
            _ALLOWED.reset(token)


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
    """The exercise called ``name`` (e.g. ``"03-clip-gradient"``); ``ValueError`` naming the known ones otherwise."""
    _load_bank()
    try:
        return EXERCISES[name]
    except KeyError:
        raise ValueError(f"unknown exercise {name!r}; known: {', '.join(sorted(EXERCISES))}") from None


def all_exercises() -> list[Exercise]:
    """Every exercise of the course, sorted by name (notebook number first)."""
    _load_bank()
    return [EXERCISES[k] for k in sorted(EXERCISES)]


def exercises_for(notebook: str) -> list[Exercise]:
    """The exercises of one notebook (its file name, e.g. ``"03_clipped_surrogate_and_kl.ipynb"``), sorted by name."""
    return [e for e in all_exercises() if e.notebook == notebook]


_EMPTY_OPS = frozenset({"RESUME", "NOP", "CACHE", "LOAD_CONST", "RETURN_VALUE", "RETURN_CONST"})


def _does_nothing(fn: Any) -> bool:
    """Whether ``fn`` is a Python function whose body does nothing: a docstring and ``...`` or ``pass`` (the
    notebook's stub), compiled to "return None" (or ``return ...``)."""
    code = getattr(getattr(fn, "__func__", fn), "__code__", None)
    if not isinstance(code, types.CodeType) or code.co_flags & (0x20 | 0x80 | 0x200):  # generator, coroutine, async gen
        return False
    for ins in dis.get_instructions(code):
        if ins.opname not in _EMPTY_OPS:
            return False
        if ins.opname in ("LOAD_CONST", "RETURN_CONST") and ins.argval is not None and ins.argval is not Ellipsis:
            return False
    return True


def is_stub(answer: Any) -> bool:
    """``...`` (or a container holding it) is the stub a notebook ships with; so is a function whose body does
    nothing (``...`` or ``pass``, after an optional docstring)."""
    if answer is Ellipsis:
        return True
    if callable(answer) and _does_nothing(answer):
        return True
    if isinstance(answer, (list, tuple)):
        return any(a is Ellipsis for a in answer)
    if isinstance(answer, dict):
        return any(a is Ellipsis for a in answer.values())
    return False


# ----------------------------------------------------------------------------------------------------------
# Calling a learner's function: copies in, package calls watched, inputs compared after.


def _in_package(module: str) -> bool:
    return module == _PACKAGE or module.startswith(_PACKAGE + ".")


_GUARDS: list["_PackageCalls"] = []  # the guards now on (a check may run inside another's call)
_OWN = threading.local()  # .setting: a guard is installing or removing its own hook in this thread
_AUDIT = {"installed": False}
_BOOTSTRAP = threading.Thread._bootstrap_inner.__code__  # where a new thread installs threading's profile hook
_THREADING_SETPROFILE = threading.setprofile  # the real one (a guard swaps in a refusal while it is on)


def _set_profile(hook: Any) -> None:
    """``sys.setprofile`` on behalf of a guard (the audit hook lets it through)."""
    _OWN.setting = True
    try:
        sys.setprofile(hook)
    finally:
        _OWN.setting = False


def _audit(event: str, args: tuple) -> None:  # noqa: ARG001 - the audit hook's signature
    """Refuse ``sys.setprofile`` (and every profiler, which goes through it) in a watched thread while a guard is on.

    ``sys.setprofile`` raises the audit event ``sys.setprofile`` before it changes anything; raising here makes the
    call fail, so the guard's hook stays in place whatever the learner's code does with the exception.  A thread
    started during the call installs threading's hook (the guard's) in its bootstrap: that call is let through and
    the thread is watched from then on.
    """
    if event != "sys.setprofile" or not _GUARDS or getattr(_OWN, "setting", False):
        return
    tid = threading.get_ident()
    for guard in list(_GUARDS):
        if tid in guard.threads:
            how = "sys.setprofile, or a profiler, " + ("inside it" if tid == guard.owner else "in a thread it started")
            guard.switched_off.append(how)
            raise GuardSwitchedOff(how)
    owner = getattr(threading.getprofile(), "__self__", None)
    if owner in _GUARDS and sys._getframe(1).f_code is _BOOTSTRAP:
        owner.threads.add(tid)  # a new thread, started under the guard, installing the guard's hook


class _PackageCalls:
    """Record every package function entered from outside the package while the ``with`` block runs.

    A frame is recorded when its module is in the package and its caller's is not: the learner's code
    (or a C function such as ``map`` it handed the package function to) called in.  Calls the package makes
    internally, module bodies run by an import, and ``allowed`` functions are not recorded.  Threads started
    inside the block are watched too (:func:`threading.setprofile`), and the learner's code cannot remove the hook
    (:func:`_audit`); ``switched_off`` says how it tried.  The profilers that were installed before (a debugger's,
    say) are put back on exit.
    """

    def __init__(self, allowed: tuple[str, ...]) -> None:
        self.allowed = allowed
        self.calls: list[str] = []
        self.switched_off: list[str] = []
        self.threads: set[int] = set()
        self.owner = 0
        self.active = False
        self._previous: Any = None
        self._previous_threads: Any = None
        self._threading_setprofile: Any = None

    def _hook(self, frame, event, arg):  # noqa: ARG002 - the profiler's signature
        if event != "call":
            return
        if not self.active:  # a thread the learner's call started that outlived it: stop watching it
            if threading.get_ident() != self.owner:
                _set_profile(None)
            return
        module = frame.f_globals.get("__name__", "")
        if not _in_package(module):
            return
        back = frame.f_back
        if back is not None and _in_package(back.f_globals.get("__name__", "")):
            return  # a call inside the package (including from an allowed helper)
        code = frame.f_code
        qual = getattr(code, "co_qualname", code.co_name)
        if qual in ("<module>", "__getattr__", "__dir__"):
            return  # an import running a module, or the package's lazy attribute lookup
        name = f"{module}.{qual}"
        if name in self.allowed or name.startswith(_ALWAYS_ALLOWED) or name in self.calls:
            return
        self.calls.append(name)

    def _refuse_threading_setprofile(self, func: Any) -> None:  # noqa: ARG002 - threading.setprofile's signature
        self.switched_off.append("threading.setprofile")
        raise GuardSwitchedOff("threading.setprofile")

    def __enter__(self) -> list[str]:
        if not _AUDIT["installed"]:
            sys.addaudithook(_audit)  # for the rest of the process: audit hooks cannot be removed
            _AUDIT["installed"] = True
        self.owner = threading.get_ident()
        self.threads = {self.owner}
        self._previous, self._previous_threads = sys.getprofile(), threading.getprofile()
        self._threading_setprofile = threading.setprofile
        _THREADING_SETPROFILE(self._hook)  # threads started by the learner's call install it first thing
        threading.setprofile = self._refuse_threading_setprofile
        self.active = True
        _GUARDS.append(self)
        _set_profile(self._hook)
        return self.calls

    def __exit__(self, *exc: Any) -> None:
        if sys.getprofile() != self._hook:
            self.switched_off.append("sys.setprofile")
        if threading.getprofile() != self._hook:
            self.switched_off.append("threading's profile hook")
        self.active = False
        _set_profile(self._previous)
        if self in _GUARDS:
            _GUARDS.remove(self)
        threading.setprofile = self._threading_setprofile
        _THREADING_SETPROFILE(self._previous_threads)


def _call(fn: Any, args: tuple, kwargs: dict) -> Any:
    return fn(*args, **kwargs)


# The learner's function is called from a frame outside the package, so that a package function handed over
# as the answer itself (``f = group_advantages``, ``functools.partial(group_advantages, ...)``) is entered "from
# outside" and recorded like any other package call: the same code, with globals that name no package module.
_call_from_outside = types.FunctionType(_call.__code__, {"__name__": "<learner>", "__builtins__": __builtins__})


def _copy(x: Any) -> Any:
    """A deep copy of what a check hands a learner: tensors cloned (same ``requires_grad``), containers rebuilt."""
    import torch

    if isinstance(x, torch.Tensor):
        c = x.detach().clone()
        return c.requires_grad_(True) if x.requires_grad else c
    if isinstance(x, list):
        return [_copy(v) for v in x]
    if isinstance(x, tuple):
        return tuple(_copy(v) for v in x)
    if isinstance(x, dict):
        return {k: _copy(v) for k, v in x.items()}
    return x  # numbers, strings, None: immutable


def _same(a: Any, b: Any) -> bool:
    """Whether ``b`` (the learner's copy, after the call) still equals ``a`` (the check's original)."""
    import torch

    if isinstance(a, torch.Tensor):
        if not isinstance(b, torch.Tensor) or a.shape != b.shape or a.dtype != b.dtype:
            return False
        a, b = a.detach(), b.detach()
        return bool(((a == b) | (a.isnan() & b.isnan())).all()) if a.is_floating_point() else bool(torch.equal(a, b))
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - an object without a usable ==: treat as unchanged
        return True


def call_learner(fn: Any, args: tuple = (), kwargs: dict | None = None, *, allow_none: bool = False,
                 with_args: bool = False) -> Any:
    """Call a learner's function on copies of ``args``/``kwargs``; see the module docstring.

    A stub (``...``, or a function whose body does nothing, or that returns ``...``) is :class:`NotAttempted`;
    a function that returns ``None`` is an :class:`ExerciseError` saying so (a forgotten ``return``), unless
    ``allow_none=True`` (``None`` is a right answer for these inputs).  The learner's own exception, a package
    call, switching the guard off or an input changed in place is an :class:`ExerciseError`.  ``with_args=True``
    returns ``(out, args_copy, kwargs_copy)``, for checks that differentiate through the copies the learner got.
    """
    if is_stub(fn):
        raise NotAttempted
    if not callable(fn):
        raise ExerciseError(f"expected a function, got {type(fn).__name__}")
    kwargs = kwargs or {}
    args_c, kwargs_c = _copy(tuple(args)), _copy(dict(kwargs))
    guard = _PackageCalls(_ALLOWED.get())
    failure: BaseException | None = None
    with guard if GUARD_PACKAGE_CALLS else contextlib.nullcontext():
        try:
            out = _call_from_outside(fn, args_c, kwargs_c)
        except Exception as err:  # noqa: BLE001 - sorted out below, after the guard is off
            failure = err
    if guard.switched_off:  # whatever else happened: the check cannot vouch for this call
        raise GuardSwitchedOff(guard.switched_off[0])
    if failure is not None:
        if isinstance(failure, (NotAttempted, ExerciseError)):
            raise failure
        if isinstance(failure, NotImplementedError):
            raise NotAttempted from None
        if guard.calls:
            raise PackageCall(list(guard.calls)) from None
        # the learner's code failing is a wrong answer, shown with its error
        raise ExerciseError(f"your function raised {type(failure).__name__}: {failure}") from None
    if guard.calls:
        raise PackageCall(list(guard.calls))
    if out is Ellipsis:
        raise NotAttempted
    if out is None and not allow_none:
        raise ExerciseError("your function returned None: did you forget `return` at the end? It ran, so it is "
                            "not the stub any more; return the result instead of only computing it.")
    if GUARD_INPLACE and not (_same(tuple(args), args_c) and _same(dict(kwargs), kwargs_c)):
        raise ExerciseError("your function changed its inputs in place (an in-place operation such as `x -= ...`, "
                            "`x[...] = ...` or `.zero_()` on an argument). The caller still needs those values: "
                            "work on a copy, or build new tensors.")
    return (out, args_c, kwargs_c) if with_args else out


def learner_call(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """``call_learner(fn, args, kwargs)``: the learner's function on copies, under the package-call guard."""
    return call_learner(fn, args, kwargs)


# ----------------------------------------------------------------------------------------------------------
# Comparing answers.


def close_to(answer: Any, expected: float, *, what: str, rel: float = 1e-3, abs_tol: float = 1e-4,
             hint: str = "") -> None:
    """Check a number; the error names ``what`` and how far off the answer is."""
    if isinstance(answer, bool):
        raise ExerciseError(f"{what} should be a number, got {answer!r}")
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


def _shown(a: Any) -> str:
    text = repr(a.tolist() if hasattr(a, "tolist") else a)
    return text if len(text) <= 160 else text[:157] + "..."


def check_function(fn: Any, reference: Callable[..., Any], cases: list[tuple], *, what: str,
                   atol: float = 1e-5, hint: str = "") -> None:
    """Call a learner's function on each argument tuple of ``cases`` and compare with ``reference``.

    The expected value is computed first, on the check's own inputs; the learner's function gets copies
    (:func:`call_learner`).  Tensors, lists and numbers are compared element by element; the error shows
    the first failing input.
    """
    import torch

    for args in cases:
        want = reference(*args)
        got = learner_call(fn, *args)
        try:
            g = got.detach().double() if isinstance(got, torch.Tensor) else torch.as_tensor(got, dtype=torch.float64)
        except (TypeError, ValueError, RuntimeError):
            raise ExerciseError(f"{what} should return numbers (a tensor), got {type(got).__name__}") from None
        w = want.detach().double() if isinstance(want, torch.Tensor) else torch.as_tensor(want, dtype=torch.float64)
        shown = ", ".join(_shown(a) for a in args)
        if g.shape != w.shape:
            raise ExerciseError(f"{what}({shown}) has shape {tuple(g.shape)}, expected {tuple(w.shape)}. {hint}".strip())
        if not torch.allclose(g, w, atol=atol, rtol=1e-5, equal_nan=True):
            raise ExerciseError(f"{what}({shown}) returned {_shown(g)}, expected {_shown(w)}. {hint}".strip())


def _strict() -> bool:
    return os.environ.get(STRICT_ENV, "").strip().lower() == "strict"


def check(name: str, answer: Any) -> bool:
    """Check a learner's answer to exercise ``name``; print what is right or wrong (see module doc)."""
    ex = get_exercise(name)
    try:
        ex.run(answer)
    except NotAttempted:
        if _strict():
            raise ExerciseError(f"[{name}] not attempted: {ex.prompt}") from None
        print(f"Exercise {name}: not attempted yet. {ex.prompt}\n"
              f"Replace the `...` in `{ex.variable}` above, run that cell, then run this one again.")
        return False
    except ExerciseError as err:
        if _strict():
            raise
        print(f"Exercise {name}: not quite. {err}")
        return False
    print(f"Exercise {name}: correct.")
    return True
