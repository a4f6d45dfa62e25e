"""Evaluate untrusted arithmetic (``"(25 - 5) * 4 / 2"``) without ``eval``: a character filter, ``ast.parse``
(parsing only -- nothing is compiled or run), a node whitelist, and bounds on size, depth and magnitude.

Allowed: non-negative integer literals, ``+ - * /`` (``×`` ``÷`` ``−`` are read as their ASCII forms),
parentheses, unary minus/plus.  Not allowed: ``**`` (``9**9**9`` would never finish), ``//``, ``%``,
names, calls, attributes, floats, strings -- anything else.  Arithmetic is exact (``Fraction``).
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from dataclasses import dataclass
from fractions import Fraction

__all__ = ["ArithResult", "safe_arith", "uses_only"]

MAX_LEN = 256        # characters of expression
MAX_NODES = 128      # AST nodes
MAX_DEPTH = 32       # AST nesting
MAX_LITERAL = 10**9  # largest integer literal
MAX_ABS = 10**15     # largest |numerator| or denominator of any intermediate value

_UNICODE_OPS = str.maketrans({"×": "*", "·": "*", "∗": "*", "⋅": "*", "÷": "/", "∕": "/",
                              "−": "-", "–": "-", "—": "-", "﹣": "-", "＋": "+"})
_ALLOWED_CHARS = re.compile(r"[0-9+\-*/()\s]*", re.ASCII)
_BINOPS = (ast.Add, ast.Sub, ast.Mult, ast.Div)
_UNARY = (ast.USub, ast.UAdd)


@dataclass(frozen=True)
class ArithResult:
    """A successfully evaluated expression: its exact value and the integer literals it used, in order."""

    value: Fraction
    literals: tuple[int, ...]


class _Reject(Exception):
    pass


def safe_arith(expr, *, max_len: int = MAX_LEN, max_nodes: int = MAX_NODES, max_depth: int = MAX_DEPTH,
               max_literal: int = MAX_LITERAL, max_abs: int = MAX_ABS) -> ArithResult | None:
    """Exact value of an arithmetic expression, or ``None`` for anything outside the whitelist.

    Never raises and never executes code: the string is filtered to digits, ``+-*/()`` and spaces
    before ``ast.parse`` sees it, and the tree is walked by hand.  Division by zero, ``**``,
    more than ``max_nodes`` nodes, nesting deeper than ``max_depth``, a literal above ``max_literal``
    or an intermediate value beyond ``max_abs`` all give ``None``.
    """
    if not isinstance(expr, str) or len(expr) > max_len:
        return None
    expr = expr.translate(_UNICODE_OPS).strip()
    if not expr or not _ALLOWED_CHARS.fullmatch(expr) or "**" in expr or "//" in expr:
        return None
    try:
        tree = ast.parse(expr, mode="eval")
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None
    if not _within_bounds(tree, max_nodes, max_depth):
        return None
    literals: list[int] = []
    try:
        value = _eval(tree.body, literals, max_literal, max_abs)
    except (_Reject, ZeroDivisionError, RecursionError, ValueError, OverflowError):
        return None
    return ArithResult(value, tuple(literals))


def _within_bounds(tree: ast.AST, max_nodes: int, max_depth: int) -> bool:
    """Count nodes and depth with an explicit stack (no recursion on untrusted depth)."""
    stack, seen = [(tree, 1)], 0
    while stack:
        node, depth = stack.pop()
        seen += 1
        if seen > max_nodes or depth > max_depth:
            return False
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))
    return True


def _eval(node: ast.AST, literals: list[int], max_literal: int, max_abs: int) -> Fraction:
    # Recursion here is bounded by _within_bounds (depth <= max_depth).
    if isinstance(node, ast.Constant):
        v = node.value
        if type(v) is not int or v < 0 or v > max_literal:  # no bools, floats, strings, huge literals
            raise _Reject
        literals.append(v)
        return Fraction(v)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, _UNARY):
        v = _eval(node.operand, literals, max_literal, max_abs)
        return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, ast.BinOp) and isinstance(node.op, _BINOPS):
        left = _eval(node.left, literals, max_literal, max_abs)
        right = _eval(node.right, literals, max_literal, max_abs)
        if isinstance(node.op, ast.Add):
            out = left + right
        elif isinstance(node.op, ast.Sub):
            out = left - right
        elif isinstance(node.op, ast.Mult):
            out = left * right
        else:
            if right == 0:
                raise _Reject
            out = left / right
        if abs(out.numerator) > max_abs or out.denominator > max_abs:
            raise _Reject
        return out
    raise _Reject  # Name, Call, Attribute, Pow, FloorDiv, Mod, Compare, ... : not arithmetic we allow


def uses_only(literals, numbers) -> bool:
    """True when every literal is one of ``numbers``, each used at most as often as it is given."""
    try:
        have = Counter(int(n) for n in numbers)
    except (TypeError, ValueError):
        return False
    need = Counter(literals)
    return all(have[k] >= c for k, c in need.items())
