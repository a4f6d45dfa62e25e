"""Notebooks 06-10's variants: Dr. GRPO, DAPO, GSPO, GSPO-token, SAPO, 2-GRPO.

1. Parity with TRL 1.16's own ``GRPOTrainer._compute_loss`` (loss AND gradient) for ``dr_grpo``, ``dapo``
   (with ``epsilon_high``), ``gspo``, ``sapo`` — and, through TRL's sequence level / G = 2, ``gspo_token``
   and ``2-grpo`` — on random batches with unequal lengths, ratios far from 1, with and without beta.
2. Hand-computed cases: DAPO Eq. (13) with the paper's L_max = 20480, L_cache = 4096; dynamic sampling.
3. Properties (hypothesis).

``python tests/test_variants_dr_grpo_dapo_gspo_sapo_2grpo.py`` prints the parity table (max |dloss|, max |dgrad| per variant).
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from grpo_lessons import get_variant, group_advantages, policy_loss
from grpo_lessons.core.dynamic_sampling import (
    dynamic_sample, expected_sampling_cost, informative_fraction, simulate_dynamic_sampling,
)
from grpo_lessons.core.objectives import sapo_surrogate
from grpo_lessons.core.pairwise import (
    chapter_pair_loss, informative_pair_probability, pair_advantage, pairwise_grpo_loss, split_pairs,
    two_grpo_budget,
)
from grpo_lessons.core.shaping import informative_groups, soft_overlong_penalty, truncation_mask

TOL_LOSS, TOL_GRAD = 1e-6, 1e-6


# ============================================================================ batches

def _lengths_mask(g, B, T):
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    lengths[0] = T  # the padded width is used by at least one row
    lengths[1] = max(1, T // 3)  # and the lengths are unequal
    return (torch.arange(T)[None, :] < lengths[:, None]).float()  # (B, T)


def token_batch(seed: int, B: int = 8, T: int = 11, spread: float = 0.4):
    """Token-level batch: ratios exp(N(0, spread)) — far enough from 1 that the 0.2 / 0.28 clip is active."""
    g = torch.Generator().manual_seed(seed)
    logp = -torch.rand(B, T, generator=g) * 3 - 0.05  # (B, T)
    old = logp + spread * torch.randn(B, T, generator=g)  # (B, T)
    ref = logp + 0.2 * torch.randn(B, T, generator=g)  # (B, T)
    mask = _lengths_mask(g, B, T)
    adv = torch.randn(B, generator=g)
    adv[2] = 0.0  # a zero-advantage row (an all-equal group)
    return logp, old, ref, adv, mask


def sequence_batch(seed: int, B: int = 8, T: int = 11, seq_spread: float = 1.5e-3, token_noise: float = 0.3):
    """GSPO batch: noisy token ratios whose per-sequence geometric mean is set to exp(delta_i), |delta_i| ~ 1e-3,
    so that GSPO's 3e-4 / 4e-4 range clips some sequences and not others."""
    g = torch.Generator().manual_seed(seed)
    logp = -torch.rand(B, T, generator=g) * 3 - 0.05
    mask = _lengths_mask(g, B, T)
    noise = token_noise * torch.randn(B, T, generator=g)
    noise = noise - (noise * mask).sum(-1, keepdim=True) / mask.sum(-1, keepdim=True)  # zero masked mean per row
    delta = seq_spread * (2 * torch.rand(B, 1, generator=g) - 1)  # (B, 1) target log s_i
    old = logp - delta - noise  # log r_t = delta + noise_t, so log s_i = delta_i
    ref = logp + 0.2 * torch.randn(B, T, generator=g)
    adv = torch.randn(B, generator=g)
    return logp, old, ref, adv, mask


# variant -> (TRL GRPOConfig fields, our policy_loss variant, our extra kwargs, batch maker)
PARITY = {
    "dr_grpo": ({"loss_type": "dr_grpo", "epsilon": 0.2}, "dr_grpo", {}, token_batch),
    "dr_grpo (L=32)": ({"loss_type": "dr_grpo", "epsilon": 0.2}, "dr_grpo", {"max_completion_length": 32}, token_batch),
    "dapo": ({"loss_type": "dapo", "epsilon": 0.2, "epsilon_high": 0.28}, "dapo", {}, token_batch),
    "dapo (0.1/0.4)": ({"loss_type": "dapo", "epsilon": 0.1, "epsilon_high": 0.4}, "dapo",
                       {"epsilon": 0.1, "epsilon_high": 0.4}, token_batch),
    "gspo": ({"loss_type": "grpo", "importance_sampling_level": "sequence", "epsilon": 3e-4, "epsilon_high": 4e-4},
             "gspo", {}, sequence_batch),
    "sapo": ({"loss_type": "sapo"}, "sapo", {}, token_batch),
    "sapo (tau 0.5/2)": ({"loss_type": "sapo", "sapo_temperature_pos": 0.5, "sapo_temperature_neg": 2.0}, "sapo",
                         {"tau_pos": 0.5, "tau_neg": 2.0}, token_batch),
    # no TRL loss_type of their own: GSPO-token against TRL's sequence level, 2-GRPO against TRL grpo at G = 2
    "gspo_token": ({"loss_type": "grpo", "importance_sampling_level": "sequence", "epsilon": 3e-4,
                    "epsilon_high": 4e-4}, "gspo_token", {}, sequence_batch),
    "2-grpo": ({"loss_type": "grpo", "epsilon": 0.2}, "2-grpo", {}, token_batch),
}
SEEDS = [0, 1, 2, 3]
BETAS = [0.0, 0.04]


