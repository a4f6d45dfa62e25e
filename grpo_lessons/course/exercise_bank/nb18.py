"""Exercises of notebooks/18_verbalized_sampling.ipynb."""

from __future__ import annotations

from ..exercises import Exercise, ExerciseError, learner_call, register

_CASES = (
    [0.5, 0.3, 0.2],
    [0.4, 0.4, 0.4],          # sums to 1.2: divide by the sum
    [0.6, None, 0.2],         # one missing: impute the mean of the stated ones
    [None, None],             # nothing stated: uniform
    [0.0, 0.0, 0.0],          # all zero: uniform
    [0.0, None, 0.5, None],
    [1.0],
)


def reference_normalise(stated):
    """What parse_verbalized gives for chapter-format lines with these stated probabilities."""
    from grpo_lessons.core.verbalized import parse_verbalized

    lines = [f"[answer {i}] (probability: {'unsure' if p is None else p})" for i, p in enumerate(stated)]
    return [c.prob for c in parse_verbalized("\n".join(lines))]


def _check_normalise(fn) -> None:
    for stated in _CASES:
        want = reference_normalise(stated)
        try:
            got = learner_call(fn, list(stated))
        except ExerciseError as err:
            if str(err).startswith("your function raised"):
                raise ExerciseError(f"normalise({stated}): {err}. Model output is untrusted: every list of stated "
                                    "probabilities must give a distribution.") from None
            raise
        try:
            got = [float(x) for x in got]
        except (TypeError, ValueError):
            raise ExerciseError(f"normalise({stated}) should return a list of floats, got {got!r}") from None
        if len(got) != len(want) or any(abs(a - b) > 1e-9 for a, b in zip(got, want)):
            raise ExerciseError(f"normalise({stated}) = {[round(x, 4) for x in got]}, expected "
                                f"{[round(x, 4) for x in want]}. Rules: a missing probability gets the mean of the "
                                "stated ones; then divide by the sum; if nothing usable is stated (all missing, or "
                                "all zero), every candidate gets 1/n.")


register(Exercise(
    name="18-normalise",
    notebook="18_verbalized_sampling.ipynb",
    variable="normalise",
    prompt="Write normalise(stated) -> list of probabilities summing to 1, for stated probabilities that may be "
           "None (missing): impute the mean of the stated ones, divide by the sum, uniform when nothing usable.",
    kind="code",
    check=_check_normalise,
    reference=reference_normalise,
    package_code=(
        "from grpo_lessons.core.verbalized import parse_verbalized\n\n"
        "def normalise(stated):\n"
        "    lines = [f'[answer {i}] (probability: {\"unsure\" if p is None else p})' for i, p in enumerate(stated)]\n"
        "    return [c.prob for c in parse_verbalized('\\n'.join(lines))]\n"
    ),
    solution_code=(
        "def normalise(stated):\n"
        "    valid = [p for p in stated if p is not None]\n"
        "    if not valid or sum(valid) <= 0:\n"
        "        return [1.0 / len(stated)] * len(stated)\n"
        "    mean = sum(valid) / len(valid)\n"
        "    w = [mean if p is None else p for p in stated]\n"
        "    return [x / sum(w) for x in w]\n"
    ),
    wrong_code=(
        # missing probabilities as 0: a candidate the model forgot to score can never be drawn
        "def normalise(stated):\n"
        "    w = [0.0 if p is None else p for p in stated]\n"
        "    total = sum(w)\n"
        "    return [x / total for x in w]\n",
        # trusts the model's numbers: no normalisation
        "def normalise(stated):\n"
        "    return [1.0 / len(stated) if p is None else p for p in stated]\n",
    ),
))


def _check_index(i) -> None:
    if isinstance(i, bool) or not isinstance(i, int) or i != 2:
        raise ExerciseError(f"{i!r} is not it. Add up the probabilities in order (0.5, 0.8, 1.0) and take the first "
                            "candidate whose running total exceeds u = 0.85; indices start at 0.")


register(Exercise(
    name="18-inverse-cdf",
    notebook="18_verbalized_sampling.ipynb",
    variable="index",
    prompt="Candidates with probabilities [0.5, 0.3, 0.2] and one uniform draw u = 0.85: which candidate (0-based "
           "index) does inverse-CDF sampling return?",
    kind="choice",
    check=_check_index,
    solution_code="index = 2",
    wrong_code=("index = 1", "index = 0", "index = 3"),
))
