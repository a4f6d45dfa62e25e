"""DPPO (Qi et al. 2026, arXiv 2602.04879): hand-computed cases, the top-K divergence, the trust-region rule.

DPPO is not in TRL: the paper's worked case and direct computations are the reference.
"""

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from grpo_lessons import policy_loss
from grpo_lessons.core.divergence import topk_divergence
from grpo_lessons.core.kl import exact_kl
from grpo_lessons.core.objectives import dppo_trust_mask

D = torch.float64
# A worked case from DPPO's definitions (Qi et al. 2026, arXiv 2602.04879): mu, p, sign of A per token
MU = torch.tensor([[0.5, 0.5, 0.9, 0.05]], dtype=D)
P = torch.tensor([[0.7, 0.3, 0.99, 0.2]], dtype=D)
A_TOK = torch.tensor([[1.0, -1.0, 1.0, 1.0]], dtype=D)
# The last token sits exactly on the TV threshold (p - mu = 0.15): nudge delta so rounding cannot decide.
TV_DELTA = {"delta_low": 0.15 + 1e-9, "delta_high": 0.15 + 1e-9}


def _rows():
    """The four tokens as four one-token completions, so each gets its own advantage."""
    return P.log().T.contiguous(), MU.log().T.contiguous(), A_TOK.reshape(-1), torch.ones(4, 1, dtype=D)


def test_worked_case_masks_and_weights():
    lp, lmu, A, _ = P.log(), MU.log(), A_TOK, None
    keep_tv = dppo_trust_mask(lp, lmu, A, kind="binary_tv", **TV_DELTA)
    assert keep_tv.tolist() == [[0.0, 0.0, 1.0, 1.0]]
    kl = MU * (lmu - lp) + (1 - MU) * torch.log((1 - MU + 1e-8) / (1 - P + 1e-8))
    assert kl.squeeze().tolist() == pytest.approx([0.0872, 0.0872, 0.1445, 0.0939], abs=1e-4)
    keep_kl = dppo_trust_mask(lp, lmu, A, kind="binary_kl", delta_low=0.05, delta_high=0.05)
    assert keep_kl.tolist() == [[0.0, 0.0, 0.0, 0.0]]


@pytest.mark.parametrize("variant,keep", [("dppo_binary_tv", [0, 0, 1, 1]), ("dppo_binary_kl", [0, 0, 0, 0])])
def test_worked_case_loss_and_gradient(variant, keep):
    """-A sg(min(p/mu, 3)) M log p, token mean: d loss / d log p_t = -A_t w_t M_t / 4, w = [1.4, 0.6, 1.1, 3.0]."""
    lp, lmu, A, mask = _rows()
    x = lp.clone().requires_grad_(True)
    kw = TV_DELTA if variant.endswith("tv") else {}
    out = policy_loss(x, lmu, A, mask, variant=variant, **kw)  # no sampler: the anchor is pi_old = mu here
    out.loss.backward()
    w = torch.tensor([1.4, 0.6, 1.1, 3.0], dtype=D)
    M = torch.tensor(keep, dtype=D)
    assert x.grad.squeeze(-1).tolist() == pytest.approx((-A * w * M / 4).tolist(), abs=1e-12)
    assert float(out.loss.detach()) == pytest.approx(float((-A * w * M * lp.squeeze(-1)).sum() / 4), abs=1e-12)
    assert out.clip_frac == pytest.approx(1 - sum(keep) / 4)


@pytest.mark.parametrize("variant,keep", [("dppo_topk_tv", [0, 0, 1, 1]), ("dppo_topk_kl", [0, 0, 0, 0])])
def test_worked_case_top_k_with_the_binary_divergence(variant, keep):
    """The top-K modes take D from outside: given the worked case's binary TV / KL they mask the same tokens."""
    lp, lmu, A, mask = _rows()
    mu, p = lmu.exp(), lp.exp()
    if variant.endswith("tv"):
        div = (p - mu).abs()
    else:
        div = mu * (lmu - lp) + (1 - mu) * torch.log((1 - mu) / (1 - p))
    x = lp.clone().requires_grad_(True)
    kw = TV_DELTA if variant.endswith("tv") else {}
    policy_loss(x, lmu, A, mask, variant=variant, divergence=div, **kw).loss.backward()
    w = torch.tensor([1.4, 0.6, 1.1, 3.0], dtype=D)
    assert x.grad.squeeze(-1).tolist() == pytest.approx((-A * w * torch.tensor(keep, dtype=D) / 4).tolist(), abs=1e-12)


