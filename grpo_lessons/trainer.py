"""A minimal GRPO training loop on top of :func:`grpo_lessons.policy_loss` and the variant registry.

Introduced in ``notebooks/05_grpo_end_to_end.ipynb``; ``grpo-lessons train`` (:mod:`grpo_lessons.cli`)
is a command line around :func:`train`.

    from grpo_lessons.trainer import TrainConfig, train
    result = train(TrainConfig(model="smollm2", task="arithmetic", steps=30, out="runs/arith"))
    result.history[-1]["accuracy"], result.csv_path

One step, in the order the code runs it (:meth:`Trainer.step`)::

    rows     = next P prompts of the training set (a seeded permutation per epoch)
    rollout  = G completions per prompt, sampled at `temperature`         rollout.generate_completions
    rewards  = sum_k w_k * reward_fn_k(completions, **columns)            score_completions
             (+ DAPO's soft overlong penalty when overlong_cache_len is set)
    [dynamic sampling: drop groups whose rewards are all equal, sample new prompts, at most
     max_resample_rounds extra rounds]
    A        = group_advantages(rewards, G, scale=variant.advantage_scale)
    mask     = completion mask (x truncation mask under overlong filtering)
    old_logp = log-probs before the update (only needed when mu > 1; otherwise logp.detach())
    ref_logp = log-probs under the reference model (only when beta > 0)
    repeat mu times: loss = policy_loss(logp, old_logp, A, mask, variant, beta, ref_logp)
                     backward (micro-batches), clip the gradient norm, AdamW step

This corresponds to TRL's ``GRPOTrainer`` with ``num_generations = G``, ``num_iterations = mu``,
``steps_per_generation = 1``, ``max_completion_length = max_new_tokens``, ``top_k = 0``, ``top_p = 1``;
see :attr:`grpo_lessons.variants.Variant.trl` for the loss settings of each variant.  The model stays in
eval mode (dropout off) so the policy that samples is exactly the policy that is scored.
"""

from __future__ import annotations

import copy
import csv
import dataclasses
import json
import math
import os
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from .advantages import group_advantages
from .losses import LossOutput, policy_loss
from .rollout import Rollout, concat_rollouts, context_length, generate_completions, prompt_lengths, rollout_logps
from .shaping import informative_groups, soft_overlong_penalty, truncation_mask
from .variants import Variant, get_variant

__all__ = [
    "TrainConfig", "TrainResult", "Trainer", "Batch", "train", "score_completions", "batch_loss",
    "evaluate", "PromptStream", "load_history", "CHECKPOINT_NAME", "METRICS_NAME",
]

DEFAULT_GROUP_SIZE = 8
CHECKPOINT_NAME = "checkpoint.pt"
METRICS_NAME = "metrics.csv"
CONFIG_NAME = "config.json"


# ---------------------------------------------------------------------------------------------
# Configuration
# ---------------------------------------------------------------------------------------------


