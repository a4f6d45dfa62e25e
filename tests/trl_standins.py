"""Offline stand-ins for the hub ids that TRL's GRPO tests load, built locally into a Hugging Face cache.

TRL's own test-suite for ``GRPOTrainer`` loads tiny models (``trl-internal-testing/tiny-Qwen2ForCausalLM-2.5``, MoE
models, vision-language models, a reward model) and small datasets (``trl-internal-testing/zen``) from the hub.  This
machine and CI have no hub, so this module builds a stand-in for each: a randomly initialised model of the same
architecture (tens of thousands of parameters, the project's own byte-level BPE tokenizer with a ChatML template;
the Qwen2.5 stand-ins keep Qwen2.5's vocabulary size and special-token ids, which TRL's tests write by hand) and a
dataset with the same configurations, splits and columns (the prompts begin the 19 lines of PEP 20, "The Zen of
Python"), written where ``transformers`` / ``datasets`` look for them offline:

* models: ``$HF_HOME/hub/models--<org>--<name>/snapshots/<sha>/`` with ``refs/main`` naming ``<sha>``;
* datasets: ``$HF_HOME/datasets/<org>___<name>/<config>/0.0.0/<hash>/`` (the layout ``load_dataset`` reloads from when
  offline: ``dataset_info.json`` + ``<name>-<split>.arrow``).

Two uses:

* ``python tests/trl_standins.py /tmp/trl-hf`` builds every stand-in; then ``HF_HOME=/tmp/trl-hf HF_HUB_OFFLINE=1``
  runs TRL's ``tests/test_grpo_trainer.py`` offline.  As a pytest plugin (``-p trl_standins`` with ``tests/`` on
  ``PYTHONPATH``) it builds the cache on first use, skips the tests whose hub ids have no stand-in here (see
  :data:`NOT_BUILT`), and with ``GRPO_LESSONS_TRAINER=1`` swaps ``trl.GRPOTrainer`` for
  :class:`grpo_lessons.integrations.trl_bridge.GRPOLessonsTrainer` before the test module imports it, so the same
  tests measure the subclass.
* ``tests/test_trl_dropin.py`` builds the subclass and TRL's trainer on :func:`model_path` stand-ins.

Nothing here is TRL's code: the architectures come from ``transformers`` configs, the sizes are ours.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

ORG = "trl-internal-testing"
_SHA = "0" * 39 + "1"  # the one "commit" every stand-in snapshot is stored under
_VERSION = "2"  # bump to rebuild caches made by an older version of this file

# PEP 20 (public domain): 19 aphorisms; the first 17 are the train split, the last 2 the test split.
ZEN = [
    "Beautiful is better than ugly.", "Explicit is better than implicit.", "Simple is better than complex.",
    "Complex is better than complicated.", "Flat is better than nested.", "Sparse is better than dense.",
    "Readability counts.", "Special cases aren't special enough to break the rules.",
    "Although practicality beats purity.", "Errors should never pass silently.", "Unless explicitly silenced.",
    "In the face of ambiguity, refuse the temptation to guess.",
    "There should be one-- and preferably only one --obvious way to do it.",
    "Although that way may not be obvious at first unless you're Dutch.", "Now is better than never.",
    "Although never is often better than *right* now.",
    "If the implementation is hard to explain, it's a bad idea.",
    "If the implementation is easy to explain, it may be a good idea.",
    "Namespaces are one honking great idea -- let's do more of those!",
]
N_TRAIN = 17
# the beginning of each aphorism a model is asked to continue (the first twelve are the ones TRL's tests name)
ZEN_PROMPTS = [
    "Beautiful is better than", "Explicit is", "Simple is better", "Complex", "Flat is better than",
    "Sparse is better", "Readability", "Special cases aren't special", "Although practicality beats",
    "Errors should never", "Unless explicitly", "In the face of ambiguity, refuse",
    "There should be one-- and preferably", "Although that way may not be", "Now is better",
    "Although never is often better than", "If the implementation is hard to explain,",
    "If the implementation is easy to explain, it may be", "Namespaces are one honking great",
]
assert all(line.startswith(head) for line, head in zip(ZEN, ZEN_PROMPTS))

# Vision tokens of the Qwen2-VL family's chat format.
_QWEN_VL_TOKENS = ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]


# -- models ---------------------------------------------------------------------------------------------------------


# Qwen2.5's ids of its three ChatML tokens: TRL's tests write completions with these ids by hand
QWEN_SPECIAL_IDS = {"<|endoftext|>": 151643, "<|im_start|>": 151644, "<|im_end|>": 151645}


def _tokenizer(extra_special: tuple[str, ...] = (), *, qwen_ids: bool = False):
    """The project's tiny BPE tokenizer; ``qwen_ids=True`` moves its three special tokens to Qwen2.5's ids (the
    ordinary tokens keep theirs and filler tokens fill the ids between, so the vocabulary is Qwen2.5's size)."""
    from grpo_lessons.training.models import tiny_tokenizer

    tok = tiny_tokenizer()
    if qwen_ids:
        tok = _with_qwen_ids(tok)
    if extra_special:
        tok.add_special_tokens({"additional_special_tokens": ["<|im_start|>", *extra_special]})
    return tok


def _with_qwen_ids(tok):
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    spec = json.loads(tok.backend_tokenizer.to_str())
    vocab = {t: i for t, i in spec["model"]["vocab"].items() if t not in QWEN_SPECIAL_IDS}
    ordinary = sorted(vocab, key=vocab.get)
    first_special = min(QWEN_SPECIAL_IDS.values())
    new_vocab = {t: i for i, t in enumerate(ordinary)}
    new_vocab.update({f"<filler{i}>": i for i in range(len(ordinary), first_special)})  # never produced by encoding
    new_vocab.update(QWEN_SPECIAL_IDS)
    spec["model"]["vocab"] = new_vocab
    for added in spec["added_tokens"]:
        added["id"] = QWEN_SPECIAL_IDS[added["content"]]
    fast = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(json.dumps(spec)), eos_token="<|im_end|>",
                                   pad_token="<|endoftext|>", bos_token=None,
                                   additional_special_tokens=["<|im_start|>"])
    fast.chat_template, fast.padding_side = tok.chat_template, tok.padding_side
    return fast


