"""Widgets and plots for notebooks 06-10: length bias (Dr. GRPO), DAPO's parts, GSPO's sequence ratio,
2-GRPO's pairwise form and SAPO's soft gate.

Every widget comes in three layers:

* a **pure function** that computes the arrays that are drawn (a ``dict`` of tensors / floats; unit tested
  in ``tests/test_viz_variants.py`` without a display),
* a **plotting function** (matplotlib) that draws such a dict and returns the figure,
* a thin **ipywidgets wrapper** (``*_widget``) that ties sliders to the two; it can be constructed without
  a browser and its ``.result`` holds the last computed dict.

Notebooks: ``05_dr_grpo`` (token weight against length, the length-drift simulation), ``06_dapo``
(clip-higher, Eq. 13, zero-gradient groups and dynamic sampling, overlong filtering), ``07_gspo`` (token
against sequence ratios, clipped fractions, one noisy long sequence), ``08_two_grpo`` (pair advantages,
pairwise gradient weights, budget), ``09_sapo`` (soft gate against hard clip).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

from ..advantages import group_advantages
from ..aggregation import token_weights
from ..dynamic_sampling import informative_fraction
from ..losses import policy_loss
from ..objectives import clipped_surrogate, sapo_surrogate
from ..pairwise import pair_advantage
from ..shaping import soft_overlong_penalty, truncation_mask
from ..variants import get_variant

__all__ = [
    # 05
    "LENGTH_VARIANTS", "length_weight_curves", "plot_length_weights", "length_weight_widget",
    "length_drift", "plot_length_drift",
    # 06
    "clip_higher_curves", "plot_clip_higher", "clip_higher_widget", "reachable_probability",
    "overlong_penalty_curves", "plot_overlong_penalty", "overlong_widget",
    "zero_gradient_grid", "plot_zero_gradient_grid", "overlong_filter_effect", "plot_overlong_filter",
    # 07
    "gspo_batch", "plot_gspo_ratios", "gspo_widget", "noisy_sequence_gradients", "plot_noisy_sequence",
    # 08
    "pair_advantage_table", "pair_gradient_weights", "plot_pair_gradient_weights", "pair_widget",
    # 09
    "chapter_sapo_loss", "sapo_curves", "plot_sapo", "sapo_widget",
    # every notebook's last cell
    "COMPARE_KEYS", "comparison_configs", "run_comparison", "comparison_summary", "plot_comparison",
]


# --------------------------------------------------------------------------------------------------
# shared plumbing
# --------------------------------------------------------------------------------------------------

def _plt():
    import matplotlib.pyplot as plt  # imported lazily: the package's tensor code never needs it

    return plt


def _interactive(draw, compute, **controls):
    """``ipywidgets.interactive`` around ``draw(compute(**kw))``; the widget's ``.result`` is the dict."""
    import ipywidgets as widgets

    plt = _plt()

    def _update(**kw):
        data = compute(**kw)
        fig = draw(data)
        plt.show()  # inline backend: displays into the widget's output; Agg: a no-op
        plt.close(fig)
        return data

    return widgets.interactive(_update, **controls)


def _int_slider(value, lo, hi, step=1, desc=""):
    import ipywidgets as widgets

    return widgets.IntSlider(value=value, min=lo, max=hi, step=step, description=desc, continuous_update=False,
                             style={"description_width": "initial"})


def _float_slider(value, lo, hi, step, desc="", fmt=".2f"):
    import ipywidgets as widgets

    return widgets.FloatSlider(value=value, min=lo, max=hi, step=step, description=desc, continuous_update=False,
                               style={"description_width": "initial"},
                               readout_format=fmt)


