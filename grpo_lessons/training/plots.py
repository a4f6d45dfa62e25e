"""Training curves: a pure function from a run's history to the series drawn, a matplotlib figure, a live plot.

Used by ``notebooks/05_grpo_end_to_end.ipynb``, ``grpo-lessons train`` (the PNG next to the CSV) and
``benchmarks/cpu_learning.py``.

    from grpo_lessons.training.plots import curves, plot_training, LivePlot
    c = curves(result.history)            # {"reward_mean": (steps, values), "accuracy": ..., ...}
    fig = plot_training(result.history, path="curves.png")
    train(cfg, callback=LivePlot())       # redraws in a notebook cell as the run goes
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence

__all__ = ["curves", "smooth", "plot_training", "save_plot", "LivePlot", "PANELS", "draw_seed_band", "CURVE_TITLES",
           "curve_points", "curve_title"]

#: What each panel of :func:`plot_training` shows: (title, [series names]).
PANELS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("reward (sampled, mean over the batch)", ("reward_mean", "reward_mean_smooth")),
    ("held-out accuracy (greedy)", ("accuracy",)),
    ("KL to reference / clip fraction", ("kl", "clip_frac")),
    ("completion length (tokens)", ("completion_len",)),
)


def _num(v) -> float | None:
    if v is None or v == "":
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def draw_seed_band(ax, band: Sequence[tuple], *, color, label: str | None = None, linestyle: str = "-",
                   marker: str | None = None, alpha: float = 0.18) -> None:
    """Draw one arm's seed band (:func:`grpo_lessons.training.stats.seed_band`: ``(step, mean, min, max, n)`` rows)
    on ``ax``: the mean as a line and the min-max as a shaded band over the steps that every seed reached; where fewer
    seeds logged a step (under a wall-clock budget each seed stops at a step of its own) that step's min and max are
    drawn as open points on a thin vertical line instead (with two seeds or fewer there, they are the seeds' own
    values), so a mean over fewer seeds never reads as a move of the curve."""
    if not band:
        return
    n = max(b[4] for b in band)
    full = [b for b in band if b[4] == n]
    part = [b for b in band if b[4] < n]
    if full:
        x = [b[0] for b in full]
        ax.plot(x, [b[1] for b in full], linestyle, marker=marker, ms=3, lw=1.5, color=color, label=label)
        ax.fill_between(x, [b[2] for b in full], [b[3] for b in full], color=color, alpha=alpha, lw=0)
        label = None
    for step, _, lo, hi, _ in part:
        ax.plot([step, step], [lo, hi], "-", lw=0.8, color=color, alpha=0.6)
        ax.plot([step, step] if lo != hi else [step], [lo, hi] if lo != hi else [lo], "o", ms=4, mfc="none",
                color=color, label=label)
        label = None


def smooth(values: Sequence[float], alpha: float = 0.3) -> list[float]:
    """Exponential moving average, debiased like Adam's (the first value is not pulled towards 0)."""
    if not 0 < alpha <= 1:
        raise ValueError(f"alpha must be in (0, 1], got {alpha}")
    out, avg, weight = [], 0.0, 0.0
    for v in values:
        avg = (1 - alpha) * avg + alpha * v
        weight = (1 - alpha) * weight + alpha
        out.append(avg / weight)
    return out


def curves(history: Sequence[dict], alpha: float = 0.3) -> dict[str, tuple[list[int], list[float]]]:
    """``{name: (steps, values)}`` for every metric present in ``history`` (rows of ``metrics.csv``).

    Missing or non-finite values are skipped per series (accuracy exists only at evaluation steps;
    step 0 has no training metrics), so each series has its own steps.  Adds ``reward_mean_smooth``,
    the EMA of the reward.  Pure: no plotting, tested without a display.
    """
    names: list[str] = []
    for row in history:
        for k in row:
            if k not in names and k != "step":
                names.append(k)
    out: dict[str, tuple[list[int], list[float]]] = {}
    for k in names:
        steps, vals = [], []
        for row in history:
            v = _num(row.get(k))
            s = _num(row.get("step"))
            if v is not None and s is not None:
                steps.append(int(s))
                vals.append(v)
        if steps:
            out[k] = (steps, vals)
    if "reward_mean" in out:
        s, v = out["reward_mean"]
        out["reward_mean_smooth"] = (list(s), smooth(v, alpha))
    return out


#: The curves figure's size in inches: at the inline backend's 100 dpi it fits the course site's ~760 px column.
FIGSIZE = (7.8, 5.6)