def compare(name: str, seed: int, beta: float) -> dict:
    """Our loss and gradient against TRL's on one batch; returns the differences and what the batch exercised."""
    from trl_harness import trl_loss

    trl_fields, variant, extra, make = PARITY[name]
    logp, old, ref, adv, mask = make(seed)
    if variant == "2-grpo":  # real G = 2 advantages from random 0/1/2 rewards
        g = torch.Generator().manual_seed(1000 + seed)
        rewards = torch.randint(0, 3, (logp.shape[0],), generator=g).float()
        rewards[:2] = torch.tensor([1.0, 0.0])
        adv = group_advantages(rewards, 2)
    extra = dict(extra)
    L = extra.pop("max_completion_length", logp.shape[1])
    ref_arg = ref if beta else None
    trl_l, trl_g = trl_loss(logp, old, adv, mask, ref_logp=ref_arg, beta=beta, max_completion_length=L,
                            **trl_fields)
    x = logp.clone().requires_grad_(True)
    out = policy_loss(x, old, adv, mask, variant=variant, beta=beta, ref_logp=ref_arg, max_completion_length=L,
                      **extra)
    out.loss.backward()
    v = get_variant(variant)
    if v.ratio_level == "token":
        r = torch.exp(logp - old)[mask > 0]
    else:
        r = torch.exp(((logp - old) * mask).sum(-1) / mask.sum(-1))
    return {
        "dloss": (out.loss.detach() - trl_l).abs().item(),
        "dgrad": (x.grad - trl_g).abs().max().item(),
        "loss": trl_l.item(),
        "grad_norm": trl_g.norm().item(),
        "clip": out.clip_frac,
        "ratio_min": r.min().item(),
        "ratio_max": r.max().item(),
    }


def _cases():
    # GSPO-token with beta > 0: its KL weight has a per-token gradient, so only the value matches (tested below)
    return [(n, s, b) for n in PARITY for s in SEEDS for b in BETAS if not (n == "gspo_token" and b)]


@pytest.mark.parametrize("name, seed, beta", _cases())
def test_parity_with_trl(name, seed, beta):
    res = compare(name, seed, beta)
    assert res["grad_norm"] > 1e-3, "a real gradient, not two zeros agreeing"
    variant = PARITY[name][1]
    if variant in ("dr_grpo", "dapo", "2-grpo"):
        assert res["clip"] > 0.03, f"the batch must exercise clipping: {res}"
    if variant in ("gspo", "gspo_token"):
        assert 0.0 < res["clip"] < 1.0, f"GSPO's range must clip some sequences and not others: {res}"
    if variant == "sapo":
        assert res["ratio_min"] < 0.6 and res["ratio_max"] > 1.6, "the soft gate must be far from its linear part"
    assert res["dloss"] < TOL_LOSS, res
    assert res["dgrad"] < TOL_GRAD, res


def test_gspo_token_with_kl_has_gspo_value_but_its_own_gradient():
    """With beta > 0 the KL term is multiplied by the ratio: same value at every token, but GSPO-token's ratio
    sends each token's KL gradient through its own log-prob, GSPO's through the sequence mean."""
    logp, old, ref, adv, mask = sequence_batch(5)
    la, ga = _loss_and_grad(logp.double(), old.double(), adv.double(), mask.double(), variant="gspo", beta=0.04,
                            ref_logp=ref.double())
    lb, gb = _loss_and_grad(logp.double(), old.double(), adv.double(), mask.double(), variant="gspo_token",
                            beta=0.04, ref_logp=ref.double())
    assert abs(la - lb) < 1e-12
    assert not torch.allclose(ga, gb, atol=1e-6)
    _, g0 = _loss_and_grad(logp.double(), old.double(), adv.double(), mask.double(), variant="gspo")
    _, g0t = _loss_and_grad(logp.double(), old.double(), adv.double(), mask.double(), variant="gspo_token")
    assert torch.allclose(g0, g0t, atol=1e-13)  # the surrogate parts agree; the difference is the KL term


