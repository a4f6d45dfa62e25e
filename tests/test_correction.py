"""grpo_lessons.core.correction: TIS / MIS weights and the off-policy sequence mask, by hand and in policy_loss."""

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from grpo_lessons import policy_loss
from grpo_lessons.core.correction import correction_stats, off_policy_sequence_mask, rollout_weights

LN = math.log
# rho = pi_old / mu per token: row 0 = [2, 0.5, pad], row 1 = [4, 1.5, 0.25]
OLD = torch.tensor([[LN(0.4), LN(0.1), 0.0], [LN(0.8), LN(0.3), LN(0.05)]], dtype=torch.float64)
SAMP = torch.tensor([[LN(0.2), LN(0.2), 123.0], [LN(0.2), LN(0.2), LN(0.2)]], dtype=torch.float64)
MASK = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]], dtype=torch.float64)


def test_token_modes_by_hand():
    t = rollout_weights(OLD, SAMP, MASK, "token_truncate", clip_max=3.0)
    assert torch.allclose(t, torch.tensor([[2.0, 0.5, 1.0], [3.0, 1.5, 0.25]], dtype=torch.float64))
    t = rollout_weights(OLD, SAMP, MASK, "token_truncate", clip_max=3.0, clip_min=0.6)
    assert torch.allclose(t, torch.tensor([[2.0, 0.6, 1.0], [3.0, 1.5, 0.6]], dtype=torch.float64))
    m = rollout_weights(OLD, SAMP, MASK, "token_mask", clip_max=3.0, clip_min=0.6)
    assert torch.allclose(m, torch.tensor([[2.0, 0.0, 1.0], [0.0, 1.5, 0.0]], dtype=torch.float64))  # kept keep rho


def test_sequence_modes_multiply_token_ratios_without_length_normalisation():
    t = rollout_weights(OLD, SAMP, MASK, "sequence_truncate", clip_max=3.0)
    assert t.shape == (2, 1)
    assert torch.allclose(t, torch.tensor([[1.0], [1.5]], dtype=torch.float64))  # 2*0.5 ; 4*1.5*0.25
    m = rollout_weights(OLD, SAMP, MASK, "sequence_mask", clip_max=1.2)
    assert torch.allclose(m, torch.tensor([[1.0], [0.0]], dtype=torch.float64))


def test_nan_in_padding_is_ignored_and_nan_in_completion_is_an_error():
    samp = SAMP.clone()
    samp[0, 2] = float("nan")
    old = OLD.clone()
    old[0, 2] = float("nan")
    assert torch.allclose(rollout_weights(old, samp, MASK, "token_truncate"),
                          rollout_weights(OLD, SAMP, MASK, "token_truncate"))
    samp[1, 0] = float("nan")
    with pytest.raises(ValueError, match="sampling_logp contains NaN"):
        rollout_weights(OLD, samp, MASK, "token_mask")
    old[1, 1] = float("inf")
    with pytest.raises(ValueError, match="old_logp contains NaN"):
        rollout_weights(old, SAMP, MASK, "sequence_mask")


@pytest.mark.parametrize("kwargs,match", [
    ({"mode": "token_clip"}, "unknown rollout correction mode"),
    ({"mode": "token_mask", "clip_min": 3.0, "clip_max": 3.0}, "clip_min .* must be < clip_max"),
    ({"mode": "token_mask", "clip_min": 4.0, "clip_max": 2.0}, "clip_min"),
    ({"mode": "token_truncate", "clip_max": -1.0}, "clip_max must be"),
])
def test_clear_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        rollout_weights(OLD, SAMP, MASK, **kwargs)


def test_shape_mismatch_is_an_error():
    with pytest.raises(ValueError, match="sampling_logp has shape"):
        rollout_weights(OLD, SAMP[:, :2], MASK, "token_mask")
    with pytest.raises(ValueError, match="sampling_logp has shape"):
        policy_loss(OLD, OLD, torch.zeros(2), MASK, variant="grpo", sampling_logp=SAMP[:1],
                    rollout_correction="token_mask")


def test_policy_loss_needs_sampler_logps_and_a_known_mode():
    with pytest.raises(ValueError, match="needs sampling_logp"):
        policy_loss(OLD, OLD, torch.zeros(2), MASK, variant="grpo", rollout_correction="token_mask")
    with pytest.raises(ValueError, match="unknown rollout_correction"):
        policy_loss(OLD, OLD, torch.zeros(2), MASK, variant="grpo", sampling_logp=SAMP, rollout_correction="tis")


