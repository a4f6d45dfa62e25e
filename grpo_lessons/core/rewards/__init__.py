"""Rewards for verifiable tasks, with TRL's signature ``f(completions, **dataset_columns) -> list[float]``.

    from grpo_lessons.core.rewards import arithmetic_reward, format_reward, combine
    arithmetic_reward(["2 + 3 = 5", "I think 6"], answer=[5, 5])      # [1.0, 0.0]
    reward = combine([arithmetic_reward, format_reward], weights=[1.0, 0.2])

Model output is untrusted: extraction and the arithmetic parser never raise on garbage and never run
code (``ast`` + a whitelist, see :mod:`grpo_lessons.core.rewards.safe_math`).  Introduced in
``notebooks/05_grpo_end_to_end.ipynb``.
"""

from .extract import answer_tag, boxed, completion_text, extract_answer, last_number, latex_number, parse_number
from .functions import (
    arithmetic_reward,
    check_rewards,
    combine,
    reward_matrix,
    countdown_expression,
    countdown_reward,
    format_reward,
    gsm8k_reward,
)
from .safe_math import ArithResult, safe_arith, uses_only

__all__ = [
    "arithmetic_reward",
    "gsm8k_reward",
    "countdown_reward",
    "format_reward",
    "combine",
    "check_rewards",
    "reward_matrix",
    "completion_text",
    "extract_answer",
    "answer_tag",
    "boxed",
    "last_number",
    "parse_number",
    "latex_number",
    "countdown_expression",
    "safe_arith",
    "ArithResult",
    "uses_only",
]
