"""grpo_lessons.training.stats: Student-t intervals and paired differences against hand values (no scipy); the
benchmarks' old import path (benchmarks/_stats.py) is the same functions, not a copy."""

import math
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from grpo_lessons.training.stats import (mean_interval, paired_differences, paired_interval, seed_band,  # noqa: E402
                                         t_cdf, t_quantile, verdict)


def test_the_benchmarks_use_the_package_statistics_not_a_copy():
    from benchmarks import _stats, _study
    from grpo_lessons.training import stats

    for name in _stats.__all__:
        assert getattr(_stats, name) is getattr(stats, name), name
    assert _study.st is stats and _study.summarize_run is stats.summarize_run


# t_{0.975, df} and t_{0.95, df} from printed tables (e.g. NIST/SEMATECH e-Handbook, table 1.3.6.7.2)
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 9: 2.262, 10: 2.228, 20: 2.086, 30: 2.042,
        100: 1.984}
T95 = {1: 6.314, 2: 2.920, 3: 2.353, 10: 1.812}


@pytest.mark.parametrize("df,t", sorted(T975.items()))
def test_t_quantile_975_matches_the_table(df, t):
    assert t_quantile(0.975, df) == pytest.approx(t, abs=6e-4)


@pytest.mark.parametrize("df,t", sorted(T95.items()))
def test_t_quantile_95_matches_the_table(df, t):
    assert t_quantile(0.95, df) == pytest.approx(t, abs=6e-4)
    assert t_quantile(0.05, df) == pytest.approx(-t, abs=6e-4)


def test_t_cdf_closed_forms():
    for t in (-7.0, -1.0, -0.3, 0.0, 0.5, 1.0, 2.0, 30.0):
        assert t_cdf(t, 1) == pytest.approx(0.5 + math.atan(t) / math.pi, abs=1e-12)  # Cauchy
        assert t_cdf(t, 2) == pytest.approx(0.5 + t / (2 * math.sqrt(2 + t * t)), abs=1e-12)
    assert t_cdf(0.0, 7.5) == 0.5 and t_cdf(math.inf, 3) == 1.0 and t_cdf(-math.inf, 3) == 0.0
    assert t_cdf(1.959964, 1e7) == pytest.approx(0.975, abs=1e-5)  # the normal limit
    with pytest.raises(ValueError):
        t_cdf(1.0, 0)
    with pytest.raises(ValueError):
        t_quantile(1.0, 3)


def test_mean_interval_by_hand():
    iv = mean_interval([1.0, 2.0, 3.0])  # mean 2, sd 1, se 1/sqrt(3)
    half = 4.302653 / math.sqrt(3)
    assert (iv.mean, iv.sd, iv.n) == (2.0, 1.0, 3)
    assert iv.low == pytest.approx(2.0 - half, abs=1e-5) and iv.high == pytest.approx(2.0 + half, abs=1e-5)
    assert not iv.excludes_zero()
    iv = mean_interval([0.20, 0.25, 0.30])  # three seeds gaining 20-30 points: sd 0.05
    assert iv.low == pytest.approx(0.25 - 4.302653 * 0.05 / math.sqrt(3), abs=1e-6) and iv.excludes_zero()
    one = mean_interval([0.3])
    assert one.low is None and one.high is None and "one seed" in verdict(one)
    flat = mean_interval([0.1, 0.1, 0.1])  # no spread: exactly sd 0 (not the float sum's 1e-17), its own verdict
    assert (flat.mean, flat.low, flat.high, flat.sd) == (0.1, 0.1, 0.1, 0.0)
    assert verdict(flat) == "the same difference on every seed: no spread to test" != verdict(
        mean_interval([0.1, 0.1, 0.12]))
    assert verdict(mean_interval([0.0, 0.0])) == "no difference on any seed"
    with pytest.raises(ValueError, match="infinite"):
        mean_interval([0.1, float("inf")])
    with pytest.raises(ValueError, match="NaN"):
        mean_interval([0.1, float("nan")])
    with pytest.raises(ValueError, match="no numbers"):
        mean_interval([])


