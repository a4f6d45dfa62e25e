"""Exercises of notebook 03 (clipped surrogate and KL): token weights, zero-gradient tokens, the clipped objective."""

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


def _ref_obj(r, a, eps):
    return -clipped_surrogate(r, a, epsilon=eps).per_token_loss


def _obj(fn):
    gen = torch.Generator().manual_seed(3)
    cases = [(torch.tensor([0.5, 0.5, 1.5, 1.5]), torch.tensor([1.0, -1.0, 1.0, -1.0]), 0.2)] + [
        (0.5 + torch.rand(12, generator=gen, dtype=torch.float64), torch.randn(12, generator=gen, dtype=torch.float64), e)
        for e in (0.1, 0.28)]
    check_function(fn, _ref_obj, cases, what="clipped_objective",
                   hint="The objective (to maximise) is min(r * A, clip(r, 1 - eps, 1 + eps) * A), per token.")


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
    name="03-clipped-objective", notebook="03_clipped_surrogate_and_kl.ipynb", variable="clipped_objective",
    kind="code",
    prompt="Write clipped_objective(r, A, eps): the per-token clipped surrogate objective (to maximise).",
    check=_obj,
    solution_code=("import torch\n\ndef clipped_objective(r, A, eps):\n"
                   "    return torch.minimum(r * A, torch.clamp(r, 1 - eps, 1 + eps) * A)"),
    wrong_code=("import torch\n\ndef clipped_objective(r, A, eps):\n    return torch.clamp(r, 1 - eps, 1 + eps) * A",
                "import torch\n\ndef clipped_objective(r, A, eps):\n"
                "    return torch.maximum(r * A, torch.clamp(r, 1 - eps, 1 + eps) * A)")))
