"""The pure functions behind the widgets of notebooks 06-10, and the widgets' construction (no display)."""

import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from grpo_lessons.viz import variants as vz  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _controls(w):
    return {c.description for c in w.children if getattr(c, "description", "")}


# ----------------------------------------------------------------------------- 05

def test_length_weight_curves_closed_forms():
    d = vz.length_weight_curves([1, 4, 64, 256], other_lengths=(64,) * 7, max_completion_length=512)
    ls = d["lengths"]
    B, L = 8, 512
    assert torch.allclose(d["per_token"]["grpo"], 1 / (B * ls), rtol=1e-6)
    assert torch.allclose(d["per_sequence"]["grpo"], torch.full_like(ls, 1 / B), rtol=1e-6)
    assert torch.allclose(d["per_token"]["dapo"], 1 / (ls + 7 * 64), rtol=1e-6)
    assert torch.allclose(d["per_token"]["bnpo"], d["per_token"]["dapo"])
    assert torch.allclose(d["per_token"]["dr_grpo"], torch.full_like(ls, 1 / (B * L)), rtol=1e-6)
    assert torch.allclose(d["per_sequence"]["dr_grpo"], ls / (B * L), rtol=1e-6)
    # a 1-token answer's token weighs 256x a 256-token answer's token under grpo, the same under dr_grpo
    assert d["per_token"]["grpo"][0] / d["per_token"]["grpo"][-1] == pytest.approx(256)
    with pytest.raises(ValueError):
        vz.length_weight_curves([600], max_completion_length=512)
    vz.plot_length_weights(d)


def test_length_drift_grpo_lengthens_wrong_answers_dr_grpo_does_not():
    grpo = vz.length_drift("grpo", steps=60, seed=0)
    dr = vz.length_drift("dr_grpo", steps=60, seed=0)
    w0 = grpo["expected_length_wrong"][0].item()
    assert w0 == pytest.approx((1 - (1 - 1 / 16) ** 64) * 16, rel=1e-9)  # truncated geometric at the start
    assert grpo["expected_length_wrong"][-1] > 1.8 * w0  # wrong answers grow longer under 1/|o|
    assert grpo["expected_length_right"][-1] < 0.5 * grpo["expected_length_right"][0]  # right ones shorter
    assert abs(dr["expected_length_wrong"][-1] / w0 - 1) < 0.3  # no systematic drift under the constant
    assert abs(dr["expected_length_right"][-1] / dr["expected_length_right"][0] - 1) < 0.3
    again = vz.length_drift("grpo", steps=5, seed=0)
    assert torch.equal(again["expected_length_wrong"], grpo["expected_length_wrong"][:6])  # seeded
    vz.plot_length_drift([grpo, dr])


def test_length_weight_widget_constructs():
    w = vz.length_weight_widget()
    assert {"other len", "B", "L"} <= _controls(w)
    assert w.result["batch_size"] == 8


# ----------------------------------------------------------------------------- 06

def test_clip_higher_curves():
    d = vz.clip_higher_curves(0.2, 0.28, +1)
    r, g = d["ratio"], d["gradient"]
    assert (g[r > 1.28 + 1e-9] == 0).all() and (g[(r < 1.28 - 1e-9)] == 1).all()
    assert (d["gradient_sym"][r > 1.2 + 1e-9] == 0).all()
    lo, hi = d["extra_room"]
    assert lo == pytest.approx(1.2, abs=3e-3) and hi == pytest.approx(1.28, abs=3e-3)
    n = vz.clip_higher_curves(0.2, 0.28, -1)
    assert n["extra_room"] is None  # the upper bound never binds for A < 0
    assert torch.equal(n["gradient"], n["gradient_sym"])
    assert (n["gradient"][n["ratio"] < 0.8 - 1e-9] == 0).all() and (n["gradient"][n["ratio"] > 0.8 + 1e-9] == -1).all()
    with pytest.raises(ValueError):
        vz.clip_higher_curves(sign=0)
    vz.plot_clip_higher(d)


def test_reachable_probability_paper_example():
    got = vz.reachable_probability([0.01, 0.9], 0.2)
    assert got.tolist() == pytest.approx([0.012, 1.0])
    assert vz.reachable_probability(0.01, 0.28).item() == pytest.approx(0.0128)


def test_overlong_penalty_curves():
    d = vz.overlong_penalty_curves(20480, 4096, n=11, beyond=1.0)  # lengths 0, 2048, ..., 20480
    assert d["paper"].tolist() == pytest.approx([0] * 9 + [-0.5, -1.0])
    assert d["chapter"][2].item() == pytest.approx(-(4096 - 4096) / 16384)
    assert d["chapter"][4].item() == pytest.approx(-(8192 - 4096) / 16384)
    assert d["onset_paper"] == 16384 and d["onset_chapter"] == 4096
    big = vz.overlong_penalty_curves(20480, 4096, n=6, beyond=1.25)
    assert big["paper"][-1] == -1 and big["chapter"][-1] < -1  # the chapter's keeps falling past L_max
    vz.plot_overlong_penalty(d)