def test_anchor_is_the_sampler_when_given():
    """With sampling_logp the mask and the weight use mu from the sampler, not pi_old."""
    lp, lmu, A, mask = _rows()
    far_old = lmu - 1.0  # a pi_old that would mask and weight differently
    a = policy_loss(lp, far_old, A, mask, variant="dppo_binary_tv", sampling_logp=lmu)
    b = policy_loss(lp, lmu, A, mask, variant="dppo_binary_tv")
    c = policy_loss(lp, far_old, A, mask, variant="dppo_binary_tv")
    assert float(a.loss) == pytest.approx(float(b.loss), abs=1e-12)
    assert abs(float(a.loss) - float(c.loss)) > 1e-3


def test_options_override_the_paper_defaults():
    lp, lmu, A, mask = _rows()
    out = policy_loss(lp, lmu, A, mask, variant="dppo_binary_tv", delta_low=0.25, delta_high=0.25, ratio_cap=1.2)
    assert out.params == {"kind": "binary_tv", "delta_low": 0.25, "delta_high": 0.25, "ratio_cap": 1.2}
    assert out.clip_frac == 0.0  # |p - mu| <= 0.2 everywhere: nothing masked at delta 0.25


def _random_distributions(seed, B=2, T=3, V=6):
    g = torch.Generator().manual_seed(seed)
    mu_logits = torch.randn(B, T, V, generator=g, dtype=D) * 1.5
    logits = mu_logits + 0.7 * torch.randn(B, T, V, generator=g, dtype=D)
    sampled = torch.randint(V, (B, T), generator=g)
    return mu_logits, logits, sampled


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_topk_with_k_equal_v_is_the_exact_divergence(seed):
    mu_logits, logits, sampled = _random_distributions(seed)
    V = logits.shape[-1]
    lp_mu = torch.log_softmax(mu_logits, -1)
    order = lp_mu.argsort(-1, descending=True)  # all V ids in rank order
    kl = topk_divergence(order, lp_mu.gather(-1, order), logits, sampled, kind="kl")
    tv = topk_divergence(order, lp_mu.gather(-1, order), logits, sampled, kind="tv")
    assert torch.allclose(kl, exact_kl(mu_logits, logits), atol=1e-10)
    exact_tv = 0.5 * (lp_mu.exp() - torch.softmax(logits, -1)).abs().sum(-1)
    assert torch.allclose(tv, exact_tv, atol=1e-10)
    assert V == order.shape[-1]


def test_topk_temperature_scales_the_trainer_logits():
    mu_logits, logits, sampled = _random_distributions(3)
    lp_mu = torch.log_softmax(mu_logits, -1)
    order = lp_mu.argsort(-1, descending=True)
    kl = topk_divergence(order, lp_mu.gather(-1, order), logits, sampled, kind="kl", temperature=0.7)
    assert torch.allclose(kl, exact_kl(mu_logits, logits / 0.7), atol=1e-10)


def test_topk_by_hand_with_rest_bucket_and_replacement():
    """V = 4, K = 2: mu's top-2 are ids 0, 1 (0.5, 0.3); the sampled id 3 replaces id 1."""
    logits = torch.log(torch.tensor([[[0.4, 0.2, 0.1, 0.3]]], dtype=D))
    ids = torch.tensor([[[0, 1]]])
    lp = torch.log(torch.tensor([[[0.5, 0.3]]], dtype=D))
    sampled = torch.tensor([[3]])
    with pytest.raises(ValueError, match="sampled_logp"):
        topk_divergence(ids, lp, logits, sampled)
    s_lp = torch.log(torch.tensor([[0.05]], dtype=D))
    # buckets after replacement: mu (0.5, 0.05, rest 0.45), pi_theta (0.4, 0.3, rest 0.3)
    tv = topk_divergence(ids, lp, logits, sampled, kind="tv", sampled_logp=s_lp)
    assert float(tv) == pytest.approx(0.5 * (0.1 + 0.25 + 0.15), abs=1e-12)
    kl = topk_divergence(ids, lp, logits, sampled, kind="kl", sampled_logp=s_lp)
    by_hand = 0.5 * math.log(0.5 / 0.4) + 0.05 * math.log(0.05 / 0.3) + 0.45 * math.log(0.45 / 0.3)
    assert float(kl) == pytest.approx(by_hand, abs=1e-12)


