"""Every figure the notebooks draw from the package reads at the course site's width.

The site shows a notebook's figures in a content column about 760 px wide; a PNG wider than that is scaled down
to fit, and its labels with it (a 1670 px figure shown at 763 px has 4 px letters).  Each figure is drawn here as
the inline backend saves it (100 dpi, ``bbox_inches="tight"``) with small inputs, and must be at most
``MAX_WIDTH_PX`` wide with no visible text smaller than ``MIN_FONT_PT``.  A widget is measured through the figure
it draws on first display.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path

import pytest

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.text import Text  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
INLINE_DPI = 100  # matplotlib's default figure.dpi, which the inline backend keeps
MAX_WIDTH_PX = 800  # the site's content column is ~760 px: at most a 5 % shrink
MIN_FONT_PT = 8.0


def measure(fig) -> tuple[int, float, str]:
    """(width in px as the inline backend saves it, the smallest visible font size in pt, that text)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=INLINE_DPI, bbox_inches="tight")
    buf.seek(0)
    width = int.from_bytes(buf.getvalue()[16:20], "big")  # the PNG header's IHDR width
    renderer = fig.canvas.get_renderer()
    fig_box = fig.bbox
    texts = []
    for t in fig.findobj(Text):
        if not t.get_visible() or not t.get_text().strip():
            continue
        ax = t.axes
        if ax is not None and not ax.get_visible():
            continue
        box = t.get_window_extent(renderer)
        if box.width == 0 or not box.overlaps(fig_box):  # tick labels outside the view are not drawn
            continue
        texts.append((t.get_fontsize(), t.get_text()))
    smallest = min(texts, default=(float("inf"), ""))
    return width, smallest[0], smallest[1]


def _widget(make: Callable[[], object]):
    """The figure a widget draws on first display (its draw function calls plt.show, then closes it)."""
    shown = []

    def show(*args, **kwargs):
        shown.append(plt.gcf())

    real_show, real_close = plt.show, plt.close
    plt.show, plt.close = show, lambda *a, **k: None  # keep the figure open to measure it
    try:
        make()
    finally:
        plt.show, plt.close = real_show, real_close
    assert shown, "the widget drew no figure"
    return shown[-1]


def _committed_json(*parts):
    return json.loads((ROOT / "benchmarks" / "results" / Path(*parts)).read_text())


# --- one builder per figure the notebooks draw (small inputs; the notebooks' own arguments where they are cheap)

def _advantages():
    from grpo_lessons.course.viz import advantages as v

    prob = v.bandit_problem(n_prompts=4, n_answers=4, seed=0)
    logits, p = prob["logits"], prob["success_prob"]
    return {
        "advantages.plot_critic_memory": lambda: v.plot_critic_memory(v.critic_memory((0.5, 7.0, 70.0))),
        "advantages.plot_gradient_variance": lambda: v.plot_gradient_variance(
            v.gradient_variance(logits, p, group_size=4, n_trials=50, seed=0)),
        "advantages.plot_variance_sweep": lambda: v.plot_variance_sweep(
            v.variance_sweep(logits, p, vary="group_size", values=(2, 4, 8), n_trials=50, seed=0)),
        "advantages.plot_training_curves": lambda: v.plot_training_curves(
            [v.train_bandit(logits, p, b, steps=3, lr=20.0, reward_offset=1.0, n_seeds=2)
             for b in ("none", "group_mean")]),
        "advantages.plot_advantage_distribution": lambda: v.plot_advantage_distribution(
            v.advantage_distribution(8, 0.3)),
        "advantages.plot_zero_gradient": lambda: v.plot_zero_gradient(
            v.group_size_table((2, 4, 8, 16, 32), (0.02, 0.05, 0.1, 0.2, 0.5, 0.8, 0.95), rollout_budget=256)),
        "advantages.plot_scaling_comparison": lambda: v.plot_scaling_comparison(
            v.scaling_comparison([1.0, 0.0, 0.0, 1.0, 5.0, 4.0, 4.0, 5.0], 4,
                                 scales=("group", "batch", "batch_centered", "none"))),
        "advantages.plot_group_push": lambda: v.plot_group_push(v.group_push_by_successes(8)),
        "advantages.advantage_widget": lambda: _widget(v.advantage_widget),
        "advantages.gradient_variance_widget": lambda: _widget(lambda: v.gradient_variance_widget(prob, n_trials=50)),
    }


def _clipping():
    from grpo_lessons.course.viz import clipping as v

    return {
        "clipping.clip_widget": lambda: _widget(v.clip_widget),
        "clipping.plot_kl_estimators": lambda: v.plot_kl_estimators(
            v.kl_estimators(n_samples=500), v.kl_sweep((0.25, 1.0, 1.5), n_samples=500)),
        "clipping.kl_widget": lambda: _widget(v.kl_widget),
        "clipping.plot_clip_higher": lambda: v.plot_clip_higher(v.clip_higher_curves(0.2, 0.28, +1)),
        "clipping.clip_higher_widget": lambda: _widget(v.clip_higher_widget),
        "clipping.plot_gspo_ratios": lambda: v.plot_gspo_ratios(v.gspo_batch()),
        "clipping.gspo_widget": lambda: _widget(v.gspo_widget),
        "clipping.plot_noisy_sequence": lambda: v.plot_noisy_sequence(v.noisy_sequence_gradients()),
        "clipping.plot_sapo": lambda: v.plot_sapo(v.sapo_curves()),
        "clipping.sapo_widget": lambda: _widget(v.sapo_widget),
    }


