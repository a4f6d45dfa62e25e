"""The CPU speed-ups of the trainer change no number that matters: the fused token log-prob, grouped-query attention
without key/value copies, the bf16 compute copy with fp32 master weights, and glibc's memory reuse."""

import math

import pytest
import torch

from grpo_lessons.training.attention import GQA_ATTENTION, gqa_eager_attention, use_gqa_attention
from grpo_lessons.training.models import tiny_qwen, tiny_tokenizer
from grpo_lessons.training.rollout import TemperedTokenLogp, encode_prompts, generate_completions
from grpo_lessons.training.train_setup import low_precision_copy, reuse_freed_memory
from grpo_lessons.training.trainer import TrainConfig, Trainer

from test_trainer import ROWS, cfg, digits, is_bf16_rounding


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


def reference_token_logps(logits, targets, temperature):
    """What autograd computes without the hand-written backward: fp32 tempered log-softmax, picked."""
    x = logits.float() / temperature
    return x.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(x, dim=-1)


# --------------------------------------------------------------------------------------------
# TemperedTokenLogp: the vocabulary-sized part of the update, forward and backward by hand
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("temperature", [0.7, 1.0])
def test_tempered_token_logp_matches_autograd(dtype, temperature):
    g = torch.Generator().manual_seed(0)
    logits = (torch.randn(3, 5, 40, generator=g) * 4).to(dtype)
    targets = torch.randint(0, 40, (3, 5), generator=g)
    upstream = torch.randn(3, 5, generator=g)
    a = logits.clone().requires_grad_()
    b = logits.clone().requires_grad_()
    out_a = TemperedTokenLogp.apply(a, targets, temperature)
    out_b = reference_token_logps(b, targets, temperature)
    assert out_a.dtype == torch.float32  # fp32 log-probs whatever the logits' dtype
    torch.testing.assert_close(out_a, out_b, atol=1e-6, rtol=0)
    (out_a * upstream).sum().backward()
    (out_b * upstream).sum().backward()
    assert a.grad.dtype == dtype
    torch.testing.assert_close(a.grad.float(), b.grad.float(), atol=1e-6 if dtype == torch.float32 else 1e-2,
                               rtol=0 if dtype == torch.float32 else 1e-2)
    torch.testing.assert_close(logits, a.detach())  # the input is never modified in place


def test_tempered_token_logp_gradcheck():
    x = torch.randn(2, 3, 7, dtype=torch.float64, requires_grad=True)
    y = torch.randint(0, 7, (2, 3))
    assert torch.autograd.gradcheck(lambda z: TemperedTokenLogp.apply(z, y, 0.7), (x,))


def test_tempered_token_logp_gradient_by_hand():
    # d log softmax(x / T)[y] / dx = (onehot(y) - softmax(x / T)) / T
    x = torch.tensor([[[1.0, 2.0, 0.0]]], requires_grad=True)
    TemperedTokenLogp.apply(x, torch.tensor([[1]]), 0.5).sum().backward()
    p = torch.softmax(torch.tensor([1.0, 2.0, 0.0]) / 0.5, dim=0)
    torch.testing.assert_close(x.grad[0, 0], (torch.tensor([0.0, 1.0, 0.0]) - p) / 0.5)


# --------------------------------------------------------------------------------------------
# Grouped-query attention without repeat_kv
# --------------------------------------------------------------------------------------------

def test_gqa_attention_equals_repeat_kv_eager_by_hand():
    from transformers.models.llama.modeling_llama import eager_attention_forward

    g = torch.Generator().manual_seed(1)
    B, H, Hkv, L, S, d = 2, 6, 2, 3, 5, 4
    q, k, v = (torch.randn(B, h, n, d, generator=g) for h, n in ((H, L), (Hkv, S), (Hkv, S)))
    mask = torch.zeros(B, 1, L, S)
    mask[0, :, :, :2] = torch.finfo(torch.float32).min  # row 0: the first two keys are padding
    module = torch.nn.Module()
    module.num_key_value_groups, module.training = H // Hkv, False
    ours, w_ours = gqa_eager_attention(module, q, k, v, mask, scaling=0.5)
    ref, w_ref = eager_attention_forward(module, q, k, v, mask, scaling=0.5)
    torch.testing.assert_close(ours, ref)
    torch.testing.assert_close(w_ours, w_ref)
    assert float(w_ours[0, :, :, :2].abs().max()) == 0.0  # padding gets no weight
    with pytest.raises(ValueError, match="evenly"):
        gqa_eager_attention(module, torch.randn(1, 5, 1, d), k[:1], v[:1], None, scaling=1.0)


