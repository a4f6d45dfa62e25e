"""Baselines and group advantages (notebooks 01-02): the pure functions behind the widgets, no display."""

import math

import pytest
import torch

from grpo_lessons import group_advantages, zero_gradient_probability
from grpo_lessons.course.viz import advantages


def _controls(w):
    return {c.description for c in w.children if getattr(c, "description", "")}


# ----------------------------------------------------------------------------- 01 baselines

def test_critic_memory_numbers():
    d = advantages.critic_memory((7.0, 70.0))
    assert d["bf16_weights"].tolist() == [14.0, 140.0]  # the chapter's "140 GB for 70B" is bf16 weights only
    assert d["grpo_total"].tolist() == [7 * 18.0, 70 * 18.0]  # 16 (trained policy) + 2 (frozen reference)
    assert d["ppo_total"].tolist() == [7 * 34.0, 70 * 34.0]  # + 16 for a trained critic of the same size
    assert d["ppo_over_grpo"][0].item() == pytest.approx(34 / 18)
    d = advantages.critic_memory((1.0,), reward_model=True)
    assert d["ppo_total"].item() == 36.0 and d["grpo_total"].item() == 20.0
    advantages.plot_critic_memory(d)


def test_bandit_true_gradient_matches_autograd():
    prob = advantages.bandit_problem(5, 4, seed=1)
    theta = prob["logits"].clone().requires_grad_(True)
    J = (torch.softmax(theta, -1) * prob["success_prob"]).sum(-1).mean()
    J.backward()
    assert torch.allclose(advantages.bandit_true_gradient(prob["logits"], prob["success_prob"]), theta.grad, atol=1e-12)


def test_gradient_variance_properties():
    prob = advantages.bandit_problem(seed=0)
    G = 8
    d0 = advantages.gradient_variance(prob["logits"], prob["success_prob"], group_size=G, n_trials=20000)
    d1 = advantages.gradient_variance(prob["logits"], prob["success_prob"], group_size=G, n_trials=20000, reward_offset=2.0)
    i = {b: j for j, b in enumerate(d0["baselines"])}
    # unbiased estimators: the mean estimate is the true gradient (within Monte-Carlo error)
    for b in ("none", "critic", "noisy_critic", "blind_critic", "rloo"):
        assert d0["scale"][i[b]].item() == pytest.approx(1.0, abs=0.05), b
    # the leave-in group mean is the unbiased estimate shrunk by exactly (G-1)/G on the same samples
    assert d0["scale"][i["group_mean"]].item() == pytest.approx(d0["scale"][i["rloo"]].item() * (G - 1) / G, rel=1e-9)
    assert d0["relative_variance"][i["group_mean"]].item() == pytest.approx(d0["relative_variance"][i["rloo"]].item())
    # a baseline lowers variance, and a constant offset in the reward hurts only the no-baseline estimator
    assert d0["relative_variance"][i["none"]] > 1.5 * d0["relative_variance"][i["critic"]]
    assert d1["relative_variance"][i["none"]] > 3 * d0["relative_variance"][i["none"]]
    for b in ("critic", "group_mean", "rloo", "grpo"):
        assert d1["relative_variance"][i[b]].item() == pytest.approx(d0["relative_variance"][i[b]].item(), rel=1e-6), b
    # a noisy critic is worse than the perfect one; the group mean beats the noisy one
    assert d0["relative_variance"][i["noisy_critic"]] > d0["relative_variance"][i["critic"]]
    assert d0["relative_variance"][i["group_mean"]] < d0["relative_variance"][i["noisy_critic"]]
    # the group baselines give exactly zero for all-equal groups; the others essentially never
    assert d0["zero_fraction"][i["group_mean"]] > 0.05 and d0["zero_fraction"][i["none"]] < d0["zero_fraction"][i["group_mean"]]
    # cosines close to one for every estimator's mean
    assert (d0["cosine"] > 0.95).all()
    advantages.plot_gradient_variance(d0)


