"""Exercises of notebook 09 (2-GRPO): a pair's advantages, the same-budget prompt count, the pair rule as code."""

import torch

from grpo_lessons.core.advantages import group_advantages
from ..exercises import Exercise, ExerciseError, check_function, close_to_list, register
from grpo_lessons.core.pairwise import two_grpo_budget


def _pair(answer):
    close_to_list(answer, group_advantages(torch.tensor([0.3, 0.8]), 2), what="the pair's advantages",
                  hint="With G = 2 the std is |r1 - r0| / sqrt(2) (Bessel-corrected, as TRL computes it), so the advantages are about -/+ 0.707 "
                       "whatever the rewards, as long as they differ.")


def _prompts(answer):
    want = two_grpo_budget(rollouts_per_batch=8 * 8, reference_group_size=8)["2-GRPO"]["prompts_per_batch"]
    if answer != want:
        raise ExerciseError(f"{answer!r} prompts is not the same budget. The G = 8 run draws 8 prompts x 8 = 64 "
                            "completions per step; 2-GRPO spends those 64 completions two per prompt.")


def _ref(r):
    return group_advantages(r, 2)


def _fn(fn):
    gen = torch.Generator().manual_seed(9)
    cases = [(torch.tensor([0.0, 1.0, 1.0, 1.0, 1.0, 0.0]),),
             (torch.rand(10, generator=gen, dtype=torch.float64),)]
    check_function(fn, _ref, cases, what="pair_advantages", atol=1e-4,
                   hint="Per pair (consecutive entries): (r - pair mean) / (Bessel-corrected std + 1e-4); "
                        "a tied pair gives 0, 0.")


register(Exercise(
    name="09-pair-advantages", notebook="09_two_grpo.ipynb", variable="answer_a", kind="number",
    prompt="A pair has rewards [0.3, 0.8]: its two advantages as group_advantages computes them.",
    check=_pair, solution_code="import math\nc = 0.25 / (0.5 / math.sqrt(2) + 1e-4)\nanswer_a = [-c, c]",
    wrong_code=("answer_a = [-0.25, 0.25]", "answer_a = [-1.0, 1.0]")))
register(Exercise(
    name="09-same-budget", notebook="09_two_grpo.ipynb", variable="answer_b", kind="number",
    prompt="Our G = 8 run takes 8 prompts per step. How many prompts per step does 2-GRPO take at the same budget?",
    check=_prompts, solution_code="answer_b = 32", wrong_code=("answer_b = 64", "answer_b = 16", "answer_b = 8")))
register(Exercise(
    name="09-pair-function", notebook="09_two_grpo.ipynb", variable="pair_advantages", kind="code",
    prompt="Write pair_advantages(r): GRPO's advantages with G = 2 for a flat tensor of consecutive pairs.",
    check=_fn,
    solution_code=("def pair_advantages(r):\n    p = r.view(-1, 2)\n"
                   "    return ((p - p.mean(1, keepdim=True)) / (p.std(1, keepdim=True) + 1e-4)).flatten()"),
    wrong_code=("def pair_advantages(r):\n    p = r.view(-1, 2)\n    return (p - p.mean(1, keepdim=True)).flatten()",
                "def pair_advantages(r):\n    return (r - r.mean()) / (r.std() + 1e-4)")))
