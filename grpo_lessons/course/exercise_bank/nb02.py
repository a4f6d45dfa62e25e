"""Exercises of notebook 02 (group advantages): group size against dead groups; the standardised advantage."""

import torch

from grpo_lessons.core.advantages import group_advantages, zero_gradient_probability
from ..exercises import Exercise, ExerciseError, check_function, register


def _smallest_g(answer):
    if not isinstance(answer, int) or isinstance(answer, bool):
        raise ExerciseError(f"G is a whole number of completions, got {answer!r}")
    if zero_gradient_probability(0.1, answer) >= 0.1:
        raise ExerciseError(f"at G = {answer} a group still gives no gradient "
                            f"{zero_gradient_probability(0.1, answer):.1%} of the time (>= 10%): G is too small. "
                            "Hint: for small p, p^G is tiny, so solve 0.9^G < 0.1 with a logarithm.")
    if zero_gradient_probability(0.1, answer - 1) < 0.1:
        raise ExerciseError(f"G = {answer} works, but so does G = {answer - 1}: find the SMALLEST one.")


def reference_standardized(rewards, G):
    """GRPO's advantages: (r - group mean) / (group std (Bessel) + 1e-4); 0 for an all-equal group."""
    return group_advantages(rewards, G)


def _std_adv(fn):
    gen = torch.Generator().manual_seed(2)
    cases = [(torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 0.0]), 3),
             (torch.tensor([1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0]), 4)]  # an all-equal group: exactly 0
    cases += [(torch.rand(g * k, generator=gen, dtype=torch.float64), g) for g, k in ((4, 2), (8, 3))]
    check_function(fn, reference_standardized, cases, what="standardized_advantages", atol=1e-4,
                   hint="Reshape to (num_groups, G); subtract each group's mean, divide by its std "
                        "(unbiased, torch.std's default) plus 1e-4; flatten back.")


register(Exercise(
    name="02-smallest-group", notebook="02_group_advantages.ipynb", variable="answer_G", kind="number",
    prompt="The smallest G with p^G + (1-p)^G < 0.1 at p = 0.1 (an integer).",
    check=_smallest_g, solution_code="answer_G = 22",
    wrong_code=("answer_G = 21", "answer_G = 30", "answer_G = 21.85")))
register(Exercise(
    name="02-standardized", notebook="02_group_advantages.ipynb", variable="standardized_advantages", kind="code",
    prompt="Write standardized_advantages(rewards, G): GRPO's (r - group mean) / (group std + 1e-4) for a flat "
           "tensor of consecutive groups of G.",
    check=_std_adv, reference=reference_standardized,
    solution_code=("def standardized_advantages(rewards, G):\n    r = rewards.view(-1, G)  # (groups, G)\n"
                   "    return ((r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + 1e-4)).flatten()"),
    wrong_code=("def standardized_advantages(rewards, G):\n    return (rewards - rewards.mean()) / (rewards.std() + 1e-4)",
                "def standardized_advantages(rewards, G):\n    r = rewards.view(-1, G)\n"
                "    return ((r - r.mean(1, keepdim=True)) / (r.std(1, unbiased=False, keepdim=True) + 1e-4)).flatten()",
                # eps inside the square root
                "def standardized_advantages(rewards, G):\n    r = rewards.view(-1, G)\n"
                "    return ((r - r.mean(1, keepdim=True)) / (r.var(1, keepdim=True) + 1e-4).sqrt()).flatten()"),
    package_code=("from grpo_lessons import group_advantages\n\n"
                  "def standardized_advantages(rewards, G):\n    return group_advantages(rewards, G)")))
