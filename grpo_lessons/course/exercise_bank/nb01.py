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


def _ref_loo(r):
    g = r.numel()
    return (r - (r.sum() - r) / (g - 1))


def _loo_fn(fn):
    gen = torch.Generator().manual_seed(1)
    cases = [(torch.tensor([1.0, 0.0, 0.0, 1.0]),)] + [
        (torch.randint(0, 3, (g,), generator=gen).double(),) for g in (2, 5, 8)]
    for (r,) in cases:  # the package's identity: leave-one-out = G/(G-1) * group-mean advantage
        assert torch.allclose(_ref_loo(r), r.numel() / (r.numel() - 1) * group_advantages(r, r.numel(), scale="none"))
    check_function(fn, _ref_loo, cases, what="loo_advantages",
                   hint="For each i: r_i minus the mean of the other G-1 rewards, (sum(r) - r_i) / (G - 1).")


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
    prompt="Write loo_advantages(r) for a 1-D tensor r of one group's rewards: r_i minus the mean of the others.",
    check=_loo_fn,
    solution_code="def loo_advantages(r):\n    return r - (r.sum() - r) / (r.numel() - 1)",
    wrong_code=("def loo_advantages(r):\n    return r - r.mean()",
                "def loo_advantages(r):\n    return r - r.sum() / (r.numel() - 1)")))
