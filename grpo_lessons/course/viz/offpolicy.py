"""Widgets and plots of the off-policy notebooks 11-14 (train/inference mismatch, VESPO, DPPO, CISPO/ScaleRL).

Each widget pairs a *pure* function that computes what is drawn (a dict of tensors and numbers, tested
without a browser) with a ``plot_*`` function that draws that dict and a ``*_widget`` function that wraps
both in ipywidgets.  The mathematics lives in the package (:mod:`grpo_lessons.core.correction`,
:mod:`grpo_lessons.core.objectives`, :mod:`grpo_lessons.core.advantages`, :mod:`grpo_lessons.core.scaling_law`); this
module only evaluates it on grids and toy batches.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

import torch

from grpo_lessons.core.correction import CORRECTION_MODES, rollout_weights
from grpo_lessons.core.objectives import dppo_trust_mask, sapo_surrogate, vespo_phi
from ._common import _dropdown, _float_slider, _int_slider, _interactive, _plt

__all__ = [
    "load_measured_mismatch", "plot_measured_mismatch", "mismatch_simulator", "plot_mismatch_simulator",
    "mismatch_widget", "vespo_curves", "plot_vespo", "vespo_widget", "trust_region_grid", "plot_trust_region",
    "trust_region_widget", "cispo_vs_ppo_weights", "plot_cispo_vs_ppo", "cispo_widget", "scaling_curve_data",
    "plot_scaling_fit", "scaling_widget", "RESULTS_DIR",
]

RESULTS_DIR = Path(__file__).resolve().parents[3] / "benchmarks" / "results"


# ==================================================================================================
# 11 — the measured mismatch (benchmarks/offpolicy_mismatch.py) and the mismatch simulator
# ==================================================================================================

def load_measured_mismatch(path: str | Path | None = None) -> dict[str, dict[str, torch.Tensor]]:
    """Read ``tokens.csv`` of ``benchmarks/offpolicy_mismatch.py`` into padded tensors per setting.

    Returns ``{setting: {"logp_mu": (B, T), "logp_old": (B, T), "mask": (B, T), "lengths": (B,)}}``
    in float64; ``setting`` is ``"short"`` (12 new tokens) or ``"long"`` (128).
    """
    path = Path(path) if path is not None else RESULTS_DIR / "offpolicy_mismatch" / "tokens.csv"
    if path.is_dir():
        path = path / "tokens.csv"
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist; run benchmarks/offpolicy_mismatch.py first")
    rows: dict[str, dict[int, list[tuple[int, float, float]]]] = {}
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            rows.setdefault(r["setting"], {}).setdefault(int(r["seq"]), []).append(
                (int(r["t"]), float(r["logp_mu"]), float(r["logp_old"])))
    out = {}
    for setting, seqs in rows.items():
        B = max(seqs) + 1
        T = max(len(v) for v in seqs.values())
        mu = torch.zeros(B, T, dtype=torch.float64)
        old = torch.zeros(B, T, dtype=torch.float64)
        mask = torch.zeros(B, T, dtype=torch.float64)
        for i, toks in seqs.items():
            for t, a, b in toks:
                mu[i, t], old[i, t], mask[i, t] = a, b, 1.0
        out[setting] = {"logp_mu": mu, "logp_old": old, "mask": mask, "lengths": mask.sum(-1)}
    return out


def plot_measured_mismatch(data: dict | str | Path | None = None):
    """Two panels: the token log-ratios ``log pi_old - log mu`` (histogram per setting) and each
    sequence's ratio ``prod_t pi_old/mu`` against its length (log scale), with TRL's cap 3."""
    if not isinstance(data, dict):
        data = load_measured_mismatch(data)
    plt = _plt()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(7.8, 3.8))
    colours = {"short": "tab:blue", "long": "tab:orange"}
    for name, d in data.items():
        m = d["mask"].bool()
        x = (d["logp_old"] - d["logp_mu"])[m]
        a1.hist(x.numpy(), bins=80, alpha=0.6, color=colours.get(name), density=True,
                label=f"{name}: {int(m.sum())} tokens, mean |d| = {x.abs().mean():.3f}")
        seq = ((d["logp_old"] - d["logp_mu"]) * d["mask"]).sum(-1).exp()
        a2.scatter(d["lengths"].numpy(), seq.numpy(), s=10, alpha=0.6, color=colours.get(name),
                   label=f"{name} ({len(seq)} sequences)")
    a1.set_yscale("log")
    a1.set_xlabel(r"token log-ratio  $\log\pi_{old} - \log\mu$")
    a1.set_ylabel("density")
    a1.set_title("bf16 sampler vs fp32 trainer, per token")
    a1.legend(fontsize=8)
    a2.axhline(3.0, color="k", ls="--", lw=1, label="cap 3 (TRL default)")
    a2.axhspan(0.5, 2.0, color="tab:green", alpha=0.1, label="mask band [0.5, 2]")
    a2.set_yscale("log")
    a2.set_xlabel("completion length (tokens)")
    a2.set_ylabel(r"sequence ratio $\prod_t \pi_{old}/\mu$")
    a2.set_title("the product drifts with length")
    a2.legend(fontsize=8)
    fig.tight_layout()
    return fig


SIM_OPTIONS: tuple[str, ...] = ("none", *CORRECTION_MODES, "sequence_is")


def _toy_policy(vocab: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    theta = torch.randn(vocab, generator=g, dtype=torch.float64)  # the trainer's logits pi_old
    noise = torch.randn(vocab, generator=g, dtype=torch.float64)  # the direction the sampler is off in
    return theta, noise / noise.std()


def _toy_objective(theta: torch.Tensor, length: int, threshold: int) -> torch.Tensor:
    """``J(theta) = P(at least `threshold` of `length` i.i.d. tokens are token 0)`` under softmax(theta)."""
    p0 = torch.softmax(theta, -1)[0]
    n = torch.arange(length + 1, dtype=theta.dtype)
    top = torch.lgamma(torch.tensor(length + 1.0, dtype=theta.dtype))
    log_binom = top - torch.lgamma(n + 1) - torch.lgamma(length - n + 1)  # log C(length, n)
    pmf = torch.exp(log_binom + n * torch.log(p0) + (length - n) * torch.log1p(-p0))  # (length + 1,)
    return pmf[threshold:].sum()


@torch.no_grad()
def _weights_for(option: str, old_lp: torch.Tensor, mu_lp: torch.Tensor, mask: torch.Tensor, cap: float,
                 clip_min: float | None) -> torch.Tensor:
    if option == "none":
        return torch.ones_like(old_lp)
    if option == "sequence_is":  # the exact product, untruncated: unbiased, the variance reference
        return rollout_weights(old_lp, mu_lp, mask, "sequence_truncate", clip_max=None, clip_min=None).expand_as(old_lp)
    return rollout_weights(old_lp, mu_lp, mask, option, clip_max=cap, clip_min=clip_min).expand_as(old_lp)


def mismatch_simulator(mismatch: float = 0.1, length: int = 32, mode: str = "token_truncate", cap: float = 3.0,
                       clip_min: float | None = None, *, vocab: int = 8, samples: int = 4000,
                       seed: int = 0) -> dict[str, Any]:
    """Bias and variance of the corrected policy gradient on a toy categorical policy.

    The trainer's policy ``pi_old = softmax(theta)`` over ``vocab`` tokens; a completion is ``length``
    i.i.d. tokens; the reward is 1 if at least ``ceil(length * pi_old(0))`` of them are token 0 (a
    verifier-like, non-additive reward that succeeds about half the time).  The sampler is
    ``mu = softmax(theta + mismatch * eps)`` for a fixed random direction ``eps``
    (so ``mismatch`` is roughly the per-token std of ``log pi_old - log mu``).  ``samples`` completions are
    drawn from ``mu``; each option's per-completion gradient estimate is

        ``g_i = sum_t w_{i,t} (R_i - J) grad_theta log pi_old(y_{i,t})``

    with ``w`` from :func:`grpo_lessons.core.correction.rollout_weights` (``"none"``: ``w = 1``; ``"sequence_is"``:
    the untruncated product, unbiased).  The exact gradient ``grad J`` comes from the binomial closed form.
    Returns, per option, ``bias`` = ``|E g - grad J| / |grad J|``, ``std`` = ``sqrt(E|g - E g|^2) / |grad J|``
    (one completion; a batch of ``n`` divides it by ``sqrt(n)``), ``rmse16`` (bias and std for a batch of 16)
    and ``share`` (tokens or sequences the option changed); plus the chosen ``mode``'s weights and
    ``noise_floor`` = the Monte-Carlo error of the bias itself (``std(sequence_is) / sqrt(samples)``):
    a bias below it is indistinguishable from 0.  The settings come back too (``mode``, ``length``, ``mismatch``,
    ``cap``, ``clip_min``: None when there is no lower bound) for :func:`plot_mismatch_simulator`'s titles.
    """
    if mode not in SIM_OPTIONS:
        raise ValueError(f"unknown mode {mode!r}; known: {', '.join(SIM_OPTIONS)}")
    if not (isinstance(length, int) and length >= 1) or vocab < 2 or samples < 10:
        raise ValueError(f"need length >= 1, vocab >= 2, samples >= 10; got {length}, {vocab}, {samples}")
    if mismatch < 0 or cap <= 0:
        raise ValueError(f"need mismatch >= 0 and cap > 0, got {mismatch}, {cap}")
    if clip_min is not None and clip_min <= 0:
        clip_min = None
    theta, eps = _toy_policy(vocab, seed)
    pi = torch.softmax(theta, -1)  # (V,)
    threshold = max(1, math.ceil(length * float(pi[0])))  # J near 1/2 at every length: mixed rewards
    th = theta.clone().requires_grad_(True)
    J = _toy_objective(th, length, threshold)
    (grad_exact,) = torch.autograd.grad(J, th)
    J = J.detach()
    mu = torch.softmax(theta + mismatch * eps, -1)  # (V,)
    g = torch.Generator().manual_seed(seed + 1)
    y = torch.multinomial(mu, samples * length, replacement=True, generator=g).view(samples, length)  # (S, L)
    old_lp = torch.log(pi)[y]  # (S, L)
    mu_lp = torch.log(mu)[y]  # (S, L)
    mask = torch.ones_like(old_lp)
    R = ((y == 0).sum(-1) >= threshold).to(theta.dtype)  # (S,)
    onehot = torch.nn.functional.one_hot(y, vocab).to(theta.dtype)  # (S, L, V)
    score = onehot - pi  # (S, L, V): grad_theta log pi(y_t)
    out: dict[str, Any] = {"grad_exact": grad_exact, "J": float(J), "threshold": threshold,
                           "token_log_ratio_std": float((old_lp - mu_lp).std()),
                           "sequence_log_ratio_std": float((old_lp - mu_lp).sum(-1).std()),
                           "options": {}, "mode": mode, "length": length, "mismatch": mismatch, "cap": cap,
                           "clip_min": clip_min}
    norm = grad_exact.norm()
    for option in SIM_OPTIONS:
        w = _weights_for(option, old_lp, mu_lp, mask, cap, clip_min)  # (S, L)
        gi = ((w * (R - J)[:, None])[..., None] * score).sum(1)  # (S, V)
        mean = gi.mean(0)
        bias = float((mean - grad_exact).norm() / norm)
        std = float(((gi - mean).pow(2).sum(-1).mean()).sqrt() / norm)
        share = 0.0
        if option not in ("none", "sequence_is"):
            d_log = old_lp - mu_lp  # (S, L)
            raw = d_log.sum(-1).exp() if option.startswith("sequence") else d_log.exp()  # (S,) or (S, L)
            lo = clip_min if clip_min is not None else -math.inf
            share = float(((raw > cap) | (raw < lo)).to(theta.dtype).mean())
        out["options"][option] = {"bias": bias, "std": std, "rmse16": math.sqrt(bias ** 2 + std ** 2 / 16),
                                  "share": share}
        if option == "sequence_is":
            out["noise_floor"] = std / math.sqrt(samples)
        if option == mode:
            out["weights"] = w[:, 0] if option.startswith("sequence") else w.flatten()
    return out


def plot_mismatch_simulator(d: dict[str, Any]):
    """Left: the chosen mode's weights; right: bias and std of every option, relative to |grad J|."""
    plt = _plt()
    fig, (a1, a2) = plt.subplots(2, 1, figsize=(7.8, 6.6))  # stacked: the options' labels need the site's width
    w = d["weights"].clamp(min=1e-6)
    a1.hist(torch.log10(w).numpy(), bins=60, color="tab:purple")
    a1.axvline(math.log10(d["cap"]), color="k", ls="--", lw=1, label=f"cap {d['cap']:g}")
    a1.axvline(0.0, color="grey", lw=1, label="weight 1")
    lo = d.get("clip_min")
    if lo is not None:  # the lower bound: weights below it are raised to it (truncate) or set to 0 (mask)
        a1.axvline(math.log10(lo), color="tab:orange", ls="--", lw=1.5, label=f"clip_min {lo:g}")
    share = d["options"][d["mode"]]["share"]
    bounds = f"cap {d['cap']:g}" + (f", clip_min {lo:g}" if lo is not None else ", no clip_min")
    a1.set_title(f"{d['mode']} ({bounds}): weights (log10),\n{100 * share:.1f}% corrected", fontsize=10)
    a1.set_xlabel(r"$\log_{10} \omega$  (weights of 0 shown at -6)")
    a1.set_ylabel("completions" if d["mode"].startswith("sequence") else "tokens")
    a1.legend(fontsize=8)
    names = list(d["options"])
    x = torch.arange(len(names)).float()
    bias = [d["options"][n]["bias"] for n in names]
    std = [d["options"][n]["std"] / 4 for n in names]  # a batch of 16 completions
    a2.bar(x - 0.2, bias, 0.4, label="bias |E g - grad J|", color="tab:red")
    a2.bar(x + 0.2, std, 0.4, label="std of a 16-completion batch", color="tab:blue")
    a2.set_xticks(x.tolist())
    # under each option, the share of tokens or sequences it changed: where the cap and clip_min act
    a2.set_xticklabels([n.replace("_", "\n") + ("" if n in ("none", "sequence_is")
                                                 else f"\n{100 * d['options'][n]['share']:.1f}%")
                        for n in names], fontsize=8)
    a2.set_xlabel("% under an option: the share of its weights that the cap or clip_min changed", fontsize=8)
    for i, n in enumerate(names):
        if n == d["mode"]:
            a2.get_xticklabels()[i].set_fontweight("bold")
    a2.set_yscale("log")
    a2.set_ylabel("relative to |grad J|")
    a2.set_title(f"mismatch {d['mismatch']:g}, length {d['length']} (seq log-ratio std "
                 f"{d['sequence_log_ratio_std']:.2f})", fontsize=9)
    # below the axis, not over the bars
    a2.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.32), ncol=2, frameon=False)
    fig.tight_layout()
    return fig


