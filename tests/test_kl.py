import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from grpo_lessons import exact_kl, kl_estimate


def _sample(seed, vocab=6):
    g = torch.Generator().manual_seed(seed)
    theta = torch.randn(vocab, generator=g) * 1.5
    ref = torch.randn(vocab, generator=g) * 1.5
    x = torch.multinomial(theta.softmax(-1), 400_000, replacement=True, generator=g)  # x ~ pi_theta
    lp, rp = theta.log_softmax(-1)[x], ref.log_softmax(-1)[x]
    return theta, ref, lp.double(), rp.double()


@settings(max_examples=15)
@given(st.integers(0, 10_000))
def test_k1_k3_match_exact_kl_in_the_right_direction(seed):
    theta, ref, lp, rp = _sample(seed)
    true = exact_kl(theta, ref).item()  # KL(pi_theta || pi_ref)
    for kind in ("k1", "k3"):
        est = kl_estimate(lp, rp, kind).mean().item()
        assert est == pytest.approx(true, rel=0.05, abs=0.01), kind


def test_reverse_k3_is_the_wrong_kl():
    # the direction bug (Schulman 2020, "Approximating KL Divergence"; TRL's k3 uses r = pi_ref/pi_theta):
    # r = pi_theta/pi_ref estimates KL(pi_ref || pi_theta) only under pi_ref
    theta, ref, lp, rp = _sample(3)
    true = exact_kl(theta, ref).item()
    wrong = kl_estimate(rp, lp, "k3").mean().item()  # arguments swapped
    right = kl_estimate(lp, rp, "k3").mean().item()
    assert abs(right - true) < 0.02
    assert abs(wrong - true) > 0.1


@given(st.lists(st.floats(-30, 0), min_size=1, max_size=20), st.lists(st.floats(-30, 0), min_size=1, max_size=20))
def test_k3_and_k2_never_negative(a, b):
    n = min(len(a), len(b))
    lp, rp = torch.tensor(a[:n]), torch.tensor(b[:n])
    assert (kl_estimate(lp, rp, "k3") >= 0).all()
    assert (kl_estimate(lp, rp, "k2") >= 0).all()


def test_by_hand_and_errors():
    lp = torch.log(torch.tensor([0.5]))
    rp = torch.log(torch.tensor([0.25]))  # r = pi_ref / pi_theta = 0.5
    assert kl_estimate(lp, rp, "k1").item() == pytest.approx(-torch.log(torch.tensor(0.5)).item())
    assert kl_estimate(lp, rp, "k2").item() == pytest.approx(0.5 * torch.log(torch.tensor(0.5)).item() ** 2)
    assert kl_estimate(lp, rp, "k3").item() == pytest.approx(0.5 - 1 - torch.log(torch.tensor(0.5)).item())
    assert kl_estimate(lp, lp, "k3").item() == 0.0
    with pytest.raises(ValueError, match="known: k1, k2, k3"):
        kl_estimate(lp, rp, "k4")
    with pytest.raises(ValueError, match="shape"):
        kl_estimate(torch.zeros(2, 3), torch.zeros(2, 4))


def test_matches_trl_k3():
    torch.manual_seed(0)
    lp, rp = -torch.rand(4, 5) * 3, -torch.rand(4, 5) * 3
    trl = torch.exp(rp - lp) - (rp - lp) - 1
    assert torch.allclose(kl_estimate(lp, rp), trl, atol=1e-6)
