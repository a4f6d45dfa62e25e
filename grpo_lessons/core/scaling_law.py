"""ScaleRL's compute-performance curve: a sigmoid in compute, fitted by least squares.

Introduced in ``notebooks/14_cispo_scalerl.ipynb``.

Khatri et al. 2025, *The Art of Scaling Reinforcement Learning Compute for LLMs* (arXiv 2510.13786),
model the expected reward (pass rate) after ``C`` units of RL compute as

    R(C) = R0 + (A - R0) / (1 + (C_mid / C) ** B)

with ``R0`` the starting reward, ``A`` the asymptote (the ceiling the recipe reaches with unlimited
compute), ``C_mid`` the compute at which half of the gain ``A - R0`` is made, and ``B > 0`` the
steepness (the *efficiency*).  A recipe is better in the long run if its ``A`` is higher, and gets
there sooner if its ``B`` is larger or its ``C_mid`` smaller.  ``C`` is any monotone compute measure
(GPU-hours in the paper; completions sampled or FLOPs in this project: say which).

No scipy: :func:`fit_sigmoid` is a small Levenberg-Marquardt in numpy over ``(A, log C_mid, log B)``
(and ``R0`` unless it is fixed), started from a grid of ``C_mid`` and ``B`` values, keeping the best.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["sigmoid_curve", "fit_sigmoid", "SigmoidFit"]


def sigmoid_curve(C, A: float, R0: float, C_mid: float, B: float) -> np.ndarray:
    """``R(C) = R0 + (A - R0) / (1 + (C_mid / C)^B)`` (Khatri et al. 2025, Eq. 1), elementwise; ``C > 0``."""
    C = np.asarray(C, dtype=np.float64)
    if np.any(C <= 0):
        raise ValueError("compute C must be > 0 everywhere")
    if not (C_mid > 0 and B > 0):
        raise ValueError(f"need C_mid > 0 and B > 0, got C_mid={C_mid}, B={B}")
    # (C_mid / C)^B = exp(B (log C_mid - log C)), clipped so that huge exponents do not overflow
    z = np.clip(B * (math.log(C_mid) - np.log(C)), -700.0, 700.0)
    return R0 + (A - R0) / (1.0 + np.exp(z))


@dataclass(frozen=True)
class SigmoidFit:
    """The fitted parameters, the root-mean-square residual and the number of points."""

    A: float
    R0: float
    C_mid: float
    B: float
    rmse: float
    n: int
    fixed_R0: bool

    def __call__(self, C) -> np.ndarray:
        return sigmoid_curve(C, self.A, self.R0, self.C_mid, self.B)


def _model(p: np.ndarray, logC: np.ndarray, R0: float | None) -> np.ndarray:
    A, log_cmid, log_b = p[0], p[1], p[2]
    r0 = p[3] if R0 is None else R0
    z = np.clip(np.exp(log_b) * (log_cmid - logC), -700.0, 700.0)
    return r0 + (A - r0) / (1.0 + np.exp(z))


def _jacobian(p: np.ndarray, logC: np.ndarray, R0: float | None) -> np.ndarray:
    A, log_cmid, log_b = p[0], p[1], p[2]
    r0 = p[3] if R0 is None else R0
    b = np.exp(log_b)
    z = np.clip(b * (log_cmid - logC), -700.0, 700.0)
    s = 1.0 / (1.0 + np.exp(z))  # the sigmoid factor in (0, 1)
    ds_dz = -s * (1.0 - s)
    cols = [s, (A - r0) * ds_dz * b, (A - r0) * ds_dz * z]  # d/dA, d/dlog C_mid, d/dlog B (dz/dlogB = z)
    if R0 is None:
        cols.append(1.0 - s)
    return np.stack(cols, axis=1)


def _lm(p: np.ndarray, logC: np.ndarray, R: np.ndarray, R0: float | None, iters: int = 200) -> tuple[np.ndarray, float]:
    lam = 1e-3
    res = _model(p, logC, R0) - R
    cost = float(res @ res)
    for _ in range(iters):
        J = _jacobian(p, logC, R0)
        g = J.T @ res
        H = J.T @ J
        improved = False
        for _ in range(20):
            step = np.linalg.solve(H + lam * np.diag(np.diag(H) + 1e-12), -g)
            q = p + step
            q[2] = np.clip(q[2], math.log(1e-3), math.log(50.0))  # keep B in [1e-3, 50]
            r2 = _model(q, logC, R0) - R
            c2 = float(r2 @ r2)
            if np.isfinite(c2) and c2 < cost:
                p, res, lam, improved = q, r2, max(lam / 3, 1e-12), True
                rel = (cost - c2) / max(cost, 1e-300)
                cost = c2
                break
            lam *= 4
        if not improved or rel < 1e-12:
            break
    return p, cost


def fit_sigmoid(C, R, *, R0: float | None = None, fit_R0: bool = False) -> SigmoidFit:
    """Least-squares fit of :func:`sigmoid_curve` to points ``(C_k, R_k)``, ``C, R`` of shape ``(n,)``.

    ``R0`` fixes the starting reward (default: the reward at the smallest ``C``, the closest observation
    of the starting model); ``fit_R0=True`` fits it as a fourth parameter instead.  Returns
    a :class:`SigmoidFit`.  The fit is multi-start (``C_mid`` on the data's compute range, ``B`` in
    {0.5, 1, 2, 4}) Levenberg-Marquardt, so it does not depend on a starting guess; with noisy, short
    curves ``A`` and ``C_mid`` trade off against each other (a later midpoint with a higher ceiling fits
    almost as well), which is why the paper extrapolates only from runs well past ``C_mid``.

    Raises ``ValueError`` for mismatched shapes, fewer than 4 points (5 with ``fit_R0``), non-finite
    values or ``C <= 0``.
    """
    C = np.asarray(C, dtype=np.float64).ravel()
    R = np.asarray(R, dtype=np.float64).ravel()
    if C.shape != R.shape:
        raise ValueError(f"C and R must have the same length, got {C.shape[0]} and {R.shape[0]}")
    need = 5 if fit_R0 else 4
    if C.shape[0] < need:
        raise ValueError(f"need at least {need} points to fit the sigmoid, got {C.shape[0]}")
    if not (np.all(np.isfinite(C)) and np.all(np.isfinite(R))):
        raise ValueError("C and R must be finite (drop NaN rows, e.g. steps without a reward)")
    if np.any(C <= 0):
        raise ValueError("compute C must be > 0 everywhere (cumulative completions start at the first batch)")
    if fit_R0:
        r0_fixed = None
    else:
        r0_fixed = float(R[np.argmin(C)]) if R0 is None else float(R0)
    logC = np.log(C)
    best: tuple[float, np.ndarray] | None = None
    A0 = float(np.max(R)) + 0.05 * float(np.ptp(R) + 1e-3)
    for q in (0.1, 0.3, 0.5, 0.7, 0.9, 1.2):
        lc = float(np.quantile(logC, min(q, 1.0))) + (0.5 if q > 1 else 0.0)
        for b in (0.5, 1.0, 2.0, 4.0):
            p0 = [A0, lc, math.log(b)]
            if r0_fixed is None:
                p0.append(float(R[np.argmin(C)]))
            p, cost = _lm(np.array(p0, dtype=np.float64), logC, R, r0_fixed)
            if np.isfinite(cost) and (best is None or cost < best[0]):
                best = (cost, p)
    assert best is not None
    cost, p = best
    return SigmoidFit(A=float(p[0]), R0=float(p[3]) if r0_fixed is None else r0_fixed, C_mid=float(math.exp(p[1])),
                      B=float(math.exp(p[2])), rmse=math.sqrt(cost / C.shape[0]), n=int(C.shape[0]),
                      fixed_R0=r0_fixed is not None)
