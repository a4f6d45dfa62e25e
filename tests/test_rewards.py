"""Rewards: hand cases, TRL's calling convention, and fuzzing with untrusted model text.

The fuzz tests run FUZZ_CASES examples in total (the sum of the ``max_examples`` below).
"""

import ast
import builtins
import inspect
import math
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import grpo_lessons.core.rewards as R
from grpo_lessons.core.rewards import (
    answer_tag,
    arithmetic_reward,
    boxed,
    check_rewards,
    combine,
    completion_text,
    countdown_expression,
    countdown_reward,
    extract_answer,
    format_reward,
    gsm8k_reward,
    last_number,
    latex_number,
    parse_number,
    reward_matrix,
    safe_arith,
    uses_only,
)

FUZZ = {"text": 400, "arith_chars": 400, "trees": 300, "injection": 300, "nesting": 150, "huge": 100,
        "unicode": 250, "chat": 100, "latex_values": 300, "latex_soup": 300}
FUZZ_CASES = sum(FUZZ.values())  # 2600

INJECTIONS = [
    "__import__('os').system('echo pwned')",
    "__import__('os')",
    "open('/etc/passwd').read()",
    "().__class__.__bases__[0].__subclasses__()",
    "exec('import os')",
    "eval('1+1')",
    "lambda: 1",
    "[x for x in range(10**9)]",
    "9**9**9",
    "2**10000",
    "10**100",
    "(1).__add__(2)",
    "1 if True else 2",
    "a + b",
    "True + True",
    "1e308 * 10",
    "1.5 + 2",
    "1_000 + 2",
    "0x10 + 1",
    "1 // 0",
    "1 / 0",
    "5 % 3",
    "1 << 100",
    "~1",
    "1 < 2",
    "f'{1}'",
    "'1' + '2'",
    "b'1'",
    "1;2",
    "1\n+2",
    "\\x00",
    "(" * 150 + "1" + ")" * 150,
    "-" * 300 + "1",
    "9" * 5000,
    "1/(1-1)",
    "(2 - 2) / (3 - 3)",
]


# --------------------------------------------------------------------------------------------- extraction


@pytest.mark.parametrize("text, want", [
    ("2 + 3 = 5", 5),
    ("The answer is 42.", 42),
    ("23-5=18", 18),
    ("It is -7", -7),
    ("5-3", 3),                       # subtraction, not "-3"
    ("(3)-4", 4),
    ("1,234 apples", 1234),
    ("pay $1,234.50 now", Fraction("1234.5")),
    ("3.0", 3),
    ("no digits here", None),
    ("", None),
    ("x" * 50 + "9" * 60, None),      # a 60-digit "number" is no answer
    ("٣ + ٤ = ٧", None),              # Arabic-Indic digits are not ASCII digits
    ("５", None),                      # fullwidth digit
])
def test_last_number(text, want):
    assert last_number(text) == (None if want is None else Fraction(want))


def test_answer_tag_and_boxed_take_the_last_one():
    assert answer_tag("<answer>1</answer> then <answer> 2 </answer>") == "2"
    assert answer_tag("<ANSWER>3</ANSWER>") == "3"
    assert answer_tag("<answer>unclosed") is None
    assert boxed(r"\boxed{1} and \boxed{\frac{1}{2}}") == r"\frac{1}{2}"
    assert boxed(r"\boxed{12") is None
    assert extract_answer("I think 3. <answer>2 + 3 = 5</answer> wait 9") == 5  # tag beats the last number
    assert extract_answer(r"so \boxed{72} dollars, not 80") == 72
    assert extract_answer("<answer>five</answer> 5") is None                   # a tag without a number is no answer


@pytest.mark.parametrize("s, want", [("72", 72), (" 1,000 ", 1000), ("$5", 5), ("-2.5", Fraction(-5, 2)), (7, 7),
                                     (2.5, Fraction(5, 2)), (True, None), (float("nan"), None), (None, None),
                                     ("12 apples", None), ("1e5", 100000), ("1e999", None), ("7/2", Fraction(7, 2)),
                                     ("3.14.15", None), ("1,00", None), ("--5", None), ("1/0", None)])