def _text_kwargs(tok, **extra) -> dict[str, Any]:
    """Small sizes shared by the text architectures (each overrides what it names differently)."""
    kw = dict(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, head_dim=8, max_position_embeddings=512, pad_token_id=tok.pad_token_id,
              eos_token_id=tok.eos_token_id, bos_token_id=tok.eos_token_id)
    kw.update(extra)
    return kw


# model_type -> config overrides beyond _text_kwargs (MoE sizes; what an architecture needs to be tiny)
_TEXT_MODELS: dict[str, dict[str, Any]] = {
    "qwen2": {},
    "qwen3": {},
    "llama": {},
    "mistral": {"sliding_window": None},
    "gemma2": {"sliding_window": 16, "query_pre_attn_scalar": 8},
    "cohere2": {"sliding_window": 16, "layer_types": ["sliding_attention", "full_attention"]},
    "qwen3_moe": {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 16},
    "gpt_oss": {"num_local_experts": 4, "num_experts_per_tok": 2, "sliding_window": 16,
                "layer_types": ["sliding_attention", "full_attention"]},
    "glm4_moe": {"n_routed_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 16, "n_shared_experts": 1,
                 "first_k_dense_replace": 1, "n_group": 1, "topk_group": 1},
}

# hub name (after "trl-internal-testing/tiny-") -> (model_type, head): the causal LMs and reward models TRL's tests load
TEXT_STANDINS: dict[str, tuple[str, str]] = {
    "Qwen2ForCausalLM-2.5": ("qwen2", "causal"),  # with Qwen2.5's token ids (QWEN_IDS)
    "Qwen3ForCausalLM": ("qwen3", "causal"),
    "LlamaForCausalLM-3.2": ("llama", "causal"),
    "MistralForCausalLM-0.2": ("mistral", "causal"),
    "Gemma2ForCausalLM": ("gemma2", "causal"),
    "Cohere2ForCausalLM": ("cohere2", "causal"),
    "Qwen3MoeForCausalLM": ("qwen3_moe", "causal"),
    "GptOssForCausalLM": ("gpt_oss", "causal"),
    "Glm4MoeForCausalLM": ("glm4_moe", "causal"),
    "Qwen2ForSequenceClassification-2.5": ("qwen2", "classifier"),
    "Qwen3ForSequenceClassification": ("qwen3", "classifier"),
    "LlamaForSequenceClassification-3.2": ("llama", "classifier"),
}

