"""Input validation shared by the tensor functions: clear errors instead of silent wrong numbers."""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["as_float_tensor", "check_finite", "check_same_shape", "check_2d", "check_mask"]


def as_float_tensor(x, name: str) -> torch.Tensor:
    """Return ``x`` as a floating-point tensor (lists, tuples and numpy arrays accepted)."""
    if isinstance(x, torch.Tensor):
        t = x
    else:
        try:
            t = torch.as_tensor(x)
        except (TypeError, ValueError) as e:
            raise TypeError(f"{name} must be a tensor or a sequence of numbers, got {type(x).__name__}") from e
    if not torch.is_floating_point(t):
        t = t.to(torch.float32)
    return t


def _positions(bad: torch.Tensor, limit: int = 8) -> str:
    idx = bad.nonzero().tolist()
    shown = [tuple(i) if len(i) > 1 else i[0] for i in idx[:limit]]
    more = f" (and {len(idx) - limit} more)" if len(idx) > limit else ""
    return f"{shown}{more}"


def check_finite(t: torch.Tensor, name: str, where: torch.Tensor | None = None) -> None:
    """Raise ``ValueError`` naming the positions of NaN/inf entries (optionally only where ``where`` is true)."""
    bad = ~torch.isfinite(t)
    if where is not None:
        bad = bad & where.bool()
    if bool(bad.any()):
        raise ValueError(f"{name} contains NaN or inf at positions {_positions(bad)}")


def check_2d(t: torch.Tensor, name: str) -> None:
    if t.dim() != 2:
        raise ValueError(f"{name} must be (B, T) per-token values, got shape {tuple(t.shape)}")


def check_same_shape(ref: torch.Tensor, ref_name: str, **others: torch.Tensor | None) -> None:
    for name, t in others.items():
        if t is not None and tuple(t.shape) != tuple(ref.shape):
            raise ValueError(
                f"{name} has shape {tuple(t.shape)} but {ref_name} has shape {tuple(ref.shape)}; "
                "they must match token for token"
            )


def check_mask(mask: torch.Tensor) -> torch.Tensor:
    """Return the completion mask as the floating dtype, checking it holds only 0 and 1."""
    m = mask if torch.is_floating_point(mask) else mask.to(torch.float32)
    if bool(((m != 0) & (m != 1)).any()):
        raise ValueError("mask must contain only 0 and 1 (1 = completion token, 0 = padding)")
    return m


def check_choice(value: str, choices: Sequence[str], name: str) -> None:
    if value not in choices:
        raise ValueError(f"unknown {name} {value!r}; known: {', '.join(sorted(choices))}")
