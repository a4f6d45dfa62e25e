import os

import torch
from hypothesis import settings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
torch.set_num_threads(1)  # pytest -n 2 runs two workers on a 2-core machine

settings.register_profile("ci", deadline=None, derandomize=True, print_blob=True)
settings.load_profile("ci")
