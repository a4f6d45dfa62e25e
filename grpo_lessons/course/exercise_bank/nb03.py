"""Exercises of notebook 03 (clipped surrogate and KL): token weights, zero-gradient tokens, the clip's gradient."""

import torch

from grpo_lessons.core.aggregation import token_weights
from ..exercises import Exercise, ExerciseError, check_function, close_to, close_to_list, register
from grpo_lessons.core.objectives import clipped_surrogate
from grpo_lessons.core.variants import get_variant

_MASK = (torch.arange(10)[None, :] < torch.tensor([2, 4, 10])[:, None]).float()


def _weights(answer):
    if not isinstance(answer, dict) or set(answer) != {"grpo", "dapo", "dr_grpo"}:
        raise ExerciseError(f"answer_a is a dict with keys 'grpo', 'dapo', 'dr_grpo', got {answer!r}")
    hints = {"grpo": "grpo averages over each completion's own tokens, then over the B completions.",
             "dapo": "dapo divides by the total number of tokens in the batch.",
             "dr_grpo": "dr_grpo divides by B times max_completion_length, whatever the lengths."}
    for v, mine in answer.items():
        ref = float(token_weights(_MASK, get_variant(v).aggregation, max_completion_length=16)[0, 0])
        close_to(mine, ref, what=f"the token weight under {v}", hint=hints[v])


def _zero_grad():
    r = torch.tensor([0.7, 0.7, 1.25, 1.3, 1.3], requires_grad=True)
    a = torch.tensor([1.0, -1.0, 1.0, 1.0, -1.0])
    clipped_surrogate(r, a, epsilon=0.2, epsilon_high=0.28).per_token_loss.sum().backward()
    return (r.grad == 0).float()


def _zero(answer):
    close_to_list(answer, _zero_grad(), what="zero-gradient tokens (True = zero gradient)", atol=0.0,
                  hint="The clip only bites on the side the advantage pushes towards: r < 1 - eps with A < 0, "
                       "or r > 1 + eps_high with A > 0.")


def reference_clip_gradient(r, A, eps_low, eps_high):
    """dJ/dr of the clipped objective J = min(r A, clip(r, 1 - eps_low, 1 + eps_high) A), by autograd."""
    x = torch.as_tensor(r, dtype=torch.float64).detach().clone().requires_grad_(True)
    a = torch.as_tensor(A, dtype=torch.float64)
    J = -clipped_surrogate(x, a, epsilon=eps_low, epsilon_high=eps_high).per_token_loss
    return torch.autograd.grad(J.sum(), x)[0]


def _clip_grad(fn):
    gen = torch.Generator().manual_seed(3)
    cases = [(torch.tensor([0.5, 0.7, 0.9, 1.0, 1.25, 1.35, 1.6], dtype=torch.float64),
              torch.tensor([1.0, -1.0, -1.0, 1.0, 1.0, 1.0, -1.0], dtype=torch.float64), 0.2, 0.28),
              (torch.tensor([0.5, 1.5, 1.0], dtype=torch.float64), torch.zeros(3, dtype=torch.float64), 0.2, 0.2)]
    for e_low, e_high in ((0.2, 0.2), (0.1, 0.3)):
        r = torch.exp(0.4 * torch.randn(40, generator=gen, dtype=torch.float64))
        near = ((r - (1 - e_low)).abs() < 1e-3) | ((r - (1 + e_high)).abs() < 1e-3)
        r = torch.where(near, r + 2e-3, r)  # keep off the boundaries, where the derivative jumps
        cases.append((r, torch.randn(40, generator=gen, dtype=torch.float64), e_low, e_high))
    check_function(fn, reference_clip_gradient, cases, what="clip_gradient", atol=1e-9,
                   hint="dJ/dr is A, except 0 where the clip binds on the side the advantage pushes: "
                        "r > 1 + eps_high with A > 0, or r < 1 - eps_low with A < 0.")


register(Exercise(
    name="03-token-weights", notebook="03_clipped_surrogate_and_kl.ipynb", variable="answer_a", kind="number",
    prompt="Give the gradient weight of one token of the 2-token completion under grpo, dapo and dr_grpo "
           "(a dict of three numbers).",
    check=_weights, solution_code='answer_a = {"grpo": 1 / (3 * 2), "dapo": 1 / (2 + 4 + 10), "dr_grpo": 1 / (3 * 16)}',
    wrong_code=('answer_a = {"grpo": 1 / 2, "dapo": 1 / 16, "dr_grpo": 1 / 16}',
                'answer_a = {"grpo": 1 / 6, "dapo": 1 / 16, "dr_grpo": 1 / 30}')))
register(Exercise(
    name="03-zero-gradient", notebook="03_clipped_surrogate_and_kl.ipynb", variable="answer_b", kind="number",
    prompt="Which of the five tokens get exactly zero gradient? A list of five booleans.",
    check=_zero, solution_code="answer_b = [False, True, False, True, False]",
    wrong_code=("answer_b = [True, True, False, True, True]", "answer_b = [True, False, False, True, False]")))
register(Exercise(
    name="03-clip-gradient", notebook="03_clipped_surrogate_and_kl.ipynb", variable="clip_gradient", kind="code",
    prompt="Write clip_gradient(r, A, eps_low, eps_high): the derivative dJ/dr of the clipped objective per token, "
           "without autograd.",
    check=_clip_grad, reference=reference_clip_gradient,
    solution_code=("import torch\n\ndef clip_gradient(r, A, eps_low, eps_high):\n"
                   "    stopped = ((A > 0) & (r > 1 + eps_high)) | ((A < 0) & (r < 1 - eps_low))\n"
                   "    return torch.where(stopped, torch.zeros_like(A), A)"),
    wrong_code=(
        # zero outside the range on both sides, whatever the sign of A
        "import torch\n\ndef clip_gradient(r, A, eps_low, eps_high):\n"
        "    outside = (r > 1 + eps_high) | (r < 1 - eps_low)\n"
        "    return torch.where(outside, torch.zeros_like(A), A)",
        # the sides swapped: a token that moved the wrong way is the one silenced
        "import torch\n\ndef clip_gradient(r, A, eps_low, eps_high):\n"
        "    stopped = ((A > 0) & (r < 1 - eps_low)) | ((A < 0) & (r > 1 + eps_high))\n"
        "    return torch.where(stopped, torch.zeros_like(A), A)",
        # the symmetric range: eps_high ignored
        "import torch\n\ndef clip_gradient(r, A, eps_low, eps_high):\n"
        "    stopped = ((A > 0) & (r > 1 + eps_low)) | ((A < 0) & (r < 1 - eps_low))\n"
        "    return torch.where(stopped, torch.zeros_like(A), A)"),
    package_code=("from grpo_lessons.core.objectives import clipped_surrogate\nimport torch\n\n"
                  "def clip_gradient(r, A, eps_low, eps_high):\n"
                  "    x = r.clone().requires_grad_(True)\n"
                  "    J = -clipped_surrogate(x, A, epsilon=eps_low, epsilon_high=eps_high).per_token_loss\n"
                  "    return torch.autograd.grad(J.sum(), x)[0]")))
