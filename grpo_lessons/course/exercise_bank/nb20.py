"""Exercise of notebook 20 (the variant study): the paired difference to GRPO and its 95 % t-interval, by hand."""

import math

from ..exercises import Exercise, ExerciseError, call_learner, register

#: t_{0.975, df} as the notebook gives it (three decimals): df = the number of paired seeds minus one.
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447}


def reference_paired_interval(gains, baseline):
    """Mean of ``gains[s] - baseline[s]`` over the seeds both have, with its 95 % t-interval; None below two pairs."""
    from grpo_lessons.training.stats import paired_interval

    if len(set(gains) & set(baseline)) < 2:
        return None
    iv = paired_interval(gains, baseline)
    return iv.mean, iv.low, iv.high


# Per-seed gains (accuracy after - before) of an arm and of the baseline; not the study's numbers.
_CASES = [
    ({0: 0.12, 1: 0.31, 2: 0.20}, {0: 0.10, 1: 0.22, 2: 0.21}),                      # three seeds
    ({7: 0.90, 2: 0.40, 0: 0.25, 1: 0.33}, {0: 0.20, 1: 0.30, 2: 0.28}),             # other order; seed 7 unpaired
    ({0: 0.05, 1: 0.18, 2: 0.11, 3: 0.02, 4: 0.15}, {0: 0.09, 1: 0.10, 2: 0.12, 3: 0.01, 4: 0.08}),  # five seeds
    ({3: 0.30, 5: 0.26}, {3: 0.21, 5: 0.20}),                                        # two seeds: df = 1
]
_NONE_CASES = [({0: 0.3}, {0: 0.2}), ({0: 0.3, 1: 0.4}, {2: 0.1, 3: 0.2})]


def _check(fn):
    for gains, base in _CASES:
        want = reference_paired_interval(gains, base)
        got = call_learner(fn, (gains, base))
        if not isinstance(got, (tuple, list)) or len(got) != 3:
            raise ExerciseError(f"return three numbers (mean difference, low, high), got {got!r}")
        try:
            m, lo, hi = (float(x) for x in got)
        except (TypeError, ValueError):
            raise ExerciseError(f"return three numbers, got {got!r}") from None
        shown = f"for gains = {gains} and baseline = {base}"
        if not math.isclose(m, want[0], rel_tol=1e-9, abs_tol=1e-12):
            if math.isclose(m, -want[0], rel_tol=1e-9):
                raise ExerciseError(f"{shown} your mean difference {m:.4f} has the wrong sign: take the arm minus "
                                    "the baseline, gains[s] - baseline[s].")
            raise ExerciseError(f"{shown} the mean difference is {m:.4f}, expected {want[0]:.4f}. Pair the numbers "
                                "by seed (the dictionaries' keys, not their order) and use only the seeds both have.")
        half, want_half = (hi - lo) / 2, (want[2] - want[1]) / 2
        if not (math.isclose(lo, want[1], abs_tol=1e-3) and math.isclose(hi, want[2], abs_tol=1e-3)):
            ratio = half / want_half if want_half else float("nan")
            hint = ("The half-width is t_{0.975, n-1} * sd(d) / sqrt(n): the t quantile with n - 1 degrees of freedom "
                    "from T975 (not 1.96, which is for large n), the Bessel-corrected sd of the paired differences "
                    "d (divide by n - 1), and n the number of pairs.")
            raise ExerciseError(f"{shown} your interval is [{lo:.4f}, {hi:.4f}] (half-width {half:.4f}, {ratio:.2f} "
                                f"times the right one); expected [{want[1]:.4f}, {want[2]:.4f}]. {hint}")
    for gains, base in _NONE_CASES:
        got = call_learner(fn, (gains, base), allow_none=True)
        if got is not None:
            raise ExerciseError(f"for gains = {gains} and baseline = {base} there are fewer than two seeds in common: "
                                f"no spread to estimate, so return None, got {got!r}. One pair is an anecdote.")


_SOLUTION = """import math

T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447}  # t_{0.975, df}


def paired_t_interval(gains, baseline):
    seeds = sorted(set(gains) & set(baseline))
    d = [gains[s] - baseline[s] for s in seeds]  # one difference per shared seed
    n = len(d)
    if n < 2:
        return None
    mean = sum(d) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1))
    half = T975[n - 1] * sd / math.sqrt(n)
    return mean, mean - half, mean + half
"""


def _variant(body: str) -> str:
    """A wrong answer: the solution with its body from ``n = len(d)`` replaced by ``body``."""
    head = _SOLUTION.split("    n = len(d)\n")[0]
    return head + body


