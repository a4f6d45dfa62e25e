"""Widgets and plots on baselines and group advantages, notebooks 01 and 02.

Notebooks: ``01_why_grpo`` (critic memory, REINFORCE on a bandit with each baseline: gradient variance,
training curves) and ``02_group_advantages`` (the advantage distribution, zero-gradient groups, group
size, how hard one group pushes, std scaling).

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

from grpo_lessons.core.advantages import group_advantages, zero_gradient_probability
from ._common import _dropdown, _plt, _interactive, _int_slider, _float_slider, _generator

__all__ = [
    # 01
    "critic_memory", "plot_critic_memory",
    "BASELINES", "bandit_problem", "bandit_true_gradient", "bandit_gradient_samples", "gradient_variance",
    "variance_sweep", "plot_gradient_variance", "plot_variance_sweep", "gradient_variance_widget",
    "train_bandit", "plot_training_curves",
    # 02
    "advantage_distribution", "plot_advantage_distribution", "advantage_widget",
    "group_size_table", "plot_zero_gradient", "group_push_by_successes", "plot_group_push",
    "scaling_comparison", "plot_scaling_comparison",
]


# ==================================================================================================
# 01 — why drop the critic: baselines for REINFORCE
# ==================================================================================================

def critic_memory(
    params_billions: Sequence[float] = (0.5, 7.0, 70.0),
    *,
    weight_bytes: float = 2.0,
    train_bytes: float = 16.0,
    reward_model: bool = False,
) -> dict[str, Any]:
    """Memory (GB = 1e9 bytes) of the models PPO and GRPO hold during RL, ignoring activations and KV cache.

    A trained model costs ``train_bytes`` per parameter (mixed-precision Adam: bf16 weights 2 + bf16
    grads 2 + fp32 master weights 4 + two fp32 moments 8 = 16), a frozen one ``weight_bytes`` (bf16: 2).
    PPO = policy (trained) + reference (frozen) + critic of the policy's size (trained) [+ reward model];
    GRPO = policy + reference [+ reward model].  Returns arrays ``(M,)`` per component and the ratio.
    """
    n = torch.tensor([float(p) for p in params_billions], dtype=torch.float64)  # (M,) billions of params
    policy = n * train_bytes
    reference = n * weight_bytes
    critic = n * train_bytes
    rm = n * weight_bytes if reward_model else torch.zeros_like(n)
    ppo = policy + reference + critic + rm
    grpo = policy + reference + rm
    return {
        "params_billions": n, "policy": policy, "reference": reference, "critic": critic,
        "reward_model": rm, "ppo_total": ppo, "grpo_total": grpo, "ppo_over_grpo": ppo / grpo,
        "bf16_weights": n * weight_bytes,
    }


def plot_critic_memory(d: dict[str, Any]):
    """Stacked bars: PPO vs GRPO memory per model size."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 3.6))
    sizes = [f"{float(p):g}B" for p in d["params_billions"]]
    x = torch.arange(len(sizes), dtype=torch.float64)
    parts = [("policy", "policy (trained)"), ("reference", "reference (frozen)"),
             ("reward_model", "reward model (frozen)"), ("critic", "critic (trained)")]
    for offset, algo in ((-0.2, "ppo"), (0.2, "grpo")):
        bottom = torch.zeros_like(x)
        for j, (key, label) in enumerate(parts):
            if algo == "grpo" and key == "critic":
                continue
            vals = d[key]
            if float(vals.sum()) == 0:
                continue
            ax.bar((x + offset).tolist(), vals.tolist(), 0.38, bottom=bottom.tolist(), color=f"C{j}",
                   label=label if algo == "ppo" else None, edgecolor="k", linewidth=0.4)
            bottom = bottom + vals
        for xi, tot in zip((x + offset).tolist(), bottom.tolist()):
            ax.text(xi, tot, algo.upper(), ha="center", va="bottom", fontsize=8)
    ax.set_xticks(x.tolist(), sizes)
    ax.set_yscale("log")
    ax.set_ylim(bottom=0.5 * float(d["bf16_weights"].min()))
    ax.set_ylabel("GB (weights + optimiser state)")
    ax.set_title("Memory held during RL: PPO (left bar) vs GRPO (right bar)")
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    return fig