#: hub ids TRL's GRPO tests load that have no stand-in here (the tests that need them are skipped): custom code
#: fetched from the hub (trust_remote_code), a hybrid Mamba model, and the vision-language models (their processors
#: need torchvision, which the CPU test environment does not install; :func:`qwen_vl_model` builds a tiny Qwen2-VL in
#: memory for the tests that feed it image tensors directly).
NOT_BUILT = (
    "tiny-RemoteForCausalLM", "tiny-Qwen2VLForConditionalGeneration", "tiny-Qwen2_5_VLForConditionalGeneration",
    "tiny-NemotronHForCausalLM-nano", "tiny-Gemma3ForConditionalGeneration",
    "tiny-Gemma4ForConditionalGeneration", "tiny-LlavaForConditionalGeneration",
    "tiny-LlavaNextForConditionalGeneration", "tiny-Qwen3_5ForConditionalGeneration-NoThink",
    "tiny-Qwen3_5MoeForConditionalGeneration-3.6", "tiny-SmolVLMForConditionalGeneration",
)


def text_model(model_type: str, head: str = "causal", *, seed: int = 0, qwen_ids: bool = False, **overrides):
    """A randomly initialised tiny ``model_type`` model and its tokenizer: ``(model, tokenizer)``.

    ``head``: ``"causal"`` (``AutoModelForCausalLM``) or ``"classifier"`` (``AutoModelForSequenceClassification``
    with one label: a reward model).  MoE configs keep their own ``router_aux_loss_coef`` and gain nothing else, so
    TRL turns the router aux loss on exactly as for the hub model.  ``qwen_ids``: the tokenizer with Qwen2.5's
    special-token ids and vocabulary size (:func:`_tokenizer`).
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSequenceClassification

    tok = _tokenizer(qwen_ids=qwen_ids)
    kw = _text_kwargs(tok, **_TEXT_MODELS[model_type])
    kw.update(overrides)
    if head == "classifier":
        kw["num_labels"] = 1
    config = AutoConfig.for_model(model_type, **kw)
    cls = AutoModelForSequenceClassification if head == "classifier" else AutoModelForCausalLM
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = cls.from_config(config)
    if head == "causal":
        model.generation_config.eos_token_id = tok.eos_token_id
        model.generation_config.pad_token_id = tok.pad_token_id
    return model, tok


def qwen_vl_model(model_type: str = "qwen2_vl", *, seed: int = 0):
    """A tiny Qwen2-VL (``"qwen2_vl"``) or Qwen2.5-VL (``"qwen2_5_vl"``) model and the id of its image token.

    Only the model: transformers' Qwen2-VL processor needs torchvision for its video half, which the CPU test
    environment does not install, so tests build ``pixel_values`` / ``image_grid_thw`` themselves
    (:func:`qwen_vl_image_inputs`).
    """
    import torch
    from transformers import AutoConfig, AutoModelForImageTextToText

    tok = _tokenizer(tuple(_QWEN_VL_TOKENS))
    ids = {t: tok.convert_tokens_to_ids(t) for t in _QWEN_VL_TOKENS}
    text = _text_kwargs(tok, rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                              "mrope_section": [1, 1, 2]})
    text.pop("head_dim")
    vision = {"depth": 1, "num_heads": 2, "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2,
              "in_channels": 3}
    if model_type == "qwen2_vl":  # embed_dim inside the encoder, hidden_size out of the merger (the text width)
        vision.update(embed_dim=16, hidden_size=text["hidden_size"], mlp_ratio=2)
    else:  # Qwen2.5-VL: hidden_size inside, out_hidden_size out
        vision.update(hidden_size=16, intermediate_size=32, out_hidden_size=text["hidden_size"],
                      fullatt_block_indexes=[0], window_size=56)
    config = AutoConfig.for_model(model_type, text_config=text, vision_config=vision,
                                  image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
                                  vision_start_token_id=ids["<|vision_start|>"],
                                  vision_end_token_id=ids["<|vision_end|>"], tie_word_embeddings=True)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = AutoModelForImageTextToText.from_config(config)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    return model, tok


def qwen_vl_image_inputs(batch: int, *, seed: int = 0):
    """``pixel_values`` ``(batch * 4, 3 * 2 * 14 * 14)`` and ``image_grid_thw`` ``(batch, 3)`` of one 28 x 28 image per
    row, in Qwen2-VL's patch layout (grid 1 x 2 x 2 patches, merged 2 x 2 into one image token)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    pixel_values = torch.randn(batch * 4, 3 * 2 * 14 * 14, generator=g)
    image_grid_thw = torch.tensor([[1, 2, 2]] * batch)
    return pixel_values, image_grid_thw


