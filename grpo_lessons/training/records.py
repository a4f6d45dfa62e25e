"""Run records: the metrics CSV, the data cursor, checkpoints and resuming, and :class:`RunRecords`, the part of
:class:`grpo_lessons.training.trainer.Trainer` that writes them (each step's row, the time budget) and :class:`TrainResult`.

Introduced in ``notebooks/05_grpo_end_to_end.ipynb``.  A run directory holds ``metrics.csv`` (one row per
step, written a whole line at a time), ``config.json`` (the resolved configuration) and, when
``TrainConfig.checkpoint`` keeps one, ``checkpoint.pt`` (weights, optimiser, random states, data cursor and
history: resuming from it gives the same numbers as an uninterrupted run).  The command line adds ``curves.png``
and ``summary.json`` (:mod:`grpo_lessons.training.cli`).
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import os
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from .scoring import eval_fields
from .train_config import TRAJECTORY_FIELDS, TrainConfig

__all__ = [
    "PromptStream", "BASE_COLUMNS", "load_history", "write_csv", "append_csv", "rng_state", "set_rng_state",
    "save_checkpoint", "load_checkpoint", "TrainResult", "RunRecords", "open_run", "final_eval", "progress_text",
    "check_initial_eval", "batch_hash",
    "CHECKPOINT_NAME", "METRICS_NAME", "CONFIG_NAME",
]

CHECKPOINT_NAME = "checkpoint.pt"
METRICS_NAME = "metrics.csv"
CONFIG_NAME = "config.json"


class PromptStream:
    """Training prompts in a seeded order: epoch ``e`` is a permutation drawn from ``Random(seed, e)``.

    The position ``(epoch, pos)`` and the set of retired prompts are the whole state, so a checkpoint that
    saves it resumes with the same data order.  :meth:`retire` takes prompts out of the pool for good
    (ScaleRL's no-positive-resampling, ``TrainConfig(retire_solved_at=...)``): :meth:`take` skips them.
    """

    def __init__(self, n: int, seed: int, epoch: int = 0, pos: int = 0, retired=()) -> None:
        if n <= 0:
            raise ValueError("the training set is empty: there are no prompts to sample from")
        self.n, self.seed, self.epoch, self.pos = n, seed, epoch, pos
        self.retired: set[int] = {int(i) for i in retired}
        self._order = self._permutation(epoch)

    def _permutation(self, epoch: int) -> list[int]:
        order = list(range(self.n))
        random.Random(f"{self.seed}-{epoch}").shuffle(order)  # a str seed hashes stably (not PYTHONHASHSEED)
        return order

    @property
    def pool_size(self) -> int:
        """Prompts still in the pool (not retired)."""
        return self.n - len(self.retired)

    def retire(self, indices) -> int:
        """Remove these prompt indices from the pool for good; returns how many were newly retired."""
        before = len(self.retired)
        self.retired.update(int(i) for i in indices)
        return len(self.retired) - before

    def take(self, k: int) -> list[int]:
        if k > 0 and self.pool_size == 0:
            raise RuntimeError(f"every one of the {self.n} training prompts has been retired as solved "
                               "(retire_solved_at): there is nothing left to train on. Raise the threshold or stop.")
        out = []
        while len(out) < k:
            if self.pos == self.n:
                self.epoch, self.pos = self.epoch + 1, 0
                self._order = self._permutation(self.epoch)
            i = self._order[self.pos]
            self.pos += 1
            if i not in self.retired:
                out.append(i)
        return out

    def state(self) -> dict:
        return {"epoch": self.epoch, "pos": self.pos, **({"retired": sorted(self.retired)} if self.retired else {})}


# ---------------------------------------------------------------------------------------------
# The metrics file
# ---------------------------------------------------------------------------------------------

BASE_COLUMNS = [
    "step", "reward_mean", "reward_std", "accuracy", "eval_reward_mean", "eval_completion_len",
    "loss", "policy_loss", "kl", "kl_start", "clip_frac", "clip_frac_low", "clip_frac_high", "ratio_mean", "grad_norm",
    "adv_rms", "completion_len",
    # lengths of the sampled completions the task's accuracy function judges right / wrong, and the right share
    "completion_len_right", "completion_len_wrong", "train_accuracy",
    "truncated_frac", "empty_frac", "overlong_penalty", "frac_zero_std_groups",
    "resample_rounds", "groups_trained", "update_skipped", "completions_sampled",
    # a fingerprint of the trained batch's completion token ids: equal across runs that sampled the same batch
    "batch_hash",
    # the sampler/trainer mismatch: mean k3 of (sampler, pi_old) per token, and the token ratio pi_old / mu
    "mismatch_k3", "mismatch_ratio_min", "mismatch_ratio_mean", "mismatch_ratio_max",
    "correction_truncated_frac", "correction_masked_frac", "off_policy_masked_frac",
    # the entropy bonus (entropy: the sampler's mean token entropy) and ScaleRL's retired prompts
    "entropy", "entropy_bonus", "retired", "pool_size",
    # where the step's time went (seconds): sampling + scoring, training forward, backward, optimiser, evaluation
    "time_sample", "time_forward", "time_backward", "time_optimizer", "time_eval",
    "seconds", "elapsed",
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
        return int(v)
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


def write_csv(path: Path, columns: list[str], rows: list[dict]) -> None:
    """Write the header and ``rows`` atomically: the file is either the old one or the complete new one."""
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", newline="", encoding="utf-8") as f:
        f.write(",".join(columns) + "\n")
        for r in rows:
            f.write(",".join(_fmt(r.get(c)) for c in columns) + "\n")
    os.replace(tmp, path)


def append_csv(path: Path, columns: list[str], row: dict) -> None:
    """Append one row in one write of one complete line: a crash leaves whole rows only."""
    line = ",".join(_fmt(row.get(c)) for c in columns) + "\n"
    with open(path, "a", newline="", encoding="utf-8") as f:
        f.write(line)


# ---------------------------------------------------------------------------------------------
# Random states and checkpoints
# ---------------------------------------------------------------------------------------------


def rng_state() -> dict[str, Any]:
    """Every random state a step draws from: torch's CPU generator, every CUDA device's (when CUDA is
    available: sampling on a GPU draws from those), Python's ``random``."""
    state = {"torch_rng": torch.get_rng_state(), "python_rng": random.getstate()}
    if torch.cuda.is_available():
        state["cuda_rng"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what :func:`rng_state` saved (the CUDA generators too, when both the checkpoint and this machine
    have them)."""
    torch.set_rng_state(state["torch_rng"])
    random.setstate(state["python_rng"])
    if state.get("cuda_rng") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda_rng"])


def save_checkpoint(trainer, path: Path) -> Path:
    """Write the trainer's weights (trainable ones), optimiser, RNG states, step, cursor and history, atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {
        "format": 1,
        "step": trainer.step_count,
        "params": {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad},
        "optimizer": trainer.optimizer.state_dict(),
        **rng_state(),
        "stream": trainer.stream.state(),
        "history": trainer.history,
        "elapsed": trainer.elapsed,
        "initial_eval": trainer.initial_eval,
        "config": {k: trainer.conf[k] for k in TRAJECTORY_FIELDS},
    }
    tmp = path.with_name(f".{path.name}.tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)  # atomic: a kill during the save leaves the previous checkpoint intact
    return path


def load_checkpoint(trainer, path: Path) -> int:
    """Restore into ``trainer`` a checkpoint written by :func:`save_checkpoint`; returns its step.

    Refuses (``ValueError``) a checkpoint made with settings that change the trajectory.
    """
    state = torch.load(path, map_location="cpu", weights_only=False)
    saved = state["config"]
    defaults = {f.name: f.default for f in dataclasses.fields(TrainConfig)}  # settings older checkpoints lack
    diff = [k for k in TRAJECTORY_FIELDS if saved.get(k, defaults.get(k)) != trainer.conf[k]]
    if diff:
        raise ValueError(
            f"cannot resume from {path}: it was made with different settings for {diff} "
            f"(checkpoint: {[saved.get(k) for k in diff]}, now: {[trainer.conf[k] for k in diff]}). "
            "Use the same settings (only steps, eval and checkpoint frequency may change) or a new --out.")
    params = dict(trainer.model.named_parameters())
    with torch.no_grad():
        for n, t in state["params"].items():
            if n not in params:
                raise ValueError(f"checkpoint {path} has a parameter {n!r} this model does not")
            params[n].copy_(t)
    trainer.optimizer.load_state_dict(state["optimizer"])
    set_rng_state(state)
    trainer.stream = PromptStream(len(trainer.train_rows), trainer.cfg.seed, **state["stream"])
    trainer.step_count = int(state["step"])
    trainer.history = list(state["history"])
    trainer.elapsed = float(state["elapsed"])
    trainer.initial_eval = state["initial_eval"]
    return trainer.step_count


# ---------------------------------------------------------------------------------------------
# A run's start and end
# ---------------------------------------------------------------------------------------------


def open_run(trainer) -> bool:
    """Create the run directory, resume from its checkpoint when ``cfg.resume`` finds one (else start an empty
    CSV), write ``config.json``; returns whether the run resumed."""
    trainer.out.mkdir(parents=True, exist_ok=True)
    resumed = trainer.cfg.resume and trainer.checkpoint_path.is_file()
    if resumed:
        trainer.load_checkpoint()
        # Rows logged after the checkpoint belong to steps that will be run again: drop them.
        write_csv(trainer.csv_path, trainer.columns, trainer.history)
    else:
        write_csv(trainer.csv_path, trainer.columns, [])
    (trainer.out / CONFIG_NAME).write_text(json.dumps(trainer.conf, indent=1, default=str) + "\n")
    return bool(resumed)


def check_initial_eval(ev: dict | None, n: int) -> dict | None:
    """A step-0 evaluation passed in instead of computed (``Trainer(initial_eval=...)``), checked: ``None``, or a dict
    with ``accuracy``, ``reward_mean``, ``completion_len`` and ``n`` equal to the ``n`` held-out rows of this run.

    Greedy decoding of the same weights on the same prompts gives the same numbers, so a study that trains many arms
    from one model evaluates it once and passes the result to every run (:mod:`grpo_lessons.training.study`).
    """
    if ev is None:
        return None
    if not isinstance(ev, dict) or not {"accuracy", "reward_mean", "completion_len", "n"} <= set(ev):
        raise ValueError("initial_eval must be what evaluate() returns: a dict with accuracy, reward_mean, "
                         f"completion_len and n; got {ev!r}")
    if ev["n"] != n:
        raise ValueError(f"initial_eval was measured on {ev['n']} held-out prompts, this run evaluates {n}")
    acc = ev["accuracy"]
    if not isinstance(acc, (int, float)) or not 0.0 <= acc <= 1.0:
        raise ValueError(f"initial_eval accuracy must be in [0, 1], got {acc!r}")
    return {k: ev[k] for k in ("accuracy", "reward_mean", "completion_len", "n")}


def batch_hash(completion_ids: torch.Tensor) -> int:
    """A 48-bit fingerprint of a batch's completion token ids ``(N, T)`` (shape included): two runs that trained on
    the same sampled batch log the same number (``metrics.csv``'s ``batch_hash``)."""
    import hashlib

    ids = completion_ids.detach().to("cpu", torch.int64).contiguous()
    h = hashlib.sha1(str(tuple(ids.shape)).encode())
    h.update(ids.numpy().tobytes())
    return int(h.hexdigest()[:12], 16)


def final_eval(history: list[dict], n: int) -> dict | None:
    """The last evaluated row as ``{"step", "accuracy", "reward_mean", "completion_len", "n"}`` (None if none)."""
    evals = [r for r in history if r.get("accuracy") is not None]
    if not evals:
        return None
    last = evals[-1]
    return {"step": last["step"], "accuracy": last["accuracy"], "reward_mean": last["eval_reward_mean"],
            "completion_len": last["eval_completion_len"], "n": n}


def progress_text(row: dict, history: list[dict]) -> str:
    """The progress bar's postfix: this step's reward, KL, clip fraction, length, and the latest accuracy."""
    def f(v, spec):
        return "-" if v is None else format(v, spec)
    acc = next((r["accuracy"] for r in reversed(history) if r.get("accuracy") is not None), None)
    return (f"reward {f(row['reward_mean'], '.3f')} kl {f(row['kl'], '.4f')} clip {f(row['clip_frac'], '.3f')} "
            f"len {f(row['completion_len'], '.1f')} acc {f(acc, '.3f')}")


@dataclass
class TrainResult:
    """What :func:`grpo_lessons.training.trainer.train` returns."""

    history: list[dict]  # one dict per step; history[0] is step 0 (the evaluation before training) when evaluated
    csv_path: Path
    final_eval: dict | None  # {"step", "accuracy", "reward_mean", "completion_len", "n"} at the end
    initial_eval: dict | None
    out: Path
    config: dict  # the resolved configuration
    checkpoint_path: Path | None  # out/checkpoint.pt when the run keeps one (TrainConfig.checkpoint), else None
    model: Any = field(repr=False, default=None)
    tokenizer: Any = field(repr=False, default=None)



class RunRecords:
    """The run-record half of :class:`grpo_lessons.training.trainer.Trainer`: opening the run directory (resuming when
    asked), each step's ``metrics.csv`` row, checkpoints, and the ``max_minutes`` budget.

    It reads the trainer's ``cfg``, ``out``, ``csv_path``, ``checkpoint_path``, ``columns``, ``history``,
    ``step_count`` and its ``evaluate`` / ``_eval_due`` / ``sync_sampler``.
    """

    def _init_records(self, out: Path, initial_eval: dict | None = None) -> None:
        """A fresh run's state: step 0, no history, no time spent; ``metrics.csv`` / ``checkpoint.pt`` under ``out``.

        ``initial_eval``: the step-0 evaluation when it is already known (:func:`check_initial_eval`).
        """
        self._known_initial_eval = initial_eval
        self.step_count = 0
        self.history: list[dict] = []
        self.elapsed = 0.0  # training wall time of the whole run, across resumes (the CSV's `elapsed`)
        self.session_elapsed = 0.0  # this invocation's training time (no evaluation): what max_minutes limits
        self.initial_eval: dict | None = None
        self.out = out
        self.csv_path = out / METRICS_NAME
        self.checkpoint_path = out / CHECKPOINT_NAME
        self._started = False
        self._saved_step: int | None = None

    def save_checkpoint(self, path=None) -> Path:
        """Write weights, optimizer, RNG states, step, data cursor and history (:func:`save_checkpoint`)."""
        path = Path(path) if path is not None else self.checkpoint_path
        save_checkpoint(self, path)
        if path == self.checkpoint_path:
            self._saved_step = self.step_count
        return path

    def load_checkpoint(self, path=None) -> int:
        """Restore a checkpoint written by :meth:`save_checkpoint`; returns its step."""
        path = Path(path) if path is not None else self.checkpoint_path
        step = load_checkpoint(self, path)
        self.sync_sampler()
        if path == self.checkpoint_path:
            self._saved_step = step
        return step

    def _start(self) -> None:
        """Open the run directory (resuming when asked: :func:`open_run`), evaluate at step 0 (once)."""
        if self._started:
            return
        self._started = True
        if not open_run(self) and self._eval_due(0):
            ev = self._known_initial_eval if self._known_initial_eval is not None else self.evaluate()
            self.initial_eval = dict(ev, step=0)
            row = {c: None for c in self.columns}
            row.update(step=0, **eval_fields(ev))
            self.history.append(row)
            append_csv(self.csv_path, self.columns, row)

    def _record(self, row: dict, t0: float, t_train: float) -> dict:
        """Time the step (``t0``: its start; ``t_train``: its seconds before evaluation), append the row to the
        history and the CSV, checkpoint when due.  Returns the row in the CSV's column order."""
        row["seconds"] = time.perf_counter() - t0  # the whole step, evaluation included
        row["time_eval"] = row["seconds"] - t_train if row.get("accuracy") is not None else 0.0
        self.elapsed += row["seconds"]
        self.session_elapsed += t_train  # the budget counts training only; evaluation is timed apart
        row["elapsed"] = self.elapsed
        row = {c: row.get(c) for c in self.columns}
        self.history.append(row)
        append_csv(self.csv_path, self.columns, row)
        every = self.cfg.checkpoint_every
        if every and self.step_count % every == 0 and self.step_count < self.cfg.steps and self.cfg.checkpoint != "never":
            self.save_checkpoint()  # periodic: a kill loses at most `every` steps (the last step: _end_checkpoint)
        return row

    def _end_checkpoint(self) -> Path | None:
        """At the end of a run, apply ``cfg.checkpoint``; returns the checkpoint's path, or None when it keeps none.

        ``"end"``: save (unless this step is saved already).  ``"unfinished"``: save when the run stopped before
        ``steps`` (``max_minutes``), so that a resume can finish it; a run that reached ``steps`` removes the
        periodic one it no longer needs.  ``"never"``: write nothing.
        """
        policy, finished = self.cfg.checkpoint, self.step_count >= self.cfg.steps or self._completions_up()
        if policy == "end" or (policy == "unfinished" and not finished):
            if self._saved_step != self.step_count:
                self.save_checkpoint()
            return self.checkpoint_path
        if policy == "unfinished" and self._saved_step is not None:
            self.checkpoint_path.unlink(missing_ok=True)
            self._saved_step = None
        return None

    def completions_sampled_total(self) -> int:
        """Completions sampled so far in this run (resumes included): the sum of the history's ``completions_sampled``."""
        return sum(int(r.get("completions_sampled") or 0) for r in self.history)

    def _completions_up(self, row: dict | None = None) -> bool:
        """True once another step could not sample its first round (``prompts_per_step x G``) within
        ``max_completions`` (with ``row``: a step not yet in the history).  With the refill rounds of dynamic sampling
        capped to what is left (:meth:`completions_left`), no run samples more than ``max_completions``: an
        equal-sample budget, so that an arm that samples more per step takes fewer steps."""
        limit = self.cfg.max_completions
        if limit is None:
            return False
        extra = int((row or {}).get("completions_sampled") or 0)
        return self.completions_sampled_total() + extra + self.cfg.prompts_per_step * self.cfg.group_size > limit

    def completions_left(self) -> int | None:
        """Completions this run may still sample under ``max_completions`` (None: no budget)."""
        limit = self.cfg.max_completions
        return None if limit is None else limit - self.completions_sampled_total()

    def _time_up(self, running: float = 0.0) -> bool:
        """True once ``max_minutes`` of this invocation's training time (sampling, scoring, updates; not evaluation)
        have been used.  A resume starts a new budget."""
        limit = self.cfg.max_minutes
        return limit is not None and self.session_elapsed + running >= 60.0 * limit