def _length():
    from grpo_lessons.course.viz import length as v

    return {
        "length.plot_normalisation_weights": lambda: v.plot_normalisation_weights(
            v.normalisation_weights([4, 16, 64, 256], max_completion_length=512)),
        "length.normalisation_widget": lambda: _widget(v.normalisation_widget),
        "length.plot_length_weights": lambda: v.plot_length_weights(
            v.length_weight_curves(other_lengths=(64,) * 7, max_completion_length=512)),
        "length.length_weight_widget": lambda: _widget(v.length_weight_widget),
        "length.plot_length_drift": lambda: v.plot_length_drift(
            [v.length_drift("grpo", steps=3, seed=0), v.length_drift("dr_grpo", steps=3, seed=0)]),
        "length.plot_overlong_filter": lambda: v.plot_overlong_filter(
            v.overlong_filter_effect([5, 8, 8, 3], [False, True, True, False])),
        "length.plot_overlong_penalty": lambda: v.plot_overlong_penalty(v.overlong_penalty_curves(20480, 4096)),
        "length.overlong_widget": lambda: _widget(v.overlong_widget),
        "length.plot_zero_gradient_grid": lambda: v.plot_zero_gradient_grid(v.zero_gradient_grid()),
    }


def _lab():
    from grpo_lessons.course.viz import lab as v

    row = v.claim_experiment("dr_grpo_wrong_length", seeds=3)
    return {
        "lab.plot_claim": lambda: v.plot_claim(row, v.committed_row("dr_grpo_wrong_length")),
        "lab.plot_claim+sweep": lambda: v.plot_claim(row, None, v.committed_sweep("dr_grpo_wrong_length")
                                                     or [dict(row, knob="knob", value=1)]),
        "lab.plot_claim_curves": lambda: v.plot_claim_curves(v.claim_curves("dr_grpo_wrong_length", seed=0)),
        "lab.claim_widget": lambda: _widget(lambda: v.claim_widget("dr_grpo_wrong_length", seeds=2)),
    }


def _pairwise():
    from grpo_lessons.course.viz import pairwise as v

    return {
        "pairwise.plot_pair_gradient_weights": lambda: v.plot_pair_gradient_weights(
            v.pair_gradient_weights(length=10, epsilon=0.2)),
        "pairwise.pair_widget": lambda: _widget(v.pair_widget),
    }


def _offpolicy():
    from grpo_lessons.course.viz import offpolicy as v

    return {
        "offpolicy.plot_measured_mismatch": lambda: v.plot_measured_mismatch(v.load_measured_mismatch()),
        "offpolicy.mismatch_widget": lambda: _widget(v.mismatch_widget),
        "offpolicy.plot_vespo": lambda: v.plot_vespo(v.vespo_curves()),
        "offpolicy.vespo_widget": lambda: _widget(v.vespo_widget),
        "offpolicy.plot_trust_region": lambda: v.plot_trust_region(
            v.trust_region_grid(delta_tv=0.15, delta_kl=0.05, epsilon=0.2, sign=1.0),
            {"mu": [0.5, 0.01], "pi": [0.7, 0.05], "adv": [1.0, -1.0]}),
        "offpolicy.trust_region_widget": lambda: _widget(v.trust_region_widget),
        "offpolicy.cispo_widget": lambda: _widget(v.cispo_widget),
        "offpolicy.plot_scaling_fit": lambda: v.plot_scaling_fit(v.scaling_curve_data()),
        "offpolicy.scaling_widget": lambda: _widget(lambda: v.scaling_widget(v.scaling_curve_data())),
    }


def _rewards():
    from grpo_lessons.course.viz import rewards as v

    diversity = _committed_json("diversity", "result.json")
    verbalized = _committed_json("verbalized", "result.json")
    return {
        "rewards.plot_reward_hacking": lambda: v.plot_reward_hacking(v.reward_hacking_table(skill=0.4,
                                                                                             format_weight=0.5)),
        "rewards.reward_hacking_widget": lambda: _widget(v.reward_hacking_widget),
        "rewards.plot_gdpo_comparison": lambda: v.plot_gdpo_comparison(v.gdpo_comparison(scale=30.0, weight=1.0)),
        "rewards.gdpo_widget": lambda: _widget(v.gdpo_widget),
        "rewards.plot_gopo_comparison": lambda: v.plot_gopo_comparison(v.gopo_comparison("exp", 4.0, 0.0)),
        "rewards.gopo_widget": lambda: _widget(v.gopo_widget),
        "rewards.plot_entropy_bandit": lambda: v.plot_entropy_bandit(v.entropy_bandit(0.05, steps=5, seeds=1)),
        "rewards.entropy_widget": lambda: _widget(v.entropy_widget),
        "rewards.plot_diversity_table": lambda: v.plot_diversity_table(diversity["table"]),
        "rewards.plot_best_of_n": lambda: v.plot_best_of_n(
            diversity["best_of_n"], title="accuracy against N, 32 held-out prompts, 16 samples each"),
        "rewards.plot_verbalized": lambda: v.plot_verbalized(
            {k: {"parse_rate": s.get("parse_rate", 1.0), "within distinct-1": s["within_distinct_1"],
                 "returned distinct-1": s["returned_distinct_1"]} for k, s in verbalized["summary"].items()},
            keys=("parse_rate", "within distinct-1", "returned distinct-1")),
    }


