"""Exercises of notebooks/14_cispo_scalerl.ipynb."""

from __future__ import annotations

import torch

from grpo_lessons.core.advantages import group_advantages
from ..exercises import Exercise, ExerciseError, close_to, learner_call, register


def _check_centered(fn) -> None:
    g = torch.Generator().manual_seed(14)
    cases = [(torch.tensor([1.0, 0, 0, 0, 1, 1, 1, 1, 0, 1, 1, 0], dtype=torch.float64), 4)]  # the spec's example
    for G, P in ((4, 3), (8, 2), (2, 5), (6, 4)):
        cases.append(((torch.rand(P * G, generator=g, dtype=torch.float64) > 0.5).double(), G))
        cases.append((torch.randn(P * G, generator=g, dtype=torch.float64), G))
    for rewards, G in cases:
        got = learner_call(fn, rewards.clone(), G)
        got = torch.as_tensor(got, dtype=torch.float64).flatten()
        ref = group_advantages(rewards, G, scale="batch_centered")
        if got.shape != ref.shape:
            raise ExerciseError(f"expected one advantage per reward, shape {tuple(ref.shape)}, got {tuple(got.shape)}")
        if not torch.allclose(got, ref, atol=1e-6, rtol=1e-5):
            i = int((got - ref).abs().argmax())
            raise ExerciseError(
                f"for rewards {rewards.tolist()} with G = {G}, advantage {i} is {float(got[i]):.5f}, expected "
                f"{float(ref[i]):.5f}. Subtract each GROUP's mean first, then divide by the std (Bessel, n - 1) of "
                "those centred values over the whole BATCH, plus 1e-4 outside the square root.")


register(Exercise(
    name="14-batch-centered",
    notebook="14_cispo_scalerl.ipynb",
    variable="centered_advantages",
    prompt="Write centered_advantages(rewards, G): ScaleRL's batch-level normalisation, the group mean subtracted, "
           "then divided by the batch std (Bessel) of the centred values plus 1e-4.",
    kind="code",
    check=_check_centered,
    solution_code=(
        "def centered_advantages(rewards, G):\n"
        "    r = rewards.view(-1, G)\n"
        "    centred = (r - r.mean(dim=1, keepdim=True)).flatten()\n"
        "    return centred / (centred.std() + 1e-4)\n"
    ),
    wrong_code=(
        # TRL's scale_rewards='batch': std of the raw rewards
        "def centered_advantages(rewards, G):\n"
        "    r = rewards.view(-1, G)\n"
        "    centred = (r - r.mean(dim=1, keepdim=True)).flatten()\n"
        "    return centred / (rewards.std() + 1e-4)\n",
        # the chapter's batch mean instead of the group mean
        "def centered_advantages(rewards, G):\n"
        "    return (rewards - rewards.mean()) / (rewards.std() + 1e-4)\n",
        # GRPO's group std
        "def centered_advantages(rewards, G):\n"
        "    r = rewards.view(-1, G)\n"
        "    return ((r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + 1e-4)).flatten()\n",
    ),
))


def _check_fallback(answer) -> None:
    try:
        x = float(answer)
    except (TypeError, ValueError):
        raise ExerciseError(f"the answer is a number (a gradient weight), got {answer!r}") from None
    if abs(x - 1.0) < 1e-6:
        raise ExerciseError("1 would be right with a cap above 1 (ScaleRL's 5.0). Here epsilon_high is unset: "
                            "which value does TRL fall back to, and is it an absolute cap or 1 + epsilon?")
    if abs(x - 1.2) < 1e-6:
        raise ExerciseError("1.2 reads the cap as 1 + epsilon (veRL's relative clip); TRL's cap on r is absolute.")
    close_to(x, 0.2, what="the weight of an on-policy token", hint="The weight is min(r, cap) with r = 1.")


register(Exercise(
    name="14-trl-fallback",
    notebook="14_cispo_scalerl.ipynb",
    variable="weight_on_policy",
    prompt="TRL, loss_type='cispo', epsilon_high left unset (epsilon = 0.2): what weight multiplies A grad log pi "
           "for a token exactly on policy (r = 1)?",
    kind="prediction",
    check=_check_fallback,
    solution_code="weight_on_policy = 0.2",
    wrong_code=("weight_on_policy = 1.0", "weight_on_policy = 1.2", "weight_on_policy = 5.0"),
))