def test_gradient_variance_matches_direct_computation():
    prob = advantages.bandit_problem(3, 4, seed=2)
    s = advantages.bandit_gradient_samples(prob["logits"], prob["success_prob"], group_size=4, n_trials=50,
                                     baselines=("group_mean",), seed=3)
    # trial 0 by hand: (1/G) sum_i (r_i - mean r) (onehot(y_i) - pi)
    p = int(s["prompts"][0])
    theta = prob["logits"][p].clone().requires_grad_(True)
    r = s["rewards"][0]
    # replay the sampler with the same seed to get trial 0's answers
    gen = torch.Generator().manual_seed(3)
    prompts = torch.randint(3, (50,), generator=gen)
    pi = torch.softmax(prob["logits"][prompts], -1)
    answers = torch.multinomial(pi, 4, replacement=True, generator=gen)
    logp = torch.log_softmax(theta, -1)[answers[0]]  # (G,)
    ((r - r.mean()) * logp).mean().backward()
    assert torch.allclose(s["rows"]["group_mean"][0], theta.grad, atol=1e-12)


def test_variance_sweep_and_training():
    prob = advantages.bandit_problem(seed=0)
    sw = advantages.variance_sweep(prob["logits"], prob["success_prob"], vary="group_size", values=(2, 4, 16),
                             baselines=("critic", "group_mean"), n_trials=3000)
    assert sw["relative_variance"].shape == (3, 2)
    # the group mean's noise falls with G (it converges to the perfect critic)
    assert sw["relative_variance"][0, 1] > sw["relative_variance"][2, 1]
    advantages.plot_variance_sweep(sw)
    with pytest.raises(ValueError):
        advantages.variance_sweep(prob["logits"], prob["success_prob"], vary="lr")
    runs = [advantages.train_bandit(prob["logits"], prob["success_prob"], b, steps=60, lr=20.0, reward_offset=1.0, n_seeds=8)
            for b in ("none", "learned_critic", "group_mean")]
    start = runs[0]["expected_reward"][0].item()
    assert all(r["expected_reward"][0].item() == start for r in runs)
    assert runs[2]["expected_reward"][-1] > start + 0.1  # the group baseline learns
    assert torch.isnan(runs[0]["critic_error"]).all() and torch.isfinite(runs[1]["critic_error"]).all()
    assert runs[1]["critic_error"][-1] < runs[1]["critic_error"][0]  # the learned critic converges
    advantages.plot_training_curves(runs)
    with pytest.raises(ValueError, match="learned_critic"):
        advantages.gradient_variance(prob["logits"], prob["success_prob"], baselines=("learned_critic",))


def test_gradient_variance_widget_constructs():
    w = advantages.gradient_variance_widget(advantages.bandit_problem(4, 3), n_trials=200)
    assert {"group_size", "reward_offset", "critic_noise"} <= _controls(w)
    assert w.result["group_size"] == 8
    w.children[0].value = 4  # moving a slider recomputes
    assert w.result["group_size"] == 4


# ----------------------------------------------------------------------------- 02 group advantages

@pytest.mark.parametrize("G", [2, 5, 8])
@pytest.mark.parametrize("scale", ["group", "none"])
def test_advantage_distribution_matches_group_advantages(G, scale):
    d = advantages.advantage_distribution(G, 0.3, scale=scale)
    for k in range(G + 1):
        group = torch.tensor([1.0] * k + [0.0] * (G - k), dtype=torch.float64)
        adv = group_advantages(group, G, scale=scale)
        if k > 0:
            assert d["adv_correct"][k].item() == pytest.approx(adv[0].item(), abs=1e-12)
        else:
            assert math.isnan(d["adv_correct"][k].item())
        if k < G:
            assert d["adv_wrong"][k].item() == pytest.approx(adv[-1].item(), abs=1e-12)
    assert d["mass"].sum().item() == pytest.approx(1.0, abs=1e-12)
    assert d["prob_k"].sum().item() == pytest.approx(1.0, abs=1e-12)
    assert d["p_zero_gradient"] == pytest.approx(0.3**G + 0.7**G)
    # the mass at advantage 0 is exactly the all-equal groups (for G >= 2 no other group has a zero)
    zero = d["mass"][d["values"] == 0].sum().item()
    assert zero == pytest.approx(d["p_zero_gradient"], abs=1e-12)


