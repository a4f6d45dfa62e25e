"""The pure functions behind the widgets of notebooks 11-14 (grpo_lessons.course.viz.offpolicy), and the widgets'
construction (no display)."""

import csv
import itertools
import math

import numpy as np
import pytest
import torch

from grpo_lessons.core.divergence import topk_divergence
from grpo_lessons.core.scaling_law import sigmoid_curve
from grpo_lessons.course.viz import offpolicy as vo


# ----------------------------------------------------------------------------- 11

def test_load_measured_mismatch_round_trip(tmp_path):
    rows = [("short", 0, 0, -0.5, -0.4), ("short", 0, 1, -1.0, -1.1), ("short", 1, 0, -0.2, -0.2),
            ("long", 0, 0, -2.0, -1.5)]
    with open(tmp_path / "tokens.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["setting", "seq", "t", "logp_mu", "logp_old"])
        w.writerows(rows)
    d = vo.load_measured_mismatch(tmp_path)
    s = d["short"]
    assert s["mask"].tolist() == [[1.0, 1.0], [1.0, 0.0]]
    assert s["logp_mu"][0].tolist() == [-0.5, -1.0] and s["logp_old"][0].tolist() == [-0.4, -1.1]
    assert d["long"]["lengths"].tolist() == [1.0]
    fig = vo.plot_measured_mismatch(d)
    assert len(fig.axes) == 2
    with pytest.raises(FileNotFoundError):
        vo.load_measured_mismatch(tmp_path / "missing.csv")


def test_toy_objective_matches_enumeration():
    theta = torch.tensor([0.3, -0.2, 0.5], dtype=torch.float64)
    pi = torch.softmax(theta, -1)
    L, k = 4, 2
    exact = sum(float(torch.prod(pi[list(seq)])) for seq in itertools.product(range(3), repeat=L)
                if sum(1 for y in seq if y == 0) >= k)
    assert float(vo._toy_objective(theta, L, k)) == pytest.approx(exact, rel=1e-12)


def test_mismatch_simulator_unbiased_reference_and_zero_mismatch():
    d = vo.mismatch_simulator(0.3, 16, "sequence_truncate", 3.0, samples=6000)
    o = d["options"]
    assert o["sequence_is"]["bias"] < 4 * d["noise_floor"]  # the untruncated product is unbiased
    assert o["none"]["bias"] > 5 * d["noise_floor"]  # no correction is not
    assert o["sequence_is"]["std"] > o["sequence_truncate"]["std"]  # truncation lowers the variance
    assert d["weights"].max() <= 3.0 + 1e-12
    z = vo.mismatch_simulator(0.0, 16, "token_mask", 3.0, samples=2000)
    for name, v in z["options"].items():  # mu == pi_old: every weight is 1, every option the same estimate
        assert v["share"] == 0.0
        assert v["bias"] == pytest.approx(z["options"]["none"]["bias"], rel=1e-9)
    with pytest.raises(ValueError):
        vo.mismatch_simulator(0.1, 0, "token_mask")
    with pytest.raises(ValueError):
        vo.mismatch_simulator(0.1, 8, "geometric_mean")


def test_mismatch_simulator_shares_count_what_rollout_weights_change():
    d = vo.mismatch_simulator(0.5, 64, "sequence_mask", 2.0, 0.5, samples=2000)
    w = d["weights"]  # (S,) one weight per sequence
    assert d["options"]["sequence_mask"]["share"] == pytest.approx(float((w == 0).double().mean()), abs=1e-12)
    fig = vo.plot_mismatch_simulator(d)
    assert len(fig.axes) == 2


# ----------------------------------------------------------------------------- 12

def test_vespo_curves_closed_form_and_common_point():
    d = vo.vespo_curves(2.0, 3.0, 3.0, 2.0, epsilon=0.2, tis_cap=3.0)
    W = d["W"]
    assert torch.allclose(d["pos"]["vespo"], W ** 2 * torch.exp(3 * (1 - W)), rtol=1e-9)
    assert torch.allclose(d["neg"]["vespo"], W ** 3 * torch.exp(2 * (1 - W)), rtol=1e-9)
    i = int((W - 1).abs().argmin())
    w1 = float(W[i])
    for key in ("pos", "neg"):
        for name in ("clip", "sapo", "tis"):  # at W = 1 (up to the grid) every weight is ~1
            assert float(d[key][name][i]) == pytest.approx(w1, abs=0.01)
    # PPO's clip: weight r inside the range, 0 beyond 1 + eps for A > 0 and below 1 - eps for A < 0
    assert float(d["pos"]["clip"][(W - 1.5).abs().argmin()]) == 0.0
    assert float(d["neg"]["clip"][(W - 0.5).abs().argmin()]) == 0.0
    assert d["peak"]["pos"][0] == pytest.approx(2 / 3) and d["peak"]["neg"][0] == pytest.approx(1.5)
    assert d["peak"]["neg"][1] == pytest.approx(1.5 ** 3 * math.exp(2 - 3))
    assert len(vo.plot_vespo(d).axes) == 2
    with pytest.raises(ValueError):
        vo.vespo_curves(0.0)


# ----------------------------------------------------------------------------- 13

def test_trust_region_allowed_moves_match_closed_forms():
    d = vo.trust_region_grid(delta_tv=0.15, delta_kl=0.05, epsilon=0.2, sign=1.0)
    for m, ratio, tv in zip(d["probes"], d["allowed_move"]["ratio"], d["allowed_move"]["binary_tv"]):
        assert ratio == pytest.approx(min(0.2 * m, 1 - m), abs=1e-4)  # the ratio clip allows eps * mu
        assert tv == pytest.approx(min(0.15, 1 - m), abs=1e-4)  # TV allows delta everywhere
    # binary KL at the boundary of the allowed move equals delta (mu = 0.5)
    j = d["probes"].index(0.5)
    p = 0.5 + d["allowed_move"]["binary_kl"][j]
    D = 0.5 * math.log(0.5 / p) + 0.5 * math.log(0.5 / (1 - p))
    assert D == pytest.approx(0.05, abs=1e-3)
    neg = vo.trust_region_grid(sign=-1.0)
    assert neg["allowed_move"]["ratio"][-1] == pytest.approx(0.2 * 0.99, abs=1e-4)  # frequent token, A < 0: loose
    # the grid: a token that moved against its advantage is always kept
    g = d["grid"]
    below = g[:, None] < g[None, :]  # p < mu, A > 0
    for k in d["keep"].values():
        assert bool(k[below].all())
    assert len(vo.plot_trust_region(d, {"mu": [0.5], "p": [0.7], "adv": [1.0]}).axes) == 3
    with pytest.raises(ValueError):
        vo.trust_region_grid(sign=0)


def test_load_topk_result_gives_the_full_vocabulary_divergence(tmp_path):
    g = torch.Generator().manual_seed(0)
    B, T, V, K, temp = 3, 5, 40, 6, 0.7
    lg_mu = 2 * torch.randn(B, T, V, generator=g, dtype=torch.float64)
    lg_pi = lg_mu + 0.3 * torch.randn(B, T, V, generator=g, dtype=torch.float64)
    lmu = torch.log_softmax(lg_mu / temp, -1)
    lpi = torch.log_softmax(lg_pi / temp, -1)
    tok = torch.multinomial(lmu.exp().view(-1, V), 1, generator=g).view(B, T)
    tok[0, 0] = int(lmu[0, 0].argsort()[0])  # one sampled token outside the top-K
    top = lmu.topk(K, dim=-1)
    mask = torch.ones(B, T)
    mask[2, 3:] = 0
    np.savez_compressed(tmp_path / "topk.npz", topk_ids=top.indices.numpy().astype(np.int32),
                        sampler_topk_logp=top.values.float().numpy(),
                        trainer_topk_logp=lpi.gather(-1, top.indices).float().numpy(),
                        sampled_ids=tok.numpy().astype(np.int32),
                        sampler_logp=lmu.gather(-1, tok[..., None])[..., 0].float().numpy(),
                        trainer_logp=lpi.gather(-1, tok[..., None])[..., 0].float().numpy(),
                        mask=mask.numpy().astype(np.int8), temperature=np.float32(temp))
    r = vo.load_topk_result(tmp_path / "topk.npz")
    assert not bool(r["sampled_in_topk"][0, 0])
    m = mask.bool()
    slp = lmu.gather(-1, tok[..., None])[..., 0]
    for kind in ("tv", "kl"):
        full = topk_divergence(top.indices, top.values, lg_pi, tok, kind=kind, temperature=temp, sampled_logp=slp)
        comp = topk_divergence(r["topk_ids"], r["sampler_topk_logp"], r["logits"], r["sampled_ids"], kind=kind,
                               sampled_logp=r["sampler_logp"])
        assert torch.allclose(comp[m], full[m], atol=1e-5), kind


# ----------------------------------------------------------------------------- 14

def test_cispo_vs_ppo_weights():
    d = vo.cispo_vs_ppo_weights(epsilon=0.2, cap=5.0, r_max=6.0)
    r = d["ratio"]
    for key in ("pos", "neg"):
        assert torch.allclose(d[key]["cispo"], r.clamp(max=5.0), atol=1e-12)
        assert torch.allclose(d[key]["cispo_trl_fallback"], r.clamp(max=0.2), atol=1e-12)
    inside = (r > 0.81) & (r < 1.19)
    assert torch.allclose(d["pos"]["ppo"][inside], r[inside], atol=1e-9)
    assert (d["pos"]["ppo"][r > 1.21] == 0).all() and (d["neg"]["ppo"][r < 0.79] == 0).all()
    assert (d["pos"]["ppo"][r < 0.79] > 0).all()  # A > 0 below the range: the min keeps the unclipped branch
    assert len(vo.plot_cispo_vs_ppo(d).axes) == 2


def test_scaling_curve_data_reads_a_trainer_log_and_fits(tmp_path):
    steps = np.arange(1, 61)
    C = 64.0 * steps
    R = sigmoid_curve(C, 0.75, 0.2, 900.0, 1.3)
    path = tmp_path / "metrics.csv"
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["step", "reward_mean", "completions_sampled", "completion_len", "eval_reward_mean"])
        w.writerow([0, "", "", "", 0.3])  # an evaluation row without a reward
        for s, r in zip(steps, R):
            w.writerow([int(s), float(r), 64, 10.0, ""])
    d = vo.scaling_curve_data(path, R0=0.2)
    assert torch.allclose(d["C"], torch.as_tensor(C))
    assert d["eval_C"] == [0.0] and d["eval_R"] == [0.3]
    assert d["fit"].A == pytest.approx(0.75, rel=1e-3) and d["fit"].C_mid == pytest.approx(900.0, rel=1e-2)
    tok = vo.scaling_curve_data(path, compute="tokens")
    assert torch.allclose(tok["C"], torch.as_tensor(C * 10.0))
    assert len(vo.plot_scaling_fit(d, (0.7, 800.0, 1.0)).axes) == 1
    with pytest.raises(ValueError):
        vo.scaling_curve_data(path, compute="flops")


