"""Exercise of notebook 20 (variant shoot-out): the clipped share over the off-policy steps of a run's records."""

import math
import random

from ..exercises import Exercise, ExerciseError, learner_call, register


def _reference(r):
    vals = [c for s, c in zip(r["step"], r["clip"]) if s % 2 == 0 and not math.isnan(c)]
    return sum(vals) / len(vals) if vals else None


def _records(seed, n, nan_every=0):
    rng = random.Random(seed)
    clip = [rng.random() * 0.3 for _ in range(n)]
    if nan_every:
        clip = [float("nan") if i % nan_every == 0 else c for i, c in enumerate(clip)]
    return {"step": list(range(1, n + 1)), "clip": clip}


def _check(fn):
    cases = [_records(1, 8), _records(2, 11, nan_every=3), {"step": [1, 2], "clip": [float("nan")] * 2}]
    for r in cases:
        want = _reference(r)
        got = fn(r) if want is None else learner_call(fn, r)
        if want is None:
            if got is not None:
                raise ExerciseError("a run whose clip column is all NaN (SAPO logs none) should give None, "
                                    f"got {got!r}")
            continue
        if not isinstance(got, (int, float)) or not math.isclose(got, want, rel_tol=1e-9):
            raise ExerciseError(f"for steps {r['step']} you return {got!r}, expected {want:.6g}. Hint: keep only "
                                "the even steps (the second pass over each batch), skip NaN entries, then average.")


register(Exercise(
    name="20-off-policy-clip", notebook="20_variant_shootout.ipynb", variable="off_policy_clip", kind="code",
    prompt="Write off_policy_clip(r): the mean clipped share over the even (off-policy) steps of one run's records "
           "r = {'step': [...], 'clip': [...]}, skipping NaN; None when there is none.",
    check=_check,
    solution_code=("def off_policy_clip(r):\n"
                   "    vals = [c for s, c in zip(r[\"step\"], r[\"clip\"]) if s % 2 == 0 and c == c]\n"
                   "    return sum(vals) / len(vals) if vals else None"),
    wrong_code=("def off_policy_clip(r):\n    vals = [c for c in r[\"clip\"] if c == c]\n"
                "    return sum(vals) / len(vals) if vals else None",
                "def off_policy_clip(r):\n"
                "    vals = [c for s, c in zip(r[\"step\"], r[\"clip\"]) if s % 2 == 1 and c == c]\n"
                "    return sum(vals) / len(vals) if vals else None")))
