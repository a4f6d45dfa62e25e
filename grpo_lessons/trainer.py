"""The GRPO loop: sample -> score -> advantages -> update, on top of :func:`grpo_lessons.policy_loss`.

Introduced in ``notebooks/05_grpo_end_to_end.ipynb``; ``grpo-lessons train`` (:mod:`grpo_lessons.cli`)
is a command line around :func:`train`.

    from grpo_lessons.trainer import TrainConfig, train
    result = train(TrainConfig(model="smollm2", task="arithmetic", steps=30, out="runs/arith"))
    result.history[-1]["accuracy"], result.csv_path

One step (:meth:`Trainer.step`), each line a named call into the pipeline's modules::

    rows     = next P prompts of the training set (a seeded permutation per epoch)   records.PromptStream
    rollout  = G completions per prompt, sampled at `temperature`                   rollout.generate_completions
    R        = [reward_fn_k(completions, **columns)]_k, (N, K); NaN where None     score_completions
             (+ DAPO's soft overlong penalty when overlong_cache_len is set)        shaping.soft_overlong_penalty
             (+ alpha * H_i, entropy_in="reward": H_i the sampler's mean token entropy) shaping.completion_entropy
    rewards  = nansum_k w_k R_ik (NaN where every reward function said None: unscorable)
    [retire_solved_at: prompts whose pass rate reaches it leave the pool for good]   shaping.solved_groups
    [dynamic sampling: drop groups whose rewards are all equal, sample new prompts, at most
     max_resample_rounds extra rounds]                                              shaping.informative_groups
    A        = the variant's advantages of R (GRPO z-score, Dr. GRPO, ScaleRL's batch std,
               GDPO per-reward, GOPO ranks); unscorable completions get 0            advantages.variant_advantages
    mask     = completion mask (x truncation mask under overlong filtering)         shaping.truncation_mask
    old_logp = log-probs before the update (only needed when mu > 1; otherwise logp.detach())
    ref_logp = log-probs under the reference model (only when beta > 0)
    repeat mu times: loss = policy_loss(logp, old_logp, A, mask, variant, beta, ref_logp)   losses.policy_loss
                     (DPPO top-K: divergence over the sampler's top-K ids              divergence.topk_divergence
                      entropy_in="loss": - alpha * aggregated token entropy)          shaping.token_entropy
                     backward (micro-batches), clip the gradient norm, AdamW step

Speed (``TrainConfig``): ``precision="bf16-mixed"`` runs the training forward/backward under bf16 autocast
(fp32 master weights, fp32 log-softmax and loss); ``sampler_dtype="bfloat16"`` samples with a bf16 copy of the
weights, resynced in place after every update, and keeps that sampler's own log-probs (``sampling_logps``)
beside the trainer's ``pi_old``: every row logs the gap (``mismatch_k3``, ``mismatch_ratio_min/mean/max`` of
``pi_old / mu``), and ``rollout_correction`` / ``off_policy_mask_threshold`` hand it to :func:`policy_loss`
(notebook 11).  The optimiser is fused AdamW; the sampler draws by inverse CDF (rollout.InverseCDFSampler).

The configuration lives in :mod:`grpo_lessons.train_config`, the run records (metrics CSV, checkpoints,
resume) in :mod:`grpo_lessons.records`.  This corresponds to TRL's ``GRPOTrainer`` with
``num_generations = G``, ``num_iterations = mu``, ``steps_per_generation = 1``,
``max_completion_length = max_new_tokens``, ``top_k = 0``, ``top_p = 1``; see
:attr:`grpo_lessons.variants.Variant.trl` for the loss settings of each variant.  The model stays in
eval mode (dropout off) so the policy that samples is exactly the policy that is scored.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from . import records
from .advantages import variant_advantages
from .aggregation import aggregate, prompt_weights
from .divergence import topk_divergence
from .losses import LossOutput, policy_loss
from .records import CHECKPOINT_NAME, CONFIG_NAME, METRICS_NAME, PromptStream, load_history
from .rollout import Rollout, concat_rollouts, context_length, generate_completions, prompt_lengths, rollout_logps
from .shaping import (completion_entropy, informative_groups, soft_overlong_penalty, solved_groups, token_entropy,
                      truncation_mask)
from .train_config import TrainConfig
from .variants import Variant, get_variant

__all__ = [
    "TrainConfig", "TrainResult", "Trainer", "Batch", "train", "score_completions", "batch_loss",
    "evaluate", "PromptStream", "load_history", "CHECKPOINT_NAME", "METRICS_NAME",
]


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
# Pure pieces: scoring, the loss of one batch, evaluation
# ---------------------------------------------------------------------------------------------


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
    A completion for which *every* function returned ``None`` is unscorable: its total is NaN (TRL: left out
    of the group statistics, advantage 0; see :func:`grpo_lessons.advantages.variant_advantages`).
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
    scored = torch.zeros(N, dtype=torch.bool)
    parts = {}
    for name, f, w in zip(reward_names(reward_funcs), reward_funcs, weights):
        values = check_rewards(f(completions=completions, prompts=prompts, completion_ids=ids, **columns), N,
                               f"reward function {name!r}")
        r = torch.tensor(values, dtype=torch.float32)  # (N,), NaN where the function said None
        parts[name] = r
        total += w * torch.nan_to_num(r, nan=0.0)
        scored |= ~torch.isnan(r)
    return torch.where(scored, total, torch.full_like(total, float("nan"))), parts


def batch_loss(model, rollout: Rollout, advantages: torch.Tensor, loss_mask: torch.Tensor, *,
               variant: str | Variant = "grpo", temperature: float = 1.0, beta: float = 0.0,
               old_logps: torch.Tensor | None = None, ref_logps: torch.Tensor | None = None,
               epsilon: float | None = None, epsilon_high: float | None = None,
               max_completion_length: int | None = None, num_items_in_batch: float | None = None,
               rows: slice | None = None, precision: str = "fp32",
               correction: dict | None = None, group_size: int | None = None,
               prompt_weights: torch.Tensor | None = None,
               entropy_coef: float = 0.0) -> tuple[LossOutput, torch.Tensor]:
    """The GRPO loss of (a slice of) a batch, with gradient: forward pass, then :func:`policy_loss`.

    ``advantages`` is ``(N,)``, ``loss_mask``/``old_logps``/``ref_logps`` are ``(N, T)``; ``rows`` picks a
    micro-batch.  ``old_logps=None`` means on policy: ``pi_old = sg(pi_theta)``, every ratio exactly 1.
    ``precision="bf16-mixed"`` runs the forward under bf16 autocast (the weights stay fp32; the log-softmax
    and the loss are fp32).  ``correction`` (``sampling_logp`` of the whole batch ``(N, T)`` plus the
    rollout-correction settings) goes to :func:`policy_loss` only when given.
    ``group_size`` / ``prompt_weights`` ``(N,)`` (of the whole batch) are ScaleRL's ``prompt_mean`` normaliser.
    DPPO's top-K variants get ``divergence = topk_divergence(...)`` between the sampler's top-K
    (``rollout.sampler_topk_ids``/``sampler_topk_logps``, recorded at generation) and this forward's logits.
    ``entropy_coef = alpha > 0`` subtracts ``alpha * aggregate(H)`` from the loss, ``H`` ``(b, T)`` the token
    entropy of the current (tempered) policy with its gradient, aggregated as the variant aggregates the loss
    (veRL ``actor.entropy_coeff``); ``out.extras["entropy"]`` is its token mean, ``["entropy_term"]`` the
    aggregate.  Returns ``(LossOutput, logp)`` with ``logp`` the ``(b, T)`` log-probs that carry the gradient.
    """
    v = get_variant(variant)
    sl = rows if rows is not None else slice(0, len(rollout))
    kind = str(v.loss_defaults.get("kind", "")) if v.objective == "dppo" else ""
    need_logits = bool(entropy_coef) or kind.startswith("topk")
    with autocast(model, precision):
        logp = rollout_logps(model, rollout, temperature, rows=sl, return_logits=need_logits)  # (b, T)
    logits = None
    if need_logits:
        logp, logits = logp  # (b, T), (b, T, V) tempered
    old = logp.detach() if old_logps is None else old_logps[sl]
    mask = loss_mask[sl]
    extra = {}
    if correction:
        extra = dict(correction, sampling_logp=correction["sampling_logp"][sl])
    if kind.startswith("topk"):
        if rollout.sampler_topk_ids is None:
            raise ValueError(f"variant {v.name!r} needs the sampler's top-K (generate_completions(record_topk=K))")
        with torch.no_grad():  # the trust region is a mask: no gradient through D
            extra["divergence"] = topk_divergence(
                rollout.sampler_topk_ids[sl], rollout.sampler_topk_logps[sl], logits.detach().float(),
                rollout.completion_ids[sl], kind[len("topk_"):], temperature=1.0,
                sampled_logp=rollout.sampling_logps[sl])  # (b, T)
    agg_kw = {"max_completion_length": max_completion_length, "num_items_in_batch": num_items_in_batch,
              "group_size": group_size, "prompt_weights": None if prompt_weights is None else prompt_weights[sl]}
    out = policy_loss(
        logp, old, advantages[sl], mask, variant=v, epsilon=epsilon, epsilon_high=epsilon_high,
        beta=beta, ref_logp=None if ref_logps is None else ref_logps[sl], **agg_kw, **extra,
    )
    if entropy_coef:
        h = token_entropy(logits)  # (b, T), with gradient
        term = aggregate(h, mask, v.aggregation, **agg_kw)
        out.loss = out.loss - entropy_coef * term
        m = mask.to(h.dtype)
        out.extras["entropy"] = float((h.detach() * m).sum() / m.sum().clamp(min=1.0))
        out.extras["entropy_term"] = float(term.detach())
    return out, logp


def autocast(model, precision: str):
    """bf16 autocast on the model's device for ``precision="bf16-mixed"``; a no-op context for ``"fp32"``."""
    device = next(model.parameters()).device.type
    return torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=precision == "bf16-mixed")


