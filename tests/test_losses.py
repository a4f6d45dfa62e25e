from collections.abc import Mapping

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from grpo_lessons import get_variant, kl_estimate, list_variants, policy_loss
from grpo_lessons.core.aggregation import aggregate, token_weights
from grpo_lessons.core.variants import NOT_IN_TRL

CLIPPED = ["grpo", "bnpo", "dr_grpo", "dapo", "gspo", "gspo_token", "2-grpo"]


def batch(seed, B=4, T=6, spread=0.0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    logp = -torch.rand(B, T, generator=g, dtype=dtype) * 3 - 0.05
    old = logp + spread * torch.randn(B, T, generator=g, dtype=dtype)
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    mask = (torch.arange(T)[None, :] < lengths[:, None]).to(dtype)
    adv = torch.randn(B, generator=g, dtype=dtype)
    return logp, old, adv, mask


def grad_of(fn, logp):
    x = logp.clone().requires_grad_(True)
    fn(x).backward()
    return x.grad


@settings(max_examples=25)
@given(st.integers(0, 10_000), st.sampled_from(CLIPPED + ["sapo"]))
def test_on_policy_gradient_is_reinforce(seed, variant):
    """At ratio 1 the clipped (and soft-gated) objectives have the REINFORCE gradient -A grad log pi, aggregated."""
    logp, _, adv, mask = batch(seed)
    v = get_variant(variant)
    g = grad_of(lambda x: policy_loss(x, x.detach(), adv, mask, variant=variant).loss, logp)
    reinforce = grad_of(lambda x: aggregate(-adv[:, None] * x, mask, v.aggregation), logp)
    if v.ratio_level == "sequence":  # d s_i / d logp_t = 1/|o_i| at s = 1, summed per sequence
        reinforce = grad_of(
            lambda x: aggregate(-adv[:, None] * ((x * mask).sum(-1, keepdim=True) / mask.sum(-1, keepdim=True)),
                                mask, v.aggregation), logp)
    assert torch.allclose(g, reinforce, atol=1e-10)


@settings(max_examples=25)
@given(st.integers(0, 10_000), st.sampled_from(["grpo", "bnpo", "dr_grpo", "dapo"]))
def test_clipped_tokens_get_exactly_zero_gradient(seed, variant):
    logp, old, adv, mask = batch(seed, spread=0.6)
    out = policy_loss(logp, old, adv, mask, variant=variant)
    eps, eps_high = out.params["epsilon"], out.params["epsilon_high"]
    g = grad_of(lambda x: policy_loss(x, old, adv, mask, variant=variant).loss, logp)
    r = torch.exp(logp - old)
    a = adv[:, None].expand_as(r)
    clipped = (((r > 1 + eps_high) & (a > 0)) | ((r < 1 - eps) & (a < 0))) & (mask > 0)
    unclipped = ~clipped & (mask > 0) & (a != 0)
    assert (g[clipped] == 0).all()
    assert (g[unclipped] != 0).all()
    assert (g[mask == 0] == 0).all()  # padding never gets gradient


@settings(max_examples=25)
@given(st.integers(0, 10_000))
def test_gspo_equals_grpo_for_one_token_completions(seed):
    logp, old, adv, _ = batch(seed, T=1, spread=0.3)
    mask = torch.ones_like(logp)
    kw = dict(epsilon=0.2, epsilon_high=0.28)
    a = policy_loss(logp, old, adv, mask, variant="gspo", **kw).loss
    b = policy_loss(logp, old, adv, mask, variant="grpo", **kw).loss
    assert torch.allclose(a, b, atol=1e-12)
    ga = grad_of(lambda x: policy_loss(x, old, adv, mask, variant="gspo", **kw).loss, logp)
    gb = grad_of(lambda x: policy_loss(x, old, adv, mask, variant="grpo", **kw).loss, logp)
    assert torch.allclose(ga, gb, atol=1e-12)


@settings(max_examples=25)
@given(st.integers(0, 10_000), st.integers(1, 8), st.integers(0, 8))
def test_dr_grpo_is_dapo_times_a_constant_when_lengths_are_equal(seed, length, extra):
    logp, old, adv, _ = batch(seed, T=length, spread=0.4)
    mask = torch.ones_like(logp)
    L = length + extra  # Dr. GRPO's constant
    dr = policy_loss(logp, old, adv, mask, variant="dr_grpo", epsilon_high=0.28, max_completion_length=L).loss
    da = policy_loss(logp, old, adv, mask, variant="dapo", epsilon_high=0.28).loss
    assert torch.allclose(dr, da * length / L, atol=1e-12)


def test_loss_value_is_beta_kl_on_policy():
    """'Why is my loss zero?': on policy, the surrogate's value is -mean(A) (0 for centred advantages),
    the loss value is beta * KL, and the gradient is not zero."""
    logp, _, _, mask = batch(0, B=4)
    adv = torch.tensor([1.0, -1.0, 0.5, -0.5], dtype=torch.float64)
    mask = torch.ones_like(logp)  # equal lengths so that sum(A)=0 makes the surrogate exactly 0
    ref = logp + 0.3
    x = logp.clone().requires_grad_(True)
    out = policy_loss(x, x.detach(), adv, mask, variant="grpo", beta=0.04, ref_logp=ref)
    kl = kl_estimate(logp, ref).mean()
    assert out.policy_loss.item() == pytest.approx(0.0, abs=1e-12)
    assert out.loss.item() == pytest.approx(0.04 * kl.item(), rel=1e-9)
    assert out.kl.item() == pytest.approx(kl.item(), rel=1e-9) and out.kl_token_mean == pytest.approx(kl.item())
    # unequal lengths: .kl follows the variant's aggregation, so loss == policy_loss + beta * kl on policy
    _, _, _, ragged = batch(3, B=4)
    ref2 = logp + 0.5 * torch.randn(logp.shape, generator=torch.Generator().manual_seed(9), dtype=logp.dtype)
    o2 = policy_loss(logp, logp, adv, ragged, variant="grpo", beta=0.04, ref_logp=ref2)
    assert o2.loss.item() == pytest.approx(o2.policy_loss.item() + 0.04 * o2.kl.item(), rel=1e-9)
    assert o2.kl.item() != pytest.approx(o2.kl_token_mean, rel=1e-6)
    out.loss.backward()
    assert x.grad.abs().max() > 1e-3


def test_kl_gradient_conventions_differ_off_policy_and_agree_in_value_on_policy():
    logp, old, adv, mask = batch(1, spread=0.2)
    ref = logp - 0.2
    kw = dict(variant="grpo", beta=0.1, ref_logp=ref)
    on_w = policy_loss(logp, logp, adv, mask, **kw).loss
    on_p = policy_loss(logp, logp, adv, mask, kl_importance_weighted=False, **kw).loss
    assert torch.allclose(on_w, on_p)
    gw = grad_of(lambda x: policy_loss(x, old, adv, mask, **kw).loss, logp)
    gp = grad_of(lambda x: policy_loss(x, old, adv, mask, kl_importance_weighted=False, **kw).loss, logp)
    assert not torch.allclose(gw, gp)


def test_importance_weighted_kl_gradient_is_unbiased():
    """E_{x~pi_old}[grad (r * k3)] equals the gradient of the exact KL(pi_theta || pi_ref); plain k3 does not."""
    g = torch.Generator().manual_seed(0)
    V = 5
    theta = torch.randn(V, generator=g, dtype=torch.float64, requires_grad=True)
    old_logits = (theta.detach() + 0.5 * torch.randn(V, generator=g, dtype=torch.float64))
    ref_logits = torch.randn(V, generator=g, dtype=torch.float64)
    exact = (theta.softmax(-1) * (theta.log_softmax(-1) - ref_logits.log_softmax(-1))).sum()
    (true_grad,) = torch.autograd.grad(exact, theta)
    p_old = old_logits.softmax(-1)

    def expected_grad(weighted):
        # exact expectation over x ~ pi_old: sum_x pi_old(x) * grad loss_x
        lp = theta.log_softmax(-1)[:, None]  # (V, 1): each token as a one-token completion
        olp = old_logits.log_softmax(-1)[:, None]
        rp = ref_logits.log_softmax(-1)[:, None]
        ratio = torch.exp(lp - olp)
        k3 = kl_estimate(lp, rp)
        per = k3 * ratio if weighted else k3
        (gr,) = torch.autograd.grad((p_old[:, None] * per).sum(), theta)
        return gr

    assert torch.allclose(expected_grad(True), true_grad, atol=1e-10)
    assert not torch.allclose(expected_grad(False), true_grad, atol=1e-3)


def test_all_zero_mask_row():
    logp, old, adv, mask = batch(2, B=3, spread=0.2)
    mask[1] = 0
    for v in ("grpo", "dapo", "dr_grpo"):
        full = policy_loss(logp, old, adv, mask, variant=v).per_token_loss
        base = policy_loss(logp, old, adv, mask, variant=v).loss
        # changing the masked row's numbers changes nothing
        logp2 = logp.clone()
        logp2[1] = -7.0
        assert torch.allclose(policy_loss(logp2, old, adv, mask, variant=v).loss, base)
        assert full.shape == logp.shape
    # grpo: the empty row still counts in B
    B = 3
    per = policy_loss(logp, old, adv, mask, variant="grpo").per_token_loss
    rows = [(per[i] * mask[i]).sum() / mask[i].sum() for i in (0, 2)]
    assert policy_loss(logp, old, adv, mask, variant="grpo").loss.item() == pytest.approx(sum(rows).item() / B)


def test_token_weights_show_length_bias():
    mask = torch.zeros(2, 10)
    mask[0, :2] = 1
    mask[1, :10] = 1
    w = token_weights(mask, "seq_mean_token_mean")
    assert w[0, 0].item() == pytest.approx(1 / (2 * 2))
    assert w[1, 0].item() == pytest.approx(1 / (2 * 10))
    assert torch.allclose(token_weights(mask, "token_mean")[mask > 0], torch.full((12,), 1 / 12))
    assert torch.allclose(token_weights(mask, "seq_mean_token_sum_norm", max_completion_length=20)[mask > 0],
                          torch.full((12,), 1 / 40))


def test_defaults_come_from_the_registry():
    logp, old, adv, mask = batch(0)
    assert policy_loss(logp, old, adv, mask, variant="dapo").params == {"epsilon": 0.2, "epsilon_high": 0.28}
    assert policy_loss(logp, old, adv, mask, variant="grpo").params == {"epsilon": 0.2, "epsilon_high": 0.2}
    assert policy_loss(logp, old, adv, mask, variant="grpo", epsilon=0.1).params["epsilon_high"] == 0.1
    assert policy_loss(logp, old, adv, mask, variant="gspo").params == {"epsilon": 3e-4, "epsilon_high": 4e-4}
    assert policy_loss(logp, old, adv, mask, variant="sapo").params == {"tau_pos": 1.0, "tau_neg": 1.05}
    assert policy_loss(logp, old, adv, mask).variant == "dapo"


def test_an_explicit_epsilon_alone_gives_the_symmetric_range():
    # TRL's rule (epsilon_high defaults to epsilon). Keeping GSPO's 4e-4 next to epsilon=0.2 would clip
    # every ratio above 1.0004 -- a silent wrong number.
    logp, old, adv, mask = batch(0)
    assert policy_loss(logp, old, adv, mask, variant="gspo", epsilon=0.2).params == {"epsilon": 0.2,
                                                                                      "epsilon_high": 0.2}
    assert policy_loss(logp, old, adv, mask, variant="dapo", epsilon=0.1).params["epsilon_high"] == 0.1
    assert policy_loss(logp, old, adv, mask, variant="dapo", epsilon=0.1, epsilon_high=0.3).params == {
        "epsilon": 0.1, "epsilon_high": 0.3}
    sym = policy_loss(logp, old, adv, mask, variant="gspo", epsilon=0.2).loss
    both = policy_loss(logp, old, adv, mask, variant="gspo", epsilon=0.2, epsilon_high=0.2).loss
    assert torch.equal(sym, both)


@pytest.mark.parametrize(
    "mutate, exc, msg",
    [
        (lambda a: a.update(adv=torch.zeros(3)), ValueError, r"adv must be \(B,\)"),
        (lambda a: a.update(adv=torch.zeros(4, 1)), ValueError, r"adv must be \(B,\)"),
        (lambda a: a.update(old_logp=torch.zeros(4, 5)), ValueError, "old_logp has shape"),
        (lambda a: a.update(mask=torch.ones(4, 5)), ValueError, "mask has shape"),
        (lambda a: a.update(logp=torch.zeros(4)), ValueError, r"\(B, T\)"),
        (lambda a: a.update(variant="ppo2"), ValueError, "known variants: 2-grpo, bnpo"),
        (lambda a: a.update(beta=0.1), ValueError, "needs ref_logp"),
        (lambda a: a.update(mask=torch.full((4, 6), 0.5)), ValueError, "only 0 and 1"),
        (lambda a: a.update(adv=torch.tensor([0.0, float("nan"), 0.0, 0.0])), ValueError, r"adv contains NaN"),
        (lambda a: a.update(variant="sapo", epsilon=0.2), TypeError, "no clip range"),
        (lambda a: a.update(variant="grpo", tau_pos=1.0), TypeError, "unexpected"),
    ],
)
def test_clear_errors(mutate, exc, msg):
    logp, old, adv, mask = batch(0)
    args = dict(logp=logp, old_logp=old, adv=adv, mask=mask)
    mutate(args)
    with pytest.raises(exc, match=msg):
        policy_loss(**args)


def test_nan_in_padding_is_ignored_but_nan_in_completion_is_an_error():
    logp, old, adv, mask = batch(0)
    mask[0, -1] = 0
    old[0, -1] = float("nan")
    assert torch.isfinite(policy_loss(logp, old, adv, mask, variant="grpo").loss)
    old[1, 0] = float("nan")
    with pytest.raises(ValueError, match=r"old_logp contains NaN or inf at positions \[\(1, 0\)\]"):
        policy_loss(logp, old, adv, mask, variant="grpo")


def test_registry_entries_are_complete():
    for name in list_variants():
        v = get_variant(name)
        assert v.citation and v.title and v.notebook
        # TRL's fields for the method, or the explicit marker that TRL's GRPOTrainer cannot compute it
        assert v.trl is NOT_IN_TRL or (isinstance(v.trl, Mapping) and v.trl), (name, v.trl)
    with pytest.raises(ValueError, match="already registered"):
        from grpo_lessons import register
        register(get_variant("grpo"))
