import os
import sys

import matplotlib
import pytest
import torch
from hypothesis import settings

matplotlib.use("Agg")  # the widgets' figures are drawn without a display (before any test imports pyplot)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
torch.set_num_threads(1)  # pytest -n 2 runs two workers on a 2-core machine

settings.register_profile("ci", deadline=None, derandomize=True, print_blob=True)
settings.load_profile("ci")


@pytest.fixture(autouse=True)
def _close_figures():
    """Close every matplotlib figure a test left open (the viz tests draw many)."""
    yield
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is not None:
        plt.close("all")

