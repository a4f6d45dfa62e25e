"""Exercises of notebook 05 (GRPO end to end): how many prompts of a step carry a gradient."""

import torch

from grpo_lessons.core.advantages import zero_gradient_probability
from ..exercises import Exercise, ExerciseError, check_function, close_to, register


def _live(answer):
    want = 8 * (1 - zero_gradient_probability(0.21, 8))
    close_to(answer, want, what="the expected number of prompts with a gradient", rel=1e-3,
             hint="A prompt gives a gradient unless all 8 rewards are equal: all right (0.21^8) or all wrong "
                  "(0.79^8). Multiply the chance that it does by the 8 prompts of the step.")


def _smallest(answer):
    want = next(g for g in range(2, 200) if zero_gradient_probability(0.03, g) <= 0.5)
    if isinstance(answer, bool) or not isinstance(answer, int):
        raise ExerciseError(f"G is a whole number of completions, got {answer!r}")
    if answer != want:
        side = ("too small: at that G more than half of the groups are still dead" if answer < want
                else "larger than needed: try a smaller G")
        raise ExerciseError(f"G = {answer!r} is {side}. Hint: at p = 0.03 almost every dead group is all wrong; "
                            "solve 0.97^G <= 0.5 with a logarithm and round up.")


def reference_live(pass_rates, G):
    """Expected number of prompts whose G completions do not all get the same 0/1 reward."""
    return float(sum(1.0 - zero_gradient_probability(float(p), G) for p in pass_rates))


def _fn(fn):
    gen = torch.Generator().manual_seed(5)
    cases = [(torch.tensor([0.08] * 8, dtype=torch.float64), 8),
             (torch.tensor([0.0, 1.0, 0.5, 0.21], dtype=torch.float64), 8),     # never / always solved: no gradient
             (torch.tensor([0.3, 0.6], dtype=torch.float64), 1),                # G = 1 never gives a gradient
             (torch.rand(16, generator=gen, dtype=torch.float64), 4),
             (torch.rand(32, generator=gen, dtype=torch.float64) * 0.1, 16)]
    check_function(fn, reference_live, cases, what="expected_live_prompts", atol=1e-9,
                   hint="Sum over the prompts of 1 - p^G - (1 - p)^G: a prompt is dead when every completion is "
                        "right OR every one is wrong.")


register(Exercise(
    name="05-live-prompts", notebook="05_grpo_end_to_end.ipynb", variable="answer_a", kind="number",
    prompt="A step samples 8 prompts x G = 8 completions at a pass rate of p = 0.21. On average, how many of the "
           "8 prompts carry a gradient?",
    check=_live, solution_code="answer_a = 8 * (1 - 0.21**8 - 0.79**8)",
    wrong_code=("answer_a = 0.21**8 + 0.79**8", "answer_a = 8 * (0.21**8 + 0.79**8)", "answer_a = 1 - 0.21**8 - 0.79**8")))
register(Exercise(
    name="05-half-dead", notebook="05_grpo_end_to_end.ipynb", variable="answer_b", kind="number",
    prompt="The smallest group size G for which at most half of the groups are dead at the two-digit sums' "
           "pass rate p = 0.03.",
    check=_smallest, solution_code="answer_b = 23", wrong_code=("answer_b = 22", "answer_b = 32", "answer_b = 9")))
register(Exercise(
    name="05-live-function", notebook="05_grpo_end_to_end.ipynb", variable="expected_live_prompts", kind="code",
    prompt="Write expected_live_prompts(pass_rates, G): for a tensor of per-prompt pass rates, the expected number "
           "of prompts whose G completions do not all get the same 0/1 reward.",
    check=_fn, reference=reference_live,
    solution_code=("def expected_live_prompts(pass_rates, G):\n"
                   "    p = pass_rates\n"
                   "    return float((1 - p**G - (1 - p)**G).sum())"),
    wrong_code=("def expected_live_prompts(pass_rates, G):\n    return float((1 - (1 - pass_rates)**G).sum())",
                "def expected_live_prompts(pass_rates, G):\n"
                "    p = pass_rates\n    return float((1 - p**G - (1 - p)**G).mean())",
                "def expected_live_prompts(pass_rates, G):\n"
                "    p = pass_rates\n    return float((p**G + (1 - p)**G).sum())"),
    package_code=("from grpo_lessons.core.dynamic_sampling import informative_fraction\n\n"
                  "def expected_live_prompts(pass_rates, G):\n"
                  "    return float(informative_fraction(pass_rates, G).sum())")))
