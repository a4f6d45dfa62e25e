"""The last-number extractor never gives a wrong number: hand cases, and a grammar of numbers fuzzed against an
exact reference.

The grammar writes a number (integers with and without thousands separators, decimals, signs, fractions,
scientific notation, LaTeX, malformed near-misses) together with its exact value -- or with ``None`` where the
text is not one number we can read exactly -- embeds it in prose, and checks that ``last_number``,
``extract_answer`` (bare and inside ``<answer>`` tags) and ``arithmetic_reward`` agree with that value.  Fuzzing:
FUZZ_CASES hypothesis cases in all, each test's max_examples set explicitly.
"""

from __future__ import annotations

import inspect
import time
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grpo_lessons.core.rewards import arithmetic_reward, extract_answer, last_number, parse_number
from grpo_lessons.core.rewards.extract import MAX_EXPONENT

FUZZ = {"grammar": 1200, "soup": 400}
FUZZ_CASES = sum(FUZZ.values())

F = Fraction

# ------------------------------------------------------------------------------------------- hand cases
# (text, exact value or None).  The first seven are the review's cases; each gave a wrong number before
# (1/2 -> 2, x = 7/2 -> 2, 1e3 -> 3, 2.5e-3 -> -3, 9**9**9 -> 9, 3.14.15 -> 15, 1,00 -> 0).
CASES = [
    ("1/2", F(1, 2)), ("x = 7/2", F(7, 2)), ("1e3", 1000), ("2.5e-3", F(1, 400)), ("9**9**9", None),
    ("3.14.15", None), ("1,00", None),
    # fractions
    ("7 / 2", F(7, 2)), ("-1/2", F(-1, 2)), ("1/-2", F(-1, 2)), ("10 ÷ 4", F(5, 2)), ("1,000/3", F(1000, 3)),
    ("so 1/2.", F(1, 2)), ("1/0", None), ("12/25/2023", None), ("3/4/", None), ("y / 2", None),
    ("3 1/2", None), ("2*7/2", None), ("2 \\cdot 7/2", None), ("5/hour", 5),
    # scientific notation
    ("1E+5", 100000), ("-4.5e2", -450), (".5e1", 5), ("1e30", 10**30), ("1e-30", F(1, 10**30)),
    ("1e31", None), ("1e999999", None), ("1e5e3", None),
    # malformed
    ("2**10", None), ("2^10", None), ("1.2.3", None), ("3,5", None), ("1,2,3", None), ("1.234,5", None),
    ("1,2345", None), ("1234,567", None), ("--5", None), ("+-5", None), ("-+5", None), ("5--3", None),
    ("0x1F", None), ("0xAB12", None), ("0b101", None), ("1_000", None), ("10:30", None), ("1..5", None),
    ("so...5", None), ("so \\frac12", None), ("\\sqrt 2", None), ("x_2", None), ("9" * 41, None),
    # unchanged readings
    ("23-5=18", 18), ("5-3", 3), ("+5", 5), ("1, 2, 3", 3), ("42.", 42), ("(42)", 42), ("50%", 50),
    ("$1,234.50", F(2469, 2)), ("\u22125", -5), ("-.5", F(-1, 2)), ("5e", 5), ("the 0x", 0),
]


@pytest.mark.parametrize("text, want", CASES)
def test_last_number_reads_exactly_or_not_at_all(text, want):
    want = None if want is None else F(want)
    assert last_number(text) == want
    assert extract_answer(f"We worked hard. So {text}") == want
    if not any(c in text for c in "\\^{}"):  # (LaTeX inside a tag is read by latex_number, exactly)
        assert extract_answer(f"<answer>{text}</answer>") == want


def test_rewards_no_longer_pay_a_piece_of_a_number():
    texts = ["x = 7/2", "1e3", "2.5e-3", "9**9**9", "3.14.15", "1,00"]
    assert arithmetic_reward(texts, answer=[2, 3, -3, 9, 15, 0]) == [0.0] * 6            # all paid 1.0 before
    assert arithmetic_reward(texts, answer=["7/2", 1000, 0.0025, 0, 0, 0]) == [1.0, 1.0, 1.0, 0.0, 0.0, 0.0]


