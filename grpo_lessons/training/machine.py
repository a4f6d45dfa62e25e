"""What machine a run ran on: one place for the CPU name and the record every study and benchmark file carries."""

from __future__ import annotations

import os
import platform
import time

import torch


def cpu_name() -> str:
    """The CPU's model name from /proc/cpuinfo (Linux), else what ``platform`` knows."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or ""


def machine() -> dict:
    """CPU, threads, GPU, versions, date and the load average at the start of a run."""
    return {"cpu": cpu_name(), "logical_cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "gpu": torch.cuda.is_available(), "platform": platform.platform(), "python": platform.python_version(),
            "torch": torch.__version__, "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
            "load_average_at_start": [round(x, 2) for x in os.getloadavg()]}
