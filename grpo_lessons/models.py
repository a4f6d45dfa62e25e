"""Models: load a causal LM by hub name or path, and build tiny offline Qwen-architecture models.

Introduced in ``notebooks/04_grpo_end_to_end.ipynb``.  Nothing here downloads at test time:
the tiny models are built from a config with a tokenizer trained locally by ``tokenizers``.
"""

from __future__ import annotations

import string

import torch

__all__ = ["tiny_tokenizer", "tiny_qwen", "CHAT_TEMPLATE"]

# A ChatML template (the format Qwen and SmolLM2 use), kept small enough to read.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def _corpus() -> list[str]:
    words = [
        "What is", "Reply with only the number.", "The answer is", "<answer>", "</answer>",
        "\\boxed{", "}", "Use the numbers", "to make", "Countdown", "user", "assistant", "system",
        "plus", "minus", "times", "think", "so", "then",
    ]
    lines = list(words)
    for a in range(0, 100, 7):
        for b in range(0, 100, 11):
            lines.append(f"What is {a}+{b}? {a + b}. {a}*{b}={a * b} ({a}-{b})/{b + 1}")
    lines.append(string.ascii_letters + string.digits + string.punctuation)
    return lines


def tiny_tokenizer(vocab_size: int = 512):
    """A byte-level BPE tokenizer trained in ~0.1 s on a built-in corpus, with a ChatML template.

    Returns a ``transformers.PreTrainedTokenizerFast`` with ``eos = pad = <|im_end|>``-style
    special tokens, usable by TRL's ``GRPOTrainer`` as ``processing_class``.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=_SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
        additional_special_tokens=["<|im_start|>"],
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.padding_side = "left"
    return fast


def tiny_qwen(tokenizer=None, *, arch: str = "qwen2", hidden_size: int = 64, num_layers: int = 2,
              num_heads: int = 4, num_kv_heads: int = 2, intermediate_size: int = 128, seed: int = 0,
              dtype: torch.dtype = torch.float32):
    """A randomly initialised Qwen2 (or ``arch="qwen3"``) causal LM of ~0.1M parameters, offline.

    Same code path as ``Qwen/Qwen2.5-0.5B-Instruct`` in transformers and TRL, small enough for CPU tests.
    """
    from transformers import Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM

    tokenizer = tokenizer if tokenizer is not None else tiny_tokenizer()
    kw = dict(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        max_position_embeddings=512,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=True,
    )
    if arch == "qwen2":
        config, cls = Qwen2Config(**kw), Qwen2ForCausalLM
    elif arch == "qwen3":
        config, cls = Qwen3Config(head_dim=hidden_size // num_heads, **kw), Qwen3ForCausalLM
    else:
        raise ValueError(f"unknown tiny architecture {arch!r}; known: qwen2, qwen3")
    g = torch.random.fork_rng()
    with g:
        torch.manual_seed(seed)
        model = cls(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model.to(dtype)
