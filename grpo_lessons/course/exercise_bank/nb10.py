"""Exercises of notebook 10 (SAPO): the soft gate's weight, the temperature that halves it, the weight as code."""

import torch

from ..exercises import Exercise, ExerciseError, check_function, close_to, register
from grpo_lessons.core.objectives import sapo_surrogate


def _weight(r, tau):
    rr = torch.as_tensor(r, dtype=torch.float64).clone().reshape(-1).requires_grad_(True)
    (-sapo_surrogate(rr, torch.ones_like(rr), tau_pos=float(tau)).per_token_loss).sum().backward()
    return rr.grad


def _a(answer):
    close_to(answer, float(_weight(1.5, 1.0)[0]), what="the weight f'(1.5) at tau = 1",
             hint="f'(r) = 4 sigma(x)(1 - sigma(x)) with x = tau (r - 1) = 0.5; it equals 1 at r = 1 and decays.")


def _b(answer):
    try:
        tau = float(answer)
    except (TypeError, ValueError):
        raise ExerciseError(f"tau is a number, got {answer!r}") from None
    if tau <= 0:
        raise ExerciseError(f"tau must be positive, got {tau}")
    close_to(float(_weight(1.5, tau)[0]), 0.5, what="the weight at r = 1.5 with your tau", rel=1e-3,
             hint="Solve 4 s (1 - s) = 1/2 for s = sigma(x): s = (2 + sqrt 2) / 4, so x = log(3 + 2 sqrt 2); tau = x / 0.5.")


def _fn(fn):
    gen = torch.Generator().manual_seed(10)
    cases = [(torch.tensor([0.5, 1.0, 1.5, 2.0], dtype=torch.float64), 1.0),
             (0.2 + 2 * torch.rand(8, generator=gen, dtype=torch.float64), 3.0)]
    check_function(fn, lambda r, tau: _weight(r, tau), cases, what="sapo_weight",
                   hint="sigma = sigmoid(tau (r - 1)); the weight is 4 sigma (1 - sigma) (no 1/tau: it cancels).")


register(Exercise(
    name="10-weight", notebook="10_sapo.ipynb", variable="answer_a", kind="number",
    prompt="With tau = 1, SAPO's gradient weight f'(r) at r = 1.5.",
    check=_a, solution_code="import math\ns15 = 1 / (1 + math.exp(-0.5))\nanswer_a = 4 * s15 * (1 - s15)",
    wrong_code=("answer_a = 1.0", "import math\nanswer_a = 1 / (1 + math.exp(-0.5))")))
register(Exercise(
    name="10-half-tau", notebook="10_sapo.ipynb", variable="answer_b", kind="number",
    prompt="Which tau makes the weight at r = 1.5 fall to one half?",
    check=_b, solution_code="import math\nanswer_b = math.log(3 + 2 * math.sqrt(2)) / 0.5",
    wrong_code=("answer_b = 2.0", "import math\nanswer_b = math.log(3 + 2 * math.sqrt(2))")))
register(Exercise(
    name="10-weight-function", notebook="10_sapo.ipynb", variable="sapo_weight", kind="code",
    prompt="Write sapo_weight(r, tau): the gradient weight df/dr of SAPO's gate for a tensor of ratios.",
    check=_fn,
    solution_code=("import torch\n\ndef sapo_weight(r, tau):\n    s = torch.sigmoid(tau * (r - 1))\n"
                   "    return 4 * s * (1 - s)"),
    wrong_code=("import torch\n\ndef sapo_weight(r, tau):\n    s = torch.sigmoid(tau * (r - 1))\n"
                "    return 4 * s * (1 - s) / tau",
                "import torch\n\ndef sapo_weight(r, tau):\n    return torch.sigmoid(tau * (r - 1))")))
