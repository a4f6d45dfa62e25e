"""Setting a run up from a :class:`~grpo_lessons.training.train_config.TrainConfig`: the data and rewards, the trained model
(full, last-N-blocks or LoRA), the frozen reference, the low-precision sampler copy and the optimiser.

Introduced in ``notebooks/05_grpo_end_to_end.ipynb``; :class:`grpo_lessons.training.trainer.Trainer` calls these once, in
its constructor.  Everything that can be checked before the first step is checked here, so a bad setting fails
before any file is written.
"""

from __future__ import annotations

import copy
import functools
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from .rollout import prompts_over_context
from .scoring import reward_names
from .train_config import TrainConfig, cpu_bf16_speedup
from grpo_lessons.core.variants import Variant

__all__ = ["RunData", "load_data", "load_model", "check_prompt_lengths", "prepare_model", "fp32_master_weights", "make_reference", "make_optimizer",
           "make_sampler", "make_compute_model", "low_precision_copy", "FP32Head", "LowPrecisionSync", "round_to_bf16",
           "set_attention", "reuse_freed_memory",
           "record_topk"]


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
    ``cfg.rewards`` (``MODULE:FUNCTION[=WEIGHT]``) replace the task's reward functions, not its held-out accuracy;
    ``cfg.reward_weights`` wins over all.  ``ValueError`` for an empty set, a row without ``prompt``, no reward
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
    own = cfg.reward_functions() if reward_funcs is None else None  # cfg.rewards: MODULE:FUNCTION[=WEIGHT]
    if own is not None:
        reward_funcs, reward_weights = own
        accuracy_fn = accuracy_fn or task.reward_funcs[0]  # the held-out accuracy stays the task's
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
    """``(model, tokenizer)``: the ones passed in, else ``cfg.model`` loaded in ``cfg.dtype`` (None: float32) on
    ``cfg.device`` (:func:`grpo_lessons.training.models.resolve_model`).  A model without its tokenizer is a
    ``ValueError``."""
    if model is None:
        from .models import resolve_model
        return resolve_model(cfg.model, dtype=cfg.dtype, device=cfg.device)
    if tokenizer is None:
        raise ValueError("a model was passed without its tokenizer")
    return model, tokenizer


def check_prompt_lengths(tokenizer, model, rows_by_name: dict[str, Sequence[dict]], max_new_tokens: int) -> None:
    """``ValueError`` when a prompt plus ``max_new_tokens`` does not fit the model's context."""
    for name, rows in rows_by_name.items():
        ctx, bad = prompts_over_context(tokenizer, model, [r["prompt"] for r in rows], max_new_tokens)
        if bad:
            i, n = bad[0]
            raise ValueError(
                f"{len(bad)} {name} prompt(s) do not fit the model's context of {ctx} tokens with "
                f"max_new_tokens={max_new_tokens}: e.g. row {i} has {n} prompt tokens. "
                "Shorten the prompts, drop those rows, or lower max_new_tokens.")


def record_topk(cfg: TrainConfig, variant: Variant) -> int:
    """How many top-K ids per position the sampler records: ``cfg.topk`` for DPPO's top-K variants, else 0."""
    return cfg.topk if variant.objective_piece.divergence_kind(variant.loss_defaults) is not None else 0


def prepare_model(cfg: TrainConfig, model):
    """Make ``model`` trainable as configured; returns the policy (in eval mode: dropout off).

    In every precision the weights become fp32 master weights first, whatever dtype they arrived in
    (:func:`fp32_master_weights`): the optimiser never steps bf16 / fp16 weights (``"fp32"`` then also computes in
    fp32, ``"bf16-mixed"`` on a bf16 copy).  LoRA (peft) wraps the model (its adapter-free base is then ``pi_ref``);
    ``trainable_layers`` freezes all but the last N blocks (+ the final norm); otherwise every weight trains.  The
    frozen reference, when one is needed, is :func:`make_reference`'s copy of the model the training forward runs on.
    """
    fp32_master_weights(model)  # every precision: AdamW steps fp32 weights (a bf16 step rounds most updates away)
    warn_if_bf16_is_slow(cfg, model)
    layers = _block_list(model) if cfg.trainable_layers is not None else None
    if layers is not None and cfg.trainable_layers > len(layers):
        raise ValueError(f"trainable_layers={cfg.trainable_layers} but the model has {len(layers)} blocks")
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
    return model.eval()  # dropout off: the sampling policy is the scored policy


