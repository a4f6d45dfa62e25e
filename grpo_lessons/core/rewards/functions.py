"""Reward functions with TRL's signature ``f(completions, **dataset_columns) -> list[float]``.

TRL's ``GRPOTrainer`` calls each reward function with the batch's completions (strings, or
conversational ``[{"role": "assistant", "content": ...}]``) and every dataset column as a keyword
argument, one entry per completion (plus extras such as ``prompts``, ``completion_ids``,
``trainer_state``: accepted and ignored).  Model output is untrusted: garbage scores 0.0 and never
raises.  Caller errors -- a column whose length differs from ``completions`` -- raise ``ValueError``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from fractions import Fraction

from .extract import answer_tag, boxed, completion_text, extract_answer, parse_number
from .safe_math import safe_arith, uses_only

__all__ = [
    "arithmetic_reward",
    "gsm8k_reward",
    "countdown_reward",
    "format_reward",
    "countdown_expression",
    "combine",
    "check_rewards",
    "reward_matrix",
]


def _texts(completions) -> list[str]:
    if isinstance(completions, (str, bytes)) or not isinstance(completions, Sequence):
        raise ValueError(
            f"completions must be a list (one entry per completion), got {type(completions).__name__}"
        )
    return [completion_text(c) for c in completions]


def _column(values, n: int, name: str) -> list:
    """One value per completion; a scalar is repeated (handy in notebooks), a list (or a 1-D numpy array /
    tensor) must have length n."""
    if hasattr(values, "tolist") and not isinstance(values, (str, bytes)):
        values = values.tolist()
    if isinstance(values, (list, tuple)):
        if len(values) != n:
            raise ValueError(f"column {name!r} has {len(values)} entries but there are {n} completions")
        return list(values)
    return [values] * n


def _gold(answer) -> Fraction | None:
    """A ground-truth answer: a number, or a string such as ``"72"`` or GSM8K's ``"... #### 72"``."""
    if isinstance(answer, str) and "####" in answer:
        answer = answer.rsplit("####", 1)[1]
    return parse_number(answer)


def arithmetic_reward(completions, answer, **kwargs) -> list[float]:
    """1.0 where the completion's final answer equals ``answer`` exactly, else 0.0.

    The final answer is the last ``<answer>`` tag, else the last ``\\boxed{}``, else the last number
    in the text (``"2 + 3 = 5"`` -> 5; ``"5.0"`` equals 5).
    """
    texts = _texts(completions)
    golds = [_gold(a) for a in _column(answer, len(texts), "answer")]
    out = []
    for text, gold in zip(texts, golds):
        pred = extract_answer(text)
        out.append(1.0 if pred is not None and gold is not None and pred == gold else 0.0)
    return out


def gsm8k_reward(completions, answer, **kwargs) -> list[float]:
    """GSM8K correctness: ``answer`` is the dataset's solution text (the number after ``####``) or the number itself."""
    return arithmetic_reward(completions, answer)



_FORMAT = re.compile(r"\s*(?:<think>.*?</think>\s*)?<answer>(.+?)</answer>\s*", re.DOTALL)


def format_reward(completions, **kwargs) -> list[float]:
    """1.0 where the whole completion is ``[<think>...</think>] <answer>...</answer>`` with a non-empty answer, else 0.0.

    Nothing may follow ``</answer>`` (a model that keeps talking after its answer does not get the format point).
    """
    out = []
    for text in _texts(completions):
        m = _FORMAT.fullmatch(text) if len(text) <= 20_000 else None
        out.append(1.0 if m and m.group(1).strip() and "<answer>" not in m.group(1) else 0.0)
    return out


# Runs of arithmetic characters, for finding an expression in prose ("So (3 + 5) * 2 = 16.").
_EXPR_RUN = re.compile(r"[0-9()+\-*/×÷−·\s]+", re.ASCII)


def countdown_expression(text: str) -> str | None:
    """The expression a completion proposes: the last ``<answer>`` tag, else ``\\boxed{}``, else the last
    run of arithmetic characters holding an operator.  ``"... = 24"`` suffixes are dropped."""
    if not isinstance(text, str):
        return None
    candidate = answer_tag(text)
    if candidate is None:
        candidate = boxed(text)
    if candidate is None:
        runs = [r.strip() for r in _EXPR_RUN.findall(text[-2000:].replace("×", "*").replace("÷", "/")
                                                        .replace("−", "-"))]
        runs = [r for r in runs if re.search(r"\d\s*[-+*/]\s*[\d(]", r)]
        if not runs:
            return None
        candidate = runs[-1]
    # "3 * 8 = 24" or "24 = 3 * 8": keep the side that is an expression.
    sides = [s.strip() for s in candidate.split("=")]
    with_op = [s for s in sides if re.search(r"[-+*/×÷−]", s.lstrip("-"))]
    return with_op[0] if with_op else (sides[0] if len(sides) == 1 else None)


