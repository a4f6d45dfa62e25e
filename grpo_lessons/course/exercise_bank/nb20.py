"""Exercise of notebook 20 (variant shoot-out): a paired comparison of two variants over seeds."""

import math

from ..exercises import Exercise, ExerciseError, call_learner, register


def reference_paired(a, b):
    """Mean and standard error of the paired differences ``b_i - a_i`` (same seed i); None below two seeds."""
    d = [float(y) - float(x) for x, y in zip(a, b)]
    n = len(d)
    if n < 2:
        return None
    mean = sum(d) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1))  # Bessel: the mean is estimated from the same d
    return mean, sd / math.sqrt(n)


_CASES = [
    ([0.41, 0.38, 0.45], [0.47, 0.40, 0.52]),                 # three seeds, B better on each
    ([0.52, 0.31, 0.60, 0.44, 0.49], [0.50, 0.36, 0.61, 0.40, 0.55]),  # five seeds, mixed signs
    ([0.2, 0.7], [0.3, 0.9]),                                 # two seeds: the smallest that has a spread
]


def _check(fn):
    for a, b in _CASES:
        want = reference_paired(a, b)
        got = call_learner(fn, (a, b))
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            raise ExerciseError(f"return a pair (mean difference, standard error), got {got!r}")
        try:
            m, se = float(got[0]), float(got[1])
        except (TypeError, ValueError):
            raise ExerciseError(f"return two numbers, got {got!r}") from None
        if not math.isclose(m, want[0], rel_tol=1e-9, abs_tol=1e-12):
            sign = " (the sign: B minus A)" if math.isclose(m, -want[0], rel_tol=1e-9) else ""
            raise ExerciseError(f"for a = {a}, b = {b} the mean difference is {m:.6g}{sign}, expected {want[0]:.6g}. "
                                "Take d_i = b_i - a_i seed by seed, then their mean.")
        if not math.isclose(se, want[1], rel_tol=1e-9, abs_tol=1e-12):
            raise ExerciseError(f"for a = {a}, b = {b} the standard error is {se:.6g}, expected {want[1]:.6g}. The "
                                "standard error of the mean of the n PAIRED differences is sd(d) / sqrt(n), with the "
                                "Bessel-corrected sd (divide by n - 1); the spread of a and b on their own is not it.")
    for a, b in (([0.4], [0.5]), ([], [])):
        got = call_learner(fn, (a, b), allow_none=True)
        if got is not None:
            raise ExerciseError(f"with {len(a)} seed(s) there is no spread to estimate: return None, got {got!r}. "
                                "One run is a smoke test, not a result.")


register(Exercise(
    name="20-paired-difference", notebook="20_variant_shootout.ipynb", variable="paired_difference", kind="code",
    prompt="Write paired_difference(a, b): for two variants' final rewards on the same seeds (lists a[i], b[i]), "
           "the mean of the differences b[i] - a[i] and its standard error, as a pair; None for fewer than two seeds.",
    check=_check, reference=reference_paired,
    solution_code=("import math\n\ndef paired_difference(a, b):\n"
                   "    d = [y - x for x, y in zip(a, b)]\n"
                   "    n = len(d)\n"
                   "    if n < 2:\n        return None\n"
                   "    mean = sum(d) / n\n"
                   "    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1))\n"
                   "    return mean, sd / math.sqrt(n)"),
    wrong_code=(
        # unpaired: the spreads of a and b on their own
        "import statistics\n\ndef paired_difference(a, b):\n"
        "    if len(a) < 2:\n        return None\n"
        "    n = len(a)\n"
        "    se = (statistics.variance(a) / n + statistics.variance(b) / n) ** 0.5\n"
        "    return statistics.mean(b) - statistics.mean(a), se",
        # the population sd
        "import statistics\n\ndef paired_difference(a, b):\n"
        "    d = [y - x for x, y in zip(a, b)]\n"
        "    if len(d) < 2:\n        return None\n"
        "    return statistics.mean(d), statistics.pstdev(d) / len(d) ** 0.5",
        # the sd of the differences, not the standard error of their mean
        "import statistics\n\ndef paired_difference(a, b):\n"
        "    d = [y - x for x, y in zip(a, b)]\n"
        "    if len(d) < 2:\n        return None\n"
        "    return statistics.mean(d), statistics.stdev(d)",
        # a single seed reported as a result
        "import statistics\n\ndef paired_difference(a, b):\n"
        "    d = [y - x for x, y in zip(a, b)]\n"
        "    return statistics.mean(d) if d else 0.0, statistics.stdev(d) / len(d) ** 0.5 if len(d) > 1 else 0.0"),
))
