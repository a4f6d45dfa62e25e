"""The trainer's numerics against exact expectations: the policy is its reference before the first update in every
precision, bf16-mixed keeps fp32 master weights whatever dtype the model arrived in, an update with no unmasked
token changes nothing, the sampler draws exactly the distribution it records, and bf16 rounding keeps NaN."""

import math

import pytest
import torch

from grpo_lessons.core.kl import kl_estimate
from grpo_lessons.training.trainer import Trainer, batch_loss
from grpo_lessons.training.update import micro_batches
from test_trainer import ROWS, cfg, digits

# --------------------------------------------------------------------------------------------
# pi_ref == pi_theta before the first update, in every precision
# --------------------------------------------------------------------------------------------

PRECISIONS = {
    "fp32": dict(),
    "bf16-mixed": dict(precision="bf16-mixed"),
    "fp32+bf16-sampler": dict(sampler_dtype="bfloat16"),
    "bf16-mixed+bf16-sampler": dict(precision="bf16-mixed", sampler_dtype="bfloat16"),
    "bf16-mixed+last-block": dict(precision="bf16-mixed", trainable_layers=1),
    "lora": dict(lora=True, lora_r=4),
    "lora+bf16-mixed": dict(lora=True, lora_r=4, precision="bf16-mixed"),
    "lora+bf16-mixed+bf16-sampler": dict(lora=True, lora_r=4, precision="bf16-mixed", sampler_dtype="bfloat16"),
}


def step1_kl(tr: Trainer) -> tuple[float, float]:
    """(max per-token k3, logged kl) of the trainer's first step: the training forward against ``pi_ref``."""
    b = tr.sample_batch()
    c = tr.cfg
    logp = torch.cat([batch_loss(tr.train_model, b.rollout, b.advantages, b.loss_mask, variant=tr.variant,
                                 temperature=c.temperature, beta=tr.beta, ref_logps=b.ref_logps, rows=sl,
                                 max_completion_length=c.max_new_tokens, precision=c.precision)[1].detach()
                      for sl in micro_batches(len(b.rewards), c.group_size, c.micro_batch_size)])  # (N, T)
    m = b.loss_mask > 0
    k3 = kl_estimate(logp, b.ref_logps, "k3")[m]  # (n,)
    row = tr.update(b)
    return float(k3.abs().max()), row["kl"]


@pytest.mark.parametrize("name", list(PRECISIONS))
def test_policy_is_its_reference_before_the_first_update(tmp_path, name):
    if "lora" in name:
        pytest.importorskip("peft")
    tr = Trainer(cfg(tmp_path, eval_size=0, beta=0.1, lr=1e-2, micro_batch_size=4, **PRECISIONS[name]),
                 train_rows=ROWS, reward_funcs=[digits])
    k3_max, kl = step1_kl(tr)
    assert k3_max < 1e-7, k3_max
    assert kl is not None and abs(kl) < 1e-7, kl
    # and it is a reference: after an update at lr 1e-2 the policy has moved away from it
    assert tr.step()["kl"] > 1e-6


@pytest.mark.slow
def test_smollm2_bf16_mixed_policy_is_its_reference_before_the_first_update(tmp_path):
    pytest.importorskip("gguf")
    from grpo_lessons.training.data import get_task

    rows = get_task("arithmetic").rows("train")[:2]
    tr = Trainer(cfg(tmp_path, model="smollm2", eval_size=0, beta=0.04, lr=3e-5, precision="bf16-mixed",
                     sampler_dtype="bfloat16", group_size=2, max_new_tokens=4, micro_batch_size=4),
                 train_rows=rows, reward_funcs=[digits])
    k3_max, kl = step1_kl(tr)
    assert k3_max < 1e-7 and abs(kl) < 1e-7, (k3_max, kl)


# --------------------------------------------------------------------------------------------
# bf16-mixed keeps fp32 master weights whatever dtype the model arrived in
# --------------------------------------------------------------------------------------------

def changed_share(before: list[torch.Tensor], after: list[torch.Tensor]) -> float:
    """The share of weights whose value an update changed."""
    n = sum(a.numel() for a in before)
    return sum(int((a != b).sum()) for a, b in zip(before, after)) / n


def test_bf16_loaded_model_trains_fp32_master_weights_under_bf16_mixed(tmp_path):
    from grpo_lessons.training.models import tiny_qwen, tiny_tokenizer

    tok = tiny_tokenizer()
    shares, masters = {}, {}
    for loaded in (torch.bfloat16, torch.float32):
        # the same weights both ways: bf16's, held in bf16 or in fp32
        model = tiny_qwen(tok, dtype=torch.bfloat16).to(loaded)
        tr = Trainer(cfg(tmp_path, str(loaded), eval_size=0, precision="bf16-mixed", lr=3e-5, steps=1),
                     model=model, tokenizer=tok, train_rows=ROWS, reward_funcs=[digits])
        opt = [p for g in tr.optimizer.param_groups for p in g["params"]]
        assert opt and all(p.dtype == torch.float32 for p in opt)  # AdamW steps fp32 master weights
        assert all(p.dtype == torch.bfloat16 for p in tr.train_model.parameters())  # bf16 compute
        before = [p.detach().clone() for p in tr.params]
        tr.step()
        shares[loaded] = changed_share(before, [p.detach() for p in tr.params])
        masters[loaded] = torch.cat([p.detach().flatten() for p in tr.params])
    assert shares[torch.bfloat16] > 0.5, shares  # a bf16 weight would round most lr = 3e-5 steps away
    assert shares[torch.bfloat16] == shares[torch.float32], shares
    assert torch.equal(masters[torch.bfloat16], masters[torch.float32])  # the same update, to the bit


