"""How diverse is a group of completions?  Lexical, edit-distance, answer and solution-structure measures,
plus pass@k, best-of-N and rejection sampling.

Introduced in ``notebooks/17_diversity.ipynb`` (the chapter's Table 7.1, "diversity-promoting methods").

* :func:`distinct_n` — Li et al. 2016 (arXiv 1510.03055): distinct n-grams / all n-grams, pooled over texts.
* :func:`pairwise_edit_diversity` — mean normalised Levenshtein distance over all pairs of texts.
* :func:`answer_entropy` — Shannon entropy of the final answers of a group (the task's answer extractor).
* :func:`canonical_expression` / :func:`distinct_structures` — Countdown solutions equal up to commutativity
  and associativity of ``+`` and ``*`` count once (``ast`` parsed, never evaluated).
* :func:`pass_at_k` — the unbiased pass@k estimator of Chen et al. 2021 (arXiv 2107.03374), product form.
* :func:`best_of_n`, :func:`rejection_sample` — keep the best / the top-k by reward.

Model output is untrusted: every text-reading function here bounds its work and never raises on the text.
"""

from __future__ import annotations

import ast
import math
import re
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, Literal, NamedTuple

from .rewards.extract import completion_text, extract_answer
from .rewards.functions import countdown_expression
from .rewards.safe_math import MAX_DEPTH, MAX_LEN, MAX_NODES, _within_bounds

__all__ = [
    "distinct_n",
    "edit_distance",
    "pairwise_edit_diversity",
    "answer_entropy",
    "answer_extractor",
    "canonical_expression",
    "solution_structure",
    "distinct_structures",
    "pass_at_k",
    "BestOfN",
    "best_of_n",
    "rejection_sample",
    "NO_ANSWER",
]

#: The category every completion without an answer falls into (``no_answer="category"``).
NO_ANSWER = "<no answer>"
#: Units (words or characters) of a text that :func:`pairwise_edit_diversity` compares: O(L^2) per pair.
MAX_EDIT_UNITS = 512


def _texts(texts) -> list[str]:
    if isinstance(texts, (str, bytes)) or not isinstance(texts, Sequence):
        raise ValueError(f"texts must be a list of completions, got {type(texts).__name__}")
    return [completion_text(t) for t in texts]


def distinct_n(texts: Sequence[str], n: int = 1) -> float:
    """Distinct-n (Li et al. 2016, arXiv 1510.03055): ``#distinct n-grams / #n-grams``, pooled over ``texts``.

    Words are split on whitespace; the n-grams of every text are pooled (an n-gram repeated in two texts
    counts once in the numerator, twice in the denominator); n-grams never cross text boundaries.
    1.0 = no n-gram repeats; near 0 = the group says the same thing over and over.  No n-grams at all
    (empty texts, texts shorter than ``n`` words) gives 0.0.  Raises ``ValueError`` for ``n < 1``.
    """
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    grams: list[tuple[str, ...]] = []
    for text in _texts(texts):
        words = text.split()
        grams.extend(tuple(words[i:i + n]) for i in range(len(words) - n + 1))
    return len(set(grams)) / len(grams) if grams else 0.0


def edit_distance(a: Sequence, b: Sequence) -> int:
    """Levenshtein distance (insertions, deletions, substitutions, each cost 1) between two sequences."""
    if len(a) < len(b):
        a, b = b, a
    prev = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        cur = [i]
        for j, y in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y)))
        prev = cur
    return prev[-1]


def pairwise_edit_diversity(texts: Sequence[str], unit: Literal["word", "char"] = "word",
                            max_units: int = MAX_EDIT_UNITS) -> float:
    """Mean over all pairs ``i < j`` of ``lev(t_i, t_j) / max(|t_i|, |t_j|)``, in ``[0, 1]``.

    ``unit="word"`` compares whitespace-split words, ``"char"`` characters.  The normaliser is the longer
    text's length, so 0 = identical, 1 = nothing in common position by position (two empty texts: 0).
    Each text is cut to its first ``max_units`` units to bound the ``O(L^2)`` work.  Raises ``ValueError``
    for fewer than 2 texts (a diversity of one text is undefined) or an unknown ``unit``.
    """
    if unit not in ("word", "char"):
        raise ValueError(f"unknown unit {unit!r}; known: char, word")
    seqs = [(t.split() if unit == "word" else list(t))[:max_units] for t in _texts(texts)]
    if len(seqs) < 2:
        raise ValueError("pairwise diversity needs at least 2 texts")
    total, pairs = 0.0, 0
    for i in range(len(seqs)):
        for j in range(i + 1, len(seqs)):
            longest = max(len(seqs[i]), len(seqs[j]))
            total += edit_distance(seqs[i], seqs[j]) / longest if longest else 0.0
            pairs += 1
    return total / pairs


# -- answers ------------------------------------------------------------------------------------------


