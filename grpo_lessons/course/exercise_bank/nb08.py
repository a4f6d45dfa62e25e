"""Exercises of notebook 08 (GSPO): the sequence ratio, whether a sequence is clipped, the ratio as code."""

import torch

from ..exercises import Exercise, ExerciseError, check_function, close_to, register
from grpo_lessons.core.losses import policy_loss
from grpo_lessons.core.ratios import sequence_log_ratio

_LR = torch.tensor([[0.1, -0.2, 0.4]], dtype=torch.float64)
_M = torch.ones(1, 3, dtype=torch.float64)


def _s(answer):
    close_to(answer, float(torch.exp(sequence_log_ratio(_LR, torch.zeros_like(_LR), _M))[0, 0]), what="s_i",
             hint="s_i is the GEOMETRIC mean of the token ratios: exp of the mean log-ratio, not the product.")


def _clipped(answer):
    if not isinstance(answer, bool):
        raise ExerciseError(f"answer_b is True or False, got {answer!r}")
    x = _LR.clone().requires_grad_(True)
    policy_loss(x, torch.zeros_like(_LR), torch.tensor([1.0]), _M, variant="gspo").loss.backward()
    if answer != bool((x.grad == 0).all()):
        raise ExerciseError("compare s_i with GSPO's clip range 1 + 4e-4 (not 1.2): a positive advantage and "
                            "s_i above the range means the whole sequence is clipped.")


def _ref(logp, old, mask):
    return torch.exp(sequence_log_ratio(logp, old, mask)).squeeze(-1)


def _fn(fn):
    gen = torch.Generator().manual_seed(8)
    mask = torch.tensor([[1.0, 1, 1, 1, 0, 0], [1, 1, 0, 0, 0, 0], [1, 1, 1, 1, 1, 1]], dtype=torch.float64)
    cases = [(0.3 * torch.randn(3, 6, generator=gen, dtype=torch.float64),
              0.3 * torch.randn(3, 6, generator=gen, dtype=torch.float64), mask) for _ in range(2)]
    check_function(fn, _ref, cases, what="sequence_ratio",
                   hint="exp( sum over real tokens of (logp - old) / number of real tokens ), one value per row; "
                        "padding (mask 0) must not count.")


register(Exercise(
    name="08-sequence-ratio", notebook="08_gspo.ipynb", variable="answer_a", kind="number",
    prompt="Token log-ratios [0.1, -0.2, 0.4]: what is GSPO's sequence ratio s_i?",
    check=_s, solution_code="import math\nanswer_a = math.exp((0.1 - 0.2 + 0.4) / 3)",
    wrong_code=("import math\nanswer_a = math.exp(0.1 - 0.2 + 0.4)", "answer_a = (0.1 - 0.2 + 0.4) / 3")))
register(Exercise(
    name="08-clipped", notebook="08_gspo.ipynb", variable="answer_b", kind="prediction",
    prompt="With advantage +1 and GSPO's default clip range, is that sequence clipped (zero gradient)? True/False.",
    check=_clipped, solution_code="answer_b = True", wrong_code=("answer_b = False",)))
register(Exercise(
    name="08-ratio-function", notebook="08_gspo.ipynb", variable="sequence_ratio", kind="code",
    prompt="Write sequence_ratio(logp, old_logp, mask): GSPO's s_i for (B, T) tensors, a (B,) result.",
    check=_fn,
    solution_code=("import torch\n\ndef sequence_ratio(logp, old_logp, mask):\n"
                   "    return torch.exp(((logp - old_logp) * mask).sum(-1) / mask.sum(-1))"),
    wrong_code=("import torch\n\ndef sequence_ratio(logp, old_logp, mask):\n"
                "    return torch.exp((logp - old_logp).mean(-1))",
                "import torch\n\ndef sequence_ratio(logp, old_logp, mask):\n"
                "    return torch.exp(((logp - old_logp) * mask).sum(-1))")))
