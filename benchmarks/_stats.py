"""The statistics of a comparison over seeds: Student-t intervals, paired differences, seed bands of curves.

They live in the package, :mod:`grpo_lessons.training.stats`, the one place where the numbers a study reports are
computed (the study runner, notebook 20 and the tests all use it); this module keeps the benchmarks' old import path.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from grpo_lessons.training.stats import (Interval, mean_interval, paired_differences, paired_interval,  # noqa: E402
                                         seed_band, t_cdf, t_quantile, verdict)

__all__ = ["t_cdf", "t_quantile", "Interval", "mean_interval", "paired_differences", "paired_interval", "verdict",
           "seed_band"]