# -- REINFORCE on a contextual bandit: P prompts, K possible answers, tabular softmax policy ----------

BASELINES: tuple[str, ...] = ("none", "critic", "noisy_critic", "blind_critic", "group_mean", "rloo", "grpo")
_BASELINE_LABELS = {
    "none": "no baseline",
    "critic": "perfect critic V(x)",
    "noisy_critic": "noisy critic V(x)+noise",
    "blind_critic": "prompt-blind critic",
    "learned_critic": "learned critic",
    "group_mean": "group mean",
    "rloo": "leave-one-out mean",
    "grpo": "GRPO (mean and std)",
}


def bandit_problem(n_prompts: int = 16, n_answers: int = 8, *, seed: int = 0) -> dict[str, torch.Tensor]:
    """A toy "prompt -> answer" problem: initial logits ``(P, K)`` and success probabilities ``(P, K)``.

    Prompts differ in difficulty (their pass rates range from a few percent to most answers right),
    so one number cannot serve as a baseline for all of them: that is a critic's job.
    """
    g = _generator(seed)
    logits = 0.5 * torch.randn(n_prompts, n_answers, generator=g, dtype=torch.float64)  # (P, K)
    difficulty = torch.linspace(-2.5, 2.5, n_prompts, dtype=torch.float64)[torch.randperm(n_prompts, generator=g)]
    success = torch.sigmoid(difficulty[:, None] + 1.5 * torch.randn(n_prompts, n_answers, generator=g,
                                                                    dtype=torch.float64))  # (P, K)
    return {"logits": logits, "success_prob": success}


def bandit_true_gradient(logits: torch.Tensor, success_prob: torch.Tensor) -> torch.Tensor:
    """Exact ``dJ/dlogits`` for ``J = mean_x sum_y pi(y|x) q(x, y)``: ``pi (q - V) / P``; ``(P, K)``."""
    pi = torch.softmax(logits, -1)  # (P, K)
    value = (pi * success_prob).sum(-1, keepdim=True)  # (P, 1) V(x) = expected reward of the prompt
    return pi * (success_prob - value) / logits.shape[0]


def _weights(rewards, baseline, value, blind_value, *, critic_noise, group_size, gen):
    """Per-completion weight ``A_i`` multiplying ``grad log pi(y_i)``; ``rewards`` is ``(N, G)``."""
    if baseline == "none":
        return rewards
    if baseline == "critic":
        return rewards - value[:, None]
    if baseline == "noisy_critic":
        noise = critic_noise * torch.randn(value.shape, generator=gen, dtype=rewards.dtype)
        return rewards - (value + noise)[:, None]
    if baseline == "blind_critic":
        return rewards - blind_value
    if baseline == "learned_critic":
        raise ValueError("'learned_critic' needs training history: use train_bandit")
    flat = rewards.reshape(-1)  # (N*G,) contiguous groups, as group_advantages expects
    if baseline == "group_mean":
        return group_advantages(flat, group_size, scale="none").view_as(rewards)
    if baseline == "rloo":
        if group_size < 2:
            raise ValueError("the leave-one-out baseline needs group_size >= 2")
        return group_size / (group_size - 1) * group_advantages(flat, group_size, scale="none").view_as(rewards)
    if baseline == "grpo":
        return group_advantages(flat, group_size, scale="group").view_as(rewards)
    raise ValueError(f"unknown baseline {baseline!r}; known: {', '.join(BASELINES + ('learned_critic',))}")


def _sample_groups(logits, success_prob, prompts, group_size, reward_offset, gen):
    pi = torch.softmax(logits[prompts], -1)  # (N, K)
    answers = torch.multinomial(pi, group_size, replacement=True, generator=gen)  # (N, G)
    q = success_prob[prompts].gather(1, answers)  # (N, G)
    rewards = (torch.rand(q.shape, generator=gen, dtype=q.dtype) < q).to(q.dtype) + reward_offset  # (N, G)
    score = torch.nn.functional.one_hot(answers, logits.shape[1]).to(pi.dtype) - pi[:, None, :]  # (N, G, K)
    return pi, rewards, score


