"""attn_implementation="auto" changes no model's numbers: the plain-matmul GQA kernel only where it is exact.

Tiny random models of each family, built offline from their transformers Config classes.  The query/key weights are
scaled up so the attention logits are large (|s| >> 5): that is where Gemma 2's softcap c * tanh(s / c) bites; GPT-OSS's
sink logits are drawn with spread 2, so the sinks take a real share of the softmax.
"""

import copy

import pytest
import torch

from grpo_lessons.training.attention import (GQA_ATTENTION, GQA_EXACT_FAMILIES, apply_attention, gqa_eager_attention,
                                             gqa_is_exact)
from grpo_lessons.training.train_config import TrainConfig
from grpo_lessons.training.train_setup import set_attention

V = 128
BASE = dict(vocab_size=V, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, max_position_embeddings=256)


def family(name: str):
    """A tiny random causal LM of family ``name`` on eager attention, with large attention logits."""
    import transformers as tf

    if name == "gemma2":
        model = tf.Gemma2ForCausalLM(tf.Gemma2Config(**BASE, attn_logit_softcapping=5.0, final_logit_softcapping=None,
                                                     sliding_window=4, query_pre_attn_scalar=16))
    elif name == "gpt_oss":
        model = tf.GptOssForCausalLM(tf.GptOssConfig(**{**BASE, "intermediate_size": 32}, num_local_experts=4,
                                                     num_experts_per_tok=2, sliding_window=4,
                                                     rope_parameters={"rope_type": "default", "rope_theta": 10000.0}))
    elif name == "mistral":
        model = tf.MistralForCausalLM(tf.MistralConfig(**BASE, sliding_window=4))  # the window lives in the mask
    else:
        cls = {"llama": (tf.LlamaConfig, tf.LlamaForCausalLM), "qwen2": (tf.Qwen2Config, tf.Qwen2ForCausalLM),
               "qwen3": (tf.Qwen3Config, tf.Qwen3ForCausalLM)}[name]
        model = cls[1](cls[0](**BASE))
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n.endswith(("q_proj.weight", "k_proj.weight")):
                p.mul_(15)  # attention logits of tens, far past the softcap of 5
            if n.endswith("sinks"):
                p.normal_(0.0, 2.0)
    model.set_attn_implementation("eager")
    return model.eval()


def token_logps(model, ids, mask):
    """(n,) log-probs of every real next token."""
    with torch.no_grad():
        lp = model(input_ids=ids, attention_mask=mask).logits.float().log_softmax(-1)  # (B, L, V)
    return lp[:, :-1].gather(-1, ids[:, 1:, None])[..., 0][mask[:, 1:].bool()]


@pytest.fixture(scope="module")
def batch():
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, V, (2, 12), generator=g)
    mask = torch.ones_like(ids)
    mask[1, :3] = 0  # left padding: the mask matters
    return ids, mask


@pytest.mark.parametrize("name", ["gemma2", "gpt_oss", "llama", "mistral", "qwen2", "qwen3"])
def test_auto_attention_on_a_cpu_gives_the_eager_log_probs(name, batch, tmp_path):
    torch.manual_seed(0)
    eager = family(name)
    auto = copy.deepcopy(eager)
    set_attention(TrainConfig(out=str(tmp_path), attn_implementation="auto", device="cpu"), auto)
    gap = float((token_logps(eager, *batch) - token_logps(auto, *batch)).abs().max())
    assert gap < 1e-5, f"{name}: log-probs differ from eager by {gap}"
    exact = name in GQA_EXACT_FAMILIES
    assert gqa_is_exact(auto) is exact
    # the fast kernel where it is exact (the speed-up stays), the model's own attention elsewhere
    assert (auto.config._attn_implementation == GQA_ATTENTION) is exact


@pytest.mark.parametrize("name,what", [("gemma2", "softcapping"), ("gpt_oss", "sinks")])
def test_the_kernel_refuses_what_it_does_not_compute(name, what):
    """Forcing the kernel onto these families is an error, not other numbers (0.08 / 0.22 nats off eager here)."""
    torch.manual_seed(0)
    model = family(name)
    with pytest.raises(ValueError, match="exact only for"):
        apply_attention(model, "gqa")
    assert model.config._attn_implementation == "eager"  # left as it was
    module = torch.nn.Module()
    module.training = False
    q, kv = torch.randn(1, 4, 3, 16), torch.randn(1, 2, 3, 16)
    kw = {"softcap": 5.0} if name == "gemma2" else {"s_aux": torch.zeros(4)}
    with pytest.raises(ValueError, match=what):
        gqa_eager_attention(module, q, kv, kv, None, scaling=0.25, **kw)
    module.sinks = torch.nn.Parameter(torch.zeros(4))  # GPT-OSS's eager reads the sinks off the module
    with pytest.raises(ValueError, match="sinks"):
        gqa_eager_attention(module, q, kv, kv, None, scaling=0.25)


def test_softcapping_in_an_allowed_family_is_not_exact(tmp_path):
    """The config check stands behind the allow-list: a softcap makes any family inexact."""
    from transformers import LlamaConfig, LlamaForCausalLM

    model = LlamaForCausalLM(LlamaConfig(**BASE))
    assert gqa_is_exact(model)
    model.config.attn_logit_softcapping = 30.0
    assert not gqa_is_exact(model)
    set_attention(TrainConfig(out=str(tmp_path), attn_implementation="auto", device="cpu"), model)
    assert model.config._attn_implementation != GQA_ATTENTION