# ============================================================================ DAPO Eq. (13), overlong filtering

L_MAX, L_CACHE = 20480, 4096


@pytest.mark.parametrize(
    "length, expected",
    [
        (0, 0.0), (1000, 0.0), (16384, 0.0),  # up to L_max - L_cache: no penalty
        (16385, -1 / 4096), (17408, -0.25), (18432, -0.5), (19456, -0.75),  # linear inside the buffer
        (20480, -1.0),  # at L_max
        (20481, -1.0), (25000, -1.0),  # beyond L_max
    ],
)
def test_soft_overlong_penalty_paper_numbers(length, expected):
    got = soft_overlong_penalty(torch.tensor([float(length)], dtype=torch.float64), L_MAX, L_CACHE)
    assert got.item() == pytest.approx(expected, abs=1e-12)


def test_soft_overlong_penalty_matches_trl_reward_function():
    """TRL ships Eq. 13 as a reward function, trl.rewards.get_soft_overlong_punishment: same numbers."""
    from trl.rewards import get_soft_overlong_punishment

    lengths = [0, 1, 16384, 16385, 17000, 18432, 20000, 20480, 20481, 25000]
    trl_fn = get_soft_overlong_punishment(max_completion_len=L_MAX, soft_punish_cache=L_CACHE)
    theirs = trl_fn([[1] * n for n in lengths])
    ours = soft_overlong_penalty(torch.tensor(lengths, dtype=torch.float64), L_MAX, L_CACHE).tolist()
    assert ours == pytest.approx(theirs, abs=1e-12)


def test_soft_overlong_penalty_factor_vectorised_and_monotone():
    n = torch.arange(0, 26000, 7, dtype=torch.float64)
    pen = soft_overlong_penalty(n, L_MAX, L_CACHE)
    assert pen.shape == n.shape and (pen.diff() <= 0).all() and pen.max() == 0 and pen.min() == -1
    half = soft_overlong_penalty(torch.tensor([18432.0, 30000.0]), L_MAX, L_CACHE, factor=0.5)
    assert half.tolist() == [-0.25, -0.5]


def test_chapter_overlong_formula_is_not_eq13():
    """The chapter's -max(0, (|o| - L_cache)/(L_max - L_cache)) penalises from 4096 tokens on; Eq. 13 from 16384."""
    n = torch.tensor([8192.0, 16384.0, 18432.0])
    chapter = -torch.clamp((n - L_CACHE) / (L_MAX - L_CACHE), min=0)
    paper = soft_overlong_penalty(n, L_MAX, L_CACHE)
    assert chapter.tolist() == [-0.25, -0.75, -0.875] and paper.tolist() == [0.0, 0.0, -0.5]


@pytest.mark.parametrize("kwargs", [dict(max_len=100, cache_len=0), dict(max_len=100, cache_len=101)])
def test_soft_overlong_penalty_rejects_bad_buffers(kwargs):
    with pytest.raises(ValueError):
        soft_overlong_penalty(torch.tensor([5.0]), **kwargs)


def test_overlong_filtering_removes_truncated_rows_from_the_dapo_loss():
    logp, old, _, adv, mask = token_batch(3)
    truncated = torch.zeros(mask.shape[0], dtype=torch.bool)
    truncated[[0, 4]] = True
    filt = mask * truncation_mask(truncated)[:, None]
    keep = ~truncated
    full = policy_loss(logp, old, adv, filt, variant="dapo").loss
    dropped = policy_loss(logp[keep], old[keep], adv[keep], mask[keep], variant="dapo").loss
    assert abs(full.item() - dropped.item()) < 1e-6  # token mean over the remaining completions only
    x = logp.clone().requires_grad_(True)
    policy_loss(x, old, adv, filt, variant="dapo").loss.backward()
    assert (x.grad[truncated] == 0).all()


# ============================================================================ dynamic sampling

def test_informative_groups_hand_cases():
    r = torch.tensor([1.0, 1, 1, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0.5, 0.5, 0.5, 0.7])
    assert informative_groups(r, 4).tolist() == [False, False, True, True]
    assert informative_groups(torch.tensor([3.0, 3.0, 2.0, 1.0]), 2).tolist() == [False, True]
    assert informative_groups(torch.tensor([1.0, 0.0]), 1).tolist() == [False, False]  # G = 1: never informative
    with pytest.raises(ValueError):
        informative_groups(torch.ones(5), 2)