def _grad_1d(fn, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Value and elementwise derivative of ``fn`` (pointwise in ``x``), by autograd in float64."""
    x = x.detach().to(torch.float64).requires_grad_(True)
    y = fn(x)
    (g,) = torch.autograd.grad(y.sum(), x)
    return y.detach(), g


# ==================================================================================================
# 05 — Dr. GRPO and length bias
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
    :func:`grpo_lessons.aggregation.token_weights` (d loss / d l_{0,t}) under each variant's aggregation.
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
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
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


def length_drift(
    variant: str = "grpo",
    *,
    steps: int = 100,
    prompts: int = 16,
    group_size: int = 8,
    pass_rate: float = 0.5,
    init_length: float = 16.0,
    max_len: int = 64,
    lr: float = 0.03,
    seed: int = 0,
) -> dict[str, Any]:
    """A toy policy over lengths trained with ``policy_loss``: do wrong answers grow longer?

    Each completion is right with fixed probability ``pass_rate`` (reward 1) or wrong (reward 0); then it
    emits tokens, stopping after each with probability ``q_k = sigmoid(phi_k)`` — one learnable stop logit
    for right (``k = 1``) and one for wrong (``k = 0``) answers — up to ``max_len`` (no stop: truncated).
    The per-token log-probs are ``log(1 - q_k)`` ("continue") and ``log q_k`` ("stop"), so a completion's
    log-prob is the sum over its tokens and the variant's aggregation weighs them as it would weigh an LLM's.

    On-policy steps with Adam.  Since ``E[grad log pi(o)] = 0``, a loss whose weight does not depend on
    ``|o|`` (Dr. GRPO) has no drift in expectation; GRPO's ``1/|o|`` makes ``E[(1/|o|) grad log pi] != 0``:
    negative advantages push the wrong answers' stop probability down (longer), positive ones push the
    right answers' up (shorter).  Returns per-step ``expected_length_wrong / _right (steps+1,)`` (the
    analytic mean of the truncated geometric), ``sampled_length_wrong / _right (steps,)`` and the settings.
    """
    v = get_variant(variant)
    g = torch.Generator().manual_seed(int(seed))
    q0 = 1.0 / float(init_length)
    phi = torch.full((2,), math.log(q0 / (1 - q0)), dtype=torch.float64, requires_grad=True)  # [wrong, right]
    opt = torch.optim.Adam([phi], lr=lr)
    B, T = prompts * group_size, int(max_len)
    pos = torch.arange(T)

    def expected_len(p):
        q = torch.sigmoid(p)
        return (1 - (1 - q) ** T) / q  # E[min(Geometric(q), T)]

    exp_w, exp_r = [float(expected_len(phi.detach())[0])], [float(expected_len(phi.detach())[1])]
    samp_w, samp_r, rew = [], [], []
    for _ in range(int(steps)):
        right = (torch.rand(B, generator=g) < pass_rate).long()  # (B,) 1 = right answer
        q = torch.sigmoid(phi.detach())[right]  # (B,) stop probability of each completion's mode
        stops = torch.rand(B, T, generator=g, dtype=torch.float64) < q[:, None]  # (B, T) would stop here
        first = torch.where(stops.any(-1), stops.double().argmax(-1), torch.full((B,), T))  # (B,)
        truncated = first >= T
        length = torch.where(truncated, torch.full((B,), T), first + 1)  # (B,)
        mask = (pos[None, :] < length[:, None]).double()  # (B, T)
        is_stop = (pos[None, :] == (length - 1)[:, None]) & ~truncated[:, None]  # (B, T) the EOS token
        ph = phi[right][:, None]  # (B, 1) with grad
        logp = torch.where(is_stop, F.logsigmoid(ph), F.logsigmoid(-ph))  # (B, T) log pi of each token
        rewards = right.double()
        adv = group_advantages(rewards, group_size, scale=v.advantage_scale)  # the variant's advantages
        out = policy_loss(logp, logp.detach(), adv, mask, variant=v, max_completion_length=T)
        opt.zero_grad()
        out.loss.backward()
        opt.step()
        lw, lr_ = length[right == 0].double(), length[right == 1].double()
        samp_w.append(float(lw.mean()) if lw.numel() else float("nan"))
        samp_r.append(float(lr_.mean()) if lr_.numel() else float("nan"))
        rew.append(float(rewards.mean()))
        e = expected_len(phi.detach())
        exp_w.append(float(e[0]))
        exp_r.append(float(e[1]))
    t64 = lambda x: torch.tensor(x, dtype=torch.float64)  # noqa: E731
    return {"variant": v.name, "expected_length_wrong": t64(exp_w), "expected_length_right": t64(exp_r),
            "sampled_length_wrong": t64(samp_w), "sampled_length_right": t64(samp_r), "reward_mean": t64(rew),
            "max_len": T, "steps": int(steps), "seed": int(seed)}


def plot_length_drift(runs: Sequence[dict[str, Any]]):
    """One panel per run: expected length of wrong (red) and right (green) answers against the step."""
    plt = _plt()
    fig, axes = plt.subplots(1, len(runs), figsize=(4.2 * len(runs), 3.3), sharey=True, squeeze=False)
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
    axes[0, 0].legend(fontsize=7, loc="center left")
    fig.tight_layout()
    return fig


# ==================================================================================================
# 06 — DAPO
# ==================================================================================================

def clip_higher_curves(eps_low: float = 0.2, eps_high: float = 0.28, sign: float = 1.0, *,
                       ratio_min: float = 0.4, ratio_max: float = 1.8, n: int = 561) -> dict[str, Any]:
    """Objective ``min(r A, clip(r, 1-eps_low, 1+eps_high) A)`` and ``d/dr`` for ``A = sign``, DAPO vs symmetric.

    Returns ``ratio (n,)``, ``objective``, ``gradient`` (DAPO's decoupled range) and ``objective_sym``,
    ``gradient_sym`` (GRPO's symmetric ``eps_low``), the bounds, and ``extra_room``: the ratio interval that
    keeps its gradient under DAPO but not under the symmetric clip (empty for ``A < 0``).
    """
    if sign == 0:
        raise ValueError("sign must be +1 or -1 (A = 0 has no gradient at all)")
    a = 1.0 if sign > 0 else -1.0
    r = torch.linspace(ratio_min, ratio_max, n, dtype=torch.float64)
    adv = torch.full_like(r, a)
    obj, grad = _grad_1d(lambda x: -clipped_surrogate(x, adv, epsilon=eps_low, epsilon_high=eps_high).per_token_loss, r)
    obj_s, grad_s = _grad_1d(lambda x: -clipped_surrogate(x, adv, epsilon=eps_low).per_token_loss, r)
    room = (grad != 0) & (grad_s == 0)
    return {"ratio": r, "objective": obj, "gradient": grad, "objective_sym": obj_s, "gradient_sym": grad_s,
            "lower": 1.0 - eps_low, "upper": 1.0 + eps_high, "upper_sym": 1.0 + eps_low, "adv": a,
            "extra_room": (float(r[room].min()), float(r[room].max())) if bool(room.any()) else None}


def reachable_probability(p_old, eps_high: float) -> torch.Tensor:
    """Highest probability a token can reach before an ``A > 0`` clip stops it: ``min(1, p_old (1 + eps_high))``.

    DAPO Sec. 3.1's argument for clip-higher: a token at ``p_old = 0.01`` may rise only to 0.012 with
    ``eps = 0.2`` (0.0128 with 0.28), one at 0.9 to 1 — the clip throttles exploration of unlikely tokens.
    """
    p = torch.as_tensor(p_old, dtype=torch.float64)
    return torch.clamp(p * (1.0 + eps_high), max=1.0)


def plot_clip_higher(d: dict[str, Any]):
    """Objective (left) and gradient (right) against the ratio, DAPO's range against the symmetric one."""
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.4), sharex=True)
    r = d["ratio"].tolist()
    for ax, key in zip(axes, ("objective", "gradient")):
        ax.plot(r, d[f"{key}_sym"].tolist(), color="0.4", lw=2, ls="--", label=f"symmetric [{d['lower']:.2f}, "
                f"{d['upper_sym']:.2f}]")
        ax.plot(r, d[key].tolist(), color="C0" if d["adv"] > 0 else "C3", lw=2,
                label=f"DAPO [{d['lower']:.2f}, {d['upper']:.2f}]")
        if d["extra_room"] is not None:
            ax.axvspan(*d["extra_room"], color="C0", alpha=0.12, label="gradient kept by clip-higher")
        ax.axvline(1.0, color="k", lw=0.4)
        ax.set_xlabel("ratio r")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel(f"objective, A = {d['adv']:+g}")
    axes[1].set_ylabel("d objective / d r")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    return fig


