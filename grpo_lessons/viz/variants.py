"""Deprecated alias: notebooks 06-10's widgets now live in viz.length, viz.clipping, viz.pairwise, viz.comparison."""

from .clipping import *  # noqa: F401,F403
from .comparison import *  # noqa: F401,F403
from .comparison import __all__ as _cmp
from .length import *  # noqa: F401,F403
from .pairwise import *  # noqa: F401,F403
from .pairwise import __all__ as _pair

__all__ = ["LENGTH_VARIANTS", "length_weight_curves", "plot_length_weights", "length_weight_widget", "length_drift",
           "plot_length_drift", "clip_higher_curves", "plot_clip_higher", "clip_higher_widget",
           "reachable_probability", "overlong_penalty_curves", "plot_overlong_penalty", "overlong_widget",
           "zero_gradient_grid", "plot_zero_gradient_grid", "overlong_filter_effect", "plot_overlong_filter",
           "gspo_batch", "plot_gspo_ratios", "gspo_widget", "noisy_sequence_gradients", "plot_noisy_sequence",
           *_pair, "chapter_sapo_loss", "sapo_curves", "plot_sapo", "sapo_widget", *_cmp]