def bandit_gradient_samples(
    logits: torch.Tensor,
    success_prob: torch.Tensor,
    *,
    group_size: int = 8,
    n_trials: int = 4000,
    baselines: Sequence[str] = BASELINES,
    reward_offset: float = 0.0,
    critic_noise: float = 0.3,
    seed: int = 0,
) -> dict[str, Any]:
    """Many one-prompt REINFORCE gradient estimates, the same samples for every baseline.

    Trial ``n`` draws a prompt uniformly, ``G = group_size`` answers from the policy and Bernoulli rewards
    (plus the constant ``reward_offset``).  Its gradient is non-zero only in the prompt's row:
    ``g = (1/G) sum_i A_i (onehot(y_i) - pi)``, the score function of a softmax.  Returns
    ``prompts (n,)``, ``rows {baseline: (n, K)}`` and ``true_grad (P, K)``.
    """
    gen = _generator(seed)
    prompts = torch.randint(logits.shape[0], (n_trials,), generator=gen)  # (n,)
    pi, rewards, score = _sample_groups(logits, success_prob, prompts, group_size, reward_offset, gen)
    value = (pi * success_prob[prompts]).sum(-1) + reward_offset  # (n,) true V(x) incl. the offset
    blind = float((torch.softmax(logits, -1) * success_prob).sum(-1).mean()) + reward_offset
    rows = {}
    for b in baselines:
        w = _weights(rewards, b, value, blind, critic_noise=critic_noise, group_size=group_size, gen=gen)  # (n, G)
        rows[b] = (w[..., None] * score).mean(1)  # (n, K)
    return {"prompts": prompts, "rows": rows, "true_grad": bandit_true_gradient(logits, success_prob),
            "rewards": rewards}


def gradient_variance(
    logits: torch.Tensor,
    success_prob: torch.Tensor,
    *,
    group_size: int = 8,
    n_trials: int = 4000,
    baselines: Sequence[str] = BASELINES,
    reward_offset: float = 0.0,
    critic_noise: float = 0.3,
    seed: int = 0,
) -> dict[str, Any]:
    """Measured quality of each baseline's gradient estimate (one prompt per estimate).

    The estimate of trial ``n`` is ``g_n`` placed in its prompt's row; with the prompt drawn uniformly its
    mean is the full gradient ``dJ/dlogits`` of the mean pass rate.  Per baseline ``(B,)``:

    * ``scale`` = ``<E g, grad J> / |grad J|^2`` (1 for an unbiased estimator, ``(G-1)/G`` for the group mean),
    * ``cosine`` between ``E g`` and ``grad J`` (1 when the estimator points the right way on average),
    * ``variance`` = ``E |g - E g|^2``, and ``relative_variance`` = variance / ``|E g|^2``
      (noise-to-signal, fair between estimators of different scale),
    * ``wrong_direction`` = share of single estimates with ``<g, grad J> < 0``,
    * ``zero_fraction`` = share of estimates that are exactly zero (a group whose advantages all vanish).
    """
    s = bandit_gradient_samples(logits, success_prob, group_size=group_size, n_trials=n_trials,
                                baselines=baselines, reward_offset=reward_offset, critic_noise=critic_noise,
                                seed=seed)
    true = s["true_grad"]  # (P, K)
    out: dict[str, Any] = {"baselines": list(baselines), "true_grad": true, "group_size": group_size,
                           "reward_offset": reward_offset, "critic_noise": critic_noise, "n_trials": n_trials}
    keys = ("scale", "cosine", "variance", "relative_variance", "wrong_direction", "zero_fraction", "mean_grad")
    res: dict[str, list] = {k: [] for k in keys}
    tn2 = float((true**2).sum())
    for b in baselines:
        rows = s["rows"][b]  # (n, K) the non-zero row of each estimate
        mean = torch.zeros_like(true).index_add_(0, s["prompts"], rows) / n_trials  # (P, K)
        second = float((rows**2).sum(-1).mean())  # E |g|^2
        var = second - float((mean**2).sum())
        dots = (rows * true[s["prompts"]]).sum(-1)  # (n,) <g_n, grad J>
        res["scale"].append(float((mean * true).sum()) / tn2)
        res["cosine"].append(float((mean * true).sum()) / math.sqrt(tn2 * float((mean**2).sum()) + 1e-300))
        res["variance"].append(var)
        res["relative_variance"].append(var / float((mean**2).sum()))
        res["wrong_direction"].append(float((dots < 0).double().mean()))
        res["zero_fraction"].append(float((rows == 0).all(-1).double().mean()))
        res["mean_grad"].append(mean)
    for k in keys[:-1]:
        out[k] = torch.tensor(res[k], dtype=torch.float64)
    out["mean_grad"] = torch.stack(res["mean_grad"])
    return out