def clip_higher_widget():
    """Sliders ``eps_low``, ``eps_high`` and the sign of A over :func:`clip_higher_curves`."""
    import ipywidgets as widgets

    def compute(eps_low, eps_high, sign):
        return clip_higher_curves(eps_low, eps_high, 1.0 if sign == "A > 0" else -1.0)

    return _interactive(plot_clip_higher, compute,
                        eps_low=_float_slider(0.2, 0.0, 0.5, 0.01, "eps_low"),
                        eps_high=_float_slider(0.28, 0.0, 0.6, 0.01, "eps_high"),
                        sign=widgets.ToggleButtons(options=["A > 0", "A < 0"], value="A > 0", description="sign",
                                                   style={"description_width": "initial", "button_width": "5em"}))


def overlong_penalty_curves(max_len: int = 20480, cache_len: int = 4096, factor: float = 1.0, *,
                            n: int = 1001, beyond: float = 1.25) -> dict[str, Any]:
    """DAPO Eq. (13) against the chapter's formula, on lengths ``0 .. beyond * max_len``.

    ``paper``: :func:`grpo_lessons.shaping.soft_overlong_penalty` (0 up to ``max_len - cache_len``, linear to
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
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 3.4))
    x = d["lengths"].tolist()
    ax.plot(x, d["paper"].tolist(), color="C0", lw=2.5, label="DAPO Eq. 13 (paper)")
    ax.plot(x, d["chapter"].tolist(), color="C3", lw=1.5, ls="--", label="the chapter's formula")
    ax.axvline(d["max_len"] - d["cache_len"], color="C0", ls=":", lw=1)
    ax.axvline(d["max_len"], color="k", ls=":", lw=1)
    ax.axvspan(d["max_len"] - d["cache_len"], d["max_len"], color="C0", alpha=0.08, label="the buffer L_cache")
    ax.set_xlabel("completion length |y| (tokens)")
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
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.4), sharex=True)
    x = d["pass_rates"].tolist()
    for k, G in enumerate(d["group_sizes"]):
        axes[0].plot(x, d["zero_share"][k].tolist(), lw=2, label=f"G = {G}")
        e = d["extra_per_useful"][k]
        ok = torch.isfinite(e)
        axes[1].plot(d["pass_rates"][ok].tolist(), e[ok].tolist(), lw=2, label=f"G = {G}")
    axes[0].set_ylabel("share of groups with no gradient")
    axes[1].set_ylabel("extra groups sampled per kept group")
    axes[1].set_yscale("log")
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
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(10, 2.8), sharey=True)
    vmax = float(torch.maximum(d["weights_before"].max(), d["weights_after"].max()))
    for ax, key, title in ((axes[0], "weights_before", "before filtering"),
                           (axes[1], "weights_after", "after: truncated completions masked")):
        im = ax.imshow(d[key].numpy(), aspect="auto", cmap="viridis", vmin=0, vmax=vmax, interpolation="nearest")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("token position")
        for i, t in enumerate(d["truncated"].tolist()):
            if t:
                ax.text(-0.5, i, "cut", color="C3", ha="right", va="center", fontsize=7)
    axes[0].set_ylabel("completion")
    fig.colorbar(im, ax=list(axes), label="token weight in the loss")
    return fig


# ==================================================================================================
# 07 — GSPO
# ==================================================================================================

def gspo_batch(lengths: Sequence[int] = (16, 32, 64, 128, 256) * 4, *, token_noise: float = 0.05,
               seed: int = 0, grpo_range: tuple[float, float] = (0.2, 0.2),
               gspo_range: tuple[float, float] = (3e-4, 4e-4)) -> dict[str, Any]:
    """Token ratios against GSPO's sequence ratio on one batch, and how often each range clips.

    Token log-ratios are ``N(0, token_noise**2)`` (an off-policy step); the sequence log-ratio is their
    masked mean, so its spread is ``token_noise / sqrt(|o|)``.  Advantages alternate ``+1, -1`` (so with the
    default lengths every length has both signs) and both clip sides act.  Returns ``log_ratio (B, T)``,
    ``mask``, ``seq_log_ratio (B,)``, ``adv (B,)`` and the
    clipped shares (sign-aware, as TRL counts them): ``token_clip_grpo_range``, ``token_clip_gspo_range``
    (token ratios against each range, share of tokens), ``seq_clip_gspo_range`` (sequences).
    """
    g = torch.Generator().manual_seed(int(seed))
    lens = torch.as_tensor(list(lengths))
    B, T = lens.numel(), int(lens.max())
    mask = (torch.arange(T)[None, :] < lens[:, None]).double()  # (B, T)
    log_r = token_noise * torch.randn(B, T, generator=g, dtype=torch.float64) * mask  # (B, T)
    seq = (log_r * mask).sum(-1) / mask.sum(-1)  # (B,)
    adv = torch.tensor([1.0 if i % 2 == 0 else -1.0 for i in range(B)], dtype=torch.float64)

    def clipped(log_ratio, rng):
        r = torch.exp(log_ratio)
        a = adv.view(-1, *([1] * (r.dim() - 1))).expand_as(r)
        return ((r > 1 + rng[1]) & (a > 0)) | ((r < 1 - rng[0]) & (a < 0))

    tok_grpo = clipped(log_r, grpo_range)[mask > 0].double().mean()
    tok_gspo = clipped(log_r, gspo_range)[mask > 0].double().mean()
    seq_gspo = clipped(seq, gspo_range).double()
    return {"lengths": lens, "log_ratio": log_r, "mask": mask, "seq_log_ratio": seq, "adv": adv,
            "token_clip_grpo_range": float(tok_grpo), "token_clip_gspo_range": float(tok_gspo),
            "seq_clip_gspo_range": float(seq_gspo.mean()), "seq_clipped": seq_gspo.bool(),
            "seq_spread_expected": token_noise / lens.double().sqrt(), "token_noise": token_noise,
            "grpo_range": grpo_range, "gspo_range": gspo_range}


def plot_gspo_ratios(d: dict[str, Any]):
    """Token ratios of each completion (dots) against its sequence ratio (bar), with both clip ranges."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(10, 3.8))
    for i in range(d["lengths"].numel()):
        lr = d["log_ratio"][i][d["mask"][i] > 0]
        jitter = torch.linspace(-0.3, 0.3, lr.numel())
        ax.scatter((i + jitter).tolist(), torch.exp(lr).tolist(), s=4, alpha=0.35, color="C0" if d["adv"][i] > 0
                   else "C3")
        s = math.exp(float(d["seq_log_ratio"][i]))
        ax.plot([i - 0.4, i + 0.4], [s, s], color="k", lw=2.5)
    lo, hi = d["grpo_range"]
    ax.axhspan(1 - lo, 1 + hi, color="0.9", zorder=-2, label=f"GRPO range 1 ± {lo:g}")
    glo, ghi = d["gspo_range"]
    ax.axhspan(1 - glo, 1 + ghi, color="C2", alpha=0.6, zorder=-1, label=f"GSPO range [1-{glo:g}, 1+{ghi:g}]")
    ax.set_xticks(range(d["lengths"].numel()), [f"{int(n)}\n{a:+.0f}" for n, a in
                                                zip(d["lengths"].tolist(), d["adv"].tolist())], fontsize=6)
    ax.set_xlabel("completion: length |o| and sign of A (blue A > 0, red A < 0)", fontsize=8)
    ax.set_ylabel("ratio")
    ax.set_title(f"token ratios (dots) vs sequence ratio s_i (bar); clipped: tokens at GRPO's range "
                 f"{d['token_clip_grpo_range']:.1%}, tokens at GSPO's {d['token_clip_gspo_range']:.1%}, "
                 f"sequences at GSPO's {d['seq_clip_gspo_range']:.0%}", fontsize=8)
    ax.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    return fig


