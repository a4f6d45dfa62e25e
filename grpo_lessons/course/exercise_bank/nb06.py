"""Exercises of notebook 06 (Dr. GRPO): completion weights by hand and in code, unscaled advantages."""

import torch

from grpo_lessons.core.advantages import group_advantages
from grpo_lessons.core.aggregation import token_weights
from ..exercises import Exercise, ExerciseError, check_function, close_to_list, register
from grpo_lessons.core.variants import get_variant

_MASK = (torch.arange(16)[None, :] < torch.tensor([4, 16])[:, None]).float()


def _weights(answer):
    if not isinstance(answer, dict) or set(answer) != {"grpo", "dr_grpo"}:
        raise ExerciseError(f"answer_a is a dict with keys 'grpo' and 'dr_grpo', each a list of 2, got {answer!r}")
    hints = {"grpo": "Under grpo each completion's tokens are averaged first, so every completion weighs 1/B.",
             "dr_grpo": "Under dr_grpo each token weighs 1/(B L_max): a completion weighs its length/(B L_max)."}
    for v, mine in answer.items():
        ref = token_weights(_MASK, get_variant(v).aggregation, max_completion_length=32).sum(-1)
        close_to_list(mine, ref, what=f"completion weights under {v}", atol=1e-6, hint=hints[v])


def _adv(answer):
    close_to_list(answer, group_advantages(torch.tensor([1.0, 0, 0, 1, 1]), 5, scale="none"),
                  what="Dr. GRPO advantages", hint="Dr. GRPO keeps r - mean(r) and drops the division by the std.")


def reference_completion_weights(lengths, variant, L_max):
    """The total gradient weight of each completion, sum_t w_t, under ``variant``'s aggregation."""
    mask = (torch.arange(L_max)[None, :] < torch.as_tensor(lengths)[:, None]).double()  # (B, L_max)
    return token_weights(mask, get_variant(variant).aggregation, max_completion_length=L_max).sum(-1)


def _fn(fn):
    gen = torch.Generator().manual_seed(6)
    cases = [(torch.tensor([4, 16]), v, 32) for v in ("grpo", "dapo", "dr_grpo")]
    cases += [(torch.tensor([7]), v, 8) for v in ("grpo", "bnpo", "dr_grpo")]  # a batch of one
    cases += [(torch.randint(1, 65, (6,), generator=gen), v, 64) for v in ("grpo", "bnpo", "dapo", "dr_grpo")]
    check_function(fn, reference_completion_weights, cases, what="completion_weights", atol=1e-9,
                   hint="Sum one token's weight over the completion's |o_i| tokens: grpo 1/B (each token 1/(B |o_i|)); "
                        "bnpo and dapo |o_i| / (total tokens of the batch); dr_grpo |o_i| / (B L_max) with L_max the constant "
                        "max_completion_length, not the longest completion.")


register(Exercise(
    name="06-completion-weights", notebook="06_dr_grpo.ipynb", variable="answer_a", kind="number",
    prompt="The total weight of each of the two completions under grpo and under dr_grpo (a dict of two lists).",
    check=_weights, solution_code='answer_a = {"grpo": [1 / 2, 1 / 2], "dr_grpo": [4 / (2 * 32), 16 / (2 * 32)]}',
    wrong_code=('answer_a = {"grpo": [4 / 20, 16 / 20], "dr_grpo": [4 / (2 * 32), 16 / (2 * 32)]}',
                'answer_a = {"grpo": [1 / 2, 1 / 2], "dr_grpo": [1 / 2, 1 / 2]}')))
register(Exercise(
    name="06-advantages", notebook="06_dr_grpo.ipynb", variable="answer_b", kind="number",
    prompt="The Dr. GRPO advantages of one group with rewards [1, 0, 0, 1, 1] (a list of five).",
    check=_adv, solution_code="answer_b = [0.4, -0.6, -0.6, 0.4, 0.4]",
    wrong_code=("answer_b = [0.8165, -1.2247, -1.2247, 0.8165, 0.8165]", "answer_b = [0.6, -0.4, -0.4, 0.6, 0.6]")))
register(Exercise(
    name="06-weights-function", notebook="06_dr_grpo.ipynb", variable="completion_weights", kind="code",
    prompt="Write completion_weights(lengths, variant, L_max): the total weight of each completion (the sum of its "
           "tokens' weights) for a (B,) tensor of lengths, variant 'grpo', 'bnpo', 'dapo' or 'dr_grpo', and "
           "max_completion_length L_max.",
    check=_fn, reference=reference_completion_weights,
    solution_code=("import torch\n\ndef completion_weights(lengths, variant, L_max):\n"
                   "    n = lengths.double()  # (B,)\n"
                   "    B = n.numel()\n"
                   "    if variant == 'grpo':\n        return torch.full_like(n, 1 / B)\n"
                   "    if variant in ('bnpo', 'dapo'):\n        return n / n.sum()\n"
                   "    return n / (B * L_max)"),
    wrong_code=(
        # grpo without the 1/B: a completion's tokens sum to 1
        "import torch\n\ndef completion_weights(lengths, variant, L_max):\n    n = lengths.double()\n"
        "    if variant == 'grpo':\n        return torch.ones_like(n)\n"
        "    if variant in ('bnpo', 'dapo'):\n        return n / n.sum()\n    return n / (n.numel() * L_max)",
        # dr_grpo normalised by the longest completion of the batch instead of the constant L_max
        "import torch\n\ndef completion_weights(lengths, variant, L_max):\n    n = lengths.double()\n"
        "    if variant == 'grpo':\n        return torch.full_like(n, 1 / n.numel())\n"
        "    if variant in ('bnpo', 'dapo'):\n        return n / n.sum()\n    return n / (n.numel() * n.max())",
        # one token's weight instead of the whole completion's
        "import torch\n\ndef completion_weights(lengths, variant, L_max):\n    n = lengths.double()\n"
        "    if variant == 'grpo':\n        return 1 / (n.numel() * n)\n"
        "    if variant in ('bnpo', 'dapo'):\n        return torch.full_like(n, 1 / n.sum())\n"
        "    return torch.full_like(n, 1 / (n.numel() * L_max))"),
    package_code=("import torch\nfrom grpo_lessons import get_variant\nfrom grpo_lessons.core.aggregation import token_weights\n\n"
                  "def completion_weights(lengths, variant, L_max):\n"
                  "    mask = (torch.arange(L_max)[None, :] < lengths[:, None]).double()\n"
                  "    return token_weights(mask, get_variant(variant).aggregation, max_completion_length=L_max).sum(-1)")))