def test_gqa_model_logits_gradients_and_samples_match_eager(tok):
    ref = tiny_qwen(tok, num_heads=4, num_kv_heads=2)
    ref.set_attn_implementation("eager")
    ours = tiny_qwen(tok, num_heads=4, num_kv_heads=2)
    use_gqa_attention(ours)
    assert ours.config._attn_implementation == GQA_ATTENTION
    enc = encode_prompts(tok, ["What is 2 + 3?", "Hi"])  # left padding: the mask matters
    pos = (enc["attention_mask"].cumsum(-1) - 1).clamp(min=0)
    grads = []
    for m in (ref, ours):
        logits = m(**enc, position_ids=pos).logits
        logits[enc["attention_mask"].bool()].logsumexp(-1).sum().backward()
        grads.append([p.grad.clone() for p in m.parameters()])
    torch.testing.assert_close(ours(**enc, position_ids=pos).logits, ref(**enc, position_ids=pos).logits)
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)
    # with a key/value cache (generation): the same tokens and log-probs from the same seed
    r1 = generate_completions(ref, tok, ["What is 2 + 3?", "Hi"], 3, max_new_tokens=5, generator_seed=0)
    r2 = generate_completions(ours, tok, ["What is 2 + 3?", "Hi"], 3, max_new_tokens=5, generator_seed=0)
    assert torch.equal(r1.completion_ids, r2.completion_ids)
    torch.testing.assert_close(r1.sampling_logps, r2.sampling_logps)


def test_auto_attention_is_gqa_on_a_cpu_and_bad_names_are_refused(tmp_path):
    tr = Trainer(cfg(tmp_path, eval_size=0), train_rows=ROWS, reward_funcs=[digits])
    assert tr.model.config._attn_implementation == GQA_ATTENTION
    keep = Trainer(cfg(tmp_path, "keep", eval_size=0, attn_implementation=None), train_rows=ROWS,
                   reward_funcs=[digits])
    assert keep.model.config._attn_implementation != GQA_ATTENTION
    with pytest.raises(ValueError, match="attn_implementation"):
        TrainConfig(out=str(tmp_path), attn_implementation="").validate()


# --------------------------------------------------------------------------------------------
# bf16-mixed: a bf16 compute copy, fp32 master weights
# --------------------------------------------------------------------------------------------

def test_low_precision_copy_casts_weights_not_buffers(tok):
    m = tiny_qwen(tok)
    c = low_precision_copy(m, torch.bfloat16, trainable=False)
    assert all(p.dtype == torch.bfloat16 and not p.requires_grad for p in c.parameters())
    bufs = dict(c.named_buffers())
    inv = [n for n in bufs if n.endswith("inv_freq")]
    assert inv and all(bufs[n].dtype == torch.float32 for n in inv)  # RoPE's angles are not rounded to bf16
    assert all(p.requires_grad for p in m.parameters())  # the original is untouched


def test_bf16_mixed_trains_a_bf16_copy_into_fp32_master_weights(tmp_path):
    tr = Trainer(cfg(tmp_path, eval_size=0, precision="bf16-mixed", sampler_dtype="bfloat16", lr=1e-2),
                 train_rows=ROWS, reward_funcs=[digits])
    assert tr.train_model is not tr.model and tr.sampler is tr.train_model  # one bf16 copy samples and trains
    assert all(p.dtype == torch.float32 for p in tr.params)
    assert all(p.dtype == torch.bfloat16 for p in tr.train_model.parameters())
    before = [p.detach().clone() for p in tr.params]
    row = tr.step()
    assert math.isfinite(row["loss"]) and row["grad_norm"] > 0
    assert any(not torch.equal(a, p) for a, p in zip(before, tr.params))  # the fp32 weights moved
    for (n, c), (_, p) in zip(tr.train_model.named_parameters(), tr.model.named_parameters()):
        assert is_bf16_rounding(c, p.detach()), n  # the copy is resynced from them (dithered rounding)
        assert c.grad is None  # its gradients went into the fp32 weights
    # The copy samples and trains, so the only sampler/trainer gap is bf16's own order of computation
    assert row["mismatch_k3"] < 0.05