def gspo_widget():
    """Sliders: token noise (the log-ratio std) and the seed, over :func:`gspo_batch`."""
    def compute(token_noise, seed):
        return gspo_batch(token_noise=token_noise, seed=seed)

    return _interactive(plot_gspo_ratios, compute,
                        token_noise=_float_slider(0.05, 0.001, 0.3, 0.001, "noise", ".3f"),
                        seed=_int_slider(0, 0, 20, 1, "seed"))


def noisy_sequence_gradients(*, long_length: int = 200, short_length: int = 20, n_short: int = 7,
                             n_outliers: int = 3, outlier_log_ratio: float = 3.0, base_noise: float = 1e-4,
                             seed: int = 0) -> dict[str, Any]:
    """One long completion with a few wildly off-policy tokens (``log r = outlier_log_ratio``) and ``A = -1``.

    Per-token gradient weights ``|d loss / d logp_t|`` from ``policy_loss`` under ``grpo`` (token ratios) and
    ``gspo`` (the sequence ratio).  For ``A < 0`` GRPO's min never clips ``r > 1 + eps``, so each outlier token
    is weighted by ``r = e^3 ~ 20``; GSPO weights every token of the sequence by ``s_i / |o_i|`` and ``s_i`` is a
    geometric mean, so the outliers move it only by ``exp(n_outliers * 3 / |o|)``.  Returns ``grad[v] (B, T)``,
    ``outlier_share[v]`` (share of the long sequence's gradient carried by the outlier tokens),
    ``max_over_median[v]`` (largest token weight over the median one in the long sequence), ``s_long``.
    """
    g = torch.Generator().manual_seed(int(seed))
    B, T = 1 + n_short, long_length
    lens = torch.tensor([long_length] + [short_length] * n_short)
    mask = (torch.arange(T)[None, :] < lens[:, None]).double()
    logp = -torch.rand(B, T, generator=g, dtype=torch.float64) * 2 - 0.1
    log_r = base_noise * torch.randn(B, T, generator=g, dtype=torch.float64)
    where = torch.randperm(long_length, generator=g)[:n_outliers]
    log_r[0, where] = outlier_log_ratio
    old = logp - log_r
    adv = torch.tensor([-1.0] + [1.0 if i % 2 == 0 else -1.0 for i in range(n_short)], dtype=torch.float64)
    out: dict[str, Any] = {"grad": {}, "outlier_share": {}, "max_over_median": {}, "clip_frac": {}}
    outlier_mask = torch.zeros(T, dtype=torch.bool)
    outlier_mask[where] = True
    for v in ("grpo", "gspo"):
        x = logp.clone().requires_grad_(True)
        res = policy_loss(x, old, adv, mask, variant=v)
        res.loss.backward()
        gr = x.grad.abs() * mask
        long_row = gr[0, :long_length]
        out["grad"][v] = gr
        out["outlier_share"][v] = float(long_row[outlier_mask[:long_length]].sum() / long_row.sum())
        out["max_over_median"][v] = float(long_row.max() / long_row.median())
        out["clip_frac"][v] = res.clip_frac
    s_long = math.exp(float((log_r[0] * mask[0]).sum() / long_length))
    out.update({"lengths": lens, "outliers": where, "outlier_log_ratio": outlier_log_ratio, "s_long": s_long,
                "adv": adv, "mask": mask})
    return out