def mismatch_widget():
    """Sliders: mismatch size, completion length, mode, cap, lower bound (0 = none) over :func:`mismatch_simulator`."""
    def compute(mismatch, length, mode, cap, clip_min):
        return mismatch_simulator(mismatch, length, mode, cap, clip_min or None, samples=3000)

    return _interactive(plot_mismatch_simulator, compute,
                        mismatch=_float_slider(0.1, 0.0, 0.6, 0.01, "mismatch (log-ratio std)"),
                        length=_int_slider(32, 1, 256, 1, "completion length"),
                        mode=_dropdown(SIM_OPTIONS[1:-1], "token_truncate", "correction mode"),
                        cap=_float_slider(3.0, 1.1, 10.0, 0.1, "cap C (clip_max)"),
                        clip_min=_float_slider(0.0, 0.0, 0.95, 0.05, "clip_min (0 = none)"))


# ==================================================================================================
# 12 — VESPO's phi(W) beside the clip, SAPO's gate and TIS
# ==================================================================================================

def _weight_on_score(objective, r: torch.Tensor, a: float) -> torch.Tensor:
    """The factor on ``A grad log pi`` of a per-token objective at ratio ``r``: ``r d(obj)/dr / A``."""
    x = r.detach().to(torch.float64).requires_grad_(True)
    obj = objective(x, torch.full_like(x, a))
    (g,) = torch.autograd.grad(obj.sum(), x)
    return (r * g / a).detach()


