"""Every exercise of the curriculum: its check accepts the reference solution, rejects each typical wrong
answer with a hint, calls a stub "not attempted" without failing, and is wired into its notebook.

Every code exercise is also run against two cheats, generically over the registry:

* the **zeroing cheat** overwrites its inputs with zeros and returns the right answer for zeros; it passes a
  check that computes its expected values after the call, on the same tensors.  It must be rejected, and
  still be rejected with the in-place warning switched off (so the expected values come from the check's
  own, untouched inputs);
* the **package-call cheat** returns the package's answer: the exercise's ``reference`` (what the check
  compares with) and, where the package has a public function for it, ``package_code``.  Each must be
  rejected as a package call, and must pass with the guard switched off (so it is a right answer, and the
  guard is what rejects it).
"""

import functools
import json
from pathlib import Path

import pytest
import torch

from grpo_lessons.course import exercises
from grpo_lessons.course.exercises import (Exercise, ExerciseError, NotAttempted, PackageCall, all_exercises, check,
                                           learner_call, register)

ROOT = Path(__file__).resolve().parents[1]
EXERCISES = all_exercises()
CODE = [e for e in EXERCISES if e.kind == "code"]


def _value(ex, code):
    ns: dict = {}
    exec(compile(code, f"<{ex.name}>", "exec"), ns)  # reference code from the registry, not model output
    assert ex.variable in ns, f"{ex.name}: code does not assign {ex.variable}"
    return ns[ex.variable]


def _zero_inplace(x) -> bool:
    """Overwrite every tensor, list entry and dict value inside ``x`` with zeros; True if anything changed."""
    changed = False
    if isinstance(x, torch.Tensor):
        with torch.no_grad():
            x.zero_()
        return True
    if isinstance(x, (list, dict)):
        keys = range(len(x)) if isinstance(x, list) else list(x)
        for k in keys:
            v = x[k]
            if isinstance(v, (torch.Tensor, list, dict, tuple)):
                changed |= _zero_inplace(v)
            elif isinstance(v, str):
                x[k], changed = "", True
            elif isinstance(v, (int, float)) and not isinstance(v, bool):
                x[k], changed = 0.0, True
        return changed
    if isinstance(x, tuple):
        for v in x:
            changed |= _zero_inplace(v)
    return changed


@pytest.mark.parametrize("ex", EXERCISES, ids=lambda e: e.name)
def test_solution_passes(ex):
    ex.run(_value(ex, ex.solution_code))


@pytest.mark.parametrize("ex", EXERCISES, ids=lambda e: e.name)
def test_each_wrong_answer_fails_with_a_hint(ex):
    for code in ex.wrong_code:
        with pytest.raises(ExerciseError) as err:
            ex.run(_value(ex, code))
        assert not isinstance(err.value, PackageCall), f"{ex.name}: a wrong answer must fail on its merits: {code}"
        assert len(str(err.value)) > 15, f"{ex.name}: a wrong answer needs a hint, got {str(err.value)!r}"


@pytest.mark.parametrize("ex", CODE, ids=lambda e: e.name)
@pytest.mark.parametrize("inplace_guard", [True, False], ids=["inplace-guard", "no-inplace-guard"])
def test_zeroing_cheat_is_rejected(ex, inplace_guard, monkeypatch):
    monkeypatch.setattr(exercises, "GUARD_INPLACE", inplace_guard)
    solution = _value(ex, ex.solution_code)
    zeroed = []

    def cheat(*args, **kwargs):
        zeroed.append(_zero_inplace(args) | _zero_inplace(kwargs))
        return solution(*args, **kwargs)

    with pytest.raises(ExerciseError) as err:
        ex.run(cheat)
    assert any(zeroed), f"{ex.name}: the cheat found nothing to overwrite"
    if inplace_guard:
        assert "in place" in str(err.value)


@pytest.mark.parametrize("ex", CODE, ids=lambda e: e.name)
def test_package_call_cheats_are_rejected(ex, monkeypatch):
    cheats = {"reference": lambda *a, **k: ex.reference(*a, **k)}
    if ex.package_code:
        cheats["package_code"] = _value(ex, ex.package_code)
    for name, cheat in cheats.items():
        with pytest.raises(PackageCall) as err:
            ex.run(cheat)
        assert "yourself" in str(err.value), str(err.value)
    monkeypatch.setattr(exercises, "GUARD_PACKAGE_CALLS", False)
    for name, cheat in cheats.items():
        ex.run(cheat)  # without the guard the cheat is a right answer: the guard is what rejects it


