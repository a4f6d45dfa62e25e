"""What machine a benchmark ran on: the package's :mod:`grpo_lessons.training.machine`, under the benchmarks' old
import path."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from grpo_lessons.training.machine import cpu_name, machine  # noqa: E402,F401

__all__ = ["cpu_name", "machine"]