def vespo_curves(k_pos: float = 2.0, lambda_pos: float = 3.0, k_neg: float = 3.0, lambda_neg: float = 2.0, *,
                 epsilon: float = 0.2, tau_pos: float = 1.0, tau_neg: float = 1.05, tis_cap: float = 3.0,
                 w_max: float = 4.0, n: int = 401) -> dict[str, Any]:
    """Weights on ``A grad log pi`` as functions of the (sequence) ratio ``W``, for ``A = +1`` and ``A = -1``.

    ``vespo``: ``phi(W)`` from :func:`grpo_lessons.core.objectives.vespo_phi` (``W`` a whole sequence's ratio);
    ``clip``: PPO/GRPO's ``W`` inside the clip range, 0 where the clip binds; ``sapo``: ``W f'(W)``;
    ``tis``: ``min(W, C)``.  The last three read ``W`` as one token's ratio, the scale they act on.
    Also ``peak`` = ``(k / lambda, phi(k / lambda))`` per sign: where VESPO's weight is largest.
    """
    if min(k_pos, lambda_pos, k_neg, lambda_neg) <= 0:
        raise ValueError("VESPO's k and lambda must be > 0")
    W = torch.linspace(w_max / n, w_max, n, dtype=torch.float64)  # (n,)
    log_w = torch.log(W)[:, None]  # (n, 1): one-token "sequences" whose ratio is W
    ones = torch.ones_like(log_w)
    from grpo_lessons.core.objectives import clipped_surrogate

    out: dict[str, Any] = {"W": W, "params": {"pos": (k_pos, lambda_pos), "neg": (k_neg, lambda_neg)},
                           "epsilon": epsilon, "tis_cap": tis_cap, "peak": {}}
    for key, a in (("pos", 1.0), ("neg", -1.0)):
        phi = vespo_phi(log_w, ones, torch.full_like(log_w, a), k_pos=k_pos, lambda_pos=lambda_pos, k_neg=k_neg,
                        lambda_neg=lambda_neg)[:, 0]
        clip = _weight_on_score(lambda x, adv: -clipped_surrogate(x, adv, epsilon=epsilon).per_token_loss, W, a)
        sapo = _weight_on_score(lambda x, adv: -sapo_surrogate(x, adv, tau_pos=tau_pos, tau_neg=tau_neg).per_token_loss,
                                W, a)
        k, lam = out["params"][key]
        w_peak = torch.tensor([[math.log(k / lam)]], dtype=torch.float64)
        one = torch.ones(1, 1, dtype=torch.float64)
        phi_peak = float(vespo_phi(w_peak, one, a * one, k_pos=k_pos, lambda_pos=lambda_pos, k_neg=k_neg,
                                   lambda_neg=lambda_neg))
        out[key] = {"vespo": phi, "clip": clip, "sapo": sapo, "tis": W.clamp(max=tis_cap)}
        out["peak"][key] = (k / lam, phi_peak)
    return out