def test_paired_difference_by_hand():
    arm = {0: 0.30, 1: 0.25, 2: 0.40, 5: 0.9}
    base = {0: 0.20, 1: 0.20, 2: 0.20}
    d = paired_differences(arm, base)
    assert d == pytest.approx({0: 0.10, 1: 0.05, 2: 0.20})  # seed 5 has no partner
    iv = paired_interval(arm, base)
    sd = math.sqrt(((0.10 - 0.35 / 3) ** 2 + (0.05 - 0.35 / 3) ** 2 + (0.20 - 0.35 / 3) ** 2) / 2)
    assert iv.mean == pytest.approx(0.35 / 3) and iv.sd == pytest.approx(sd)
    assert iv.low == pytest.approx(0.35 / 3 - 4.302653 * sd / math.sqrt(3), abs=1e-6)
    assert verdict(iv) == "no difference shown (the interval covers 0)"  # 11.7 points, but [-7.2, +30.5]
    assert verdict(paired_interval({0: 0.3, 1: 0.31, 2: 0.29}, {0: 0.1, 1: 0.1, 2: 0.1})) == "higher"
    assert verdict(paired_interval({0: 0.1, 1: 0.1, 2: 0.12}, {0: 0.3, 1: 0.3, 2: 0.3})) == "lower"
    # pairing removes what the seeds share: the unpaired intervals overlap, the paired one excludes 0
    a, b = {0: 0.30, 1: 0.50, 2: 0.70}, {0: 0.25, 1: 0.46, 2: 0.64}
    assert mean_interval(list(b.values())).high > mean_interval(list(a.values())).low
    assert paired_interval(a, b).excludes_zero()
    with pytest.raises(ValueError, match="no seed in common"):
        paired_differences({0: 1.0}, {1: 1.0})


def test_seed_band():
    band = seed_band([[(0, 0.4), (10, 0.6), (20, 0.7)], [(0, 0.4), (10, 0.5)], [(0, 0.4), (10, None), (20, 0.9)]])
    assert band == [(0, pytest.approx(0.4), 0.4, 0.4, 3), (10, pytest.approx(0.55), 0.5, 0.6, 2),
                    (20, pytest.approx(0.8), 0.7, 0.9, 2)]
    assert seed_band([]) == []


@given(st.lists(st.floats(-1, 1, allow_nan=False), min_size=2, max_size=8),
       st.floats(0.1, 10), st.floats(-5, 5))
def test_interval_is_affine_equivariant(xs, a, b):
    iv = mean_interval(xs)
    jv = mean_interval([a * x + b for x in xs])
    assert jv.mean == pytest.approx(a * iv.mean + b, abs=1e-9)
    assert jv.low == pytest.approx(a * iv.low + b, abs=1e-7) and jv.high == pytest.approx(a * iv.high + b, abs=1e-7)
    assert iv.low <= iv.mean <= iv.high


@given(st.floats(0.5001, 0.9999), st.floats(0.5, 200))
def test_quantile_inverts_the_cdf(p, df):
    assert t_cdf(t_quantile(p, df), df) == pytest.approx(p, abs=1e-9)


def test_seeds_for_power_matches_the_t_approximation_by_hand():
    from grpo_lessons.core.stats import seeds_for_power, t_quantile

    assert seeds_for_power(8, 5) == 23  # paired SD 8 points, a 5-point effect, 80 % power
    assert seeds_for_power(10.6, 5) == 38 and seeds_for_power(10.6, 10) == 11
    n = seeds_for_power(3.0, 1.0, power=0.9)
    crit = lambda k: (t_quantile(0.975, k - 1) + t_quantile(0.9, k - 1)) * 3.0 / k ** 0.5  # noqa: E731
    assert crit(n) <= 1.0 < crit(n - 1)  # the smallest n that reaches the power
    assert seeds_for_power(0.0, 1.0) == 2
    for bad in ((-1, 1), (1, 0), (float("nan"), 1), (1, float("inf"))):
        with pytest.raises(ValueError):
            seeds_for_power(*bad)
