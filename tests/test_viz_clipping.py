"""Clip region, KL, clip-higher, GSPO ratios, SAPO gate (notebooks 03, 07, 08, 10): pure functions, no display."""

import math

import pytest
import torch

from grpo_lessons import kl_estimate, policy_loss
from grpo_lessons.course.viz import clipping


def _controls(w):
    return {c.description for c in w.children if getattr(c, "description", "")}


# ----------------------------------------------------------------------------- 03 clip region, KL

@pytest.mark.parametrize("eps,eps_high", [(0.2, None), (0.2, 0.28), (0.1, 0.3)])
def test_clip_curves_zero_gradient_exactly_outside(eps, eps_high):
    eh = eps if eps_high is None else eps_high
    pos = clipping.clip_curves(eps, eps_high, 1.5)
    r = pos["ratio"]
    assert (pos["gradient"][r > 1 + eh + 1e-9] == 0).all()  # A > 0: flat beyond 1 + eps_high
    assert torch.allclose(pos["gradient"][r < 1 + eh - 1e-9], torch.tensor(1.5, dtype=torch.float64))
    assert torch.allclose(pos["objective"][r > 1 + eh + 1e-9], torch.tensor(1.5 * (1 + eh), dtype=torch.float64))
    neg = clipping.clip_curves(eps, eps_high, -1.0)
    assert (neg["gradient"][r < 1 - eps - 1e-9] == 0).all()  # A < 0: flat below 1 - eps
    assert torch.allclose(neg["gradient"][r > 1 - eps + 1e-9], torch.tensor(-1.0, dtype=torch.float64))
    # the upper bound never binds for A < 0 and the lower never for A > 0
    assert (pos["gradient"][r < 1] != 0).all() and (neg["gradient"][r > 1] != 0).all()
    assert pos["zero_grad"].sum() > 0 and neg["zero_grad"].sum() > 0


def test_clip_curves_match_policy_loss_per_token():
    d = clipping.clip_curves(0.2, 0.28, 0.7, ratio_min=0.5, ratio_max=1.5, n=21)
    old = torch.zeros(1, 21, dtype=torch.float64)
    logp = d["ratio"].log().view(1, 21).clone().requires_grad_(True)
    out = policy_loss(logp, old, torch.tensor([0.7], dtype=torch.float64), torch.ones(1, 21), variant="dapo")
    assert torch.allclose(-out.per_token_loss[0], d["objective"], atol=1e-12)


def test_clip_widget_constructs():
    w = clipping.clip_widget()
    assert {"epsilon", "epsilon_high", "adv_abs"} <= _controls(w)
    assert w.result["pos"]["upper"] == pytest.approx(1.28)
    assert w.result["neg"]["lower"] == pytest.approx(0.8)
    clipping.plot_clip_region(0.2, None, 1.0)


def test_kl_estimators_direction():
    d = clipping.kl_estimators(vocab=20, distance=1.5, n_samples=40000, seed=2)
    i = {k: j for j, k in enumerate(d["estimators"])}
    for k in ("k1", "k3"):  # unbiased for KL(pi_theta || pi_ref)
        assert abs(d["mean"][i[k]].item() - d["kl"]) < 4 * d["sem"][i[k]].item() + 1e-3, k
    # the upside-down ratio estimates chi2 - KL, not the KL
    assert abs(d["mean"][i["k3_reversed"]].item() - (d["chi2"] - d["kl"])) < 4 * d["sem"][i["k3_reversed"]].item() + 1e-3
    assert d["mean"][i["k3_reversed"]].item() > 1.5 * d["kl"]
    # k2 and k3 are never negative; k1 often is
    assert d["frac_negative"][i["k2"]] == 0 and d["frac_negative"][i["k3"]] == 0 and d["frac_negative"][i["k1"]] > 0
    # the per-sample values are the package's estimates
    assert (d["samples"]["k3"] >= 0).all()
    x = torch.tensor([-1.0, -2.0])
    y = torch.tensor([-1.5, -1.0])
    assert torch.allclose(kl_estimate(x, y, "k3"), torch.exp(y - x) - 1 - (y - x))


def test_kl_sweep_and_widget():
    sw = clipping.kl_sweep((0.25, 0.5, 1.0), n_samples=5000)
    assert (sw["kl"][1:] > sw["kl"][:-1]).all()  # same noise direction, growing scale
    assert sw["mean"].shape == (3, 4)
    clipping.plot_kl_estimators(clipping.kl_estimators(n_samples=2000), sw)
    w = clipping.kl_widget()
    assert {"distance", "n_samples", "vocab"} <= _controls(w)
    assert w.result["n_samples"] == 5000


# ----------------------------------------------------------------------------- 07 DAPO clip-higher


