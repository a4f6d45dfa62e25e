"""Exercises of notebook 06 (Dr. GRPO): completion weights, unscaled advantages, Dr. GRPO's loss."""

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
             "dr_grpo": "Under dr_grpo each token weighs 1/(B L): a completion weighs its length/(B L)."}
    for v, mine in answer.items():
        ref = token_weights(_MASK, get_variant(v).aggregation, max_completion_length=32).sum(-1)
        close_to_list(mine, ref, what=f"completion weights under {v}", atol=1e-6, hint=hints[v])


def _adv(answer):
    close_to_list(answer, group_advantages(torch.tensor([1.0, 0, 0, 1, 1]), 5, scale="none"),
                  what="Dr. GRPO advantages", hint="Dr. GRPO keeps r - mean(r) and drops the division by the std.")


def _fn(fn):
    gen = torch.Generator().manual_seed(6)
    cases = [(torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0]), 3)] + [
        (torch.randint(0, 2, (g * k,), generator=gen).double(), g) for g, k in ((4, 3), (8, 2))]
    check_function(fn, lambda r, g: group_advantages(r, g, scale="none"), cases, what="dr_grpo_advantages",
                   hint="View the flat rewards as (num_groups, G), subtract each row's mean, flatten; no std.")


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
    name="06-drgrpo-function", notebook="06_dr_grpo.ipynb", variable="dr_grpo_advantages", kind="code",
    prompt="Write dr_grpo_advantages(rewards, G) for a flat tensor of consecutive groups of G.",
    check=_fn,
    solution_code=("def dr_grpo_advantages(rewards, G):\n    r = rewards.view(-1, G)\n"
                   "    return (r - r.mean(1, keepdim=True)).flatten()"),
    wrong_code=("def dr_grpo_advantages(rewards, G):\n    return rewards - rewards.mean()",
                "def dr_grpo_advantages(rewards, G):\n    r = rewards.view(-1, G)\n"
                "    return ((r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + 1e-4)).flatten()")))
