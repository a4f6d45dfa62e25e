"""Parity of the off-policy pieces with TRL 1.16's own GRPOTrainer code: loss AND gradient.

CISPO, VESPO (with and without sampler weights), the four vLLM importance-sampling modes under
``grpo`` and ``dapo``, and the off-policy sequence mask.  The sampler weights TRL applies are
computed by TRL's own generation step (``trl_harness.trl_sampling_inputs``), not re-implemented.

The off-policy parity table of the course site (docs/package/verification.md) is printed by ``python tests/test_offpolicy_parity.py``.
"""

import pytest
import torch

from grpo_lessons import policy_loss
from trl_harness import trl_loss

SEEDS = [0, 1, 2]
TOL_LOSS, TOL_GRAD = 1e-6, 1e-6
CLIP_MIN, CLIP_MAX = 0.5, 2.0  # tight enough that every mode truncates or masks something


def _is(mode):
    trl = {"vllm_importance_sampling_correction": True, "vllm_importance_sampling_mode": mode,
           "vllm_importance_sampling_clip_min": CLIP_MIN, "vllm_importance_sampling_clip_max": CLIP_MAX}
    ours = {"rollout_correction": mode, "rollout_clip_min": CLIP_MIN, "rollout_clip_max": CLIP_MAX}
    return trl, ours


# name -> (our variant, TRL GRPOConfig fields, our extra kwargs, feed sampler log-probs?)
CASES = {
    "cispo (cap 5)": ("cispo", {"loss_type": "cispo", "epsilon_high": 5.0}, {}, False),
    "cispo (cap 1.2)": ("cispo", {"loss_type": "cispo", "epsilon_high": 1.2}, {"epsilon_high": 1.2}, False),
    "cispo (TRL eps 0.2)": ("cispo", {"loss_type": "cispo", "epsilon": 0.2}, {"epsilon": 0.2}, False),
    "vespo": ("vespo", {"loss_type": "vespo"}, {}, False),
    "off-policy mask (old)": ("grpo", {"loss_type": "grpo", "off_policy_mask_threshold": 0.05},
                              {"off_policy_mask_threshold": 0.05}, False),
    "off-policy mask (mu)": ("dapo", {"loss_type": "dapo", "epsilon_high": 0.28, "off_policy_mask_threshold": 0.05},
                             {"off_policy_mask_threshold": 0.05}, True),
}
for _mode in ("token_truncate", "token_mask"):
    _t, _o = _is(_mode)
    CASES[f"vespo + {_mode}"] = ("vespo", {"loss_type": "vespo", **_t}, _o, True)
for _mode in ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask"):
    _t, _o = _is(_mode)
    CASES[f"grpo + {_mode}"] = ("grpo", {"loss_type": "grpo", **_t}, _o, True)
    CASES[f"dapo + {_mode}"] = ("dapo", {"loss_type": "dapo", "epsilon_high": 0.28, **_t}, _o, True)
_t, _o = _is("sequence_mask")
CASES["cispo + sequence_mask + mask"] = (
    "cispo", {"loss_type": "cispo", "epsilon_high": 5.0, "off_policy_mask_threshold": 0.05, **_t},
    {"off_policy_mask_threshold": 0.05, **_o}, True)


def random_batch(seed, B=6, T=9):
    """Unequal lengths, ratios far from 1, a sampler off by ~0.5 nats per token, a reference model."""
    g = torch.Generator().manual_seed(seed)
    logp = -torch.rand(B, T, generator=g) * 3 - 0.05
    old = logp + 0.35 * torch.randn(B, T, generator=g)
    ref = logp + 0.2 * torch.randn(B, T, generator=g)
    sampling = old + 0.5 * torch.randn(B, T, generator=g)
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    lengths[0] = T
    mask = (torch.arange(T)[None, :] < lengths[:, None]).float()
    adv = torch.randn(B, generator=g)
    return logp, old, ref, sampling, adv, mask


def compare(case, seed, beta):
    variant, trl_fields, extra, with_sampler = CASES[case]
    logp, old, ref, sampling, adv, mask = random_batch(seed)
    T = logp.shape[1]
    trl_l, trl_g = trl_loss(logp, old, adv, mask, ref_logp=ref if beta else None,
                            sampling_logp=sampling if with_sampler else None, beta=beta,
                            max_completion_length=T, **trl_fields)
    x = logp.clone().requires_grad_(True)
    kw = dict(extra)
    if with_sampler:
        kw["sampling_logp"] = sampling
    out = policy_loss(x, old, adv, mask, variant=variant, beta=beta, ref_logp=ref if beta else None,
                      max_completion_length=T, **kw)
    out.loss.backward()
    return {
        "dloss": (out.loss.detach() - trl_l).abs().item(),
        "dgrad": (x.grad - trl_g).abs().max().item(),
        "loss": trl_l.item(),
        "grad_norm": trl_g.norm().item(),
        "out": out,
    }


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("beta", [0.0, 0.04])
@pytest.mark.parametrize("seed", SEEDS)
def test_loss_and_gradient_match_trl(case, beta, seed):
    res = compare(case, seed, beta)
    assert res["grad_norm"] > 1e-3  # a real gradient, not two zeros agreeing
    assert res["dloss"] < TOL_LOSS, res
    assert res["dgrad"] < TOL_GRAD, res


def test_batches_exercise_every_mechanism():
    """Over the three seeds, each mechanism really acts: clipping, truncation, masking, dropped sequences."""
    outs = {case: [compare(case, s, 0.0)["out"] for s in SEEDS] for case in CASES}
    assert max(o.clip_frac_high for o in outs["cispo (cap 1.2)"]) > 0.05
    for mode in ("token_truncate", "sequence_truncate"):
        assert max(o.is_truncated_frac for o in outs[f"grpo + {mode}"]) > 0.0, mode
    for mode in ("token_mask", "sequence_mask"):
        assert max(o.is_masked_frac for o in outs[f"grpo + {mode}"]) > 0.0, mode
    for case in ("off-policy mask (old)", "off-policy mask (mu)"):
        assert max(o.off_policy_masked_frac for o in outs[case]) > 0.0, case
    phi = [o.extras["vespo/phi_mean"] for o in outs["vespo"]]
    assert min(abs(p - 1.0) for p in phi) > 1e-3  # phi really differs from 1: the weight is tested


def test_parity_fails_when_it_should():
    """The harness tells a corrected loss from an uncorrected one, and VESPO's folded weights from none."""
    logp, old, _, sampling, adv, mask = random_batch(0)
    t, _ = _is("token_truncate")
    trl_l, _ = trl_loss(logp, old, adv, mask, sampling_logp=sampling, loss_type="grpo", beta=0.0,
                        max_completion_length=9, **t)
    assert (policy_loss(logp, old, adv, mask, variant="grpo").loss - trl_l).abs() > 1e-3
    trl_v, _ = trl_loss(logp, old, adv, mask, sampling_logp=sampling, loss_type="vespo", beta=0.0,
                        max_completion_length=9, **t)
    assert (policy_loss(logp, old, adv, mask, variant="vespo").loss - trl_v).abs() > 1e-4


if __name__ == "__main__":  # print the parity table
    print(f"{'variant / correction':32s} {'max|dloss|':>12s} {'max|dgrad|':>12s}")
    for c in CASES:
        rows = [compare(c, s, b) for s in SEEDS for b in (0.0, 0.04)]
        print(f"{c:32s} {max(r['dloss'] for r in rows):12.3e} {max(r['dgrad'] for r in rows):12.3e}")
