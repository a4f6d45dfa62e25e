"""The statistics of a paired comparison over seeds: Student-t intervals, paired differences, Holm's correction,
verdicts and seed bands.

Pure functions on plain numbers (standard library only), so they can be checked by hand and shared by every layer
that compares arms: the lab's claims (:mod:`grpo_lessons.lab`), the real-model studies
(:mod:`grpo_lessons.training.stats`) and the course's study reader.  A study's arms are run with the same seeds; an
arm's *paired difference* to the baseline is, seed by seed, its value minus the baseline's.  The mean of ``n`` such
numbers gets the interval ``mean +- t_{(1+level)/2, n-1} * s / sqrt(n)``; an interval that covers 0 is not a finding.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = ["t_cdf", "t_quantile", "Interval", "mean_interval", "paired_differences", "paired_interval", "verdict",
           "no_spread_verdict", "seed_band", "t_test_p", "holm", "claim_verdict", "seeds_for_power"]


def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularised incomplete beta function (modified Lentz), for ``x < (a+1)/(a+b+2)``."""
    tiny, eps = 1e-300, 1e-15
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < eps:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """The regularised incomplete beta function ``I_x(a, b)``."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _betacf(a, b, x) / a
    return 1.0 - math.exp(log_front) * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """``P(T <= t)`` for Student's t with ``df`` degrees of freedom: ``1 - I_{df/(df+t^2)}(df/2, 1/2) / 2`` for t >= 0."""
    if not df > 0:
        raise ValueError(f"degrees of freedom must be > 0, got {df!r}")
    if math.isnan(t):
        raise ValueError("t is NaN")
    if math.isinf(t):
        return 1.0 if t > 0 else 0.0
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))  # P(T > |t|)
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom (bisection on :func:`t_cdf`)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), got {p!r}")
    if p == 0.5:
        return 0.0
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12 * max(1.0, hi):
            break
    return 0.5 * (lo + hi)


@dataclass(frozen=True)
class Interval:
    """A mean over ``n`` numbers and its two-sided ``level`` t-interval (``low``/``high`` None when ``n < 2``)."""

    mean: float
    low: float | None
    high: float | None
    n: int
    sd: float | None
    level: float = 0.95

    @property
    def half_width(self) -> float | None:
        return None if self.high is None else self.high - self.mean

    def excludes_zero(self) -> bool:
        return self.low is not None and (self.low > 0.0 or self.high < 0.0)


def mean_interval(xs: Sequence[float], level: float = 0.95) -> Interval:
    """Mean of ``xs`` with the t-interval ``mean +- t_{(1+level)/2, n-1} * sd / sqrt(n)`` (``sd`` with Bessel's n-1)."""
    xs = [float(x) for x in xs]
    if not xs:
        raise ValueError("no numbers to average")
    if any(math.isnan(x) for x in xs):
        raise ValueError(f"NaN among the numbers: {xs}")
    if any(math.isinf(x) for x in xs):
        raise ValueError(f"an infinite number has no mean or interval: {xs}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    n = len(xs)
    mean = sum(xs) / n
    if n < 2:
        return Interval(mean, None, None, n, None, level)
    if len(set(xs)) == 1:  # exactly no spread (the float sum would leave a ~1e-17 sd and a p-value of noise)
        return Interval(xs[0], xs[0], xs[0], n, 0.0, level)
    sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1))
    half = t_quantile(0.5 + level / 2.0, n - 1) * sd / math.sqrt(n)
    return Interval(mean, mean - half, mean + half, n, sd, level)


def paired_differences(arm: Mapping[int, float], baseline: Mapping[int, float]) -> dict[int, float]:
    """``{seed: arm[seed] - baseline[seed]}`` over the seeds both have (a paired design: one seed, one pair)."""
    common = sorted(set(arm) & set(baseline))
    if not common:
        raise ValueError(f"no seed in common: arm has {sorted(arm)}, baseline has {sorted(baseline)}")
    return {s: float(arm[s]) - float(baseline[s]) for s in common}


def paired_interval(arm: Mapping[int, float], baseline: Mapping[int, float], level: float = 0.95) -> Interval:
    """The t-interval of the mean paired difference ``arm - baseline`` over their common seeds."""
    return mean_interval(list(paired_differences(arm, baseline).values()), level)


def no_spread_verdict(mean: float) -> str:
    """The verdict of differences that are all the same number ``mean`` (sd 0): no interval can be called on them."""
    return "the same difference on every seed: no spread to test" if mean != 0.0 else "no difference on any seed"