# ------------------------------------------------------------------------------------------- the grammar

_digits = st.text(alphabet="0123456789", min_size=1, max_size=6)


@st.composite
def _unsigned(draw):
    """(text, value): an integer (maybe with thousands separators), a decimal, or a leading-dot decimal."""
    kind = draw(st.sampled_from(["int", "int,", "dec", "dec,", "dot"]))
    n = draw(st.integers(0, 10**12))
    whole = f"{n:,}" if kind.endswith(",") else str(n)
    if kind.startswith("int"):
        return whole, F(n)
    frac = draw(_digits)
    if kind == "dot":
        return "." + frac, F("0." + frac)
    return f"{whole}.{frac}", F(f"{n}.{frac}")


@st.composite
def _signed(draw, signs=("", "-", "\u2212", "+")):
    text, value = draw(_unsigned())
    sign = draw(st.sampled_from(signs))
    return sign + text, -value if sign in ("-", "\u2212") else value


@st.composite
def _scientific(draw):
    text, value = draw(_signed())
    e = draw(st.integers(-MAX_EXPONENT, MAX_EXPONENT))
    mark = draw(st.sampled_from(["e", "E"]))
    plus = draw(st.sampled_from(["", "+"])) if e >= 0 else ""
    return f"{text}{mark}{plus}{e}", value * F(10) ** e


@st.composite
def _fraction(draw):
    num, a = draw(st.one_of(_signed(), _scientific()))
    den, b = draw(_signed(signs=("", "-", "\u2212")))
    slash = draw(st.sampled_from(["/", " / ", "/ ", " /", " ÷ "]))
    return f"{num}{slash}{den}", None if b == 0 else a / b


@st.composite
def _malformed(draw):
    """A near-miss: something that looks like a number but is not one number we can read exactly."""
    a = draw(st.integers(0, 999))
    b = draw(_digits)
    c = draw(st.integers(1, 999))
    kind = draw(st.sampled_from(["dots", "comma", "comma4", "power", "power2", "caret", "signs", "exp_big", "exp2",
                                 "chain", "zero_den", "mixed", "product", "divisor", "hex", "underscore", "time",
                                 "range", "ellipsis", "latex_frac", "latex_power", "latex_cmd", "too_long"]))
    bad_group = draw(st.text(alphabet="0123456789", min_size=1, max_size=5).filter(lambda g: len(g) != 3))
    return {
        "dots": f"{a}.{b}.{c}",                                        # 3.14.15, 1.2.3
        "comma": f"{a},{bad_group}",                                   # 1,00  3,5  1,2345
        "comma4": f"{draw(st.integers(1000, 10**6))},{c:03d}",          # 1234,567
        "power": f"{a}**{c}",
        "power2": f"{a}**{c}**{a}",                                    # 9**9**9
        "caret": f"{a}^{c}",
        "signs": draw(st.sampled_from(["--", "+-", "-+", "\u2212\u2212", f"{a}--"])) + str(c),
        "exp_big": f"{a}e{draw(st.sampled_from(['', '+', '-']))}{draw(st.integers(MAX_EXPONENT + 1, 10**6))}",
        "exp2": f"{a}e{c}e{a}",
        "chain": f"{a}/{c}/{c}",                                        # 12/25/2023
        "zero_den": f"{a}/{draw(st.sampled_from(['0', '0.0', '000', '-0', '0e5']))}",
        "mixed": f"{a} {c}/{c + 1}",                                    # 3 1/2
        "product": f"{a}{draw(st.sampled_from(['*', ' * ', '×', ' × ']))}{c}/{c + 1}",
        "divisor": f"{draw(st.sampled_from(['y', 'x', ')', 'n']))}{draw(st.sampled_from(['/', ' / ']))}{c}",
        "hex": "0" + draw(st.sampled_from("xXbBoO")) + draw(st.text(alphabet="0123456789abcdefABCDEF", min_size=1,
                                                                       max_size=6)),
        "underscore": f"{a}_{c:03d}",                                    # 1_000
        "time": f"{a % 24}:{c % 60:02d}",                               # 10:30
        "range": f"{a}..{c}",
        "ellipsis": f"so...{c}",
        "latex_frac": draw(st.sampled_from([f"\\frac{{{a}}}{{{c}}}", f"\\frac{a % 10}{c % 10}", f"\\dfrac {c}"])),
        "latex_power": f"{a}^{{{c}}}",
        "latex_cmd": draw(st.sampled_from([f"\\sqrt{{{c}}}", f"\\sqrt{c}", f"\\sqrt {c}", f"x_{c}", f"x_{{{c}}}"])),
        "too_long": "9" * draw(st.integers(41, 80)),
    }[kind], None


