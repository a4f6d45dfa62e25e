"""Widgets and plots for notebooks 04 and 15-18: rewards, ranks and diversity.

Every widget comes in three layers, as in :mod:`grpo_lessons.course.viz.clipping`:

* a **pure function** that computes what is drawn (a ``dict`` of tensors / floats / lists; unit tested without
  a display),
* a **plotting function** (matplotlib) that draws such a dict and returns the figure,
* a thin **ipywidgets wrapper** (``*_widget``) that ties sliders to the two; it can be built without a
  browser and its ``.result`` holds the last computed dict.

Notebooks: ``04_tasks_and_rewards`` (a format reward a policy can game, and rewards that resist it),
``15_gdpo`` (two rewards on different scales: sum-then-normalise against GDPO), ``16_gopo`` (a
miscalibrated, noisy reward model: GRPO's advantages against GOPO's ranks), ``17_diversity`` (entropy
bonus on a bandit, best-of-N curves and the measured diversity table), ``18_verbalized_sampling``
(candidates and diversity of verbalized against direct sampling).

The mathematics lives in the package (:mod:`grpo_lessons.core.advantages`, :mod:`grpo_lessons.core.diversity`,
:mod:`grpo_lessons.core.rewards`); this module only arranges numbers for drawing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from grpo_lessons.core.advantages import group_advantages
from ._common import _dropdown, _float_slider, _interactive, _log_slider, _plt

__all__ = [
    # 04
    "HACK_STRATEGIES", "reward_hacking_table", "plot_reward_hacking", "reward_hacking_widget",
    # 15
    "two_reward_batch", "gdpo_comparison", "plot_gdpo_comparison", "gdpo_widget",
    # 16
    "distort", "gopo_comparison", "plot_gopo_comparison", "gopo_widget", "spearman",
    # 17
    "entropy_bandit", "plot_entropy_bandit", "entropy_widget", "ENTROPY_MODES", "plot_best_of_n", "plot_diversity_table",
    # 18
    "plot_verbalized",
]


# --------------------------------------------------------------------------------------------------
# 04 · a format reward a policy can game
# --------------------------------------------------------------------------------------------------

#: Policies for one arithmetic prompt: (name, example completion, accuracy, follows the tag format).
#: ``accuracy`` is the share of prompts the policy gets right; ``None`` means "the policy's skill ``p``".
HACK_STRATEGIES: tuple[tuple[str, str, float | None, bool], ...] = (
    ("honest, no tags", "13 - 1 = 12.", None, False),
    ("honest, in tags", "<answer>12</answer>", None, True),
    ("tags, always '0'", "<answer>0</answer>", 0.05, True),
    ("empty tags", "<answer> </answer>", 0.0, False),
)


def reward_hacking_table(skill: float = 0.4, format_weight: float = 0.5, *,
                         strategies: Sequence[tuple[str, str, float | None, bool]] = HACK_STRATEGIES) -> dict[str, Any]:
    """Expected reward of each policy in ``strategies`` under three reward designs.

    * ``format only``: the format reward alone (1 for ``<answer>...</answer>``),
    * ``sum``: ``correct + w * format`` (TRL's default weighted sum of two reward functions),
    * ``gated``: ``correct * (1 + w * format)`` -- the format bonus is paid only on a correct answer.

    ``skill`` is the accuracy of the honest policies; the format flags are checked by
    :func:`grpo_lessons.core.rewards.format_reward` on each strategy's example completion.  Returns
    ``{"names", "designs", "expected" (S, 3), "best" (design -> name), "skill", "format_weight"}``.
    """
    from grpo_lessons.core.rewards import format_reward

    if not 0.0 <= skill <= 1.0:
        raise ValueError(f"skill must be in [0, 1], got {skill}")
    if format_weight < 0:
        raise ValueError(f"format_weight must be >= 0, got {format_weight}")
    names, rows = [], []
    examples = [s[1] for s in strategies]
    fmt = format_reward(examples)
    for (name, _ex, acc, claims_fmt), f in zip(strategies, fmt):
        if bool(f) != claims_fmt:
            raise ValueError(f"strategy {name!r}: format_reward says {f}, the table says {claims_fmt}")
        p = skill if acc is None else acc
        names.append(name)
        rows.append([f, p + format_weight * f, p * (1 + format_weight * f)])
    expected = torch.tensor(rows, dtype=torch.float64)  # (S, 3)
    designs = ["format only", f"sum: correct + {format_weight:g} format", f"gated: correct x (1 + {format_weight:g} format)"]
    best = {d: " = ".join(n for n, v in zip(names, expected[:, j].tolist()) if v >= float(expected[:, j].max()) - 1e-12)
            for j, d in enumerate(designs)}  # every policy tied for the top
    return {"names": names, "designs": designs, "expected": expected, "best": best, "skill": skill,
            "format_weight": format_weight, "format": fmt}


def plot_reward_hacking(d: dict[str, Any]):
    """Grouped bars: expected reward of each policy under each reward design; the winner of each is starred."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7.8, 3.6))
    S, J = d["expected"].shape
    width = 0.8 / J
    colors = ["#999999", "#1f77b4", "#2ca02c"]
    for j in range(J):
        xs = [s + (j - (J - 1) / 2) * width for s in range(S)]
        bars = ax.bar(xs, d["expected"][:, j].tolist(), width, label=d["designs"][j], color=colors[j % 3])
        best = int(d["expected"][:, j].argmax())
        ax.annotate("*", (xs[best], float(d["expected"][best, j])), ha="center", va="bottom", fontsize=14)
        del bars
    ax.set_xticks(range(S))
    ax.set_xticklabels(d["names"])
    ax.set_ylim(top=1.15 * float(d["expected"].max()))  # room for the stars under the title
    ax.set_ylabel("expected reward per prompt")
    ax.set_title(f"Which policy does each reward favour? (honest accuracy {d['skill']:.0%}; * = best)")
    ax.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    return fig


def reward_hacking_widget():
    """Sliders: the honest policy's accuracy and the format weight ``w``."""
    return _interactive(plot_reward_hacking, reward_hacking_table,
                        skill=_float_slider(0.4, 0.0, 1.0, 0.05, "honest accuracy p"),
                        format_weight=_float_slider(0.5, 0.0, 2.0, 0.05, "format weight w"))


# --------------------------------------------------------------------------------------------------
# 15 · GDPO: two rewards on different scales
# --------------------------------------------------------------------------------------------------

def two_reward_batch(num_groups: int = 64, group_size: int = 8, *, pass_rate: float = 0.4, scale: float = 30.0,
                     seed: int = 0) -> torch.Tensor:
    """Rewards ``(N, 2)`` for ``num_groups`` groups of ``group_size``: column 0 correctness (0/1, Bernoulli(
    ``pass_rate``)), column 1 a length-like score of spread ``scale`` (``scale * U(0, 1)``, independent of
    correctness).  Seeded; groups contiguous."""
    if num_groups < 1 or group_size < 2:
        raise ValueError(f"need num_groups >= 1 and group_size >= 2, got {num_groups}, {group_size}")
    gen = torch.Generator().manual_seed(seed)
    n = num_groups * group_size
    correct = (torch.rand(n, generator=gen, dtype=torch.float64) < pass_rate).to(torch.float64)  # (N,)
    second = scale * torch.rand(n, generator=gen, dtype=torch.float64)  # (N,)
    return torch.stack([correct, second], dim=1)  # (N, 2)


def _corr(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a - a.mean(), b - b.mean()
    den = float(a.norm() * b.norm())
    return float((a * b).sum()) / den if den > 0 else 0.0


def gdpo_comparison(scale: float = 30.0, weight: float = 1.0, *, num_groups: int = 64, group_size: int = 8,
                    pass_rate: float = 0.4, seed: int = 0) -> dict[str, Any]:
    """Advantages of sum-then-normalise (GRPO on ``r_0 + weight * r_1``) and of GDPO (each reward normalised
    in its group, weighted sum, batch renormalisation: :func:`grpo_lessons.core.advantages.decoupled_advantages`)
    on :func:`two_reward_batch`.

    Returns the rewards ``(N, 2)``, both advantage vectors ``(N,)``, the correctness mask, and two summary
    numbers per method: the correlation of the advantage with correctness, and the *correctness gap* (mean
    advantage of correct minus wrong completions).
    """
    from grpo_lessons.core.advantages import decoupled_advantages

    r = two_reward_batch(num_groups, group_size, pass_rate=pass_rate, scale=scale, seed=seed)  # (N, 2)
    summed = r[:, 0] + weight * r[:, 1]  # (N,)
    a_sum = group_advantages(summed, group_size)  # (N,)
    a_gdpo = decoupled_advantages(r, group_size, weights=[1.0, weight])  # (N,)
    correct = r[:, 0] > 0.5
    out: dict[str, Any] = {"rewards": r, "correct": correct, "scale": scale, "weight": weight,
                           "group_size": group_size, "advantages": {"sum-then-normalise": a_sum, "GDPO": a_gdpo}}
    for name, a in out["advantages"].items():
        out[name] = {"corr_correct": _corr(a, r[:, 0]), "corr_second": _corr(a, r[:, 1]),
                     "gap": float(a[correct].mean() - a[~correct].mean()) if correct.any() and (~correct).any() else 0.0}
    return out


def _three_digits(x: float) -> str:
    """A number as the log slider reads it (d3 format ``.3r``): three significant digits, no exponent.

    63.0957 -> "63.1", 0.1 -> "0.100", 1000 -> "1000", so a title never disagrees with the slider's readout.
    """
    s = f"{x:#.3g}"
    if "e" in s:
        s = f"{x:.0f}"
    return s.rstrip(".")


def plot_gdpo_comparison(d: dict[str, Any]):
    """Histograms of both methods' advantages, split into correct and wrong completions."""
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(7.8, 3.4), sharey=True)
    for ax, (name, a) in zip(axes, d["advantages"].items()):
        lo, hi = float(a.min()), float(a.max())
        bins = torch.linspace(lo - 1e-9, hi + 1e-9, 31).tolist()
        ax.hist(a[d["correct"]].tolist(), bins=bins, alpha=0.6, color="#2ca02c", label="right answers")
        ax.hist(a[~d["correct"]].tolist(), bins=bins, alpha=0.6, color="#d62728", label="wrong answers")
        s = d[name]
        ax.set_title(f"{name}: corr(A, correct) = {s['corr_correct']:.2f}", fontsize=10)
        ax.set_xlabel("advantage")
        ax.legend(fontsize=8)
    axes[0].set_ylabel("completions")
    fig.suptitle(f"second reward spread {_three_digits(d['scale'])}, weight {d['weight']:.2f}", fontsize=10)  # as the sliders read
    fig.tight_layout()
    return fig


def gdpo_widget():
    """Sliders: the second reward's scale (log) and its weight."""
    return _interactive(plot_gdpo_comparison, gdpo_comparison,
                        scale=_log_slider(30.0, 0.1, 1000.0, "second reward's spread"),
                        weight=_float_slider(1.0, 0.0, 2.0, 0.05, "second reward's weight"))


# --------------------------------------------------------------------------------------------------
# 16 · GOPO: a miscalibrated, noisy reward model
# --------------------------------------------------------------------------------------------------

DISTORTIONS = ("identity", "exp", "cube", "saturate")


def distort(true_score: torch.Tensor, kind: str = "exp", strength: float = 3.0) -> torch.Tensor:
    """A strictly increasing distortion of a score in [0, 1], as a miscalibrated reward model might apply.

    ``identity``: ``x``; ``exp``: ``exp(strength * x)`` (top scores blown up); ``cube``: ``x ** (1 + strength)``
    (low scores squashed); ``saturate``: ``tanh(strength * x)`` (high scores squashed together).
    """
    x = torch.as_tensor(true_score, dtype=torch.float64)
    if kind == "identity":
        return x.clone()
    if kind == "exp":
        return torch.exp(strength * x)
    if kind == "cube":
        return x.clamp(min=0) ** (1.0 + strength)
    if kind == "saturate":
        return torch.tanh(strength * x)
    raise ValueError(f"unknown distortion {kind!r}; known: {DISTORTIONS}")


def spearman(a: torch.Tensor, b: torch.Tensor) -> float:
    """Spearman rank correlation (average ranks for ties) of two 1-D tensors."""
    def ranks(x):
        x = torch.as_tensor(x, dtype=torch.float64)
        order = torch.argsort(x, stable=True)
        r = torch.empty_like(x)
        r[order] = torch.arange(len(x), dtype=torch.float64)
        for v in torch.unique(x):  # average ranks within ties
            m = x == v
            r[m] = r[m].mean()
        return r
    return _corr(ranks(a), ranks(b))


def gopo_comparison(kind: str = "exp", strength: float = 3.0, noise: float = 0.0, *, num_groups: int = 32,
                    group_size: int = 8, seed: int = 0) -> dict[str, Any]:
    """True scores ``U(0, 1)``, a reward model ``distort(true) + noise * N(0, 1) * spread`` and the advantages
    of GRPO (:func:`grpo_lessons.core.advantages.group_advantages`) and GOPO
    (:func:`grpo_lessons.core.advantages.rank_advantages`) computed from it.

    Also the *oracle* advantages -- GRPO and GOPO on the undistorted, noise-free score -- so the drift each
    method suffers is measurable: ``drift = mean |A(reward model) - A(true score)|``, and the within-group
    Spearman correlation of each method's advantage with the true score.
    """
    from grpo_lessons.core.advantages import rank_advantages

    gen = torch.Generator().manual_seed(seed)
    n = num_groups * group_size
    true = torch.rand(n, generator=gen, dtype=torch.float64)  # (N,)
    clean = distort(true, kind, strength)  # (N,)
    spread = float(clean.std()) if n > 1 else 1.0
    rm = clean + noise * spread * torch.randn(n, generator=gen, dtype=torch.float64)  # (N,) the reward model
    adv = {"GRPO": group_advantages(rm, group_size), "GOPO": rank_advantages(rm, group_size)}
    oracle = {"GRPO": group_advantages(true, group_size), "GOPO": rank_advantages(true, group_size)}
    out: dict[str, Any] = {"true": true, "reward_model": rm, "advantages": adv, "oracle": oracle, "kind": kind,
                           "strength": strength, "noise": noise, "group_size": group_size}
    G = group_size
    for name in adv:
        a = adv[name]
        rho = [spearman(a[g * G:(g + 1) * G], true[g * G:(g + 1) * G]) for g in range(num_groups)]
        out[name] = {"drift": float((a - oracle[name]).abs().mean()), "spearman_true": sum(rho) / len(rho),
                     "max_abs": float(a.abs().max())}
    return out


def plot_gopo_comparison(d: dict[str, Any]):
    """Left: the reward model against the true score. Middle and right: each method's advantage against
    the true score (coloured) and the oracle's (grey), for the first four groups."""
    plt = _plt()
    fig, axes = plt.subplots(1, 3, figsize=(7.8, 3.4))
    G = d["group_size"]
    k = min(4 * G, len(d["true"]))
    t, rm = d["true"][:k], d["reward_model"][:k]
    axes[0].scatter(t.tolist(), rm.tolist(), s=12, color="#9467bd", label="reward model")
    axes[0].set_xlabel("true score")
    axes[0].set_ylabel("reward model's score")
    axes[0].set_title(f"{d['kind']} distortion,\nstrength {d['strength']:g}, noise {d['noise']:g}", fontsize=9)
    axes[0].legend(fontsize=8)
    for ax, name, color in ((axes[1], "GRPO", "#1f77b4"), (axes[2], "GOPO", "#ff7f0e")):
        ax.scatter(t.tolist(), d["oracle"][name][:k].tolist(), s=30, color="#cccccc", label="from the true score")
        ax.scatter(t.tolist(), d["advantages"][name][:k].tolist(), s=12, color=color, label="from the reward model")
        s = d[name]
        ax.set_title(f"{name}: drift {s['drift']:.2f},\nSpearman(A, true) {s['spearman_true']:.2f}", fontsize=9)
        ax.set_xlabel("true score")
        ax.set_ylabel("advantage")
        ax.legend(fontsize=8, loc="lower right")  # the points rise from lower left to upper right
    fig.tight_layout()
    return fig


def gopo_widget():
    """Controls: the distortion, its strength, and the reward model's noise."""
    return _interactive(plot_gopo_comparison, gopo_comparison,
                        kind=_dropdown(DISTORTIONS, "exp", "distortion"),
                        strength=_float_slider(3.0, 0.0, 8.0, 0.25, "strength"),
                        noise=_float_slider(0.0, 0.0, 1.0, 0.05, "noise (x reward spread)"))


# --------------------------------------------------------------------------------------------------
# 17 · diversity: the entropy bonus on a bandit, best-of-N, the measured table
# --------------------------------------------------------------------------------------------------

ENTROPY_MODES = ("none", "reward", "loss")


def entropy_bandit(alpha: float = 0.05, *, steps: int = 100, group_size: int = 8, lr: float = 0.5,
                   num_answers: int = 8, correct: Sequence[int] = (0, 1, 2), seeds: int = 3,
                   modes: Sequence[str] = ENTROPY_MODES) -> dict[str, Any]:
    """GRPO on a one-prompt bandit with several right answers, with an entropy bonus ``alpha`` in three places.

    The policy is a softmax over ``num_answers`` answers, initialised at a reference distribution that
    prefers answer 0; answers in ``correct`` earn reward 1.  Each step samples ``group_size`` answers,
    computes GRPO advantages (:func:`grpo_lessons.core.advantages.group_advantages`) and takes an SGD step on the logits:

    * ``none``: ``loss = -mean_i A_i log pi(o_i)``;
    * ``reward``: the bonus is paid per sample, ``r_i + alpha * (-log pi(o_i))`` (the sampled estimate of the
      entropy), *before* the group normalisation;
    * ``loss``: ``loss = -mean_i A_i log pi(o_i) - alpha * H(pi)`` with the exact entropy (TRL / veRL's
      ``entropy_coeff`` style: a term of the loss, outside the advantages).

    Returns per mode the mean over ``seeds`` of the entropy ``H(pi)``, the probability of a right answer and
    the entropy *among the right answers* (how many different right answers the policy still gives), per step.
    """
    for m in modes:
        if m not in ENTROPY_MODES:
            raise ValueError(f"unknown mode {m!r}; known: {ENTROPY_MODES}")
    if alpha < 0:
        raise ValueError(f"alpha must be >= 0, got {alpha}")
    ok = torch.zeros(num_answers, dtype=torch.float64)
    ok[list(correct)] = 1.0
    ref_logits = -0.5 * torch.arange(num_answers, dtype=torch.float64)  # answer 0 most likely
    out: dict[str, Any] = {"alpha": alpha, "steps": list(range(steps + 1)), "modes": list(modes)}
    for mode in modes:
        H = torch.zeros(steps + 1, dtype=torch.float64)
        P = torch.zeros(steps + 1, dtype=torch.float64)
        Hc = torch.zeros(steps + 1, dtype=torch.float64)
        for seed in range(seeds):
            gen = torch.Generator().manual_seed(1000 + seed)
            logits = ref_logits.clone().requires_grad_(True)
            for t in range(steps + 1):
                with torch.no_grad():
                    p = torch.softmax(logits, 0)
                    H[t] += -(p * p.log()).sum() / seeds
                    P[t] += (p * ok).sum() / seeds
                    pc = p * ok / (p * ok).sum()
                    Hc[t] += -(pc[pc > 0] * pc[pc > 0].log()).sum() / seeds
                if t == steps:
                    break
                logp_all = torch.log_softmax(logits, 0)  # (V,)
                idx = torch.multinomial(logp_all.detach().exp(), group_size, replacement=True, generator=gen)  # (G,)
                logp = logp_all[idx]  # (G,)
                r = ok[idx]  # (G,)
                if mode == "reward":
                    r = r + alpha * (-logp.detach())
                A = group_advantages(r, group_size)  # (G,)
                loss = -(A * logp).mean()
                if mode == "loss":
                    loss = loss - alpha * (-(logp_all.exp() * logp_all).sum())
                grad, = torch.autograd.grad(loss, logits)
                with torch.no_grad():
                    logits -= lr * grad
        out[mode] = {"entropy": H, "p_correct": P, "entropy_correct": Hc}
    return out


def plot_entropy_bandit(d: dict[str, Any]):
    """Entropy of the policy, probability of a right answer and entropy among the right answers, per step."""
    plt = _plt()
    fig, axes = plt.subplots(1, 3, figsize=(7.8, 3.2))
    colors = {"none": "#7f7f7f", "reward": "#1f77b4", "loss": "#d62728"}
    labels = {"none": "no bonus", "reward": f"bonus in the reward (alpha {d['alpha']:g})",
              "loss": f"bonus in the loss (alpha {d['alpha']:g})"}
    for key, ax, title in (("entropy", axes[0], "H(pi), nats"), ("p_correct", axes[1], "P(right answer)"),
                           ("entropy_correct", axes[2], "entropy among right answers")):
        for m in d["modes"]:
            ax.plot(d["steps"], d[m][key].tolist(), color=colors[m], label=labels[m])
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("step")
    fig.legend(*axes[0].get_legend_handles_labels(), loc="lower center", ncol=3, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.08, 1, 1))  # the legend below the panels, off the curves
    return fig


