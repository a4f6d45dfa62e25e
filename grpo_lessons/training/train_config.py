"""``TrainConfig``: everything a training run depends on, resolved and validated in one place.

Introduced in ``notebooks/05_grpo_end_to_end.ipynb``; the loop that reads it is :mod:`grpo_lessons.training.trainer`
(which re-exports :class:`TrainConfig`), the command line :mod:`grpo_lessons.training.cli`.

``None`` means "the default that depends on something else" (the variant, the task).  :meth:`TrainConfig.resolve`
is the only place those defaults are filled in; :meth:`TrainConfig.validate` the only place settings are checked.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from typing import Any

from grpo_lessons.core.variants import get_variant

__all__ = ["TrainConfig", "default_precision", "cpu_bf16_speedup", "TRAJECTORY_FIELDS", "DEFAULT_GROUP_SIZE", "DEFAULT_PROMPTS_PER_STEP", "ENTROPY_IN",
           "CHECKPOINT_POLICIES"]

DEFAULT_GROUP_SIZE = 8
DEFAULT_PROMPTS_PER_STEP = 8
PRECISIONS = ("fp32", "bf16-mixed")  # what "auto" resolves to (default_precision)
SAMPLER_DTYPES = ("float32", "bfloat16", "float16")
OPTIMIZERS = ("adamw-fused", "adamw-foreach", "adamw")
COPY_ROUNDINGS = ("dither", "nearest")
ENTROPY_IN = ("reward", "loss")  # where TrainConfig.entropy_bonus enters
CHECKPOINT_POLICIES = ("never", "unfinished", "end")  # when TrainConfig writes out/checkpoint.pt


def default_precision(device: str | None) -> str:
    """``precision="auto"``: ``"bf16-mixed"`` (bf16 compute, fp32 master weights) on a CUDA device that has bf16,
    else ``"fp32"`` (a CPU: the precision every parity test checks).  ``device`` None or ``"auto"``: CUDA if present."""
    import torch

    dev = str(device) if device not in (None, "auto") else ("cuda" if torch.cuda.is_available() else "cpu")
    gpu_bf16 = dev.startswith("cuda") and torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    return "bf16-mixed" if gpu_bf16 else "fp32"


@functools.lru_cache(maxsize=None)
def cpu_bf16_speedup(size: int = 256, repeats: int = 3) -> float:
    """How many times faster a bf16 matrix product is than an fp32 one on this CPU (measured once per process,
    about 0.1 s where bf16 is emulated).  Above 1 where the CPU multiplies bf16 in hardware (AVX512-BF16, AMX, recent
    Arm cores): there ``precision="bf16-mixed"`` and a bf16 sampler are the fast path.  On a CPU without it (x86 with
    AVX2 only, for example) PyTorch emulates bf16 matrix products and the ratio falls far below 1: the same 135M-model
    step is then tens of times *slower* in bf16, and ``"fp32"`` is the fast choice."""
    import time

    import torch

    def best(dtype) -> float:
        a = torch.randn(size, size).to(dtype)
        b = torch.randn(size, size).to(dtype)
        a @ b  # warm up kernels and caches
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            a @ b
            times.append(time.perf_counter() - t)
        return min(times)

    return best(torch.float32) / max(best(torch.bfloat16), 1e-9)


@dataclass
class TrainConfig:
    """Everything a run depends on.  ``None`` means "the variant's (or task's) default" (see :meth:`resolve`).

    The defaults are the CPU settings that move SmolLM2-135M-Instruct on the arithmetic task in
    minutes (benchmarks/cpu_learning.py); the papers' own settings (G = 64, lr = 1e-6, ...) are in
    ``get_variant(name).train_defaults``.
    """

    model: str = "smollm2"  # "smollm2", "tiny-qwen2", "tiny-qwen3", a hub name or a local path
    task: str = "arithmetic"  # a grpo_lessons.training.data task
    variant: str = "grpo"  # a grpo_lessons.core.variants name
    steps: int = 30  # the benchmark gained 27 points in its first 20 steps, then levelled off
    prompts_per_step: int | None = None  # prompts (groups) per step; None: 8, or the variant's (2-grpo: 32, same completions)
    group_size: int | None = None  # G completions per prompt; None: 8, or the G that defines the variant (2-grpo: 2)
    lr: float = 3e-5
    beta: float | None = None  # KL coefficient; None -> variant default (grpo: 0.04, which loads a reference model)
    epsilon: float | None = None  # None -> the variant's paper value
    epsilon_high: float | None = None
    mu: int = 1  # optimiser steps per sampled batch (TRL num_iterations)
    max_new_tokens: int | None = None  # None: the task's (arithmetic 12, countdown 32)
    temperature: float = 0.7  # SmolLM2 samples 21% right at 0.7, 8% at 1.0: far fewer all-wrong groups (data/PROBE.md)
    max_grad_norm: float = 1.0
    weight_decay: float = 0.0
    eval_every: int = 10  # greedy held-out accuracy every N steps (also at step 0 and at the end); 0: only those
    eval_size: int = 100  # held-out prompts per evaluation; 0 disables evaluation
    eval_batch_size: int = 50
    micro_batch_size: int = 32  # sequences per forward/backward (gradient accumulation, exact)
    generation_batch_size: int | None = None  # prompts per generate() call; None: all at once
    seed: int = 0
    out: str = "runs/grpo"
    lora: bool = False  # train a LoRA adapter (peft) instead of every weight
    lora_r: int = 16
    lora_alpha: int = 32
    lora_targets: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    trainable_layers: int | None = None  # train only the last N transformer blocks (+ final norm); None: all
    checkpoint: str = "unfinished"  # when out/checkpoint.pt (weights, optimiser, random states: ~1.6 GB for a full
    #   SmolLM2-135M run) is written: "never"; "unfinished": only when the run stops before `steps` (max_minutes), so
    #   that resume can finish it; a run that reaches `steps` keeps none; "end": at the end of every invocation
    #   (to continue a finished run with more steps later)
    checkpoint_every: int = 0  # also save every N steps while running (a killed run loses at most N steps); 0: off
    resume: bool = False  # continue from out/checkpoint.pt when it exists
    dynamic_sampling: bool | None = None  # DAPO: drop all-equal groups and refill; None -> variant default
    max_resample_rounds: int = 4  # bound on the extra sampling rounds of dynamic sampling
    mask_truncated_completions: bool | None = None  # DAPO overlong filtering; None -> variant default
    overlong_cache_len: int | None = None  # DAPO soft overlong penalty buffer (tokens); None: off
    reward_weights: tuple[float, ...] | None = None  # None -> the task's weights
    rewards: tuple[str, ...] | None = None  # "MODULE:FUNCTION[=WEIGHT]" reward functions that replace the task's
    #   (training.plugins.load_reward; the held-out accuracy stays the task's); None: the task's own
    plugins: tuple[str, ...] = ()  # modules imported before the variant is looked up: what they register through
    #   the public registry API (a variant, an objective, ...) can be trained (training.plugins.import_plugins)
    max_minutes: float | None = None  # stop after this much training time in this invocation (evaluation excluded,
    #   timed in the CSV's time_eval), then evaluate and checkpoint; a resume gets a new budget; None: no limit
    max_completions: int | None = None  # sample at most this many completions in the run (a budget in samples, not
    #   steps): it stops when the next step's first round would not fit, and dynamic sampling's refill rounds draw
    #   only what is left, so an arm that samples more per step takes fewer steps; None: no limit
    save_model: bool = False  # write the trained model (or adapter) to out/model at the end
    dtype: str | None = None  # the weights' dtype when cfg.model is loaded; None: float32 (in every precision the
    #   weights are then fp32 master weights whatever dtype they arrive in; bf16 compute is `precision`'s business)
    device: str = "cpu"
    # ----- speed: precision of the training pass and of the sampler
    precision: str = "auto"  # "bf16-mixed": forward/backward on a bf16 copy of the weights, fp32 master weights
    #   (the optimiser's), fp32 log-softmax and loss (train_setup.make_compute_model); "fp32"; "auto": bf16-mixed on a
    #   CUDA device with bf16, else fp32 (default_precision)
    sampler_dtype: str | None = None  # e.g. "bfloat16": sample with a low-precision copy of the weights (resynced
    #   after every update); None: the trainer's own model samples (no train/inference gap)
    copy_rounding: str = "dither"  # how the fp32 weights are rounded into the bf16 copies after each update:
    #   "dither" (a fixed random threshold per weight: the copy follows small updates) or "nearest"
    #   (train_setup.LowPrecisionSync)
    sampler_fp32_head: bool = False  # the low-precision sampler computes its logits with an fp32 LM head
    #   (train_setup.FP32Head; MiniMax-M1's fix for the sampler/trainer gap)
    attn_implementation: str | None = "auto"  # "auto": "gqa" on a CPU (plain-matmul grouped-query attention,
    #   grpo_lessons.training.attention; faster than "sdpa" for short sequences) for the families it is exact for
    #   (Llama/SmolLM2, Mistral, Qwen2, Qwen3: attention.gqa_is_exact), else the model's own; None: leave the model as
    #   loaded; or "gqa" or any transformers name ("eager", "sdpa", ...)
    reuse_freed_memory: bool = False  # Linux, on a CPU: glibc keeps freed memory for reuse instead of unmapping every
    #   big tensor (train_setup.reuse_freed_memory; ~30 % off a CPU step).  Off by default: it changes the allocator of
    #   the whole process for good (a notebook kernel then keeps what it freed).  `grpo-lessons train` and the
    #   benchmark scripts, processes that only train, turn it on
    optimizer: str = "adamw-fused"  # "adamw-fused" (one kernel; 6x faster than "adamw" on this CPU), "adamw-foreach", "adamw"
    # ----- the sampler/trainer mismatch (notebook 11): passed to policy_loss only when set
    rollout_correction: str | None = None  # token_truncate (TIS), token_mask (MIS), sequence_*: see correction.py
    rollout_clip_max: float = 3.0  # the correction's upper truncation of pi_old / mu
    rollout_clip_min: float | None = None
    off_policy_mask_threshold: float | None = None  # mask sequences whose sampler/trainer gap exceeds this
    # ----- entropy bonus, ScaleRL's retirement of solved prompts, DPPO's top-K (README: training settings)
    entropy_bonus: float = 0.0  # alpha of the entropy bonus (0: off); where it enters: entropy_in
    entropy_in: str = "reward"  # "reward": r_i += alpha * H_i (sampler's mean token entropy); "loss": veRL entropy_coeff
    retire_solved_at: float | None = None  # ScaleRL no-positive-resampling: retire prompts with pass rate >= this
    topk: int = 20  # DPPO top-K variants: how many of the sampler's most likely tokens are recorded per position
    # ----- diagnostics that do not change the trajectory
    kl_start_every: int = 0  # log kl_start (KL of the policy to its initial weights, k3 per token on the sampled
    #   tokens) every N steps: one no-grad forward of a frozen copy of the start weights; 0: off

    # ----- the one place None defaults are filled in
    def resolve(self) -> "TrainConfig":
        """A copy with every ``None`` default filled in (idempotent).

        * ``group_size``: the G that defines the variant (2-grpo: 2), else 8.
        * ``prompts_per_step``: the variant's ``train_defaults["prompts_per_step"]``, else 8.  2-GRPO's is 32:
          "2-GRPO at the same budget" means the same number of completions per step as the G = 8 run it is
          compared with, 8 prompts x 8 = 32 prompts x 2 (4x the prompts; the paper's 8x is against G = 16).
        * ``max_new_tokens``: the task's budget (arithmetic 12, countdown 32), else ``DEFAULT_MAX_NEW_TOKENS``.
        * ``beta``, ``dynamic_sampling``, ``mask_truncated_completions``: the variant's ``train_defaults``.
        * ``precision="auto"``: :func:`default_precision` of ``device``.
        """
        from .data import DEFAULT_MAX_NEW_TOKENS, TASKS

        self.import_plugins()  # a variant a plug-in registers is looked up below
        v = get_variant(self.variant)
        td = v.train_defaults
        G = self.group_size if self.group_size is not None else (v.fixed_group_size or DEFAULT_GROUP_SIZE)
        n = self.max_new_tokens
        if n is None:
            task = TASKS.get(self.task)
            n = task.max_new_tokens if task is not None else DEFAULT_MAX_NEW_TOKENS
        P = self.prompts_per_step
        if P is None:
            P = int(td.get("prompts_per_step", DEFAULT_PROMPTS_PER_STEP))
        return dataclasses.replace(
            self, group_size=G, max_new_tokens=n, prompts_per_step=P,
            precision=default_precision(self.device) if self.precision == "auto" else self.precision,
            beta=float(td.get("beta", 0.0)) if self.beta is None else self.beta,
            dynamic_sampling=(bool(td.get("dynamic_sampling", False)) if self.dynamic_sampling is None
                              else self.dynamic_sampling),
            mask_truncated_completions=(bool(td.get("mask_truncated_completions", False))
                                        if self.mask_truncated_completions is None
                                        else self.mask_truncated_completions),
        )

    def with_sizes(self) -> "TrainConfig":
        """Kept for older callers: the same as :meth:`resolve`."""
        return self.resolve()

    def resolved(self) -> dict[str, Any]:
        """:meth:`resolve` as a JSON-friendly dict (what ``config.json`` and the checkpoint record)."""
        d = dataclasses.asdict(self.resolve())
        d["lora_targets"] = list(d["lora_targets"])
        if d["reward_weights"] is not None:
            d["reward_weights"] = [float(w) for w in d["reward_weights"]]
        if d["rewards"] is not None:
            d["rewards"] = list(d["rewards"])
        d["plugins"] = list(d["plugins"])
        return d

    def import_plugins(self) -> dict[str, list[str]]:
        """Import the ``plugins`` modules (once each: Python caches them); ``{module: variants it registered}``."""
        if isinstance(self.plugins, str) or isinstance(self.rewards, str):
            raise ValueError("plugins and rewards are sequences of names, e.g. plugins=('my_pkg.variants',), "
                             "not one string")
        if not self.plugins:
            return {}
        from .plugins import import_plugins

        return import_plugins(self.plugins)

    def reward_functions(self) -> tuple[list, list[float]] | None:
        """``(functions, weights)`` the ``rewards`` specs name (``reward_weights`` wins when given), or ``None``
        when the task's own reward functions are used."""
        if self.rewards is None:
            return None
        from .plugins import load_rewards, parse_reward_spec

        specs = [parse_reward_spec(s) for s in self.rewards]
        funcs, weights = load_rewards(specs)
        if self.reward_weights is not None:
            if any(s.weight is not None for s in specs):
                raise ValueError("reward weights are given twice: in the rewards (MODULE:FUNCTION=WEIGHT) and in "
                                 "reward_weights; give them one way")
            weights = [float(w) for w in self.reward_weights]
        if len(weights) != len(funcs):
            raise ValueError(f"{len(weights)} reward weights for {len(funcs)} reward functions "
                             f"({', '.join(s.target for s in specs)})")
        return funcs, weights

    # ----- the one place settings are checked
    def validate(self) -> None:
        """Raise ``ValueError`` naming the first setting that cannot work."""
        self.import_plugins()  # before the variant is looked up: a plug-in may register it
        v = get_variant(self.variant)  # unknown variant -> ValueError listing the known ones
        self.reward_functions()  # a reward that cannot be loaded fails here, before any file is written

        def positive_int(name, allow_zero=False):
            x = getattr(self, name)
            if not isinstance(x, int) or isinstance(x, bool) or x < (0 if allow_zero else 1):
                raise ValueError(f"{name} must be an integer >= {0 if allow_zero else 1}, got {x!r}")

        for name in ("steps", "mu", "eval_batch_size", "micro_batch_size", "lora_r"):
            positive_int(name)
        if self.prompts_per_step is not None:
            positive_int("prompts_per_step")
        if self.max_new_tokens is not None:
            positive_int("max_new_tokens")
        r = self.resolve()
        G, max_new = r.group_size, r.max_new_tokens
        for name in ("eval_every", "eval_size", "checkpoint_every", "max_resample_rounds", "kl_start_every"):
            positive_int(name, allow_zero=True)
        if v.fixed_group_size is not None and G != v.fixed_group_size:
            raise ValueError(
                f"variant {v.name!r} is defined by group_size={v.fixed_group_size} ({v.title}); got group_size={G}. "
                f"Leave group_size unset, or use variant 'grpo' for other group sizes")
        if not isinstance(G, int) or isinstance(G, bool) or G < 2:
            raise ValueError(
                f"group_size must be >= 2, got {G!r}: GRPO's advantage compares the completions of "
                "one prompt with each other, and a group of one has nothing to compare with (its advantage is "
                "always 0, so nothing is learned)")
        if not self.lr > 0 or not math.isfinite(self.lr):
            raise ValueError(f"lr must be a positive number, got {self.lr!r}")
        if (self.epsilon is not None or self.epsilon_high is not None) and "epsilon" not in v.loss_params:
            raise ValueError(
                f"variant {v.name!r} ({v.objective} objective) has no clip range: epsilon/epsilon_high do not apply "
                f"(its options: {list(v.loss_params) or 'none'})")
        if not self.temperature > 0:
            raise ValueError(f"temperature must be > 0, got {self.temperature!r}")
        if self.beta is not None and (self.beta < 0 or not math.isfinite(self.beta)):
            raise ValueError(f"beta must be >= 0, got {self.beta!r}")
        if not self.max_grad_norm > 0:
            raise ValueError(f"max_grad_norm must be > 0, got {self.max_grad_norm!r}")
        if self.overlong_cache_len is not None and not 0 < self.overlong_cache_len <= max_new:
            raise ValueError(
                f"overlong_cache_len must be in 1..max_new_tokens={max_new}, got {self.overlong_cache_len} "
                "(DAPO's buffer: the last overlong_cache_len tokens before the limit are penalised linearly)")
        if self.generation_batch_size is not None:
            positive_int("generation_batch_size")
        if self.max_minutes is not None and not self.max_minutes > 0:
            raise ValueError(f"max_minutes must be > 0 (or None), got {self.max_minutes!r}")
        if self.max_completions is not None:
            positive_int("max_completions")
            if self.max_completions < self.prompts_per_step * self.group_size:
                raise ValueError(f"max_completions={self.max_completions} is less than one step's batch "
                                 f"({self.prompts_per_step} prompts x G = {self.group_size}): no step would run")
        if self.trainable_layers is not None:
            positive_int("trainable_layers")
        if self.precision not in (*PRECISIONS, "auto"):
            raise ValueError(f"precision must be one of {(*PRECISIONS, 'auto')}, got {self.precision!r}")
        if self.sampler_dtype is not None and self.sampler_dtype not in SAMPLER_DTYPES:
            raise ValueError(f"sampler_dtype must be None or one of {SAMPLER_DTYPES}, got {self.sampler_dtype!r}")
        if self.copy_rounding not in COPY_ROUNDINGS:
            raise ValueError(f"copy_rounding must be one of {COPY_ROUNDINGS}, got {self.copy_rounding!r}")
        if self.sampler_fp32_head and self.sampler_dtype not in ("bfloat16", "float16"):
            raise ValueError("sampler_fp32_head needs a low-precision sampler: set sampler_dtype='bfloat16' (or "
                             f"'float16'); got sampler_dtype={self.sampler_dtype!r}")
        if self.attn_implementation is not None and (not isinstance(self.attn_implementation, str)
                                                     or not self.attn_implementation):
            raise ValueError(f"attn_implementation must be None, 'auto' or a transformers attention name such as "
                             f"'eager' or 'sdpa', got {self.attn_implementation!r}")
        if self.checkpoint not in CHECKPOINT_POLICIES:
            raise ValueError(f"checkpoint must be one of {CHECKPOINT_POLICIES}, got {self.checkpoint!r}")
        if self.checkpoint == "never" and self.checkpoint_every:
            raise ValueError(f"checkpoint='never' writes no checkpoint, yet checkpoint_every={self.checkpoint_every} "
                             "asks for one every N steps: choose one (checkpoint='unfinished' or 'end' with "
                             "checkpoint_every, or checkpoint_every=0)")
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {self.optimizer!r}")
        if self.rollout_clip_max is not None and not self.rollout_clip_max > 0:
            raise ValueError(f"rollout_clip_max must be > 0, got {self.rollout_clip_max!r}")
        if self.rollout_clip_min is not None and not 0 <= self.rollout_clip_min < (self.rollout_clip_max or math.inf):
            raise ValueError(f"rollout_clip_min must be in [0, rollout_clip_max), got {self.rollout_clip_min!r}")
        if self.rollout_correction is not None:  # unknown mode -> ValueError listing the registered ones
            from grpo_lessons.core.correction import CORRECTION_MODES
            CORRECTION_MODES.lookup(self.rollout_correction, "rollout_correction")
        if self.rollout_correction is not None and "anchor_logp" in v.objective_piece.inputs:
            raise ValueError(
                f"variant {v.name!r} ({v.objective} objective) already weights each token by min(pi_theta / mu, C) "
                f"with mu the sampler: rollout_correction={self.rollout_correction!r} would weight the sampler "
                "mismatch a second time; leave it unset (off_policy_mask_threshold still applies)")
        if self.off_policy_mask_threshold is not None and not self.off_policy_mask_threshold > 0:
            raise ValueError(f"off_policy_mask_threshold must be > 0, got {self.off_policy_mask_threshold!r}")
        if not self.out:
            raise ValueError("out (the run directory) must be set")
        if not isinstance(self.entropy_bonus, (int, float)) or not math.isfinite(self.entropy_bonus):
            raise ValueError(f"entropy_bonus must be a finite number, got {self.entropy_bonus!r}")
        if self.entropy_in not in ENTROPY_IN:
            raise ValueError(f"entropy_in must be one of {ENTROPY_IN}, got {self.entropy_in!r}")
        if self.retire_solved_at is not None and not 0 < self.retire_solved_at <= 1:
            raise ValueError(f"retire_solved_at must be in (0, 1] (a pass rate) or None, got {self.retire_solved_at!r}")
        positive_int("topk")

    @property
    def corrects_rollouts(self) -> bool:
        """Whether policy_loss gets the sampler's log-probs and a correction (notebook 11)."""
        return self.rollout_correction is not None or self.off_policy_mask_threshold is not None


# The settings that decide the trajectory of a run: a checkpoint made with other values cannot be resumed.
TRAJECTORY_FIELDS = ("model", "task", "variant", "prompts_per_step", "group_size", "lr", "beta", "epsilon",
                     "epsilon_high", "mu", "max_new_tokens", "temperature", "max_grad_norm", "weight_decay",
                     "micro_batch_size", "seed", "lora", "lora_r", "lora_alpha", "lora_targets", "dynamic_sampling",
                     "max_resample_rounds", "mask_truncated_completions", "overlong_cache_len", "reward_weights",
                     "generation_batch_size", "trainable_layers", "precision", "sampler_dtype", "sampler_fp32_head", "copy_rounding", "optimizer",
                     "rollout_correction", "rollout_clip_max", "rollout_clip_min", "off_policy_mask_threshold",
                     "entropy_bonus", "entropy_in", "retire_solved_at", "topk", "rewards")