@dataclass
class TrainConfig:
    """Everything a run depends on.  ``None`` means "the variant's default" (see :meth:`resolved`).

    The defaults are the CPU settings that move SmolLM2-135M-Instruct on the arithmetic task in
    minutes (benchmarks/cpu_learning.py); the papers' own settings (G = 64, lr = 1e-6, ...) are in
    ``get_variant(name).train_defaults``.
    """

    model: str = "smollm2"  # "smollm2", "tiny-qwen2", "tiny-qwen3", a hub name or a local path
    task: str = "arithmetic"  # a grpo_lessons.data task
    variant: str = "grpo"  # a grpo_lessons.variants name
    steps: int = 30  # the benchmark gained 27 points in its first 20 steps, then levelled off
    prompts_per_step: int = 8
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
    checkpoint_every: int = 0  # save every N steps (and always at the end); 0: only at the end
    resume: bool = False  # continue from out/checkpoint.pt when it exists
    dynamic_sampling: bool | None = None  # DAPO: drop all-equal groups and refill; None -> variant default
    max_resample_rounds: int = 4  # bound on the extra sampling rounds of dynamic sampling
    mask_truncated_completions: bool | None = None  # DAPO overlong filtering; None -> variant default
    overlong_cache_len: int | None = None  # DAPO soft overlong penalty buffer (tokens); None: off
    reward_weights: tuple[float, ...] | None = None  # None -> the task's weights
    max_minutes: float | None = None  # stop after this much wall time (then evaluate and checkpoint); None: no limit
    save_model: bool = False  # write the trained model (or adapter) to out/model at the end
    dtype: str | None = None  # None: float32 on CPU
    device: str = "cpu"

    def with_sizes(self) -> "TrainConfig":
        """A copy with ``group_size`` and ``max_new_tokens`` filled in when ``None``.

        ``group_size``: the G that defines the variant (2-grpo: 2), else 8.  ``max_new_tokens``: the task's
        budget (arithmetic 12, countdown 32), else ``DEFAULT_MAX_NEW_TOKENS`` for rows passed in by hand.
        """
        from .data import DEFAULT_MAX_NEW_TOKENS, TASKS

        G = self.group_size
        if G is None:
            G = get_variant(self.variant).fixed_group_size or DEFAULT_GROUP_SIZE
        n = self.max_new_tokens
        if n is None:
            task = TASKS.get(self.task)
            n = task.max_new_tokens if task is not None else DEFAULT_MAX_NEW_TOKENS
        return dataclasses.replace(self, group_size=G, max_new_tokens=n)

    def resolved(self) -> dict[str, Any]:
        """The config as a dict with every ``None`` default filled in from the variant and the task."""
        v = get_variant(self.variant)
        d = dataclasses.asdict(self.with_sizes())
        td = v.train_defaults
        if d["beta"] is None:
            d["beta"] = float(td.get("beta", 0.0))
        if d["dynamic_sampling"] is None:
            d["dynamic_sampling"] = bool(td.get("dynamic_sampling", False))
        if d["mask_truncated_completions"] is None:
            d["mask_truncated_completions"] = bool(td.get("mask_truncated_completions", False))
        d["lora_targets"] = list(d["lora_targets"])
        if d["reward_weights"] is not None:
            d["reward_weights"] = [float(w) for w in d["reward_weights"]]
        return d

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first setting that cannot work."""
        v = get_variant(self.variant)  # unknown variant -> ValueError listing the known ones

        def positive_int(name, allow_zero=False):
            x = getattr(self, name)
            if not isinstance(x, int) or isinstance(x, bool) or x < (0 if allow_zero else 1):
                raise ValueError(f"{name} must be an integer >= {0 if allow_zero else 1}, got {x!r}")

        for name in ("steps", "prompts_per_step", "mu", "eval_batch_size", "micro_batch_size", "lora_r"):
            positive_int(name)
        if self.max_new_tokens is not None:
            positive_int("max_new_tokens")
        sized = self.with_sizes()
        G, max_new = sized.group_size, sized.max_new_tokens
        for name in ("eval_every", "eval_size", "checkpoint_every", "max_resample_rounds"):
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
        if self.trainable_layers is not None:
            positive_int("trainable_layers")
        if not self.out:
            raise ValueError("out (the run directory) must be set")


@dataclass
class TrainResult:
    """What :func:`train` returns."""

    history: list[dict]  # one dict per step; history[0] is step 0 (the evaluation before training) when evaluated
    csv_path: Path
    final_eval: dict | None  # {"step", "accuracy", "reward_mean", "completion_len", "n"} at the end
    initial_eval: dict | None
    out: Path
    config: dict  # the resolved configuration
    checkpoint_path: Path | None
    model: Any = field(repr=False, default=None)
    tokenizer: Any = field(repr=False, default=None)


# ---------------------------------------------------------------------------------------------
# Pure pieces: data order, scoring, the loss of one batch, evaluation
# ---------------------------------------------------------------------------------------------


class PromptStream:
    """Training prompts in a seeded order: epoch ``e`` is a permutation drawn from ``Random(seed, e)``.

    The position ``(epoch, pos)`` is the whole state, so a checkpoint that saves it resumes with the
    same data order.
    """

    def __init__(self, n: int, seed: int, epoch: int = 0, pos: int = 0) -> None:
        if n <= 0:
            raise ValueError("the training set is empty: there are no prompts to sample from")
        self.n, self.seed, self.epoch, self.pos = n, seed, epoch, pos
        self._order = self._permutation(epoch)

    def _permutation(self, epoch: int) -> list[int]:
        order = list(range(self.n))
        random.Random(f"{self.seed}-{epoch}").shuffle(order)  # a str seed hashes stably (not PYTHONHASHSEED)
        return order

    def take(self, k: int) -> list[int]:
        out = []
        while len(out) < k:
            if self.pos == self.n:
                self.epoch, self.pos = self.epoch + 1, 0
                self._order = self._permutation(self.epoch)
            out.append(self._order[self.pos])
            self.pos += 1
        return out

    def state(self) -> dict:
        return {"epoch": self.epoch, "pos": self.pos}


def _fn_name(f) -> str:
    return getattr(f, "__name__", None) or type(f).__name__


def reward_names(reward_funcs: Sequence[Callable]) -> list[str]:
    """Unique column names for the reward functions (``arithmetic_reward``, ``format_reward``, ``f_2`` ...)."""
    names = []
    for i, f in enumerate(reward_funcs):
        n = _fn_name(f)
        names.append(n if n not in names else f"{n}_{i}")
    return names


def score_completions(rollout: Rollout, rows: Sequence[dict], reward_funcs: Sequence[Callable],
                      weights: Sequence[float] | None = None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Rewards ``(N,)`` of a rollout: ``sum_k w_k f_k(completions, **columns)``, and each ``f_k``'s ``(N,)``.

    Each reward function is called the way TRL calls it: ``completions`` (chat messages for conversational
    prompts), ``prompts``, ``completion_ids`` and every dataset column except ``prompt``, each repeated
    ``G`` times.  What it returns is checked: exactly ``N`` finite numbers, or ``None`` for "does not
    apply" (counted as 0, as TRL's ``nansum``).  Anything else raises ``ValueError`` naming the function.
    """
    from .rewards import check_rewards

    G = rollout.group_size
    if len(rows) != rollout.num_prompts:
        raise ValueError(f"{len(rows)} dataset rows for a rollout of {rollout.num_prompts} prompts")
    if not reward_funcs:
        raise ValueError("no reward functions")
    weights = [1.0] * len(reward_funcs) if weights is None else [float(w) for w in weights]
    if len(weights) != len(reward_funcs):
        raise ValueError(f"{len(weights)} reward weights for {len(reward_funcs)} reward functions")
    N = len(rollout)
    keys = [k for k in dict.fromkeys(k for r in rows for k in r) if k not in ("prompt", "completions")]
    columns = {k: [r.get(k) for r in rows for _ in range(G)] for k in keys}  # each (N,)
    completions = rollout.completions()
    prompts = [p for p in rollout.prompts for _ in range(G)]
    ids = [row[m.bool()].tolist() for row, m in zip(rollout.completion_ids, rollout.completion_mask)]
    total = torch.zeros(N, dtype=torch.float32)
    parts = {}
    for name, f, w in zip(reward_names(reward_funcs), reward_funcs, weights):
        values = check_rewards(f(completions=completions, prompts=prompts, completion_ids=ids, **columns), N,
                               f"reward function {name!r}")
        r = torch.tensor(values, dtype=torch.float32)  # (N,), NaN where the function said None
        parts[name] = r
        total += w * torch.nan_to_num(r, nan=0.0)
    return total, parts