def plot_vespo(d: dict[str, Any]):
    """Two panels (A > 0, A < 0): VESPO's phi(W) against the clip, SAPO and TIS weights."""
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(7.8, 3.8), sharey=True)
    W = d["W"].tolist()
    for ax, key in zip(axes, ("pos", "neg")):
        s = d[key]
        k, lam = d["params"][key]
        ax.plot(W, s["tis"].tolist(), color="tab:green", lw=1.2, ls=":", label=f"TIS min(W, {d['tis_cap']:g})")
        ax.plot(W, s["clip"].tolist(), color="0.5", lw=1.5, label=f"PPO clip ε = {d['epsilon']:g}")
        ax.plot(W, s["sapo"].tolist(), color="tab:orange", lw=1.2, ls="--", label="SAPO gate W f'(W)")
        ax.plot(W, s["vespo"].tolist(), color="tab:blue" if key == "pos" else "tab:red", lw=2.5,
                label=f"VESPO φ(W), k = {k:g}, λ = {lam:g}")
        wp, pp = d["peak"][key]
        ax.plot([wp], [pp], "ko", ms=4, label=f"peak at W = k/λ = {wp:.2f}")
        ax.axvline(1.0, color="k", lw=0.4)
        ax.set_title(f"A {'>' if key == 'pos' else '<'} 0", fontsize=10)
        ax.set_xlabel("importance ratio W")
        ax.set_ylim(-0.05, 3.2)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    axes[0].set_ylabel(r"weight on $A\,\nabla\log\pi$")
    fig.tight_layout()
    return fig