#: the stand-ins whose tokenizer has Qwen2.5's ids (TRL's tests write completions with them)
QWEN_IDS = ("Qwen2ForCausalLM-2.5", "Qwen2ForSequenceClassification-2.5")


def _build_model(name: str, path: Path) -> None:
    model, tok = text_model(*TEXT_STANDINS[name], qwen_ids=name in QWEN_IDS)
    model.save_pretrained(path)
    tok.save_pretrained(path)


MODEL_NAMES: tuple[str, ...] = tuple(TEXT_STANDINS)


# -- datasets -------------------------------------------------------------------------------------------------------


def _image(i: int):
    """A 28 x 28 RGB image (one Qwen2-VL image token), different per row."""
    from PIL import Image

    return Image.new("RGB", (28, 28), color=((37 * i) % 256, (91 * i) % 256, (53 * i) % 256))


def dataset_rows(name: str, config: str, split: str) -> dict[str, list]:
    """Columns of a stand-in dataset: ``zen`` (``standard_prompt_only`` / ``conversational_prompt_only``), ``zen-image``
    and ``zen-multi-image`` (``conversational_prompt_only``, with ``image`` / ``images``)."""
    heads = ZEN_PROMPTS[:N_TRAIN] if split == "train" else ZEN_PROMPTS[N_TRAIN:]
    if config == "standard_prompt_only":
        rows: dict[str, list] = {"prompt": heads}
    elif config == "conversational_prompt_only":
        rows = {"prompt": [[{"role": "user", "content": h}] for h in heads]}
    else:
        raise ValueError(f"no stand-in for configuration {config!r} of {name!r}")
    offset = 0 if split == "train" else N_TRAIN
    if name == "zen-image":
        rows["image"] = [_image(offset + i) for i in range(len(heads))]
    elif name == "zen-multi-image":
        rows["images"] = [[_image(offset + i), _image(offset + i + 100)] for i in range(len(heads))]
    return rows


DATASETS: dict[str, tuple[str, ...]] = {
    "zen": ("standard_prompt_only", "conversational_prompt_only"),
    "zen-image": ("conversational_prompt_only",),
    "zen-multi-image": ("conversational_prompt_only",),
}


def _build_dataset(root: Path, name: str, config: str) -> None:
    from datasets import Dataset, DatasetInfo, Features, Image, Sequence, SplitDict, SplitInfo
    from datasets.arrow_writer import ArrowWriter

    directory = root / "datasets" / f"{ORG}___{name}" / config / "0.0.0" / hashlib.sha1(config.encode()).hexdigest()
    directory.mkdir(parents=True, exist_ok=True)
    splits = SplitDict(dataset_name=name)
    features = None
    for split in ("train", "test"):
        rows = dataset_rows(name, config, split)
        feats = None
        if "image" in rows or "images" in rows:
            probe = Dataset.from_dict({"prompt": rows["prompt"]}).features
            extra = {"image": Image()} if "image" in rows else {"images": Sequence(Image())}
            feats = Features({**probe, **extra})
        ds = Dataset.from_dict(rows, features=feats)
        features = ds.features
        with ArrowWriter(path=str(directory / f"{name}-{split}.arrow"), features=ds.features) as writer:
            writer.write_table(ds.data.table)
            writer.finalize()
        splits.add(SplitInfo(name=split, num_examples=len(ds), dataset_name=name))
    DatasetInfo(features=features, config_name=config, dataset_name=name, splits=splits).write_to_directory(
        str(directory))