@pytest.mark.parametrize("p, G, q", [(0.5, 2, 0.5), (0.5, 8, 1 - 2 / 256), (0.0, 8, 0.0), (1.0, 4, 0.0),
                                     (0.1, 8, 1 - 0.1**8 - 0.9**8), (0.9, 16, 1 - 0.9**16 - 0.1**16)])
def test_informative_fraction_formula(p, G, q):
    assert informative_fraction(p, G) == pytest.approx(q, abs=1e-15)
    assert informative_fraction(torch.tensor([p], dtype=torch.float64), G).item() == pytest.approx(q, abs=1e-15)


def test_expected_sampling_cost_hand_cases():
    c = expected_sampling_cost(0.5, 2, 10)  # q = 1/2: twice the groups
    assert c["q"] == 0.5 and c["expected_groups"] == 20 and c["extra_groups"] == 10 and c["extra_rollouts"] == 20
    assert c["overhead"] == 1.0
    pool = expected_sampling_cost([0.0, 1.0, 0.5, 0.5], 2, 8)  # half the pool is never informative
    assert pool["q"] == 0.25 and pool["expected_groups"] == 32
    dead = expected_sampling_cost([0.0, 1.0], 8, 4)
    assert dead["q"] == 0.0 and math.isinf(dead["expected_groups"])


def _table_sampler(table):
    calls = []

    def sample_group(prompt):
        calls.append(prompt)
        return {"rewards": table[prompt]}

    return sample_group, calls


def test_dynamic_sample_drops_and_refills_from_new_prompts():
    # prompts 0..9; the all-equal ones are 1, 2, 5, 6
    table = {0: [1, 0], 1: [1, 1], 2: [0, 0], 3: [0, 1], 4: [1, 0], 5: [0, 0], 6: [1, 1], 7: [0, 1], 8: [1, 0],
             9: [1, 0]}
    sample_group, calls = _table_sampler(table)
    res = dynamic_sample(range(10), sample_group, 4, max_rounds=5)
    # round 1 draws 0-3 (keeps 0, 3), round 2 draws 4, 5 (keeps 4), round 3 draws 6 (drops), round 4 draws 7
    assert res.prompts == [0, 3, 4, 7]
    assert res.filled and res.rounds == 4 and res.sampled == 8 and res.dropped == 4 and res.surplus == 0
    assert res.dropped_prompts == [1, 2, 5, 6]
    assert calls == list(range(8)) and len(set(calls)) == len(calls)  # drop and refill: no prompt re-sampled
    assert res.extra_sampled == 4
    assert res.log_dict() == {"ds_rounds": 4, "ds_sampled": 8, "ds_dropped": 4, "ds_surplus": 0, "ds_filled": 1.0,
                              "ds_kept": 4}


def test_dynamic_sample_round_bound_stream_end_and_oversampling():
    table = {i: ([0, 0] if i % 3 else [0, 1]) for i in range(30)}  # every third prompt is informative
    sample_group, _ = _table_sampler(table)
    res = dynamic_sample(range(30), sample_group, 4, max_rounds=2)
    # round 1: prompts 0-3 -> keeps 0, 3; round 2: prompts 4, 5 -> nothing; stop at the bound
    assert not res.filled and res.rounds == 2 and res.prompts == [0, 3] and res.sampled == 6
    with pytest.raises(RuntimeError, match="max_rounds=2"):
        dynamic_sample(range(30), _table_sampler(table)[0], 4, max_rounds=2, on_exhausted="raise")
    with pytest.raises(RuntimeError, match="stream ended"):
        dynamic_sample(range(5), _table_sampler(table)[0], 4, max_rounds=50, on_exhausted="raise")
    res = dynamic_sample(range(30), _table_sampler(table)[0], 4, max_rounds=3, oversample=3.0)
    # round 1 draws 12 prompts: informative 0, 3, 6, 9 -> full at once
    assert res.filled and res.rounds == 1 and res.sampled == 12 and res.prompts == [0, 3, 6, 9] and res.surplus == 0
    res = dynamic_sample(range(30), _table_sampler(table)[0], 2, max_rounds=3, oversample=4.0)
    assert res.prompts == [0, 3] and res.sampled == 8 and res.surplus == 1  # 6 was informative but not needed


def test_dynamic_sample_accepts_plain_reward_lists_and_objects():
    class Group:
        def __init__(self, rewards):
            self.rewards = rewards

    res = dynamic_sample(iter([[1.0, 0.0], [1.0, 1.0], [0.2, 0.3]]), lambda p: p, 2)
    assert res.groups == [[1.0, 0.0], [0.2, 0.3]]
    res = dynamic_sample(range(3), lambda p: Group([p, 0.0]), 1)
    assert res.prompts == [1]
    with pytest.raises(ValueError):
        dynamic_sample(range(3), lambda p: [], 1)
    with pytest.raises(ValueError):
        dynamic_sample(range(3), lambda p: [0, 1], 0)