def vespo_widget():
    """Sliders ``k`` and ``lambda`` for each sign of the advantage over :func:`vespo_curves`."""
    def compute(k_pos, lambda_pos, k_neg, lambda_neg):
        return vespo_curves(k_pos, lambda_pos, k_neg, lambda_neg)

    return _interactive(plot_vespo, compute,
                        k_pos=_float_slider(2.0, 0.1, 8.0, 0.1, "k (A > 0)"),
                        lambda_pos=_float_slider(3.0, 0.1, 8.0, 0.1, "λ (A > 0)"),
                        k_neg=_float_slider(3.0, 0.1, 8.0, 0.1, "k (A < 0)"),
                        lambda_neg=_float_slider(2.0, 0.1, 8.0, 0.1, "λ (A < 0)"))


# ==================================================================================================
# 13 — DPPO's trust region in the (mu, pi_theta) plane
# ==================================================================================================

def trust_region_grid(delta_tv: float = 0.15, delta_kl: float = 0.05, epsilon: float = 0.2, sign: float = 1.0, *,
                      n: int = 200) -> dict[str, Any]:
    """Which ``(mu, p)`` pairs each trust region lets a token keep its gradient, for one sign of ``A``.

    ``mu`` (the sampler's probability of the token, x axis) and ``p = pi_theta`` (y axis) on an ``n x n``
    grid in (0, 1).  ``keep[name]`` is ``(n, n)`` bool (rows = p, columns = mu): ``ratio`` = PPO's clip
    (``p/mu <= 1 + eps`` for ``A > 0``, ``>= 1 - eps`` for ``A < 0``); ``binary_tv`` / ``binary_kl`` =
    :func:`grpo_lessons.core.objectives.dppo_trust_mask` with ``delta_tv`` / ``delta_kl``.  ``allowed_move``
    gives, per mask, the largest ``|p - mu|`` kept at a few ``mu`` values (how far the token may move).
    """
    if sign == 0:
        raise ValueError("sign must be +1 (A > 0) or -1 (A < 0)")
    grid = torch.linspace(0.0, 1.0, n + 2, dtype=torch.float64)[1:-1]  # (n,) open interval
    P, MU = torch.meshgrid(grid, grid, indexing="ij")  # (n, n): rows p, columns mu
    adv = torch.full_like(P, float(sign))
    keep = {
        "ratio": (P / MU <= 1 + epsilon) if sign > 0 else (P / MU >= 1 - epsilon),
        "binary_tv": dppo_trust_mask(P.log(), MU.log(), adv, kind="binary_tv", delta_low=delta_tv,
                                     delta_high=delta_tv).bool(),
        "binary_kl": dppo_trust_mask(P.log(), MU.log(), adv, kind="binary_kl", delta_low=delta_kl,
                                     delta_high=delta_kl).bool(),
    }
    probes = (0.01, 0.1, 0.5, 0.9, 0.99)
    fine = torch.linspace(0.0, 1.0, 20001, dtype=torch.float64)[1:-1]  # (m,) p values for the probes
    allowed = {name: [] for name in keep}
    for m in probes:
        mu = torch.full_like(fine, m)
        a = torch.full_like(fine, float(sign))
        toward = (fine > m) if sign > 0 else (fine < m)  # the direction the advantage pushes
        masks = {"ratio": (fine / m <= 1 + epsilon) if sign > 0 else (fine / m >= 1 - epsilon),
                 "binary_tv": dppo_trust_mask(fine.log(), mu.log(), a, kind="binary_tv", delta_low=delta_tv,
                                              delta_high=delta_tv).bool(),
                 "binary_kl": dppo_trust_mask(fine.log(), mu.log(), a, kind="binary_kl", delta_low=delta_kl,
                                              delta_high=delta_kl).bool()}
        for name, k in masks.items():
            allowed[name].append(float(((fine - m).abs() * (k & toward)).max()))
    return {"grid": grid, "keep": keep, "sign": float(sign), "delta_tv": delta_tv, "delta_kl": delta_kl,
            "epsilon": epsilon, "probes": probes, "allowed_move": allowed}