def test_topk_minus_inf_log_probs_are_probability_zero():
    """A sampler truncated to top_k = 2 records K = 3 entries, the third at -inf (probability 0).

    V = 4, mu = (0.7, 0.3, 0, 0) over ids 0..3, pi_theta = (0.5, 0.25, 0.15, 0.1), sampled id 0:
    KL(mu || pi_theta) = 0.7 log(0.7/0.5) + 0.3 log(0.3/0.25) + 0 log 0 (= 0) + rest (mu's rest is 0: the 1e-12 floor)
    TV = (|0.7 - 0.5| + |0.3 - 0.25| + |0 - 0.15| + |0 - 0.1|) / 2 = 0.25.
    Both raised "NaN or inf" before.
    """
    q = torch.tensor([[[0.5, 0.25, 0.15, 0.1]]], dtype=D)
    logits = q.log().requires_grad_(True)
    ids = torch.tensor([[[0, 1, 2]]])
    lp = torch.tensor([[[math.log(0.7), math.log(0.3), float("-inf")]]], dtype=D)
    sampled = torch.tensor([[0]])
    kl = topk_divergence(ids, lp, logits, sampled, kind="kl")
    rest = 1e-12 * math.log(1e-12 / 0.1)  # the floor's contribution, -2.5e-11
    by_hand = 0.7 * math.log(0.7 / 0.5) + 0.3 * math.log(0.3 / 0.25)  # 0.2902270
    assert kl.item() == pytest.approx(by_hand + rest, abs=1e-14)
    assert kl.item() == pytest.approx(0.2902270, abs=1e-7)
    kl.sum().backward()
    assert torch.isfinite(logits.grad).all()
    # d KL / d logits_v = q_v - mu_v over the listed buckets (softmax's Jacobian): mu = (0.7, 0.3, 0, 0)
    assert logits.grad.squeeze().tolist() == pytest.approx([0.5 - 0.7, 0.25 - 0.3, 0.15, 0.1], abs=1e-10)
    tv = topk_divergence(ids, lp, logits.detach(), sampled, kind="tv")
    assert float(tv) == pytest.approx(0.25, abs=1e-11)
    # K = V with two -inf entries equals the exact divergences of the full distributions
    mu = torch.tensor([[[0.7, 0.3, 0.0, 0.0]]], dtype=D)
    ids4 = torch.tensor([[[0, 1, 2, 3]]])
    kl4 = topk_divergence(ids4, mu.log(), q.log(), sampled, kind="kl")
    assert float(kl4) == pytest.approx(by_hand, abs=1e-11)
    assert float(topk_divergence(ids4, mu.log(), q.log(), sampled, kind="tv")) == pytest.approx(0.25, abs=1e-11)
    # the sampled token itself cannot have probability 0; NaN and +inf stay errors
    with pytest.raises(ValueError, match="probability 0"):
        topk_divergence(ids, lp, q.log(), torch.tensor([[2]]), kind="kl")
    for bad in (float("nan"), float("inf")):
        with pytest.raises(ValueError, match="NaN or inf"):
            topk_divergence(ids, torch.tensor([[[math.log(0.7), math.log(0.3), bad]]], dtype=D), q.log(), sampled)