register(Exercise(
    name="20-paired-interval", notebook="20_variant_shootout.ipynb", variable="paired_t_interval", kind="code",
    prompt="Write paired_t_interval(gains, baseline): for two arms' per-seed gains ({seed: gain}), the mean of the "
           "seed-by-seed differences gains[s] - baseline[s] over the seeds both have, and its 95 % t-interval, as "
           "(mean, low, high); None for fewer than two shared seeds.",
    check=_check, reference=reference_paired_interval,
    package_code=("from grpo_lessons.training.stats import paired_interval\n\n"
                  "def paired_t_interval(gains, baseline):\n"
                  "    if len(set(gains) & set(baseline)) < 2:\n        return None\n"
                  "    iv = paired_interval(gains, baseline)\n"
                  "    return iv.mean, iv.low, iv.high"),
    solution_code=_SOLUTION,
    wrong_code=(
        # the normal quantile: too narrow for three seeds
        _variant("    n = len(d)\n    if n < 2:\n        return None\n    mean = sum(d) / n\n"
                 "    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1))\n"
                 "    half = 1.96 * sd / math.sqrt(n)\n    return mean, mean - half, mean + half\n"),
        # n degrees of freedom instead of n - 1
        _variant("    n = len(d)\n    if n < 2:\n        return None\n    mean = sum(d) / n\n"
                 "    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1))\n"
                 "    half = T975[n] * sd / math.sqrt(n)\n    return mean, mean - half, mean + half\n"),
        # the population sd
        _variant("    n = len(d)\n    if n < 2:\n        return None\n    mean = sum(d) / n\n"
                 "    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / n)\n"
                 "    half = T975[n - 1] * sd / math.sqrt(n)\n    return mean, mean - half, mean + half\n"),
        # unpaired: each arm's own spread, as if the seeds were unrelated
        ("import math, statistics\n\nT975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447}\n\n"
         "def paired_t_interval(gains, baseline):\n"
         "    seeds = sorted(set(gains) & set(baseline))\n"
         "    a, b = [gains[s] for s in seeds], [baseline[s] for s in seeds]\n"
         "    n = len(seeds)\n    if n < 2:\n        return None\n"
         "    mean = statistics.mean(a) - statistics.mean(b)\n"
         "    se = math.sqrt(statistics.variance(a) / n + statistics.variance(b) / n)\n"
         "    return mean, mean - T975[n - 1] * se, mean + T975[n - 1] * se\n"),
        # paired by position, not by seed, and over every number
        ("import math\n\nT975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447}\n\n"
         "def paired_t_interval(gains, baseline):\n"
         "    d = [x - y for x, y in zip(gains.values(), baseline.values())]\n"
         "    n = len(d)\n    if n < 2:\n        return None\n    mean = sum(d) / n\n"
         "    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1))\n"
         "    half = T975[n - 1] * sd / math.sqrt(n)\n    return mean, mean - half, mean + half\n"),
        # baseline minus arm
        ("import math\n\nT975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447}\n\n"
         "def paired_t_interval(gains, baseline):\n"
         "    seeds = sorted(set(gains) & set(baseline))\n"
         "    d = [baseline[s] - gains[s] for s in seeds]\n"
         "    n = len(d)\n    if n < 2:\n        return None\n    mean = sum(d) / n\n"
         "    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1))\n"
         "    half = T975[n - 1] * sd / math.sqrt(n)\n    return mean, mean - half, mean + half\n"),
        # a constant: one interval copied from a table
        "def paired_t_interval(gains, baseline):\n    return 0.05, -0.074, 0.174\n",
        # an interval for a single pair
        _variant("    n = len(d)\n    if n < 1:\n        return None\n    mean = sum(d) / n\n"
                 "    if n == 1:\n        return mean, mean, mean\n"
                 "    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1))\n"
                 "    half = T975[n - 1] * sd / math.sqrt(n)\n    return mean, mean - half, mean + half\n"),
    ),
))


# ----------------------------------------------------------------------------------------------------------
# Power: how many paired seeds a study needs, from a pilot's paired differences.

def reference_seeds_needed(pilot, effect, power=0.8):
    """The seeds a paired study needs to show ``effect`` with probability ``power`` at the 95 % level, given a pilot's
    paired differences ``pilot`` (their Bessel-corrected sd): :func:`grpo_lessons.core.stats.seeds_for_power`."""
    import statistics

    from grpo_lessons.core.stats import seeds_for_power

    return seeds_for_power(statistics.stdev(pilot), effect, power)


# A pilot's per-seed paired differences (arm minus baseline), the effect to detect (same unit), the power.
_POWER_CASES = [
    ([11.0, 2.0, -3.0], 5.0, 0.8),                  # points of accuracy; three pilot seeds
    ([5.0, -1.0, -4.0, 2.0], 10.0, 0.8),            # a large effect: few seeds
    ([16.0, -14.0, 8.0], 5.0, 0.9),                 # a noisy pilot and 90 % power: many
    ([0.02, -0.05, 0.04, 0.01, -0.03], 0.03, 0.8),  # fractions, not points: only the ratio sd / effect matters
    ([1.0, 2.0, 4.0], 2.0, 0.5),                    # power 0.5: t_{0.5} = 0, the test's quantile alone
]


