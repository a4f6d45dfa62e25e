"""Answer extraction from untrusted model text: ``<answer>`` tags, ``\\boxed{}``, the last number.

Everything here is total: any input (``None``, a dict, 10 MB of text, unicode) gives a result or
``None``, never an exception.  Only ASCII digits count as digits (``re.ASCII``), so look-alike
unicode digits never match by accident.
"""

from __future__ import annotations

import math
import numbers
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
    "latex_number",
    "MAX_POWER_DIGITS",
]

#: Only the last ``MAX_CHARS`` characters of a completion are searched (answers come at the end;
#: this bounds the work a pathological completion can cause).
MAX_CHARS = 20_000
_MAX_NUMBER_CHARS = 40  # a "number" longer than this is not an answer anybody asked for

_OPEN = re.compile(r"<answer>", re.IGNORECASE)
_CLOSE = re.compile(r"</answer>", re.IGNORECASE)
# A number: optional minus (not when it follows a digit or ")" -- that is subtraction), thousands
# separators, optional decimals.  "23-5=18" -> 23, 5, 18;  "-7" -> -7;  "1,234.5" -> 1234.5.
# A leading-dot decimal (".5") is one number, 0.5, not the 5 after a stray dot.
_NUMBER = re.compile(r"(?:(?<![0-9)\]])-)?(?:(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|(?<![0-9])\.\d+)", re.ASCII)
# Unicode minus signs read as ASCII "-" ("−5" is minus five, not five).  Dashes (– —) are left alone:
# in prose they are ranges and punctuation more often than signs.
_MINUS = str.maketrans({"\u2212": "-", "\ufe63": "-", "\uff0d": "-"})
#: Largest ``|exponent * log10(|base|)|`` a LaTeX power may have (``2^{10}`` is fine, ``9^{9^{9}}`` is no answer).
MAX_POWER_DIGITS = 30


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
    """An exact number from a short string: ``"1,234"``, ``"-5"``, ``"−5"``, ``".5"``, ``"2.50"``, ``"$72"``, ``7`` -> ``Fraction``.

    Integers (Python's, numpy's: any ``numbers.Integral``) and finite floats are accepted too.  A float is
    read as the decimal it prints as (``0.1`` -> 1/10, ``19.99`` -> 1999/100), not as its binary value
    (``Fraction(0.1)`` is 3602879701896397/36028797018963968 and would never equal the text "0.1").
    Anything that is not one number gives ``None``.
    """
    if isinstance(s, (bool,)) or type(s).__name__ == "bool_":
        return None
    if isinstance(s, Fraction):
        return s
    if isinstance(s, numbers.Integral):
        return Fraction(int(s))
    if isinstance(s, numbers.Real) and not isinstance(s, numbers.Rational):
        f = float(s)
        if not math.isfinite(f):
            return None
        try:  # str() of a numpy float32 is its short decimal ("0.1"); repr(float(.)) would be 0.10000000149...
            return Fraction(str(s))
        except (ValueError, ZeroDivisionError):
            return Fraction(repr(f))
    if not isinstance(s, str) or len(s) > 4 * _MAX_NUMBER_CHARS:
        return None
    t = s.translate(_MINUS).strip().strip("$").strip().rstrip(".").replace("\\,", "").replace("\\!", "")
    t = t.replace("{,}", ",")
    if t.startswith("\\$"):
        t = t[2:]
    m = _NUMBER.fullmatch(t)
    if not m or len(t) > _MAX_NUMBER_CHARS:
        return None
    try:
        return Fraction(t.replace(",", ""))
    except (ValueError, ZeroDivisionError):
        return None


def _normalise(text: str) -> str:
    """Unicode minus -> "-", LaTeX's ``{,}`` thousands separator -> ","."""
    return text.translate(_MINUS).replace("{,}", ",")


def last_number(text: str) -> Fraction | None:
    """The last number in ``text`` (see ``parse_number`` for the forms), or ``None``.

    A last number that sits inside LaTeX markup (``\\frac{1}{2}``, ``2^{10}``: right after ``{`` ``^`` ``_``
    or right before ``}`` ``^``) is no answer: reading it alone would give a wrong number (2, 10).
    Use :func:`latex_number` on markup.
    """
    if not isinstance(text, str):
        return None
    text = _normalise(_tail(text))
    for m in reversed(list(_NUMBER.finditer(text))):
        before = text[:m.start()].rstrip()[-1:]
        after = text[m.end():].lstrip()[:1]
        if before in ("{", "^", "_") or after in ("}", "^"):
            return None
        value = parse_number(m.group(0))
        if value is not None:
            return value
        return None  # the last number-looking token is unusable (e.g. 60 digits): no answer
    return None