def mismatch_stats(sampling_logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    """The sampler/trainer gap of one batch: mean k3 and min/mean/max of the token ratio ``pi_old / mu``.

    ``sampling_logp`` (the sampler's ``log mu``), ``old_logp`` (the trainer's ``log pi_old``), ``mask``: ``(N, T)``.
    ``k3 = exp(d) - d - 1`` with ``d = log mu - log pi_old`` estimates KL(pi_old || mu) per token (notebook 11).
    """
    keep = mask > 0
    if not bool(keep.any()):
        return {}
    d = (sampling_logp.float() - old_logp.float())[keep]  # (n,) log mu - log pi_old over real tokens
    ratio = torch.exp(-d)  # (n,) pi_old / mu
    return {"mismatch_k3": float((torch.exp(d) - d - 1).mean()), "mismatch_ratio_min": float(ratio.min()),
            "mismatch_ratio_mean": float(ratio.mean()), "mismatch_ratio_max": float(ratio.max())}


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
        "reward_mean": _nanmean(torch.tensor(rewards)) if rewards else None,
        "completion_len": sum(lengths) / len(lengths),
        "n": len(correct),
    }


# ---------------------------------------------------------------------------------------------
# The trainer
# ---------------------------------------------------------------------------------------------


@dataclass
class Batch:
    """One step's training data: the rollout of the kept groups, their rewards and advantages, masks, log-probs."""

    rows: list[dict]  # P dataset rows
    rollout: Rollout  # N = P * G completions
    rewards: torch.Tensor  # (N,) the reward used for the advantages (incl. any overlong penalty); NaN: unscorable
    advantages: torch.Tensor | None  # (N,), filled in by Trainer.prepare
    loss_mask: torch.Tensor | None  # (N, T) completion mask, times the truncation mask under overlong filtering
    old_logps: torch.Tensor | None  # (N, T) when mu > 1
    ref_logps: torch.Tensor | None  # (N, T) when beta > 0
    stats: dict  # what sampling saw: all sampled completions' rewards, zero-std groups, rounds
    reward_matrix: torch.Tensor | None = None  # (N, K') each reward function's column, then the shaping columns

    @property
    def num_groups(self) -> int:
        return self.rollout.num_prompts


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
    weight: :meth:`Trainer.sync_sampler` copies them after each update (``copy_`` into the existing low-precision
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
        self.cfg = cfg = cfg.resolve()  # every None default is a number from here on
        self.conf = cfg.resolved()
        self.variant = get_variant(cfg.variant)
        self.beta = cfg.beta
        self._load_data(train_rows, eval_rows, reward_funcs, reward_weights, accuracy_fn)
        if model is None:
            from .models import resolve_model
            model, tokenizer = resolve_model(cfg.model, dtype=cfg.dtype, device=cfg.device)
        elif tokenizer is None:
            raise ValueError("a model was passed without its tokenizer")
        self.tokenizer = tokenizer
        self._check_prompt_lengths(model)
        torch.manual_seed(cfg.seed)  # LoRA initialisation and every sampled token follow from here
        self.model, self.ref_model = prepare_model(cfg, model)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        if not self.params:
            raise ValueError("the model has no trainable parameters")
        self.optimizer = make_optimizer(cfg, self.params)
        self.sampler, self._sampler_pairs = make_sampler(cfg, self.model)

        self.stream = PromptStream(len(self.train_rows), cfg.seed)
        v = self.variant
        topk_variant = v.objective == "dppo" and str(v.loss_defaults.get("kind", "")).startswith("topk")
        self.record_topk = cfg.topk if topk_variant else 0  # DPPO top-K: the sampler keeps its top-K per position
        self.entropy_reward = cfg.entropy_bonus if cfg.entropy_in == "reward" else 0.0
        self.entropy_coef = cfg.entropy_bonus if cfg.entropy_in == "loss" else 0.0
        # The reward matrix's columns: the reward functions, then the shaping terms as extra "reward functions"
        # (the overlong penalty with weight 1, the entropy bonus H_i with weight alpha).
        self.matrix_weights = list(self.reward_weights) + ([1.0] if cfg.overlong_cache_len else []) + (
            [float(self.entropy_reward)] if self.entropy_reward else [])
        self.step_count = 0
        self.history: list[dict] = []
        self.elapsed = 0.0  # training wall time of the whole run, across resumes (the CSV's `elapsed`)
        self.session_elapsed = 0.0  # this invocation's training time (no evaluation): what max_minutes limits
        self.initial_eval: dict | None = None
        self.out = Path(cfg.out)
        self.csv_path = self.out / METRICS_NAME
        self.checkpoint_path = self.out / CHECKPOINT_NAME
        self._started = False
        self._saved_step: int | None = None

    def _load_data(self, train_rows, eval_rows, reward_funcs, reward_weights, accuracy_fn) -> None:
        cfg, task = self.cfg, None
        if train_rows is None or reward_funcs is None or (eval_rows is None and cfg.eval_size):
            from .data import get_task
            task = get_task(cfg.task)
        self.train_rows = list(task.rows("train") if train_rows is None else train_rows)
        if not self.train_rows:
            raise ValueError("the training set is empty: there are no prompts to sample from")
        self.eval_rows = []
        if cfg.eval_size:
            rows = list(task.rows("test") if eval_rows is None else eval_rows)
            if not rows:
                raise ValueError("the evaluation set is empty; pass eval rows or set eval_size=0")
            self.eval_rows = rows[:cfg.eval_size]
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
        self.columns = records.BASE_COLUMNS[:3] + self.reward_columns + records.BASE_COLUMNS[3:]

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

    def _micro_batches(self, n: int) -> list[slice]:
        """Row slices of whole groups, about ``micro_batch_size`` rows each (at least one group)."""
        G = self.cfg.group_size
        step = max(1, self.cfg.micro_batch_size // G) * G
        return [slice(s, min(n, s + step)) for s in range(0, n, step)]

    @torch.no_grad()
    def _logps(self, model, ro: Rollout) -> torch.Tensor:
        with autocast(model, self.cfg.precision):  # pi_old / pi_ref in the training pass's own precision
            return torch.cat([rollout_logps(model, ro, self.cfg.temperature, rows=sl)
                              for sl in self._micro_batches(len(ro))])

    def _ref_logps(self, ro: Rollout) -> torch.Tensor:
        if self.cfg.lora:
            with self.model.disable_adapter():  # the base weights: pi_ref without a second copy
                return self._logps(self.model, ro)
        return self._logps(self.ref_model, ro)

    # ----- 1. sample and score
    def sample_round(self, num_prompts: int) -> tuple[list[dict], Rollout, torch.Tensor, dict[str, torch.Tensor],
                                                      torch.Tensor, torch.Tensor]:
        """Take the next ``num_prompts`` rows, sample ``G`` completions each and score them.

        Returns ``(rows, rollout, rewards (N,), per-function rewards, overlong penalty (N,), reward matrix (N, K'))``;
        the matrix holds the reward functions' columns, then the overlong penalty and the entropy ``H_i``
        (``entropy_in="reward"``) as extra columns, weighted by ``self.matrix_weights``; ``rewards`` is its
        weighted ``nansum`` (NaN for unscorable completions).
        """
        cfg = self.cfg
        indices = self.stream.take(num_prompts)
        rows = [self.train_rows[i] for i in indices]
        ro = generate_completions(self.sampler, self.tokenizer, [r["prompt"] for r in rows], cfg.group_size,
                                  max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature,
                                  compute_logps=False, batch_size=cfg.generation_batch_size,
                                  record_topk=self.record_topk)
        content = ro.lengths - ro.is_eos.long()  # (N,) tokens before the EOS
        if bool((content == 0).all()):
            raise RuntimeError(
                f"the model produced only empty completions (EOS as the first token) for all {len(ro)} samples of "
                f"step {self.step_count + 1}: there is nothing to score or learn from. Check the chat template, "
                "the EOS/pad tokens and the generation config of the model.")
        rewards, parts = score_completions(ro, rows, self.reward_funcs, self.reward_weights)
        penalty = torch.zeros_like(rewards)
        columns = list(parts.values())  # each (N,)
        if cfg.overlong_cache_len:
            penalty = soft_overlong_penalty(ro.lengths.float(), cfg.max_new_tokens, cfg.overlong_cache_len)
            columns.append(penalty)
        if self.entropy_reward:
            columns.append(completion_entropy(ro.sampling_entropy, ro.completion_mask))  # H_i, weight alpha
        R = torch.stack([c.to(rewards.device, rewards.dtype) for c in columns], dim=1)  # (N, K') on the rewards' device
        unscorable = torch.isnan(rewards)  # (N,) every reward function said None: shaping does not score it
        R[unscorable] = float("nan")
        w = torch.tensor(self.matrix_weights, dtype=R.dtype)
        total = torch.where(unscorable, rewards, (R * w).nansum(dim=1))  # (N,)
        self._retire_solved(indices, ro, rows, parts)
        return rows, ro, total, parts, penalty, R

    def _retire_solved(self, indices: list[int], ro: Rollout, rows: list[dict], parts: dict) -> None:
        """ScaleRL's no-positive-resampling: prompts whose group pass rate >= ``retire_solved_at`` leave the pool.

        Right = the accuracy function (the task's correctness reward) gives >= 1.  Retired prompts are never
        sampled again (:meth:`records.PromptStream.retire`; the set is saved in checkpoints).
        """
        if self.cfg.retire_solved_at is None:
            return
        i = next((k for k, f in enumerate(self.reward_funcs) if f is self.accuracy_fn), None)
        if i is not None:
            correct = list(parts.values())[i]
        else:
            correct = next(iter(score_completions(ro, rows, [self.accuracy_fn])[1].values()))
        solved = solved_groups(correct, self.cfg.group_size, self.cfg.retire_solved_at)  # (P,)
        self.stream.retire([idx for idx, s in zip(indices, solved.tolist()) if s])

    def sample(self) -> Batch:
        """``prompts_per_step`` scored groups (with dynamic sampling: informative ones); no advantages yet."""
        cfg, G = self.cfg, self.cfg.group_size
        kept_rows, kept_ro, kept_r, kept_R = [], [], [], []
        seen_r, seen_parts, seen_pen, seen_ro = [], [], [], []
        rounds, zero_std, groups_seen = 0, 0, 0
        while True:
            need = cfg.prompts_per_step - sum(len(r) for r in kept_rows)
            rows, ro, r, parts, pen, R = self.sample_round(need)
            # (need,) bool; GDPO normalises each reward function apart: a group is informative if any column varies
            informative = informative_groups(R if self.variant.advantage_scale == "decoupled" else r, G)
            zero_std += int((~informative).sum())
            groups_seen += len(rows)
            seen_r.append(r), seen_parts.append(parts), seen_pen.append(pen), seen_ro.append(ro)
            keep = [g for g in range(len(rows)) if bool(informative[g])] if cfg.dynamic_sampling else list(range(len(rows)))
            if keep:
                kept_rows.append([rows[g] for g in keep])
                kept_ro.append(ro.select_groups(keep))
                kept_r.append(r.view(-1, G)[keep].reshape(-1))
                kept_R.append(R.view(-1, G, R.shape[1])[keep].reshape(-1, R.shape[1]))
            full = sum(len(x) for x in kept_rows) == cfg.prompts_per_step
            if full or not cfg.dynamic_sampling or rounds >= cfg.max_resample_rounds:
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
            "entropy": torch.cat([completion_entropy(x.sampling_entropy, x.completion_mask).cpu() for x in seen_ro]),
            "frac_zero_std_groups": zero_std / groups_seen,
            "resample_rounds": rounds,
            "completions_sampled": int(all_r.numel()),
        }
        rows = [r for part in kept_rows for r in part]
        if not rows:  # dynamic sampling found no informative group within its bound
            return Batch(rows=[], rollout=seen_ro[0].select_groups([]), rewards=torch.zeros(0),
                         advantages=torch.zeros(0), loss_mask=torch.zeros(0, 0), old_logps=None, ref_logps=None,
                         stats=stats)
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else seen_ro[0].meta["pad_token_id"]
        return Batch(rows=rows, rollout=concat_rollouts(kept_ro, pad), rewards=torch.cat(kept_r),
                     advantages=None, loss_mask=None, old_logps=None, ref_logps=None, stats=stats,
                     reward_matrix=torch.cat(kept_R))

    # ----- 2. advantages, masks and the fixed log-probs
    def prepare(self, batch: Batch) -> Batch:
        """Fill in the advantages ``(N,)``, the loss mask ``(N, T)``, ``pi_old`` (mu > 1) and ``pi_ref`` (beta > 0)."""
        if not batch.rows:
            return batch
        ro = batch.rollout
        batch.advantages = variant_advantages(batch.reward_matrix, self.cfg.group_size, self.variant,
                                              self.matrix_weights, allow_unscored=True)  # (N,)
        mask = ro.completion_mask.float()  # (N, T)
        if self.cfg.mask_truncated_completions:
            mask = mask * truncation_mask(ro.truncated).unsqueeze(1)  # DAPO overlong filtering
        batch.loss_mask = mask
        if self.cfg.mu > 1:  # pi_old is needed explicitly only when the batch is reused
            batch.old_logps = self._logps(self.model, ro)
        if self.beta > 0:
            batch.ref_logps = self._ref_logps(ro)
        return batch

    def sample_batch(self) -> Batch:
        """One step's training batch: :meth:`sample` then :meth:`prepare`."""
        return self.prepare(self.sample())

    # ----- 3. the update
    def update(self, batch: Batch) -> dict:
        """``mu`` AdamW steps on one batch; returns the loss diagnostics (means over the ``mu`` steps)."""
        cfg, v = self.cfg, self.variant
        N = len(batch.rewards)
        if N == 0:
            return {"loss": None, "policy_loss": None, "kl": None, "clip_frac": None, "clip_frac_low": None,
                    "clip_frac_high": None, "ratio_mean": None, "grad_norm": None, "groups_trained": 0}
        token_mean = v.aggregation == "token_mean"
        # ScaleRL's prompt_mean: each row's weight 1 / (P n_g) from the whole batch, so micro-batches add up exactly
        pw = prompt_weights(batch.loss_mask, cfg.group_size) if v.aggregation == "prompt_mean" else None
        total_tokens = float(batch.loss_mask.sum())
        acc = {k: 0.0 for k in ("loss", "policy_loss", "kl", "ratio_mean", "clip_low", "clip_high", "grad_norm",
                                "truncated", "masked", "opm", "time_forward", "time_backward", "time_optimizer",
                                "entropy_term")}
        has_clip = has_kl = False
        seen_diag: set[str] = set()
        slp = batch.rollout.sampling_logps  # (N, T) the sampler's log-probs, or None
        correction = None
        if cfg.corrects_rollouts:
            correction = {"sampling_logp": slp, "rollout_correction": cfg.rollout_correction,
                          "rollout_clip_max": cfg.rollout_clip_max, "rollout_clip_min": cfg.rollout_clip_min,
                          "off_policy_mask_threshold": cfg.off_policy_mask_threshold}
        elif v.objective == "dppo" and cfg.sampler_dtype is not None:
            correction = {"sampling_logp": slp}  # DPPO's anchor mu: the sampler copy's log-probs
        old_seen = []  # the first pass's pi_old per micro-batch, for the mismatch columns
        for it in range(cfg.mu):
            self.optimizer.zero_grad(set_to_none=True)
            for sl in self._micro_batches(N):
                t0 = time.perf_counter()
                out, logp = batch_loss(
                    self.model, batch.rollout, batch.advantages, batch.loss_mask, variant=v,
                    temperature=cfg.temperature, beta=self.beta, old_logps=batch.old_logps,
                    ref_logps=batch.ref_logps, epsilon=cfg.epsilon, epsilon_high=cfg.epsilon_high,
                    max_completion_length=cfg.max_new_tokens,
                    num_items_in_batch=max(total_tokens, 1.0) if token_mean else None, rows=sl,
                    precision=cfg.precision, correction=correction, group_size=cfg.group_size,
                    prompt_weights=pw, entropy_coef=self.entropy_coef)
                if it == 0:
                    old_seen.append(logp.detach() if batch.old_logps is None else batch.old_logps[sl])
                # Micro-batches add up to the full batch's loss exactly: token-mean (and prompt-mean) variants
                # already divide by the whole batch's normaliser; the others average over sequences: weight b / N.
                weight = 1.0 if token_mean or pw is not None else (sl.stop - sl.start) / N
                t1 = time.perf_counter()
                (out.loss * weight).backward()
                acc["time_forward"] += t1 - t0
                acc["time_backward"] += time.perf_counter() - t1
                tok_share = float(batch.loss_mask[sl].sum()) / max(total_tokens, 1.0)
                seq_share = (sl.stop - sl.start) / N
                # shares policy_loss's rollout correction reports (token modes: of tokens; sequence modes and the
                # off-policy mask: of sequences), weighted into means over the whole batch
                share = tok_share if (cfg.rollout_correction or "").startswith("token") else seq_share
                for key, attr, w in (("truncated", "is_truncated_frac", share), ("masked", "is_masked_frac", share),
                                     ("opm", "off_policy_masked_frac", seq_share)):
                    val = getattr(out, attr, None)
                    if val is not None:
                        seen_diag.add(key)
                        acc[key] += float(val) * w
                acc["loss"] += float(out.loss.detach()) * weight
                acc["policy_loss"] += float(out.policy_loss) * weight
                if out.kl is not None:
                    has_kl = True
                    acc["kl"] += float(out.kl) * weight
                acc["ratio_mean"] += out.ratio_mean * tok_share
                acc["entropy_term"] += out.extras.get("entropy_term", 0.0) * weight
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
            t0 = time.perf_counter()
            self.optimizer.step()
            self.sync_sampler()
            acc["time_optimizer"] += time.perf_counter() - t0
        self.optimizer.zero_grad(set_to_none=True)
        mu = cfg.mu
        mismatch = {} if slp is None else mismatch_stats(slp, torch.cat(old_seen), batch.loss_mask)
        return {
            **mismatch,
            "correction_truncated_frac": acc["truncated"] / mu if "truncated" in seen_diag else None,
            "correction_masked_frac": acc["masked"] / mu if "masked" in seen_diag else None,
            "off_policy_masked_frac": acc["opm"] / mu if "opm" in seen_diag else None,
            "time_forward": acc["time_forward"], "time_backward": acc["time_backward"],
            "time_optimizer": acc["time_optimizer"],
            "loss": acc["loss"] / mu, "policy_loss": acc["policy_loss"] / mu,
            "kl": acc["kl"] / mu if has_kl else None,
            "clip_frac": (acc["clip_low"] + acc["clip_high"]) / mu if has_clip else None,
            "clip_frac_low": acc["clip_low"] / mu if has_clip else None,
            "clip_frac_high": acc["clip_high"] / mu if has_clip else None,
            "ratio_mean": acc["ratio_mean"] / mu, "grad_norm": acc["grad_norm"] / mu,
            "groups_trained": batch.num_groups,
            **({"entropy_bonus": self.entropy_coef * acc["entropy_term"] / mu} if self.entropy_coef else {}),
        }

    @torch.no_grad()
    def sync_sampler(self) -> None:
        """Copy the updated weights into the low-precision sampler (in place; nothing when the model samples)."""
        for dst, src in self._sampler_pairs:
            dst.copy_(src)

    # ----- 4. evaluation
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
        """Sample, score, advantages, update, (evaluate), log one row to the CSV, (checkpoint).  Returns the row."""
        self._start()
        t0 = time.perf_counter()
        batch = self.sample()          # G completions for each of P prompts, and their rewards
        t_sample = time.perf_counter() - t0
        batch = self.prepare(batch)    # advantages, loss mask, pi_old / pi_ref log-probs
        m = self.update(batch)         # mu optimiser steps on policy_loss
        self.step_count += 1
        row = {"step": self.step_count, **self._sample_fields(batch.stats), **m, "time_sample": t_sample}
        t_train = time.perf_counter() - t0
        if self._eval_due(self.step_count) or self._time_up(t_train):
            row.update(self._eval_fields(self.evaluate()))
        row["seconds"] = time.perf_counter() - t0  # the whole step, evaluation included
        row["time_eval"] = row["seconds"] - t_train if row.get("accuracy") is not None else 0.0
        self.elapsed += row["seconds"]
        self.session_elapsed += t_train  # the budget counts training only; evaluation is timed apart
        row["elapsed"] = self.elapsed
        row = {c: row.get(c) for c in self.columns}
        self.history.append(row)
        records.append_csv(self.csv_path, self.columns, row)
        every = self.cfg.checkpoint_every
        if self.step_count == self.cfg.steps or (every and self.step_count % every == 0) or self._time_up():
            self.save_checkpoint()
        return row

    def _sample_fields(self, st: dict) -> dict:
        r = st["rewards"]
        scored = r[~torch.isnan(r)]  # unscorable completions (NaN) are left out
        return {
            "reward_mean": float(scored.mean()) if scored.numel() else None,
            "reward_std": float(scored.std()) if scored.numel() > 1 else 0.0,
            **{c: _nanmean(st["reward_parts"][n]) for c, n in zip(self.reward_columns, st["reward_parts"])},
            "completion_len": float(st["lengths"].mean()),
            "truncated_frac": float(st["truncated"].mean()),
            "empty_frac": float(st["empty"].mean()),
            "overlong_penalty": float(st["overlong_penalty"].mean()) if self.cfg.overlong_cache_len else None,
            "frac_zero_std_groups": st["frac_zero_std_groups"],
            "resample_rounds": st["resample_rounds"],
            "completions_sampled": st["completions_sampled"],
            "entropy": float(st["entropy"].mean()),
            **({"entropy_bonus": self.entropy_reward * float(st["entropy"].mean())} if self.entropy_reward else {}),
            **({"retired": len(self.stream.retired), "pool_size": self.stream.pool_size}
               if self.cfg.retire_solved_at is not None else {}),
        }

    def _time_up(self, running: float = 0.0) -> bool:
        """True once ``max_minutes`` of this invocation's training time (sampling, scoring, updates; not evaluation)
        have been used.  A resume starts a new budget."""
        limit = self.cfg.max_minutes
        return limit is not None and self.session_elapsed + running >= 60.0 * limit

    # ----- checkpoints (records.py)
    def save_checkpoint(self, path=None) -> Path:
        """Write weights, optimizer, RNG states, step, data cursor and history (:func:`records.save_checkpoint`)."""
        path = Path(path) if path is not None else self.checkpoint_path
        records.save_checkpoint(self, path)
        if path == self.checkpoint_path:
            self._saved_step = self.step_count
        return path

    def load_checkpoint(self, path=None) -> int:
        """Restore a checkpoint written by :meth:`save_checkpoint`; returns its step."""
        path = Path(path) if path is not None else self.checkpoint_path
        step = records.load_checkpoint(self, path)
        self.sync_sampler()
        if path == self.checkpoint_path:
            self._saved_step = step
        return step

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
            records.write_csv(self.csv_path, self.columns, self.history)
        else:
            records.write_csv(self.csv_path, self.columns, [])
        (self.out / CONFIG_NAME).write_text(json.dumps(self.conf, indent=1, default=str) + "\n")
        if not resumed and self._eval_due(0):
            ev = self.evaluate()
            self.initial_eval = dict(ev, step=0)
            row = {c: None for c in self.columns}
            row.update(step=0, **self._eval_fields(ev))
            self.history.append(row)
            records.append_csv(self.csv_path, self.columns, row)

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