@pytest.mark.parametrize("rates, G", [(0.5, 4), ([0.05, 0.5, 0.95], 8)])
def test_dynamic_sampling_monte_carlo_matches_the_expected_cost(rates, G):
    sim = simulate_dynamic_sampling(rates, G, batch_size=8, n_batches=150, seed=0)
    assert sim["filled_share"] == 1.0
    assert sim["mean_groups_sampled"] == pytest.approx(sim["expected_groups"], rel=0.06)


# ============================================================================ 2-GRPO

def test_pair_advantages_are_plus_minus_c_whatever_the_reward_gap():
    for gap in (1.0, 0.01, 7.0):
        adv = group_advantages(torch.tensor([gap, 0.0, 0.0, gap], dtype=torch.float64), 2)
        c = pair_advantage(gap)
        assert torch.allclose(adv, torch.tensor([1.0, -1.0, -1.0, 1.0], dtype=torch.float64) * c, atol=1e-12)
    assert pair_advantage(1.0).item() == pytest.approx(0.5 / (1 / math.sqrt(2) + 1e-4))  # 0.70701 (TRL)
    assert pair_advantage(1.0, unbiased_std=False).item() == pytest.approx(0.5 / (0.5 + 1e-4))  # ~1 (the paper)
    assert pair_advantage(0.0).item() == 0.0
    pop = group_advantages(torch.tensor([1.0, 0.0]), 2, unbiased_std=False)
    assert pop[0].item() == pytest.approx(0.9998, abs=1e-4)


def test_split_pairs():
    w, l, gap = split_pairs(torch.tensor([0.0, 1.0, 2.0, 1.0, 3.0, 3.0]))
    assert w.tolist() == [1, 2, 4] and l.tolist() == [0, 3, 5] and gap.tolist() == [-1.0, 1.0, 0.0]
    with pytest.raises(ValueError):
        split_pairs(torch.ones(3))


@settings(max_examples=40)
@given(seed=st.integers(0, 10_000), spread=st.sampled_from([0.0, 0.05, 0.3, 0.8]),
       eps=st.sampled_from([(0.2, None), (0.2, 0.28), (0.1, 0.5)]), unbiased=st.booleans())
def test_pairwise_form_equals_the_2grpo_loss(seed, spread, eps, unbiased):
    g = torch.Generator().manual_seed(seed)
    P, T = 5, 7
    logp = -torch.rand(2 * P, T, generator=g, dtype=torch.float64) * 3
    old = logp + spread * torch.randn(2 * P, T, generator=g, dtype=torch.float64)
    lengths = torch.randint(1, T + 1, (2 * P,), generator=g)
    mask = (torch.arange(T)[None, :] < lengths[:, None]).double()
    rewards = torch.randint(0, 3, (2 * P,), generator=g).double()  # ties included
    adv = group_advantages(rewards, 2, unbiased_std=unbiased)
    x, y = logp.clone().requires_grad_(True), logp.clone().requires_grad_(True)
    ref = policy_loss(x, old, adv, mask, variant="2-grpo", epsilon=eps[0], epsilon_high=eps[1]).loss
    pair = pairwise_grpo_loss(y, old, mask, rewards, epsilon=eps[0], epsilon_high=eps[1], unbiased_std=unbiased)
    ref.backward()
    pair.loss.backward()
    assert abs(ref.item() - pair.loss.item()) < 1e-12
    assert torch.allclose(x.grad, y.grad, atol=1e-14)


def test_pairwise_on_policy_gradient_is_contrastive():
    """At r = 1: -(c/2)(mean_t grad log pi(o+) - mean_t grad log pi(o-)) per pair, averaged over pairs."""
    g = torch.Generator().manual_seed(0)
    logp = -torch.rand(4, 5, generator=g, dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0], [1, 1, 0, 0, 0]], dtype=torch.float64)
    rewards = torch.tensor([0.0, 1.0, 1.0, 1.0])  # pair 0: row 1 wins; pair 1: tie
    x = logp.clone().requires_grad_(True)
    out = pairwise_grpo_loss(x, logp, mask, rewards)
    out.loss.backward()
    c = out.c[0].item()
    expected = torch.zeros_like(logp)
    expected[1] = -(c / 2) / 5 / 2  # winner: 5 tokens, two pairs
    expected[0, :3] = (c / 2) / 3 / 2  # loser: 3 tokens
    assert torch.allclose(x.grad, expected, atol=1e-15)


