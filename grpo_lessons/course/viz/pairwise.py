"""Widgets and plots for 2-GRPO, notebook ``09_two_grpo``: pair advantages and the gradient weight of a
winner token under 2-GRPO against the chapter's pairwise (DPO-like) loss.

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

from grpo_lessons.core.advantages import group_advantages
from grpo_lessons.core.pairwise import pair_advantage
from ._common import _plt, _interactive, _int_slider, _float_slider

__all__ = [
    "pair_advantage_table", "pair_gradient_weights", "plot_pair_gradient_weights", "pair_widget",
]


# ==================================================================================================
# 09 — 2-GRPO
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
    from grpo_lessons.core.pairwise import chapter_pair_loss, pairwise_grpo_loss

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
    """A pair's gradient weight against its log-ratio margin: 2-GRPO beside the chapter's DPO-style form."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 3.4))
    x = d["delta"].tolist()
    ax.plot(x, d["two_grpo"].tolist(), color="C0", lw=2.5, label="2-GRPO (clipped, constant a)")
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