def test_clip_higher_curves():
    d = clipping.clip_higher_curves(0.2, 0.28, +1)
    r, g = d["ratio"], d["gradient"]
    assert (g[r > 1.28 + 1e-9] == 0).all() and (g[(r < 1.28 - 1e-9)] == 1).all()
    assert (d["gradient_sym"][r > 1.2 + 1e-9] == 0).all()
    lo, hi = d["extra_room"]
    assert lo == pytest.approx(1.2, abs=3e-3) and hi == pytest.approx(1.28, abs=3e-3)
    n = clipping.clip_higher_curves(0.2, 0.28, -1)
    assert n["extra_room"] is None  # the upper bound never binds for A < 0
    assert torch.equal(n["gradient"], n["gradient_sym"])
    assert (n["gradient"][n["ratio"] < 0.8 - 1e-9] == 0).all() and (n["gradient"][n["ratio"] > 0.8 + 1e-9] == -1).all()
    with pytest.raises(ValueError):
        clipping.clip_higher_curves(sign=0)
    clipping.plot_clip_higher(d)


def test_reachable_probability_paper_example():
    got = clipping.reachable_probability([0.01, 0.9], 0.2)
    assert got.tolist() == pytest.approx([0.012, 1.0])
    assert clipping.reachable_probability(0.01, 0.28).item() == pytest.approx(0.0128)


def test_clip_higher_widget_constructs():
    w = clipping.clip_higher_widget()
    assert {"eps_low", "eps_high", "sign"} <= _controls(w) and w.result["upper"] == pytest.approx(1.28)
    assert w.children[2].style.description_width == w.children[0].style.description_width  # one label column


# ----------------------------------------------------------------------------- 08 GSPO

def test_gspo_batch_sequence_ratio_is_the_masked_mean_and_clips_less():
    d = clipping.gspo_batch(token_noise=0.05, seed=0)
    m = d["mask"]
    assert torch.allclose(d["seq_log_ratio"], (d["log_ratio"] * m).sum(-1) / m.sum(-1))
    assert d["token_clip_grpo_range"] == 0.0  # 5% noise never leaves 1 +- 0.2
    assert d["token_clip_gspo_range"] > 0.4  # token ratios at GSPO's tiny range: almost every binding-side token
    assert d["seq_clip_gspo_range"] < d["token_clip_gspo_range"] / 2  # averaging shrinks the spread
    assert torch.equal(d["seq_clipped"].double().mean(), torch.tensor(d["seq_clip_gspo_range"], dtype=torch.float64))
    # spread of log s_i shrinks like 1/sqrt(|o|)
    big = clipping.gspo_batch(lengths=(16,) * 200 + (256,) * 200, token_noise=0.05, seed=1)
    s16, s256 = big["seq_log_ratio"][:200].std(), big["seq_log_ratio"][200:].std()
    assert (s16 / s256).item() == pytest.approx(4.0, rel=0.15)
    clipping.plot_gspo_ratios(d)


def test_noisy_sequence_gradients():
    d = clipping.noisy_sequence_gradients()
    assert d["max_over_median"]["grpo"] == pytest.approx(math.exp(3.0), rel=1e-3)  # weight r = e^3 on an outlier
    assert d["max_over_median"]["gspo"] == pytest.approx(1.0)  # every token of the sequence weighs the same
    assert d["outlier_share"]["gspo"] == pytest.approx(3 / 200)
    assert d["outlier_share"]["grpo"] > 10 * d["outlier_share"]["gspo"]
    assert d["s_long"] == pytest.approx(math.exp(9 / 200), rel=1e-3)
    clipping.plot_noisy_sequence(d)


def test_gspo_widget_constructs():
    w = clipping.gspo_widget()
    assert {"noise", "seed"} <= _controls(w) and "seq_clip_gspo_range" in w.result


# ----------------------------------------------------------------------------- 10 SAPO

def test_sapo_curves():
    d = clipping.sapo_curves(1.0, 1.05, 0.2)
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
    sharp = clipping.sapo_curves(10.0, 10.0)
    far = (r - 1).abs() > 0.5
    assert (sharp["pos"]["gradient"][far] < 0.03).all()  # a large tau approaches a hard gate
    clipping.plot_sapo(d)


def test_chapter_sapo_loss_formula():
    r = torch.tensor([0.5, 1.0, 2.0], dtype=torch.float64)
    pos = clipping.chapter_sapo_loss(r, torch.ones(3, dtype=torch.float64), 1.0, 1.05)
    assert torch.allclose(pos, -torch.sigmoid(r - 1) * r)
    neg = clipping.chapter_sapo_loss(r, -torch.ones(3, dtype=torch.float64), 1.0, 2.0)
    assert torch.allclose(neg, torch.sigmoid((1 - r) / 2.0) * r)


def test_sapo_widget_constructs():
    w = clipping.sapo_widget()
    assert {"tau_pos", "tau_neg", "epsilon"} <= _controls(w)
    assert w.result["at_one"]["pos"][0] == 1.0