def test_chapter_pair_loss_is_only_an_analogy():
    """The chapter's -log sigmoid(beta * margin) has the 2-GRPO *direction* on policy for equal lengths and
    beta = c / |o|, but not its value, and off policy not its gradient either."""
    g = torch.Generator().manual_seed(1)
    P, T = 3, 4
    logp = -torch.rand(2 * P, T, generator=g, dtype=torch.float64)
    mask = torch.ones(2 * P, T, dtype=torch.float64)
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 0.0], dtype=torch.float64)
    c = pair_advantage(1.0).item()
    grads = []
    for fn in (lambda x: pairwise_grpo_loss(x, logp, mask, rewards).loss,
               lambda x: chapter_pair_loss(x, logp, mask, rewards, beta=c / T)):
        x = logp.clone().requires_grad_(True)
        fn(x).backward()
        grads.append(x.grad)
    assert torch.allclose(grads[0], grads[1], atol=1e-14)  # on policy: sigmoid(0) = 1/2 matches the 1/2 of mean
    assert chapter_pair_loss(logp, logp, mask, rewards).item() == pytest.approx(math.log(2))  # but not the value 0
    old = logp + 0.5 * torch.randn(2 * P, T, generator=g, dtype=torch.float64)
    x, y = logp.clone().requires_grad_(True), logp.clone().requires_grad_(True)
    pairwise_grpo_loss(x, old, mask, rewards).loss.backward()
    chapter_pair_loss(y, old, mask, rewards, beta=c / T).backward()
    assert not torch.allclose(x.grad, y.grad, atol=1e-3)


def test_two_grpo_budget_arithmetic():
    b = two_grpo_budget(rollouts_per_batch=512, dataset_prompts=8192, epochs=1)
    assert b["2-GRPO"]["prompts_per_batch"] == 256 and b["16-GRPO"]["prompts_per_batch"] == 32
    assert b["ratio"]["prompts_per_batch"] == 8 and b["ratio"]["rollouts_per_batch"] == 1
    assert b["ratio"]["total_rollouts"] == 0.125 and b["ratio"]["steps"] == 0.125
    assert b["2-GRPO"]["total_rollouts"] == 16384 and b["16-GRPO"]["steps"] == 256
    # the trainer's default budget: the completions per step of its G = 8 default, 8 x 8 = 32 prompts x 2
    assert get_variant("2-grpo").train_defaults["prompts_per_step"] * 2 == 8 * 8
    with pytest.raises(ValueError):
        two_grpo_budget(rollouts_per_batch=100)  # not a multiple of 16
    assert informative_pair_probability(0.5) == 0.5 and informative_pair_probability(0.9) == pytest.approx(0.18)


# ============================================================================ properties

def _batch64(seed, B=6, T=8, spread=0.0, equal_lengths=None):
    g = torch.Generator().manual_seed(seed)
    logp = -torch.rand(B, T, generator=g, dtype=torch.float64) * 3 - 0.05
    old = logp + spread * torch.randn(B, T, generator=g, dtype=torch.float64)
    ref = logp + 0.2 * torch.randn(B, T, generator=g, dtype=torch.float64)
    if equal_lengths is None:
        lengths = torch.randint(1, T + 1, (B,), generator=g)
    else:
        lengths = torch.full((B,), equal_lengths)
    mask = (torch.arange(T)[None, :] < lengths[:, None]).double()
    adv = torch.randn(B, generator=g, dtype=torch.float64)
    return logp, old, ref, adv, mask


def _loss_and_grad(logp, *args, **kwargs):
    x = logp.clone().requires_grad_(True)
    out = policy_loss(x, *args, **kwargs)
    out.loss.backward()
    return out.loss.detach(), x.grad


@settings(max_examples=40)
@given(seed=st.integers(0, 10_000), seq_spread=st.sampled_from([0.0, 2e-4, 1e-3, 0.05]),
       eps=st.sampled_from([(3e-4, 4e-4), (0.2, 0.2)]))
def test_gspo_token_has_gspo_value_and_gradient_for_sequence_constant_advantages(seed, seq_spread, eps):
    g = torch.Generator().manual_seed(seed)
    logp, _, _, adv, mask = _batch64(seed)
    noise = 0.3 * torch.randn(logp.shape, generator=g, dtype=torch.float64)
    noise = noise - (noise * mask).sum(-1, keepdim=True) / mask.sum(-1, keepdim=True)
    delta = seq_spread * (2 * torch.rand(logp.shape[0], 1, generator=g, dtype=torch.float64) - 1)
    old = logp - delta - noise
    kw = dict(epsilon=eps[0], epsilon_high=eps[1])
    l1, g1 = _loss_and_grad(logp, old, adv, mask, variant="gspo", **kw)
    l2, g2 = _loss_and_grad(logp, old, adv, mask, variant="gspo_token", **kw)
    assert abs(l1 - l2) < 1e-12 and torch.allclose(g1, g2, atol=1e-13)