@pytest.mark.parametrize("ex", EXERCISES, ids=lambda e: e.name)
def test_stub_is_not_attempted_and_calm(ex, monkeypatch, capsys):
    monkeypatch.delenv("GRPO_LESSONS_EXERCISES", raising=False)
    assert check(ex.name, ...) is False
    assert "not attempted" in capsys.readouterr().out
    monkeypatch.setenv("GRPO_LESSONS_EXERCISES", "strict")
    with pytest.raises(ExerciseError):
        check(ex.name, ...)


@pytest.mark.parametrize("ex", CODE, ids=lambda e: e.name)
def test_stub_function_is_not_attempted(ex):
    def stub(*args, **kwargs):
        ...  # the notebook's stub: a function whose body is `...`

    with pytest.raises(NotAttempted):
        ex.run(stub)


def _cells(ex):
    return json.loads((ROOT / "notebooks" / ex.notebook).read_text())["cells"]


@pytest.mark.parametrize("ex", EXERCISES, ids=lambda e: e.name)
def test_notebook_has_stub_and_check_cells(ex):
    cells = _cells(ex)
    stubs = [i for i, c in enumerate(cells) if ex.stub_tag in c.get("metadata", {}).get("tags", [])]
    assert len(stubs) == 1, f"{ex.notebook}: expected one cell tagged {ex.stub_tag}, found {len(stubs)}"
    src = "".join(cells[stubs[0]]["source"])
    assert "..." in src and ex.variable in src, f"{ex.name}: the stub cell must assign {ex.variable} = ..."
    later = "".join("".join(c["source"]) for c in cells[stubs[0] + 1:] if c["cell_type"] == "code")
    assert f'check("{ex.name}"' in later, f"{ex.name}: no check cell after the stub"


@pytest.mark.parametrize("ex", [e for e in EXERCISES if e.reveal_cell], ids=lambda e: e.name)
def test_prediction_is_checked_before_the_cell_that_reveals_it(ex):
    cells = _cells(ex)
    ids = [c.get("id") for c in cells]
    assert ex.reveal_cell in ids, f"{ex.notebook}: no cell with id {ex.reveal_cell}"
    check_at = next(i for i, c in enumerate(cells) if c["cell_type"] == "code" and f'check("{ex.name}"' in "".join(c["source"]))
    assert check_at < ids.index(ex.reveal_cell)


def test_exercise_blocks_say_how_to_fill_in_once():
    padding = "Fill in each `...` below"
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        text = ["".join(c["source"]) for c in json.loads(path.read_text())["cells"]]
        n = sum(padding in t for t in text)
        assert n == (1 if path.name.startswith("01_") else 0), f"{path.name}: {n} copies of the fill-in line"


# ----------------------------------------------------------------------------------------------------------
# The machinery.


def test_registry_rejects_malformed_entries():
    with pytest.raises(ValueError):
        Exercise(name="x", notebook="a.ipynb", variable="1a", prompt="", kind="essay",
                 check=lambda a: None, solution_code="", wrong_code=())
    with pytest.raises(ValueError, match="reference"):  # a code exercise must say what it compares with
        Exercise(name="99-f", notebook="99_demo.ipynb", variable="f", prompt="", kind="code",
                 check=lambda a: None, solution_code="", wrong_code=("f = 1",))


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
        exercises.EXERCISES.pop(ex.name, None)


def test_not_attempted_is_distinct_from_wrong():
    assert not issubclass(NotAttempted, ExerciseError)
    assert issubclass(PackageCall, ExerciseError)  # a package call is a wrong answer with its own message


def _guarded(fn, *args, allowed=()):
    token = exercises._ALLOWED.set(allowed)
    try:
        return learner_call(fn, *args)
    finally:
        exercises._ALLOWED.reset(token)