def test_zero_gradient_grid():
    d = vz.zero_gradient_grid([0.0, 0.1, 0.5, 1.0], group_sizes=(2, 8))
    assert d["zero_share"][0].tolist() == pytest.approx([1.0, 0.82, 0.5, 1.0])
    assert d["zero_share"][1, 2].item() == pytest.approx(2 / 256)
    assert d["extra_per_useful"][0, 2].item() == pytest.approx(1.0)  # q = 1/2: one extra group per kept one
    assert math.isinf(d["extra_per_useful"][0, 0].item())
    vz.plot_zero_gradient_grid(vz.zero_gradient_grid())


def test_overlong_filter_effect():
    d = vz.overlong_filter_effect([5, 8, 8, 3], [False, True, True, False])
    assert d["tokens_removed"] == 16 and d["share_removed"] == pytest.approx(16 / 24)
    assert d["completion_weight_after"].tolist() == pytest.approx([5 / 8, 0, 0, 3 / 8])  # dapo token mean
    assert d["completion_weight_before"].tolist() == pytest.approx([5 / 24, 8 / 24, 8 / 24, 3 / 24])
    with pytest.raises(ValueError):
        vz.overlong_filter_effect([1, 2], [True])
    vz.plot_overlong_filter(d)


def test_clip_higher_and_overlong_widgets_construct():
    w = vz.clip_higher_widget()
    assert {"eps_low", "eps_high", "sign"} <= _controls(w) and w.result["upper"] == pytest.approx(1.28)
    w = vz.overlong_widget()
    assert {"L_max", "L_cache", "factor"} <= _controls(w) and w.result["onset_paper"] == 16384


# ----------------------------------------------------------------------------- 07

def test_gspo_batch_sequence_ratio_is_the_masked_mean_and_clips_less():
    d = vz.gspo_batch(token_noise=0.05, seed=0)
    m = d["mask"]
    assert torch.allclose(d["seq_log_ratio"], (d["log_ratio"] * m).sum(-1) / m.sum(-1))
    assert d["token_clip_grpo_range"] == 0.0  # 5% noise never leaves 1 +- 0.2
    assert d["token_clip_gspo_range"] > 0.4  # token ratios at GSPO's tiny range: almost every binding-side token
    assert d["seq_clip_gspo_range"] < d["token_clip_gspo_range"] / 2  # averaging shrinks the spread
    assert torch.equal(d["seq_clipped"].double().mean(), torch.tensor(d["seq_clip_gspo_range"], dtype=torch.float64))
    # spread of log s_i shrinks like 1/sqrt(|o|)
    big = vz.gspo_batch(lengths=(16,) * 200 + (256,) * 200, token_noise=0.05, seed=1)
    s16, s256 = big["seq_log_ratio"][:200].std(), big["seq_log_ratio"][200:].std()
    assert (s16 / s256).item() == pytest.approx(4.0, rel=0.15)
    vz.plot_gspo_ratios(d)


def test_noisy_sequence_gradients():
    d = vz.noisy_sequence_gradients()
    assert d["max_over_median"]["grpo"] == pytest.approx(math.exp(3.0), rel=1e-3)  # weight r = e^3 on an outlier
    assert d["max_over_median"]["gspo"] == pytest.approx(1.0)  # every token of the sequence weighs the same
    assert d["outlier_share"]["gspo"] == pytest.approx(3 / 200)
    assert d["outlier_share"]["grpo"] > 10 * d["outlier_share"]["gspo"]
    assert d["s_long"] == pytest.approx(math.exp(9 / 200), rel=1e-3)
    vz.plot_noisy_sequence(d)


def test_gspo_widget_constructs():
    w = vz.gspo_widget()
    assert {"noise", "seed"} <= _controls(w) and "seq_clip_gspo_range" in w.result


# ----------------------------------------------------------------------------- 08

def test_pair_advantage_table():
    t = vz.pair_advantage_table((0.0, 1.0, 10.0))
    rows = {r[0]: r for r in t["rows"]}
    assert rows[0.0][1:] == (0.0, 0.0, 0.0, 0.0)
    assert rows[1.0][1] == pytest.approx(0.70701, abs=1e-5) and rows[1.0][2] == -rows[1.0][1]
    assert rows[10.0][3] == pytest.approx(1.0, abs=1e-4)  # population std: the paper's +-1
    assert rows[1.0][4] == pytest.approx(rows[1.0][1], abs=1e-12)