def batch_loss(model, rollout: Rollout, advantages: torch.Tensor, loss_mask: torch.Tensor, *,
               variant: str | Variant = "grpo", temperature: float = 1.0, beta: float = 0.0,
               old_logps: torch.Tensor | None = None, ref_logps: torch.Tensor | None = None,
               epsilon: float | None = None, epsilon_high: float | None = None,
               max_completion_length: int | None = None, num_items_in_batch: float | None = None,
               rows: slice | None = None) -> tuple[LossOutput, torch.Tensor]:
    """The GRPO loss of (a slice of) a batch, with gradient: forward pass, then :func:`policy_loss`.

    ``advantages`` is ``(N,)``, ``loss_mask``/``old_logps``/``ref_logps`` are ``(N, T)``; ``rows`` picks a
    micro-batch.  ``old_logps=None`` means on policy: ``pi_old = sg(pi_theta)``, every ratio exactly 1.
    Returns ``(LossOutput, logp)`` with ``logp`` the ``(b, T)`` log-probs that carry the gradient.
    """
    sl = rows if rows is not None else slice(0, len(rollout))
    logp = rollout_logps(model, rollout, temperature, rows=sl)  # (b, T), the prompt run once per group
    old = logp.detach() if old_logps is None else old_logps[sl]
    out = policy_loss(
        logp, old, advantages[sl], loss_mask[sl], variant=variant, epsilon=epsilon, epsilon_high=epsilon_high,
        beta=beta, ref_logp=None if ref_logps is None else ref_logps[sl],
        max_completion_length=max_completion_length, num_items_in_batch=num_items_in_batch,
    )
    return out, logp


@torch.no_grad()
def evaluate(model, tokenizer, rows: Sequence[dict], accuracy_fn: Callable, *, max_new_tokens: int,
             batch_size: int = 50, reward_funcs: Sequence[Callable] | None = None,
             reward_weights: Sequence[float] | None = None) -> dict:
    """Greedy held-out evaluation: ``accuracy`` = share of rows where ``accuracy_fn`` gives >= 1.

    Also the mean weighted reward (when ``reward_funcs`` is given) and the mean completion length.
    """
    if not rows:
        raise ValueError("the evaluation set is empty")
    correct, rewards, lengths = [], [], []
    for s in range(0, len(rows), batch_size):
        chunk = list(rows[s:s + batch_size])
        ro = generate_completions(model, tokenizer, [r["prompt"] for r in chunk], 1, max_new_tokens=max_new_tokens,
                                  temperature=None, compute_logps=False)
        _, acc = score_completions(ro, chunk, [accuracy_fn])
        correct += [bool(v >= 1.0 - 1e-9) for v in next(iter(acc.values())).tolist()]
        if reward_funcs:
            total, _ = score_completions(ro, chunk, reward_funcs, reward_weights)
            rewards += total.tolist()
        lengths += ro.lengths.tolist()
    return {
        "accuracy": sum(correct) / len(correct),
        "reward_mean": sum(rewards) / len(rewards) if rewards else None,
        "completion_len": sum(lengths) / len(lengths),
        "n": len(correct),
    }


# ---------------------------------------------------------------------------------------------
# Metrics file
# ---------------------------------------------------------------------------------------------

_BASE_COLUMNS = [
    "step", "reward_mean", "reward_std", "accuracy", "eval_reward_mean", "eval_completion_len",
    "loss", "policy_loss", "kl", "clip_frac", "clip_frac_low", "clip_frac_high", "ratio_mean", "grad_norm",
    "completion_len", "truncated_frac", "empty_frac", "overlong_penalty", "frac_zero_std_groups",
    "resample_rounds", "groups_trained", "completions_sampled", "seconds", "elapsed",
]


def _fmt(v) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return str(int(v))
    if isinstance(v, float):
        return repr(v) if math.isfinite(v) else str(v)
    return str(v)


def _parse(v: str):
    if v == "":
        return None
    try:
        i = int(v)
        return i
    except ValueError:
        pass
    try:
        return float(v)
    except ValueError:
        return v