def answer_extractor(task: str | Any) -> Callable[[str], Any]:
    """The final-answer extractor of a task (a name or a :class:`grpo_lessons.training.data.Task`).

    ``"arithmetic"`` / ``"gsm8k"``: :func:`grpo_lessons.core.rewards.extract_answer` (a ``Fraction`` or ``None``).
    ``"countdown"``: the proposed expression's solution structure (:func:`solution_structure`; ``None`` when
    there is no parseable expression) -- in Countdown the answer *is* the expression.
    """
    name = getattr(task, "name", task)
    if name in ("arithmetic", "gsm8k"):
        return extract_answer
    if name == "countdown":
        return solution_structure
    raise ValueError(f"no answer extractor for task {name!r}; known: arithmetic, countdown, gsm8k")


def answer_entropy(texts: Sequence[str], extractor: Callable[[str], Any] | str | Any = "arithmetic", *,
                   no_answer: Literal["category", "drop", "distinct"] = "category", base: float = math.e) -> float:
    """Shannon entropy ``H = -sum_a p(a) log p(a)`` of the final answers of a group (nats by default).

    ``extractor``: a function ``text -> answer or None``, a task name or a :class:`grpo_lessons.training.data.Task`
    (:func:`answer_extractor`).
    0 = every completion gives the same answer; ``log G`` = all different.  Completions without an answer
    (``None``):

    * ``no_answer="category"`` (default) — they form one more category, :data:`NO_ANSWER`;
    * ``"drop"`` — they are left out (entropy of the answered ones; 0.0 when none answered);
    * ``"distinct"`` — each counts as its own answer (garbage looks maximally diverse; an upper bound).

    Raises ``ValueError`` for an empty group, an unknown ``no_answer`` or ``base <= 1``.
    """
    if no_answer not in ("category", "drop", "distinct"):
        raise ValueError(f"unknown no_answer {no_answer!r}; known: category, distinct, drop")
    if not base > 1:
        raise ValueError(f"base must be > 1, got {base}")
    fn = extractor if callable(extractor) else answer_extractor(extractor)  # a function, a task name or a Task
    items = _texts(texts)
    if not items:
        raise ValueError("answer_entropy needs at least one completion")
    answers: list[Any] = []
    for i, text in enumerate(items):
        a = fn(text)
        if a is None:
            if no_answer == "drop":
                continue
            a = NO_ANSWER if no_answer == "category" else (NO_ANSWER, i)
        answers.append(a)
    if not answers:
        return 0.0
    counts = Counter(answers).values()
    total = len(answers)
    h = -sum(c / total * math.log(c / total) for c in counts)
    return max(0.0, h / math.log(base))


# -- Countdown solution structures -------------------------------------------------------------------

_ALLOWED = re.compile(r"[0-9+\-*/()\s]*", re.ASCII)
_UNICODE_OPS = str.maketrans({"×": "*", "·": "*", "∗": "*", "⋅": "*", "÷": "/", "∕": "/", "−": "-"})


class _Reject(Exception):
    pass


