"""Exercises of notebook 10 (SAPO): the soft gate's weight, the temperature that halves it, the weight on grad log pi."""

import torch

from ..exercises import Exercise, ExerciseError, check_function, close_to, register
from grpo_lessons.core.objectives import sapo_surrogate


def _weight(rho, tau):
    rr = torch.as_tensor(rho, dtype=torch.float64).clone().reshape(-1).requires_grad_(True)
    (-sapo_surrogate(rr, torch.ones_like(rr), tau_pos=float(tau)).per_token_loss).sum().backward()
    return rr.grad


def _a(answer):
    close_to(answer, float(_weight(1.5, 1.0)[0]), what="the weight f'(1.5) at tau = 1",
             hint="f'(rho) = 4 sigma(x)(1 - sigma(x)) with x = tau (rho - 1) = 0.5; it equals 1 at rho = 1 and decays.")


def _b(answer):
    try:
        tau = float(answer)
    except (TypeError, ValueError):
        raise ExerciseError(f"tau is a number, got {answer!r}") from None
    if tau <= 0:
        raise ExerciseError(f"tau must be positive, got {tau}")
    close_to(float(_weight(1.5, tau)[0]), 0.5, what="the weight at rho = 1.5 with your tau", rel=1e-3,
             hint="Solve 4 s (1 - s) = 1/2 for s = sigma(x): s = (2 + sqrt 2) / 4, so x = log(3 + 2 sqrt 2); tau = x / 0.5.")


def reference_logp_weight(rho, A, tau_pos, tau_neg):
    """d(f(rho) A) / d log pi per token, by autograd through the package's ``sapo_surrogate``."""
    x = torch.as_tensor(rho, dtype=torch.float64).log().detach().requires_grad_(True)  # log rho = log pi - log pi_old
    a = torch.as_tensor(A, dtype=torch.float64)
    obj = -sapo_surrogate(torch.exp(x), a, tau_pos=tau_pos, tau_neg=tau_neg).per_token_loss
    return torch.autograd.grad(obj.sum(), x)[0]


def _fn(fn):
    gen = torch.Generator().manual_seed(10)
    r0 = torch.tensor([0.5, 0.9, 1.0, 1.1, 1.5, 2.0, 3.0], dtype=torch.float64)
    cases = [(r0, torch.tensor([1.0, -1.0, 1.0, -1.0, 1.0, -1.0, 0.0], dtype=torch.float64), 1.0, 1.05),
             (r0, torch.tensor([-1.0, 1.0, -1.0, 1.0, -1.0, 1.0, 2.0], dtype=torch.float64), 1.0, 3.0),
             (0.2 + 2 * torch.rand(12, generator=gen, dtype=torch.float64),
              torch.randn(12, generator=gen, dtype=torch.float64), 2.0, 0.5)]
    check_function(fn, reference_logp_weight, cases, what="sapo_logp_weight", atol=1e-9,
                   hint="d/d log pi of f(rho) A is A f'(rho) rho (the chain rule: d rho / d log pi = rho), with "
                        "f'(rho) = 4 sigma (1 - sigma), sigma = sigmoid(tau (rho - 1)), tau = tau_pos where A > 0, "
                        "tau_neg otherwise.")


register(Exercise(
    name="10-weight", notebook="10_sapo.ipynb", variable="answer_a", kind="number",
    prompt="With tau = 1, SAPO's gradient weight f'(rho) at rho = 1.5.",
    check=_a, solution_code="import math\ns15 = 1 / (1 + math.exp(-0.5))\nanswer_a = 4 * s15 * (1 - s15)",
    wrong_code=("answer_a = 1.0", "import math\nanswer_a = 1 / (1 + math.exp(-0.5))")))
register(Exercise(
    name="10-half-tau", notebook="10_sapo.ipynb", variable="answer_b", kind="number",
    prompt="Which tau makes the weight at rho = 1.5 fall to one half?",
    check=_b, solution_code="import math\nanswer_b = math.log(3 + 2 * math.sqrt(2)) / 0.5",
    wrong_code=("answer_b = 2.0", "import math\nanswer_b = math.log(3 + 2 * math.sqrt(2))")))
register(Exercise(
    name="10-logp-weight", notebook="10_sapo.ipynb", variable="sapo_logp_weight", kind="code",
    prompt="Write sapo_logp_weight(rho, A, tau_pos, tau_neg): per token, the factor that multiplies grad log pi in "
           "the gradient of SAPO's objective f(rho) A, with tau chosen by the sign of A.",
    check=_fn, reference=reference_logp_weight,
    solution_code=("import torch\n\ndef sapo_logp_weight(rho, A, tau_pos, tau_neg):\n"
                   "    tau = torch.where(A > 0, torch.full_like(rho, tau_pos), torch.full_like(rho, tau_neg))\n"
                   "    s = torch.sigmoid(tau * (rho - 1))\n"
                   "    return A * 4 * s * (1 - s) * rho"),
    wrong_code=(
        # the weight in rho, without the chain rule's factor rho
        "import torch\n\ndef sapo_logp_weight(rho, A, tau_pos, tau_neg):\n"
        "    tau = torch.where(A > 0, torch.full_like(rho, tau_pos), torch.full_like(rho, tau_neg))\n"
        "    s = torch.sigmoid(tau * (rho - 1))\n    return A * 4 * s * (1 - s)",
        # one temperature for both signs
        "import torch\n\ndef sapo_logp_weight(rho, A, tau_pos, tau_neg):\n"
        "    s = torch.sigmoid(tau_pos * (rho - 1))\n    return A * 4 * s * (1 - s) * rho",
        # the 1/tau of f kept in the derivative (it cancels against the tau of the chain rule)
        "import torch\n\ndef sapo_logp_weight(rho, A, tau_pos, tau_neg):\n"
        "    tau = torch.where(A > 0, torch.full_like(rho, tau_pos), torch.full_like(rho, tau_neg))\n"
        "    s = torch.sigmoid(tau * (rho - 1))\n    return A * 4 * s * (1 - s) * rho / tau"),
    package_code=("import torch\nfrom grpo_lessons.core.objectives import sapo_surrogate\n\n"
                  "def sapo_logp_weight(rho, A, tau_pos, tau_neg):\n"
                  "    x = rho.log().requires_grad_(True)\n"
                  "    obj = -sapo_surrogate(x.exp(), A, tau_pos=tau_pos, tau_neg=tau_neg).per_token_loss\n"
                  "    return torch.autograd.grad(obj.sum(), x)[0]")))
