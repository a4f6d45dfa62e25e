import math
import re

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from grpo_lessons import group_advantages, zero_gradient_probability
from grpo_lessons.core.advantages import ADVANTAGE_SCALES


def test_figure_7_1_by_hand():
    # Chapter Figure 7.1: G = 5, three correct -> mu = 0.6
    r = [1.0, 1.0, 1.0, 0.0, 0.0]
    mu = 0.6
    std = math.sqrt(sum((x - mu) ** 2 for x in r) / 4)  # Bessel, as TRL
    expected = [(x - mu) / (std + 1e-4) for x in r]
    got = group_advantages(r, 5).tolist()
    assert got == pytest.approx(expected, abs=1e-6)
    assert got[0] == pytest.approx(0.73017, abs=1e-5)
    assert got[3] == pytest.approx(-1.09525, abs=1e-5)  # with TRL's +1e-4; -1.0954 without it
    # population std, as some books write it
    pop = group_advantages(r, 5, unbiased_std=False, eps=0.0).tolist()
    assert pop[0] == pytest.approx(0.4 / math.sqrt(0.24), abs=1e-6)


def test_scales_by_hand():
    r = torch.tensor([1.0, 0.0, 3.0, 1.0])
    assert group_advantages(r, 2, scale="none").tolist() == [0.5, -0.5, 1.0, -1.0]
    batch_std = r.std().item()
    got = group_advantages(r, 2, scale="batch")
    assert got.tolist() == pytest.approx([0.5 / (batch_std + 1e-4), -0.5 / (batch_std + 1e-4),
                                          1.0 / (batch_std + 1e-4), -1.0 / (batch_std + 1e-4)], abs=1e-6)


def test_matches_trl_formula():
    from trl.trainer.utils import nanstd

    torch.manual_seed(0)
    r = torch.rand(24)
    g = r.view(-1, 6)
    ref = ((g - g.mean(1, keepdim=True)) / (nanstd(g, dim=1).unsqueeze(1) + 1e-4)).view(-1)
    assert torch.allclose(group_advantages(r, 6), ref, atol=1e-6)


@given(st.lists(st.floats(-1e3, 1e3), min_size=1, max_size=6), st.integers(2, 6))
def test_identical_rewards_give_exact_zero(vals, g):
    r = torch.tensor([v for v in vals for _ in range(g)], dtype=torch.float32)
    for scale in ("group", "none"):
        assert (group_advantages(r, g, scale=scale) == 0).all()


@given(st.lists(st.floats(-100, 100), min_size=4, max_size=4), st.floats(-50, 50), st.floats(0.1, 10))
def test_invariances(vals, shift, scale):
    r = torch.tensor(vals * 2, dtype=torch.float64)  # 2 groups of 4
    base = group_advantages(r, 4, eps=0.0) if r.view(2, 4).std(1).min() > 1e-3 else None
    for s in ("group", "none", "batch"):
        assert torch.allclose(group_advantages(r + shift, 4, scale=s), group_advantages(r, 4, scale=s), atol=1e-6)
    if base is not None:  # z-scores are scale-free (eps = 0 to make it exact)
        assert torch.allclose(group_advantages(r * scale, 4, eps=0.0), base, atol=1e-6)


@given(st.lists(st.floats(-100, 100), min_size=6, max_size=6))
def test_group_advantages_sum_to_zero(vals):
    a = group_advantages(torch.tensor(vals, dtype=torch.float64), 3, scale="none")
    assert abs(float(a[:3].sum())) < 1e-9 and abs(float(a[3:].sum())) < 1e-9


@pytest.mark.parametrize(
    "rewards, g, kw, msg",
    [
        ([1.0, 2.0, 3.0], 2, {}, "multiple of group_size"),
        ([1.0, float("nan"), 0.0, 1.0], 2, {}, r"NaN or inf at positions \[1\]"),
        ([1.0, float("inf")], 2, {}, r"positions \[1\]"),
        ([1.0, 0.0], 1, {}, "group_size >= 2"),
        ([], 2, {}, "empty"),
        ([1.0, 0.0], 0, {}, "positive integer"),
        # the message names every registered scale (read off the registry: a new scale needs no edit here)
        ([1.0, 0.0], 2, {"scale": "zscore"}, "known: " + re.escape(", ".join(sorted(ADVANTAGE_SCALES)))),
        ([[1.0, 0.0]], 2, {}, "1-D"),
    ],
)
def test_clear_errors(rewards, g, kw, msg):
    with pytest.raises(ValueError, match=msg):
        group_advantages(rewards, g, **kw)


def test_zero_gradient_probability():
    assert zero_gradient_probability(0.5, 2) == 0.5
    assert zero_gradient_probability(0.1, 8) == pytest.approx(0.1**8 + 0.9**8)
    # Monte-Carlo check
    gen = torch.Generator().manual_seed(0)
    r = (torch.rand(20000, 4, generator=gen) < 0.3).float()
    mc = ((r.amax(1) == r.amin(1)).float().mean()).item()
    assert mc == pytest.approx(zero_gradient_probability(0.3, 4), abs=0.01)
    with pytest.raises(ValueError):
        zero_gradient_probability(1.5, 4)
