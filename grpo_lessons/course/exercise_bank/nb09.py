"""Exercises of notebook 09 (2-GRPO): a batch of pairs' advantages, the same-budget arithmetic, the pair rule as code."""

import torch

from grpo_lessons.core.advantages import group_advantages
from ..exercises import Exercise, ExerciseError, check_function, close_to_list, register
from grpo_lessons.core.pairwise import two_grpo_budget

_PAIRS = torch.tensor([0.3, 0.8, 1.0, 1.0, 5.0, 0.0])


def _pair(answer):
    close_to_list(answer, group_advantages(_PAIRS, 2), what="the six advantages", atol=1e-3,
                  hint="Each pair is its own group: with G = 2 the Bessel std is |r1 - r0| / sqrt(2), so the winner "
                       "gets about +0.707 and the loser -0.707 whatever the gap; a tied pair gets 0, 0.")


def _prompts(answer):
    if not isinstance(answer, (tuple, list)) or len(answer) != 2:
        raise ExerciseError(f"answer_b is a pair (prompts per step, optimiser steps per pass), got {answer!r}")
    budget = two_grpo_budget(rollouts_per_batch=12 * 8, reference_group_size=8, dataset_prompts=1536)
    prompts = budget["2-GRPO"]["prompts_per_batch"]
    if answer[0] != prompts:
        raise ExerciseError(f"{answer[0]!r} prompts per step is not the same budget. The G = 8 run samples 12 x 8 "
                            "completions per step; 2-GRPO spends the same completions two per prompt.")
    if answer[1] != budget["2-GRPO"]["steps"]:
        raise ExerciseError(f"{answer[1]!r} optimiser steps is not one pass: each step consumes {prompts} prompts.")


def reference_pairs(r):
    """GRPO's advantages with G = 2 (TRL's Bessel std, eps 1e-4)."""
    return group_advantages(r, 2)


def _fn(fn):
    gen = torch.Generator().manual_seed(9)
    cases = [(torch.tensor([0.0, 1.0, 1.0, 1.0, 1.0, 0.0]),),
             (torch.tensor([2.0, -3.0]),),
             (torch.rand(10, generator=gen, dtype=torch.float64),)]
    check_function(fn, reference_pairs, cases, what="pair_advantages", atol=1e-4,
                   hint="Per pair (consecutive entries): (r - pair mean) / (Bessel-corrected std + 1e-4); "
                        "a tied pair gives 0, 0.")


register(Exercise(
    name="09-pair-advantages", notebook="09_two_grpo.ipynb", variable="answer_a", kind="number",
    prompt="Three pairs with rewards [0.3, 0.8 | 1, 1 | 5, 0]: the six advantages, by hand, with TRL's Bessel std "
           "and eps = 1e-4 (to 3 decimals).",
    check=_pair, solution_code="import math\nc = 1 / math.sqrt(2)\nanswer_a = [-c, c, 0.0, 0.0, c, -c]",
    wrong_code=("answer_a = [-0.25, 0.25, 0.0, 0.0, 2.5, -2.5]", "answer_a = [-1.0, 1.0, 0.0, 0.0, 1.0, -1.0]",
                "import math\nc = 1 / math.sqrt(2)\nanswer_a = [-c, c, 0.0, 0.0, -c, c]",
                "import math\nc = 1 / math.sqrt(2)\nanswer_a = [-c, c, -c, c, c, -c]")))
register(Exercise(
    name="09-same-budget", notebook="09_two_grpo.ipynb", variable="answer_b", kind="number",
    prompt="A G = 8 run takes 12 prompts per step. At the same completions per step: how many prompts per step does "
           "2-GRPO take, and how many optimiser steps does it need for one pass over 1536 prompts? A pair.",
    check=_prompts, solution_code="answer_b = (12 * 8 // 2, 1536 // (12 * 8 // 2))",
    wrong_code=("answer_b = (12, 128)", "answer_b = (96, 16)", "answer_b = (48, 128)", "answer_b = 48")))
register(Exercise(
    name="09-pair-function", notebook="09_two_grpo.ipynb", variable="pair_advantages", kind="code",
    prompt="Write pair_advantages(r): GRPO's advantages with G = 2 for a flat tensor of consecutive pairs.",
    check=_fn, reference=reference_pairs,
    solution_code=("def pair_advantages(r):\n    p = r.view(-1, 2)  # (pairs, 2)\n"
                   "    return ((p - p.mean(1, keepdim=True)) / (p.std(1, keepdim=True) + 1e-4)).flatten()"),
    wrong_code=("def pair_advantages(r):\n    p = r.view(-1, 2)\n    return (p - p.mean(1, keepdim=True)).flatten()",
                "def pair_advantages(r):\n    return (r - r.mean()) / (r.std() + 1e-4)",
                # the population std: +-1 instead of +-0.707
                "def pair_advantages(r):\n    p = r.view(-1, 2)\n"
                "    return ((p - p.mean(1, keepdim=True)) / (p.std(1, unbiased=False, keepdim=True) + 1e-4)).flatten()"),
    package_code=("from grpo_lessons import group_advantages\n\n"
                  "def pair_advantages(r):\n    return group_advantages(r, 2)")))