def variance_sweep(
    logits: torch.Tensor,
    success_prob: torch.Tensor,
    *,
    vary: str = "reward_offset",
    values: Sequence[float] = (0.0, 0.5, 1.0, 2.0, 4.0),
    baselines: Sequence[str] = ("none", "critic", "group_mean", "rloo"),
    **fixed: Any,
) -> dict[str, Any]:
    """``gradient_variance`` over a range of ``vary`` (``reward_offset``, ``group_size`` or ``critic_noise``).

    Returns ``values (V,)`` and ``relative_variance``, ``scale``, ``wrong_direction`` of shape ``(V, B)``.
    """
    if vary not in ("reward_offset", "group_size", "critic_noise"):
        raise ValueError(f"vary must be reward_offset, group_size or critic_noise, got {vary!r}")
    rel, scale, wrong = [], [], []
    for v in values:
        kw = dict(fixed)
        kw[vary] = int(v) if vary == "group_size" else float(v)
        d = gradient_variance(logits, success_prob, baselines=baselines, **kw)
        rel.append(d["relative_variance"])
        scale.append(d["scale"])
        wrong.append(d["wrong_direction"])
    return {"vary": vary, "values": torch.tensor([float(v) for v in values], dtype=torch.float64),
            "baselines": list(baselines), "relative_variance": torch.stack(rel), "scale": torch.stack(scale),
            "wrong_direction": torch.stack(wrong)}


def plot_gradient_variance(d: dict[str, Any]):
    """Bars: noise-to-signal ratio and share of wrong-direction estimates, per baseline."""
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(7.8, 3.4))
    labels = [_BASELINE_LABELS.get(b, b) for b in d["baselines"]]
    colors = [f"C{i}" for i in range(len(labels))]
    axes[0].barh(labels, d["relative_variance"].tolist(), color=colors)
    axes[0].set_xscale("log")
    axes[0].bar_label(axes[0].containers[0], fmt="%.3g", fontsize=8, padding=2)
    axes[0].set_xlim(right=1.8 * float(d["relative_variance"].max()))  # room for the value labels
    axes[0].xaxis.set_minor_formatter(plt.NullFormatter())  # the bars carry their values; no crowded minor labels
    axes[0].set_xlabel("relative variance  E|g - Eg|² / |Eg|²")
    axes[0].invert_yaxis()
    axes[1].barh(labels, d["wrong_direction"].tolist(), color=colors, label="wrong way")
    axes[1].barh(labels, d["zero_fraction"].tolist(), left=d["wrong_direction"].tolist(), color="0.8",
                 label="exactly zero")
    axes[1].set_xlabel("share of estimates:\nwrong way (colour), zero (grey)")
    axes[1].legend(fontsize=8, loc="lower right")
    axes[1].set_xlim(0, 0.6)
    axes[1].invert_yaxis()
    axes[1].set_yticklabels([])
    fig.suptitle(f"One-prompt REINFORCE estimates: G = {d['group_size']}, reward offset = {d['reward_offset']:g}, "
                 f"critic noise = {d['critic_noise']:g}", fontsize=10)
    fig.tight_layout()
    return fig