def countdown_reward(completions, numbers, target, *, use_all_numbers: bool = False,
                     valid_expression_score: float = 0.0, **kwargs) -> list[float]:
    """1.0 where the completion's expression uses only the given ``numbers`` (each at most as often as
    given; all of them if ``use_all_numbers``) and equals ``target``; else ``valid_expression_score``
    for a well-formed expression over allowed numbers, else 0.0.

    ``numbers`` is one list per completion, or one flat list (``[3, 5, 2]``) shared by all of them;
    ``target`` one value per completion or a single value.

    The expression is parsed by :func:`grpo_lessons.core.rewards.safe_math.safe_arith` -- never evaluated by Python.
    """
    texts = _texts(completions)
    if hasattr(numbers, "tolist"):  # a numpy array / tensor of one row or of rows
        numbers = numbers.tolist()
    if isinstance(numbers, (list, tuple)) and numbers and not isinstance(numbers[0], (list, tuple)):
        nums = [list(numbers)] * len(texts)  # one row's numbers, broadcast to every completion
    else:
        nums = _column(numbers, len(texts), "numbers")
    targets = _column(target, len(texts), "target")
    out = []
    for text, given, tgt in zip(texts, nums, targets):
        result = safe_arith(countdown_expression(text))
        goal = parse_number(tgt)
        if result is None or goal is None or not isinstance(given, (list, tuple)) or not uses_only(result.literals, given):
            out.append(0.0)
            continue
        if use_all_numbers and sorted(result.literals) != sorted(int(n) for n in given):
            out.append(float(valid_expression_score))
            continue
        out.append(1.0 if result.value == goal else float(valid_expression_score))
    return out


def check_rewards(values, n: int, name: str = "reward function") -> list[float]:
    """Validate what a reward function returned: exactly ``n`` finite numbers (``None`` is allowed, as in TRL,
    meaning "not applicable"; it becomes NaN for the caller to ignore).  Raises ``ValueError`` naming the problem."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) and not hasattr(values, "tolist"):
        raise ValueError(f"{name} must return a list of floats, got {type(values).__name__}")
    values = values.tolist() if hasattr(values, "tolist") else list(values)
    if len(values) != n:
        raise ValueError(f"{name} returned {len(values)} rewards for {n} completions")
    out = []
    for i, v in enumerate(values):
        if v is None:
            out.append(float("nan"))
            continue
        try:
            f = float(v)
        except (TypeError, ValueError):
            raise ValueError(f"{name} returned a non-number at position {i}: {v!r}") from None
        if not math.isfinite(f):
            raise ValueError(f"{name} returned {f} at position {i}; rewards must be finite (or None)")
        out.append(f)
    return out


def combine(reward_funcs: Sequence[Callable], weights: Sequence[float] | None = None,
            name: str | None = None) -> Callable:
    """One reward function that returns ``sum_k w_k * f_k(completions, **columns)`` (weights default to 1).

    This is what TRL does with ``GRPOConfig(reward_weights=...)`` when ``multi_objective_aggregation``
    is ``"sum_then_normalize"`` (its default); with TRL you can equally pass the list of functions and
    the weights separately.  Each component's output is checked (length, finiteness) and a ``None``
    (not applicable) counts as 0.
    """
    funcs = list(reward_funcs)
    if not funcs:
        raise ValueError("combine() needs at least one reward function")
    ws = [1.0] * len(funcs) if weights is None else [float(w) for w in weights]
    if len(ws) != len(funcs):
        raise ValueError(f"{len(ws)} weights for {len(funcs)} reward functions")
    if not all(math.isfinite(w) for w in ws):
        raise ValueError(f"weights must be finite, got {ws}")

    def combined(completions, **columns) -> list[float]:
        n = len(_texts(completions))
        total = [0.0] * n
        for f, w in zip(funcs, ws):
            vals = check_rewards(f(completions, **columns), n, getattr(f, "__name__", repr(f)))
            total = [t + (0.0 if math.isnan(v) else w * v) for t, v in zip(total, vals)]
        return total

    combined.__name__ = name or "+".join(
        (f"{w:g}*" if w != 1 else "") + getattr(f, "__name__", "reward") for f, w in zip(funcs, ws))
    combined.__doc__ = f"Weighted sum of {[getattr(f, '__name__', repr(f)) for f in funcs]} with weights {ws}."
    return combined


def reward_matrix(reward_funcs: Sequence[Callable] | Callable, completions, *, dtype=None, **columns):
    """Score ``completions`` with every reward function: an ``(N, K)`` float tensor, NaN where a function returned ``None``.

    This is TRL's ``rewards_per_func`` (``GRPOTrainer._calculate_rewards``): column ``k`` holds
    ``reward_funcs[k](completions, **columns)``, each output checked by :func:`check_rewards` (length ``N``,
    finite numbers or ``None``).  A row that is NaN in every column is an *unscorable* completion; pass the
    matrix to :func:`grpo_lessons.variant_advantages` (``allow_unscored=True``), :func:`grpo_lessons.decoupled_advantages`
    (GDPO) or :func:`grpo_lessons.core.advantages.combine_rewards` to use it.  ``dtype`` defaults to float32 (TRL's).
    Raises ``ValueError`` for an empty list of functions or a bad output.
    """
    import torch

    funcs = [reward_funcs] if callable(reward_funcs) else list(reward_funcs)
    if not funcs:
        raise ValueError("reward_matrix() needs at least one reward function")
    n = len(_texts(completions))
    cols = [check_rewards(f(completions, **columns), n, getattr(f, "__name__", repr(f))) for f in funcs]
    out = torch.tensor(cols, dtype=dtype or torch.float32).reshape(len(funcs), n)  # (K, N)
    return out.T.contiguous()  # (N, K)