# -- the cache --------------------------------------------------------------------------------------------------------


def _snapshot(root: Path, repo: str) -> Path:
    base = root / "hub" / ("models--" + repo.replace("/", "--"))
    (base / "refs").mkdir(parents=True, exist_ok=True)
    (base / "refs" / "main").write_text(_SHA)
    return base / "snapshots" / _SHA


def build_cache(root: str | os.PathLike, models: tuple[str, ...] | None = None) -> Path:
    """Write every stand-in (or the ``models`` named, plus the datasets) under ``root``; returns ``root``.

    Idempotent: a stand-in already built by this version of the file is kept.
    """
    root = Path(root)
    stamp = root / "grpo_lessons_standins.json"
    done = json.loads(stamp.read_text()) if stamp.exists() else {}
    if done.get("version") != _VERSION:
        done = {"version": _VERSION, "built": []}
    for name in models or MODEL_NAMES:
        if name in done["built"]:
            continue
        path = _snapshot(root, f"{ORG}/tiny-{name}")
        path.mkdir(parents=True, exist_ok=True)
        _build_model(name, path)
        done["built"].append(name)
        stamp.write_text(json.dumps(done))
    for name, configs in DATASETS.items():
        for config in configs:
            if f"dataset:{name}/{config}" in done["built"]:
                continue
            _build_dataset(root, name, config)
            done["built"].append(f"dataset:{name}/{config}")
            stamp.write_text(json.dumps(done))
    return root


@functools.lru_cache(maxsize=None)
def model_path(name: str) -> str:
    """A directory holding the stand-in ``name`` (a key of :data:`TEXT_STANDINS`), built once
    per process in a temporary directory."""
    root = Path(_tmp_root())
    path = root / name
    if not (path / "config.json").exists():
        path.mkdir(parents=True, exist_ok=True)
        _build_model(name, path)
    return str(path)


@functools.lru_cache(maxsize=None)
def _tmp_root() -> str:
    import tempfile

    return tempfile.mkdtemp(prefix="trl-standins-")


# -- pytest plugin: run TRL's own GRPO tests offline --------------------------------------------------------------


def pytest_configure(config) -> None:
    """Point the HF cache at the stand-ins (``TRL_STANDINS_HOME``, default ``/tmp/trl-standins-hf``), go offline,
    and with ``GRPO_LESSONS_TRAINER=1`` put the subclass in place of ``trl.GRPOTrainer`` before any test module
    imports it."""
    home = os.environ.setdefault("TRL_STANDINS_HOME", "/tmp/trl-standins-hf")
    build_cache(home)
    os.environ["HF_HOME"] = home
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["HF_DATASETS_OFFLINE"] = "1"
    import huggingface_hub.constants as hub_constants
    import datasets.config as ds_config

    hub_constants.HF_HUB_OFFLINE = True
    hub_constants.HF_HUB_CACHE = str(Path(home) / "hub")
    ds_config.HF_HUB_OFFLINE = True
    ds_config.HF_DATASETS_CACHE = Path(home) / "datasets"
    if os.environ.get("GRPO_LESSONS_TRAINER") == "1":
        import trl
        import trl.trainer

        from grpo_lessons.integrations.trl_bridge import GRPOLessonsTrainer

        trl.GRPOTrainer = GRPOLessonsTrainer
        trl.trainer.GRPOTrainer = GRPOLessonsTrainer


def pytest_collection_modifyitems(config, items) -> None:
    """Skip (in both runs alike) the tests that load a hub id with no stand-in here: by the value of a ``model_id`` /
    ``model_name`` parameter where the test has one, else by the ids its source names."""
    import inspect

    import pytest

    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        chosen = [str(params[k]) for k in ("model_id", "model_name") if k in params]
        if chosen:
            text = " ".join(chosen)
        else:
            try:
                text = inspect.getsource(item.function)
            except (AttributeError, OSError, TypeError):
                text = ""
        missing = [m for m in NOT_BUILT if m in text]
        if missing:
            item.add_marker(pytest.mark.skip(reason=f"no offline stand-in for {ORG}/{missing[0]}"))


if __name__ == "__main__":
    target = sys.argv[1] if len(sys.argv) > 1 else "/tmp/trl-standins-hf"
    print(build_cache(target))