def test_guard_finds_the_package_however_it_is_reached():
    import grpo_lessons
    from grpo_lessons import group_advantages as ga
    from grpo_lessons.core import advantages

    r = torch.tensor([1.0, 0.0, 0.0, 1.0])
    ways = {
        "alias": lambda x: ga(x, 4),
        "module attribute": lambda x: advantages.group_advantages(x, 4),
        "top-level lazy name": lambda x: grpo_lessons.group_advantages(x, 4),
        "import inside": lambda x: __import__("grpo_lessons.core.advantages", fromlist=["x"]).group_advantages(x, 4),
        "through map": lambda x: list(map(lambda g: ga(g, 4), [x]))[0],
        "another package function": lambda x: x - advantages.combine_rewards(x[:, None]).mean(),
        "the package function itself": ga,
        "functools.partial": functools.partial(advantages.group_advantages, group_size=4),
    }
    for name, fn in ways.items():
        with pytest.raises(PackageCall, match="group_advantages|combine_rewards"):
            _guarded(fn, r) if name != "the package function itself" else _guarded(fn, r, 4)
    assert sys_profile_restored()


def sys_profile_restored() -> bool:
    import sys

    return sys.getprofile() is None


def test_guard_lets_own_code_and_allowed_helpers_through():
    from grpo_lessons.core.rewards import answer_tag

    r = torch.tensor([1.0, 0.0, 0.0, 1.0])
    assert torch.equal(_guarded(lambda x: x - x.mean(), r), r - r.mean())
    allowed = ("grpo_lessons.core.rewards.extract.answer_tag",)
    assert _guarded(lambda t: answer_tag(t), "<answer>7</answer>", allowed=allowed) == "7"  # nested calls inside it too
    with pytest.raises(PackageCall):
        _guarded(lambda t: answer_tag(t), "<answer>7</answer>")


def test_guard_reports_a_package_call_even_when_the_learner_then_fails():
    from grpo_lessons import group_advantages

    def fn(x):
        group_advantages(x, 4)
        raise RuntimeError("later bug")

    with pytest.raises(PackageCall):
        _guarded(fn, torch.tensor([1.0, 0.0, 0.0, 1.0]))


def test_learner_gets_copies_and_in_place_changes_are_named():
    r = torch.tensor([1.0, 0.0, 0.0, 1.0])

    def centre_in_place(x):
        x -= x.mean()
        return x

    with pytest.raises(ExerciseError, match="in place"):
        learner_call(centre_in_place, r)
    assert torch.equal(r, torch.tensor([1.0, 0.0, 0.0, 1.0]))  # the check's own tensor is untouched
    rows = {"a": [1.0, 2.0]}
    with pytest.raises(ExerciseError, match="in place"):
        learner_call(lambda d: d["a"].append(3.0) or 1.0, rows)
    assert rows == {"a": [1.0, 2.0]}
    assert learner_call(lambda x: x.clone().sub_(x.mean()), r).tolist() == [0.5, -0.5, -0.5, 0.5]


def test_kl_ceiling_reference_is_the_edge_of_the_packages_mask():
    """13-kl-ceiling's reference (a bisection written for the exercise) against DPPO's own binary-KL mask."""
    from grpo_lessons.core.objectives import dppo_trust_mask
    from grpo_lessons.course.exercise_bank.nb13 import reference_kl_ceiling

    mu = torch.tensor([1e-3, 0.01, 0.05, 0.3, 0.5, 0.9, 0.99], dtype=torch.float64)
    for delta in (0.05, 0.15):
        top = reference_kl_ceiling(mu, delta)
        assert ((top > mu) & (top < 1)).all()
        keep = lambda p: dppo_trust_mask(p.log(), mu.log(), torch.ones_like(mu), kind="binary_kl",  # noqa: E731
                                         delta_low=delta, delta_high=delta)
        assert keep(top - 1e-7).eq(1).all()
        # above the ceiling the mask drops the token, except where the ceiling is within 1e-8 of 1 (the package adds
        # 1e-8 to 1 - p, so it never masks there: the exercise checks to 1e-6 and does not see the difference)
        far = top < 1 - 1e-6
        assert far.sum() >= 6 and keep(top + 1e-7)[far].eq(0).all()


@pytest.mark.parametrize("ex", [e for e in EXERCISES if e.allowed_calls], ids=lambda e: e.name)
def test_allowed_helpers_exist(ex):
    """A renamed helper would turn an allowed call into a rejected one: every allowed name must resolve."""
    import importlib

    for name in ex.allowed_calls:
        module, _, func = name.rpartition(".")
        assert callable(getattr(importlib.import_module(module), func, None)), name