@pytest.mark.parametrize("bad,match", [
    ({"ids": torch.tensor([[[0, 4]]])}, "outside the vocabulary"),
    ({"ids": torch.tensor([[[-1, 0]]])}, "outside the vocabulary"),
    ({"sampled": torch.tensor([[9]])}, "outside the vocabulary"),
    ({"ids": torch.tensor([[[1, 1]]])}, "repeats a token id"),
    ({"kind": "js"}, "unknown divergence kind"),
    ({"temperature": 0.0}, "temperature"),
    ({"lp": torch.tensor([[[float("nan"), -1.0]]], dtype=D)}, "NaN"),
    ({"logits": torch.zeros(1, 2, 4, dtype=D)}, "shapes disagree"),
])
def test_topk_clear_errors(bad, match):
    kw = {"ids": torch.tensor([[[0, 1]]]), "lp": torch.log(torch.tensor([[[0.5, 0.3]]], dtype=D)),
          "logits": torch.zeros(1, 1, 4, dtype=D), "sampled": torch.tensor([[1]]), "kind": "tv", "temperature": 1.0}
    kw.update(bad)
    with pytest.raises(ValueError, match=match):
        topk_divergence(kw["ids"], kw["lp"], kw["logits"], kw["sampled"], kind=kw["kind"], temperature=kw["temperature"])


@pytest.mark.parametrize("kind", ["tv", "kl"])
@pytest.mark.parametrize("seed", [0, 1])
def test_topk_with_only_the_sampled_token_equals_the_binary_variant(kind, seed):
    """K = 1 holding the sampled token: the top-K TV/KL is the binary one, so the losses agree (to 1e-8)."""
    mu_logits, logits, sampled = _random_distributions(seed, B=4, T=5, V=7)
    lp_mu = torch.log_softmax(mu_logits, -1)
    lp_theta = torch.log_softmax(logits, -1)
    mu_tok = lp_mu.gather(-1, sampled[..., None]).squeeze(-1)  # (B, T)
    p_tok = lp_theta.gather(-1, sampled[..., None]).squeeze(-1)  # (B, T)
    div = topk_divergence(sampled[..., None], mu_tok[..., None], logits, sampled, kind=kind)
    adv = torch.tensor([1.0, -1.0, 0.5, -0.3], dtype=D)
    mask = torch.ones(4, 5, dtype=D)
    delta = 0.02  # small, so both masks drop something
    kw = dict(delta_low=delta, delta_high=delta)
    x1 = p_tok.clone().requires_grad_(True)
    top = policy_loss(x1, mu_tok, adv, mask, variant=f"dppo_topk_{kind}", divergence=div, **kw)
    top.loss.backward()
    x2 = p_tok.clone().requires_grad_(True)
    binary = policy_loss(x2, mu_tok, adv, mask, variant=f"dppo_binary_{kind}", **kw)
    binary.loss.backward()
    assert 0 < binary.clip_frac < 1
    assert float(top.loss.detach()) == pytest.approx(float(binary.loss.detach()), abs=1e-7)
    assert torch.allclose(x1.grad, x2.grad, atol=1e-8)


def test_topk_variant_needs_its_divergence():
    lp, lmu, A, mask = _rows()
    with pytest.raises(ValueError, match="needs divergence"):
        policy_loss(lp, lmu, A, mask, variant="dppo_topk_kl")
    with pytest.raises(ValueError, match="divergence= applies to DPPO"):
        policy_loss(lp, lmu, A, mask, variant="dapo", divergence=torch.zeros(4, 1, dtype=D))


@given(st.floats(0.01, 0.99), st.floats(0.01, 0.99), st.sampled_from([-1.0, 0.0, 1.0]),
       st.sampled_from(["binary_tv", "binary_kl"]), st.floats(0.01, 0.3))
def test_a_token_is_masked_only_when_it_moved_beyond_delta_in_its_advantages_direction(mu, p, a, kind, delta):
    lp = torch.tensor([[math.log(p)]], dtype=D)
    lmu = torch.tensor([[math.log(mu)]], dtype=D)
    keep = float(dppo_trust_mask(lp, lmu, torch.tensor([[a]], dtype=D), kind=kind, delta_low=delta, delta_high=delta))
    if kind == "binary_tv":
        moved = abs(p - mu)
    else:
        moved = mu * math.log(mu / p) + (1 - mu) * math.log((1 - mu + 1e-8) / (1 - p + 1e-8))
    wants_up = a > 0
    same_direction = (p > mu) if wants_up else (p < mu)
    if keep == 0.0:
        assert same_direction and moved > delta - 1e-12
    elif same_direction and moved > delta + 1e-9:
        pytest.fail(f"token moved {moved} > {delta} towards its advantage but was kept")
