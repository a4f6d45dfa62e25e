"""The variant against plain GRPO at an equal rollout budget: the last cell of notebooks 06-10 and
``benchmarks/compare_variants.py``.  Trains with :func:`grpo_lessons.training.trainer.train` and draws the
histories; no widgets.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any


from grpo_lessons.core.variants import get_variant
from ._common import _plt

__all__ = [
    "COMPARE_KEYS", "comparison_configs", "run_comparison", "comparison_summary", "plot_comparison",
]


# ==================================================================================================
# the variant against plain GRPO
# ==================================================================================================

COMPARE_KEYS: tuple[str, ...] = ("reward_mean", "accuracy", "loss", "clip_frac", "grad_norm", "completion_len",
                                 "frac_zero_std_groups", "completions_sampled", "seconds")


def comparison_configs(variants: Sequence[str], *, group_size: int = 4, prompts_per_step: int = 4,
                       **config: Any) -> dict[str, dict[str, Any]]:
    """``TrainConfig`` fields per variant for a comparison at an equal rollout budget.

    Every variant gets the same ``config`` (model, task, steps, seed, lr, ``max_new_tokens``, beta ...), the same
    ``group_size`` and ``prompts_per_step`` — except ``2-grpo``, which gets ``G = 2`` and
    ``prompts_per_step * group_size / 2`` prompts: the same rollouts per step spread over more prompts
    (Wu et al. 2025, arXiv 2510.00977).  The registry's paper defaults (G = 16 for DAPO, beta = 0.04 for
    GRPO, ...) are deliberately *not* applied: the comparison changes the loss, not the budget.
    """
    out = {}
    for v in variants:
        fixed = get_variant(v).fixed_group_size  # unknown names fail here
        g, p = group_size, prompts_per_step
        if fixed is not None:  # 2-GRPO: its G, the same rollouts spread over more prompts
            if (group_size * prompts_per_step) % fixed:
                raise ValueError(f"{v} needs a multiple of {fixed} rollouts per step")
            g, p = fixed, group_size * prompts_per_step // fixed
        out[v] = {**config, "variant": v, "group_size": g, "prompts_per_step": p}
    return out


def run_comparison(variants: Sequence[str] = ("grpo", "dr_grpo"), *, model: str = "tiny-qwen2",
                   out_dir: str | None = None, model_obj=None, tokenizer=None, progress: bool = False,
                   trainer_kwargs: dict[str, Any] | None = None, keep_eval_rows: bool = False,
                   **config: Any) -> dict[str, list[dict]]:
    """Train each variant from the same initial weights with :func:`grpo_lessons.training.trainer.train`; returns histories.

    ``config`` goes to :func:`comparison_configs` (then ``TrainConfig``); the model is loaded once
    (``model_obj``/``tokenizer`` to pass one in) and deep-copied for every run, so all runs start from the same
    weights and, with the same ``seed``, see the same prompts.  ``trainer_kwargs`` go to ``train`` (e.g.
    ``reward_funcs=``).  Returns ``{variant: history}``; the step-0 evaluation row (if any) is dropped unless
    ``keep_eval_rows``.
    """
    import copy
    import tempfile

    from grpo_lessons.training.trainer import TrainConfig, train  # the top layer: imported only when a comparison runs

    if model_obj is None:
        from grpo_lessons.training.models import resolve_model

        model_obj, tokenizer = resolve_model(model)
    elif tokenizer is None:
        raise ValueError("model_obj was passed without its tokenizer")
    root = out_dir or tempfile.mkdtemp(prefix="grpo-compare-")
    histories = {}
    for v, fields in comparison_configs(variants, model=model, **config).items():
        fields = {**fields, "out": f"{root}/{v}"}
        res = train(TrainConfig(**fields), progress=progress, model=copy.deepcopy(model_obj), tokenizer=tokenizer,
                    **(trainer_kwargs or {}))
        histories[v] = [r for r in res.history if keep_eval_rows or r.get("reward_mean") is not None]
    return histories


def comparison_summary(histories: dict[str, list[dict]], keys: Sequence[str] = COMPARE_KEYS) -> dict[str, dict]:
    """Per variant: the mean of each metric over the training steps (``None`` where never logged), ``steps``, and
    ``accuracy_first`` / ``accuracy_last`` (the first and last held-out evaluations, when there are any)."""
    out = {}
    for v, hist in histories.items():
        steps = [r for r in hist if r.get("reward_mean") is not None]
        row: dict[str, Any] = {"steps": len(steps)}
        for k in keys:
            vals = [float(r[k]) for r in steps if r.get(k) is not None and not math.isnan(float(r[k]))]
            row[k] = sum(vals) / len(vals) if vals else None
        evals = [r for r in hist if r.get("accuracy") is not None]
        row["accuracy_first"] = float(evals[0]["accuracy"]) if evals else None
        row["accuracy_last"] = float(evals[-1]["accuracy"]) if evals else None
        out[v] = row
    return out


def plot_comparison(histories: dict[str, list[dict]], keys: Sequence[str] = ("reward_mean", "clip_frac",
                                                                             "completion_len")):
    """One panel per metric, one line per variant, against the step."""
    plt = _plt()
    fig, axes = plt.subplots(1, len(keys), figsize=(4 * len(keys), 3.0), squeeze=False)
    for ax, k in zip(axes[0], keys):
        for v, hist in histories.items():
            pts = [(r["step"], float(r[k])) for r in hist if r.get(k) is not None]
            if pts:
                ax.plot(*zip(*pts), marker="o", ms=3, lw=1.5, label=v)
        ax.set_title(k, fontsize=10)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    axes[0, 0].legend(fontsize=8)
    fig.tight_layout()
    return fig