# ----------------------------------------------------------------------------- widgets

@pytest.mark.parametrize("make", [vo.mismatch_widget, vo.vespo_widget, vo.trust_region_widget, vo.cispo_widget])
def test_widgets_build_with_readable_labels(make):
    w = make()
    controls = [c for c in w.children if getattr(c, "description", "")]
    assert len(controls) >= 2
    for c in controls:
        # a fixed label column as wide as the longest label: "initial" let ipywidgets' 300px box cut it
        assert int(c.style.description_width.removesuffix("px")) >= 7 * len(c.description), c.description
    assert isinstance(w.result, dict)


def test_scaling_widget_builds_on_given_data(tmp_path):
    C = 64.0 * np.arange(1, 31)
    path = tmp_path / "metrics.csv"
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["step", "reward_mean", "completions_sampled", "completion_len"])
        for s, r in enumerate(sigmoid_curve(C, 0.6, 0.2, 500.0, 1.0), 1):
            w.writerow([s, float(r), 64, 8.0])
    wdg = vo.scaling_widget(vo.scaling_curve_data(path, R0=0.2))
    assert {c.description for c in wdg.children if getattr(c, "description", "")} == {"asymptote R∞", "log10 C_mid",
                                                                                       "steepness ζ"}
    assert wdg.result["manual"][0] == pytest.approx(0.6, abs=0.01)