def load_history(csv_path: str | os.PathLike) -> list[dict]:
    """Read a ``metrics.csv`` back into the list of per-step dicts (empty cells -> None)."""
    with open(csv_path, newline="", encoding="utf-8") as f:
        return [{k: _parse(v) for k, v in row.items()} for row in csv.DictReader(f)]


def _write_csv(path: Path, columns: list[str], rows: list[dict]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", newline="", encoding="utf-8") as f:
        f.write(",".join(columns) + "\n")
        for r in rows:
            f.write(",".join(_fmt(r.get(c)) for c in columns) + "\n")
    os.replace(tmp, path)  # atomic: the file is either the old one or the complete new one


def _append_csv(path: Path, columns: list[str], row: dict) -> None:
    line = ",".join(_fmt(row.get(c)) for c in columns) + "\n"
    with open(path, "a", newline="", encoding="utf-8") as f:
        f.write(line)  # one write of one complete line: a crash leaves whole rows only


# ---------------------------------------------------------------------------------------------
# The trainer
# ---------------------------------------------------------------------------------------------


@dataclass
class Batch:
    """One step's training data: the rollout of the kept groups, their rewards and advantages, masks, log-probs."""

    rows: list[dict]  # P dataset rows
    rollout: Rollout  # N = P * G completions
    rewards: torch.Tensor  # (N,) the reward used for the advantages (incl. any overlong penalty)
    advantages: torch.Tensor  # (N,)
    loss_mask: torch.Tensor  # (N, T) completion mask, times the truncation mask under overlong filtering
    old_logps: torch.Tensor | None  # (N, T) when mu > 1
    ref_logps: torch.Tensor | None  # (N, T) when beta > 0
    stats: dict  # what sampling saw: all sampled completions' rewards, zero-std groups, rounds

    @property
    def num_groups(self) -> int:
        return self.rollout.num_prompts


_TRAJECTORY_FIELDS = ("model", "task", "variant", "prompts_per_step", "group_size", "lr", "beta", "epsilon",
                      "epsilon_high", "mu", "max_new_tokens", "temperature", "max_grad_norm", "weight_decay",
                      "micro_batch_size", "seed", "lora", "lora_r", "lora_alpha", "lora_targets", "dynamic_sampling",
                      "max_resample_rounds", "mask_truncated_completions", "overlong_cache_len", "reward_weights",
                      "generation_batch_size", "trainable_layers")


class Trainer:
    """The GRPO loop, in pieces: :meth:`sample_batch`, :meth:`update`, :meth:`evaluate`, :meth:`step`, :meth:`run`.

    ``model``/``tokenizer`` (else loaded from ``cfg.model``), ``train_rows``/``eval_rows`` (else the task's
    train/test splits), ``reward_funcs``/``reward_weights`` (else the task's) and ``accuracy_fn`` (else the
    first reward function) may be passed in.  Everything that can be checked before the first step is
    checked here, so a bad setting fails before any file is written.
    """

    def __init__(self, cfg: TrainConfig, *, model=None, tokenizer=None, train_rows: Sequence[dict] | None = None,
                 eval_rows: Sequence[dict] | None = None, reward_funcs: Sequence[Callable] | None = None,
                 reward_weights: Sequence[float] | None = None, accuracy_fn: Callable | None = None) -> None:
        cfg.validate()
        cfg = cfg.with_sizes()  # every later cfg.group_size / cfg.max_new_tokens is a number
        self.cfg = cfg
        self.conf = cfg.resolved()
        self.variant = get_variant(cfg.variant)
        self.beta = self.conf["beta"]

        # --- data and rewards
        task = None
        if train_rows is None or reward_funcs is None or (eval_rows is None and cfg.eval_size):
            from .data import get_task
            task = get_task(cfg.task)
        self.train_rows = list(task.rows("train") if train_rows is None else train_rows)
        if not self.train_rows:
            raise ValueError("the training set is empty: there are no prompts to sample from")
        if cfg.eval_size:
            rows = list(task.rows("test") if eval_rows is None else eval_rows)
            if not rows:
                raise ValueError("the evaluation set is empty; pass eval rows or set eval_size=0")
            self.eval_rows = rows[:cfg.eval_size]
        else:
            self.eval_rows = []
        for i, r in enumerate(self.train_rows + self.eval_rows):
            if not isinstance(r, dict) or "prompt" not in r:
                raise ValueError(f"dataset row {i} has no 'prompt' column (rows must be dicts with a 'prompt')")
        self.reward_funcs = list(task.reward_funcs if reward_funcs is None else reward_funcs)
        if not self.reward_funcs:
            raise ValueError("no reward functions")
        w = cfg.reward_weights if cfg.reward_weights is not None else (
            reward_weights if reward_weights is not None else (task.reward_weights if reward_funcs is None else None))
        self.reward_weights = [1.0] * len(self.reward_funcs) if w is None else [float(x) for x in w]
        if len(self.reward_weights) != len(self.reward_funcs):
            raise ValueError(f"{len(self.reward_weights)} reward weights for {len(self.reward_funcs)} reward "
                             f"functions ({', '.join(reward_names(self.reward_funcs))})")
        self.reward_columns = [f"reward_{n}" for n in reward_names(self.reward_funcs)]
        self.accuracy_fn = accuracy_fn or self.reward_funcs[0]
        self.columns = _BASE_COLUMNS[:3] + self.reward_columns + _BASE_COLUMNS[3:]

        # --- model
        if model is None:
            from .models import resolve_model
            model, tokenizer = resolve_model(cfg.model, dtype=cfg.dtype, device=cfg.device)
        elif tokenizer is None:
            raise ValueError("a model was passed without its tokenizer")
        self.tokenizer = tokenizer
        self._check_prompt_lengths(model)
        torch.manual_seed(cfg.seed)  # LoRA initialisation and every sampled token follow from here
        self.ref_model = None
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
        elif self.beta > 0:
            self.ref_model = copy.deepcopy(model).eval()  # pi_ref: the initial weights, frozen
            for p in self.ref_model.parameters():
                p.requires_grad_(False)
        self.model = model.eval()  # dropout off: the sampling policy is the scored policy
        self.params = [p for p in model.parameters() if p.requires_grad]
        if not self.params:
            raise ValueError("the model has no trainable parameters")
        self.optimizer = torch.optim.AdamW(self.params, lr=cfg.lr, weight_decay=cfg.weight_decay)

        # --- state
        self.stream = PromptStream(len(self.train_rows), cfg.seed)
        self.step_count = 0
        self.history: list[dict] = []
        self.elapsed = 0.0
        self.initial_eval: dict | None = None
        self.out = Path(cfg.out)
        self.csv_path = self.out / METRICS_NAME
        self.checkpoint_path = self.out / CHECKPOINT_NAME
        self._started = False
        self._saved_step: int | None = None

    # ----- checks
    def _check_prompt_lengths(self, model) -> None:
        ctx = context_length(model)
        if ctx is None:
            return
        for name, rows in (("training", self.train_rows), ("evaluation", self.eval_rows)):
            lens = prompt_lengths(self.tokenizer, [r["prompt"] for r in rows])
            bad = [(i, n) for i, n in enumerate(lens) if n + self.cfg.max_new_tokens > ctx]
            if bad:
                i, n = bad[0]
                raise ValueError(
                    f"{len(bad)} {name} prompt(s) do not fit the model's context of {ctx} tokens with "
                    f"max_new_tokens={self.cfg.max_new_tokens}: e.g. row {i} has {n} prompt tokens. "
                    "Shorten the prompts, drop those rows, or lower max_new_tokens.")

    # ----- the reference model's log-probs
    def _micro_batches(self, n: int) -> list[slice]:
        """Row slices of whole groups, about ``micro_batch_size`` rows each (at least one group)."""
        G = self.cfg.group_size
        step = max(1, self.cfg.micro_batch_size // G) * G
        return [slice(s, min(n, s + step)) for s in range(0, n, step)]

    @torch.no_grad()
    def _logps(self, model, ro: Rollout) -> torch.Tensor:
        return torch.cat([rollout_logps(model, ro, self.cfg.temperature, rows=sl) for sl in self._micro_batches(len(ro))])

    def _ref_logps(self, ro: Rollout) -> torch.Tensor:
        if self.cfg.lora:
            with self.model.disable_adapter():  # the base weights: pi_ref without a second copy
                return self._logps(self.model, ro)
        return self._logps(self.ref_model, ro)

    # ----- 1. sampling
    def sample_round(self, num_prompts: int) -> tuple[list[dict], Rollout, torch.Tensor, dict[str, torch.Tensor],
                                                      torch.Tensor]:
        """Take the next ``num_prompts`` rows, sample ``G`` completions each and score them.

        Returns ``(rows, rollout, rewards (N,), per-function rewards, overlong penalty (N,))``.
        """
        cfg = self.cfg
        rows = [self.train_rows[i] for i in self.stream.take(num_prompts)]
        ro = generate_completions(self.model, self.tokenizer, [r["prompt"] for r in rows], cfg.group_size,
                                  max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature,
                                  compute_logps=False, batch_size=cfg.generation_batch_size)
        content = ro.lengths - ro.is_eos.long()  # (N,) tokens before the EOS
        if bool((content == 0).all()):
            raise RuntimeError(
                f"the model produced only empty completions (EOS as the first token) for all {len(ro)} samples of "
                f"step {self.step_count + 1}: there is nothing to score or learn from. Check the chat template, "
                "the EOS/pad tokens and the generation config of the model.")
        rewards, parts = score_completions(ro, rows, self.reward_funcs, self.reward_weights)
        penalty = torch.zeros_like(rewards)
        if cfg.overlong_cache_len:
            penalty = soft_overlong_penalty(ro.lengths.float(), cfg.max_new_tokens, cfg.overlong_cache_len)
        return rows, ro, rewards + penalty, parts, penalty

    def sample_batch(self) -> Batch:
        """Sample one step's batch: ``prompts_per_step`` groups (with dynamic sampling: informative ones)."""
        cfg, G = self.cfg, self.cfg.group_size
        dynamic = self.conf["dynamic_sampling"]
        kept_rows, kept_ro, kept_r = [], [], []
        seen_r, seen_parts, seen_pen, seen_ro = [], [], [], []
        rounds, zero_std, groups_seen = 0, 0, 0
        while True:
            need = cfg.prompts_per_step - sum(len(r) for r in kept_rows)
            rows, ro, r, parts, pen = self.sample_round(need)
            informative = informative_groups(r, G)  # (need,) bool
            zero_std += int((~informative).sum())
            groups_seen += len(rows)
            seen_r.append(r), seen_parts.append(parts), seen_pen.append(pen), seen_ro.append(ro)
            keep = [g for g in range(len(rows)) if bool(informative[g])] if dynamic else list(range(len(rows)))
            if keep:
                kept_rows.append([rows[g] for g in keep])
                kept_ro.append(ro.select_groups(keep))
                kept_r.append(r.view(-1, G)[keep].reshape(-1))
            full = sum(len(x) for x in kept_rows) == cfg.prompts_per_step
            if full or not dynamic or rounds >= cfg.max_resample_rounds:
                break
            rounds += 1  # DAPO: drop the all-equal groups and refill from the next prompts

        all_r = torch.cat(seen_r)
        stats = {
            "rewards": all_r,
            "reward_parts": {k: torch.cat([p[k] for p in seen_parts]) for k in seen_parts[0]},
            "overlong_penalty": torch.cat(seen_pen),
            "lengths": torch.cat([x.lengths for x in seen_ro]).float(),
            "truncated": torch.cat([x.truncated for x in seen_ro]).float(),
            "empty": torch.cat([(x.lengths - x.is_eos.long()) == 0 for x in seen_ro]).float(),
            "frac_zero_std_groups": zero_std / groups_seen,
            "resample_rounds": rounds,
            "completions_sampled": int(all_r.numel()),
        }
        rows = [r for part in kept_rows for r in part]
        if not rows:  # dynamic sampling found no informative group within its bound
            return Batch(rows=[], rollout=seen_ro[0].select_groups([]), rewards=torch.zeros(0),
                         advantages=torch.zeros(0), loss_mask=torch.zeros(0, 0), old_logps=None, ref_logps=None,
                         stats=stats)
        ro = concat_rollouts(kept_ro, self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None
                             else seen_ro[0].meta["pad_token_id"])
        rewards = torch.cat(kept_r)  # (N,)
        adv = group_advantages(rewards, G, scale=self.variant.advantage_scale)  # (N,)
        mask = ro.completion_mask.float()  # (N, T)
        if self.conf["mask_truncated_completions"]:
            mask = mask * truncation_mask(ro.truncated).unsqueeze(1)  # DAPO overlong filtering
        old = None
        if cfg.mu > 1:  # pi_old is needed explicitly only when the batch is reused
            old = self._logps(self.model, ro)
        ref = self._ref_logps(ro) if self.beta > 0 else None
        return Batch(rows=rows, rollout=ro, rewards=rewards, advantages=adv, loss_mask=mask, old_logps=old,
                     ref_logps=ref, stats=stats)

    # ----- 2. the update
    def update(self, batch: Batch) -> dict:
        """``mu`` AdamW steps on one batch; returns the loss diagnostics (means over the ``mu`` steps)."""
        cfg, v = self.cfg, self.variant
        N = len(batch.rewards)
        empty = {"loss": None, "policy_loss": None, "kl": None, "clip_frac": None, "clip_frac_low": None,
                 "clip_frac_high": None, "ratio_mean": None, "grad_norm": None, "groups_trained": 0}
        if N == 0:
            return empty
        token_mean = v.aggregation == "token_mean"
        total_tokens = float(batch.loss_mask.sum())
        acc = {k: 0.0 for k in ("loss", "policy_loss", "kl", "ratio_mean", "clip_low", "clip_high", "grad_norm")}
        has_clip = has_kl = False
        for _ in range(cfg.mu):
            self.optimizer.zero_grad(set_to_none=True)
            for sl in self._micro_batches(N):
                b = sl.stop - sl.start
                out, _ = batch_loss(
                    self.model, batch.rollout, batch.advantages, batch.loss_mask, variant=v,
                    temperature=cfg.temperature, beta=self.beta, old_logps=batch.old_logps,
                    ref_logps=batch.ref_logps, epsilon=cfg.epsilon, epsilon_high=cfg.epsilon_high,
                    max_completion_length=cfg.max_new_tokens,
                    num_items_in_batch=total_tokens if token_mean else None, rows=sl)
                # Micro-batches add up to the full batch's loss exactly: token-mean variants already divide by
                # the batch's token count; the others average over sequences, so weight by b / N.
                weight = 1.0 if token_mean else b / N
                (out.loss * weight).backward()
                tok_share = float(batch.loss_mask[sl].sum()) / max(total_tokens, 1.0)
                acc["loss"] += float(out.loss.detach()) * weight
                acc["policy_loss"] += float(out.policy_loss) * weight
                if out.kl is not None:
                    has_kl = True
                    acc["kl"] += float(out.kl) * weight
                acc["ratio_mean"] += out.ratio_mean * tok_share
                if out.clip_frac_low is not None:
                    has_clip = True
                    acc["clip_low"] += out.clip_frac_low * tok_share
                    acc["clip_high"] += out.clip_frac_high * tok_share
            grad_norm = torch.nn.utils.clip_grad_norm_(self.params, cfg.max_grad_norm)
            if not torch.isfinite(grad_norm):
                raise FloatingPointError(
                    f"the gradient norm is {float(grad_norm)} at step {self.step_count + 1}; the update was not "
                    "applied. Lower the learning rate or check the rewards.")
            acc["grad_norm"] += float(grad_norm)
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        mu = cfg.mu
        return {
            "loss": acc["loss"] / mu, "policy_loss": acc["policy_loss"] / mu,
            "kl": acc["kl"] / mu if has_kl else None,
            "clip_frac": (acc["clip_low"] + acc["clip_high"]) / mu if has_clip else None,
            "clip_frac_low": acc["clip_low"] / mu if has_clip else None,
            "clip_frac_high": acc["clip_high"] / mu if has_clip else None,
            "ratio_mean": acc["ratio_mean"] / mu, "grad_norm": acc["grad_norm"] / mu,
            "groups_trained": batch.num_groups,
        }

    # ----- 3. evaluation
    def evaluate(self) -> dict | None:
        """Greedy accuracy on the held-out rows (None when evaluation is off)."""
        if not self.eval_rows:
            return None
        return evaluate(self.model, self.tokenizer, self.eval_rows, self.accuracy_fn,
                        max_new_tokens=self.cfg.max_new_tokens, batch_size=self.cfg.eval_batch_size,
                        reward_funcs=self.reward_funcs, reward_weights=self.reward_weights)

    def _eval_due(self, step: int) -> bool:
        if not self.eval_rows:
            return False
        every = self.cfg.eval_every
        return step == 0 or step == self.cfg.steps or (every > 0 and step % every == 0)

    @staticmethod
    def _eval_fields(ev: dict | None) -> dict:
        if ev is None:
            return {}
        return {"accuracy": ev["accuracy"], "eval_reward_mean": ev["reward_mean"],
                "eval_completion_len": ev["completion_len"]}

    # ----- one step
    def step(self) -> dict:
        """Sample, score, update, (evaluate), log one row to the CSV, (checkpoint).  Returns the row."""
        self._start()
        t0 = time.perf_counter()
        batch = self.sample_batch()
        m = self.update(batch)
        self.step_count += 1
        st = batch.stats
        r = st["rewards"]
        row = {
            "step": self.step_count,
            "reward_mean": float(r.mean()),
            "reward_std": float(r.std()) if r.numel() > 1 else 0.0,
            **{c: _nanmean(st["reward_parts"][n]) for c, n in zip(self.reward_columns, st["reward_parts"])},
            **m,
            "completion_len": float(st["lengths"].mean()),
            "truncated_frac": float(st["truncated"].mean()),
            "empty_frac": float(st["empty"].mean()),
            "overlong_penalty": float(st["overlong_penalty"].mean()) if self.cfg.overlong_cache_len else None,
            "frac_zero_std_groups": st["frac_zero_std_groups"],
            "resample_rounds": st["resample_rounds"],
            "completions_sampled": st["completions_sampled"],
        }
        if self._eval_due(self.step_count) or self._time_up(time.perf_counter() - t0):
            row.update(self._eval_fields(self.evaluate()))
        row["seconds"] = time.perf_counter() - t0
        self.elapsed += row["seconds"]
        row["elapsed"] = self.elapsed
        row = {c: row.get(c) for c in self.columns}
        self.history.append(row)
        _append_csv(self.csv_path, self.columns, row)
        every = self.cfg.checkpoint_every
        if self.step_count == self.cfg.steps or (every and self.step_count % every == 0) or self._time_up():
            self.save_checkpoint()
        return row

    def _time_up(self, running: float = 0.0) -> bool:
        """True once ``max_minutes`` of (this run's) wall time have been used."""
        limit = self.cfg.max_minutes
        return limit is not None and self.elapsed + running >= 60.0 * limit

    # ----- checkpoints
    def save_checkpoint(self, path: str | os.PathLike | None = None) -> Path:
        """Write model/adapter weights, optimizer, RNG states, step, data cursor and history, atomically."""
        path = Path(path) if path is not None else self.checkpoint_path
        path.parent.mkdir(parents=True, exist_ok=True)
        state = {
            "format": 1,
            "step": self.step_count,
            "params": {n: p.detach().clone() for n, p in self.model.named_parameters() if p.requires_grad},
            "optimizer": self.optimizer.state_dict(),
            "torch_rng": torch.get_rng_state(),
            "python_rng": random.getstate(),
            "stream": self.stream.state(),
            "history": self.history,
            "elapsed": self.elapsed,
            "initial_eval": self.initial_eval,
            "config": {k: self.conf[k] for k in _TRAJECTORY_FIELDS},
        }
        tmp = path.with_name(f".{path.name}.tmp")
        torch.save(state, tmp)
        os.replace(tmp, path)  # atomic: a kill during the save leaves the previous checkpoint intact
        if path == self.checkpoint_path:
            self._saved_step = self.step_count
        return path

    def load_checkpoint(self, path: str | os.PathLike | None = None) -> int:
        """Restore a checkpoint written by :meth:`save_checkpoint`; returns its step."""
        path = Path(path) if path is not None else self.checkpoint_path
        state = torch.load(path, map_location="cpu", weights_only=False)
        saved = state["config"]
        diff = [k for k in _TRAJECTORY_FIELDS if saved.get(k) != self.conf[k]]
        if diff:
            raise ValueError(
                f"cannot resume from {path}: it was made with different settings for {diff} "
                f"(checkpoint: {[saved.get(k) for k in diff]}, now: {[self.conf[k] for k in diff]}). "
                "Use the same settings (only steps, eval and checkpoint frequency may change) or a new --out.")
        params = dict(self.model.named_parameters())
        with torch.no_grad():
            for n, t in state["params"].items():
                if n not in params:
                    raise ValueError(f"checkpoint {path} has a parameter {n!r} this model does not")
                params[n].copy_(t)
        self.optimizer.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["torch_rng"])
        random.setstate(state["python_rng"])
        self.stream = PromptStream(len(self.train_rows), self.cfg.seed, **state["stream"])
        self.step_count = int(state["step"])
        self.history = list(state["history"])
        self.elapsed = float(state["elapsed"])
        self.initial_eval = state["initial_eval"]
        if path == self.checkpoint_path:
            self._saved_step = self.step_count
        return self.step_count

    # ----- the run
    def _start(self) -> None:
        """Create the run directory, resume or start the CSV, and evaluate at step 0 (once)."""
        if self._started:
            return
        self._started = True
        self.out.mkdir(parents=True, exist_ok=True)
        resumed = self.cfg.resume and self.checkpoint_path.is_file()
        if resumed:
            self.load_checkpoint()
            # Rows logged after the checkpoint belong to steps that will be run again: drop them.
            _write_csv(self.csv_path, self.columns, self.history)
        else:
            _write_csv(self.csv_path, self.columns, [])
        (self.out / CONFIG_NAME).write_text(json.dumps(self.conf, indent=1, default=str) + "\n")
        if not resumed and self._eval_due(0):
            ev = self.evaluate()
            self.initial_eval = dict(ev, step=0)
            row = {c: None for c in self.columns}
            row.update(step=0, **self._eval_fields(ev))
            self.history.append(row)
            _append_csv(self.csv_path, self.columns, row)

    def run(self, progress: bool = True, callback: Callable[[list[dict]], Any] | None = None) -> TrainResult:
        """Run until ``cfg.steps`` (resuming first when ``cfg.resume``), then save the checkpoint and return."""
        from tqdm.auto import tqdm

        self._start()
        if callback is not None and self.history:
            callback(self.history)
        bar = tqdm(total=self.cfg.steps, initial=self.step_count, disable=not progress, desc="GRPO",
                   dynamic_ncols=True)
        try:
            while self.step_count < self.cfg.steps and not self._time_up():
                row = self.step()
                bar.update(1)
                bar.set_postfix_str(_postfix(row, self.history))
                if callback is not None:
                    callback(self.history)
        finally:
            bar.close()
        if self._saved_step != self.step_count:
            self.save_checkpoint()
        if self.cfg.save_model:
            self.model.save_pretrained(self.out / "model")
            self.tokenizer.save_pretrained(self.out / "model")
        final = None
        evals = [r for r in self.history if r.get("accuracy") is not None]
        if evals:
            last = evals[-1]
            final = {"step": last["step"], "accuracy": last["accuracy"], "reward_mean": last["eval_reward_mean"],
                     "completion_len": last["eval_completion_len"], "n": len(self.eval_rows)}
        return TrainResult(history=self.history, csv_path=self.csv_path, final_eval=final,
                           initial_eval=self.initial_eval, out=self.out, config=self.conf,
                           checkpoint_path=self.checkpoint_path, model=self.model, tokenizer=self.tokenizer)


def _block_list(model) -> torch.nn.ModuleList:
    """The model's list of transformer blocks (the ModuleList with ``num_hidden_layers`` entries)."""
    n = getattr(model.config, "num_hidden_layers", None)
    for _, mod in model.named_modules():
        if isinstance(mod, torch.nn.ModuleList) and len(mod) == n:
            return mod
    raise ValueError("trainable_layers: could not find the model's list of transformer blocks")


def _nanmean(t: torch.Tensor) -> float | None:
    t = t[~torch.isnan(t)]
    return float(t.mean()) if t.numel() else None


def _postfix(row: dict, history: list[dict]) -> str:
    def f(v, spec):
        return "-" if v is None else format(v, spec)
    acc = next((r["accuracy"] for r in reversed(history) if r.get("accuracy") is not None), None)
    return (f"reward {f(row['reward_mean'], '.3f')} kl {f(row['kl'], '.4f')} clip {f(row['clip_frac'], '.3f')} "
            f"len {f(row['completion_len'], '.1f')} acc {f(acc, '.3f')}")


def train(cfg: TrainConfig, progress: bool = True, callback: Callable[[list[dict]], Any] | None = None,
          **overrides) -> TrainResult:
    """Train with GRPO as configured by ``cfg``; returns a :class:`TrainResult`.

    ``callback(history)`` is called after every step (and once after the step-0 evaluation): pass
    :class:`grpo_lessons.viz.training.LivePlot` for a live plot in a notebook.  ``overrides`` go to
    :class:`Trainer` (``model=``, ``tokenizer=``, ``train_rows=``, ``eval_rows=``, ``reward_funcs=``,
    ``reward_weights=``, ``accuracy_fn=``).
    """
    return Trainer(cfg, **overrides).run(progress=progress, callback=callback)