def test_on_cuda_the_defaults_are_fp32_weights_and_bf16_mixed_compute(monkeypatch):
    from grpo_lessons.training.models import _resolve_dtype
    from grpo_lessons.training.train_config import TrainConfig

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert _resolve_dtype(None, "cuda") == torch.float32  # the weights: fp32 masters
    assert TrainConfig(device="cuda").resolve().precision == "bf16-mixed"  # the compute: bf16
    assert TrainConfig(device="cpu").resolve().precision == "fp32"  # a CPU keeps fp32, what the parity tests check
    assert TrainConfig(device="cuda", precision="fp32").resolve().precision == "fp32"  # an explicit choice stays
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    assert TrainConfig(device="cuda").resolve().precision == "fp32"


# --------------------------------------------------------------------------------------------
# A batch with no unmasked token takes no optimiser step
# --------------------------------------------------------------------------------------------

def optimizer_state(tr: Trainer) -> list[tuple[str, torch.Tensor]]:
    return [(k, v.detach().clone()) for s in tr.optimizer.state.values() for k, v in sorted(s.items())]


def test_all_masked_batch_skips_the_optimiser_step(tmp_path):
    tr = Trainer(cfg(tmp_path, eval_size=0, lr=1e-2, weight_decay=0.1, beta=0.1, steps=2), train_rows=ROWS,
                 reward_funcs=[digits])
    first = tr.update(tr.sample_batch())  # a normal step: AdamW now has moments and a step count
    assert first["update_skipped"] == 0 and first["grad_norm"] > 0
    b = tr.sample_batch()
    b.loss_mask = torch.zeros_like(b.loss_mask)  # every completion masked (e.g. all truncated, overlong filtering)
    weights = [p.detach().clone() for p in tr.params]
    compute = [p.detach().clone() for p in tr.train_model.parameters()]
    state = optimizer_state(tr)
    m = tr.update(b)
    assert m["update_skipped"] == 1 and m["groups_trained"] == 0 and m["loss"] == 0.0 and m["kl"] == 0.0
    assert all(torch.equal(a, p) for a, p in zip(weights, tr.params))  # weight decay did not move them
    assert all(torch.equal(a, p) for a, p in zip(compute, tr.train_model.parameters()))
    after = optimizer_state(tr)
    assert [k for k, _ in after] == [k for k, _ in state]
    assert all(torch.equal(a, b) for (_, a), (_, b) in zip(state, after))  # moments and step count unchanged
    assert all(p.grad is None for p in tr.params)


def test_all_truncated_step_is_logged_as_skipped(tmp_path):
    # a random tiny model never stops within 6 tokens: under overlong filtering every completion is masked
    res = pytest.importorskip("test_trainer").run(
        cfg(tmp_path, eval_size=0, lr=1e-2, weight_decay=0.1, mask_truncated_completions=True, steps=1))
    row = res.history[-1]
    assert row["truncated_frac"] == 1.0 and row["update_skipped"] == 1
    assert row["loss"] == 0.0 and row["grad_norm"] is None  # the loss of nothing is 0; no gradient was taken
    with open(res.csv_path) as f:
        assert "update_skipped" in f.readline().strip().split(",")


# --------------------------------------------------------------------------------------------
# The sampler draws exactly the distribution it records
# --------------------------------------------------------------------------------------------

def fixed_uniforms(values: torch.Tensor):
    """A stand-in for ``torch.rand(n, 1, ...)`` that returns ``values`` (n,) in the dtype asked for."""
    def rand(*size, dtype=None, device=None, generator=None, **kw):
        return values.to(dtype or torch.get_default_dtype()).reshape(*size)
    return rand