# LaTeX a boxed/tagged answer may carry.  Spacing and sizing commands go; units in \text{} go.
_LATEX_DROP = re.compile(r"\\(?:left|right|displaystyle|[,!;: ])|\\text\{[^{}]{0,40}\}|\\mathrm\{[^{}]{0,40}\}|\\%|%|\\?\$")
_BRACED = r"\{\s*([^{}]{1,40}?)\s*\}"
_FRAC = re.compile(r"\\[dt]?frac\s*(?:" + _BRACED + r"|(\d))\s*(?:" + _BRACED + r"|(\d))")
_POWER = re.compile(r"(\d{1,12}|\(\s*-?\d{1,12}\s*\)|" + _BRACED + r")\s*\^\s*(?:\{\s*(-?\d{1,4})\s*\}|(\d))")


def _power(base: Fraction, exp: int) -> Fraction | None:
    if exp < 0 and base == 0:
        return None
    if abs(base) > 1 and abs(exp) * math.log10(abs(base)) > MAX_POWER_DIGITS:
        return None  # bounded: 9^{99999} is not computed
    return base ** exp


def latex_number(s) -> Fraction | None:
    """One number written in LaTeX, exactly: ``\\frac{1}{2}``, ``-\\dfrac{3}{4}``, ``\\frac12``, ``2^{10}``,
    ``(-2)^{3}``, ``1{,}234``, ``{5}``, ``5\\%``, ``12\\text{ apples}``; plain numbers as :func:`parse_number`.

    Anything else -- a variable, ``\\sqrt``, an unclosed brace, a power past ``10**MAX_POWER_DIGITS`` --
    gives ``None`` ("no answer"), never a wrong number.  Never raises.
    """
    if not isinstance(s, str) or len(s) > 4 * _MAX_NUMBER_CHARS:
        return None
    t = _LATEX_DROP.sub("", _normalise(s)).strip()
    if "=" in t:  # "x = \frac{1}{2}": the value is the right-hand side
        t = t.rsplit("=", 1)[1].strip()
    sign = 1
    while t.startswith("{") and t.endswith("}") and t.count("{") == 1:
        t = t[1:-1].strip()
    if t.startswith("-") and ("\\" in t or "^" in t or "{" in t):
        sign, t = -1, t[1:].strip()
    try:
        m = _FRAC.fullmatch(t)
        if m:
            num = parse_number(m.group(1) if m.group(1) is not None else m.group(2))
            den = parse_number(m.group(3) if m.group(3) is not None else m.group(4))
            if num is None or den is None or den == 0:
                return None
            return sign * num / den
        m = _POWER.fullmatch(t)
        if m:
            base = parse_number(m.group(1).strip("()").strip() if m.group(2) is None else m.group(2))
            exp = int(m.group(3) if m.group(3) is not None else m.group(4))
            if base is None or base.denominator != 1:
                return None
            value = _power(base, exp)
            return None if value is None else sign * value
    except (ValueError, ZeroDivisionError, OverflowError):
        return None
    if any(c in t for c in "\\^{}_"):
        return None  # markup we do not read: no answer rather than a guess
    value = parse_number(t)
    return None if value is None else sign * value


def _inner_answer(inner: str) -> Fraction | None:
    """The answer inside a tag or box: LaTeX markup is read exactly (or not at all); else the last number."""
    if any(c in inner for c in "\\^{}"):
        return latex_number(inner)
    return last_number(inner)


def extract_answer(text: str) -> Fraction | None:
    """The model's final answer: the last ``<answer>`` tag, else the last ``\\boxed{}``, else the last number.

    Inside a tag or box the last number counts (``<answer>2 + 3 = 5</answer>`` -> 5); LaTeX there is read
    by :func:`latex_number` (``\\boxed{\\frac{1}{2}}`` -> 1/2, ``\\boxed{2^{10}}`` -> 1024) or gives no answer.
    """
    if not isinstance(text, str):
        return None
    for inner in (answer_tag(text), boxed(text)):
        if inner is not None:
            return _inner_answer(inner)
    return last_number(text)