def test_pair_gradient_weights():
    d = vz.pair_gradient_weights(length=10, epsilon=0.2)
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
    vz.plot_pair_gradient_weights(d)
    w = vz.pair_widget()
    assert {"|o|", "epsilon", "beta"} <= _controls(w)


# ----------------------------------------------------------------------------- 09

def test_sapo_curves():
    d = vz.sapo_curves(1.0, 1.05, 0.2)
    assert d["at_one"]["pos"][:2] == (1.0, 1.0) and d["at_one"]["neg"][:2] == (-1.0, -1.0)
    assert d["at_one"]["pos"][2] == pytest.approx(0.75)  # the chapter's: sigma'/tau + sigma = 1/4 + 1/2
    assert d["at_one"]["neg"][2] == pytest.approx(-(0.5 - 0.25 / 1.05))
    r = d["ratio"]
    s = torch.sigmoid(1.0 * (r - 1))
    assert torch.allclose(d["pos"]["gradient"], 4 * s * (1 - s))
    assert torch.allclose(d["pos"]["objective"], s * 4.0)
    sn = torch.sigmoid(1.05 * (r - 1))
    assert torch.allclose(d["neg"]["objective"], -sn * 4 / 1.05)
    assert (d["pos"]["gradient"] > 0).all()  # never exactly 0, unlike the clip
    assert (d["pos"]["clip_gradient"][r > 1.2 + 1e-9] == 0).all()
    assert torch.allclose(d["pos"]["weight"], r * 4 * s * (1 - s))
    sharp = vz.sapo_curves(10.0, 10.0)
    far = (r - 1).abs() > 0.5
    assert (sharp["pos"]["gradient"][far] < 0.03).all()  # a large tau approaches a hard gate
    vz.plot_sapo(d)


def test_chapter_sapo_loss_formula():
    r = torch.tensor([0.5, 1.0, 2.0], dtype=torch.float64)
    pos = vz.chapter_sapo_loss(r, torch.ones(3, dtype=torch.float64), 1.0, 1.05)
    assert torch.allclose(pos, -torch.sigmoid(r - 1) * r)
    neg = vz.chapter_sapo_loss(r, -torch.ones(3, dtype=torch.float64), 1.0, 2.0)
    assert torch.allclose(neg, torch.sigmoid((1 - r) / 2.0) * r)


def test_sapo_widget_constructs():
    w = vz.sapo_widget()
    assert {"tau_pos", "tau_neg", "epsilon"} <= _controls(w)
    assert w.result["at_one"]["pos"][0] == 1.0


# ----------------------------------------------------------------------------- the comparison cell (no training)

def test_comparison_configs_keep_the_rollout_budget():
    cfg = vz.comparison_configs(["grpo", "dapo", "2-grpo"], group_size=4, prompts_per_step=4, steps=2, seed=3)
    for v, c in cfg.items():
        assert c["group_size"] * c["prompts_per_step"] == 16
        assert c["steps"] == 2 and c["seed"] == 3 and c["variant"] == v
    assert (cfg["2-grpo"]["group_size"], cfg["2-grpo"]["prompts_per_step"]) == (2, 8)
    assert (cfg["dapo"]["group_size"], cfg["dapo"]["prompts_per_step"]) == (4, 4)  # not the paper's G = 16
    with pytest.raises(ValueError):
        vz.comparison_configs(["no_such_variant"])
    with pytest.raises(ValueError):
        vz.comparison_configs(["2-grpo"], group_size=3, prompts_per_step=1)


def test_comparison_summary_and_plot_on_fake_histories():
    hist = {
        "grpo": [{"step": 0, "reward_mean": None, "accuracy": 0.1},
                 {"step": 1, "reward_mean": 0.2, "clip_frac": 0.0, "loss": 1.0},
                 {"step": 2, "reward_mean": 0.4, "clip_frac": None, "loss": 3.0, "accuracy": 0.3}],
        "sapo": [{"step": 1, "reward_mean": 0.5, "clip_frac": None}],
    }
    s = vz.comparison_summary(hist, keys=("reward_mean", "clip_frac", "loss"))
    assert s["grpo"]["steps"] == 2 and s["grpo"]["reward_mean"] == pytest.approx(0.3)
    assert s["grpo"]["clip_frac"] == 0.0 and s["grpo"]["loss"] == 2.0
    assert (s["grpo"]["accuracy_first"], s["grpo"]["accuracy_last"]) == (0.1, 0.3)
    assert s["sapo"]["clip_frac"] is None and s["sapo"]["accuracy_first"] is None
    vz.plot_comparison(hist)