def plot_variance_sweep(d: dict[str, Any]):
    """Lines: relative variance against the swept quantity, one per baseline."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 3.4))
    for j, b in enumerate(d["baselines"]):
        ax.plot(d["values"].tolist(), d["relative_variance"][:, j].tolist(), "o-", label=_BASELINE_LABELS.get(b, b))
    ax.set_yscale("log")
    if d["vary"] == "group_size":
        ax.set_xscale("log", base=2)
    ax.set_xlabel(d["vary"].replace("_", " "))
    ax.set_ylabel("relative variance")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def gradient_variance_widget(problem: dict[str, torch.Tensor] | None = None, n_trials: int = 3000):
    """Sliders ``group_size``, ``reward_offset``, ``critic_noise`` over :func:`gradient_variance`."""
    prob = problem if problem is not None else bandit_problem()

    def compute(group_size, reward_offset, critic_noise):
        return gradient_variance(prob["logits"], prob["success_prob"], group_size=group_size, n_trials=n_trials,
                                 reward_offset=reward_offset, critic_noise=critic_noise)

    return _interactive(plot_gradient_variance, compute,
                        group_size=_int_slider(8, 2, 32, 1, "group_size"),
                        reward_offset=_float_slider(0.0, 0.0, 5.0, 0.25, "reward_offset"),
                        critic_noise=_float_slider(0.3, 0.0, 2.0, 0.1, "critic_noise"))


def train_bandit(
    logits: torch.Tensor,
    success_prob: torch.Tensor,
    baseline: str,
    *,
    steps: int = 200,
    prompts_per_step: int = 4,
    group_size: int = 8,
    lr: float = 1.0,
    n_seeds: int = 16,
    reward_offset: float = 0.0,
    critic_noise: float = 0.3,
    critic_lr: float = 0.1,
    seed: int = 0,
) -> dict[str, torch.Tensor]:
    """Policy-gradient training of the tabular policy, ``n_seeds`` independent runs side by side.

    Each step samples ``prompts_per_step`` prompts x ``group_size`` answers per run and takes a plain
    gradient-ascent step ``logits += lr * g``.  ``baseline="learned_critic"`` keeps a table ``V(x)``
    (starting at 0) updated as ``V += critic_lr * (mean reward - V)`` for the prompts seen: a critic
    that has to learn.  Returns ``expected_reward (steps+1,)`` (mean over runs, true pass rate without
    the offset), ``per_seed (n_seeds, steps+1)`` and ``critic_error (steps+1,)``: the learned critic's mean
    absolute error (NaN for the other baselines).
    """
    gen = _generator(seed)
    n_prompts, n_answers = logits.shape
    theta = logits.unsqueeze(0).repeat(n_seeds, 1, 1).clone()  # (S, P, K)
    v_table = torch.zeros(n_seeds, n_prompts, dtype=logits.dtype)  # (S, P) the learned critic
    curve, err = [], []

    def record():
        pi = torch.softmax(theta, -1)
        true_v = (pi * success_prob).sum(-1)  # (S, P)
        curve.append(true_v.mean(-1))
        if baseline == "learned_critic":
            err.append((v_table - (true_v + reward_offset)).abs().mean())

    record()
    flat_theta = theta.view(n_seeds * n_prompts, n_answers)  # (S*P, K) a view: rows = (seed, prompt)
    for _ in range(steps):
        prompts = torch.randint(n_prompts, (n_seeds, prompts_per_step), generator=gen)  # (S, M)
        rows = (torch.arange(n_seeds)[:, None] * n_prompts + prompts).reshape(-1)  # (S*M,)
        pi, rewards, score = _sample_groups(flat_theta, success_prob.repeat(n_seeds, 1), rows, group_size,
                                            reward_offset, gen)  # (S*M, K), (S*M, G), (S*M, G, K)
        value = (pi * success_prob[prompts.reshape(-1)]).sum(-1) + reward_offset  # (S*M,)
        if baseline == "learned_critic":
            v = v_table.view(-1)[rows]  # (S*M,)
            w = rewards - v[:, None]
            v_table.view(-1).index_add_(0, rows, critic_lr * (rewards.mean(-1) - v))
        else:
            blind = float((torch.softmax(flat_theta, -1) * success_prob.repeat(n_seeds, 1)).sum(-1).mean()) \
                + reward_offset
            w = _weights(rewards, baseline, value, blind, critic_noise=critic_noise, group_size=group_size, gen=gen)
        grad = (w[..., None] * score).mean(1) / prompts_per_step  # (S*M, K)
        flat_theta.index_add_(0, rows, lr * grad)
        record()
    per_seed = torch.stack(curve, 1)  # (S, steps+1)
    critic_error = torch.stack(err) if err else torch.full((steps + 1,), float("nan"), dtype=logits.dtype)
    return {"expected_reward": per_seed.mean(0), "per_seed": per_seed, "critic_error": critic_error,
            "baseline": baseline}


def plot_training_curves(runs: Sequence[dict[str, torch.Tensor]]):
    """Mean true pass rate against step, one line (and a band of +-1 std over runs) per baseline."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.5, 3.6))
    for j, r in enumerate(runs):
        m = r["per_seed"].mean(0)
        s = r["per_seed"].std(0)
        x = list(range(m.numel()))
        ax.plot(x, m.tolist(), color=f"C{j}", label=_BASELINE_LABELS.get(r["baseline"], r["baseline"]))
        ax.fill_between(x, (m - s).tolist(), (m + s).tolist(), color=f"C{j}", alpha=0.15)
    ax.set_xlabel("step")
    ax.set_ylabel("expected pass rate (true)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


# ==================================================================================================
# 02 — group advantages
# ==================================================================================================

def advantage_distribution(group_size: int, p: float, *, scale: str = "group", eps: float = 1e-4,
                           unbiased_std: bool = True) -> dict[str, Any]:
    """Exact distribution of a completion's advantage when a group holds ``G`` Bernoulli(``p``) rewards.

    With binary rewards a group is summed up by ``k``, its number of correct completions
    (Binomial(G, p)).  For each ``k`` the two advantages (of a correct and a wrong completion) are
    computed **with** :func:`grpo_lessons.group_advantages` on a group of ``k`` ones and ``G - k`` zeros.
    Returns ``k (G+1,)``, ``prob_k (G+1,)``, ``adv_correct`` / ``adv_wrong (G+1,)`` (NaN where there is no
    such completion), ``values`` / ``mass``: the support and probabilities of the advantage of a random
    completion, ``p_zero_gradient`` (``p^G + (1-p)^G``), ``mean_abs``.
    """
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"pass rate p must be in [0, 1], got {p}")
    G = int(group_size)
    k = torch.arange(G + 1)
    groups = (torch.arange(G)[None, :] < k[:, None]).to(torch.float64)  # (G+1, G): row k = k ones, then zeros
    adv = group_advantages(groups.reshape(-1), G, scale=scale, eps=eps, unbiased_std=unbiased_std).view(G + 1, G)
    adv_correct = torch.where(k > 0, adv[:, 0], torch.full((G + 1,), float("nan"), dtype=adv.dtype))
    adv_wrong = torch.where(k < G, adv[:, -1], torch.full((G + 1,), float("nan"), dtype=adv.dtype))
    prob_k = torch.tensor([math.comb(G, int(j)) * p ** int(j) * (1 - p) ** (G - int(j)) for j in k],
                          dtype=torch.float64)  # (G+1,)
    # a random completion of the group is correct with probability k / G
    vals = torch.cat([adv_correct[1:], adv_wrong[:-1]])
    mass = torch.cat([prob_k[1:] * k[1:] / G, prob_k[:-1] * (G - k[:-1]) / G])
    order = torch.argsort(vals)
    vals, mass = vals[order], mass[order]
    # merge equal values (e.g. the zeros of k = 0 and k = G)
    uniq, inv = torch.unique(vals, return_inverse=True)
    merged = torch.zeros_like(uniq).index_add_(0, inv, mass)
    return {
        "group_size": G, "p": p, "scale": scale, "k": k, "prob_k": prob_k,
        "adv_correct": adv_correct, "adv_wrong": adv_wrong, "values": uniq, "mass": merged,
        "p_zero_gradient": zero_gradient_probability(p, G),
        "mean_abs": float((merged * uniq.abs()).sum()),
    }


