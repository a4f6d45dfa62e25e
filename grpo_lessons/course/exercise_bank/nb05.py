"""Exercises of notebook 05 (GRPO end to end): dead groups at the base model's pass rate."""

from grpo_lessons.core.advantages import zero_gradient_probability
from ..exercises import Exercise, ExerciseError, check_function, close_to, register


def _dead(answer):
    close_to(answer, zero_gradient_probability(0.08, 8), what="the share of dead groups",
             hint="A group is dead when all 8 rewards are equal: all wrong (0.92^8) OR all right (0.08^8).")


def _smallest(answer):
    want = next(g for g in range(2, 100) if zero_gradient_probability(0.08, g) <= 0.5)
    if answer != want:
        side = "too small: at that G more than half the groups are still dead" if answer < want else \
            "larger than needed: try smaller G"
        raise ExerciseError(f"G = {answer!r} is {side}. Hint: solve 0.92^G <= 0.5.")


def _fn(fn):
    cases = [(0.5, 2), (0.08, 8), (0.0, 4), (0.3, 16), (0.9, 5)]
    check_function(fn, zero_gradient_probability, cases, what="dead_group_probability",
                   hint="p^G (every completion right) plus (1-p)^G (every one wrong).")


register(Exercise(
    name="05-dead-share", notebook="05_grpo_end_to_end.ipynb", variable="answer_a", kind="number",
    prompt="With G = 8 and pass rate p = 0.08, what share of groups gives no gradient?",
    check=_dead, solution_code="answer_a = 0.92**8 + 0.08**8",
    wrong_code=("answer_a = 0.92**8 * 0.08**8", "answer_a = 0.08**8")))
register(Exercise(
    name="05-half-dead", notebook="05_grpo_end_to_end.ipynb", variable="answer_b", kind="number",
    prompt="The smallest G for which at most half of the groups are dead at p = 0.08.",
    check=_smallest, solution_code="answer_b = 9", wrong_code=("answer_b = 8", "answer_b = 16")))
register(Exercise(
    name="05-dead-function", notebook="05_grpo_end_to_end.ipynb", variable="dead_group_probability", kind="code",
    prompt="Write dead_group_probability(p, G): the chance that G Bernoulli(p) rewards are all equal.",
    check=_fn, solution_code="def dead_group_probability(p, G):\n    return p**G + (1 - p)**G",
    wrong_code=("def dead_group_probability(p, G):\n    return (1 - p)**G",
                "def dead_group_probability(p, G):\n    return p**G * (1 - p)**G")))
