"""Exercises of notebook 01 (why GRPO): group-mean and leave-one-out baselines."""

import torch

from grpo_lessons.core.advantages import group_advantages
from ..exercises import Exercise, check_function, close_to, close_to_list, register

_R = torch.tensor([1.5, 0.5, 0.5, 1.5])


def _group(answer):
    close_to_list(answer, group_advantages(_R, 4, scale="none"), what="group-mean advantages",
                  hint="Subtract the group's mean reward (1.0) from each reward; do not divide by the std.")


def _loo(answer):
    close_to(answer, float(4 / 3 * group_advantages(_R, 4, scale="none")[0]), what="leave-one-out advantage of answer 0",
             hint="The baseline is the mean of the OTHER three rewards (0.5, 0.5, 1.5), not of all four.")


def reference_loo(rewards, G):
    """Leave-one-out advantages of consecutive groups of ``G``: the package's identity G/(G-1) x group-mean."""
    return G / (G - 1) * group_advantages(rewards, G, scale="none")


def _loo_fn(fn):
    gen = torch.Generator().manual_seed(1)
    cases = [(torch.tensor([1.0, 0.0, 0.0, 1.0]), 4),                       # one group
             (torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0]), 3),             # two groups, one all-equal
             (torch.tensor([0.0, 2.0, 5.0, 5.0]), 2)]                       # G = 2: a pair and a tie
    cases += [(torch.randint(0, 3, (g * k,), generator=gen).double(), g) for g, k in ((5, 2), (8, 3))]
    check_function(fn, reference_loo, cases, what="loo_advantages",
                   hint="View the rewards as (num_groups, G); for each i: r_i minus the mean of the OTHER G - 1 "
                        "rewards of its group, (group sum - r_i) / (G - 1); flatten back.")


register(Exercise(
    name="01-group-mean", notebook="01_why_grpo.ipynb", variable="answer_group", kind="number",
    prompt="Write the group-mean advantages r_i - mean(r) of rewards [1.5, 0.5, 0.5, 1.5] as a list.",
    check=_group, solution_code="answer_group = [0.5, -0.5, -0.5, 0.5]",
    wrong_code=("answer_group = [1.0, -1.0, -1.0, 1.0]", "answer_group = [0.5, -0.5, -0.5]")))
register(Exercise(
    name="01-leave-one-out", notebook="01_why_grpo.ipynb", variable="answer_loo_0", kind="number",
    prompt="Write the advantage of answer 0 with the leave-one-out baseline (one number).",
    check=_loo, solution_code="answer_loo_0 = 1.5 - (0.5 + 0.5 + 1.5) / 3",
    wrong_code=("answer_loo_0 = 0.5", "answer_loo_0 = -2 / 3")))
register(Exercise(
    name="01-loo-function", notebook="01_why_grpo.ipynb", variable="loo_advantages", kind="code",
    prompt="Write loo_advantages(rewards, G) for a flat tensor of consecutive groups of G: each r_i minus the mean "
           "of the other G - 1 rewards of its group.",
    check=_loo_fn, reference=reference_loo,
    solution_code=("def loo_advantages(rewards, G):\n    r = rewards.view(-1, G)  # (groups, G)\n"
                   "    return (r - (r.sum(1, keepdim=True) - r) / (G - 1)).flatten()"),
    wrong_code=(
        # the leave-in group mean: G/(G-1) times too small
        "def loo_advantages(rewards, G):\n    r = rewards.view(-1, G)\n    return (r - r.mean(1, keepdim=True)).flatten()",
        # one group's formula applied to the whole batch
        "def loo_advantages(rewards, G):\n    return rewards - (rewards.sum() - rewards) / (rewards.numel() - 1)",
        # divides by G instead of G - 1
        "def loo_advantages(rewards, G):\n    r = rewards.view(-1, G)\n"
        "    return (r - (r.sum(1, keepdim=True) - r) / G).flatten()"),
    package_code=("from grpo_lessons import group_advantages\n\n"
                  "def loo_advantages(rewards, G):\n    return G / (G - 1) * group_advantages(rewards, G, scale='none')")))