@settings(max_examples=40)
@given(seed=st.integers(0, 10_000), spread=st.sampled_from([0.0, 0.1, 0.5]), beta=st.sampled_from([0.0, 0.04]),
       eps=st.sampled_from([(0.2, 0.2), (0.2, 0.28), (3e-4, 4e-4)]))
def test_gspo_equals_grpo_for_one_token_completions(seed, spread, beta, eps):
    logp, old, ref, adv, _ = _batch64(seed, spread=spread)
    mask = torch.zeros_like(logp)
    mask[:, 0] = 1.0  # every completion is one token long (the rest is padding)
    kw = dict(epsilon=eps[0], epsilon_high=eps[1], beta=beta, ref_logp=ref if beta else None)
    l1, g1 = _loss_and_grad(logp, old, adv, mask, variant="gspo", **kw)
    l2, g2 = _loss_and_grad(logp, old, adv, mask, variant="grpo", **kw)
    assert abs(l1 - l2) < 1e-12 and torch.allclose(g1, g2, atol=1e-13)


@settings(max_examples=40)
@given(seed=st.integers(0, 10_000), length=st.integers(1, 8), extra=st.integers(0, 40),
       spread=st.sampled_from([0.0, 0.4]), beta=st.sampled_from([0.0, 0.04]))
def test_dr_grpo_is_dapo_times_a_constant_when_lengths_are_equal(seed, length, extra, spread, beta):
    logp, old, ref, adv, mask = _batch64(seed, spread=spread, equal_lengths=length)
    L = 8 + extra  # Dr. GRPO's constant, >= the padded width
    kw = dict(epsilon=0.2, epsilon_high=0.28, beta=beta, ref_logp=ref if beta else None)
    l_dr, g_dr = _loss_and_grad(logp, old, adv, mask, variant="dr_grpo", max_completion_length=L, **kw)
    l_da, g_da = _loss_and_grad(logp, old, adv, mask, variant="dapo", **kw)
    k = length / L  # sum / (B L) = (sum / (B |o|)) * |o| / L
    assert abs(l_dr - k * l_da) < 1e-12 and torch.allclose(g_dr, k * g_da, atol=1e-14)


def test_dr_grpo_and_dapo_differ_by_a_batch_dependent_factor():
    logp, old, _, adv, mask = _batch64(4, spread=0.4)
    _, g_dr = _loss_and_grad(logp, old, adv, mask, variant="dr_grpo", epsilon_high=0.28)
    _, g_da = _loss_and_grad(logp, old, adv, mask, variant="dapo")
    # dr_grpo / dapo = sum|o| / (B T) for every token: constant within the batch, so still proportional...
    k = mask.sum() / (mask.shape[0] * mask.shape[1])
    assert torch.allclose(g_dr, k * g_da, atol=1e-14)
    # ...but the factor changes from batch to batch with the total length, which dr_grpo's never does
    _, old2, _, adv2, mask2 = _batch64(5, spread=0.4)
    k2 = mask2.sum() / (mask2.shape[0] * mask2.shape[1])
    assert abs(k - k2) > 0.01


@settings(max_examples=60)
@given(r=st.floats(0.05, 5.0), tau=st.floats(0.1, 5.0), sign=st.sampled_from([1.0, -1.0]))
def test_sapo_gradient_weight_is_4_sigma_1_minus_sigma(r, tau, sign):
    ratio = torch.tensor([r], dtype=torch.float64, requires_grad=True)
    adv = torch.tensor([sign], dtype=torch.float64)
    out = sapo_surrogate(ratio, adv, tau_pos=tau, tau_neg=tau)
    (-out.per_token_loss).sum().backward()  # objective f(r) A
    s = torch.sigmoid(torch.tensor(tau * (r - 1.0), dtype=torch.float64)).item()
    assert ratio.grad.item() == pytest.approx(sign * 4 * s * (1 - s), rel=1e-12, abs=1e-15)
    assert 0.0 < 4 * s * (1 - s) <= 1.0