def test_bf16_mixed_gradient_is_the_fp32_gradient_to_bf16_accuracy_and_adds_up_over_micro_batches(tmp_path):
    grads = {}
    for name, kw in {"fp32": dict(precision="fp32"), "bf16": dict(precision="bf16-mixed"),
                     "bf16_micro": dict(precision="bf16-mixed", micro_batch_size=4)}.items():
        tr = Trainer(cfg(tmp_path, name, eval_size=0, **kw), train_rows=ROWS, reward_funcs=[digits])
        torch.manual_seed(0)
        batch = tr.prepare(tr.sample())
        tr.optimizer.step = lambda *a, **k: None  # keep the gradient, skip the update
        tr.optimizer.zero_grad = lambda *a, **k: None
        tr.update(batch)
        grads[name] = torch.cat([p.grad.flatten() for p in tr.params])
        assert grads[name].dtype == torch.float32
    cos = torch.nn.functional.cosine_similarity(grads["fp32"], grads["bf16"], dim=0)
    assert cos > 0.99, float(cos)  # the same direction, up to bf16 rounding
    # two micro-batches accumulate in fp32 into the same gradient as one
    torch.testing.assert_close(grads["bf16_micro"], grads["bf16"], atol=2e-3, rtol=2e-2)


def test_bf16_mixed_with_lora_moves_the_adapter(tmp_path):
    pytest.importorskip("peft")
    tr = Trainer(cfg(tmp_path, eval_size=0, lora=True, lora_r=4, lr=1e-2, precision="bf16-mixed", beta=0.04),
                 train_rows=ROWS, reward_funcs=[digits])
    tr.step()
    row = tr.step()
    assert math.isfinite(row["loss"]) and row["kl"] is not None
    lora = {n: p for n, p in tr.model.named_parameters() if p.requires_grad}
    assert lora and all(p.dtype == torch.float32 for p in lora.values())
    assert any(float(p.detach().abs().max()) > 0 for n, p in lora.items() if "lora_B" in n)


def test_reuse_freed_memory_applies_on_linux_glibc():
    import platform

    ok = reuse_freed_memory()
    assert reuse_freed_memory() == ok  # once per process, same answer
    if platform.system() == "Linux" and platform.libc_ver()[0] == "glibc":
        assert ok is True
    # it changes how memory is handed back, not what is computed
    x = torch.randn(1000, 1000)
    assert torch.equal(x @ torch.eye(1000), x)


def test_reuse_freed_memory_is_the_clis_choice_not_the_librarys(tmp_path, monkeypatch):
    """A Trainer built from the default TrainConfig (a notebook, a library user) leaves glibc's allocator alone; the
    ``grpo-lessons train`` process turns the reuse on (and --no-reuse-freed-memory turns it off)."""
    import grpo_lessons.training.trainer as trainer_module
    from grpo_lessons.training.cli import main

    calls = []
    monkeypatch.setattr(trainer_module, "reuse_freed_memory", lambda: calls.append(1) or True)
    tr = Trainer(cfg(tmp_path, "lib", eval_size=0, steps=1), train_rows=ROWS, reward_funcs=[digits])
    tr.step()
    assert calls == []
    smoke = ["train", "--model", "tiny-qwen2", "--steps", "1", "-G", "2", "--prompts-per-step", "2",
             "--max-new-tokens", "4", "--eval-size", "0", "--no-progress"]
    assert main([*smoke, "--out", str(tmp_path / "cli")]) == 0
    assert calls == [1]
    assert main([*smoke, "--no-reuse-freed-memory", "--out", str(tmp_path / "cli-off")]) == 0
    assert calls == [1]
    assert TrainConfig().reuse_freed_memory is False


def test_inverse_cdf_fast_path_matches_the_general_path():
    from grpo_lessons.training.rollout import InverseCDFSampler

    g = torch.Generator().manual_seed(2)
    scores = torch.randn(64, 500, generator=g) * 3
    out = {}
    for name, top_k in (("fast", 0), ("general", 500)):  # top_k = V truncates nothing but takes the general path
        s = InverseCDFSampler(0.7, top_k=top_k, record_topk=3)
        torch.manual_seed(0)
        drawn = s(None, scores.clone()).argmax(-1)
        out[name] = (drawn, s.logps(), s.entropy(), s.topk())
    assert torch.equal(out["fast"][0], out["general"][0])  # the same uniforms give the same tokens
    torch.testing.assert_close(out["fast"][1], out["general"][1])
    torch.testing.assert_close(out["fast"][2], out["general"][2])
    p = torch.softmax(scores / 0.7, -1)
    torch.testing.assert_close(out["fast"][2][:, 0], -(p * p.log()).sum(-1))  # entropy by hand
    assert torch.equal(out["fast"][3][0], out["general"][3][0])