def _pixels(fig) -> np.ndarray:
    fig.canvas.draw()
    return np.asarray(fig.canvas.buffer_rgba())[..., :3].astype(int)


def test_mismatch_clip_min_is_named_and_visible_at_the_starting_settings():
    """Notebook 11's lower bound: its value is in a title, and moving it at the widget's starting settings (mismatch
    0.1, length 32, token_truncate, cap 3) changes what is drawn, not only a few pixels of a log-scale bar."""
    fig0 = vo.plot_mismatch_simulator(vo.mismatch_simulator(0.1, 32, "token_truncate", 3.0, None, samples=3000))
    titles0 = " ".join(ax.get_title() for ax in fig0.axes)
    for clip_min in (0.2, 0.5):  # 0.2 changes no weight here: the figure must still show where the bound lies
        d = vo.mismatch_simulator(0.1, 32, "token_truncate", 3.0, clip_min, samples=3000)
        fig = vo.plot_mismatch_simulator(d)
        titles = " ".join(ax.get_title() for ax in fig.axes)
        assert f"clip_min {clip_min:g}" in titles and f"clip_min {clip_min:g}" not in titles0, titles
        changed = int((np.abs(_pixels(fig) - _pixels(fig0)).sum(-1) > 30).sum())
        assert changed > 2000, f"clip_min {clip_min} changes {changed} pixels of the figure"
    # at 0.5 the sequence modes act (the product of 32 token ratios falls below it), the token modes do not
    assert d["options"]["sequence_truncate"]["share"] > 0.05 and d["options"]["token_truncate"]["share"] == 0.0
    ticks = " ".join(t.get_text() for t in fig.axes[1].get_xticklabels())
    assert f"{100 * d['options']['sequence_truncate']['share']:.1f}%" in ticks, ticks
    slider = next(c for c in vo.mismatch_widget().children if getattr(c, "description", "").startswith("clip_min"))
    assert slider.max >= 0.95  # far enough to reach the token ratios at the starting settings (>= 0.81)
