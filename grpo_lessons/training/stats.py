"""A comparison over seeds: Student-t intervals, paired differences, seed bands, and one run's summary row.

Every comparison with arms (:mod:`grpo_lessons.training.study` runs them; notebook 20 and the last cells of notebooks 06-10
read them through :mod:`grpo_lessons.course.viz.study`) writes each run as
``<study>/runs/<arm>/seed<k>/metrics.csv`` (the trainer's own log) with a ``run.json`` beside it.  This module is
the one place where the numbers a study reports are computed, so that the runner, the course and the tests agree.

The statistics themselves live in :mod:`grpo_lessons.core.stats` (shared with the lab) and are re-exported here.  A
study's arms are run with the same seeds; an arm's *gain* is its held-out accuracy after minus before, and its
*paired difference* to the baseline arm is, seed by seed, its gain minus the baseline's gain (the two runs of one
seed share the first batch wherever the arm does not change sampling).  The mean of ``n`` such numbers gets the
interval ``mean +- t_{(1+level)/2, n-1} * s / sqrt(n)``; an interval that covers 0 is not a finding.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..core.stats import (Interval, claim_verdict, holm, mean_interval, paired_differences, paired_interval,
                          seed_band, seeds_for_power, t_cdf, t_quantile, t_test_p, verdict)
from .records import METRICS_NAME, load_history

__all__ = ["t_cdf", "t_quantile", "Interval", "mean_interval", "paired_differences", "paired_interval", "verdict",
           "seed_band", "t_test_p", "holm", "claim_verdict", "seeds_for_power", "RUNS", "RUN_JSON", "SUMMARY_COLUMNS", "run_dir", "run_is_complete", "summarize_run"]

RUNS, RUN_JSON = "runs", "run.json"


# ---------------------------------------------------------------------------------------------
# one run of a study: where it lives, whether it is finished, its summary row
# ---------------------------------------------------------------------------------------------


def run_dir(out: Path | str, arm: str, seed: int) -> Path:
    """``out/runs/<arm>/seed<seed>``: where one run of a study writes its files."""
    return Path(out) / RUNS / arm / f"seed{seed}"


def run_is_complete(rd: Path | str) -> bool:
    """Whether the run in ``rd`` finished: its ``run.json`` says ``complete`` (written after ``metrics.csv``)."""
    rd = Path(rd)
    try:
        info = json.loads((rd / RUN_JSON).read_text())
    except (OSError, ValueError):
        return False
    return bool(info.get("complete")) and (rd / METRICS_NAME).is_file()


SUMMARY_COLUMNS = [
    "arm", "variant", "seed", "lr", "steps", "accuracy_before", "accuracy_after", "gain", "eval_completion_len_after",
    "accuracy_last2", "gain_last2", "reward_first", "reward_last5", "completion_len_last5",
    "completion_len_right_last5", "completion_len_wrong_last5", "train_accuracy_last5", "truncated_frac_last5",
    "entropy_last5",
    "clip_frac_mean", "clip_frac_low_mean", "clip_frac_high_mean", "kl_start_last", "kl_last", "adv_rms_mean",
    "grad_norm_mean", "frac_zero_std_mean", "mismatch_k3_mean", "completions_sampled_total", "first_batch_hash",
    "train_minutes", "minutes", "load_start", "load_end", "initial_eval_reused",
]


def _mean(xs) -> float | None:
    xs = [float(x) for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def summarize_run(rd: Path | str) -> dict:
    """One ``summary.csv`` row from a run's ``metrics.csv`` and ``run.json``.

    ``accuracy_before``: the step-0 row; ``accuracy_after``: the last evaluated row; ``*_last5``: the mean over the
    last five training steps; ``*_mean``: over every training step; ``*_last``: the last logged value;
    ``accuracy_last2``: the mean of the last two evaluations after step 0 (the last alone when there is one), less
    sensitive to where one evaluation falls on a noisy trajectory, and ``gain_last2`` that mean minus before."""
    info = json.loads((Path(rd) / RUN_JSON).read_text())
    hist = load_history(Path(rd) / METRICS_NAME)
    train = [r for r in hist if r["step"] >= 1 and r.get("reward_mean") is not None]
    evals = [r for r in hist if r.get("accuracy") is not None]
    before = next((r["accuracy"] for r in evals if r["step"] == 0), None)
    after = evals[-1]["accuracy"] if evals and evals[-1]["step"] > 0 else None
    last5 = train[-5:]
    end = [r["accuracy"] for r in evals if r["step"] > 0][-2:]
    end_mean = _mean(end)

    def col(rows, k):
        return [r.get(k) for r in rows]

    def last(k):
        vals = [v for v in col(train, k) if v is not None]
        return vals[-1] if vals else None

    conf = info.get("config", {})
    row = {
        "arm": info["arm"], "variant": conf.get("variant"), "seed": info["seed"], "lr": conf.get("lr"),
        "steps": len(train), "accuracy_before": before, "accuracy_after": after,
        "gain": None if before is None or after is None else after - before,
        "eval_completion_len_after": evals[-1].get("eval_completion_len") if after is not None else None,
        "accuracy_last2": end_mean,
        "gain_last2": None if before is None or end_mean is None else end_mean - before,
        "reward_first": train[0]["reward_mean"] if train else None,
        "reward_last5": _mean(col(last5, "reward_mean")),
        "completion_len_last5": _mean(col(last5, "completion_len")),
        "completion_len_right_last5": _mean(col(last5, "completion_len_right")),
        "completion_len_wrong_last5": _mean(col(last5, "completion_len_wrong")),
        "train_accuracy_last5": _mean(col(last5, "train_accuracy")),
        "truncated_frac_last5": _mean(col(last5, "truncated_frac")),
        "entropy_last5": _mean(col(last5, "entropy")),
        "clip_frac_mean": _mean(col(train, "clip_frac")),
        "clip_frac_low_mean": _mean(col(train, "clip_frac_low")),
        "clip_frac_high_mean": _mean(col(train, "clip_frac_high")),
        "kl_start_last": last("kl_start"), "kl_last": last("kl"),
        "adv_rms_mean": _mean(col(train, "adv_rms")), "grad_norm_mean": _mean(col(train, "grad_norm")),
        "frac_zero_std_mean": _mean(col(train, "frac_zero_std_groups")),
        "mismatch_k3_mean": _mean(col(train, "mismatch_k3")),
        "completions_sampled_total": sum(int(r.get("completions_sampled") or 0) for r in train),
        "first_batch_hash": train[0].get("batch_hash") if train else None,
        "train_minutes": (sum((r.get("seconds") or 0.0) - (r.get("time_eval") or 0.0) for r in train) / 60.0),
        "minutes": info.get("minutes"),
        "load_start": (info.get("load_average_at_start") or [None])[0],
        "load_end": (info.get("load_average_at_end") or [None])[0],
        "initial_eval_reused": info.get("initial_eval_reused"),
    }
    row.update(info.get("extra") or {})
    return row
