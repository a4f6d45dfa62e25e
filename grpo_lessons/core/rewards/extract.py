"""Answer extraction from untrusted model text: ``<answer>`` tags, ``\\boxed{}``, the last number.

Everything here is total: any input (``None``, a dict, 10 MB of text, unicode) gives a result or
``None``, never an exception.  Only ASCII digits count as digits (``re.ASCII``), so look-alike
unicode digits never match by accident.

**The rule: never a wrong number.**  A number is read exactly (as a ``Fraction``) or not at all: when the
last number-looking thing in a text is not one number we can read exactly, the answer is ``None`` ("no
answer", reward 0) -- we never fall back to an earlier number or to a piece of the last one.

Read exactly:

* integers and signs: ``42``, ``-7``, ``+5``, ``−5`` (a unicode minus is a minus);
* thousands separators in groups of exactly three: ``1,234``, ``1,234,567.5``;
* decimals, as decimals (no float): ``2.50`` -> 5/2, ``.5``, ``-.5``;
* scientific notation with ``|exponent| <= MAX_EXPONENT`` (30): ``1e3`` -> 1000, ``2.5e-3`` -> 1/400, ``1E+5``;
* a fraction is one number: ``1/2``, ``x = 7/2``, ``7 / 2``, ``-1/2``, ``1/-2``, ``10 ÷ 4`` -> 5/2;
* punctuation and units around a number are not part of it: ``42.``, ``(42)``, ``42%``, ``$42`` -> 42;
* a minus right after a digit is subtraction, and the last number counts: ``23-5=18`` -> 18, ``5-3`` -> 3.

No answer (``None``), because reading a piece would give a wrong number:

* an exponent out of bounds: ``1e999999``, ``1e31`` (nothing huge is ever built); a second exponent ``1e5e3``;
* powers in prose: ``9**9**9``, ``2**10``, ``2^10`` (``\\boxed{2^{10}}`` is read, by :func:`latex_number`);
* dotted chains (versions, section numbers): ``3.14.15``, ``1.2.3``;
* a comma that is not a thousands separator (a decimal comma? a list?): ``1,00``, ``3,5``, ``1,2,3``, ``1,2345``;
* two signs in a row: ``--5``, ``+-5``, ``5--3``;
* a zero denominator ``1/0``; chains of slashes ``12/25/2023``, ``3/4/``; a mixed number ``3 1/2``;
* a divisor with no numeral numerator ``y / 2``; a fraction inside a product ``2*7/2`` (that is 7, not 7/2);
* hex, binary and octal literals ``0x1F``, ``0b101``; underscores ``1_000``; times and ratios ``10:30``;
* a leading-dot decimal right after a dot (a range, an ellipsis): ``1..5``, ``so...5``;
* LaTeX markup in prose: ``\\frac{1}{2}``, ``\\frac12``, ``\\sqrt 2``, ``x_2`` (:func:`latex_number` reads
  markup inside a box or tag);
* a number token over 40 characters.

A space or a comma followed by a space separates numbers: ``1, 2, 3`` -> 3, ``1 000`` -> 0 (the last number;
a space as a thousands separator is not recognised).  Inside ``<answer>`` / ``\\boxed{}`` the same rules
apply to the content; LaTeX there goes to :func:`latex_number`.
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
    "MAX_EXPONENT",
]

#: Only the last ``MAX_CHARS`` characters of a completion are searched (answers come at the end;
#: this bounds the work a pathological completion can cause).
MAX_CHARS = 20_000
_MAX_NUMBER_CHARS = 40  # a "number" longer than this is not an answer anybody asked for

_OPEN = re.compile(r"<answer>", re.IGNORECASE)
_CLOSE = re.compile(r"</answer>", re.IGNORECASE)
# A number token: optional minus (not when it follows a digit or ")" -- that is subtraction), thousands
# separators, optional decimals, optional exponent.  "23-5=18" -> 23, 5, 18;  "-7" -> -7;  "1,234.5" -> 1234.5.
# A leading-dot decimal (".5") is one number, 0.5, not the 5 after a stray dot.  Whether the last token is a
# whole number (and not a piece of "3.14.15" or "9**9**9") is decided by its context (_unreadable).
_MANTISSA = r"(?:(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|(?<![0-9])\.\d+)"
_TOKEN = r"(?:(?<![0-9)\]])-)?" + _MANTISSA + r"(?:[eE][+-]?\d+)?"
_NUMBER = re.compile(_TOKEN, re.ASCII)
# One numeral as parse_number reads it: a token, or a fraction of two tokens ("7/2", "7 / 2", "7 ÷ 2").
_NUMERAL = re.compile(r"(" + _TOKEN + r")(?:\s*[/÷]\s*(" + _TOKEN + r"))?", re.ASCII)
_SLASH = re.compile(r"\s*[/÷]\s*")
# What may not touch a number on its left or right (see the module docstring's table).
_BAD_LEFT = re.compile(
    r"(?:[0-9]"                          # a digit: the token is the tail of a malformed run ("1,2345")
    r"|[0-9][.,_:]"                      # 3.14.15, 1,00, 1_000, 10:30
    r"|[0-9][eE][+-]?"                   # 1e5e3: a second exponent
    r"|0[xXbBoO][0-9a-fA-F]*"            # 0x1F, 0xAB12, 0b101, 0o17
    r"|\\[A-Za-z]+"                      # \frac12, \sqrt2: a LaTeX command's argument
    r"|\\(?:[dt]?frac|sqrt|binom)\s+"      # \frac 12
    r"|(?:\*\*|[\^{_])\s*"                # 9**9**9, 2^10, \frac{1}{2}, x_2
    r")$", re.ASCII)
_BAD_RIGHT = re.compile(r"\s*(?:\*\*|[\^}])|[eE][+-]?[0-9]", re.ASCII)  # 2**10, 2^{10}, {2}, 1e5e3
_PRODUCT = re.compile(r"(?:[*×·]|\\cdot|\\times)\s*$")
_MIXED = re.compile(r"[0-9]\s+$", re.ASCII)
_HEX_TAIL = re.compile(r"[xXbBoO][0-9a-fA-F]", re.ASCII)
# Unicode minus signs read as ASCII "-" ("−5" is minus five, not five).  Dashes (– —) are left alone:
# in prose they are ranges and punctuation more often than signs.
_MINUS = str.maketrans({"\u2212": "-", "\ufe63": "-", "\uff0d": "-"})
#: Largest ``|exponent * log10(|base|)|`` a LaTeX power may have (``2^{10}`` is fine, ``9^{9^{9}}`` is no answer).
MAX_POWER_DIGITS = 30
#: Largest ``|exponent|`` of scientific notation (``1e30`` is read, ``1e31`` and ``1e999999`` are no answer).
MAX_EXPONENT = MAX_POWER_DIGITS


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
    """An exact number from a short string: ``"1,234"``, ``"-5"``, ``"−5"``, ``".5"``, ``"2.50"``, ``"$72"``,
    ``"1e3"``, ``"2.5e-3"``, ``"7/2"``, ``7`` -> ``Fraction`` (the forms of the module docstring's table).

    Integers (Python's, numpy's: any ``numbers.Integral``) and finite floats are accepted too.  A float is
    read as the decimal it prints as (``0.1`` -> 1/10, ``19.99`` -> 1999/100), not as its binary value
    (``Fraction(0.1)`` is 3602879701896397/36028797018963968 and would never equal the text "0.1").
    Anything that is not one number -- ``"3.14.15"``, ``"1,00"``, ``"--5"``, ``"1/0"``, ``"1e999999"`` --
    gives ``None``.
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
    if t[:1] == "+" and t[1:2] not in ("+", "-"):
        t = t[1:]  # "+5" is 5 ("+-5" stays unreadable)
    m = _NUMERAL.fullmatch(t)
    if not m:
        return None
    value = _token_value(m.group(1))
    if m.group(2) is None or value is None:
        return value
    return _divide(value, _token_value(m.group(2)))


def _token_value(tok: str) -> Fraction | None:
    """The exact value of one ``_NUMBER`` token, or ``None`` when it is too long or its exponent too large."""
    if len(tok) > _MAX_NUMBER_CHARS:
        return None
    mantissa, _, exponent = tok.lower().replace(",", "").partition("e")
    try:
        value = Fraction(mantissa)
        exp = int(exponent) if exponent else 0
    except (ValueError, ZeroDivisionError):
        return None
    if abs(exp) > MAX_EXPONENT:
        return None  # bounded: 1e999999 is never built
    return value * Fraction(10) ** exp


def _divide(num: Fraction | None, den: Fraction | None) -> Fraction | None:
    if num is None or den is None or den == 0:
        return None
    return num / den


def _normalise(text: str) -> str:
    """Unicode minus -> "-", LaTeX's ``{,}`` thousands separator -> ","."""
    return text.translate(_MINUS).replace("{,}", ",")


def last_number(text: str) -> Fraction | None:
    """The last number in ``text``, exactly, or ``None`` (the table in the module docstring).

    The last number-looking token decides: if it is not one number we can read exactly -- a piece of
    ``3.14.15``, ``1,00``, ``9**9**9``, LaTeX markup (``\\frac{1}{2}``, ``2^{10}``), an exponent out of bounds --
    the answer is ``None``, never an earlier number or a part of it.  ``a/b`` is the fraction ``a/b``.
    Use :func:`latex_number` on markup.
    """
    if not isinstance(text, str):
        return None
    text = _normalise(_tail(text))
    last = prev = None
    for m in _NUMBER.finditer(text):
        last, prev = m, last
    if last is None or _unreadable(text, last):
        return None
    value = _token_value(last.group(0))
    left = text[max(0, last.start() - 8):last.start()]
    if not (left.rstrip().endswith("/") or left.rstrip().endswith("÷")):
        return value
    # "7/2", "7 / 2": a fraction, if a numeral stands right before the slash and nothing chains on either side
    if (prev is None or not _SLASH.fullmatch(text, prev.end(), last.start()) or _unreadable(text, prev)
            or text[last.end():last.end() + 1] == "/"):
        return None  # "y / 2" (no numerator), "1/2/3" is caught below, "3/4/" chains on the right
    before = text[max(0, prev.start() - 16):prev.start()]
    if before.rstrip().endswith(("/", "÷")) or _PRODUCT.search(before) or _MIXED.search(before):
        return None  # 12/25/2023, 2*7/2 (= 7, not 7/2), 3 1/2 (a mixed number)
    return _divide(_token_value(prev.group(0)), value)


def _unreadable(text: str, m: re.Match) -> bool:
    """Whether the token ``m`` is part of something that is not one number (``3.14.15``, ``--5``, ``0x1F``, ...)."""
    s, e = m.start(), m.end()
    left = text[max(0, s - 16):s]
    if _BAD_LEFT.search(left) or _BAD_RIGHT.match(text, e):
        return True
    if m.group(0).startswith(".") and left.endswith("."):
        return True  # 1..5, so...5: a range or an ellipsis, not 0.5
    digits = s + 1 if m.group(0).startswith("-") else s
    if digits >= 2 and text[digits - 1] in "+-" and text[digits - 2] in "+-":
        return True  # --5, +-5, 5--3
    if m.group(0).lstrip("-") == "0" and _HEX_TAIL.match(text, e):
        return True  # 0xFF
    return False


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