def test_parse_number(s, want):
    assert parse_number(s) == (None if want is None else Fraction(want))


def test_completion_text_formats():
    assert completion_text("hi") == "hi"
    assert completion_text([{"role": "assistant", "content": "hi"}]) == "hi"
    assert completion_text([{"role": "assistant", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]) == "ab"
    assert completion_text([{"role": "user", "content": "not mine"}, {"role": "assistant", "content": "mine"}]) == "mine"
    for junk in (None, 5, {"content": None}, [None, 3], [{"role": "assistant", "content": 5}], b"bytes"):
        assert completion_text(junk) == ""


# --------------------------------------------------------------------------------------------- rewards


def test_arithmetic_reward_trl_convention():
    comps = ["2 + 3 = 5", "I think 6", [{"role": "assistant", "content": "<answer>5</answer>"}], None, "5.0"]
    out = arithmetic_reward(comps, answer=[5] * 5, prompts=["p"] * 5, completion_ids=[[1]] * 5, trainer_state=None)
    assert out == [1.0, 0.0, 1.0, 0.0, 1.0]
    assert all(type(x) is float for x in out)
    assert arithmetic_reward(["5", "6"], answer=5) == [1.0, 0.0]          # a scalar answer is broadcast
    assert arithmetic_reward(["1,005"], answer=["1005"]) == [1.0]
    assert arithmetic_reward([], answer=[]) == []


def test_arithmetic_reward_caller_errors_are_value_errors():
    with pytest.raises(ValueError, match="'answer' has 1 entries but there are 2 completions"):
        arithmetic_reward(["1", "2"], answer=[1])
    with pytest.raises(ValueError, match="completions must be a list"):
        arithmetic_reward("5", answer=[5])


def test_gsm8k_reward_reads_the_number_after_hashes():
    sol = "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n#### 72"
    assert gsm8k_reward(["... so the total is 72.", r"\boxed{72}", "<answer>$72</answer>", "71"], answer=[sol] * 4) \
        == [1.0, 1.0, 1.0, 0.0]
    assert gsm8k_reward(["It is 1,234"], answer=["1234"]) == [1.0]


@pytest.mark.parametrize("text, want", [
    ("<answer>5</answer>", 1.0),
    ("  <think>3 + 2</think>\n<answer>5</answer>\n", 1.0),
    ("<answer> </answer>", 0.0),
    ("The answer: <answer>5</answer>", 0.0),     # prose before the tags
    ("<answer>5</answer> and more", 0.0),        # talking after the answer
    ("<answer>5", 0.0),
    ("<answer><answer>5</answer>", 0.0),
    ("5", 0.0),
])
def test_format_reward(text, want):
    assert format_reward([text]) == [want]
    assert format_reward([[{"role": "assistant", "content": text}]]) == [want]


def test_countdown_reward_hand_cases():
    nums, tgt = [3, 5, 2], 16
    cases = {
        "<answer>(3 + 5) * 2</answer>": 1.0,
        "<answer>(3 + 5) * 2 = 16</answer>": 1.0,
        "<answer>16 = 2 * (5 + 3)</answer>": 1.0,
        "So 2 × (3 + 5) = 16.": 1.0,               # unicode times, no tags
        r"\boxed{(5 + 3) * 2}": 1.0,
        "<answer>(3 + 5) * 2 + 0</answer>": 0.0,   # 0 is not given
        "<answer>(3 + 3) * 2</answer>": 0.0,       # 3 used twice, given once
        "<answer>3 * 5 + 2</answer>": 0.0,         # 17, not 16
        "<answer>16</answer>": 0.0,                # not an expression over the numbers
        "<answer>2 ** 4</answer>": 0.0,
        "<answer>(3 + 5) / (2 - 2)</answer>": 0.0,
        "<answer>__import__('os')</answer>": 0.0,
        "no idea": 0.0,
        "": 0.0,
    }
    out = countdown_reward(list(cases), numbers=[nums] * len(cases), target=[tgt] * len(cases))
    assert out == list(cases.values())
    # exact division: (8 / 3) * 3 == 8, and numbers may repeat when given twice
    assert countdown_reward(["<answer>(8 / 3) * 3</answer>", "<answer>3 + 3 + 8</answer>"],
                            numbers=[[3, 3, 8], [3, 3, 8]], target=[8, 14]) == [1.0, 1.0]
    assert countdown_reward(["<answer>(8 / 3) * 3</answer>"], numbers=[[3, 8]], target=[8]) == [0.0]
    # a single row's numbers are broadcast
    assert countdown_reward(["<answer>4 * 6</answer>"], numbers=[4, 6, 1], target=24) == [1.0]


def test_countdown_reward_options():
    c = ["<answer>4 * 6</answer>", "<answer>4 + 6</answer>", "<answer>7 * 1</answer>"]
    assert countdown_reward(c, numbers=[[4, 6, 1]] * 3, target=[24] * 3, use_all_numbers=True) == [0.0, 0.0, 0.0]
    assert countdown_reward(c, numbers=[[4, 6]] * 3, target=[24] * 3, use_all_numbers=True) == [1.0, 0.0, 0.0]
    assert countdown_reward(c, numbers=[[4, 6]] * 3, target=[24] * 3, valid_expression_score=0.1) == [1.0, 0.1, 0.0]
    with pytest.raises(ValueError, match="'target' has 2 entries"):
        countdown_reward(c, numbers=[[4, 6]] * 3, target=[24, 24])


def test_countdown_expression():
    assert countdown_expression("Let me try. 3 + 4 = 7, then (3 + 4) * 2 = 14") == "(3 + 4) * 2"
    assert countdown_expression("<answer> 24 = 4 * 6 </answer>") == "4 * 6"
    assert countdown_expression("the year 2024") is None


@pytest.mark.parametrize("expr, want", [
    ("1 + 2 * 3", 7), ("(1 + 2) * 3", 9), ("7 / 2", Fraction(7, 2)), ("-3 + 5", 2), ("+4", 4), ("--4", 4),
    ("8 ÷ 2 × 3 − 1", 11), ("  12  ", 12),
])
def test_safe_arith_accepts(expr, want):
    assert safe_arith(expr).value == Fraction(want)


@pytest.mark.parametrize("expr", INJECTIONS + [None, 5, "", "   ", "1 +", "()", "(1)(2)", "3 ** 2", "1e3"])
def test_safe_arith_rejects(expr):
    assert safe_arith(expr) is None


def test_safe_arith_bounds():
    assert safe_arith("(" * 20 + "1" + ")" * 20) is not None          # parentheses alone add no AST depth
    assert safe_arith("-" * 40 + "1") is None                        # 40 unary minus nodes: too deep
    assert safe_arith(" + ".join(["1"] * 60)) is None                # > 128 nodes
    assert safe_arith(" * ".join(["999999999"] * 3)) is None         # beyond MAX_ABS
    assert safe_arith("1000000000 + 1").value == 10**9 + 1
    assert safe_arith("10000000000") is None                         # literal above MAX_LITERAL
    assert safe_arith("1" * 300) is None                             # longer than MAX_LEN
    assert safe_arith("3 - 5 * 2").literals == (3, 5, 2)


def test_uses_only():
    assert uses_only([3, 5], [5, 3, 1])
    assert not uses_only([3, 3], [3, 5])
    assert uses_only([3, 3], [3, 3])
    assert not uses_only([1], None)


def test_combine_and_check_rewards():
    f = combine([arithmetic_reward, format_reward], weights=[1.0, 0.25])
    assert f(["<answer>5</answer>", "5", "x"], answer=[5, 5, 5]) == [1.25, 1.0, 0.0]
    assert f.__name__ == "arithmetic_reward+0.25*format_reward"
    assert combine([format_reward])(["<answer>1</answer>"]) == [1.0]
    with pytest.raises(ValueError, match="2 weights for 1 reward functions"):
        combine([format_reward], [1, 2])
    with pytest.raises(ValueError, match="at least one"):
        combine([])

    def short(completions, **kw):
        return [1.0]

    def nan(completions, **kw):
        return [float("nan")] * len(completions)

    with pytest.raises(ValueError, match="short returned 1 rewards for 2 completions"):
        combine([short])(["a", "b"])
    with pytest.raises(ValueError, match="nan returned nan at position 0"):
        combine([nan])(["a"])
    assert math.isnan(check_rewards([None], 1)[0])
    with pytest.raises(ValueError, match="non-number at position 1"):
        check_rewards([1.0, "x"], 2, "f")


# --------------------------------------------------------------------------------------------- no code execution


def test_reward_sources_never_call_eval_exec_compile():
    pkg = Path(R.__file__).parent
    banned = {"eval", "exec", "compile", "__import__", "globals", "locals", "vars"}
    for path in pkg.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in banned:
                raise AssertionError(f"{path.name}:{node.lineno} calls {node.func.id}()")


def test_no_code_runs_while_scoring_injections(monkeypatch):
    """eval/exec are unusable and compile may only build an AST while the rewards score hostile text."""
    real_compile = builtins.compile

    def ast_only_compile(source, filename, mode, flags=0, *args, **kwargs):
        assert flags & ast.PyCF_ONLY_AST, "compile() called to produce code, not an AST"
        return real_compile(source, filename, mode, flags, *args, **kwargs)

    def forbidden(*args, **kwargs):
        raise AssertionError("eval/exec called")

    monkeypatch.setattr(builtins, "eval", forbidden)
    monkeypatch.setattr(builtins, "exec", forbidden)
    monkeypatch.setattr(builtins, "compile", ast_only_compile)
    comps = [f"<answer>{s}</answer>" for s in INJECTIONS] + INJECTIONS
    n = len(comps)
    assert countdown_reward(comps, numbers=[[1, 2, 9, 10]] * n, target=[97] * n) == [0.0] * n
    assert sum(arithmetic_reward(comps, answer=[123456] * n)) == 0.0


# --------------------------------------------------------------------------------------------- fuzzing

def _all_rewards(completions):
    n = len(completions)
    return {
        "arith": arithmetic_reward(completions, answer=[7] * n),
        "gsm8k": gsm8k_reward(completions, answer=["#### 7"] * n),
        "format": format_reward(completions),
        "countdown": countdown_reward(completions, numbers=[[1, 2, 3, 4]] * n, target=[10] * n,
                                      valid_expression_score=0.1),
    }


def _assert_well_formed(out, n):
    for name, vals in out.items():
        assert len(vals) == n, name
        assert all(type(v) is float and v in (0.0, 0.1, 1.0) for v in vals), (name, vals)


@settings(max_examples=FUZZ["text"])
@given(st.lists(st.text(max_size=200), min_size=1, max_size=3))
def test_fuzz_arbitrary_text_never_raises(texts):
    _assert_well_formed(_all_rewards(texts), len(texts))


_ARITH_ALPHABET = "0123456789+-*/() .,^%e_x×÷−<>answerboxed{}\\=\n"


@settings(max_examples=FUZZ["arith_chars"])
@given(st.text(alphabet=_ARITH_ALPHABET, max_size=120))
def test_fuzz_arithmetic_looking_text(s):
    r = safe_arith(s)
    assert r is None or isinstance(r.value, Fraction)
    _assert_well_formed(_all_rewards([s, f"<answer>{s}</answer>", rf"\boxed{{{s}}}"]), 3)


def _exprs():
    leaf = st.integers(0, 50).map(lambda v: (str(v), Fraction(v)))

    def extend(children):
        def binop(t):
            (ls, lv), op, (rs, rv) = t
            if op == "/" and rv == 0:
                return ("(1 / 0)", None)
            if lv is None or rv is None:
                return (f"({ls} {op} {rs})", None)
            val = {"+": lv + rv, "-": lv - rv, "*": lv * rv, "/": lv / rv if rv else None}[op]
            return (f"({ls} {op} {rs})", val)
        return st.one_of(
            st.tuples(children, st.sampled_from("+-*/"), children).map(binop),
            children.map(lambda c: (f"-{c[0]}", None if c[1] is None else -c[1])),
        )
    return st.recursive(leaf, extend, max_leaves=12)


@settings(max_examples=FUZZ["trees"])
@given(_exprs())
def test_fuzz_safe_arith_matches_exact_arithmetic(expr_and_value):
    """Random expression trees: safe_arith agrees with exact Fraction arithmetic done independently."""
    expr, want = expr_and_value
    got = safe_arith(expr)
    if want is None:                       # a division by zero somewhere
        assert got is None
    elif got is not None:                  # None only when a size/magnitude bound bites
        assert got.value == want
    else:
        assert abs(want.numerator) > 10**15 or want.denominator > 10**15 or len(expr) > 256 or expr.count("(") > 30


@settings(max_examples=FUZZ["injection"])
@given(st.sampled_from(INJECTIONS), st.sampled_from(["{}", "<answer>{}</answer>", r"\boxed{{{}}}", "So {} = 10.",
                                                     "{} <answer>{}</answer>"]),
       st.text(max_size=20))
def test_fuzz_injections_score_zero(payload, wrapper, noise):
    text = noise + wrapper.replace("{}", payload).replace("{{", "{").replace("}}", "}")
    out = countdown_reward([text], numbers=[[1, 2, 9, 10]], target=[10])
    assert out == [0.0] or out == [1.0] and "10" in noise  # only the noise itself could hold a valid answer
    _assert_well_formed(_all_rewards([text]), 1)


@settings(max_examples=FUZZ["nesting"])
@given(st.integers(1, 3000), st.sampled_from(["(", "-", "+", "(-"]))
def test_fuzz_deep_nesting(depth, unit):
    s = unit * depth + "1" + ")" * (depth * unit.count("("))
    r = safe_arith(s)
    assert r is None or (len(s) <= 256 and abs(r.value) == 1)
    if unit in ("-", "(-") and depth > 40:
        assert r is None  # unary operators nest in the AST: bounded by MAX_DEPTH
    _assert_well_formed(_all_rewards([s, f"<answer>{s}</answer>"]), 2)


@settings(max_examples=FUZZ["huge"])
@given(st.integers(1, 20000), st.sampled_from(["9", "12", "1,000,", "9**"]))
def test_fuzz_huge_numbers(k, unit):
    s = unit * k
    _assert_well_formed(_all_rewards([s, f"<answer>{s}</answer>", s + " = 7"]), 3)


@settings(max_examples=FUZZ["unicode"])
@given(st.text(alphabet=st.characters(whitelist_categories=("Nd", "No", "Sm", "Pd")), min_size=1, max_size=40))
def test_fuzz_unicode_digits_and_symbols(s):
    out = _all_rewards([s, f"<answer>{s}</answer>"])
    _assert_well_formed(out, 2)
    if not any(c in "0123456789" for c in s):
        assert out["arith"] == [0.0, 0.0] and out["countdown"] == [0.0, 0.0]


_junk = st.recursive(st.none() | st.integers() | st.text(max_size=20) | st.booleans(),
                     lambda c: st.lists(c, max_size=3) | st.dictionaries(st.sampled_from(["role", "content", "text", "type"]), c, max_size=3),
                     max_leaves=8)


@settings(max_examples=FUZZ["chat"])
@given(st.lists(_junk, min_size=1, max_size=4))
def test_fuzz_malformed_chat_messages(comps):
    _assert_well_formed(_all_rewards(comps), len(comps))


def test_fuzz_case_count():
    assert FUZZ_CASES == 2600
    # every fuzz test declares its max_examples explicitly
    src = inspect.getsource(inspect.getmodule(test_fuzz_case_count))
    assert src.count("\n@settings(max_examples=FUZZ[") == len(FUZZ)


# --------------------------------------------------------------------------------------------- review fixes
# Each of these failed before the fix it names.


def test_float_gold_is_its_decimal_not_its_binary_fraction():
    assert arithmetic_reward(["0.1", "19.99", "<answer>0.3</answer>"], answer=[0.1, 19.99, 0.3]) == [1.0, 1.0, 1.0]
    assert parse_number(0.1) == Fraction(1, 10) and parse_number(19.99) == Fraction(1999, 100)
    assert arithmetic_reward(["0.1"], answer=[0.2]) == [0.0]


def test_numpy_gold_values_parse():
    np = pytest.importorskip("numpy")
    assert parse_number(np.int64(7)) == 7 and parse_number(np.int32(-3)) == -3
    assert parse_number(np.float64(2.5)) == Fraction(5, 2)
    assert parse_number(np.float32(0.1)) == Fraction(1, 10)   # its printed decimal, not the float32 binary value
    assert parse_number(np.bool_(True)) is None
    assert arithmetic_reward(["7", "x 7"], answer=np.array([7, 8])) == [1.0, 0.0]


@pytest.mark.parametrize("text, want", [
    ("\u22125", -5), ("the answer is \u22125", -5), ("10 \u2212 3 = 7", 7), ("\u22122.5", Fraction(-5, 2)),
    (".5", Fraction(1, 2)), ("it is .25", Fraction(1, 4)), ("-.5", Fraction(-1, 2)), ("1.5", Fraction(3, 2)),
    ("done.", None),
])
def test_unicode_minus_and_leading_dot(text, want):
    assert last_number(text) == want
    assert extract_answer(f"<answer>{text}</answer>") == want


@pytest.mark.parametrize("inner, want", [
    (r"\frac{1}{2}", Fraction(1, 2)), (r"-\frac{3}{4}", Fraction(-3, 4)), (r"\dfrac{10}{4}", Fraction(5, 2)),
    (r"\tfrac12", Fraction(1, 2)), (r"\frac{-3}{4}", Fraction(-3, 4)), (r"2^{10}", 1024), (r"2^3", 8),
    (r"(-2)^{3}", -8), (r"-2^{2}", -4), (r"10^{-2}", Fraction(1, 100)), (r"1{,}234", 1234),
    (r"1{,}234{,}567", 1234567), (r"x = \frac{1}{2}", Fraction(1, 2)), (r"\left(\frac{1}{2}\right)", None),
    (r"12\text{ apples}", 12), (r"{5}", 5), (r"\$5", 5),
    # no answer rather than a wrong number
    (r"\frac{1}{0}", None), (r"\sqrt{2}", None), (r"\frac{a}{2}", None), (r"9^{99999}", None),
    (r"9^{9^{9}}", None), (r"2^{x}", None), (r"\frac{1}{2", None), (r"\pi", None), (r"x^2", None),
])
def test_latex_in_boxed_and_tags(inner, want):
    for text in (rf"so \boxed{{{inner}}}", f"<answer>{inner}</answer>"):
        assert extract_answer(text) == want, text
    assert latex_number(inner) == want


def test_latex_in_prose_gives_no_answer_not_a_wrong_number():
    assert extract_answer(r"so x = \frac{1}{2}") is None       # was 2
    assert extract_answer(r"that is 2^{10}") is None            # was 10
    assert extract_answer(r"about 1{,}234 people") == 1234      # was 234
    assert arithmetic_reward([r"\boxed{\frac{1}{2}}", r"\boxed{2^{10}}"], answer=[2, 10]) == [0.0, 0.0]
    assert arithmetic_reward([r"\boxed{\frac{1}{2}}", r"\boxed{2^{10}}"], answer=[0.5, 1024]) == [1.0, 1.0]


def test_countdown_one_row_of_numbers_broadcasts_to_many_completions():
    comps = ["<answer>4 * 6</answer>", "<answer>4 + 6</answer>", "<answer>(6 - 4) * 12</answer>"]
    assert countdown_reward(comps, numbers=[4, 6, 1], target=24) == [1.0, 0.0, 0.0]
    assert countdown_reward(comps, numbers=(4, 6, 12), target=[24, 24, 24]) == [1.0, 0.0, 1.0]
    np = pytest.importorskip("numpy")
    assert countdown_reward(comps, numbers=np.array([4, 6, 1]), target=24) == [1.0, 0.0, 0.0]
    with pytest.raises(ValueError, match="'numbers' has 2 entries"):
        countdown_reward(comps, numbers=[[4, 6], [4, 6]], target=24)


def test_reward_matrix_nan_for_none_and_unscorable_rows():
    import torch

    from grpo_lessons import variant_advantages

    def picky(completions, **kw):
        return [None if "?" in c else 1.0 for c in completions]

    def length(completions, **kw):
        return [None if "?" in c else float(len(c)) for c in completions]

    comps = ["5", "?", "<answer>5</answer>", "6"]

    R = reward_matrix([arithmetic_reward, picky, length], comps, answer=[5] * 4)
    assert R.shape == (4, 3) and R.dtype == torch.float32
    assert R[:, 0].tolist() == [1.0, 0.0, 1.0, 0.0]
    assert math.isnan(R[1, 1]) and math.isnan(R[1, 2]) and R[2, 2] == len("<answer>5</answer>")
    # the "?" row is scored by arithmetic_reward (0.0): not unscorable; drop that function and it is
    R2 = reward_matrix([picky, length], comps)
    assert torch.isnan(R2).all(dim=1).tolist() == [False, True, False, False]
    adv = variant_advantages(R2, 4, "grpo", allow_unscored=True)
    assert adv[1] == 0.0
    assert reward_matrix(picky, ["a", "b"]).shape == (2, 1)
    with pytest.raises(ValueError, match="returned 1 rewards for 2"):
        reward_matrix([lambda completions, **kw: [1.0]], ["a", "b"])
    with pytest.raises(ValueError, match="at least one"):
        reward_matrix([], ["a"])


@settings(max_examples=FUZZ["latex_values"])
@given(st.integers(-999, 999), st.integers(1, 999), st.integers(0, 12), st.integers(1, 9),
       st.sampled_from(["frac", "dfrac", "tfrac"]))
def test_fuzz_latex_values_are_exact(p, q, e, base, cmd):
    """A LaTeX fraction or power inside a box or tag reads as its exact value, never as one of its parts."""
    sign = "-" if p < 0 else ""
    frac = rf"{sign}\{cmd}{{{abs(p)}}}{{{q}}}"
    for wrap in (r"\boxed{{{}}}", "<answer>{}</answer>", "so the answer is <answer> x = {} </answer>"):
        assert extract_answer(wrap.format(frac)) == Fraction(p, q)
    assert extract_answer(rf"\boxed{{{base}^{{{e}}}}}") == Fraction(base) ** e
    head = abs(p) or 1
    assert extract_answer(rf"\boxed{{{head}{{,}}{q:03d}}}") == head * 1000 + q  # 12{,}045 is 12045


_LATEX_ALPHABET = list("0123456789-+.,{}^_ /") + ["\\frac", "\\dfrac", "\\sqrt", "\\left(", "\\right)",
                                                   "\\text{ m}", "{,}", "\\cdot", "x", "\\pi", "%", "$"]


@settings(max_examples=FUZZ["latex_soup"])
@given(st.lists(st.sampled_from(_LATEX_ALPHABET), max_size=30).map("".join))
def test_fuzz_latex_soup_never_raises_and_is_consistent(s):
    for text in (rf"\boxed{{{s}}}", f"<answer>{s}</answer>", s):
        v = extract_answer(text)
        assert v is None or isinstance(v, Fraction)
    v = latex_number(s)
    assert v is None or isinstance(v, Fraction)
    _assert_well_formed(_all_rewards([rf"\boxed{{{s}}}", f"<answer>{s}</answer>"]), 2)
