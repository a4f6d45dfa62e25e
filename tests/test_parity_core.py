"""Parity with TRL 1.16's own GRPOTrainer._compute_loss on identical tensors: loss AND gradient.

The parity table of the course site (docs/package/verification.md) is printed by ``python tests/test_parity_core.py``.
"""

import pytest
import torch

from grpo_lessons import policy_loss
from trl_harness import trl_loss

# our variant -> (TRL GRPOConfig fields, our extra kwargs)
CASES = {
    "grpo": ({"loss_type": "grpo", "epsilon": 0.2}, {}),
    "bnpo": ({"loss_type": "bnpo", "epsilon": 0.2}, {}),
    "dr_grpo": ({"loss_type": "dr_grpo", "epsilon": 0.2}, {}),
    "dapo": ({"loss_type": "dapo", "epsilon": 0.2, "epsilon_high": 0.28}, {}),
    "gspo": ({"loss_type": "grpo", "importance_sampling_level": "sequence", "epsilon": 3e-4, "epsilon_high": 4e-4}, {}),
}
SEEDS = [0, 1, 2]
TOL_LOSS, TOL_GRAD = 1e-6, 1e-6


def random_batch(seed, B=6, T=9):
    """Unequal lengths, ratios far from 1 (so clipping is active), a reference model off by ~0.2 nats."""
    g = torch.Generator().manual_seed(seed)
    logp = -torch.rand(B, T, generator=g) * 3 - 0.05
    old = logp + 0.35 * torch.randn(B, T, generator=g)
    ref = logp + 0.2 * torch.randn(B, T, generator=g)
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    lengths[0] = T
    mask = (torch.arange(T)[None, :] < lengths[:, None]).float()
    adv = torch.randn(B, generator=g)
    return logp, old, ref, adv, mask


def compare(variant, seed, beta, max_len=None, bias_correction=True):
    trl_fields, extra = CASES[variant]
    logp, old, ref, adv, mask = random_batch(seed)
    T = logp.shape[1]
    L = max_len or T
    trl_l, trl_g = trl_loss(logp, old, adv, mask, ref_logp=ref if beta else None, beta=beta,
                            max_completion_length=L, use_bias_correction_kl=bias_correction, **trl_fields)
    x = logp.clone().requires_grad_(True)
    out = policy_loss(x, old, adv, mask, variant=variant, beta=beta, ref_logp=ref if beta else None,
                      max_completion_length=L, kl_importance_weighted=bias_correction, **extra)
    out.loss.backward()
    r = torch.exp(logp - old)
    return {
        "dloss": (out.loss.detach() - trl_l).abs().item(),
        "dgrad": (x.grad - trl_g).abs().max().item(),
        "loss": trl_l.item(),
        "clip": out.clip_frac,
        "frac_far": ((r - 1).abs() > 0.2)[mask > 0].float().mean().item(),
        "grad_norm": trl_g.norm().item(),
    }


@pytest.mark.parametrize("variant", list(CASES))
@pytest.mark.parametrize("beta", [0.0, 0.04])
@pytest.mark.parametrize("seed", SEEDS)
def test_loss_and_gradient_match_trl(variant, beta, seed):
    res = compare(variant, seed, beta)
    assert res["grad_norm"] > 1e-3  # a real gradient, not two zeros agreeing
    if variant != "gspo":
        assert res["clip"] > 0.05, "the batch must exercise clipping"
    assert res["dloss"] < TOL_LOSS, res
    assert res["dgrad"] < TOL_GRAD, res


@pytest.mark.parametrize("variant", ["grpo", "dapo"])
def test_plain_k3_matches_trl_without_bias_correction(variant):
    res = compare(variant, 5, beta=0.1, bias_correction=False)
    assert res["dloss"] < TOL_LOSS and res["dgrad"] < TOL_GRAD, res


def test_dr_grpo_constant_matches_trl_max_completion_length():
    res = compare("dr_grpo", 7, beta=0.0, max_len=32)
    assert res["dloss"] < TOL_LOSS and res["dgrad"] < TOL_GRAD, res


def test_parity_fails_when_it_should():
    """The harness can tell variants apart: grpo vs TRL's bnpo differ on unequal lengths."""
    logp, old, _, adv, mask = random_batch(0)
    trl_l, _ = trl_loss(logp, old, adv, mask, loss_type="bnpo", beta=0.0, max_completion_length=9)
    ours = policy_loss(logp, old, adv, mask, variant="grpo").loss
    assert (ours - trl_l).abs() > 1e-3


if __name__ == "__main__":  # print the parity table
    print(f"{'variant':10s} {'max|dloss|':>12s} {'max|dgrad|':>12s}")
    for v in CASES:
        rows = [compare(v, s, b) for s in SEEDS for b in (0.0, 0.04)]
        print(f"{v:10s} {max(r['dloss'] for r in rows):12.3e} {max(r['dgrad'] for r in rows):12.3e}")