def verdict(iv: Interval, higher: str = "higher", lower: str = "lower") -> str:
    """``higher``/``lower`` when the interval excludes 0 on that side, else that no difference is shown.  Numbers
    that are all the same (an accuracy that moved by the same whole points on every seed) have no spread: their
    zero-width interval says nothing about the next seed, so they get their own wording, never ``higher``."""
    if iv.low is None:
        return f"one seed (n = {iv.n}): no interval"
    if iv.sd == 0.0:
        return no_spread_verdict(iv.mean)
    if iv.low > 0.0:
        return higher
    if iv.high < 0.0:
        return lower
    return "no difference shown (the interval covers 0)"


def seed_band(curves: Sequence[Sequence[tuple[float, float]]]) -> list[tuple[float, float, float, float, int]]:
    """Per step, over the seeds' curves ``[(step, value), ...]``: ``(step, mean, min, max, n)`` for every step at which
    at least one seed has a value (``n`` says how many), in step order.  None values are skipped."""
    by_step: dict[float, list[float]] = {}
    for curve in curves:
        for step, value in curve:
            if value is None or (isinstance(value, float) and math.isnan(value)):
                continue
            by_step.setdefault(step, []).append(float(value))
    return [(s, sum(v) / len(v), min(v), max(v), len(v)) for s, v in sorted(by_step.items())]


def t_test_p(iv: Interval) -> float | None:
    """Two-sided p-value of the one-sample t-test that the mean behind ``iv`` is 0 (``None`` for one number;
    0 when every number is the same non-zero value, 1 when they are all 0)."""
    if iv.sd is None:
        return None
    if iv.sd == 0.0:
        return 1.0 if iv.mean == 0.0 else 0.0
    t = iv.mean / (iv.sd / math.sqrt(iv.n))
    return 2.0 * (1.0 - t_cdf(abs(t), iv.n - 1))


def holm(pvalues: Sequence[float | None]) -> list[float | None]:
    """Holm's step-down adjustment of ``pvalues`` (family-wise error over all of them): the i-th smallest ``p`` is
    multiplied by ``m - i + 1``, made monotone and capped at 1.  ``None`` entries are skipped and stay ``None``."""
    idx = [i for i, p in enumerate(pvalues) if p is not None]
    for i in idx:
        p = pvalues[i]
        if math.isnan(p) or not 0.0 <= p <= 1.0:
            raise ValueError(f"p-values must lie in [0, 1], got {p!r} at position {i}")
    order = sorted(idx, key=lambda i: pvalues[i])
    m = len(order)
    out: list[float | None] = [None] * len(pvalues)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * float(pvalues[i])))
        out[i] = running
    return out


def claim_verdict(iv: Interval, direction: str) -> str:
    """A claim's verdict from the paired interval of (variant - baseline): ``reproduced`` when it excludes 0 on the
    side the paper predicts (``direction`` ``"+"`` or ``"-"``), ``reversed`` when it excludes 0 on the other side,
    else ``not reproduced``.  An interval needs two seeds or more; identical differences (standard deviation 0) are
    decided by their sign, the interval being a point."""
    if direction not in ("+", "-"):
        raise ValueError(f"direction must be '+' or '-', got {direction!r}")
    if iv.low is None:
        raise ValueError(f"a verdict needs at least two seeds, got n = {iv.n}")
    if any(math.isinf(x) for x in (iv.mean, iv.low, iv.high)):
        raise ValueError(f"an infinite difference has no verdict: {iv}")
    sign = "+" if iv.low > 0.0 else "-" if iv.high < 0.0 else None
    if sign is None:
        return "not reproduced"
    return "reproduced" if sign == direction else "reversed"


def seeds_for_power(sd: float, effect: float, power: float = 0.8, level: float = 0.95, max_seeds: int = 100_000) -> int:
    """How many paired seeds a paired t-test needs to detect a mean difference ``effect`` with probability ``power``
    when the paired differences have standard deviation ``sd`` (from a pilot).

    The smallest ``n >= 2`` with ``(t_{(1+level)/2, n-1} + t_{power, n-1}) * sd / sqrt(n) <= |effect|`` (the usual
    t-approximation of the noncentral t).  Example: ``sd = 8`` points, ``effect = 5`` points, 80 % power: 23 seeds."""
    for name, x in (("sd", sd), ("effect", effect)):
        if not (isinstance(x, (int, float)) and math.isfinite(x)):
            raise ValueError(f"{name} must be a finite number, got {x!r}")
    if sd < 0 or effect == 0:
        raise ValueError(f"need sd >= 0 and a non-zero effect, got sd={sd}, effect={effect}")
    if not (0.0 < power < 1.0 and 0.0 < level < 1.0):
        raise ValueError(f"power and level must lie in (0, 1), got {power}, {level}")
    if sd == 0:
        return 2
    for n in range(2, max_seeds + 1):
        df = n - 1
        if (t_quantile(0.5 + level / 2.0, df) + t_quantile(power, df)) * sd / math.sqrt(n) <= abs(effect):
            return n
    raise ValueError(f"more than {max_seeds} seeds needed (sd={sd}, effect={effect})")
