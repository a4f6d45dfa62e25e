"""Grouped-query attention as plain matmuls, without copying the keys and values for every query head.

transformers' ``"eager"`` attention expands the ``H_kv`` key/value heads to all ``H`` query heads
(``repeat_kv``) and multiplies ``(B, H, L, d) @ (B, H, d, S)``: a fresh copy of the whole KV cache for every layer
at every decoding step, and in the backward pass a sum over the copies.  Here the ``H / H_kv`` query heads that
share a key/value head are stacked along the query axis instead, ``(B, H_kv, rep * L, d) @ (B, H_kv, d, S)``: the
same products, nothing copied but the (small) queries.  Same softmax in fp32, same mask, same output layout as
``"eager"`` (a test checks logits and gradients against it).

Profiled on this project's 2-core CPU (SmolLM2-135M, 9 query / 3 key-value heads, 64 sequences decoding 12 tokens
in bf16): the ``repeat_kv`` copies were about 25 ms of each ~150 ms decoding step (benchmarks/trainer_vs_trl.py
measures the whole step).

The kernel is exact only for attention that is nothing more than ``softmax(q k^T * scaling + mask) v``.  Some families
add a term of their own inside the softmax -- Gemma 2's logit softcapping ``c * tanh(s / c)``, GPT-OSS's learned
"sink" logit per head -- and a kernel that skips it gives other log-probs (0.08 and 0.22 nats on tiny random models of
those families; a test checks).  So :func:`gqa_is_exact` allows it only for the families in :data:`GQA_EXACT_FAMILIES`
(tested against ``"eager"``), ``TrainConfig(attn_implementation="auto")`` keeps every other model's own attention,
and asking for ``"gqa"`` on another family, or calling the kernel with a softcap or sinks, is an error.
Sliding windows (Mistral, Qwen) need nothing here: they live in the additive mask, which is eager's.

    from grpo_lessons.training.attention import use_gqa_attention
    use_gqa_attention(model)     # what TrainConfig(attn_implementation="auto") does on a CPU for these families
"""

from __future__ import annotations

import torch

__all__ = ["GQA_ATTENTION", "GQA_EXACT_FAMILIES", "gqa_eager_attention", "gqa_is_exact", "register",
           "apply_attention", "use_gqa_attention"]

GQA_ATTENTION = "grpo_gqa_eager"  # the name it is registered under in transformers' AttentionInterface

#: ``config.model_type`` of the families whose attention is exactly ``softmax(q k^T * scaling + mask) v`` (transformers
#: 5.17), each checked against ``"eager"`` on a tiny random model; SmolLM2 is a Llama.
GQA_EXACT_FAMILIES: frozenset[str] = frozenset({"llama", "mistral", "qwen2", "qwen3"})

# Config fields that put something into the softmax this kernel does not compute (Gemma 2's softcap; a family that
# defines one is not exact whatever its model_type says).
_UNSUPPORTED_CONFIG = ("attn_logit_softcapping",)


def gqa_is_exact(model) -> bool:
    """True when :func:`gqa_eager_attention` computes ``model``'s attention exactly: its family (``config.model_type``)
    is in :data:`GQA_EXACT_FAMILIES` and its config sets no attention softcapping."""
    config = getattr(model, "config", None)
    if getattr(config, "model_type", None) not in GQA_EXACT_FAMILIES:
        return False
    return all(getattr(config, name, None) is None for name in _UNSUPPORTED_CONFIG)


def gqa_eager_attention(module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                        attention_mask: torch.Tensor | None, scaling: float, dropout: float = 0.0, **kwargs):
    """``(attn_output (B, L, H, d), attn_weights (B, H, L, S))`` for ``query (B, H, L, d)``, ``key``/``value``
    ``(B, H_kv, S, d)`` and an additive ``attention_mask (B, 1, L, S)`` (or None): transformers' attention signature."""
    # Terms this kernel does not compute: refuse rather than return other numbers (gqa_is_exact keeps "auto" away).
    if kwargs.get("softcap") is not None:
        raise ValueError("gqa attention does not implement attention-logit softcapping (Gemma 2); use the model's own "
                         "attention (attn_implementation=None or 'eager')")
    if kwargs.get("s_aux") is not None or getattr(module, "sinks", None) is not None:
        raise ValueError("gqa attention does not implement attention sinks (GPT-OSS); use the model's own attention "
                         "(attn_implementation=None or 'eager')")
    B, H, L, d = query.shape
    Hkv, S = key.shape[1], key.shape[2]
    if H % Hkv:
        raise ValueError(f"{H} query heads cannot share {Hkv} key/value heads evenly")
    rep = H // Hkv
    # Query head h uses key/value head h // rep (repeat_kv's pairing): heads kv*rep .. kv*rep + rep-1 stack up.
    q = query.reshape(B, Hkv, rep * L, d)
    w = torch.matmul(q, key.transpose(2, 3)) * scaling  # (B, H_kv, rep * L, S)
    if attention_mask is not None:
        w = (w.view(B, Hkv, rep, L, S) + attention_mask.unsqueeze(2)).view(B, Hkv, rep * L, S)
    w = torch.nn.functional.softmax(w, dim=-1, dtype=torch.float32).to(query.dtype)
    w = torch.nn.functional.dropout(w, p=dropout, training=module.training)
    out = torch.matmul(w, value)  # (B, H_kv, rep * L, d)
    out = out.view(B, H, L, d).transpose(1, 2).contiguous()  # (B, L, H, d)
    return out, w.view(B, H, L, S)


def register() -> str:
    """Register :func:`gqa_eager_attention` with transformers (idempotent); returns its name."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask

    AttentionInterface.register(GQA_ATTENTION, gqa_eager_attention)
    # the same additive float mask as "eager" (an unregistered name would get no mask at all)
    AttentionMaskInterface.register(GQA_ATTENTION, eager_mask)
    return GQA_ATTENTION


def apply_attention(model, name: str) -> None:
    """Switch ``model`` (and every copy made of it afterwards) to the attention implementation ``name``
    (``"gqa"``: :func:`gqa_eager_attention`; otherwise a transformers name such as ``"eager"`` or ``"sdpa"``).

    Raises ``ValueError`` for ``"gqa"`` on a model it is not exact for (:func:`gqa_is_exact`)."""
    if name == "gqa":
        if not gqa_is_exact(model):
            config = getattr(model, "config", None)
            raise ValueError(
                f"gqa attention is exact only for {', '.join(sorted(GQA_EXACT_FAMILIES))} without attention softcapping; "
                f"this model is {getattr(config, 'model_type', type(model).__name__)!r}: keep its own attention "
                "(attn_implementation='auto' or None) or name a transformers one ('eager', 'sdpa')")
        name = register()
    setter = getattr(model, "set_attn_implementation", None)
    if setter is not None:
        setter(name)
    else:  # an older transformers: the config field is what the attention layers read
        model.config._attn_implementation = name


def use_gqa_attention(model) -> None:
    """Switch ``model`` (and every copy made of it afterwards) to :func:`gqa_eager_attention`."""
    apply_attention(model, "gqa")