def entropy_widget():
    """Slider: the entropy coefficient alpha."""
    return _interactive(plot_entropy_bandit, lambda alpha: entropy_bandit(alpha),
                        alpha=_float_slider(0.05, 0.0, 0.3, 0.01, "entropy coefficient alpha"))


def plot_best_of_n(bon: dict[str, dict[str, list]], title: str = ""):
    """Accuracy against N for best-of-N with each picker (verifier, model confidence, majority vote) and pass@k.

    ``bon``: method -> the ``best_of_n`` curves of ``benchmarks/diversity.py`` (``n``, ``verifier``,
    ``pass_at_k``, ``confidence``, ``majority``)."""
    plt = _plt()
    cols = min(2, len(bon))  # two panels a row: the course site's width
    rows = -(-len(bon) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(7.8 if cols == 2 else 5.2, 0.6 + 3.0 * rows), sharey=True,
                             squeeze=False)
    for ax in list(axes.flat)[len(bon):]:
        fig.delaxes(ax)
    styles = {"verifier": ("-o", "best-of-N, verifier picks"), "pass_at_k": ("--", "pass@k (unbiased estimator)"),
              "confidence": ("-s", "best-of-N, model's mean log-prob picks"), "majority": ("-^", "majority vote")}
    for ax, (name, c) in zip(axes.flat, bon.items()):
        for key, (style, label) in styles.items():
            if c.get(key) and c[key][0] is not None:
                ax.plot(c["n"], c[key], style, ms=4, label=label)
        ax.set_xscale("log", base=2)
        ax.set_xticks(c["n"])
        ax.set_xticklabels([str(n) for n in c["n"]])
        ax.set_xlabel("N (samples per prompt)")
        ax.set_title(name, fontsize=10)
        ax.grid(alpha=0.3)
    for row in axes:
        row[0].set_ylabel("accuracy")
    axes[0][0].legend(fontsize=8)
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    return fig


