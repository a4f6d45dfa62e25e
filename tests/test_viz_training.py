"""Training curves: the pure function behind the plot, the PNG, the live-plot callback outside a notebook."""

import math

import pytest

from grpo_lessons.training.plots import LivePlot, curves, save_plot, smooth

HISTORY = [
    {"step": 0, "accuracy": 0.3, "reward_mean": None, "kl": None},
    {"step": 1, "reward_mean": 0.1, "kl": "", "accuracy": None, "completion_len": 10.0},
    {"step": 2, "reward_mean": 0.5, "kl": float("nan"), "accuracy": 0.6, "completion_len": 8.0},
]


def test_curves_skip_missing_values_per_series():
    c = curves(HISTORY)
    assert c["accuracy"] == ([0, 2], [0.3, 0.6])
    assert c["reward_mean"] == ([1, 2], [0.1, 0.5])
    assert "kl" not in c  # empty and NaN only
    assert c["reward_mean_smooth"][0] == [1, 2]


def test_smooth_is_a_debiased_ema():
    assert smooth([2.0, 2.0, 2.0]) == pytest.approx([2.0, 2.0, 2.0])
    s = smooth([0.0, 1.0], alpha=0.5)
    assert s[0] == 0.0 and math.isclose(s[1], 0.5 / 0.75)
    with pytest.raises(ValueError):
        smooth([1.0], alpha=0.0)


def test_save_plot_writes_a_png(tmp_path):
    path = save_plot(HISTORY, tmp_path / "c.png", title="t")
    assert open(path, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    save_plot([], tmp_path / "empty.png")  # nothing logged yet: still a figure


def test_live_plot_outside_a_notebook_prints(capsys):
    live = LivePlot(every=2)
    live(HISTORY[:2])
    assert capsys.readouterr().out == ""  # step 1: not a multiple of every
    live(HISTORY)
    assert "step 2" in capsys.readouterr().out and live.history == HISTORY