def plot_trust_region(d: dict[str, Any], points: dict[str, Any] | None = None):
    """Three panels: the region kept by the ratio clip, binary-TV and binary-KL; optional points
    ``{"mu": [...], "pi": [...], "adv": [...]}`` (the worked case; ``"p"`` is accepted for ``"pi"``) drawn on each.

    Kept cells are drawn green, masked cells white (a two-colour map, so the caption is literally true)."""
    from matplotlib.colors import ListedColormap

    plt = _plt()
    two_colours = ListedColormap(["white", "#74c476"])
    fig, axes = plt.subplots(1, 3, figsize=(7.8, 3.9), sharey=True)
    g = d["grid"]
    ext = [float(g[0]), float(g[-1]), float(g[0]), float(g[-1])]
    titles = {"ratio": f"ratio clip, ε = {d['epsilon']:g}", "binary_tv": f"binary TV, δ = {d['delta_tv']:g}",
              "binary_kl": f"binary KL, δ = {d['delta_kl']:g}"}
    for ax, (name, k) in zip(axes, d["keep"].items()):
        ax.imshow(k.double().numpy(), origin="lower", extent=ext, cmap=two_colours, vmin=0.0, vmax=1.0, aspect="auto")
        ax.plot([0, 1], [0, 1], color="k", lw=0.6, ls=":")
        ax.set_title(titles[name] + f"  (A {'>' if d['sign'] > 0 else '<'} 0)", fontsize=9)
        ax.set_xlabel(r"sampler's probability $\mu$")
        if points is not None:
            pi_key = "pi" if "pi" in points else "p"
            mu, p, a = (torch.as_tensor(points[x], dtype=torch.float64) for x in ("mu", pi_key, "adv"))
            same = (a > 0) if d["sign"] > 0 else (a <= 0)
            ax.scatter(mu[same].numpy(), p[same].numpy(), color="tab:red", s=25, zorder=3, label="worked case")
            ax.legend(fontsize=8, loc="upper left")
    axes[0].set_ylabel(r"current probability $\pi_\theta$")
    fig.text(0.5, -0.02, "green: the token keeps its gradient; white: masked (moved too far the way A pushes)",
             ha="center", fontsize=8)
    fig.tight_layout()
    return fig


def trust_region_widget():
    """Sliders ``delta`` (TV, KL), the clip's ``epsilon`` and the sign of ``A`` over :func:`trust_region_grid`."""
    def compute(delta_tv, delta_kl, epsilon, sign):
        return trust_region_grid(delta_tv, delta_kl, epsilon, 1.0 if sign == "A > 0" else -1.0, n=150)

    return _interactive(plot_trust_region, compute,
                        delta_tv=_float_slider(0.15, 0.01, 0.5, 0.01, "δ binary TV"),
                        delta_kl=_float_slider(0.05, 0.005, 0.3, 0.005, "δ binary KL", ".3f"),
                        epsilon=_float_slider(0.2, 0.05, 0.5, 0.01, "ε ratio clip"),
                        sign=_dropdown(["A > 0", "A < 0"], "A > 0", "advantage"))


# ==================================================================================================
# 14 — CISPO against the PPO clip; the ScaleRL compute curve
# ==================================================================================================

def cispo_vs_ppo_weights(epsilon: float = 0.2, cap: float = 5.0, *, r_max: float = 6.0, n: int = 601) -> dict[str, Any]:
    """Weight on ``A grad log pi`` against the ratio ``r``: PPO's clip (0 where it binds), CISPO with the
    absolute cap ``cap`` (:func:`grpo_lessons.core.objectives.cispo_surrogate`), and CISPO with TRL's fallback
    cap 0.2 (``epsilon_high`` unset), for ``A = +1`` and ``A = -1``."""
    from grpo_lessons.core.objectives import cispo_surrogate, clipped_surrogate

    if cap <= 0 or epsilon <= 0:
        raise ValueError(f"need cap > 0 and epsilon > 0, got {cap}, {epsilon}")
    r = torch.linspace(r_max / n, r_max, n, dtype=torch.float64)
    out: dict[str, Any] = {"ratio": r, "epsilon": epsilon, "cap": cap}
    for key, a in (("pos", 1.0), ("neg", -1.0)):
        ppo = _weight_on_score(lambda x, adv: -clipped_surrogate(x, adv, epsilon=epsilon).per_token_loss, r, a)

        def cispo_w(c):
            logp = torch.zeros_like(r, requires_grad=True)  # the weight is the same at any log pi
            obj = -cispo_surrogate(r, torch.full_like(r, a), logp=logp, epsilon_high=c).per_token_loss
            (g,) = torch.autograd.grad(obj.sum(), logp)
            return (g / a).detach()

        out[key] = {"ppo": ppo, "cispo": cispo_w(cap), "cispo_trl_fallback": cispo_w(0.2)}
    return out


def plot_cispo_vs_ppo(d: dict[str, Any]):
    """Gradient weight against the ratio: CISPO's clipped stop-gradient weight beside PPO's clip, per sign of A."""
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(7.8, 3.6), sharey=True)
    r = d["ratio"].tolist()
    for ax, key in zip(axes, ("pos", "neg")):
        s = d[key]
        ax.plot(r, s["ppo"].tolist(), color="0.4", lw=2, label=f"PPO/GRPO clip ε = {d['epsilon']:g}")
        ax.plot(r, s["cispo"].tolist(), color="tab:blue", lw=2.5, label=f"CISPO sg[min(ρ, {d['cap']:g})]")
        ax.plot(r, s["cispo_trl_fallback"].tolist(), color="tab:red", lw=1.2, ls="--",
                label="CISPO with TRL's fallback cap 0.2")
        ax.axvline(1.0, color="k", lw=0.4)
        ax.set_title(f"A {'>' if key == 'pos' else '<'} 0", fontsize=10)
        ax.set_xlabel("ratio ρ")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    axes[0].set_ylabel(r"weight on $A\,\nabla\log\pi$")
    fig.tight_layout()
    return fig