def warn_if_bf16_is_slow(cfg: TrainConfig, model) -> bool:
    """Warn (and return True) when this run asks for bf16 compute (``precision="bf16-mixed"`` or a bf16/fp16 sampler)
    on a CPU that only emulates bf16 matrix products (:func:`cpu_bf16_speedup` below 0.5): there the "fast path" is
    many times slower than ``precision="fp32"``, and a learner would only see a run that never seems to move."""
    low = cfg.precision == "bf16-mixed" or cfg.sampler_dtype in ("bfloat16", "float16")
    try:
        on_cpu = next(model.parameters()).device.type == "cpu"
    except StopIteration:
        return False
    if not (low and on_cpu):
        return False
    ratio = cpu_bf16_speedup()
    if ratio >= 0.5:
        return False
    warnings.warn(f"this CPU has no native bf16 matrix products: a bf16 matmul here is {1 / ratio:.0f}x slower than "
                  f"fp32, so precision={cfg.precision!r} with sampler_dtype={cfg.sampler_dtype!r} will be far slower "
                  "than precision='fp32' with sampler_dtype=None (the default, precision='auto', chooses fp32 on a "
                  "CPU)", RuntimeWarning, stacklevel=3)
    return True


def fp32_master_weights(model):
    """Cast ``model``'s floating-point parameters to fp32 in place (buffers keep their dtype); returns ``model``.

    Mixed precision keeps the weights the optimiser steps in fp32 and computes in bf16 (Micikevicius et al. 2018,
    arXiv:1710.03740; TRL's ``bf16=True`` over a model it loads in fp32).  A model that arrives in bf16 would
    otherwise be stepped in bf16: an AdamW step of lr 3e-5 is far below bf16's spacing around a typical weight, so
    most of it rounds away (measured on SmolLM2: one update changed 3.2 % of the bf16 weights, 90 % of fp32 ones; on
    the tiny test Qwen2 at lr 3e-5, 30.5 % against 100 %).  :func:`prepare_model` applies it in every precision.
    The cast is exact (every bf16 / fp16 value is an fp32 value), so the bf16 compute copy made from the fp32
    weights holds exactly the weights the model arrived with.
    """
    for p in model.parameters():
        if p.is_floating_point() and p.dtype != torch.float32:
            p.data = p.data.to(torch.float32)
    return model


def make_reference(cfg: TrainConfig, train_model):
    """``pi_ref``: a frozen copy of ``train_model`` -- the model the training forward runs on (the fp32 policy, or
    under ``precision="bf16-mixed"`` its bf16 compute copy, :func:`make_compute_model`) -- taken before the first
    update; None when ``beta == 0`` or with LoRA (the adapter-free base is ``pi_ref``, no copy needed).

    Copying the compute model itself, after its first sync, makes ``pi_ref`` the same function as ``pi_theta`` at
    step 1 in every precision: the same weights, rounded the same way, run by the same kernels, so the KL is exactly
    0 before the first update.  (An fp32 copy run under bf16 autocast is another function: autocast rounds each
    matmul's weights to nearest bf16, the compute copy holds dithered ones, and the norms and embeddings differ too.)
    """
    if cfg.beta <= 0 or cfg.lora:
        return None
    ref = copy.deepcopy(train_model).eval()  # the initial weights, frozen
    for p in ref.parameters():
        p.requires_grad_(False)
    return ref


def make_optimizer(cfg: TrainConfig, params: list) -> torch.optim.Optimizer:
    """AdamW as ``cfg.optimizer`` says: one fused kernel (the default; TRL's Trainer uses fused/foreach AdamW
    too), foreach, or the per-parameter loop.  Same update, different speed."""
    kw = {"adamw-fused": {"fused": True}, "adamw-foreach": {"foreach": True}, "adamw": {"foreach": False}}[cfg.optimizer]
    try:
        return torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay, **kw)
    except RuntimeError:  # a device/dtype without the fused kernel
        return torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay, foreach=True)