def test_figure_7_1_from_the_distribution():
    d = advantages.advantage_distribution(5, 0.6)
    assert round(d["adv_correct"][3].item(), 4) == 0.7302  # TRL: Bessel std + 1e-4
    assert round(d["adv_wrong"][3].item(), 4) == -1.0952
    exact = advantages.advantage_distribution(5, 0.6, eps=0.0)  # the formula without TRL's 1e-4
    assert (round(exact["adv_correct"][3].item(), 4), round(exact["adv_wrong"][3].item(), 4)) == (0.7303, -1.0954)
    pop = advantages.advantage_distribution(5, 0.6, unbiased_std=False, eps=0.0)
    assert pop["adv_correct"][3].item() == pytest.approx(0.4 / math.sqrt(0.24))


def test_advantage_distribution_matches_monte_carlo():
    G, p = 6, 0.35
    d = advantages.advantage_distribution(G, p)
    g = torch.Generator().manual_seed(0)
    r = (torch.rand(40000 * G, generator=g) < p).double()
    adv = group_advantages(r, G)
    for v, m in zip(d["values"].tolist(), d["mass"].tolist()):
        freq = (adv - v).abs().lt(1e-6).double().mean().item()
        assert freq == pytest.approx(m, abs=0.01)
    with pytest.raises(ValueError):
        advantages.advantage_distribution(4, 1.5)


def test_group_size_table():
    t = advantages.group_size_table((2, 8), (0.1, 0.5), rollout_budget=64)
    assert t["p_zero"][0, 1].item() == pytest.approx(0.5)
    assert t["p_zero"][1, 0].item() == pytest.approx(zero_gradient_probability(0.1, 8))
    assert t["informative"][0, 1].item() == pytest.approx(32 * 0.5)
    assert t["rollouts_per_informative"][1, 1].item() == pytest.approx(8 / (1 - 0.5**7))
    assert t["p_any_correct"][1, 0].item() == pytest.approx(1 - 0.9**8)
    # with a fixed budget and p = 0.5, more small groups give more informative groups
    assert t["informative"][0, 1] > t["informative"][1, 1]
    advantages.plot_zero_gradient(t)
    advantages.plot_zero_gradient()


def test_group_push_and_scaling():
    d = advantages.group_push_by_successes(8)
    assert d["none"].tolist() == [2 * k * (8 - k) / 8 for k in range(9)]
    assert d["group"][0].item() == 0.0 and d["group"][8].item() == 0.0
    # with the std, a 1-of-8 group pushes far more than its centred advantages alone would
    assert d["group"][1] / d["none"][1] > d["group"][4] / d["none"][4]
    advantages.plot_group_push(d)
    s = advantages.scaling_comparison([1.0, 0.0, 0.0, 0.0, 10.0, 0.0, 5.0, 5.0], 4)
    assert torch.allclose(s["none"], group_advantages(s["rewards"], 4, scale="none"))
    # group scaling makes the two prompts' advantages comparable: the same pattern gets the same numbers
    s2 = advantages.scaling_comparison([1.0, 0.0, 0.0, 0.0, 10.0, 0.0, 0.0, 0.0], 4)
    assert torch.allclose(s2["group"][:4], s2["group"][4:], atol=1e-3)
    assert not torch.allclose(s2["batch"][:4], s2["batch"][4:])
    advantages.plot_scaling_comparison(s)


def test_advantage_widget_constructs():
    w = advantages.advantage_widget()
    assert {"group_size", "p", "scale"} <= _controls(w)
    assert w.result["p_zero_gradient"] == pytest.approx(zero_gradient_probability(0.3, 8))
