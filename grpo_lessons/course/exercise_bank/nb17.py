"""Exercises of notebooks/17_diversity.ipynb: a per-prompt bonus under two scalings; a per-sample bonus in code."""

from __future__ import annotations

import torch

from ..exercises import Exercise, ExerciseError, check_function, close_to, register

_R = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0], dtype=torch.float64)  # two prompts x G = 4
_BONUS = torch.tensor([0.3] * 4 + [1.3] * 4, dtype=torch.float64)  # alpha * H(pi(.|x)), one value per prompt


def _check_constant(x) -> None:
    from grpo_lessons.core.advantages import group_advantages

    if not isinstance(x, (tuple, list)) or len(x) != 2:
        raise ExerciseError(f"answer with a pair (change under scale='group', change under scale='batch'), got {x!r}")
    for scale, got in zip(("group", "batch"), x):
        want = float(group_advantages(_R + _BONUS, 4, scale=scale)[0] - group_advantages(_R, 4, scale=scale)[0])
        hint = ("The bonus is one number per prompt: what does it do to r_i minus the GROUP mean, and to the std of "
                "one group?" if scale == "group" else
                "TRL's 'batch' subtracts the group mean, then divides by the std of the RAW rewards over the whole "
                "batch: do the two prompts' different bonuses change that std?")
        close_to(got, want, what=f"the change under scale='{scale}'", rel=1e-3, abs_tol=1e-6, hint=hint)


register(Exercise(
    name="17-entropy-constant",
    notebook="17_diversity.ipynb",
    variable="change",
    prompt="Two prompts, rewards [1, 0, 0, 1 | 0, 0, 1, 0]; every completion of prompt 0 gets alpha H = 0.3 added, "
           "every completion of prompt 1 gets 1.3. By how much does completion 0's advantage change under GRPO's "
           "scale='group', and under TRL's scale='batch'? A pair.",
    kind="prediction",
    check=_check_constant,
    solution_code=("import torch\n"
                   "r = torch.tensor([1.0, 0, 0, 1, 0, 0, 1, 0], dtype=torch.float64)\n"
                   "b = torch.tensor([0.3] * 4 + [1.3] * 4, dtype=torch.float64)\n"
                   "centred = (r.view(2, 4) - r.view(2, 4).mean(1, keepdim=True)).flatten()  # unchanged by b\n"
                   "change = (0.0, float(centred[0] / ((r + b).std() + 1e-4) - centred[0] / (r.std() + 1e-4)))"),
    wrong_code=("change = (0.0, 0.0)", "change = (0.3, 0.3)", "change = (0.0, 1.0)", "change = 0.0"),
))


def reference_surprisal(rewards, logp, alpha, G):
    """GRPO's advantages of the rewards plus a per-sample surprisal bonus, r_i - alpha log pi(o_i)."""
    from grpo_lessons.core.advantages import group_advantages

    return group_advantages(rewards - alpha * logp, G)


def _check_surprisal(fn) -> None:
    g = torch.Generator().manual_seed(17)
    cases = [(torch.tensor([1.0, 0, 0, 1, 1, 1, 1, 1], dtype=torch.float64),   # the second group: all right
              torch.tensor([-3.0, -5, -2, -4, -6, -2, -3, -9], dtype=torch.float64), 0.01, 4),
             (torch.tensor([1.0, 0, 0, 1], dtype=torch.float64),
              torch.tensor([-3.0, -5, -2, -4], dtype=torch.float64), 0.0, 4),               # alpha = 0: GRPO
             ((torch.rand(24, generator=g) > 0.5).double(), -10 * torch.rand(24, generator=g, dtype=torch.float64),
              0.05, 8)]
    check_function(fn, reference_surprisal, cases, what="surprisal_advantages", atol=1e-6,
                   hint="Add the bonus to the reward BEFORE the group normalisation: r_i + alpha (-log pi(o_i)), then "
                        "(x - group mean) / (group std (Bessel) + 1e-4). In a group whose task rewards are all equal "
                        "the bonus is the only difference left, and the std division blows it up.")


register(Exercise(
    name="17-surprisal-bonus",
    notebook="17_diversity.ipynb",
    variable="surprisal_advantages",
    prompt="Write surprisal_advantages(rewards, logp, alpha, G): GRPO's advantages after adding the per-sample "
           "surprisal bonus alpha * (-log pi(o_i)) to each reward, for flat (N,) tensors of consecutive groups of G.",
    kind="code",
    check=_check_surprisal,
    reference=reference_surprisal,
    solution_code=(
        "def surprisal_advantages(rewards, logp, alpha, G):\n"
        "    x = (rewards - alpha * logp).view(-1, G)                      # (groups, G) reward + bonus\n"
        "    return ((x - x.mean(1, keepdim=True)) / (x.std(1, keepdim=True) + 1e-4)).flatten()\n"
    ),
    wrong_code=(
        # the bonus added after the normalisation
        "def surprisal_advantages(rewards, logp, alpha, G):\n"
        "    r = rewards.view(-1, G)\n"
        "    a = ((r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + 1e-4)).flatten()\n"
        "    return a - alpha * logp\n",
        # the sign flipped: a bonus for LIKELY completions
        "def surprisal_advantages(rewards, logp, alpha, G):\n"
        "    x = (rewards + alpha * logp).view(-1, G)\n"
        "    return ((x - x.mean(1, keepdim=True)) / (x.std(1, keepdim=True) + 1e-4)).flatten()\n",
        # the std of the task rewards alone: an all-right group divides its bonus by 1e-4
        "def surprisal_advantages(rewards, logp, alpha, G):\n"
        "    x = (rewards - alpha * logp).view(-1, G)\n"
        "    s = rewards.view(-1, G).std(1, keepdim=True)\n"
        "    return ((x - x.mean(1, keepdim=True)) / (s + 1e-4)).flatten()\n",
    ),
    package_code=("from grpo_lessons import group_advantages\n\n"
                  "def surprisal_advantages(rewards, logp, alpha, G):\n"
                  "    return group_advantages(rewards - alpha * logp, G)\n"),
))
