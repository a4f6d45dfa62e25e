"""Setting a run up from a :class:`~grpo_lessons.train_config.TrainConfig`: the data and rewards, the trained model
(full, last-N-blocks or LoRA), the frozen reference, the low-precision sampler copy and the optimiser.

Introduced in ``notebooks/05_grpo_end_to_end.ipynb``; :class:`grpo_lessons.trainer.Trainer` calls these once, in
its constructor.  Everything that can be checked before the first step is checked here, so a bad setting fails
before any file is written.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from .rollout import context_length, prompt_lengths
from .scoring import reward_names
from .train_config import TrainConfig
from .variants import Variant

__all__ = ["RunData", "load_data", "load_model", "check_prompt_lengths", "prepare_model", "make_optimizer",
           "make_sampler", "record_topk"]


@dataclass
class RunData:
    """The rows and rewards of a run."""

    train_rows: list[dict]
    eval_rows: list[dict]  # the first eval_size held-out rows ([] when evaluation is off)
    reward_funcs: list[Callable]
    reward_weights: list[float]
    accuracy_fn: Callable  # what the held-out accuracy counts (default: the first reward function)

    @property
    def reward_columns(self) -> list[str]:
        """The ``metrics.csv`` column of each reward function: ``reward_<name>``."""
        return [f"reward_{n}" for n in reward_names(self.reward_funcs)]


def load_data(cfg: TrainConfig, train_rows: Sequence[dict] | None = None, eval_rows: Sequence[dict] | None = None,
              reward_funcs: Sequence[Callable] | None = None, reward_weights: Sequence[float] | None = None,
              accuracy_fn: Callable | None = None) -> RunData:
    """The rows and rewards passed in, else the task's (train/test splits, reward functions and weights);
    ``cfg.reward_weights`` wins over both.  ``ValueError`` for an empty set, a row without ``prompt``, no reward
    functions, or a weight count that does not match."""
    task = None
    if train_rows is None or reward_funcs is None or (eval_rows is None and cfg.eval_size):
        from .data import get_task
        task = get_task(cfg.task)
    train = list(task.rows("train") if train_rows is None else train_rows)
    if not train:
        raise ValueError("the training set is empty: there are no prompts to sample from")
    held_out: list[dict] = []
    if cfg.eval_size:
        rows = list(task.rows("test") if eval_rows is None else eval_rows)
        if not rows:
            raise ValueError("the evaluation set is empty; pass eval rows or set eval_size=0")
        held_out = rows[:cfg.eval_size]
    for i, r in enumerate(train + held_out):
        if not isinstance(r, dict) or "prompt" not in r:
            raise ValueError(f"dataset row {i} has no 'prompt' column (rows must be dicts with a 'prompt')")
    funcs = list(task.reward_funcs if reward_funcs is None else reward_funcs)
    if not funcs:
        raise ValueError("no reward functions")
    w = cfg.reward_weights if cfg.reward_weights is not None else (
        reward_weights if reward_weights is not None else (task.reward_weights if reward_funcs is None else None))
    weights = [1.0] * len(funcs) if w is None else [float(x) for x in w]
    if len(weights) != len(funcs):
        raise ValueError(f"{len(weights)} reward weights for {len(funcs)} reward "
                         f"functions ({', '.join(reward_names(funcs))})")
    return RunData(train, held_out, funcs, weights, accuracy_fn or funcs[0])


def load_model(cfg: TrainConfig, model=None, tokenizer=None) -> tuple[Any, Any]:
    """``(model, tokenizer)``: the ones passed in, else ``cfg.model`` loaded in ``cfg.dtype`` on ``cfg.device``
    (:func:`grpo_lessons.models.resolve_model`).  A model without its tokenizer is a ``ValueError``."""
    if model is None:
        from .models import resolve_model
        return resolve_model(cfg.model, dtype=cfg.dtype, device=cfg.device)
    if tokenizer is None:
        raise ValueError("a model was passed without its tokenizer")
    return model, tokenizer


def check_prompt_lengths(tokenizer, model, rows_by_name: dict[str, Sequence[dict]], max_new_tokens: int) -> None:
    """``ValueError`` when a prompt plus ``max_new_tokens`` does not fit the model's context."""
    ctx = context_length(model)
    if ctx is None:
        return
    for name, rows in rows_by_name.items():
        lens = prompt_lengths(tokenizer, [r["prompt"] for r in rows])
        bad = [(i, n) for i, n in enumerate(lens) if n + max_new_tokens > ctx]
        if bad:
            i, n = bad[0]
            raise ValueError(
                f"{len(bad)} {name} prompt(s) do not fit the model's context of {ctx} tokens with "
                f"max_new_tokens={max_new_tokens}: e.g. row {i} has {n} prompt tokens. "
                "Shorten the prompts, drop those rows, or lower max_new_tokens.")


