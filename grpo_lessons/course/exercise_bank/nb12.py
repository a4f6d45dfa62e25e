"""Exercises of notebooks/12_vespo.ipynb."""

from __future__ import annotations

import torch

from ..exercises import Exercise, ExerciseError, close_to, learner_call, register
from grpo_lessons.core.objectives import vespo_phi


def _check_phi(fn) -> None:
    g = torch.Generator().manual_seed(12)
    cases = [(torch.tensor([0.1, -0.05], dtype=torch.float64), 1.0),  # VESPO (arXiv 2602.10693), checked vs TRL
             (torch.tensor([0.2, 0.1, 0.3], dtype=torch.float64), -1.0)]  # the second
    for n in (1, 4, 17, 60):
        for a in (1.0, -1.0, 0.0):
            cases.append((0.05 * torch.randn(n, generator=g, dtype=torch.float64), a))
    for lr, a in cases:
        got = learner_call(fn, lr.clone(), a)
        ref = vespo_phi(lr[None, :], torch.ones(1, lr.numel(), dtype=torch.float64),
                        torch.full((1, 1), a, dtype=torch.float64))
        close_to(got, float(ref), what=f"phi for A = {a:+g} and {lr.numel()} token log-ratio(s)", rel=1e-6,
                 abs_tol=1e-9,
                 hint="log W is the SUM of the token log-ratios (no 1/|o|); A >= 0 uses (k, lambda) = (2, 3), "
                      "A < 0 uses (3, 2); phi = W^k exp(lambda (1 - W)).")


register(Exercise(
    name="12-vespo-phi",
    notebook="12_vespo.ipynb",
    variable="vespo_weight",
    prompt="Write vespo_weight(log_ratios, adv): VESPO's phi(W) for one sequence, log_ratios a 1-D tensor of "
           "log pi_theta - log pi_old per token, with the paper's (k, lambda) = (2, 3) for A >= 0 and (3, 2) "
           "for A < 0.",
    kind="code",
    check=_check_phi,
    solution_code=(
        "import torch\n"
        "def vespo_weight(log_ratios, adv):\n"
        "    k, lam = (2.0, 3.0) if adv >= 0 else (3.0, 2.0)\n"
        "    W = torch.exp(log_ratios.sum())\n"
        "    return float(W ** k * torch.exp(lam * (1 - W)))\n"
    ),
    wrong_code=(
        # GSPO's geometric mean instead of the full product
        "import torch\n"
        "def vespo_weight(log_ratios, adv):\n"
        "    k, lam = (2.0, 3.0) if adv >= 0 else (3.0, 2.0)\n"
        "    W = torch.exp(log_ratios.mean())\n"
        "    return float(W ** k * torch.exp(lam * (1 - W)))\n",
        # the two signs' parameters swapped
        "import torch\n"
        "def vespo_weight(log_ratios, adv):\n"
        "    k, lam = (3.0, 2.0) if adv >= 0 else (2.0, 3.0)\n"
        "    W = torch.exp(log_ratios.sum())\n"
        "    return float(W ** k * torch.exp(lam * (1 - W)))\n",
        # the exponential factor's sign flipped
        "import torch\n"
        "def vespo_weight(log_ratios, adv):\n"
        "    k, lam = (2.0, 3.0) if adv >= 0 else (3.0, 2.0)\n"
        "    W = torch.exp(log_ratios.sum())\n"
        "    return float(W ** k * torch.exp(lam * (W - 1)))\n",
    ),
))


def _check_peak(answer) -> None:
    try:
        x = float(answer)
    except (TypeError, ValueError):
        raise ExerciseError(f"the answer is a number (a value of W), got {answer!r}") from None
    if abs(x - 2.0 / 3.0) < 1e-3:
        raise ExerciseError("2/3 is the peak for A > 0 (k = 2, lambda = 3); the question asks about A < 0.")
    close_to(x, 1.5, what="W at the peak of phi for A < 0", rel=1e-3,
             hint="Set d log phi / dW = k / W - lambda = 0 with the A < 0 parameters (k, lambda) = (3, 2).")


register(Exercise(
    name="12-vespo-peak",
    notebook="12_vespo.ipynb",
    variable="w_peak",
    prompt="With the paper's defaults, at which sequence ratio W is VESPO's weight largest for a negative advantage?",
    kind="number",
    check=_check_peak,
    solution_code="w_peak = 3 / 2",
    wrong_code=("w_peak = 2 / 3", "w_peak = 1.0", "w_peak = 'W = 1.5'"),
))