# ----------------------------------------------------------------------------------------------------------
# A function that forgets `return`, and a guard that the learner's code cannot switch off.


@pytest.mark.parametrize("ex", CODE, ids=lambda e: e.name)
def test_a_function_that_forgets_return_is_told_so_not_called_unattempted(ex, monkeypatch, capsys):
    def forgot(*args, **kwargs):
        n = len(args) + len(kwargs)  # works on something ...
        n = n * 2  # ... and never returns it

    monkeypatch.delenv("GRPO_LESSONS_EXERCISES", raising=False)
    assert check(ex.name, forgot) is False
    printed = capsys.readouterr().out
    assert "returned None" in printed and "`return`" in printed and "not attempted" not in printed, printed
    with pytest.raises(ExerciseError, match="returned None"):
        ex.run(forgot)

    def stub(*args, **kwargs):
        """The notebook's stub: a docstring and `...`."""
        ...

    with pytest.raises(NotAttempted):  # the stub is still "not attempted", not "forgot return"
        ex.run(stub)


def test_a_lambda_returning_none_is_a_wrong_answer_but_pass_is_a_stub():
    def body_is_pass(x):
        pass

    with pytest.raises(NotAttempted):
        learner_call(body_is_pass, torch.zeros(2))
    with pytest.raises(ExerciseError, match="returned None"):
        learner_call(lambda x: print(end=""), torch.zeros(2))


def _ga():
    from grpo_lessons import group_advantages

    return group_advantages


def test_switching_the_profiler_off_inside_the_function_is_caught():
    import sys

    ga = _ga()
    r = torch.tensor([1.0, 0.0, 0.0, 1.0])

    def off(x):
        sys.setprofile(None)
        return ga(x, 4)

    def off_and_back(x):
        hook = sys.getprofile()
        sys.setprofile(None)
        out = ga(x, 4)
        sys.setprofile(hook)
        return out

    def swallowed(x):
        try:
            sys.setprofile(None)
        except BaseException:  # noqa: BLE001 - the cheat hides the refusal
            pass
        return ga(x, 4)

    def own_profiler(x):
        import cProfile

        with cProfile.Profile():
            return ga(x, 4)

    for fn in (off, off_and_back, swallowed, own_profiler):
        with pytest.raises(ExerciseError, match="sys.setprofile|package"):
            _guarded(fn, r)
        assert sys.getprofile() is None  # the guard put the profiler it found back
    with pytest.raises(ExerciseError, match="switch"):
        _guarded(off, r)


def test_package_calls_made_in_other_threads_are_caught():
    import sys
    import threading
    from concurrent.futures import ThreadPoolExecutor

    ga = _ga()
    r = torch.tensor([1.0, 0.0, 0.0, 1.0])

    def pooled(x):
        with ThreadPoolExecutor(2) as pool:
            return pool.submit(ga, x, 4).result()

    def mapped(x):
        with ThreadPoolExecutor(2) as pool:
            return list(pool.map(lambda g: ga(g, 4), [x]))[0]

    def thread(x):
        out = {}
        t = threading.Thread(target=lambda: out.update(a=ga(x, 4)))
        t.start()
        t.join()
        return out["a"]

    def thread_switching_off(x):
        out = {}

        def work():
            try:
                sys.setprofile(None)
            except BaseException:  # noqa: BLE001 - the cheat hides the refusal
                pass
            out["a"] = ga(x, 4)

        t = threading.Thread(target=work)
        t.start()
        t.join()
        return out.get("a", x)

    def unhooked_threads(x):
        threading.setprofile(None)  # threads started from here on would not be watched
        return thread(x)

    for fn in (pooled, mapped, thread):
        with pytest.raises(PackageCall, match="group_advantages"):
            _guarded(fn, r)
    for fn in (thread_switching_off, unhooked_threads):
        with pytest.raises(ExerciseError, match="switch"):
            _guarded(fn, r)
    assert sys.getprofile() is None and threading.getprofile() is None

    def own_pool(x):  # a thread pool doing the learner's own arithmetic is fine
        with ThreadPoolExecutor(2) as pool:
            return pool.submit(lambda y: y - y.mean(), x).result()

    assert torch.equal(_guarded(own_pool, r), r - r.mean())