def plot_noisy_sequence(d: dict[str, Any]):
    """The long completion's per-token gradient weights under GRPO and GSPO (log scale)."""
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.0), sharey=True)
    L = int(d["lengths"][0])
    for ax, v in zip(axes, ("grpo", "gspo")):
        w = d["grad"][v][0, :L]
        ax.bar(range(L), w.tolist(), width=1.0, color="C0")
        ax.bar(d["outliers"].tolist(), w[d["outliers"]].tolist(), width=2.0, color="C3", label="outlier tokens")
        ax.set_title(f"{v}: outlier tokens carry {d['outlier_share'][v]:.0%} of this completion's gradient",
                     fontsize=9)
        ax.set_xlabel("token position in the long completion")
        ax.set_yscale("log")
    axes[0].set_ylabel("|d loss / d log pi_t|")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    return fig


# ==================================================================================================
# 08 — 2-GRPO
# ==================================================================================================

def pair_advantage_table(gaps: Sequence[float] = (0.0, 0.01, 0.5, 1.0, 10.0)) -> dict[str, Any]:
    """``c`` for pairs with these reward gaps: via ``group_advantages`` (TRL's Bessel std) and the paper's std."""
    rows = []
    for gap in gaps:
        adv = group_advantages(torch.tensor([float(gap), 0.0], dtype=torch.float64), 2)
        adv_pop = group_advantages(torch.tensor([float(gap), 0.0], dtype=torch.float64), 2, unbiased_std=False)
        rows.append((float(gap), float(adv[0]), float(adv[1]), float(adv_pop[0]), float(pair_advantage(gap))))
    return {"columns": ("gap", "A_winner", "A_loser", "A_winner_population_std", "c"), "rows": rows}