def plot_advantage_distribution(d: dict[str, Any]):
    """Stem plot of the advantage of a random completion, with P(no gradient) in the title."""
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(7.8, 3.4))
    ax = axes[0]
    ax.stem(d["values"].tolist(), d["mass"].tolist(), basefmt=" ")
    ax.set_xlabel(f"advantage of one completion (scale={d['scale']!r})")
    ax.set_ylabel("probability")
    ax.set_title(f"G = {d['group_size']}, p = {d['p']:.2f}:  P(group gives no gradient) = {d['p_zero_gradient']:.3f}",
                 fontsize=9)
    ax = axes[1]
    k = d["k"].tolist()
    ax.plot(k, d["adv_correct"].tolist(), "o-", color="C2", label="correct completion")
    ax.plot(k, d["adv_wrong"].tolist(), "o-", color="C3", label="wrong completion")
    ax2 = ax.twinx()
    ax2.bar(k, d["prob_k"].tolist(), color="0.8", alpha=0.6, zorder=0)
    ax2.set_ylabel("P(c correct)", color="0.4")
    ax.set_zorder(ax2.get_zorder() + 1)
    ax.patch.set_visible(False)
    ax.axhline(0, color="k", lw=0.5)
    ax.set_xlabel("c = correct completions in the group")
    ax.set_ylabel("advantage")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def advantage_widget():
    """Sliders ``group_size``, ``p`` and a ``scale`` menu over :func:`advantage_distribution`."""
    return _interactive(plot_advantage_distribution,
                        lambda group_size, p, scale: advantage_distribution(group_size, p, scale=scale),
                        group_size=_int_slider(8, 2, 64, 1, "group_size"),
                        p=_float_slider(0.3, 0.0, 1.0, 0.01, "p"),
                        scale=_dropdown(["group", "none"], "group", "scale"))