def cispo_widget():
    """Sliders: the clip's ``epsilon`` and CISPO's absolute cap over :func:`cispo_vs_ppo_weights`."""
    return _interactive(plot_cispo_vs_ppo, lambda epsilon, cap: cispo_vs_ppo_weights(epsilon, cap),
                        epsilon=_float_slider(0.2, 0.05, 0.5, 0.01, "ε (PPO clip)"),
                        cap=_float_slider(5.0, 0.2, 6.0, 0.1, "CISPO cap ε_max"))


def scaling_curve_data(path: str | Path | None = None, *, compute: str = "completions", R0: float | None = None,
                       fit_R0: bool = False) -> dict[str, Any]:
    """A training log's reward curve as compute ``C`` and reward ``R``, and its ScaleRL sigmoid fit.

    ``path``: a trainer ``metrics.csv`` (default: the committed CPU learning run,
    ``benchmarks/results/cpu_learning/metrics.csv``).  ``compute="completions"``: ``C`` = cumulative
    completions sampled after each step; ``"tokens"``: cumulative completion tokens
    (``completions_sampled * completion_len``), proportional to sampling FLOPs for a fixed model.
    ``R`` = the step's mean training reward.  Steps without a reward (evaluation rows) are skipped.
    Returns ``C``, ``R``, ``steps``, the :class:`grpo_lessons.core.scaling_law.SigmoidFit` ``fit`` and the
    held-out evaluations ``eval_C``, ``eval_R`` when the log has them.  ``R0`` / ``fit_R0`` go to
    :func:`grpo_lessons.core.scaling_law.fit_sigmoid` (default: ``R0`` = the first step's reward).
    """
    from grpo_lessons.core.scaling_law import fit_sigmoid

    if compute not in ("completions", "tokens"):
        raise ValueError(f"compute must be 'completions' or 'tokens', got {compute!r}")
    path = Path(path) if path is not None else RESULTS_DIR / "cpu_learning" / "metrics.csv"
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    steps, C, R, evals = [], [], [], []
    total = 0.0
    for row in rows:
        if row.get("reward_mean"):
            n = float(row["completions_sampled"])
            total += n * (float(row["completion_len"]) if compute == "tokens" else 1.0)
            steps.append(int(row["step"]))
            C.append(total)
            R.append(float(row["reward_mean"]))
        if row.get("eval_reward_mean"):
            evals.append((total, float(row["eval_reward_mean"])))
    if len(C) < 4:
        raise ValueError(f"{path}: only {len(C)} steps with a reward; the fit needs at least 4")
    Ct, Rt = torch.tensor(C, dtype=torch.float64), torch.tensor(R, dtype=torch.float64)
    fit = fit_sigmoid(Ct.numpy(), Rt.numpy(), R0=R0, fit_R0=fit_R0)
    return {"C": Ct, "R": Rt, "steps": steps, "compute": compute, "fit": fit,
            "eval_C": [c for c, _ in evals], "eval_R": [r for _, r in evals], "path": str(path)}


def plot_scaling_fit(d: dict[str, Any], manual: tuple[float, float, float] | None = None):
    """The reward points, the fitted sigmoid (extrapolated 10x) and, optionally, a hand-set ``(A, C_mid, B)``."""
    from grpo_lessons.core.scaling_law import sigmoid_curve

    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 3.8))
    C, R, fit = d["C"], d["R"], d["fit"]
    xs = torch.logspace(math.log10(float(C[0])), math.log10(float(C[-1]) * 10), 200, dtype=torch.float64).numpy()
    ax.scatter(C.numpy(), R.numpy(), s=12, color="tab:blue", alpha=0.7, label="training reward per step")
    if d.get("eval_C"):
        ax.plot([max(c, float(C[0])) for c in d["eval_C"]], d["eval_R"], "s", color="tab:green", ms=6,
                label="held-out greedy accuracy (not fitted)")
    ax.plot(xs, fit(xs), color="k", lw=2,
            label=f"fit: R∞ = {fit.A:.3f}, C_mid = {fit.C_mid:.0f}, ζ = {fit.B:.2f} "
                  f"(R0 = {fit.R0:.3f}, rmse {fit.rmse:.3f})")
    ax.axhline(fit.A, color="k", lw=0.6, ls=":")
    if manual is not None:
        A, cm, B = manual
        y = sigmoid_curve(xs, A, fit.R0, cm, B)
        rmse = float(((torch.as_tensor(sigmoid_curve(C.numpy(), A, fit.R0, cm, B)) - R) ** 2).mean().sqrt())
        ax.plot(xs, y, color="tab:red", lw=1.5, ls="--",
                label=f"yours: R∞ = {A:.2f}, C_mid = {cm:.0f}, ζ = {B:.2f} (rmse {rmse:.3f})")
    ax.axvline(float(C[-1]), color="grey", lw=0.6)
    ax.set_xscale("log")
    unit = "completions" if d["compute"] == "completions" else "completion tokens"
    ax.set_xlabel(r"compute $\mathcal{C}$ = cumulative " + f"{unit} sampled")
    ax.set_ylabel("reward")
    ax.set_ylim(-0.05, 1.05)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    return fig