def pair_gradient_weights(*, length: int = 10, epsilon: float = 0.2, beta: float | None = None,
                          deltas: torch.Tensor | None = None) -> dict[str, Any]:
    """Weight on ``grad log pi(o+_t)`` as the winner's per-token log-ratio ``delta`` moves (loser on policy).

    2-GRPO (``pairwise_grpo_loss``, one pair, ``|o+| = |o-| = length``): ``(c / 2) e^delta / length`` while
    ``e^delta <= 1 + eps``, then exactly 0.  The chapter's ``-log sigmoid(beta * margin)`` with
    ``margin = length * delta``: ``beta * sigmoid(-beta * length * delta)``, never 0.  ``beta`` defaults to
    ``c / length``, which makes the two agree at ``delta = 0``.  Returns ``delta (n,)``, ``two_grpo (n,)``,
    ``chapter (n,)``, ``c``, ``beta``.
    """
    from ..pairwise import chapter_pair_loss, pairwise_grpo_loss

    c = float(pair_advantage(1.0))
    beta = c / length if beta is None else beta
    d = torch.linspace(-0.6, 0.6, 241, dtype=torch.float64) if deltas is None else deltas.double()
    mask = torch.ones(2, length, dtype=torch.float64)
    rewards = torch.tensor([1.0, 0.0], dtype=torch.float64)
    two, chap = [], []
    for delta in d.tolist():
        old = torch.zeros(2, length, dtype=torch.float64)
        for fn, acc in ((lambda x: pairwise_grpo_loss(x, old, mask, rewards, epsilon=epsilon).loss, two),
                        (lambda x: chapter_pair_loss(x, old, mask, rewards, beta=beta), chap)):
            x = torch.zeros(2, length, dtype=torch.float64)
            x[0] = delta
            x.requires_grad_(True)
            fn(x).backward()
            acc.append(float(-x.grad[0, 0]))  # the push up on a winner token
    return {"delta": d, "two_grpo": torch.tensor(two, dtype=torch.float64),
            "chapter": torch.tensor(chap, dtype=torch.float64), "c": c, "beta": beta, "length": length,
            "epsilon": epsilon}