def _check_seeds(fn):
    for pilot, effect, power in _POWER_CASES:
        want = reference_seeds_needed(pilot, effect, power)
        got = call_learner(fn, (pilot, effect, power))
        shown = f"for pilot = {pilot}, effect = {effect:g}, power = {power:g}:"
        if isinstance(got, bool) or not isinstance(got, (int, float)) or got != int(got):
            raise ExerciseError(f"{shown} return a whole number of seeds, got {got!r}")
        got = int(got)
        if got == want:
            continue
        if got == want - 1:
            raise ExerciseError(
                f"{shown} you return {got} seeds, one short of {want}: at n = {got} the condition "
                "(t_{0.975, n-1} + t_{power, n-1}) * sd / sqrt(n) <= effect does not hold yet. Return the smallest "
                "n at which it holds.")
        side = "too few" if got < want else "too many"
        raise ExerciseError(
            f"{shown} you return {got} seeds, {side}; the package's seeds_for_power gives {want}. Check each part "
            "of (t_{0.975, n-1} + t_{power, n-1}) * sd / sqrt(n) <= effect: sd is the Bessel-corrected standard "
            "deviation of the pilot's differences (divide by len(pilot) - 1), the t quantiles have n - 1 degrees of "
            "freedom, n being the seeds of the study (not of the pilot), both quantiles count (the test's 0.975 and "
            "the power's), and the standard error is sd / sqrt(n).")


_SEEDS_SOLUTION = """import math

from grpo_lessons.training.stats import t_quantile


def seeds_needed(pilot, effect, power=0.8):
    k = len(pilot)
    mean = sum(pilot) / k
    sd = math.sqrt(sum((x - mean) ** 2 for x in pilot) / (k - 1))  # the pilot's paired sd
    n = 2
    while (t_quantile(0.975, n - 1) + t_quantile(power, n - 1)) * sd / math.sqrt(n) > abs(effect):
        n += 1
    return n
"""


def _seeds_variant(condition: str = "(t_quantile(0.975, n - 1) + t_quantile(power, n - 1)) * sd / math.sqrt(n)",
                   sd: str = "math.sqrt(sum((x - mean) ** 2 for x in pilot) / (k - 1))", ret: str = "n") -> str:
    """A wrong answer: the solution with one part replaced."""
    return ("import math\n\nfrom grpo_lessons.training.stats import t_quantile\n\n\n"
            "def seeds_needed(pilot, effect, power=0.8):\n"
            "    k = len(pilot)\n    mean = sum(pilot) / k\n"
            f"    sd = {sd}\n    n = 2\n"
            f"    while {condition} > abs(effect):\n        n += 1\n"
            f"    return {ret}\n")


register(Exercise(
    name="20-seeds-for-power", notebook="20_variant_shootout.ipynb", variable="seeds_needed", kind="code",
    prompt="Write seeds_needed(pilot, effect, power=0.8): from a pilot's paired differences, the smallest number of "
           "paired seeds n >= 2 with (t_{0.975, n-1} + t_{power, n-1}) * sd / sqrt(n) <= effect, sd the pilot's "
           "Bessel-corrected standard deviation.",
    check=_check_seeds, reference=reference_seeds_needed,
    allowed_calls=("grpo_lessons.core.stats.t_quantile",),
    package_code=("import statistics\n\nfrom grpo_lessons.core.stats import seeds_for_power\n\n"
                  "def seeds_needed(pilot, effect, power=0.8):\n"
                  "    return seeds_for_power(statistics.stdev(pilot), effect, power)\n"),
    solution_code=_SEEDS_SOLUTION,
    wrong_code=(
        # the normal quantiles 1.96 and 0.84 (right for many seeds, too few for a handful)
        _seeds_variant(condition="(1.959964 + {0.5: 0.0, 0.8: 0.841621, 0.9: 1.281552}[power]) * sd / math.sqrt(n)"),
        # the normal approximation in closed form: n = ((z + z_power) sd / effect)^2, rounded up
        ("import math\n\n\ndef seeds_needed(pilot, effect, power=0.8):\n"
         "    k = len(pilot)\n    mean = sum(pilot) / k\n"
         "    sd = math.sqrt(sum((x - mean) ** 2 for x in pilot) / (k - 1))\n"
         "    z = {0.5: 0.0, 0.8: 0.841621, 0.9: 1.281552}[power]\n"
         "    return max(2, math.ceil(((1.959964 + z) * sd / effect) ** 2))\n"),
        # the power's quantile left out: 50 % power whatever is asked
        _seeds_variant(condition="t_quantile(0.975, n - 1) * sd / math.sqrt(n)"),
        # a one-sided test (0.95)
        _seeds_variant(condition="(t_quantile(0.95, n - 1) + t_quantile(power, n - 1)) * sd / math.sqrt(n)"),
        # n degrees of freedom instead of n - 1
        _seeds_variant(condition="(t_quantile(0.975, n) + t_quantile(power, n)) * sd / math.sqrt(n)"),
        # the degrees of freedom of the pilot, not of the study
        _seeds_variant(condition="(t_quantile(0.975, k - 1) + t_quantile(power, k - 1)) * sd / math.sqrt(n)"),
        # the population sd of the pilot
        _seeds_variant(sd="math.sqrt(sum((x - mean) ** 2 for x in pilot) / k)"),
        # the last n that fails, not the first that holds
        _seeds_variant(ret="n - 1"),
        # the number from the text, whatever the pilot
        "def seeds_needed(pilot, effect, power=0.8):\n    return 23\n",
    ),
))