def test_stats_by_hand():
    s = correction_stats(OLD, SAMP, MASK, "token_mask", clip_max=3.0, clip_min=0.6)
    assert s["masked_frac"] == pytest.approx(3 / 5) and s["truncated_frac"] == 0.0
    assert s["mean_weight"] == pytest.approx((2.0 + 1.5) / 5)
    s = correction_stats(OLD, SAMP, MASK, "sequence_truncate", clip_max=1.2)
    assert s["truncated_frac"] == pytest.approx(1 / 2)  # one sequence of two clamped
    assert s["mean_weight"] == pytest.approx((1.0 * 2 + 1.2 * 3) / 5)


def test_weight_goes_after_the_objective_before_kl_and_masked_tokens_stay_in_the_denominator():
    """dapo + token_mask, by hand: sum_t (w_t * clip_loss_t + beta * k3_t * r_t) / (all completion tokens)."""
    g = torch.Generator().manual_seed(0)
    logp = (-torch.rand(2, 3, generator=g, dtype=torch.float64) - 0.1)
    ref = logp + 0.1
    adv = torch.tensor([1.0, -0.5], dtype=torch.float64)
    beta = 0.1
    out = policy_loss(logp, OLD, adv, MASK, variant="dapo", beta=beta, ref_logp=ref, sampling_logp=SAMP,
                      rollout_correction="token_mask", rollout_clip_min=0.6, rollout_clip_max=3.0)
    r = torch.exp(logp - OLD)
    A = adv[:, None]
    clip = torch.maximum(-A * r, -A * torch.clamp(r, 0.8, 1.28))
    w = torch.tensor([[2.0, 0.0, 1.0], [0.0, 1.5, 0.0]], dtype=torch.float64)
    k3 = torch.exp(ref - logp) - (ref - logp) - 1
    expected = ((w * clip + beta * k3 * r) * MASK).sum() / MASK.sum()
    assert float(out.loss) == pytest.approx(float(expected), rel=1e-12)
    assert out.is_masked_frac == pytest.approx(3 / 5)


def test_off_policy_sequence_mask_by_hand():
    logp = torch.tensor([[-1.0, -1.0], [-1.0, -1.0], [-1.0, -1.0], [-1.0, -1.0]])
    samp = torch.tensor([[-0.5, -0.5], [-0.5, -0.5], [-0.9, -0.9], [-0.5, float("nan")]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 1.0], [1.0, 1.0], [1.0, 0.0]])
    adv = torch.tensor([1.0, -1.0, -1.0, -1.0])
    keep = off_policy_sequence_mask(adv, logp, samp, mask, threshold=0.2)
    # row 0: A >= 0 kept; row 1: drift 0.5 > 0.2 and A < 0 dropped; row 2: drift 0.1 kept; row 3: drift 0.5 dropped
    assert keep.squeeze(-1).tolist() == [1.0, 0.0, 1.0, 0.0]
    out = policy_loss(logp, logp, adv, mask, variant="grpo", sampling_logp=torch.nan_to_num(samp),
                      off_policy_mask_threshold=0.2)
    assert out.off_policy_masked_frac == pytest.approx(0.5)


@given(st.lists(st.floats(-3, 3), min_size=6, max_size=6), st.lists(st.floats(-3, 3), min_size=6, max_size=6),
       st.floats(0.05, 0.9), st.floats(1.1, 5.0))
def test_truncate_stays_in_bounds_and_mask_is_zero_exactly_outside(old, samp, lo, hi):
    old = torch.tensor(old, dtype=torch.float64).view(2, 3)
    samp = torch.tensor(samp, dtype=torch.float64).view(2, 3)
    mask = torch.ones(2, 3, dtype=torch.float64)
    for level in ("token", "sequence"):
        raw = rollout_weights(old, samp, mask, f"{level}_truncate", clip_max=None)
        t = rollout_weights(old, samp, mask, f"{level}_truncate", clip_max=hi, clip_min=lo)
        assert float(t.max()) <= hi and float(t.min()) >= lo
        m = rollout_weights(old, samp, mask, f"{level}_mask", clip_max=hi, clip_min=lo)
        inside = (raw >= lo) & (raw <= hi)
        assert torch.equal(m[~inside], torch.zeros_like(m[~inside]))
        assert torch.equal(m[inside], raw[inside])
        if level == "sequence":  # one weight per sequence, the product of the token ratios
            assert t.shape == (2, 1)
            assert torch.allclose(raw.squeeze(-1), torch.exp((old - samp).sum(-1)))