_number = st.one_of(_signed(), _scientific(), _fraction(), _malformed())

_WORDS = ["So", "the answer is", "I think", "Therefore we get", "Total:", "Let me check.", "First", "then",
          "apples", "in all", "Hence", "wait"]
# Prose ends with a word: "123 1/2" would be a mixed number (no answer), which is a different case.
_prose = st.tuples(st.lists(st.one_of(st.sampled_from(_WORDS), st.integers(0, 10**6).map(str)), max_size=6),
                   st.sampled_from(_WORDS)).map(lambda t: " ".join(t[0] + [t[1]]))
_connector = st.sampled_from([" ", " = ", ": ", " is ", " (", " $", "\n", " =", " :", " x = "])
_suffix = st.sampled_from(["", ".", "!", "?", ",", ", done.", " apples.", ")", "%", "\n", ". Next step.", "...",
                           " dollars", ";"])


@settings(max_examples=FUZZ["grammar"], deadline=None)
@given(_prose, _connector, _number, _suffix)
def test_fuzz_grammar_of_numbers_in_prose(prose, connector, number, suffix):
    """Exactly the reference value, or None where the reference says the text is not one readable number."""
    text, want = number
    doc = f"{prose}{connector}{text}{suffix}"
    got = last_number(doc)
    assert got == want, (doc, got, want)
    assert extract_answer(doc) == want
    if not any(c in text for c in "\\^{}"):  # LaTeX in a tag is latex_number's (exact values, tested elsewhere)
        assert extract_answer(f"{prose} <answer>{text}{suffix.strip()}</answer>") == want
    if want is not None:
        assert arithmetic_reward([doc], answer=[want]) == [1.0]
        assert parse_number(text) == want  # a gold answer written the same way parses to the same value
    decoy = last_number(prose)
    if decoy is not None and decoy != want:  # never a fall-back to an earlier number
        assert arithmetic_reward([doc], answer=[decoy]) == [0.0]


# ------------------------------------------------------------------------------------------- bounded work

_SOUP = list("0123456789.,-+/eE*^ x_:") + ["e999999", "9" * 30, "\\frac", "{", "}", "**", "÷", "\u2212"]


@settings(max_examples=FUZZ["soup"], deadline=None)
@given(st.lists(st.sampled_from(_SOUP), max_size=60).map("".join))
def test_fuzz_number_soup_is_bounded(s):
    """Any soup of number characters: a Fraction of bounded size or None, never an exception."""
    for v in (last_number(s), extract_answer(s), parse_number(s)):
        assert v is None or isinstance(v, Fraction)
        if v is not None:  # at most 40 characters of mantissa and |exponent| <= MAX_EXPONENT, per part
            assert abs(v.numerator) < 10 ** (2 * (40 + MAX_EXPONENT)) and v.denominator < 10 ** (2 * (40 + MAX_EXPONENT))


def test_huge_exponents_and_long_texts_stay_fast():
    texts = ["1e" + "9" * 5000, ("1e999999 " * 3000), "9**" * 20000, "1/" * 20000 + "2", "1," * 20000,
             "3." * 20000, "-" * 20000 + "5"]
    for t in texts:
        t0 = time.perf_counter()
        assert last_number(t) is None and extract_answer(t) is None
        assert time.perf_counter() - t0 < 5.0  # generous: the machine is shared; the work is linear


def test_fuzz_case_count():
    assert FUZZ_CASES == 1600
    src = inspect.getsource(inspect.getmodule(test_fuzz_case_count))
    assert src.count("\n@settings(max_examples=FUZZ[") == len(FUZZ)
