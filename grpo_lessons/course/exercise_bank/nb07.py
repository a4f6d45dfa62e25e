"""Exercises of notebook 07 (DAPO): the soft overlong penalty and the cost of dynamic sampling."""

import torch

from grpo_lessons.core.dynamic_sampling import expected_sampling_cost
from ..exercises import Exercise, ExerciseError, check_function, close_to, register
from grpo_lessons.core.shaping import soft_overlong_penalty


def _pen(answer):
    close_to(answer, float(soft_overlong_penalty(torch.tensor([19000.0]), 20480, 4096)[0]),
             what="the length reward of a 19000-token completion",
             hint="The buffer starts at L_max - L_cache = 16384; inside it the reward falls linearly from 0 to -1 "
                  "over L_cache tokens, so it is negative.")


def _cost(answer):
    if not isinstance(answer, (tuple, list)) or len(answer) != 2:
        raise ExerciseError(f"answer_b is a pair (informative share, groups drawn), got {answer!r}")
    c = expected_sampling_cost(0.25, 4, 32)
    close_to(answer[0], c["q"], what="the informative share I", hint="I = 1 - p^G - (1-p)^G.")
    close_to(answer[1], c["expected_groups"], what="the groups drawn to fill 32",
             hint="Each group is informative with chance I, so on average 32 / I groups are drawn.")


def reference_overlong(lengths, L_max, L_cache):
    """DAPO's soft overlong punishment (Eq. 13), the package's ``soft_overlong_penalty``."""
    return soft_overlong_penalty(lengths, L_max, L_cache)


def _fn(fn):
    gen = torch.Generator().manual_seed(7)
    lengths = torch.cat([torch.tensor([0.0, 100.0, 16384.0, 19000.0, 20480.0, 25000.0]),
                         torch.randint(0, 24000, (10,), generator=gen).double()])
    cases = [(lengths, 20480, 4096), (lengths / 10, 2048, 512)]
    check_function(fn, reference_overlong, cases, what="overlong_penalty",
                   hint="0 up to L_max - L_cache; ((L_max - L_cache) - |o_i|) / L_cache inside the buffer; -1 beyond L_max.")


register(Exercise(
    name="07-overlong", notebook="07_dapo.ipynb", variable="answer_a", kind="number",
    prompt="With L_max = 20480 and L_cache = 4096, the length reward of a 19000-token completion.",
    check=_pen, solution_code="answer_a = (16384 - 19000) / 4096",
    wrong_code=("answer_a = (19000 - 16384) / 4096", "answer_a = (19000 - 4096) / (20480 - 4096)")))
register(Exercise(
    name="07-sampling-cost", notebook="07_dapo.ipynb", variable="answer_b", kind="number",
    prompt="For p = 0.25 and G = 4: the informative share, and the groups drawn on average to fill 32 (a pair).",
    check=_cost, solution_code="answer_b = (1 - 0.25**4 - 0.75**4, 32 / (1 - 0.25**4 - 0.75**4))",
    wrong_code=("answer_b = (1 - 0.75**4, 32 / (1 - 0.75**4))",
                "answer_b = (1 - 0.25**4 - 0.75**4, 32 * (1 - 0.25**4 - 0.75**4))")))
register(Exercise(
    name="07-overlong-function", notebook="07_dapo.ipynb", variable="overlong_penalty", kind="code",
    prompt="Write overlong_penalty(lengths, L_max, L_cache) for a 1-D tensor of completion lengths (DAPO Eq. 13).",
    check=_fn, reference=reference_overlong,
    solution_code=("import torch\n\ndef overlong_penalty(lengths, L_max, L_cache):\n"
                   "    start = L_max - L_cache\n"
                   "    return torch.clamp((start - lengths) / L_cache, min=-1.0, max=0.0)"),
    wrong_code=("import torch\n\ndef overlong_penalty(lengths, L_max, L_cache):\n"
                "    return torch.clamp((L_max - L_cache - lengths) / L_cache, max=0.0)",
                "import torch\n\ndef overlong_penalty(lengths, L_max, L_cache):\n"
                "    return -(lengths > L_max).double()",
                # the chapter's formula: L_cache read as a threshold
                "import torch\n\ndef overlong_penalty(lengths, L_max, L_cache):\n"
                "    return -torch.clamp((lengths - L_cache) / (L_max - L_cache), min=0.0)"),
    package_code=("from grpo_lessons.core.shaping import soft_overlong_penalty\n\n"
                  "def overlong_penalty(lengths, L_max, L_cache):\n"
                  "    return soft_overlong_penalty(lengths, L_max, L_cache)")))