def group_size_table(
    group_sizes: Sequence[int] = (2, 4, 8, 16, 32),
    pass_rates: Sequence[float] = (0.02, 0.05, 0.1, 0.2, 0.5, 0.8, 0.95),
    *,
    rollout_budget: int = 256,
) -> dict[str, Any]:
    """The chapter's group-size table in numbers; arrays ``(len(G), len(p))``.

    * ``p_zero`` — chance a group is all-correct or all-wrong, ``p^G + (1-p)^G``: no gradient.
    * ``p_any_correct`` — ``1 - (1-p)^G``: the group holds at least one success to learn from.
    * ``informative`` — expected informative groups in a batch of ``rollout_budget`` completions,
      ``(budget / G) (1 - p_zero)``: the same compute split into fewer, larger groups or more, smaller ones.
    * ``rollouts_per_informative`` — ``G / (1 - p_zero)``: completions generated per group that teaches.
    """
    G = torch.tensor([int(g) for g in group_sizes], dtype=torch.float64)[:, None]  # (nG, 1)
    p = torch.tensor([float(x) for x in pass_rates], dtype=torch.float64)[None, :]  # (1, np)
    p_zero = torch.tensor([[zero_gradient_probability(float(pp), int(gg)) for pp in p[0]] for gg in G[:, 0]],
                          dtype=torch.float64)
    informative = (rollout_budget / G) * (1 - p_zero)
    per_inf = torch.where(p_zero < 1, G / (1 - p_zero).clamp_min(1e-300), torch.full_like(p_zero, float("inf")))
    return {"group_sizes": G[:, 0], "pass_rates": p[0], "rollout_budget": rollout_budget, "p_zero": p_zero,
            "p_any_correct": 1 - (1 - p) ** G, "informative": informative, "rollouts_per_informative": per_inf}


