"""Answer extraction from untrusted model text: ``<answer>`` tags, ``\\boxed{}``, the last number.

Everything here is total: any input (``None``, a dict, 10 MB of text, unicode) gives a result or
``None``, never an exception.  Only ASCII digits count as digits (``re.ASCII``), so look-alike
unicode digits never match by accident.
"""

from __future__ import annotations

import re
from fractions import Fraction

__all__ = [
    "MAX_CHARS",
    "completion_text",
    "answer_tag",
    "boxed",
    "last_number",
    "parse_number",
    "extract_answer",
]

#: Only the last ``MAX_CHARS`` characters of a completion are searched (answers come at the end;
#: this bounds the work a pathological completion can cause).
MAX_CHARS = 20_000
_MAX_NUMBER_CHARS = 40  # a "number" longer than this is not an answer anybody asked for

_OPEN = re.compile(r"<answer>", re.IGNORECASE)
_CLOSE = re.compile(r"</answer>", re.IGNORECASE)
# A number: optional minus (not when it follows a digit or ")" -- that is subtraction), thousands
# separators, optional decimals.  "23-5=18" -> 23, 5, 18;  "-7" -> -7;  "1,234.5" -> 1234.5.
_NUMBER = re.compile(r"(?:(?<![0-9)\]])-)?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?", re.ASCII)


def completion_text(completion) -> str:
    """The text of one completion: a string, or TRL's conversational ``[{"role": "assistant", "content": ...}]``.

    Content given as a list of parts (``[{"type": "text", "text": ...}]``) is joined; anything else gives ``""``.
    """
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        return _content_text(completion.get("content"))
    if isinstance(completion, (list, tuple)):
        # The assistant's turn(s); a message without a role still counts.
        parts = [
            _content_text(m.get("content"))
            for m in completion
            if isinstance(m, dict) and m.get("role", "assistant") == "assistant"
        ]
        return "\n".join(p for p in parts if p)
    return ""


def _content_text(content) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, (list, tuple)):
        return "".join(p.get("text", "") if isinstance(p, dict) and isinstance(p.get("text"), str) else ""
                       for p in content)
    return ""


def _tail(text: str) -> str:
    return text[-MAX_CHARS:] if len(text) > MAX_CHARS else text


def answer_tag(text: str) -> str | None:
    """Content of the last ``<answer>...</answer>`` (stripped), or ``None``."""
    if not isinstance(text, str):
        return None
    # Linear time: the last closing tag, then the last opening tag before it.  (A lazy regex over
    # "<answer>" * 2500 takes seconds: every opening tag would scan to the end.)
    text = _tail(text)
    closes = [m.start() for m in _CLOSE.finditer(text)]
    if not closes:
        return None
    opens = [m.end() for m in _OPEN.finditer(text, 0, closes[-1])]
    return text[opens[-1]:closes[-1]].strip() if opens else None


def boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` with balanced braces, or ``None``."""
    if not isinstance(text, str):
        return None
    text = _tail(text)
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    i, depth, begin = start + len("\\boxed{"), 1, start + len("\\boxed{")
    while i < len(text):
        ch = text[i]
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return text[begin:i].strip()
        i += 1
    return None  # unbalanced


def parse_number(s) -> Fraction | None:
    """An exact number from a short string: ``"1,234"``, ``"-5"``, ``"2.50"``, ``"$72"``, ``7`` -> ``Fraction``.

    Integers and finite floats are accepted too.  Anything that is not one number gives ``None``.
    """
    if isinstance(s, bool):
        return None
    if isinstance(s, int):
        return Fraction(s)
    if isinstance(s, float):
        return Fraction(s) if s == s and abs(s) != float("inf") else None
    if isinstance(s, Fraction):
        return s
    if not isinstance(s, str) or len(s) > 4 * _MAX_NUMBER_CHARS:
        return None
    t = s.strip().strip("$").strip().rstrip(".").replace("\\,", "").replace("\\!", "")
    if t.startswith("\\$"):
        t = t[2:]
    m = _NUMBER.fullmatch(t)
    if not m or len(t) > _MAX_NUMBER_CHARS:
        return None
    try:
        return Fraction(t.replace(",", ""))
    except (ValueError, ZeroDivisionError):
        return None


def last_number(text: str) -> Fraction | None:
    """The last number in ``text`` (see ``parse_number`` for the forms), or ``None``."""
    if not isinstance(text, str):
        return None
    for m in reversed(list(_NUMBER.finditer(_tail(text)))):
        value = parse_number(m.group(0))
        if value is not None:
            return value
        return None  # the last number-looking token is unusable (e.g. 60 digits): no answer
    return None


def extract_answer(text: str) -> Fraction | None:
    """The model's final answer: the last ``<answer>`` tag, else the last ``\\boxed{}``, else the last number.

    Inside a tag or box the last number counts (``<answer>2 + 3 = 5</answer>`` -> 5).
    """
    if not isinstance(text, str):
        return None
    for inner in (answer_tag(text), boxed(text)):
        if inner is not None:
            return last_number(inner)
    return last_number(text)