def plot_training(history: Sequence[dict], path: str | os.PathLike | None = None, title: str | None = None,
                  fig=None):
    """A 2 x 2 figure: reward (raw and smoothed), held-out accuracy, KL and clip fraction, completion length.

    Writes a PNG to ``path`` when given.  ``fig`` reuses an existing figure (the live plot).  Returns the figure.
    """
    import matplotlib.pyplot as plt  # the backend is the caller's: never switched here (a notebook's inline)

    c = curves(history)
    if fig is None:
        fig, axes = plt.subplots(2, 2, figsize=FIGSIZE)
    else:
        fig.clf()
        axes = fig.subplots(2, 2)
    styles = {"reward_mean": dict(alpha=0.35, color="C0", label="reward"),
              "reward_mean_smooth": dict(color="C0", label="reward (EMA)"),
              "accuracy": dict(color="C2", marker="o", label="accuracy"),
              "kl": dict(color="C3", label="KL"),
              "clip_frac": dict(color="C1", label="clip fraction"),
              "completion_len": dict(color="C4", label="mean length")}
    for ax, (panel_title, series) in zip(axes.flat, PANELS):
        drawn = False
        for name in series:
            if name in c:
                s, v = c[name]
                ax.plot(s, v, **styles.get(name, {}))
                drawn = True
        if panel_title.startswith("held-out") and "accuracy" in c:
            ax.set_ylim(-0.02, 1.02)
            s, v = c["accuracy"]
            ax.annotate(f"{v[0]:.0%} -> {v[-1]:.0%}", xy=(0.02, 0.92), xycoords="axes fraction")
        ax.set_title(panel_title, fontsize=10)
        ax.set_xlabel("step")
        if drawn:
            ax.legend(fontsize=8, loc="best")
        else:
            ax.text(0.5, 0.5, "not logged", ha="center", va="center", transform=ax.transAxes, color="grey")
        ax.grid(alpha=0.3)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=110)
    return fig


def save_plot(history: Sequence[dict], path: str | os.PathLike, title: str | None = None) -> str:
    """Write the curves PNG without touching any open figure (Agg canvas); returns the path."""
    fig = LivePlot.new_figure()
    plot_training(history, fig=fig, title=title)
    fig.savefig(path, dpi=110)
    return str(path)


class LivePlot:
    """A ``callback`` for :func:`grpo_lessons.training.trainer.train` that redraws the curves every ``every`` steps.

    In Jupyter it replaces its own output (one figure that updates); elsewhere it prints one line per
    redraw.  ``history`` keeps the last history it saw.
    """

    def __init__(self, every: int = 1, title: str | None = None) -> None:
        self.every, self.title = max(1, int(every)), title
        self.history: list[dict] = []
        self._handle = None
        self._fig = None

    @staticmethod
    def new_figure():
        """A figure of :data:`FIGSIZE` on an Agg canvas, outside pyplot (no open figure is touched)."""
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        fig = Figure(figsize=FIGSIZE)
        FigureCanvasAgg(fig)
        return fig

    def __call__(self, history: Sequence[dict]) -> None:
        self.history = list(history)
        step = int(history[-1].get("step") or 0) if history else 0
        if step % self.every:
            return
        try:
            from IPython import get_ipython
            from IPython.display import display
            in_notebook = get_ipython() is not None and hasattr(get_ipython(), "kernel")
        except ImportError:
            in_notebook = False
        if not in_notebook:
            last = history[-1] if history else {}
            print(f"step {step}: reward {last.get('reward_mean')} accuracy {last.get('accuracy')}")
            return
        if self._fig is None:
            self._fig = self.new_figure()
        plot_training(self.history, fig=self._fig, title=self.title)
        if self._handle is None:
            self._handle = display(self._fig, display_id=True)
        else:
            self._handle.update(self._fig)


# One run's curve of a study, and its panel's title: one rule for the study runner and the course's reader.

CURVE_TITLES: dict[str, str] = {
    "accuracy": "held-out accuracy, greedy (%)", "reward_mean": "training reward (sampled)",
    "completion_len": "completion length (tokens)", "entropy": "token entropy of the sampler (nats)",
    "completion_len_wrong": "length of wrong completions (tokens)",
    "completion_len_right": "length of right completions (tokens)",
    "train_accuracy": "right share of sampled completions",
    "clip_frac": "clip fraction (low + high)", "kl_start": "KL to the start weights (k3 per token)",
    "adv_rms": "advantage RMS", "grad_norm": "gradient norm (before clipping)",
    "truncated_frac": "share cut at the token limit",
    "eval_completion_len": "held-out greedy length (tokens)",
    "mismatch_k3": "sampler/trainer gap (k3 per token)",
    "frac_zero_std_groups": "share of groups with equal rewards", "kl": "KL to the reference (k3 per token)",
}
_PERCENT = {"accuracy"}  # drawn in points, as the table shows it


def curve_points(history: Sequence[dict], metric: str) -> list[tuple[float, float]]:
    """One run's curve of ``metric`` (its ``metrics.csv`` rows): ``(step, value)`` where the row logged it; accuracy
    in points, as the tables give it."""
    scale = 100.0 if metric in _PERCENT else 1.0
    return [(r["step"], scale * float(r[metric])) for r in history if r.get(metric) is not None]


def curve_title(metric: str) -> str:
    """A panel's title: the known metrics' own, ``reward_<name>`` (one reward of several, as the trainer logs it) as
    that reward's mean over the sampled completions, else the column name."""
    if metric in CURVE_TITLES:
        return CURVE_TITLES[metric]
    if metric.startswith("reward_"):
        return f"reward {metric[len('reward_'):]!r} (sampled mean)"
    return metric