def plot_zero_gradient(d: dict[str, Any] | None = None):
    """Left: P(no gradient) against p per G.  Right: informative groups per fixed rollout budget."""
    plt = _plt()
    fine = d is None or len(d["pass_rates"]) < 20
    gs = [2, 4, 8, 16, 32] if d is None else [int(g) for g in d["group_sizes"]]
    budget = 256 if d is None else d["rollout_budget"]
    ps = torch.linspace(0.005, 0.995, 199).tolist() if fine else d["pass_rates"].tolist()
    dd = group_size_table(gs, ps, rollout_budget=budget)
    fig, axes = plt.subplots(1, 2, figsize=(7.8, 3.4))
    for j, g in enumerate(gs):
        axes[0].plot(ps, dd["p_zero"][j].tolist(), label=f"G = {g}")
        axes[1].plot(ps, dd["informative"][j].tolist(), label=f"G = {g}")
    axes[0].set_xlabel("pass rate p")
    axes[0].set_ylabel("P(no gradient) = p^G + (1-p)^G")
    axes[0].legend(fontsize=8)
    axes[1].set_xlabel("pass rate p")
    axes[1].set_ylabel(f"informative groups per {budget} rollouts")
    fig.tight_layout()
    return fig


def group_push_by_successes(group_size: int, *, scales: Sequence[str] = ("group", "none")) -> dict[str, Any]:
    """How hard one group pushes, ``sum_i |A_i|``, against its number of successes ``k``; ``(G+1,)`` per scale.

    With the std division a group with one success out of G pushes as hard as a half-correct one (or harder);
    without it, nearly-solved and nearly-hopeless prompts push less.  (Dr. GRPO's difficulty argument, 05.)
    """
    out: dict[str, Any] = {"group_size": int(group_size), "k": torch.arange(group_size + 1)}
    for s in scales:
        d = advantage_distribution(group_size, 0.5, scale=s)
        k = d["k"].to(torch.float64)
        push = k * d["adv_correct"].nan_to_num(0).abs() + (group_size - k) * d["adv_wrong"].nan_to_num(0).abs()
        out[s] = push
    return out


def plot_group_push(d: dict[str, Any]):
    """The total |A| a group pushes with, against its number of correct completions, one line per scale."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 3.2))
    for s in [k for k in d if k not in ("group_size", "k")]:
        ax.plot(d["k"].tolist(), d[s].tolist(), "o-", label=f"scale={s!r}")
    ax.set_xlabel(f"correct completions c out of G = {d['group_size']}")
    ax.set_ylabel("sum_i |A_i| of the group")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def scaling_comparison(rewards, group_size: int, scales: Sequence[str] = ("group", "batch", "none")) -> dict[str, Any]:
    """Advantages of the same rewards under each ``scale`` of :func:`group_advantages`; ``{scale: (N,)}``."""
    r = torch.as_tensor(rewards, dtype=torch.float64)
    out: dict[str, Any] = {"rewards": r, "group_size": group_size, "scales": list(scales)}
    for s in scales:
        out[s] = group_advantages(r, group_size, scale=s)
    return out


def plot_scaling_comparison(d: dict[str, Any]):
    """Each completion's advantage under each scale (group, batch, ...), side by side as bars."""
    plt = _plt()
    n = d["rewards"].numel()
    G = d["group_size"]
    fig, ax = plt.subplots(figsize=(8, 3.2))
    width = 0.8 / len(d["scales"])
    for j, s in enumerate(d["scales"]):
        ax.bar([i + (j - (len(d["scales"]) - 1) / 2) * width for i in range(n)], d[s].tolist(), width,
               label=f"scale={s!r}")
    for b in range(1, n // G):
        ax.axvline(b * G - 0.5, color="k", lw=0.6, ls="--")
    ax.axhline(0, color="k", lw=0.5)
    ax.set_xticks(range(n), [f"{float(x):g}" for x in d["rewards"]], fontsize=8)
    ax.set_xlabel("reward of each completion (dashed lines separate prompts)")
    ax.set_ylabel("advantage")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
