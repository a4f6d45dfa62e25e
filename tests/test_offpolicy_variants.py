"""CISPO, VESPO and ScaleRL by hand, and properties every off-policy variant must have.

TRL parity for CISPO and VESPO is in the parity test file of the off-policy family; here: the
papers' worked values, ScaleRL's two batch normalisations, prompt-level aggregation, and
hypothesis properties (on policy every new variant is REINFORCE with its own aggregation).
"""

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from grpo_lessons import group_advantages, policy_loss
from grpo_lessons.core.aggregation import aggregate, prompt_weights
from grpo_lessons.core.objectives import vespo_phi

D = torch.float64
NEW = ["cispo", "vespo", "dppo_binary_tv", "dppo_binary_kl", "dppo_topk_tv", "dppo_topk_kl", "scalerl"]


# -- VESPO ------------------------------------------------------------------------------------------------

def test_vespo_worked_values():
    """VESPO (Shen et al. 2026, arXiv 2602.10693), values checked against TRL's ``loss_type="vespo"``:
    A = +1, log r = [0.1, -0.05] -> 0.947609; A = -1, [0.2, 0.1, 0.3] -> 1.168549."""
    phi = vespo_phi(torch.tensor([[0.1, -0.05, 0.0]], dtype=D), torch.tensor([[1.0, 1.0, 0.0]], dtype=D),
                    torch.tensor([[1.0]], dtype=D))
    assert float(phi) == pytest.approx(0.947609, abs=1e-6)
    w = math.exp(0.05)  # by the formula: W^2 exp(3 (1 - W))
    assert float(phi) == pytest.approx(w**2 * math.exp(3 * (1 - w)), abs=1e-12)
    phi = vespo_phi(torch.tensor([[0.2, 0.1, 0.3]], dtype=D), torch.ones(1, 3, dtype=D), torch.tensor([[-1.0]], dtype=D))
    assert float(phi) == pytest.approx(1.168549, abs=1e-6)


def test_vespo_sampler_weights_enter_w_and_a_masked_token_drops_the_sequence():
    lr = torch.tensor([[0.1, 0.0]], dtype=D)
    m = torch.ones(1, 2, dtype=D)
    a = torch.tensor([[1.0]], dtype=D)
    with_is = vespo_phi(lr, m, a, is_weights=torch.tensor([[math.exp(-0.1), 1.0]], dtype=D))
    assert float(with_is) == pytest.approx(1.0, abs=1e-12)  # log W = 0.1 - 0.1
    dropped = vespo_phi(lr, m, a, is_weights=torch.tensor([[1.0, 0.0]], dtype=D))
    assert float(dropped) < 1e-10  # log W = log 1e-8: phi ~ e^3 1e-16


@given(st.floats(-3.0, 3.0), st.sampled_from([1.0, -1.0]))
def test_vespo_phi_is_one_at_w_one_and_continuous(log_w, a):
    one = vespo_phi(torch.zeros(1, 1, dtype=D), torch.ones(1, 1, dtype=D), torch.tensor([[a]], dtype=D))
    assert float(one) == pytest.approx(1.0, abs=1e-12)
    h = 1e-6
    f = [float(vespo_phi(torch.tensor([[x]], dtype=D), torch.ones(1, 1, dtype=D), torch.tensor([[a]], dtype=D)))
         for x in (log_w, log_w + h)]
    assert abs(f[1] - f[0]) < 1e-3  # |dphi/dlogW| = |phi (k - lambda W)| stays far below 1e3 here


# -- CISPO --------------------------------------------------------------------------------------------------

def test_cispo_keeps_the_gradient_of_capped_tokens_and_caps_the_weight():
    logp = torch.tensor([[-1.0, -1.0]], dtype=D, requires_grad=True)
    old = torch.tensor([[-1.0 - math.log(8.0), -1.0]], dtype=D)  # r = 8 and r = 1
    mask = torch.ones(1, 2, dtype=D)
    out = policy_loss(logp, old, torch.tensor([2.0], dtype=D), mask, variant="cispo")
    out.loss.backward()
    assert logp.grad.tolist() == [[pytest.approx(-2.0 * 5.0 / 2), pytest.approx(-2.0 * 1.0 / 2)]]
    assert out.clip_frac_high == pytest.approx(0.5)
    clip = torch.tensor([[-1.0, -1.0]], dtype=D, requires_grad=True)
    policy_loss(clip, old, torch.tensor([2.0], dtype=D), mask, variant="dapo").loss.backward()
    assert clip.grad[0, 0] == 0.0  # PPO's clip zeroes the token's gradient; CISPO does not


def test_cispo_loss_value_is_not_zero_on_policy_and_trls_unset_cap_scales_by_epsilon():
    logp = torch.tensor([[-0.5, -2.0]], dtype=D, requires_grad=True)
    mask = torch.ones(1, 2, dtype=D)
    out = policy_loss(logp, logp.detach(), torch.tensor([1.0], dtype=D), mask, variant="cispo")
    assert float(out.loss.detach()) == pytest.approx(1.25)  # -A mean(log pi), not 0
    out = policy_loss(logp, logp.detach(), torch.tensor([1.0], dtype=D), mask, variant="cispo", epsilon=0.2)
    out.loss.backward()
    assert out.params["epsilon_high"] == 0.2
    assert logp.grad.tolist() == [[pytest.approx(-0.1), pytest.approx(-0.1)]]  # 0.2 x REINFORCE


# -- ScaleRL ------------------------------------------------------------------------------------------------

