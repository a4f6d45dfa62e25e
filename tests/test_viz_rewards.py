"""The pure functions behind the widgets of notebooks 04 and 15-18 (no display needed)."""

import math

import pytest
import torch

from grpo_lessons.core.advantages import group_advantages
from grpo_lessons.course.viz import rewards as viz


def test_reward_hacking_table_by_hand():
    d = viz.reward_hacking_table(skill=0.3, format_weight=0.4)
    # rows: honest untagged, honest tagged, always '0' in tags (5% right), empty tags
    expect = torch.tensor([[0.0, 0.3, 0.3], [1.0, 0.7, 0.42], [1.0, 0.45, 0.07], [0.0, 0.0, 0.0]], dtype=torch.float64)
    assert torch.allclose(d["expected"], expect)
    assert d["best"][d["designs"][0]] == "honest, in tags = tags, always '0'"  # format alone cannot tell them apart
    assert d["best"][d["designs"][2]] == "honest, in tags"
    # the gamed policy beats the honest untagged one under the sum exactly when w > p - 0.05
    for w, wins in ((0.24, False), (0.26, True)):
        e = viz.reward_hacking_table(skill=0.3, format_weight=w)["expected"]
        assert bool(e[2, 1] > e[0, 1]) is wins
    with pytest.raises(ValueError):
        viz.reward_hacking_table(skill=1.5)


def test_two_reward_batch_and_gdpo_comparison():
    r = viz.two_reward_batch(10, 4, scale=50.0, seed=1)
    assert r.shape == (40, 2) and set(r[:, 0].tolist()) <= {0.0, 1.0} and 0 <= float(r[:, 1].min()) <= float(r[:, 1].max()) <= 50
    d = viz.gdpo_comparison(scale=100.0, weight=1.0)
    summed = d["rewards"][:, 0] + d["rewards"][:, 1]
    assert torch.allclose(d["advantages"]["sum-then-normalise"], group_advantages(summed, 8))
    # the wide reward drowns correctness in the sum, not in GDPO
    assert d["GDPO"]["corr_correct"] > 0.6 and abs(d["sum-then-normalise"]["corr_correct"]) < 0.2
    # GDPO does not depend on the second reward's units (up to the 1e-4 in the denominators)
    a1 = viz.gdpo_comparison(scale=10.0)["advantages"]["GDPO"]
    a2 = viz.gdpo_comparison(scale=1000.0)["advantages"]["GDPO"]
    assert torch.allclose(a1, a2, atol=1e-3)


def test_distort_is_increasing_and_gopo_ignores_it():
    x = torch.linspace(0.01, 1, 50, dtype=torch.float64)
    for kind in viz.DISTORTIONS:
        y = viz.distort(x, kind, 3.0)
        assert bool((y[1:] > y[:-1]).all()), kind
    with pytest.raises(ValueError):
        viz.distort(x, "log")
    d = viz.gopo_comparison("exp", 4.0, 0.0)
    assert d["GOPO"]["drift"] == 0.0 and d["GRPO"]["drift"] > 0.1
    assert math.isclose(d["GOPO"]["spearman_true"], 1.0, abs_tol=1e-12)
    assert d["GOPO"]["max_abs"] == pytest.approx(2.0)
    noisy = viz.gopo_comparison("identity", 1.0, 0.5)
    assert noisy["GOPO"]["spearman_true"] < 1.0


def test_spearman_by_hand():
    assert viz.spearman(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([10.0, 20.0, 30.0])) == pytest.approx(1.0)
    assert viz.spearman(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([3.0, 2.0, 1.0])) == pytest.approx(-1.0)
    # ties get average ranks: [1, 1, 2] -> ranks [0.5, 0.5, 2]
    assert viz.spearman(torch.tensor([1.0, 1.0, 2.0]), torch.tensor([0.0, 1.0, 2.0])) == pytest.approx(math.sqrt(3) / 2)


def test_entropy_bandit_directions():
    d = viz.entropy_bandit(0.1, steps=60, seeds=2)
    for m in viz.ENTROPY_MODES:
        assert len(d[m]["entropy"]) == 61
        assert d[m]["p_correct"][-1] > d[m]["p_correct"][0]  # every variant still learns the task
    # without a bonus GRPO narrows onto one right answer; both bonuses keep more entropy
    assert d["none"]["entropy_correct"][-1] < d["none"]["entropy_correct"][0]
    assert d["loss"]["entropy"][-1] > d["none"]["entropy"][-1]
    assert d["reward"]["entropy"][-1] > d["none"]["entropy"][-1]
    # alpha = 0: all three are the same algorithm, step for step
    z = viz.entropy_bandit(0.0, steps=10, seeds=1)
    assert torch.allclose(z["none"]["entropy"], z["loss"]["entropy"]) and torch.allclose(z["none"]["entropy"], z["reward"]["entropy"])
    with pytest.raises(ValueError):
        viz.entropy_bandit(0.1, modes=("bonus",))


def test_plots_and_widgets_build(monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    monkeypatch.setattr(plt, "show", lambda *a, **k: None)
    figs = [viz.plot_reward_hacking(viz.reward_hacking_table()), viz.plot_gdpo_comparison(viz.gdpo_comparison()),
            viz.plot_gopo_comparison(viz.gopo_comparison()),
            viz.plot_entropy_bandit(viz.entropy_bandit(0.05, steps=5, seeds=1)),
            viz.plot_best_of_n({"base": {"n": [1, 2, 4], "verifier": [0.2, 0.3, 0.4], "pass_at_k": [0.2, 0.3, 0.4],
                                         "confidence": [0.2, 0.25, 0.3], "majority": [0.2, 0.2, 0.25]}}),
            viz.plot_diversity_table([{"method": "a", "distinct_2": 0.3, "pass@1": 0.2},
                                      {"method": "b", "distinct_2": 0.1, "pass@1": 0.4}]),
            viz.plot_verbalized({"direct": {"distinct_1": 0.3}, "verbalized": {"distinct_1": 0.5, "parse_rate": 0.2}})]
    assert all(f is not None for f in figs)
    plt.close("all")
    for make in (viz.reward_hacking_widget, viz.gdpo_widget, viz.gopo_widget):
        w = make()
        assert w.result is not None
        for child in w.children[:-1]:
            assert int(child.style.description_width.removesuffix("px")) >= 7 * len(child.description)
    plt.close("all")