def scaling_widget(d: dict[str, Any] | None = None):
    """Sliders for the asymptote (``A``, the course's R_inf), ``log10 C_mid`` and the steepness (``B``, the course's
    zeta) of a hand-set sigmoid beside the least-squares fit."""
    d = d if d is not None else scaling_curve_data()
    fit = d["fit"]

    def compute(A, log10_C_mid, B):
        return {**d, "manual": (A, 10 ** log10_C_mid, B)}

    return _interactive(lambda x: plot_scaling_fit(x, x["manual"]), compute,
                        A=_float_slider(round(fit.A, 2), 0.3, 1.0, 0.01, "asymptote R∞"),
                        log10_C_mid=_float_slider(round(math.log10(fit.C_mid), 1), 1.0, 5.0, 0.05, "log10 C_mid"),
                        B=_float_slider(round(fit.B, 1), 0.1, 5.0, 0.05, "steepness ζ"))


def load_topk_result(path: str | Path | None = None) -> dict[str, torch.Tensor]:
    """The sampler's top-K and the trainer's log-probs stored by ``benchmarks/offpolicy_mismatch.py``.

    The run stored, per completion position of the short setting, the bf16 sampler's top-K ids and
    log-probs and the fp32 trainer's log-probs at the same ids (both at the sampling temperature), the
    sampled token and both models' log-prob of it -- not the trainer's full ``(B, T, V)`` logits, which
    would be 49k floats per token.  For :func:`grpo_lessons.core.divergence.topk_divergence` this function
    rebuilds equivalent trainer logits over a *compressed vocabulary* of ``K + 2`` entries: the K ids,
    the sampled token (where it is not among them) and one entry holding all remaining mass.  Their
    softmax equals the trainer's probabilities at every id the divergence reads, and the rest bucket
    ``1 - sum`` is the same, so the divergence is exactly the one of the full logits.

    Returns ``topk_ids`` / ``sampled_ids`` (compressed, ``(B, T, K)`` / ``(B, T)``), ``sampler_topk_logp``
    ``(B, T, K)``, ``logits`` ``(B, T, K + 2)``, ``sampler_logp`` / ``trainer_logp`` ``(B, T)`` of the sampled
    token (the sampler's from the top-K pass where the token is listed), ``sampler_logp_rescored`` (the
    benchmark's re-scoring pass), ``mask`` ``(B, T)``, ``sampled_in_topk`` and ``temperature`` (already
    applied: pass ``temperature=1``).
    """
    import numpy as np

    path = Path(path) if path is not None else RESULTS_DIR / "offpolicy_mismatch" / "topk.npz"
    z = np.load(path)
    ids = torch.from_numpy(z["topk_ids"].astype("int64"))  # (B, T, K) real vocabulary ids
    mu_top = torch.from_numpy(z["sampler_topk_logp"]).double()  # (B, T, K)
    q_top = torch.from_numpy(z["trainer_topk_logp"]).double()  # (B, T, K)
    tok = torch.from_numpy(z["sampled_ids"].astype("int64"))  # (B, T)
    mu_s = torch.from_numpy(z["sampler_logp"]).double()  # (B, T)
    q_s = torch.from_numpy(z["trainer_logp"]).double()  # (B, T)
    mask = torch.from_numpy(z["mask"].astype("float64"))  # (B, T)
    B, T, K = ids.shape
    hit = ids == tok[..., None]  # (B, T, K)
    present = hit.any(-1)  # (B, T)
    sampled_c = torch.where(present, hit.long().argmax(-1), torch.full_like(tok, K))  # (B, T) compressed id
    extra = torch.where(present, torch.full_like(q_s, -1e30), q_s)  # (B, T): the sampled token's own entry
    listed = torch.cat([q_top.exp(), torch.where(present, torch.zeros_like(q_s), q_s.exp())[..., None]], -1)
    rest = (1.0 - listed.sum(-1)).clamp(min=1e-12).log()  # (B, T)
    logits = torch.cat([q_top, extra[..., None], rest[..., None]], -1)  # (B, T, K + 2)
    ids_c = torch.arange(K).expand(B, T, K).clone()  # (B, T, K)
    # The sampler's log-prob of the sampled token from the same forward pass as its top-K (where listed): the
    # re-scoring pass of the benchmark (shared prompt cache) differs from it by bf16 rounding of a different
    # computation order, as much as the bf16/fp32 gap itself, so mixing the two would be inconsistent.
    mu_same = torch.where(present, mu_top.gather(-1, sampled_c.clamp(max=K - 1)[..., None])[..., 0], mu_s)
    return {"topk_ids": ids_c, "sampled_ids": sampled_c, "sampler_topk_logp": mu_top, "logits": logits,
            "sampler_logp": mu_same, "trainer_logp": q_s, "sampler_logp_rescored": mu_s, "mask": mask,
            "temperature": float(z["temperature"]), "sampled_in_topk": present}