def _canon(node: ast.AST) -> str:
    """Canonical string of an arithmetic tree: sums and products flattened and their operands sorted."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return str(node.value)
    if isinstance(node, (ast.BinOp, ast.UnaryOp)):
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.UAdd):
            return _canon(node.operand)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) or \
                isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
            terms: list[str] = []
            _flatten(node, +1, terms, additive=True)
            return "+(" + ",".join(sorted(terms)) + ")"
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.Div)):
            factors: list[str] = []
            _flatten(node, +1, factors, additive=False)
            return "*(" + ",".join(sorted(factors)) + ")"
    raise _Reject


def _flatten(node: ast.AST, sign: int, out: list[str], additive: bool) -> None:
    """Collect the signed terms of a sum (``additive``) or the powered factors of a product."""
    if additive:
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
            _flatten(node.left, sign, out, True)
            _flatten(node.right, sign if isinstance(node.op, ast.Add) else -sign, out, True)
            return
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            _flatten(node.operand, -sign, out, True)
            return
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.UAdd):
            _flatten(node.operand, sign, out, True)
            return
        out.append(("+" if sign > 0 else "-") + _canon(node))
        return
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.Div)):
        _flatten(node.left, sign, out, False)
        _flatten(node.right, sign if isinstance(node.op, ast.Mult) else -sign, out, False)
        return
    out.append(("" if sign > 0 else "/") + _canon(node))


def canonical_expression(expr: str) -> str | None:
    """A canonical form of an arithmetic expression: equal strings <=> equal up to commutativity and
    associativity of ``+`` and ``*`` (``(3 + 5) * 2``, ``2 * (5 + 3)`` and ``2*(3+5)`` all map to ``*(+(+3,+5),2)``).

    Subtraction and division are read as adding a negated term and multiplying by an inverse, so
    ``a - (b - c)`` and ``a - b + c`` share a form too; distributivity is *not* applied
    (``2 * (3 + 5)`` and ``2 * 3 + 2 * 5`` are different structures).  Only integer literals,
    ``+ - * /``, parentheses and unary signs are accepted (``×`` ``÷`` ``−`` read as ASCII); the
    string is parsed by ``ast.parse`` with the same character filter and size/depth bounds as
    :func:`grpo_lessons.core.rewards.safe_arith` -- nothing is evaluated.  Anything else gives ``None``.
    """
    if not isinstance(expr, str) or len(expr) > MAX_LEN:
        return None
    expr = expr.translate(_UNICODE_OPS).strip()
    if not expr or not _ALLOWED.fullmatch(expr) or "**" in expr or "//" in expr:
        return None
    try:
        tree = ast.parse(expr, mode="eval")
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None
    if not _within_bounds(tree, MAX_NODES, MAX_DEPTH):
        return None
    try:
        return _canon(tree.body)
    except (_Reject, RecursionError):
        return None


def solution_structure(text: str) -> str | None:
    """The canonical structure (:func:`canonical_expression`) of the expression a Countdown completion proposes
    (:func:`grpo_lessons.core.rewards.countdown_expression`), or ``None``."""
    return canonical_expression(countdown_expression(completion_text(text)))


def distinct_structures(texts: Sequence[str], *, only_correct: Callable[[str], bool] | None = None) -> int:
    """How many different Countdown solution structures a group holds (completions without a parseable
    expression are not counted).  ``only_correct``: count only texts for which it returns True (e.g. the
    reward is 1)."""
    seen = set()
    for text in _texts(texts):
        if only_correct is not None and not only_correct(text):
            continue
        s = solution_structure(text)
        if s is not None:
            seen.add(s)
    return len(seen)


# -- pass@k, best-of-N, rejection sampling -----------------------------------------------------------


def _check_int(name: str, value, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) and not (hasattr(value, "__index__")):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    value = int(value)
    if value < low:
        raise ValueError(f"{name} must be >= {low}, got {value}")
    return value


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from ``n`` samples of which ``c`` are correct (Chen et al. 2021, arXiv 2107.03374, Eq. 1):

        pass@k = 1 - C(n - c, k) / C(n, k) = 1 - prod_{i = n - c + 1}^{n} (1 - k / i)

    The product form avoids the huge binomials.  ``n - c < k`` (every size-k subset holds a correct
    sample) gives exactly 1.0.  Raises ``ValueError`` unless ``1 <= k <= n`` and ``0 <= c <= n`` (integers).
    """
    n, c, k = _check_int("n", n, 1), _check_int("c", c, 0), _check_int("k", k, 1)
    if c > n:
        raise ValueError(f"c = {c} correct samples out of n = {n}: c must be <= n")
    if k > n:
        raise ValueError(f"k = {k} > n = {n}: pass@k needs at least k samples")
    if n - c < k:
        return 1.0
    prod = 1.0
    for i in range(n - c + 1, n + 1):
        prod *= 1.0 - k / i
    return 1.0 - prod


class BestOfN(NamedTuple):
    index: int  # position of the best candidate (the first one on ties)
    candidate: Any
    reward: float


def _finite_rewards(rewards, n: int) -> list[float]:
    vals = rewards.tolist() if hasattr(rewards, "tolist") else list(rewards)
    if len(vals) != n:
        raise ValueError(f"{len(vals)} rewards for {n} candidates")
    out = []
    for v in vals:
        f = float("nan") if v is None else float(v)
        if math.isinf(f):
            raise ValueError("rewards must be finite (None/NaN marks an unscorable candidate)")
        out.append(f)
    return out


def best_of_n(candidates: Sequence[Any], rewards) -> BestOfN:
    """Best-of-N (inference-time selection): the candidate with the highest reward, the first on ties.

    ``rewards``: one per candidate; ``None``/NaN (unscorable) candidates are never picked.
    Raises ``ValueError`` for no candidates, a length mismatch, inf, or no scorable candidate.
    """
    cands = list(candidates)
    if not cands:
        raise ValueError("best_of_n needs at least one candidate")
    r = _finite_rewards(rewards, len(cands))
    scored = [i for i, v in enumerate(r) if not math.isnan(v)]
    if not scored:
        raise ValueError("no candidate has a reward (all None/NaN)")
    best = max(scored, key=lambda i: (r[i], -i))
    return BestOfN(best, cands[best], r[best])


def rejection_sample(groups: Sequence[Sequence[Any]], rewards: Sequence[Sequence[float]], k: int,
                     min_reward: float | None = None) -> list[list[Any]]:
    """Rejection sampling: keep the top-``k`` completions of each group by reward (highest first, ties by position).

    ``groups[g]`` is a group of completions and ``rewards[g]`` their rewards; ``None``/NaN rewards are
    rejected, and so is anything below ``min_reward`` when given (a group may then keep fewer than ``k``).
    Returns one list per group.  Raises ``ValueError`` for ``k < 1`` or mismatched lengths.
    """
    k = _check_int("k", k, 1)
    if len(groups) != len(rewards):
        raise ValueError(f"{len(groups)} groups but {len(rewards)} reward lists")
    out = []
    for group, rs in zip(groups, rewards):
        items = list(group)
        r = _finite_rewards(rs, len(items))
        order = sorted((i for i, v in enumerate(r) if not math.isnan(v)
                        and (min_reward is None or v >= min_reward)), key=lambda i: (-r[i], i))
        out.append([items[i] for i in order[:k]])
    return out