def record_topk(cfg: TrainConfig, variant: Variant) -> int:
    """How many top-K ids per position the sampler records: ``cfg.topk`` for DPPO's top-K variants, else 0."""
    topk_variant = variant.objective == "dppo" and str(variant.loss_defaults.get("kind", "")).startswith("topk")
    return cfg.topk if topk_variant else 0


def prepare_model(cfg: TrainConfig, model) -> tuple[Any, Any]:
    """Make ``model`` trainable as configured; returns ``(policy, reference or None)``.

    LoRA (peft) wraps the model and its adapter-free base is the reference; ``trainable_layers`` freezes all
    but the last N blocks (+ the final norm); otherwise every weight trains.  Whenever ``beta > 0`` and the
    reference cannot be the adapter-free base (full or ``trainable_layers`` training), a frozen copy of the
    initial weights is the reference.
    """
    layers = _block_list(model) if cfg.trainable_layers is not None else None
    if layers is not None and cfg.trainable_layers > len(layers):
        raise ValueError(f"trainable_layers={cfg.trainable_layers} but the model has {len(layers)} blocks")
    ref_model = None
    if cfg.lora:
        from peft import LoraConfig, get_peft_model
        present = {n.rsplit(".", 1)[-1] for n, _ in model.named_modules()}
        targets = [t for t in cfg.lora_targets if t in present]
        if not targets:
            raise ValueError(f"none of lora_targets {list(cfg.lora_targets)} is a module of this model")
        extra = {} if layers is None else {
            "layers_to_transform": list(range(len(layers) - cfg.trainable_layers, len(layers)))}
        model = get_peft_model(model, LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=0.0,
                                                 target_modules=targets, bias="none", task_type="CAUSAL_LM",
                                                 **extra))
    elif layers is not None:
        # Freeze everything below the last N blocks: the backward pass stops there, which on a CPU
        # is most of the saving (the frozen blocks' activations are not even kept).
        for p in model.parameters():
            p.requires_grad_(False)
        for block in list(layers)[-cfg.trainable_layers:]:
            for p in block.parameters():
                p.requires_grad_(True)
        norm = getattr(getattr(model, "model", None), "norm", None)
        if norm is not None:
            for p in norm.parameters():
                p.requires_grad_(True)
    if cfg.beta > 0 and not cfg.lora:  # (LoRA: the adapter-free base is pi_ref, no copy needed)
        ref_model = copy.deepcopy(model).eval()  # pi_ref: the initial weights, frozen
        for p in ref_model.parameters():
            p.requires_grad_(False)
    return model.eval(), ref_model  # dropout off: the sampling policy is the scored policy


def make_optimizer(cfg: TrainConfig, params: list) -> torch.optim.Optimizer:
    """AdamW as ``cfg.optimizer`` says: one fused kernel (the default; TRL's Trainer uses fused/foreach AdamW
    too), foreach, or the per-parameter loop.  Same update, different speed."""
    kw = {"adamw-fused": {"fused": True}, "adamw-foreach": {"foreach": True}, "adamw": {"foreach": False}}[cfg.optimizer]
    try:
        return torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay, **kw)
    except RuntimeError:  # a device/dtype without the fused kernel
        return torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay, foreach=True)


def make_sampler(cfg: TrainConfig, model) -> tuple[Any, list[tuple[torch.Tensor, torch.Tensor]]]:
    """The model that samples: ``model`` itself, or a copy in ``cfg.sampler_dtype`` (a train/inference gap).

    Returns ``(sampler, pairs)`` where ``pairs`` are (sampler tensor, trainer parameter) for every trainable
    weight: :meth:`grpo_lessons.trainer.Trainer.sync_sampler` copies them after each update (``copy_`` into the existing low-precision
    tensors: no new allocation; frozen weights never change, so they are never copied again).
    """
    dtype = getattr(torch, cfg.sampler_dtype) if cfg.sampler_dtype else None
    if dtype is None or dtype == next(model.parameters()).dtype:
        return model, []
    sampler = copy.deepcopy(model).to(dtype).eval()
    for p in sampler.parameters():
        p.requires_grad_(False)
    own = dict(sampler.named_parameters())
    pairs = [(own[n], p) for n, p in model.named_parameters() if p.requires_grad]
    return sampler, pairs


def _block_list(model) -> torch.nn.ModuleList:
    """The model's list of transformer blocks (the ModuleList with ``num_hidden_layers`` entries)."""
    n = getattr(model.config, "num_hidden_layers", None)
    for _, mod in model.named_modules():
        if isinstance(mod, torch.nn.ModuleList) and len(mod) == n:
            return mod
    raise ValueError("trainable_layers: could not find the model's list of transformer blocks")
