"""Widgets and plots on completion length: how each aggregation weighs tokens, Dr. GRPO's length drift,
DAPO's overlong penalty and filter, and the zero-gradient groups dynamic sampling skips.

Notebooks: ``03_clipped_surrogate_and_kl`` (the four normalisations), ``06_dr_grpo`` (token weight
against length, the length-drift simulation) and ``07_dapo`` (Eq. 13, overlong filtering,
zero-gradient groups and dynamic sampling).

Each widget comes in three layers: a **pure function** that computes the arrays that are drawn (a ``dict`` of
tensors / floats, unit tested without a display), a **plotting function** (matplotlib) that draws such a dict
and returns the figure, and a thin **ipywidgets wrapper** (``*_widget``) that ties sliders to the two; it can
be built without a browser and its ``.result`` holds the last computed dict.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from grpo_lessons.core.aggregation import token_weights
from grpo_lessons.core.dynamic_sampling import informative_fraction
from grpo_lessons.core.shaping import soft_overlong_penalty, truncation_mask
from grpo_lessons.core.variants import get_variant
from grpo_lessons.lab.length_toy import length_drift
from ._common import _plt, _interactive, _int_slider, _float_slider

__all__ = [
    # 03
    "NORMALISATION_VARIANTS", "normalisation_weights", "plot_normalisation_weights", "normalisation_widget",
    # 06
    "LENGTH_VARIANTS", "length_weight_curves", "plot_length_weights", "length_weight_widget",
    "length_drift", "plot_length_drift",
    # 07
    "overlong_penalty_curves", "plot_overlong_penalty", "overlong_widget",
    "zero_gradient_grid", "plot_zero_gradient_grid", "overlong_filter_effect", "plot_overlong_filter",
]


# ==================================================================================================
# 03 — the four normalisations
# ==================================================================================================

NORMALISATION_VARIANTS: tuple[str, ...] = ("grpo", "bnpo", "dr_grpo", "dapo")


def normalisation_weights(lengths: Sequence[int], *, max_completion_length: int | None = None,
                          variants: Sequence[str] = NORMALISATION_VARIANTS) -> dict[str, Any]:
    """Gradient weight of one token, and of a whole completion, under each variant's aggregation.

    Builds the ``(B, T)`` mask of completions of the given ``lengths`` and asks
    :func:`grpo_lessons.core.aggregation.token_weights` for ``d loss / d l_{i,t}``.  Returns ``lengths (B,)``,
    ``per_token {variant: (B,)}`` (the weight is the same for every token of a row), ``per_sequence
    {variant: (B,)}`` (= per-token x length) and ``aggregation {variant: mode}``.
    """
    L = torch.as_tensor([int(x) for x in lengths])
    if (L < 1).any():
        raise ValueError("every completion needs at least one token")
    T = int(L.max())
    mask = (torch.arange(T)[None, :] < L[:, None]).to(torch.float32)  # (B, T)
    per_token, per_seq, agg = {}, {}, {}
    for v in variants:
        mode = get_variant(v).aggregation
        w = token_weights(mask, mode, max_completion_length=max_completion_length).to(torch.float64)  # (B, T)
        per_token[v] = w[:, 0]
        per_seq[v] = w.sum(-1)
        agg[v] = mode
    return {"lengths": L, "T": T, "max_completion_length": max_completion_length or T, "per_token": per_token,
            "per_sequence": per_seq, "aggregation": agg, "variants": list(variants)}


def plot_normalisation_weights(d: dict[str, Any]):
    """Per-token (left) and per-completion (right) gradient weight against completion length, log-log."""
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(7.8, 3.6))
    L = d["lengths"].tolist()
    styles = {"grpo": "o-", "bnpo": "s-", "dr_grpo": "^-", "dapo": "x--"}
    for j, v in enumerate(d["variants"]):
        lab = f"{v} ({d['aggregation'][v]})"
        axes[0].plot(L, d["per_token"][v].tolist(), styles.get(v, "o-"), color=f"C{j}", label=lab)
        axes[1].plot(L, d["per_sequence"][v].tolist(), styles.get(v, "o-"), color=f"C{j}", label=lab)
    for ax, what in zip(axes, ("one token", "a whole completion")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("completion length |o_i| (tokens)")
        ax.set_ylabel(f"gradient weight of {what}")
    axes[0].legend(fontsize=8)
    axes[0].set_title(f"B = {len(L)}, max_completion_length = {d['max_completion_length']}", fontsize=9)
    fig.tight_layout()
    return fig


def normalisation_widget():
    """Sliders ``n_completions``, ``longest`` and ``max_completion_length`` over :func:`normalisation_weights`."""
    def compute(n_completions, longest, max_completion_length):
        lengths = sorted({max(1, round(4 * (longest / 4) ** (i / max(n_completions - 1, 1))))
                          for i in range(n_completions)})
        return normalisation_weights(lengths, max_completion_length=max(max_completion_length, max(lengths)))

    return _interactive(plot_normalisation_weights, compute,
                        n_completions=_int_slider(8, 2, 16, 1, "n_completions"),
                        longest=_int_slider(256, 8, 1024, 8, "longest"),
                        max_completion_length=_int_slider(1024, 8, 2048, 8, "max_completion_length"))


# ==================================================================================================
# 06 — Dr. GRPO and length bias
# ==================================================================================================

LENGTH_VARIANTS: tuple[str, ...] = ("grpo", "bnpo", "dapo", "dr_grpo")


def length_weight_curves(
    lengths: Sequence[int] | None = None,
    other_lengths: Sequence[int] = (64,) * 7,
    *,
    max_completion_length: int = 512,
    variants: Sequence[str] = LENGTH_VARIANTS,
) -> dict[str, Any]:
    """Gradient weight of one completion's tokens as its length ``l`` varies, the rest of the batch fixed.

    For each ``l`` the batch is ``[l] + other_lengths``; the weight is
    :func:`grpo_lessons.core.aggregation.token_weights` (d loss / d l_{0,t}) under each variant's aggregation.
    Returns ``lengths (n,)``, ``per_token[v] (n,)`` (one token's weight) and ``per_sequence[v] (n,)``
    (``l`` times it: the completion's whole weight).  ``grpo``: ``1/(B l)`` per token, ``1/B`` per completion;
    ``bnpo``/``dapo``: ``1/(l + rest)``; ``dr_grpo``: ``1/(B L)``, so the completion weighs ``l/(B L)``.
    """
    if lengths is None:
        lengths = sorted({max(1, round(2 ** (k / 4))) for k in range(0, 37)})
    lengths = [int(x) for x in lengths]
    if min(lengths) < 1 or min(other_lengths, default=1) < 1:
        raise ValueError("lengths must be >= 1")
    T = max(max(lengths), max(other_lengths, default=1))
    if max_completion_length < T:
        raise ValueError(f"max_completion_length={max_completion_length} is shorter than a completion ({T})")
    pos = torch.arange(T)
    per_token = {v: [] for v in variants}
    for ell in lengths:
        lens = torch.tensor([ell, *other_lengths])
        mask = (pos[None, :] < lens[:, None]).float()  # (B, T)
        for v in variants:
            w = token_weights(mask, get_variant(v).aggregation, max_completion_length=max_completion_length)
            per_token[v].append(float(w[0, 0]))
    ls = torch.tensor(lengths, dtype=torch.float64)
    pt = {v: torch.tensor(per_token[v], dtype=torch.float64) for v in variants}
    return {"lengths": ls, "per_token": pt, "per_sequence": {v: pt[v] * ls for v in variants},
            "batch_size": 1 + len(other_lengths), "other_lengths": list(other_lengths),
            "max_completion_length": max_completion_length}


def plot_length_weights(d: dict[str, Any]):
    """Two log-log panels: one token's weight, and the whole completion's weight, against its length."""
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(7.8, 3.6))
    styles = {"grpo": ("C3", "-"), "bnpo": ("C0", "-"), "dapo": ("C1", "--"), "dr_grpo": ("C2", "-")}
    x = d["lengths"].tolist()
    for v in d["per_token"]:
        c, ls = styles.get(v, ("k", "-"))
        axes[0].plot(x, d["per_token"][v].tolist(), color=c, ls=ls, lw=2, label=v)
        axes[1].plot(x, d["per_sequence"][v].tolist(), color=c, ls=ls, lw=2, label=v)
    for ax, title in zip(axes, ("weight of ONE token", "weight of the whole completion")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("length |o| of this completion (tokens)")
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3, which="both")
    axes[0].set_ylabel("d loss / d l_t")
    axes[0].legend(fontsize=8)
    fig.suptitle(f"B = {d['batch_size']}, other completions {d['other_lengths'][0]} tokens, "
                 f"L = {d['max_completion_length']} (bnpo and dapo coincide)", fontsize=9)
    fig.tight_layout()
    return fig


def length_weight_widget():
    """Sliders: the other completions' length, the batch size and Dr. GRPO's constant L."""
    def compute(other_length, batch_size, max_completion_length):
        return length_weight_curves(other_lengths=(other_length,) * (batch_size - 1),
                                    max_completion_length=max(max_completion_length, 512, other_length))

    return _interactive(plot_length_weights, compute,
                        other_length=_int_slider(64, 1, 512, 1, "other len"),
                        batch_size=_int_slider(8, 2, 32, 1, "B"),
                        max_completion_length=_int_slider(512, 512, 4096, 64, "L"))


def plot_length_drift(runs: Sequence[dict[str, Any]]):
    """One panel per run: expected length of wrong (red) and right (green) answers against the step."""
    plt = _plt()
    fig, axes = plt.subplots(1, len(runs), figsize=(min(7.8, 3.9 * len(runs)), 3.3), sharey=True, squeeze=False)
    for ax, d in zip(axes[0], runs):
        x = list(range(d["steps"] + 1))
        ax.plot(x, d["expected_length_wrong"].tolist(), color="C3", lw=2, label="wrong answers (A < 0)")
        ax.plot(x, d["expected_length_right"].tolist(), color="C2", lw=2, label="right answers (A > 0)")
        ax.plot(x[1:], d["sampled_length_wrong"].tolist(), color="C3", lw=0.6, alpha=0.4)
        ax.plot(x[1:], d["sampled_length_right"].tolist(), color="C2", lw=0.6, alpha=0.4)
        ax.axhline(d["max_len"], color="k", ls=":", lw=0.8)
        ax.set_title(d["variant"], fontsize=10)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    axes[0, 0].set_ylabel("mean completion length")
    axes[0, 0].legend(fontsize=8, loc="center left")
    fig.tight_layout()
    return fig


# ==================================================================================================
# 07 — DAPO: the overlong penalty, overlong filtering, dynamic sampling
# ==================================================================================================

def overlong_penalty_curves(max_len: int = 20480, cache_len: int = 4096, factor: float = 1.0, *,
                            n: int = 1001, beyond: float = 1.25) -> dict[str, Any]:
    """DAPO Eq. (13) against the chapter's formula, on lengths ``0 .. beyond * max_len``.

    ``paper``: :func:`grpo_lessons.core.shaping.soft_overlong_penalty` (0 up to ``max_len - cache_len``, linear to
    ``-factor`` at ``max_len``, ``-factor`` beyond).  ``chapter``: ``-factor * max(0, (|o| - L_cache) /
    (L_max - L_cache))``, reading ``L_cache`` as a length threshold — it starts at ``cache_len`` tokens and
    keeps falling past ``max_len``.  ``onset_paper`` / ``onset_chapter``: the first penalised length.
    """
    lengths = torch.linspace(0, beyond * max_len, n, dtype=torch.float64)
    paper = soft_overlong_penalty(lengths, max_len, cache_len, factor)
    chapter = -factor * torch.clamp((lengths - cache_len) / (max_len - cache_len), min=0.0)
    return {"lengths": lengths, "paper": paper, "chapter": chapter, "max_len": max_len, "cache_len": cache_len,
            "factor": factor, "onset_paper": max_len - cache_len, "onset_chapter": cache_len}


def plot_overlong_penalty(d: dict[str, Any]):
    """DAPO's soft overlong penalty (Eq. 13) against the chapter's formula, over completion length."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 3.4))
    x = d["lengths"].tolist()
    ax.plot(x, d["paper"].tolist(), color="C0", lw=2.5, label="DAPO Eq. 13 (paper)")
    ax.plot(x, d["chapter"].tolist(), color="C3", lw=1.5, ls="--", label="the chapter's formula")
    ax.axvline(d["max_len"] - d["cache_len"], color="C0", ls=":", lw=1)
    ax.axvline(d["max_len"], color="k", ls=":", lw=1)
    ax.axvspan(d["max_len"] - d["cache_len"], d["max_len"], color="C0", alpha=0.08, label="the buffer L_cache")
    ax.set_xlabel("completion length |o| (tokens)")
    ax.set_ylabel("length reward")
    ax.set_title(f"L_max = {d['max_len']}, L_cache = {d['cache_len']}", fontsize=10)
    ax.legend(fontsize=8, loc="lower left")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def overlong_widget():
    """Sliders ``max_len``, ``cache_len`` and ``factor`` over :func:`overlong_penalty_curves`."""
    def compute(max_len, cache_len, factor):
        return overlong_penalty_curves(max_len, min(cache_len, max_len), factor)

    return _interactive(plot_overlong_penalty, compute,
                        max_len=_int_slider(20480, 1024, 32768, 512, "L_max"),
                        cache_len=_int_slider(4096, 256, 16384, 256, "L_cache"),
                        factor=_float_slider(1.0, 0.1, 2.0, 0.1, "factor"))


def zero_gradient_grid(pass_rates: Sequence[float] | None = None,
                       group_sizes: Sequence[int] = (2, 4, 8, 16, 64)) -> dict[str, Any]:
    """Share of zero-gradient groups ``p**G + (1-p)**G`` and dynamic sampling's cost, per ``G`` and pass rate.

    Returns ``pass_rates (n,)``, ``group_sizes``, ``zero_share (len(G), n)``, ``informative (len(G), n)``
    and ``extra_per_useful (len(G), n)`` = ``1/q - 1``: extra groups sampled per informative group kept
    (inf where ``q = 0``).
    """
    p = torch.linspace(0.0, 1.0, 101, dtype=torch.float64) if pass_rates is None else \
        torch.as_tensor(pass_rates, dtype=torch.float64)
    q = torch.stack([informative_fraction(p, int(G)) for G in group_sizes])  # (len(G), n)
    extra = torch.where(q > 0, 1.0 / q.clamp(min=1e-300) - 1.0, torch.full_like(q, math.inf))
    return {"pass_rates": p, "group_sizes": [int(G) for G in group_sizes], "zero_share": 1.0 - q,
            "informative": q, "extra_per_useful": extra}


def plot_zero_gradient_grid(d: dict[str, Any]):
    """Left: share of zero-gradient groups against pass rate; right: extra groups per useful one (log)."""
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(7.8, 3.4), sharex=True)
    x = d["pass_rates"].tolist()
    for k, G in enumerate(d["group_sizes"]):
        axes[0].plot(x, d["zero_share"][k].tolist(), lw=2, label=f"G = {G}")
        e = d["extra_per_useful"][k]
        ok = torch.isfinite(e)
        axes[1].plot(d["pass_rates"][ok].tolist(), e[ok].tolist(), lw=2, label=f"G = {G}")
    axes[0].set_ylabel("share of groups with no gradient")
    axes[1].set_ylabel("extra groups sampled per kept group")
    axes[1].set_yscale("log")
    axes[1].set_ylim(bottom=1e-3)  # below this the cost is zero up to rounding (G = 64 at p near 1/2)
    for ax in axes:
        ax.set_xlabel("pass rate p of the prompt")
        ax.grid(alpha=0.3, which="both")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    return fig


def overlong_filter_effect(lengths: Sequence[int], truncated: Sequence[bool], *, variant: str = "dapo") -> dict:
    """Mask and token weights before / after DAPO's overlong filtering (TRL ``mask_truncated_completions``).

    Returns ``mask_before``, ``mask_after`` ``(B, T)``, ``weights_before`` / ``weights_after`` (``token_weights``
    under the variant's aggregation), ``tokens_removed``, ``share_removed`` and the per-completion weights.
    """
    lens = torch.as_tensor(list(lengths))
    trunc = torch.as_tensor(list(truncated), dtype=torch.bool)
    if lens.shape != trunc.shape:
        raise ValueError("lengths and truncated must have the same length")
    T = int(lens.max())
    before = (torch.arange(T)[None, :] < lens[:, None]).float()  # (B, T)
    after = before * truncation_mask(trunc)[:, None]  # (B, T)
    agg = get_variant(variant).aggregation
    wb = token_weights(before, agg, max_completion_length=T)
    wa = token_weights(after, agg, max_completion_length=T)
    return {"lengths": lens, "truncated": trunc, "mask_before": before, "mask_after": after,
            "weights_before": wb, "weights_after": wa, "tokens_removed": int((before - after).sum()),
            "share_removed": float((before - after).sum() / before.sum()),
            "completion_weight_before": wb.sum(-1), "completion_weight_after": wa.sum(-1)}


def plot_overlong_filter(d: dict[str, Any]):
    """Per-token gradient weights before and after overlong filtering masks the truncated completions."""
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(7.8, 2.8), sharey=True)
    vmax = float(torch.maximum(d["weights_before"].max(), d["weights_after"].max()))
    for ax, key, title in ((axes[0], "weights_before", "before filtering"),
                           (axes[1], "weights_after", "after: truncated completions masked")):
        im = ax.imshow(d[key].numpy(), aspect="auto", cmap="viridis", vmin=0, vmax=vmax, interpolation="nearest")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("token position")
    rows = d["truncated"].tolist()
    axes[0].set_yticks(range(len(rows)), [f"{i} (truncated)" if t else str(i) for i, t in enumerate(rows)],
                       fontsize=8)
    for tick, t in zip(axes[0].get_yticklabels(), rows):
        tick.set_color("C3" if t else "k")
    axes[0].set_ylabel("completion")
    fig.colorbar(im, ax=list(axes), label="token weight in the loss")
    return fig