def _study():
    from grpo_lessons.course.viz import study as v

    res = v.load_study()
    arms = [a for a in ("grpo", "dr_grpo", "dapo", "gspo", "2-grpo", "sapo") if a in res.arms]
    return {
        "study.plot_curves": lambda: v.plot_curves(res, arms, metrics=("accuracy", "completion_len", "entropy",
                                                                        "clip_frac")),
        "study.plot_curves(2 arms)": lambda: v.plot_curves(res, ["grpo", "dr_grpo"]),  # show_variant, notebooks 06-10
        "study.plot_curves(gdpo)": lambda: v.plot_curves(
            v.load_study(v.study_dir("gdpo_vs_grpo")),
            metrics=("reward_arithmetic_reward", "reward_brevity", "eval_completion_len", "accuracy")),
        "study.study_widget": lambda: _widget(lambda: v.study_widget(res, ["grpo", "gspo"], "clip_frac")),
    }


def _training():
    from grpo_lessons.training.plots import LivePlot, plot_training

    history = [{"step": s, "reward_mean": 0.1 * s, "accuracy": 0.3 + 0.01 * s if s % 2 == 0 else None,
                "kl": 0.001 * s, "completion_len": 10.0 + s, "clip_frac": 0.01, "loss": 0.1, "grad_norm": 1.0,
                "entropy": 0.5, "reward_std": 0.2, "frac_zero_std_groups": 0.1}
               for s in range(6)]

    return {
        "plots.plot_training": lambda: plot_training(history, title="SmolLM2-135M: GRPO on arithmetic"),
        # the figure LivePlot redraws in notebook 05 (and save_plot writes next to the CSV)
        "plots.LivePlot": lambda: plot_training(history, fig=LivePlot.new_figure(),
                                                title="SmolLM2-135M: GRPO on arithmetic"),
    }


GROUPS = (_advantages, _clipping, _length, _lab, _pairwise, _offpolicy, _rewards, _study, _training)


def _builders() -> dict[str, Callable]:
    out = {}
    for group in GROUPS:
        out.update(group())
    return out


@pytest.fixture(scope="module")
def builders():
    pytest.importorskip("ipywidgets")
    return _builders()


def _names() -> list[str]:
    import ast
    import inspect

    names = []
    for group in GROUPS:
        tree = ast.parse(inspect.getsource(group).lstrip())
        for node in ast.walk(tree):
            if isinstance(node, ast.Dict):
                names += [k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)
                          and "." in k.value]
    return names


@pytest.mark.parametrize("name", _names())
def test_figure_reads_at_the_site_width(builders, name):
    fig = builders[name]()
    try:
        width, font, text = measure(fig)
    finally:
        plt.close("all")
    assert width <= MAX_WIDTH_PX, (f"{name}: {width} px wide at {INLINE_DPI} dpi; the site shows it at ~760 px, "
                                   f"scaling its text by {760 / width:.2f}")
    assert font >= MIN_FONT_PT, f"{name}: text {text!r} at {font} pt, below {MIN_FONT_PT} pt"


def test_the_measure_sees_a_wide_strip_and_small_text():
    """The yardstick itself: a 1 x 4 strip of 4.2-inch panels fails both bounds, a 2 x 2 grid at 8 inches passes."""
    fig, axes = plt.subplots(1, 4, figsize=(16.8, 3.3))  # the study's curves as they were
    axes[0].legend(handles=axes[0].plot([0, 1], label="grpo"), fontsize=7)
    fig.tight_layout()
    width, font, _ = measure(fig)
    assert width > 1600 and font == 7
    fig, axes = plt.subplots(2, 2, figsize=(7.8, 5.6))
    axes[0, 0].set_title("accuracy", fontsize=9)
    fig.tight_layout()
    width, font, _ = measure(fig)
    assert width <= MAX_WIDTH_PX and font >= 9
    plt.close("all")


def test_every_plot_function_the_notebooks_call_is_measured():
    """A figure a notebook draws through the package, and not listed here, would escape the size check."""
    import re

    called = set()
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            if cell["cell_type"] == "code":
                called |= set(re.findall(r"\b((?:plot_|\w+_widget\b)\w*)\(", "".join(cell["source"])))
    measured = {n.split(".", 1)[1].split("(")[0].split("+")[0] for n in _names()}
    missing = sorted(c for c in called if c not in measured)
    assert not missing, f"figures the notebooks draw that this test does not measure: {missing}"