def test_inverse_cdf_draws_the_last_token_when_it_has_mass(monkeypatch):
    from grpo_lessons.training.rollout import InverseCDFSampler

    # p = (1 - 1e-9, 1e-9): a running sum in fp32 never leaves 1.0, so the last token had an empty interval
    scores = torch.tensor([[0.0, -20.723]])  # (1, V)
    assert 0 < float(torch.softmax(scores, -1)[0, 1]) < 1e-8
    top = torch.tensor([1 - 2.0 ** -53], dtype=torch.float64)  # the largest uniform below 1 (fp32 rounds it to 1)
    monkeypatch.setattr(torch, "rand", lambda *size, dtype=None, **kw: (
        top if dtype == torch.float64 else torch.tensor([1 - 2.0 ** -24])).reshape(*size))
    s = InverseCDFSampler(1.0)
    assert int(s(None, scores.clone()).argmax(-1)) == 1  # the top of the uniform's range is the last token
    # a uniform of 0 is the first token with mass; a token without mass is never drawn, even at the top of the range
    monkeypatch.setattr(torch, "rand", fixed_uniforms(torch.tensor([0.0, 1 - 2.0 ** -53], dtype=torch.float64)))
    s = InverseCDFSampler(1.0, top_k=1)
    assert s(None, torch.tensor([[0.0, 5.0, 1.0]]).expand(2, -1).clone()).argmax(-1).tolist() == [1, 1]


def test_inverse_cdf_intervals_are_those_of_the_recorded_distribution(monkeypatch):
    """On a 49k vocabulary a uniform in the middle of token i's interval of the recorded distribution draws token i,
    for small tokens (p 2e-8 to 2e-7) in the top half of the CDF, where fp32's spacing (6e-8) cannot place them."""
    from grpo_lessons.training.rollout import InverseCDFSampler

    g = torch.Generator().manual_seed(0)
    V, T = 49152, 1.0
    scores = (torch.randn(V, generator=g) * 3).expand(1, -1)  # (1, V)
    rec = InverseCDFSampler(T, record_topk=V)  # records every token's log-prob: the recorded distribution
    rec(None, scores.clone())
    ids, lps = rec.topk()  # (1, 1, V) each
    q = torch.zeros(V, dtype=torch.float64).scatter_(0, ids[0, 0], lps[0, 0].double().exp())  # (V,)
    cdf = (q / q.sum()).cumsum(0)  # (V,) in fp64
    small = torch.nonzero((q > 2e-8) & (q < 2e-7) & (cdf > 0.5)).flatten()
    idx = small[torch.randperm(len(small), generator=g)[:64]]  # (64,)
    assert len(idx) == 64 and int(idx.min()) > 0
    u = (cdf[idx - 1] + cdf[idx]) / 2  # (64,) the middle of each interval [cdf_{i-1}, cdf_i)
    monkeypatch.setattr(torch, "rand", fixed_uniforms(u))
    s = InverseCDFSampler(T)
    drawn = s(None, scores.expand(len(u), -1).clone()).argmax(-1)
    assert torch.equal(drawn, idx), f"{int((drawn != idx).sum())} of {len(idx)} drawn elsewhere"


def test_inverse_cdf_frequencies_pass_a_chi_square_test_against_the_recorded_probabilities():
    from grpo_lessons.training.rollout import InverseCDFSampler

    g = torch.Generator().manual_seed(3)
    V, n = 12, 200_000
    logits = torch.randn(V, generator=g) * 2
    logits[-1] = logits.min() - 3  # the last token in CDF order is the rarest (p ~ 1e-3): it must still be drawn
    torch.manual_seed(0)
    s = InverseCDFSampler(0.8)
    drawn = s(None, logits.expand(n, -1).clone()).argmax(-1)
    p = s.logps()[:, 0].double().exp()  # the recorded probability of each drawn token
    q = torch.zeros(V, dtype=torch.float64).scatter_(0, drawn, p)  # (V,) recorded p per token (of drawn ones)
    assert bool((q > 0).all())  # every token was drawn, the rarest included
    counts = torch.bincount(drawn, minlength=V).double()
    expected = n * q / q.sum()
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    p_value = float(torch.special.gammaincc(torch.tensor((V - 1) / 2), torch.tensor(chi2 / 2)))
    assert p_value > 1e-3, (chi2, p_value)


# --------------------------------------------------------------------------------------------
# Dithered bf16 rounding keeps NaN a NaN
# --------------------------------------------------------------------------------------------

def test_round_to_bf16_keeps_nan_and_infinities():
    from grpo_lessons.training.train_setup import round_to_bf16

    # NaN bit patterns: quiet, the largest mantissa (+ and -), the smallest (one bit in the dropped half), signalling
    nan_bits = torch.tensor([0x7FC00000, 0x7FFFFFFF, -1, 0x7F800001, 0x7F808000, -0x007FFFFF, 0x7FA00000],
                            dtype=torch.int32)
    src = torch.cat([nan_bits.view(torch.float32), torch.tensor([float("inf"), -float("inf"), 0.0, -1.5, 0.1])])
    assert bool(src[:7].isnan().all())
    for thr in (0, 1, 1 << 15, (1 << 16) - 1):
        out = round_to_bf16(src.clone(), torch.full(src.shape, thr, dtype=torch.int32))
        assert bool(out[:7].isnan().all()), (thr, out[:7])
        assert out[7] == float("inf") and out[8] == -float("inf") and out[9] == 0.0 and out[10] == -1.5
        assert torch.equal(out.to(torch.bfloat16).float()[7:], out[7:])  # bf16 holds every result exactly
        assert bool(out.to(torch.bfloat16).isnan()[:7].all())