def plot_pair_gradient_weights(d: dict[str, Any]):
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 3.4))
    x = d["delta"].tolist()
    ax.plot(x, d["two_grpo"].tolist(), color="C0", lw=2.5, label="2-GRPO (clipped, constant c)")
    ax.plot(x, d["chapter"].tolist(), color="C3", lw=1.5, ls="--",
            label=f"chapter: -log σ(β·margin), β = {d['beta']:.3g}")
    ax.axvline(math.log(1 + d["epsilon"]), color="k", ls=":", lw=0.8)
    ax.axvline(0.0, color="k", lw=0.4)
    ax.set_xlabel("winner's per-token log-ratio  log π/π_old  (loser on policy)")
    ax.set_ylabel("push on log π(o⁺_t)")
    ax.set_title(f"|o| = {d['length']}: weight of one winner token in the gradient", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def pair_widget():
    """Sliders: completion length, epsilon and beta over :func:`pair_gradient_weights`."""
    def compute(length, epsilon, beta):
        return pair_gradient_weights(length=length, epsilon=epsilon, beta=beta)

    return _interactive(plot_pair_gradient_weights, compute,
                        length=_int_slider(10, 1, 64, 1, "|o|"),
                        epsilon=_float_slider(0.2, 0.05, 0.5, 0.01, "epsilon"),
                        beta=_float_slider(0.07, 0.01, 1.0, 0.01, "beta", ".3f"))


# ==================================================================================================
# 09 — SAPO
# ==================================================================================================

def chapter_sapo_loss(ratio: torch.Tensor, adv: torch.Tensor, tau_pos: float, tau_neg: float) -> torch.Tensor:
    """The chapter's SAPO *loss*: ``-A sigma((r-1)/tau+) r`` for ``A > 0``, ``-A sigma((1-r)/tau-) r`` otherwise."""
    pos = torch.sigmoid((ratio - 1.0) / tau_pos)
    neg = torch.sigmoid((1.0 - ratio) / tau_neg)
    return -adv * torch.where(adv > 0, pos, neg) * ratio


def sapo_curves(tau_pos: float = 1.0, tau_neg: float = 1.05, epsilon: float = 0.2, *, ratio_min: float = 0.0,
                ratio_max: float = 3.0, n: int = 601) -> dict[str, Any]:
    """SAPO's soft gate against the hard clip and the chapter's formula, for ``A = +1`` and ``A = -1``.

    For each sign (keys ``"pos"``, ``"neg"``): ``objective`` ``f(r) A`` and ``gradient`` d/dr (SAPO,
    :func:`grpo_lessons.objectives.sapo_surrogate`); ``clip_objective`` / ``clip_gradient`` (the GRPO clip with
    ``epsilon``); ``chapter_objective`` / ``chapter_gradient``; and ``weight`` = the factor on
    ``A grad log pi`` (``r * d f / d r``; ``r`` for unclipped PPO, 1 for REINFORCE).  Also the values at
    ``r = 1``: ``at_one[sign] = (sapo_grad, clip_grad, chapter_grad)``.
    """
    r = torch.linspace(ratio_min, ratio_max, n, dtype=torch.float64)
    out: dict[str, Any] = {"ratio": r, "tau_pos": tau_pos, "tau_neg": tau_neg, "epsilon": epsilon, "at_one": {}}
    one = torch.ones(1, dtype=torch.float64)
    for key, a in (("pos", 1.0), ("neg", -1.0)):
        fns = {  # objectives (to maximise) as functions of the ratio, for A = a
            "sapo": lambda x: -sapo_surrogate(x, torch.full_like(x, a), tau_pos=tau_pos,
                                              tau_neg=tau_neg).per_token_loss,
            "clip": lambda x: -clipped_surrogate(x, torch.full_like(x, a), epsilon=epsilon).per_token_loss,
            "chapter": lambda x: -chapter_sapo_loss(x, torch.full_like(x, a), tau_pos, tau_neg),
        }
        (so, sg), (co, cg), (ho, hg) = (_grad_1d(fns[k], r) for k in ("sapo", "clip", "chapter"))
        out[key] = {"adv": a, "objective": so, "gradient": sg, "clip_objective": co, "clip_gradient": cg,
                    "chapter_objective": ho, "chapter_gradient": hg, "weight": r * sg * a}
        out["at_one"][key] = tuple(float(_grad_1d(fns[k], one)[1]) for k in ("sapo", "clip", "chapter"))
    return out


def plot_sapo(d: dict[str, Any]):
    """2 x 2: objective (top) and d/dr (bottom) for A > 0 (left) and A < 0 (right)."""
    plt = _plt()
    fig, axes = plt.subplots(2, 2, figsize=(10, 5.4), sharex=True)
    r = d["ratio"].tolist()
    for col, key in enumerate(("pos", "neg")):
        s = d[key]
        tau = d["tau_pos"] if key == "pos" else d["tau_neg"]
        for row, (a, b, c) in enumerate((("objective", "clip_objective", "chapter_objective"),
                                         ("gradient", "clip_gradient", "chapter_gradient"))):
            ax = axes[row, col]
            ax.plot(r, s[b].tolist(), color="0.5", lw=1.5, label=f"hard clip ε = {d['epsilon']:g}")
            ax.plot(r, s[a].tolist(), color="C0" if key == "pos" else "C3", lw=2.5, label=f"SAPO τ = {tau:g}")
            ax.plot(r, s[c].tolist(), color="C1", lw=1.2, ls="--", label="chapter's formula")
            ax.axvline(1.0, color="k", lw=0.4)
            ax.grid(alpha=0.3)
        axes[0, col].set_title(f"A = {s['adv']:+g}", fontsize=10)
        axes[1, col].set_xlabel("ratio r")
    axes[0, 0].set_ylabel("objective")
    axes[1, 0].set_ylabel("d objective / d r")
    axes[0, 0].legend(fontsize=7)
    fig.tight_layout()
    return fig


def sapo_widget():
    """Sliders ``tau_pos``, ``tau_neg`` and the clip's ``epsilon`` over :func:`sapo_curves`."""
    def compute(tau_pos, tau_neg, epsilon):
        return sapo_curves(tau_pos, tau_neg, epsilon)

    return _interactive(plot_sapo, compute,
                        tau_pos=_float_slider(1.0, 0.1, 10.0, 0.05, "tau_pos"),
                        tau_neg=_float_slider(1.05, 0.1, 10.0, 0.05, "tau_neg"),
                        epsilon=_float_slider(0.2, 0.05, 0.5, 0.01, "epsilon"))


# ==================================================================================================
# every notebook's last cell, and benchmarks/compare_variants.py: the variant against plain GRPO
# ==================================================================================================

COMPARE_KEYS: tuple[str, ...] = ("reward_mean", "accuracy", "loss", "clip_frac", "grad_norm", "completion_len",
                                 "frac_zero_std_groups", "completions_sampled", "seconds")


def comparison_configs(variants: Sequence[str], *, group_size: int = 4, prompts_per_step: int = 4,
                       **config: Any) -> dict[str, dict[str, Any]]:
    """``TrainConfig`` fields per variant for a comparison at an equal rollout budget.

    Every variant gets the same ``config`` (model, task, steps, seed, lr, ``max_new_tokens``, beta ...), the same
    ``group_size`` and ``prompts_per_step`` — except ``2-grpo``, which gets ``G = 2`` and
    ``prompts_per_step * group_size / 2`` prompts: the same rollouts per step spread over more prompts
    (Wu et al. 2025, arXiv 2510.00977).  The registry's paper defaults (G = 16 for DAPO, beta = 0.04 for
    GRPO, ...) are deliberately *not* applied: the comparison changes the loss, not the budget.
    """
    out = {}
    for v in variants:
        fixed = get_variant(v).fixed_group_size  # unknown names fail here
        g, p = group_size, prompts_per_step
        if fixed is not None:  # 2-GRPO: its G, the same rollouts spread over more prompts
            if (group_size * prompts_per_step) % fixed:
                raise ValueError(f"{v} needs a multiple of {fixed} rollouts per step")
            g, p = fixed, group_size * prompts_per_step // fixed
        out[v] = {**config, "variant": v, "group_size": g, "prompts_per_step": p}
    return out


def run_comparison(variants: Sequence[str] = ("grpo", "dr_grpo"), *, model: str = "tiny-qwen2",
                   out_dir: str | None = None, model_obj=None, tokenizer=None, progress: bool = False,
                   trainer_kwargs: dict[str, Any] | None = None, keep_eval_rows: bool = False,
                   **config: Any) -> dict[str, list[dict]]:
    """Train each variant from the same initial weights with :func:`grpo_lessons.trainer.train`; returns histories.

    ``config`` goes to :func:`comparison_configs` (then ``TrainConfig``); the model is loaded once
    (``model_obj``/``tokenizer`` to pass one in) and deep-copied for every run, so all runs start from the same
    weights and, with the same ``seed``, see the same prompts.  ``trainer_kwargs`` go to ``train`` (e.g.
    ``reward_funcs=``).  Returns ``{variant: history}``; the step-0 evaluation row (if any) is dropped unless
    ``keep_eval_rows``.
    """
    import copy
    import tempfile

    from ..trainer import TrainConfig, train  # the top layer: imported only when a comparison runs

    if model_obj is None:
        from ..models import resolve_model

        model_obj, tokenizer = resolve_model(model)
    elif tokenizer is None:
        raise ValueError("model_obj was passed without its tokenizer")
    root = out_dir or tempfile.mkdtemp(prefix="grpo-compare-")
    histories = {}
    for v, fields in comparison_configs(variants, model=model, **config).items():
        fields = {**fields, "out": f"{root}/{v}"}
        res = train(TrainConfig(**fields), progress=progress, model=copy.deepcopy(model_obj), tokenizer=tokenizer,
                    **(trainer_kwargs or {}))
        histories[v] = [r for r in res.history if keep_eval_rows or r.get("reward_mean") is not None]
    return histories


def comparison_summary(histories: dict[str, list[dict]], keys: Sequence[str] = COMPARE_KEYS) -> dict[str, dict]:
    """Per variant: the mean of each metric over the training steps (``None`` where never logged), ``steps``, and
    ``accuracy_first`` / ``accuracy_last`` (the first and last held-out evaluations, when there are any)."""
    out = {}
    for v, hist in histories.items():
        steps = [r for r in hist if r.get("reward_mean") is not None]
        row: dict[str, Any] = {"steps": len(steps)}
        for k in keys:
            vals = [float(r[k]) for r in steps if r.get(k) is not None and not math.isnan(float(r[k]))]
            row[k] = sum(vals) / len(vals) if vals else None
        evals = [r for r in hist if r.get("accuracy") is not None]
        row["accuracy_first"] = float(evals[0]["accuracy"]) if evals else None
        row["accuracy_last"] = float(evals[-1]["accuracy"]) if evals else None
        out[v] = row
    return out


def plot_comparison(histories: dict[str, list[dict]], keys: Sequence[str] = ("reward_mean", "clip_frac",
                                                                             "completion_len")):
    """One panel per metric, one line per variant, against the step."""
    plt = _plt()
    fig, axes = plt.subplots(1, len(keys), figsize=(4 * len(keys), 3.0), squeeze=False)
    for ax, k in zip(axes[0], keys):
        for v, hist in histories.items():
            pts = [(r["step"], float(r[k])) for r in hist if r.get(k) is not None]
            if pts:
                ax.plot(*zip(*pts), marker="o", ms=3, lw=1.5, label=v)
        ax.set_title(k, fontsize=10)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    axes[0, 0].legend(fontsize=8)
    fig.tight_layout()
    return fig