def test_scalerl_advantage_normalisations_worked_numbers():
    r = [1, 0, 0, 0, 1, 1, 1, 1, 0, 1, 1, 0]
    assert float(group_advantages(r, 4, scale="batch")[0]) == pytest.approx(1.45623, abs=1e-5)  # TRL: raw-reward std
    assert float(group_advantages(r, 4, scale="batch_centered")[0]) == pytest.approx(1.87988, abs=1e-5)  # ScaleRL


def test_prompt_mean_by_hand_and_in_micro_batches():
    loss = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0], [5.0, 6.0, 0.0], [7.0, 8.0, 9.0]], dtype=D)
    mask = torch.tensor([[1, 1, 1], [1, 0, 0], [1, 1, 0], [1, 1, 1]], dtype=D)
    by_hand = ((1 + 2 + 3 + 4) / 4 + (5 + 6 + 7 + 8 + 9) / 5) / 2
    assert float(aggregate(loss, mask, "prompt_mean", group_size=2)) == pytest.approx(by_hand)
    w = prompt_weights(mask, 2)
    rows = [torch.tensor([3, 0]), torch.tensor([2, 1])]  # shuffled micro-batches, groups split
    parts = sum(float(aggregate(loss[i], mask[i], "prompt_mean", prompt_weights=w[i])) for i in rows)
    assert parts == pytest.approx(by_hand)
    with pytest.raises(ValueError, match="needs group_size"):
        aggregate(loss, mask, "prompt_mean")
    with pytest.raises(ValueError, match="cannot be split into groups"):
        aggregate(loss, mask, "prompt_mean", group_size=3)


def test_scalerl_is_cispo_with_prompt_aggregation():
    g = torch.Generator().manual_seed(0)
    logp = -torch.rand(4, 5, generator=g, dtype=D)
    old = logp + 0.5 * torch.randn(4, 5, generator=g, dtype=D)
    mask = (torch.arange(5)[None] < torch.tensor([[5], [1], [3], [4]])).to(D)
    adv = torch.randn(4, generator=g, dtype=D)
    s = policy_loss(logp, old, adv, mask, variant="scalerl", group_size=2)
    c = policy_loss(logp, old, adv, mask, variant="cispo")
    assert float(s.loss) == pytest.approx(float(aggregate(c.per_token_loss, mask, "prompt_mean", group_size=2)))
    assert abs(float(s.loss) - float(c.loss)) > 1e-4  # unequal lengths: the two normalisers differ


# -- properties of every new variant ------------------------------------------------------------------------

def _batch(seed, B=4, T=5):
    g = torch.Generator().manual_seed(seed)
    logp = -torch.rand(B, T, generator=g, dtype=D) * 2 - 0.05
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    lengths[0] = T
    mask = (torch.arange(T)[None] < lengths[:, None]).to(D)
    adv = torch.randn(B, generator=g, dtype=D)
    return logp, mask, adv


@given(st.integers(0, 10_000), st.sampled_from(NEW))
def test_on_policy_every_new_variant_is_reinforce_with_its_aggregation(seed, variant):
    """mu = pi_old = pi_theta: the gradient is that of -A log pi aggregated as the variant aggregates."""
    logp, mask, adv = _batch(seed)
    kw = {"sampling_logp": logp, "group_size": 2}
    if variant.startswith("dppo_topk"):
        kw["divergence"] = torch.zeros_like(logp)  # no divergence on policy
    x = logp.clone().requires_grad_(True)
    policy_loss(x, logp, adv, mask, variant=variant, **kw).loss.backward()
    y = logp.clone().requires_grad_(True)
    agg = "prompt_mean" if variant == "scalerl" else "token_mean"
    aggregate(-adv[:, None] * y, mask, agg, group_size=2).backward()
    assert torch.allclose(x.grad, y.grad, atol=1e-12)


@given(st.integers(0, 10_000), st.sampled_from(["token_truncate", "token_mask", "sequence_truncate", "sequence_mask"]))
def test_on_policy_with_a_matching_sampler_every_correction_is_the_identity(seed, mode):
    logp, mask, adv = _batch(seed)
    for variant in ("grpo", "dapo", "cispo", "vespo"):
        a = policy_loss(logp, logp, adv, mask, variant=variant, sampling_logp=logp, rollout_correction=mode)
        b = policy_loss(logp, logp, adv, mask, variant=variant)
        assert float(a.loss) == pytest.approx(float(b.loss), abs=1e-12)
        assert a.is_weight_mean == pytest.approx(1.0) and a.is_masked_frac == 0.0


@given(st.integers(0, 10_000))
def test_sequence_mode_weight_is_constant_along_each_sequence(seed):
    logp, mask, adv = _batch(seed)
    g = torch.Generator().manual_seed(seed)
    samp = logp + 0.3 * torch.randn(logp.shape, generator=g, dtype=D)
    plain = policy_loss(logp, logp, adv, mask, variant="cispo").per_token_loss
    corr = policy_loss(logp, logp, adv, mask, variant="cispo", sampling_logp=samp,
                       rollout_correction="sequence_truncate", rollout_clip_max=1e9).per_token_loss
    ratio = torch.where(mask > 0, corr / plain, torch.nan)  # (B, T): the weight at each completion token
    expected = torch.exp(((logp - samp) * mask).sum(-1))  # (B,) prod_t pi_old / mu
    for i in range(len(mask)):
        vals = ratio[i][mask[i] > 0]
        assert torch.allclose(vals, expected[i].expand_as(vals), rtol=1e-9)