class FP32Head(torch.nn.Module):
    """An output layer (LM head) in fp32 on a low-precision model: ``logits = x.float() @ W.T`` with an fp32 ``W``.

    MiniMax-M1 (2025) traced its sampler/trainer probability gap to the LM head's precision and fixed it by computing
    the head in fp32.  ``W`` is a separate fp32 copy even when the model ties it to the (low-precision) input
    embedding, so the transformer body stays in bf16.
    """

    def __init__(self, weight: torch.Tensor) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(weight.detach().to(torch.float32).clone(), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.linear(x.to(torch.float32), self.weight)


def low_precision_copy(model, dtype: torch.dtype, *, trainable: bool, fp32_head: bool = False):
    """A deep copy of ``model`` with its parameters in ``dtype``; buffers keep their dtype.

    Only the parameters are cast: a buffer such as RoPE's ``inv_freq`` stays float32 (``model.to(bf16)`` would round
    it, and with it every position's rotation angle -- a gap between the copy and the original that is not the
    precision of the weights).  ``trainable=False`` freezes every parameter of the copy (a sampler); ``True`` keeps
    each parameter's ``requires_grad`` (a bf16 compute copy whose gradients go back to the fp32 weights).
    ``fp32_head=True`` (a frozen copy only) computes the logits with an fp32 copy of the output layer
    (:class:`FP32Head`).
    """
    dup = copy.deepcopy(model).eval()
    for p in dup.parameters():
        p.data = p.data.to(dtype)
        if not trainable:
            p.requires_grad_(False)
    if fp32_head:
        if trainable:
            raise ValueError("fp32_head is for a frozen copy (a sampler)")
        head = model.get_output_embeddings()
        if head is None or getattr(head, "bias", None) is not None:
            raise ValueError("fp32_head: the model has no bias-free output layer (get_output_embeddings)")
        dup.set_output_embeddings(FP32Head(head.weight))
    return dup


def round_to_bf16(src: torch.Tensor, threshold: torch.Tensor) -> torch.Tensor:
    """fp32 ``src`` rounded to a bf16 neighbour against ``threshold`` (int32 in ``[0, 2^16)``, ``src``'s shape); the
    result is an fp32 tensor every value of which bf16 holds exactly, so casting it to bf16 changes nothing.

    bf16 keeps an fp32 number's top 16 bits: the threshold is added to the bit pattern and the low 16 bits dropped, so
    a value is rounded up (away from zero: the pattern is sign-magnitude) exactly when its dropped bits exceed
    ``2^16 - threshold``.  A uniform threshold rounds up with probability equal to the dropped fraction.  Infinities
    stay infinite; only values within a bf16 step of float32's maximum can round up to inf, as nearest rounding does.
    A NaN stays NaN (bf16's quiet NaN): the bit arithmetic alone would carry a NaN's mantissa into its sign (-0) or
    drop it (inf), hiding a diverged weight behind a finite number.
    """
    bits = src.contiguous().view(torch.int32) + threshold
    out = bits.bitwise_and_(-65536).view(torch.float32)
    nan = src.isnan()
    if bool(nan.any()):
        out[nan] = float("nan")  # 0x7FC00000: a quiet NaN that bf16 holds exactly
    return out


class LowPrecisionSync:
    """Copies the fp32 weights into their low-precision copies (the sampler, the bf16 compute copy) after each update.

    ``rounding="dither"`` (the default) rounds each weight to bf16 up or down against a fixed random threshold of its
    own: weight ``w`` between neighbours ``a < b`` becomes ``b`` with probability ``(w - a) / (b - a)`` over the
    thresholds, so across the weights the copy moves *with* the fp32 weights, however small the steps.  Round-to-
    nearest does not: an update of lr = 3e-5 is a thirtieth of bf16's spacing around SmolLM2's median weight (0.13),
    and SmolLM2's weights start on fp16's grid (8 positions per bf16 interval, 21 % exactly on bf16's), so with
    nearest rounding all the weights at one grid position cross the midpoint on the same step: the copy stands
    still, then jumps a whole spacing (32 steps' worth) for an eighth of its weights at once.  Measured on SmolLM2 after 1-5 GRPO steps of fp32 training: KL(bf16 copy || fp32 weights) per token
    (mean k3) 0.013-0.053, token ratios from 0.06 to 12, against 0.002 before training -- a sampler lagging behind
    its trainer.  A freshly random (stochastic) rounding at each sync kept it at 0.001-0.006, but drawing 135M random
    numbers costs ~1 s a step on this CPU; a threshold fixed per weight (int16, 2 bytes a weight, drawn once) gives
    the same tracking for the cost of a plain copy.  fp16 targets and other pairs are copied with nearest rounding.
    """

    def __init__(self, pairs: list[tuple[torch.Tensor, torch.Tensor]], rounding: str = "dither", seed: int = 0) -> None:
        if rounding not in ("dither", "nearest"):
            raise ValueError(f"rounding must be 'dither' or 'nearest', got {rounding!r}")
        self.pairs, self.rounding = pairs, rounding
        gen = torch.Generator().manual_seed(seed)
        self._thresholds = [
            torch.randint(-(1 << 15), 1 << 15, src.shape, dtype=torch.int16, generator=gen).to(src.device)
            if self._dithered(dst, src) else None for dst, src in pairs]

    def _dithered(self, dst: torch.Tensor, src: torch.Tensor) -> bool:
        return self.rounding == "dither" and dst.dtype == torch.bfloat16 and src.dtype == torch.float32

    @torch.no_grad()
    def __call__(self) -> None:
        for (dst, src), thr in zip(self.pairs, self._thresholds):
            if thr is None:
                dst.copy_(src)
                continue
            dst.copy_(round_to_bf16(src.detach(), thr.to(torch.int32) + (1 << 15)))


def _sync_pairs(copy_model, model) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(copy's tensor, model's parameter) for every trainable parameter, tied names included (an untied fp32 head
    of a tied model is then synced from the shared weight too)."""
    own = dict(copy_model.named_parameters(remove_duplicate=False))
    pairs, seen = [], set()
    for n, p in model.named_parameters(remove_duplicate=False):
        if p.requires_grad and n in own and id(own[n]) not in seen:
            seen.add(id(own[n]))
            pairs.append((own[n], p))
    return pairs


def make_compute_model(cfg: TrainConfig, model) -> tuple[Any, list[tuple[torch.Tensor, torch.Tensor]]]:
    """The model the training forward/backward runs on: ``model`` itself (``precision="fp32"``), or for
    ``precision="bf16-mixed"`` a bf16 copy of it (mixed precision with fp32 master weights).

    Returns ``(compute_model, pairs)`` with ``pairs`` = (bf16 copy's parameter, fp32 parameter) for every trainable
    weight.  The trainer runs forward and backward on the copy (bf16 matmuls, no per-op casts), adds each bf16
    gradient into the fp32 parameter's ``.grad`` (:meth:`grpo_lessons.training.trainer.Trainer.collect_grads`), steps the
    optimiser on the fp32 weights and copies them back into the copy.  The log-softmax and the loss stay fp32.
    """
    if cfg.precision != "bf16-mixed" or next(model.parameters()).dtype == torch.bfloat16:
        return model, []
    dup = low_precision_copy(model, torch.bfloat16, trainable=True)
    return dup, _sync_pairs(dup, model)


def make_sampler(cfg: TrainConfig, model, compute=None) -> tuple[Any, list[tuple[torch.Tensor, torch.Tensor]]]:
    """The model that samples: ``model`` itself, or a copy in ``cfg.sampler_dtype`` (a train/inference gap).

    Returns ``(sampler, pairs)`` where ``pairs`` are (sampler tensor, trainer parameter) for every trainable
    weight: :meth:`grpo_lessons.training.trainer.Trainer.sync_sampler` copies them after each update (``copy_`` into the
    existing low-precision tensors: no new allocation; frozen weights never change, so they are never copied
    again).  When the bf16 compute copy (``compute``, :func:`make_compute_model`) already has the sampler's dtype,
    it is the sampler: one copy, resynced once.  ``cfg.sampler_fp32_head`` gives the sampler an fp32 LM head
    (:class:`FP32Head`), so it is a copy of its own.
    """
    dtype = getattr(torch, cfg.sampler_dtype) if cfg.sampler_dtype else None
    if dtype is None or dtype == next(model.parameters()).dtype:
        return model, []
    if (compute is not None and compute is not model and dtype == next(compute.parameters()).dtype
            and not cfg.sampler_fp32_head):
        return compute, []
    sampler = low_precision_copy(model, dtype, trainable=False, fp32_head=cfg.sampler_fp32_head)
    return sampler, _sync_pairs(sampler, model)


def set_attention(cfg: TrainConfig, model) -> None:
    """Apply ``cfg.attn_implementation`` to ``model``: ``"auto"`` is ``"gqa"`` on a CPU for the families it is exact for
    (:func:`grpo_lessons.training.attention.gqa_is_exact`: Llama, Mistral, Qwen2, Qwen3) and the model's own elsewhere;
    ``"gqa"`` is :func:`grpo_lessons.training.attention.gqa_eager_attention` (plain matmuls, no key/value copies); any other
    name goes to transformers (``"eager"``, ``"sdpa"``, ...); None leaves the model as loaded.

    On this project's 2-core CPU plain matmul attention beats PyTorch's fused CPU kernel (``"sdpa"``) for these short
    sequences -- SmolLM2-135M, 8 x 8 completions of 12 tokens, bf16: generation 2.5 s instead of 4.0 s per step,
    forward + backward 6.9 s instead of 8.2 s with transformers' ``"eager"`` -- and ``"gqa"`` also skips eager's
    copies of the key/value cache (benchmarks/trainer_vs_trl.py measures the whole step).
    """
    impl = cfg.attn_implementation
    if impl == "auto":
        from .attention import gqa_is_exact
        impl = "gqa" if torch.device(cfg.device).type == "cpu" and gqa_is_exact(model) else None
    if impl is not None:
        from .attention import apply_attention
        apply_attention(model, impl)


@functools.cache  # process-wide: once is enough, and every later call gets the first answer
def reuse_freed_memory() -> bool:
    """Make glibc's ``malloc`` keep freed memory for reuse (Linux only; process-wide, once); True when it applied.

    By default glibc hands every block over 32 MB straight back to the kernel when it is freed, so each
    ``(32, 12, 49152)`` fp32 logits tensor of a GRPO step (75 MB) is a fresh mapping whose ~18,000 pages fault in one
    by one, every time.  With mmap off for allocations and a 1 GB trim threshold, freed blocks are reused.  Profiled on
    this project's 2-core CPU (a fixed batch, during development), SmolLM2-135M, 8 x 8 completions of 12 tokens, bf16-mixed: forward + backward 5.3 s ->
    3.6 s, generation 2.4 s -> 2.2 s; fp32: 9.4 s -> 7.0 s and 4.3 s -> 4.0 s.  The price: the process keeps what it
    has freed (peak RSS is recorded by benchmarks/cpu_learning.py), for the rest of the process: so it is an explicit
    choice (``TrainConfig(reuse_freed_memory=True)``), made by ``grpo-lessons train`` and the benchmark scripts, not by
    a library or notebook default.  The same effect as starting Python with
    ``MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=1073741824``.
    """
    import platform
    if platform.system() != "Linux":
        return False
    import ctypes
    import ctypes.util
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        m_trim_threshold, m_mmap_max = -1, -4  # glibc's mallopt parameter numbers (malloc.h)
        return bool(libc.mallopt(m_mmap_max, 0)) and bool(libc.mallopt(m_trim_threshold, 1 << 30))
    except (OSError, AttributeError):  # not glibc (musl has no mallopt): leave the allocator alone
        return False


def _block_list(model) -> torch.nn.ModuleList:
    """The model's list of transformer blocks (the ModuleList with ``num_hidden_layers`` entries)."""
    n = getattr(model.config, "num_hidden_layers", None)
    for _, mod in model.named_modules():
        if isinstance(mod, torch.nn.ModuleList) and len(mod) == n:
            return mod
    raise ValueError("trainable_layers: could not find the model's list of transformer blocks")
