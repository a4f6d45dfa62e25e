"""Small helpers for the notebooks: compare a learner's version with the package's.

Introduced in ``notebooks/01_why_grpo.ipynb``.  ``cmp`` follows the habit of building a quantity by
hand and checking it against a reference, reporting whether the two agree exactly, approximately,
and by how much at most.  Exercises are checked by :func:`grpo_lessons.course.exercises.check`, which
explains a wrong answer and is calm about a stub.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["CmpResult", "cmp"]


class CmpResult:
    """What :func:`cmp` found: ``exact``, ``approx`` and ``maxdiff``; truthy when ``approx``."""

    __slots__ = ("name", "exact", "approx", "maxdiff", "shape_ok")

    def __init__(self, name: str, exact: bool, approx: bool, maxdiff: float, shape_ok: bool = True) -> None:
        self.name, self.exact, self.approx, self.maxdiff, self.shape_ok = name, exact, approx, maxdiff, shape_ok

    def __bool__(self) -> bool:
        return self.approx

    def __repr__(self) -> str:
        if not self.shape_ok:
            return f"{self.name:<28s} | shapes differ"
        return f"{self.name:<28s} | exact: {self.exact!s:5s} | approx: {self.approx!s:5s} | maxdiff: {self.maxdiff:.1e}"


def _as_tensor(x: Any) -> torch.Tensor:
    t = x.detach() if isinstance(x, torch.Tensor) else torch.as_tensor(x)
    return t.to(torch.float64)


def cmp(name: str, mine: Any, ref: Any, *, atol: float = 1e-6, rtol: float = 1e-5, quiet: bool = False) -> CmpResult:
    """Compare ``mine`` with the reference ``ref`` (tensors, arrays, lists or numbers of the same shape).

    Prints one line ``name | exact: ... | approx: ... | maxdiff: ...`` (unless ``quiet``) and returns a
    :class:`CmpResult`, truthy when the two agree within ``atol + rtol * |ref|`` everywhere, so
    ``assert cmp(...)`` is an automatic check.  NaNs in the same places count as equal.
    """
    a, b = _as_tensor(mine), _as_tensor(ref)
    if a.shape != b.shape:
        res = CmpResult(name, False, False, float("inf"), shape_ok=False)
        if not quiet:
            print(f"{res!r}: mine {tuple(a.shape)} vs reference {tuple(b.shape)}")
        return res
    exact = bool(torch.equal(a, b)) or bool(((a == b) | (a.isnan() & b.isnan())).all())
    approx = bool(torch.allclose(a, b, atol=atol, rtol=rtol, equal_nan=True))
    both = ~(a.isnan() & b.isnan())
    diff = (a - b).abs()[both]
    maxdiff = float(diff.max()) if diff.numel() else 0.0
    if maxdiff != maxdiff:  # a NaN on one side only
        maxdiff = float("inf")
    res = CmpResult(name, exact, approx, maxdiff)
    if not quiet:
        print(repr(res))
    return res

