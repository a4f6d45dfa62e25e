"""The GRPO loop: sample -> score -> advantages -> update, on top of :func:`grpo_lessons.policy_loss`.

Introduced in ``notebooks/05_grpo_end_to_end.ipynb``; ``grpo-lessons train`` (:mod:`grpo_lessons.training.cli`)
is a command line around :func:`train`.

    from grpo_lessons.training.trainer import TrainConfig, train
    result = train(TrainConfig(model="smollm2", task="arithmetic", steps=30, out="runs/arith"))
    result.history[-1]["accuracy"], result.csv_path

One step (:meth:`Trainer.step`), each line a named call into the pipeline's modules::

    rows     = next P prompts of the training set (a seeded permutation per epoch)   records.PromptStream
    rollout  = G completions per prompt, sampled at `temperature`                   rollout.generate_completions
    R        = [reward_fn_k(completions, **columns)]_k, (N, K); NaN where None     scoring.score_completions
             (+ DAPO's soft overlong penalty when overlong_cache_len is set)        scoring.reward_matrix
             (+ alpha * H_i, entropy_in="reward": H_i the sampler's mean token entropy) shaping.completion_entropy
    rewards  = nansum_k w_k R_ik (NaN where every reward function said None: unscorable)
    [retire_solved_at: prompts whose pass rate reaches it leave the pool for good]   shaping.solved_groups
    [dynamic sampling: drop groups whose rewards are all equal, sample new prompts, at most
     max_resample_rounds extra rounds]                                              shaping.informative_groups
    A        = the variant's advantages of R (GRPO z-score, Dr. GRPO, ScaleRL's batch std,
               GDPO per-reward, GOPO ranks); unscorable completions get 0            variants.variant_advantages
    mask     = completion mask (x truncation mask under overlong filtering)         shaping.truncation_mask
    old_logp = log-probs before the update (only needed when mu > 1; otherwise logp.detach())
    ref_logp = log-probs under the reference model (only when beta > 0)
    repeat mu times: loss = policy_loss(logp, old_logp, A, mask, variant, beta, ref_logp)   losses.policy_loss
                     (DPPO top-K: divergence over the sampler's top-K ids              divergence.topk_divergence
                      entropy_in="loss": - alpha * aggregated token entropy)          shaping.token_entropy
                     backward (micro-batches), clip the gradient norm, AdamW step

Speed (``TrainConfig``): ``precision="bf16-mixed"`` runs the training forward/backward on a bf16 copy of the
weights (``train_model``) whose gradients are added into the fp32 weights, which the optimiser steps (fp32 master
weights; fp32 log-softmax and loss); ``sampler_dtype="bfloat16"`` samples with a bf16 copy of the weights (that
same copy under bf16-mixed), resynced in place after every update with dithered rounding (``copy_rounding``: with
round-to-nearest a bf16 copy lags updates far below its spacing, train_setup.LowPrecisionSync), and keeps that
sampler's own log-probs (``sampling_logps``) beside the trainer's ``pi_old``: every row logs the gap
(``mismatch_k3``, ``mismatch_ratio_min/mean/max`` of ``pi_old / mu``), and ``rollout_correction`` /
``off_policy_mask_threshold`` hand it to :func:`policy_loss` (notebook 11).  The optimiser is fused AdamW; the
sampler draws by inverse CDF (rollout.InverseCDFSampler); attention on a CPU is plain-matmul grouped-query
attention where that is exact (``attn_implementation="auto"``, grpo_lessons.training.attention); glibc can keep
freed memory for reuse (``reuse_freed_memory``: process-wide, so off unless asked for; the CLI asks).

The configuration lives in :mod:`grpo_lessons.training.train_config`; building the model, reference, sampler and
optimiser in :mod:`grpo_lessons.training.train_setup`; rewards, the reward matrix and evaluation in
:mod:`grpo_lessons.training.scoring`; :func:`batch_loss` (the loss of one micro-batch) and the update's bookkeeping
(micro-batches, precision, rollout-correction settings, loss diagnostics) in :mod:`grpo_lessons.training.update`; the run
records (metrics CSV, checkpoints, resume, the time budget: :class:`records.RunRecords`, which :class:`Trainer`
extends) in :mod:`grpo_lessons.training.records`.  This file is the loop: :meth:`Trainer.step` and the short methods it
calls.  It corresponds to TRL's ``GRPOTrainer`` with
``num_generations = G``, ``num_iterations = mu``, ``steps_per_generation = 1``,
``max_completion_length = max_new_tokens``, ``top_k = 0``, ``top_p = 1``; see
:attr:`grpo_lessons.core.variants.Variant.trl` for the loss settings of each variant.  The model stays in
eval mode (dropout off) so the policy that samples is exactly the policy that is scored.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from . import records
from grpo_lessons.core.variants import variant_advantages
from grpo_lessons.core.kl import kl_estimate
from grpo_lessons.core.correction import CORRECTION_MODES
from grpo_lessons.core.losses import policy_loss
from .records import CHECKPOINT_NAME, METRICS_NAME, PromptStream, TrainResult, load_history
from .rollout import Rollout, concat_rollouts, generate_completions, rollout_logps
from .scoring import (correct_flags, eval_fields, evaluate, matrix_weights, reward_matrix, reward_names, sample_fields,
                      sampling_stats, score_completions, solved_prompts)
from grpo_lessons.core.shaping import informative_groups, truncation_mask
from .train_config import TrainConfig
from .train_setup import (check_prompt_lengths, load_data, load_model, make_compute_model, make_optimizer,
                          make_reference, make_sampler, prepare_model, record_topk, reuse_freed_memory, set_attention,
                          LowPrecisionSync)
from .update import (EMPTY_UPDATE, LossTally, autocast, batch_loss, correction_settings, micro_batches,
                     mismatch_stats)
from grpo_lessons.core.variants import get_variant

__all__ = [
    "TrainConfig", "TrainResult", "Trainer", "Batch", "train", "score_completions", "batch_loss",
    "evaluate", "PromptStream", "load_history", "CHECKPOINT_NAME", "METRICS_NAME",
    # re-exported from the modules the loop calls (train_setup, scoring, update)
    "prepare_model", "make_reference", "make_optimizer", "make_sampler", "reward_names", "autocast", "mismatch_stats",
]


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
    policy_logps: torch.Tensor | None = None  # (N, T) pi_theta before the update (the update's first pass)

    @property
    def num_groups(self) -> int:
        return self.rollout.num_prompts


class Trainer(records.RunRecords):
    """The GRPO loop, in pieces: :meth:`sample`, :meth:`prepare`, :meth:`update`, :meth:`evaluate`, :meth:`step`,
    :meth:`run`.

    ``model``/``tokenizer`` (else loaded from ``cfg.model``), ``train_rows``/``eval_rows`` (else the task's
    train/test splits), ``reward_funcs``/``reward_weights`` (else the task's) and ``accuracy_fn`` (else the
    first reward function) may be passed in, and ``initial_eval`` (what :meth:`evaluate` returns for the starting
    weights, when it is already known: :func:`records.check_initial_eval`).  Everything that can be checked before the first step is
    checked here (:mod:`grpo_lessons.training.train_setup`), so a bad setting fails before any file is written.
    Checkpoints, resume and the CSV rows come from :class:`records.RunRecords`.
    """

    def __init__(self, cfg: TrainConfig, *, model=None, tokenizer=None, train_rows: Sequence[dict] | None = None,
                 eval_rows: Sequence[dict] | None = None, reward_funcs: Sequence[Callable] | None = None,
                 reward_weights: Sequence[float] | None = None, accuracy_fn: Callable | None = None,
                 initial_eval: dict | None = None) -> None:
        cfg.validate()
        self.cfg = cfg = cfg.resolve()  # every None default is a number from here on
        self.conf = cfg.resolved()
        self.variant = get_variant(cfg.variant)
        self.beta = cfg.beta
        data = load_data(cfg, train_rows, eval_rows, reward_funcs, reward_weights, accuracy_fn)
        self.train_rows, self.eval_rows = data.train_rows, data.eval_rows
        self.reward_funcs, self.reward_weights = data.reward_funcs, data.reward_weights
        self.accuracy_fn = data.accuracy_fn
        self.reward_columns = data.reward_columns  # reward_<name> per reward function
        self.columns = records.BASE_COLUMNS[:3] + self.reward_columns + records.BASE_COLUMNS[3:]
        model, self.tokenizer = load_model(cfg, model, tokenizer)  # cfg.model unless one is passed in
        check_prompt_lengths(self.tokenizer, model, {"training": self.train_rows, "evaluation": self.eval_rows},
                             cfg.max_new_tokens)
        if cfg.reuse_freed_memory and torch.device(cfg.device).type == "cpu":
            reuse_freed_memory()  # glibc: reuse freed blocks instead of faulting fresh pages in every step
        torch.manual_seed(cfg.seed)  # LoRA initialisation and every sampled token follow from here
        set_attention(cfg, model)  # "auto": gqa attention on a CPU (every copy below inherits it)
        self.model = prepare_model(cfg, model)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        if not self.params:
            raise ValueError("the model has no trainable parameters")
        self.optimizer = make_optimizer(cfg, self.params)  # on the fp32 weights (the master weights of bf16-mixed)
        # bf16-mixed: forward/backward run on a bf16 copy; its gradients go into the fp32 weights (collect_grads)
        self.train_model, self._compute_pairs = make_compute_model(cfg, self.model)
        self.sampler, self._sampler_pairs = make_sampler(cfg, self.model, compute=self.train_model)
        # after each update: fp32 weights -> the copies, rounded against a fixed random threshold per weight
        self._sync = LowPrecisionSync([*self._compute_pairs, *self._sampler_pairs], cfg.copy_rounding, cfg.seed)
        self.sync_sampler()  # the copies start rounded the way every later sync rounds them
        # pi_ref: a frozen copy of the training forward's model as it is now, so KL = 0 exactly before the first update
        self.ref_model = make_reference(cfg, self.train_model)
        self.stream = PromptStream(len(self.train_rows), cfg.seed)
        self.record_topk = record_topk(cfg, self.variant)  # DPPO top-K: the sampler keeps its top-K per position
        self.entropy_reward = cfg.entropy_bonus if cfg.entropy_in == "reward" else 0.0
        self.entropy_coef = cfg.entropy_bonus if cfg.entropy_in == "loss" else 0.0
        # The reward matrix's columns: the reward functions, then the shaping terms as extra "reward functions"
        self.matrix_weights = matrix_weights(self.reward_weights, cfg.overlong_cache_len, self.entropy_reward)
        self.start_model = self._frozen_start() if cfg.kl_start_every else None  # kl_start's pi_start
        self._init_records(Path(cfg.out), records.check_initial_eval(initial_eval, len(self.eval_rows)))

    @torch.no_grad()
    def _logps(self, model, ro: Rollout) -> torch.Tensor:
        with autocast(model, self.cfg.precision):  # pi_old / pi_ref in the training pass's own precision
            return torch.cat([rollout_logps(model, ro, self.cfg.temperature, rows=sl)
                              for sl in micro_batches(len(ro), self.cfg.group_size, self.cfg.micro_batch_size)])

    def _frozen_start(self):
        """The start weights for ``kl_start``: a frozen copy of the model the training pass runs on, as it is now
        (after the first sync), so ``kl_start`` is exactly 0 before the first update.  LoRA: None (the adapter-free
        base is the start); ``beta > 0``: the reference model, which is that same copy (make_reference)."""
        if self.cfg.lora:
            return None
        if self.ref_model is not None:
            return self.ref_model
        start = copy.deepcopy(self.train_model).eval()
        for p in start.parameters():
            p.requires_grad_(False)
        return start

    def kl_to_start(self, batch: Batch) -> float | None:
        """Mean over the batch's completion tokens of k3, the estimate of KL(pi_theta || pi_start) per token (Schulman
        2020; :func:`grpo_lessons.core.kl.kl_estimate`), ``pi_theta`` the policy before this step's update
        (``batch.policy_logps`` (N, T)), ``pi_start`` the weights training started from.  ``beta > 0`` puts the same
        quantity in the loss (TRL's ``beta`` term); this logs it whatever ``beta`` is."""
        if batch.policy_logps is None or not batch.rows:
            return None
        ro = batch.rollout
        if self.cfg.lora:
            start_lp = self._ref_logps(ro)  # the adapter switched off: the base weights
        else:
            start_lp = self._logps(self.start_model, ro)  # (N, T)
        k3 = kl_estimate(batch.policy_logps.float(), start_lp.float(), "k3")  # (N, T)
        m = ro.completion_mask.to(k3.dtype)  # (N, T)
        return float((k3 * m).sum() / m.sum().clamp(min=1.0))

    def _ref_logps(self, ro: Rollout) -> torch.Tensor:
        if self.cfg.lora:
            with self.train_model.disable_adapter():  # the base weights: pi_ref without a second copy
                return self._logps(self.train_model, ro)
        return self._logps(self.ref_model, ro)

    # ----- 1. sample
    def generate(self, rows: list[dict]) -> Rollout:
        """``G`` completions per row's prompt, sampled at ``temperature`` by the sampler (the model or its copy)."""
        cfg = self.cfg
        ro = generate_completions(self.sampler, self.tokenizer, [r["prompt"] for r in rows], cfg.group_size,
                                  max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature,
                                  compute_logps=False, batch_size=cfg.generation_batch_size,
                                  record_topk=self.record_topk)
        if bool(((ro.lengths - ro.is_eos.long()) == 0).all()):  # no tokens before the EOS, anywhere
            raise RuntimeError(
                f"the model produced only empty completions (EOS as the first token) for all {len(ro)} samples of "
                f"step {self.step_count + 1}: there is nothing to score or learn from. Check the chat template, "
                "the EOS/pad tokens and the generation config of the model.")
        return ro

    # ----- 2. score
    def score(self, ro: Rollout, rows: list[dict]) -> tuple[torch.Tensor, dict, torch.Tensor, torch.Tensor]:
        """``(rewards (N,), per-function rewards, overlong penalty (N,), reward matrix (N, K'))`` of a rollout:
        :func:`score_completions`, then the shaping columns (:func:`grpo_lessons.training.scoring.reward_matrix`)."""
        rewards, parts = score_completions(ro, rows, self.reward_funcs, self.reward_weights)
        total, penalty, R = reward_matrix(ro, rewards, parts, self.matrix_weights,
                                          max_new_tokens=self.cfg.max_new_tokens,
                                          overlong_cache_len=self.cfg.overlong_cache_len,
                                          entropy_reward=self.entropy_reward)
        return total, parts, penalty, R

    def sample_round(self, num_prompts: int) -> tuple[list[dict], Rollout, torch.Tensor, dict[str, torch.Tensor],
                                                      torch.Tensor, torch.Tensor, torch.Tensor]:
        """Take the next ``num_prompts`` rows, sample ``G`` completions each and score them.

        Returns ``(rows, rollout, rewards (N,), per-function rewards, overlong penalty (N,), reward matrix (N, K'),
        right (N,) bool)``; ``rewards`` is the matrix's weighted ``nansum`` (NaN for unscorable completions), ``right``
        which completions the task's accuracy function judges right (:func:`~grpo_lessons.training.scoring.correct_flags`).
        """
        indices = self.stream.take(num_prompts)
        rows = [self.train_rows[i] for i in indices]
        ro = self.generate(rows)
        total, parts, penalty, R = self.score(ro, rows)
        right = correct_flags(ro, rows, parts, self.reward_funcs, self.accuracy_fn)  # (N,) bool
        self._retire_solved(indices, ro, rows, parts, right)
        return rows, ro, total, parts, penalty, R, right

    def _retire_solved(self, indices: list[int], ro: Rollout, rows: list[dict], parts: dict,
                       correct: torch.Tensor | None = None) -> None:
        """ScaleRL's no-positive-resampling: prompts whose group pass rate >= ``retire_solved_at`` leave the pool
        for good (:func:`grpo_lessons.training.scoring.solved_prompts`; the retired set is saved in checkpoints)."""
        if self.cfg.retire_solved_at is not None:
            self.stream.retire(solved_prompts(indices, ro, rows, parts, self.reward_funcs, self.accuracy_fn,
                                              self.cfg.group_size, self.cfg.retire_solved_at, correct))

    def sample(self) -> Batch:
        """``prompts_per_step`` scored groups (with dynamic sampling: informative ones); no advantages yet."""
        cfg, G = self.cfg, self.cfg.group_size
        kept_rows, kept_ro, kept_r, kept_R, seen, correct = [], [], [], [], [], []
        rounds, zero_std, groups_seen = 0, 0, 0
        room = self.completions_left()  # max_completions: what this step may still sample (None: no budget)
        while True:
            need = cfg.prompts_per_step - sum(len(r) for r in kept_rows)
            if rounds and room is not None:  # a refill round draws only what the sample budget has left
                need = min(need, room // G)
            rows, ro, r, parts, pen, R, right = self.sample_round(need)
            if room is not None:
                room -= len(r)
            # (need,) bool; GDPO normalises each reward function apart: a group is informative if any column varies
            informative = informative_groups(R if self.variant.scale_piece.per_reward else r, G)
            zero_std += int((~informative).sum())
            groups_seen += len(rows)
            seen.append((ro, r, parts, pen))
            correct.append(right)
            keep = [g for g in range(len(rows)) if bool(informative[g])] if cfg.dynamic_sampling else list(range(len(rows)))
            if keep:
                kept_rows.append([rows[g] for g in keep])
                kept_ro.append(ro.select_groups(keep))
                kept_r.append(r.view(-1, G)[keep].reshape(-1))
                kept_R.append(R.view(-1, G, R.shape[1])[keep].reshape(-1, R.shape[1]))
            full = sum(len(x) for x in kept_rows) == cfg.prompts_per_step
            if full or not cfg.dynamic_sampling or rounds >= cfg.max_resample_rounds:
                break
            if room is not None and room // G < 1:
                break  # the sample budget is spent: train on the informative groups found so far
            rounds += 1  # DAPO: drop the all-equal groups and refill from the next prompts
        stats = sampling_stats(seen, zero_std, groups_seen, rounds, correct)
        rows = [r for part in kept_rows for r in part]
        if not rows:  # dynamic sampling found no informative group within its bound
            return Batch(rows=[], rollout=seen[0][0].select_groups([]), rewards=torch.zeros(0),
                         advantages=torch.zeros(0), loss_mask=torch.zeros(0, 0), old_logps=None, ref_logps=None,
                         stats=stats)
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else seen[0][0].meta["pad_token_id"]
        return Batch(rows=rows, rollout=concat_rollouts(kept_ro, pad), rewards=torch.cat(kept_r),
                     advantages=None, loss_mask=None, old_logps=None, ref_logps=None, stats=stats,
                     reward_matrix=torch.cat(kept_R))

    # ----- 3. advantages, masks and the fixed log-probs
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
            batch.old_logps = self._logps(self.train_model, ro)  # the model the update's forward runs on
        if self.beta > 0:
            batch.ref_logps = self._ref_logps(ro)
        return batch

    def sample_batch(self) -> Batch:
        """One step's training batch: :meth:`sample` then :meth:`prepare`."""
        return self.prepare(self.sample())

    # ----- 4. the update
    def update(self, batch: Batch) -> dict:
        """``mu`` AdamW steps on one batch; returns the loss diagnostics (means over the ``mu`` steps).

        A batch with no groups or no unmasked token takes no step at all (``update_skipped = 1``; weights, optimiser
        state and step count untouched): the loss of a batch whose tokens are all masked is 0 by definition (logged
        as such, with its KL term), but AdamW would still move every weight (weight decay, earlier steps' moments)."""
        cfg, v, N = self.cfg, self.variant, len(batch.rewards)
        if N == 0:
            return dict(EMPTY_UPDATE)
        if not bool((batch.loss_mask > 0).any()):  # e.g. every completion truncated under overlong filtering
            return {**EMPTY_UPDATE, "loss": 0.0, "policy_loss": 0.0, "kl": 0.0 if self.beta > 0 else None}
        token_mean = v.aggregation_piece.token_count  # normalised by the whole batch's token count
        # ScaleRL's prompt_mean: each row's weight 1 / (P n_g) from the whole batch, so micro-batches add up exactly
        batch_weights = v.aggregation_piece.batch_weights
        pw = batch_weights(batch.loss_mask, cfg.group_size) if batch_weights is not None else None
        total_tokens = float(batch.loss_mask.sum())
        slp = batch.rollout.sampling_logps  # (N, T) the sampler's log-probs, or None
        correction = correction_settings(cfg, v, slp)
        token_modes = (cfg.rollout_correction is not None
                       and not CORRECTION_MODES.lookup(cfg.rollout_correction, "rollout_correction").sequence)
        tally = LossTally(cfg.mu, token_modes=token_modes)
        old_seen = []  # the first pass's pi_old per micro-batch, for the mismatch columns
        for it in range(cfg.mu):
            self.optimizer.zero_grad(set_to_none=True)
            for sl in micro_batches(N, cfg.group_size, cfg.micro_batch_size):
                t0 = time.perf_counter()
                out, logp = batch_loss(
                    self.train_model, batch.rollout, batch.advantages, batch.loss_mask, variant=v,
                    temperature=cfg.temperature, beta=self.beta, old_logps=batch.old_logps,
                    ref_logps=batch.ref_logps, epsilon=cfg.epsilon, epsilon_high=cfg.epsilon_high,
                    max_completion_length=cfg.max_new_tokens,
                    num_items_in_batch=max(total_tokens, 1.0) if token_mean else None, rows=sl,
                    precision=cfg.precision, correction=correction, group_size=cfg.group_size,
                    prompt_weights=pw, entropy_coef=self.entropy_coef, loss_fn=policy_loss)  # this module's policy_loss
                if it == 0:
                    old_seen.append(logp.detach() if batch.old_logps is None else batch.old_logps[sl])
                # Micro-batches add up to the full batch's loss exactly: token-mean (and prompt-mean) variants
                # already divide by the whole batch's normaliser; the others average over sequences: weight b / N.
                weight = 1.0 if token_mean or pw is not None else (sl.stop - sl.start) / N
                t1 = time.perf_counter()
                (out.loss * weight).backward()
                self.collect_grads()
                tally.acc["time_forward"] += t1 - t0
                tally.acc["time_backward"] += time.perf_counter() - t1
                tally.add(out, weight, tok_share=float(batch.loss_mask[sl].sum()) / max(total_tokens, 1.0),
                          seq_share=(sl.stop - sl.start) / N)
            self._optimizer_step(tally)
        self.optimizer.zero_grad(set_to_none=True)
        batch.policy_logps = torch.cat(old_seen)  # (N, T) pi_theta before the update
        mismatch = {} if slp is None else mismatch_stats(slp, batch.policy_logps, batch.loss_mask)
        return tally.metrics(mismatch, batch.num_groups, self.entropy_coef)

    def _optimizer_step(self, tally: LossTally) -> None:
        """Clip the gradient norm (refusing a non-finite one), take the AdamW step, resync the sampler."""
        grad_norm = torch.nn.utils.clip_grad_norm_(self.params, self.cfg.max_grad_norm)
        if not torch.isfinite(grad_norm):
            raise FloatingPointError(
                f"the gradient norm is {float(grad_norm)} at step {self.step_count + 1}; the update was not "
                "applied. Lower the learning rate or check the rewards.")
        tally.acc["grad_norm"] += float(grad_norm)
        t0 = time.perf_counter()
        self.optimizer.step()
        self.sync_sampler()
        tally.acc["time_optimizer"] += time.perf_counter() - t0

    @torch.no_grad()
    def collect_grads(self) -> None:
        """bf16-mixed: add the bf16 copy's gradients into the fp32 weights' ``.grad`` (accumulated in fp32 across
        micro-batches) and free the copy's.  Nothing when the training pass runs on the fp32 model itself."""
        for c, p in self._compute_pairs:
            if c.grad is None:
                continue
            if p.grad is None:
                p.grad = c.grad.to(p.dtype)
            else:
                p.grad.add_(c.grad)
            c.grad = None

    @torch.no_grad()
    def sync_sampler(self) -> None:
        """Copy the updated fp32 weights into the bf16 compute copy and the low-precision sampler (in place, rounded as
        ``cfg.copy_rounding`` says: :class:`~grpo_lessons.training.train_setup.LowPrecisionSync`; nothing when the model itself
        trains and samples)."""
        self._sync()

    # ----- evaluation
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

    # ----- one step
    def step(self) -> dict:
        """Sample, score, advantages, update, (evaluate), log one row to the CSV, (checkpoint).  Returns the row."""
        self._start()
        t0 = time.perf_counter()
        batch = self.sample()          # 1-2. G completions for each of P prompts, and their rewards
        t_sample = time.perf_counter() - t0
        batch = self.prepare(batch)    # 3. advantages, loss mask, pi_old / pi_ref log-probs
        m = self.update(batch)         # 4. mu optimiser steps on policy_loss
        self.step_count += 1
        row = {"step": self.step_count, **self._sample_fields(batch.stats), **m, "time_sample": t_sample,
               **self._batch_fields(batch)}
        t_train = time.perf_counter() - t0
        if self._eval_due(self.step_count) or self._time_up(t_train) or self._completions_up(row):
            row.update(eval_fields(self.evaluate()))
        return self._record(row, t0, t_train)  # metrics.csv, history, checkpoint when due (records.RunRecords)

    def _batch_fields(self, batch: Batch) -> dict:
        """``adv_rms`` (root mean square of the trained advantages), ``batch_hash`` (:func:`records.batch_hash`) and,
        every ``kl_start_every`` steps, ``kl_start`` (:meth:`kl_to_start`)."""
        if not batch.rows:
            return {}
        every = self.cfg.kl_start_every
        return {"adv_rms": float(batch.advantages.double().pow(2).mean().sqrt()),  # over the N trained completions
                "batch_hash": records.batch_hash(batch.rollout.completion_ids),
                **({"kl_start": self.kl_to_start(batch)} if every and self.step_count % every == 0 else {})}

    def _sample_fields(self, st: dict) -> dict:
        return sample_fields(st, self.reward_columns, overlong=bool(self.cfg.overlong_cache_len),
                             entropy_reward=self.entropy_reward,
                             pool=self.stream if self.cfg.retire_solved_at is not None else None)

    # ----- the run
    def run(self, progress: bool = True, callback: Callable[[list[dict]], Any] | None = None) -> TrainResult:
        """Run until ``cfg.steps`` (resuming first when ``cfg.resume``), checkpoint as ``cfg.checkpoint`` says, return."""
        from tqdm.auto import tqdm

        self._start()
        if callback is not None and self.history:
            callback(self.history)
        bar = tqdm(total=self.cfg.steps, initial=self.step_count, disable=not progress, desc="GRPO",
                   dynamic_ncols=True)
        try:
            while self.step_count < self.cfg.steps and not self._time_up() and not self._completions_up():
                row = self.step()
                bar.update(1)
                bar.set_postfix_str(records.progress_text(row, self.history))
                if callback is not None:
                    callback(self.history)
        finally:
            bar.close()
        checkpoint = self._end_checkpoint()  # cfg.checkpoint: never / unfinished / end (records.RunRecords)
        if self.cfg.save_model:
            self.model.save_pretrained(self.out / "model")
            self.tokenizer.save_pretrained(self.out / "model")
        return TrainResult(history=self.history, csv_path=self.csv_path,
                           final_eval=records.final_eval(self.history, len(self.eval_rows)),
                           initial_eval=self.initial_eval, out=self.out, config=self.conf,
                           checkpoint_path=checkpoint, model=self.model, tokenizer=self.tokenizer)


def train(cfg: TrainConfig, progress: bool = True, callback: Callable[[list[dict]], Any] | None = None,
          **overrides) -> TrainResult:
    """Train with GRPO as configured by ``cfg``; returns a :class:`TrainResult`.

    ``callback(history)`` is called after every step (and once after the step-0 evaluation): pass
    :class:`grpo_lessons.training.plots.LivePlot` for a live plot in a notebook.  ``overrides`` go to
    :class:`Trainer` (``model=``, ``tokenizer=``, ``train_rows=``, ``eval_rows=``, ``reward_funcs=``,
    ``reward_weights=``, ``accuracy_fn=``, ``initial_eval=``).
    """
    return Trainer(cfg, **overrides).run(progress=progress, callback=callback)