# --------------------------------------------------------------------------------------------
# Rounding the fp32 weights into the bf16 copies: dithered, so the copy follows small updates
# --------------------------------------------------------------------------------------------

def test_dithered_copy_follows_updates_far_below_bf16_spacing_where_nearest_lags():
    from grpo_lessons.training.train_setup import LowPrecisionSync

    g = torch.Generator().manual_seed(0)
    # weights on fp16's grid, as SmolLM2's are: 8 positions per bf16 interval around 0.13 (bf16 spacing 2**-10)
    s = 2.0 ** -10
    w0 = (0.125 + s * (torch.randint(0, 64, (200_000,), generator=g).float() / 8)).float()
    step = s / 32  # one AdamW step of lr 3e-5 is about a thirtieth of the spacing
    ratios = {}
    for rounding in ("nearest", "dither"):
        src = w0.clone()
        dst = torch.empty(src.shape, dtype=torch.bfloat16)
        sync = LowPrecisionSync([(dst, src)], rounding, seed=1)
        sync()
        start = dst.float().clone()
        ratios[rounding] = []
        for k in range(1, 7):  # six small steps: how far did the copy move, against the weights?
            src += step
            sync()
            assert is_bf16_rounding(dst, src)
            ratios[rounding].append(float((dst.float() - start).mean()) / (k * step))
    assert all(abs(r - 1.0) < 0.05 for r in ratios["dither"]), ratios  # the copy keeps pace, step by step
    # nearest rounding moves in lumps: every weight at one grid position crosses the midpoint on the same step
    assert max(abs(r - 1.0) for r in ratios["nearest"]) > 0.3, ratios
    # negative weights, zeros and infinities come through correctly
    src = torch.tensor([-0.3, 0.0, -0.0, float("inf"), float("-inf"), 1e-30])
    dst = torch.empty(6, dtype=torch.bfloat16)
    LowPrecisionSync([(dst, src)], "dither")()
    assert is_bf16_rounding(dst, src) and torch.isinf(dst[3:5]).all() and dst[3] > 0 > dst[4]
    with pytest.raises(ValueError, match="rounding"):
        LowPrecisionSync([], "stochastic")


def test_copy_rounding_nearest_is_the_plain_cast(tmp_path):
    tr = Trainer(cfg(tmp_path, eval_size=0, sampler_dtype="bfloat16", copy_rounding="nearest", lr=1e-2),
                 train_rows=ROWS, reward_funcs=[digits])
    tr.step()
    for (n, c), (_, p) in zip(tr.sampler.named_parameters(), tr.model.named_parameters()):
        assert torch.equal(c, p.detach().to(torch.bfloat16)), n
    with pytest.raises(ValueError, match="copy_rounding"):
        TrainConfig(out=str(tmp_path), copy_rounding="up").validate()


def test_sampler_fp32_head_is_an_untied_fp32_copy_kept_in_sync(tmp_path):
    from grpo_lessons.training.train_setup import FP32Head

    tr = Trainer(cfg(tmp_path, eval_size=0, sampler_dtype="bfloat16", sampler_fp32_head=True, lr=1e-2,
                     copy_rounding="nearest"), train_rows=ROWS, reward_funcs=[digits])
    head = tr.sampler.get_output_embeddings()
    assert isinstance(head, FP32Head) and head.weight.dtype == torch.float32
    assert tr.sampler.get_input_embeddings().weight.dtype == torch.bfloat16  # the body stays bf16
    tr.step()
    master = tr.model.get_output_embeddings().weight.detach()
    assert torch.equal(head.weight, master)  # fp32 -> fp32: copied exactly after the update
    assert not torch.equal(master, tr.model.get_output_embeddings().weight.detach().to(torch.bfloat16).float())
    with pytest.raises(ValueError, match="sampler_fp32_head"):
        TrainConfig(out=str(tmp_path), sampler_fp32_head=True).validate()
