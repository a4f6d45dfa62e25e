"""Deprecated alias: notebooks 01-03's widgets now live in viz.advantages, viz.clipping and viz.length."""

from .advantages import *  # noqa: F401,F403
from .advantages import __all__ as _a
from .clipping import *  # noqa: F401,F403
from .length import *  # noqa: F401,F403

__all__ = [*_a, "clip_curves", "plot_clip_region", "clip_widget", "KL_ESTIMATORS", "kl_estimators", "kl_sweep",
           "plot_kl_estimators", "kl_widget", "NORMALISATION_VARIANTS", "normalisation_weights",
           "plot_normalisation_weights", "normalisation_widget"]