def plot_diversity_table(table: Sequence[dict[str, Any]], keys: Sequence[str] = ("distinct_2", "edit_diversity",
                                                                                  "answer_entropy", "pass@1", "pass@8")):
    """One panel per metric, one bar per method (rows of the benchmark's ``table``)."""
    plt = _plt()
    keys = [k for k in keys if any(r.get(k) is not None for r in table)]
    cols = min(3, len(keys))  # three panels a row: the course site's width
    rows = -(-len(keys) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(min(7.8, 2.6 * cols), 3.4 * rows), squeeze=False)
    for ax in list(axes.flat)[len(keys):]:
        fig.delaxes(ax)
    names = [r["method"] for r in table]
    colors = [plt.cm.tab10(i % 10) for i in range(len(names))]
    for ax, k in zip(axes.flat, keys):
        ax.bar(range(len(names)), [r.get(k) or 0.0 for r in table], color=colors)
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels(names, rotation=60, ha="right", fontsize=8)
        ax.set_title(k, fontsize=10)
    fig.tight_layout()
    return fig


# --------------------------------------------------------------------------------------------------
# 18 · verbalized sampling
# --------------------------------------------------------------------------------------------------

def plot_verbalized(summary: dict[str, dict[str, float]], keys: Sequence[str] = ("parse_rate", "distinct_1",
                                                                                 "distinct_2", "edit_diversity")):
    """Bars: each metric for direct sampling and verbalized sampling (``summary``: method -> metric -> value)."""
    plt = _plt()
    methods = list(summary)
    keys = [k for k in keys if any(summary[m].get(k) is not None for m in methods)]
    fig, ax = plt.subplots(figsize=(1.8 * len(keys) + 2, 3.2))
    width = 0.8 / len(methods)
    for j, m in enumerate(methods):
        xs = [i + (j - (len(methods) - 1) / 2) * width for i in range(len(keys))]
        ax.bar(xs, [summary[m].get(k) or 0.0 for k in keys], width, label=m)
    ax.set_xticks(range(len(keys)))
    ax.set_xticklabels(keys)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
