"""2-GRPO's pair widgets (notebook 09) and the variant-against-GRPO comparison (06-10): pure functions, no display."""

import math

import pytest
import torch

from grpo_lessons.course.viz import comparison, pairwise


def _controls(w):
    return {c.description for c in w.children if getattr(c, "description", "")}


# ----------------------------------------------------------------------------- 09 2-GRPO

def test_pair_advantage_table():
    t = pairwise.pair_advantage_table((0.0, 1.0, 10.0))
    rows = {r[0]: r for r in t["rows"]}
    assert rows[0.0][1:] == (0.0, 0.0, 0.0, 0.0)
    assert rows[1.0][1] == pytest.approx(0.70701, abs=1e-5) and rows[1.0][2] == -rows[1.0][1]
    assert rows[10.0][3] == pytest.approx(1.0, abs=1e-4)  # population std: the paper's +-1
    assert rows[1.0][4] == pytest.approx(rows[1.0][1], abs=1e-12)


def test_pair_gradient_weights():
    d = pairwise.pair_gradient_weights(length=10, epsilon=0.2)
    delta = d["delta"]
    i0 = delta.abs().argmin()
    c = d["c"]
    assert d["two_grpo"][i0].item() == pytest.approx(c / 2 / 10)  # (c/2) / |o| at r = 1
    assert d["chapter"][i0].item() == pytest.approx(d["two_grpo"][i0].item())  # beta = c/|o| matches on policy
    beyond = delta > math.log(1.2) + 1e-9
    assert (d["two_grpo"][beyond] == 0).all() and (d["chapter"][beyond] > 0).all()  # clip vs sigmoid
    inside = (delta < math.log(1.2) - 1e-9)
    assert torch.allclose(d["two_grpo"][inside], c / 20 * torch.exp(delta[inside]))
    assert (d["chapter"].diff() < 0).all()  # the sigmoid weight decays smoothly as the margin grows
    pairwise.plot_pair_gradient_weights(d)
    w = pairwise.pair_widget()
    assert {"|o|", "epsilon", "beta"} <= _controls(w)


# ----------------------------------------------------------------------------- the comparison cell (no training)

def test_comparison_configs_keep_the_rollout_budget():
    cfg = comparison.comparison_configs(["grpo", "dapo", "2-grpo"], group_size=4, prompts_per_step=4, steps=2, seed=3)
    for v, c in cfg.items():
        assert c["group_size"] * c["prompts_per_step"] == 16
        assert c["steps"] == 2 and c["seed"] == 3 and c["variant"] == v
    assert (cfg["2-grpo"]["group_size"], cfg["2-grpo"]["prompts_per_step"]) == (2, 8)
    assert (cfg["dapo"]["group_size"], cfg["dapo"]["prompts_per_step"]) == (4, 4)  # not the paper's G = 16
    with pytest.raises(ValueError):
        comparison.comparison_configs(["no_such_variant"])
    with pytest.raises(ValueError):
        comparison.comparison_configs(["2-grpo"], group_size=3, prompts_per_step=1)


def test_comparison_summary_and_plot_on_fake_histories():
    hist = {
        "grpo": [{"step": 0, "reward_mean": None, "accuracy": 0.1},
                 {"step": 1, "reward_mean": 0.2, "clip_frac": 0.0, "loss": 1.0},
                 {"step": 2, "reward_mean": 0.4, "clip_frac": None, "loss": 3.0, "accuracy": 0.3}],
        "sapo": [{"step": 1, "reward_mean": 0.5, "clip_frac": None}],
    }
    s = comparison.comparison_summary(hist, keys=("reward_mean", "clip_frac", "loss"))
    assert s["grpo"]["steps"] == 2 and s["grpo"]["reward_mean"] == pytest.approx(0.3)
    assert s["grpo"]["clip_frac"] == 0.0 and s["grpo"]["loss"] == 2.0
    assert (s["grpo"]["accuracy_first"], s["grpo"]["accuracy_last"]) == (0.1, 0.3)
    assert s["sapo"]["clip_frac"] is None and s["sapo"]["accuracy_first"] is None
    comparison.plot_comparison(hist)