@pytest.mark.parametrize("tau_pos, tau_neg", [(1.0, 1.05), (0.3, 3.0)])
def test_sapo_weight_is_one_on_policy_and_sign_picks_the_temperature(tau_pos, tau_neg):
    ratio = torch.ones(2, dtype=torch.float64, requires_grad=True)
    adv = torch.tensor([1.0, -1.0], dtype=torch.float64)
    out = sapo_surrogate(ratio, adv, tau_pos=tau_pos, tau_neg=tau_neg)
    (-out.per_token_loss).sum().backward()
    assert ratio.grad.tolist() == [1.0, -1.0]  # exactly: 4 * 0.5 * 0.5
    assert (-out.per_token_loss).tolist() == pytest.approx([2 / tau_pos, -2 / tau_neg])  # f(1) = 2/tau
    r = torch.tensor([1.5, 1.5], dtype=torch.float64, requires_grad=True)
    (-sapo_surrogate(r, adv, tau_pos=tau_pos, tau_neg=tau_neg).per_token_loss).sum().backward()
    for k, tau in enumerate((tau_pos, tau_neg)):
        s = torch.sigmoid(torch.tensor(tau * 0.5, dtype=torch.float64)).item()
        assert abs(r.grad[k].item()) == pytest.approx(4 * s * (1 - s))


@settings(max_examples=40)
@given(seed=st.integers(0, 10_000), spread=st.sampled_from([0.0, 0.01, 0.05, 0.2]))
def test_sapo_is_reinforce_on_policy_and_close_to_it_nearby(seed, spread):
    """d loss / d logp_t = -A r 4 sigma (1 - sigma) / (B |o|); its gap to the IS-REINFORCE weight -A r / (B|o|)
    is at most |A| r (tau (r - 1))^2 / 4 / (B |o|), so 0 on policy and second order nearby."""
    logp, old, _, adv, mask = _batch64(seed, spread=spread)
    _, g = _loss_and_grad(logp, old, adv, mask, variant="sapo")
    r = torch.exp(logp - old)
    tau = torch.where(adv > 0, 1.0, 1.05).double()[:, None]
    n = mask.sum(-1, keepdim=True) * mask.shape[0]
    reinforce_is = -adv[:, None] * r / n * mask  # the unclipped importance-weighted REINFORCE gradient
    bound = adv.abs()[:, None] * r * (tau * (r - 1)) ** 2 / 4 / n * mask
    assert ((g - reinforce_is).abs() <= bound + 1e-15).all()
    if spread == 0.0:
        reinforce = -adv[:, None] / n * mask
        assert torch.allclose(g, reinforce, atol=1e-15)


def test_registry_entries_of_notebooks_06_to_10_follow_the_papers():
    assert get_variant("dr_grpo").advantage_scale == "none"
    assert get_variant("dr_grpo").aggregation == "seq_mean_token_sum_norm"
    dapo = get_variant("dapo")
    assert dapo.loss_defaults["epsilon"] == 0.2 and dapo.loss_defaults["epsilon_high"] == 0.28
    assert dapo.aggregation == "token_mean" and dapo.train_defaults["beta"] == 0.0
    assert "Decoupled Clip and Dynamic sAmpling" in dapo.title
    for name in ("gspo", "gspo_token"):
        v = get_variant(name)
        assert (v.loss_defaults["epsilon"], v.loss_defaults["epsilon_high"]) == (3e-4, 4e-4)
    assert get_variant("gspo").ratio_level == "sequence" and get_variant("gspo_token").ratio_level == "sequence_token"
    sapo = get_variant("sapo")
    assert dict(sapo.loss_defaults) == {"tau_pos": 1.0, "tau_neg": 1.05}
    assert sapo.aggregation == "seq_mean_token_mean"
    assert get_variant("2-grpo").train_defaults["group_size"] == 2


# ============================================================================ the table for the closing note

def parity_table(seeds=SEEDS, betas=BETAS) -> dict[str, tuple[float, float, int]]:
    """variant -> (max |dloss|, max |dgrad|, number of batches) over the parity cases."""
    table: dict[str, tuple[float, float, int]] = {}
    for name, seed, beta in _cases():
        if seed not in seeds or beta not in betas:
            continue
        res = compare(name, seed, beta)
        dl, dg, n = table.get(name, (0.0, 0.0, 0))
        table[name] = (max(dl, res["dloss"]), max(dg, res["dgrad"]), n + 1)
    return table


if __name__ == "__main__":
    import os
    import sys

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    torch.set_num_threads(1)
    print("| variant | TRL config | batches | max abs dloss | max abs dgrad |")
    print("|---|---|---|---|---|")
    for name, (dl, dg, n) in parity_table().items():
        fields = ", ".join(f"{k}={v}" for k, v in {**PARITY[name][0], **PARITY[name][2]}.items())
        print(f"| `{name}` | {fields} | {n} | {dl:.1e} | {dg:.1e} |")
