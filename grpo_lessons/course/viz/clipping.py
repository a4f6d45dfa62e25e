"""Widgets and plots on how far the policy may move: the clip region, KL estimators, clip-higher, GSPO's
sequence ratio and SAPO's soft gate.

Notebooks: ``03_clipped_surrogate_and_kl`` (the clip region, k1/k2/k3), ``07_dapo`` (clip-higher),
``08_gspo`` (token against sequence ratios, one noisy long sequence) and ``10_sapo`` (soft gate
against the hard clip).

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

from grpo_lessons.core.kl import exact_kl, kl_estimate
from grpo_lessons.core.losses import policy_loss
from grpo_lessons.core.objectives import clipped_surrogate, sapo_surrogate
from ._common import _plt, _interactive, _int_slider, _float_slider, _grad_1d, _generator, _toggle

__all__ = [
    # 03
    "clip_curves", "plot_clip_region", "clip_widget",
    "KL_ESTIMATORS", "kl_estimators", "kl_sweep", "plot_kl_estimators", "kl_widget",
    # 07
    "clip_higher_curves", "plot_clip_higher", "clip_higher_widget", "reachable_probability",
    # 08
    "gspo_batch", "plot_gspo_ratios", "gspo_widget", "noisy_sequence_gradients", "plot_noisy_sequence",
    # 10
    "chapter_sapo_loss", "sapo_curves", "plot_sapo", "sapo_widget",
]


# ==================================================================================================
# 03 — the clipped surrogate and the KL anchor
# ==================================================================================================

def clip_curves(epsilon: float = 0.2, epsilon_high: float | None = None, adv: float = 1.0, *,
                ratio_min: float = 0.0, ratio_max: float = 2.0, n: int = 401) -> dict[str, Any]:
    """Per-token objective ``min(r A, clip(r, 1-eps, 1+eps_high) A)`` and its gradient in ``r``, against ``r``.

    Computed with :func:`grpo_lessons.core.objectives.clipped_surrogate` and autograd (float64).  Returns
    ``ratio (n,)``, ``objective (n,)``, ``gradient (n,)`` = d objective / d r, ``zero_grad (n,)`` bool, and the
    clip bounds ``lower``, ``upper``.
    """
    r = torch.linspace(ratio_min, ratio_max, n, dtype=torch.float64, requires_grad=True)  # (n,)
    a = torch.full_like(r, float(adv))  # (n,) same advantage on every point
    out = clipped_surrogate(r, a, epsilon=epsilon, epsilon_high=epsilon_high)
    out.per_token_loss.sum().backward()  # each point's loss depends on its own r only
    eh = epsilon if epsilon_high is None else epsilon_high
    grad = -r.grad  # objective = -loss
    return {"ratio": r.detach(), "objective": -out.per_token_loss.detach(), "gradient": grad,
            "zero_grad": grad == 0, "lower": 1.0 - epsilon, "upper": 1.0 + eh, "adv": float(adv),
            "epsilon": epsilon, "epsilon_high": eh}


def plot_clip_region(epsilon: float = 0.2, epsilon_high: float | None = None, adv_abs: float = 1.0):
    """2 x 2: objective (top) and gradient (bottom) against the ratio, for A > 0 (left) and A < 0 (right)."""
    plt = _plt()
    fig, axes = plt.subplots(2, 2, figsize=(7.8, 6.6), sharex=True)
    for col, sign in enumerate((+1, -1)):
        d = clip_curves(epsilon, epsilon_high, sign * adv_abs)
        r = d["ratio"].tolist()
        for row, key in enumerate(("objective", "gradient")):
            ax = axes[row, col]
            ax.plot(r, d[key].tolist(), color="C0" if sign > 0 else "C3", lw=2,
                    label="clipped objective min(ρ·A, clip(ρ)·A)" if key == "objective" else "its gradient")
            ax.plot(r, (d["ratio"] * d["adv"]).tolist() if key == "objective" else [d["adv"]] * len(r),
                    color="0.5", ls=":", lw=1, label="unclipped ρ·A" if key == "objective" else "REINFORCE: A")
            zero = d["zero_grad"]
            ax.fill_between(r, 0, 1, where=zero.tolist(), color="0.85", transform=ax.get_xaxis_transform(),
                            label="zero gradient")
            ax.axvline(d["lower"], color="k", ls="--", lw=0.7, label="clip bounds 1-ε, 1+ε_high")
            ax.axvline(d["upper"], color="k", ls="--", lw=0.7)
            ax.axvline(1.0, color="k", lw=0.4)
            ax.set_ylabel(key if key == "objective" else "d objective / d ρ")
            if row == 0:
                ax.set_title(f"A = {d['adv']:+g}: clip to [{d['lower']:.2f}, {d['upper']:.2f}]", fontsize=10)
            else:
                ax.set_xlabel("ratio ρ = π_θ / π_old")
            ax.legend(fontsize=8, loc=("upper left" if sign > 0 else "upper right") if row == 0 else "center left",
                      framealpha=0.9)
    fig.tight_layout()
    return fig


def clip_widget():
    """Sliders ``epsilon``, ``epsilon_high`` and ``adv_abs`` over :func:`plot_clip_region`."""
    def compute(epsilon, epsilon_high, adv_abs):
        return {"epsilon": epsilon, "epsilon_high": epsilon_high, "adv_abs": adv_abs,
                "pos": clip_curves(epsilon, epsilon_high, adv_abs), "neg": clip_curves(epsilon, epsilon_high, -adv_abs)}

    return _interactive(lambda d: plot_clip_region(d["epsilon"], d["epsilon_high"], d["adv_abs"]), compute,
                        epsilon=_float_slider(0.2, 0.0, 0.5, 0.01, "epsilon"),
                        epsilon_high=_float_slider(0.28, 0.0, 0.5, 0.01, "epsilon_high"),
                        adv_abs=_float_slider(1.0, 0.1, 2.0, 0.1, "adv_abs"))


KL_ESTIMATORS: tuple[str, ...] = ("k1", "k2", "k3", "k3_reversed")


def kl_estimators(vocab: int = 32, distance: float = 1.0, n_samples: int = 20000, *, seed: int = 0) -> dict[str, Any]:
    """Monte-Carlo means of k1, k2, k3 (and k3 with the ratio upside down) under ``pi_theta``, vs the exact KL.

    ``pi_theta`` and ``pi_ref`` are random categoricals over ``vocab`` tokens whose logits differ by
    ``distance * N(0, 1)``.  Tokens are drawn from ``pi_theta``; per-sample values come from
    :func:`grpo_lessons.kl_estimate` (``k3_reversed`` swaps its two arguments: ``r = pi_theta / pi_ref``, the
    bug).  Exact references: ``kl`` = KL(pi_theta || pi_ref), ``reverse_kl`` = KL(pi_ref || pi_theta),
    ``chi2`` = chi²(pi_theta || pi_ref); the reversed k3 has mean ``chi2 - kl``.
    """
    g = _generator(seed)
    pi_logits = torch.randn(vocab, generator=g, dtype=torch.float64)
    ref_logits = pi_logits + distance * torch.randn(vocab, generator=g, dtype=torch.float64)
    lp_all = torch.log_softmax(pi_logits, -1)
    lr_all = torch.log_softmax(ref_logits, -1)
    x = torch.multinomial(lp_all.exp(), n_samples, replacement=True, generator=g)  # (n,) tokens from pi_theta
    logp, ref_logp = lp_all[x], lr_all[x]  # (n,)
    samples = {k: kl_estimate(logp, ref_logp, k) for k in ("k1", "k2", "k3")}
    samples["k3_reversed"] = kl_estimate(ref_logp, logp, "k3")  # ratio pi_theta / pi_ref: wrong direction
    kl = float(exact_kl(pi_logits, ref_logits))
    chi2 = float((lp_all.exp() ** 2 / lr_all.exp()).sum() - 1)
    mean = torch.stack([samples[k].mean() for k in KL_ESTIMATORS])
    std = torch.stack([samples[k].std() for k in KL_ESTIMATORS])
    return {"vocab": vocab, "distance": distance, "n_samples": n_samples, "estimators": list(KL_ESTIMATORS),
            "kl": kl, "reverse_kl": float(exact_kl(ref_logits, pi_logits)), "chi2": chi2,
            "expected": torch.tensor([kl, float("nan"), kl, chi2 - kl], dtype=torch.float64),
            "mean": mean, "std": std, "sem": std / math.sqrt(n_samples),
            "frac_negative": torch.stack([(samples[k] < 0).double().mean() for k in KL_ESTIMATORS]),
            "samples": samples}


def kl_sweep(distances: Sequence[float] = (0.25, 0.5, 0.75, 1.0, 1.5, 2.0), *, vocab: int = 32,
             n_samples: int = 20000, seed: int = 0) -> dict[str, Any]:
    """:func:`kl_estimators` over a range of distances; ``kl (D,)``, ``mean (D, 4)``, ``std (D, 4)``."""
    # the same seed for every distance: the same direction of logit noise, scaled, so the KL grows with it
    ds = [kl_estimators(vocab, float(d), n_samples, seed=seed) for d in distances]
    return {"distances": torch.tensor([float(d) for d in distances], dtype=torch.float64),
            "kl": torch.tensor([d["kl"] for d in ds], dtype=torch.float64),
            "reverse_kl": torch.tensor([d["reverse_kl"] for d in ds], dtype=torch.float64),
            "mean": torch.stack([d["mean"] for d in ds]), "std": torch.stack([d["std"] for d in ds]),
            "estimators": list(KL_ESTIMATORS)}


def plot_kl_estimators(d: dict[str, Any], sweep: dict[str, Any] | None = None):
    """Left: each estimator as a function of ``log rho``, above the distribution of ``log rho`` under ``pi_theta``.

    The distribution has its own panel and density axis below the curves, sharing their x axis.  Right (with
    ``sweep``): Monte-Carlo mean of each estimator against the exact KL.
    """
    plt = _plt()
    fig = plt.figure(figsize=(7.8 if sweep is not None else 6.2, 4.8))
    grid = fig.add_gridspec(2, 2 if sweep is not None else 1, height_ratios=(3, 1), hspace=0.08,
                            **({"width_ratios": (1.2, 1)} if sweep is not None else {}))
    ax = fig.add_subplot(grid[0, 0])
    axh = fig.add_subplot(grid[1, 0], sharex=ax)
    log_rho = -d["samples"]["k1"]  # k1 = -log rho
    lo, hi = float(log_rho.min()), float(log_rho.max())
    x = torch.linspace(lo - 0.1, hi + 0.1, 200, dtype=torch.float64)
    curves = {"k1": -x, "k2": 0.5 * x**2, "k3": torch.expm1(x) - x, "k3_reversed": torch.expm1(-x) + x}
    for j, k in enumerate(d["estimators"]):
        ax.plot(x.tolist(), curves[k].tolist(), "--" if k == "k3_reversed" else "-", color=f"C{j}",
                label=f"{k}: MC mean {float(d['mean'][j]):.3f}")
    ax.axhline(d["kl"], color="k", ls=":", lw=1, label=f"exact KL = {d['kl']:.3f}")
    ax.axhline(0, color="k", lw=0.4)
    ax.set_ylim(-2, max(4.0, 2 * d["kl"]))
    ax.set_ylabel("per-token estimate")
    ax.tick_params(labelbottom=False)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=2 if sweep is not None else 3,
              frameon=False,
              title=f"vocab = {d['vocab']}, distance = {d['distance']:g}, n = {d['n_samples']}",
              title_fontsize=8)
    axh.hist(log_rho.tolist(), bins=40, color="0.6", density=True)
    axh.set_ylabel("density", fontsize=8)
    axh.set_xlabel("log κ = log π_ref(o) - log π_θ(o)\nbottom: its distribution under π_θ")
    axh.tick_params(labelsize=8)
    if sweep is not None:
        ax = fig.add_subplot(grid[:, 1])
        kl = sweep["kl"].tolist()
        ax.plot(kl, kl, color="k", lw=0.8, label="exact KL(pi_theta || pi_ref)")
        for j, k in enumerate(sweep["estimators"]):
            ax.plot(kl, sweep["mean"][:, j].tolist(), "o-" if k != "k3_reversed" else "s--", color=f"C{j}",
                    label=f"MC mean of {k}")
        ax.plot(kl, sweep["reverse_kl"].tolist(), ":", color="0.4", label="exact KL(pi_ref || pi_theta)")
        ax.set_xlabel("exact KL(pi_theta || pi_ref)")
        ax.set_ylabel("Monte-Carlo mean")
        ax.set_yscale("log")
        ax.set_xscale("log")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
    fig.subplots_adjust(left=0.1, right=0.98, top=0.74, bottom=0.15, wspace=0.3)
    return fig


def kl_widget():
    """Sliders ``distance``, ``n_samples`` and ``vocab`` over :func:`kl_estimators`."""
    return _interactive(plot_kl_estimators,
                        lambda distance, n_samples, vocab: kl_estimators(vocab, distance, n_samples),
                        distance=_float_slider(1.0, 0.05, 3.0, 0.05, "distance"),
                        n_samples=_int_slider(5000, 100, 50000, 100, "n_samples"),
                        vocab=_int_slider(32, 2, 256, 1, "vocab"))


# ==================================================================================================
# 07 — DAPO's clip-higher
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
    fig, axes = plt.subplots(1, 2, figsize=(7.8, 3.4), sharex=True)
    r = d["ratio"].tolist()
    for ax, key in zip(axes, ("objective", "gradient")):
        ax.plot(r, d[f"{key}_sym"].tolist(), color="0.4", lw=2, ls="--", label=f"symmetric [{d['lower']:.2f}, "
                f"{d['upper_sym']:.2f}]")
        ax.plot(r, d[key].tolist(), color="C0" if d["adv"] > 0 else "C3", lw=2,
                label=f"DAPO [{d['lower']:.2f}, {d['upper']:.2f}]")
        if d["extra_room"] is not None:
            ax.axvspan(*d["extra_room"], color="C0", alpha=0.12, label="gradient kept by clip-higher")
        ax.axvline(1.0, color="k", lw=0.4)
        ax.set_xlabel("ratio ρ")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel(f"objective, A = {d['adv']:+g}")
    axes[1].set_ylabel("d objective / d ρ")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    return fig


def clip_higher_widget():
    """Sliders ``eps_low``, ``eps_high`` and the sign of A over :func:`clip_higher_curves`."""
    def compute(eps_low, eps_high, sign):
        return clip_higher_curves(eps_low, eps_high, 1.0 if sign == "A > 0" else -1.0)

    return _interactive(plot_clip_higher, compute,
                        eps_low=_float_slider(0.2, 0.0, 0.5, 0.01, "eps_low"),
                        eps_high=_float_slider(0.28, 0.0, 0.6, 0.01, "eps_high"),
                        sign=_toggle(["A > 0", "A < 0"], "A > 0", "sign"))


# ==================================================================================================
# 08 — GSPO: token ratios against the sequence ratio
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
    fig, ax = plt.subplots(figsize=(7.8, 3.8))
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
                                                zip(d["lengths"].tolist(), d["adv"].tolist())], fontsize=8)
    ax.set_xlabel("completion: length |o| and sign of A (blue A > 0, red A < 0)", fontsize=8)
    ax.set_ylabel("ratio")
    ax.set_title(f"token ratios (dots) vs sequence ratio s_i (bar)\nclipped: tokens at GRPO's range "
                 f"{d['token_clip_grpo_range']:.1%}, tokens at GSPO's {d['token_clip_gspo_range']:.1%}, "
                 f"sequences at GSPO's {d['seq_clip_gspo_range']:.0%}", fontsize=9)
    ax.legend(fontsize=8, loc="upper right")
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
    fig, axes = plt.subplots(1, 2, figsize=(7.8, 3.0), sharey=True)
    L = int(d["lengths"][0])
    for ax, v in zip(axes, ("grpo", "gspo")):
        w = d["grad"][v][0, :L]
        ax.bar(range(L), w.tolist(), width=1.0, color="C0")
        ax.bar(d["outliers"].tolist(), w[d["outliers"]].tolist(), width=2.0, color="C3", label="outlier tokens")
        ax.set_title(f"{v}: outlier tokens carry {d['outlier_share'][v]:.0%}\nof this completion's gradient",
                     fontsize=9)
        ax.set_xlabel("token position in the long completion")
        ax.set_yscale("log")
    axes[0].set_ylabel("|d loss / d log pi_t|")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    return fig


# ==================================================================================================
# 10 — SAPO: a soft gate instead of a hard clip
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
    :func:`grpo_lessons.core.objectives.sapo_surrogate`); ``clip_objective`` / ``clip_gradient`` (the GRPO clip with
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
    """2 x 2: objective (top) and d/dr (bottom) for A > 0 (left, ``tau_pos``) and A < 0 (right, ``tau_neg``)."""
    plt = _plt()
    fig, axes = plt.subplots(2, 2, figsize=(7.8, 5.4), sharex=True)
    r = d["ratio"].tolist()
    for col, key in enumerate(("pos", "neg")):
        s = d[key]
        tau = d["tau_pos"] if key == "pos" else d["tau_neg"]
        name = "τ_pos" if key == "pos" else "τ_neg"
        for row, (a, b, c) in enumerate((("objective", "clip_objective", "chapter_objective"),
                                         ("gradient", "clip_gradient", "chapter_gradient"))):
            ax = axes[row, col]
            ax.plot(r, s[b].tolist(), color="0.5", lw=1.5, label=f"hard clip ε = {d['epsilon']:g}")
            ax.plot(r, s[a].tolist(), color="C0" if key == "pos" else "C3", lw=2.5, label=f"SAPO {name} = {tau:g}")
            ax.plot(r, s[c].tolist(), color="C1", lw=1.2, ls="--", label="chapter's formula")
            ax.axvline(1.0, color="k", lw=0.4)
            ax.grid(alpha=0.3)
        axes[0, col].set_title(f"A = {s['adv']:+g}", fontsize=10)
        axes[0, col].legend(fontsize=8)  # each column its own SAPO curve: every curve is in a legend
        axes[1, col].set_xlabel("ratio ρ")
    axes[0, 0].set_ylabel("objective")
    axes[1, 0].set_ylabel("d objective / d ρ")
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
