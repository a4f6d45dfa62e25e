"""grpo_lessons.core.verbalized: the prompt, the parser (hand cases and fuzzing) and the sampler.

Fuzzing: FUZZ_CASES hypothesis cases in all, each test's max_examples set explicitly.
"""

from __future__ import annotations

import inspect
import math
import random
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grpo_lessons.core.verbalized import (
    MAX_CANDIDATES,
    Candidate,
    Candidates,
    parse_probability,
    parse_verbalized,
    sample_verbalized,
    verbalized_prompt,
)

FUZZ = {"text": 400, "tags": 400, "chapter": 300, "tag_soup": 200, "sampler": 100, "probability": 400}
FUZZ_CASES = sum(FUZZ.values())


def tagged(*pairs) -> str:
    return "\n".join(f"<response><text>{t}</text><probability>{p}</probability></response>" for t, p in pairs)


def probs(c):
    return [round(x.prob, 9) for x in c]


# ------------------------------------------------------------------------------------------- prompt


def test_prompts_ask_for_k_and_name_the_format():
    p = verbalized_prompt("Tell me a joke about cats.", k=5)
    assert "Tell me a joke about cats." in p and "5 different responses" in p
    assert "<response><text>...</text><probability>" in p and "sum to 1" in p
    c = verbalized_prompt("Name a colour.", k=3, style="chapter")
    assert "Format: [response] (probability: X.XX)" in c and "3 different responses" in c
    with pytest.raises(ValueError, match="positive integer"):
        verbalized_prompt("x", k=0)
    with pytest.raises(ValueError, match="unknown style"):
        verbalized_prompt("x", style="json")


# ------------------------------------------------------------------------------------------- hand cases


def test_paper_format_well_formed():
    c = parse_verbalized(tagged(("red", 0.5), ("blue", 0.3), ("green", 0.2)))
    assert [x.text for x in c] == ["red", "blue", "green"]
    assert probs(c) == [0.5, 0.3, 0.2] and c.fallback is None and c.format == "tags"
    assert isinstance(c, list) and isinstance(c[0], Candidate) and c[0].stated == 0.5


def test_chapter_format_with_stray_text_and_list_markers():
    text = ("Sure! Here are three options:\n"
            "1. [The sky is blue] (probability: 0.50)\n"
            "2. [Grass is green] (probability: 0.30)\n"
            "- Snow is white (Probability: 0.20)\n"
            "Hope that helps.")
    c = parse_verbalized(text)
    assert [x.text for x in c] == ["The sky is blue", "Grass is green", "Snow is white"]
    assert probs(c) == [0.5, 0.3, 0.2] and c.format == "chapter"
    assert [x.text for x in parse_verbalized("[I (really) like it] (probability: 1.0)")] == ["I (really) like it"]


def test_sums_other_than_one_are_normalised():
    c = parse_verbalized(tagged(("a", 0.6), ("b", 0.6)))
    assert probs(c) == [0.5, 0.5] and c.fallback is None
    c = parse_verbalized(tagged(("a", 0.1), ("b", 0.3)))
    assert probs(c) == [0.25, 0.75]


def test_percentages_and_fractions():
    c = parse_verbalized(tagged(("a", "30%"), ("b", "70 %")))
    assert probs(c) == [0.3, 0.7]
    c = parse_verbalized("[x] (probability: 25)\n[y] (probability: 75)")  # bare numbers above 1: percentages
    assert probs(c) == [0.25, 0.75]
    assert parse_probability("1/4") == 0.25 and parse_probability(".5") == 0.5 and parse_probability("0.") == 0.0
    for bad in ["-0.2", "abc", "nan", "inf", "150", "2/1", "1/0", "", None, True, "0.5 or so", "\u22120.3"]:
        assert parse_probability(bad) is None, bad


@pytest.mark.parametrize("s, want", [
    # each of the first three gave a wrong answer before: None, None, 0.015
    ("1e-3", 0.001), ("0.5.", 0.5), ("1.5", None),
    ("2.5e-1", 0.25), ("3.5E-1", 0.35), ("35%.", 0.35), (".35", 0.35), ("7/20", 0.35), ("1", 1.0), ("0.", 0.0),
    ("35", None), ("100", None), (35, None), (1.5, None), ("1e9", None), ("1e999", None), ("0.5.5", None),
    ("0.5..", None), (".", None), ("150%", None), ("-1e-3", None),
])
def test_parse_probability_decisions(s, want):
    assert parse_probability(s) == want


def test_bare_numbers_are_percentages_only_when_the_reply_is_on_a_percent_scale():
    def stated(*ps):
        return [x.stated for x in parse_verbalized("\n".join(f"[r{i}] (probability: {p})" for i, p in enumerate(ps)))]
    assert stated(25, 75) == [0.25, 0.75]                      # sums to 100: a percent scale
    assert stated(35, 30, 20, 10, 5) == [0.35, 0.30, 0.20, 0.10, 0.05]
    assert stated(33, 33, 33) == [0.33, 0.33, 0.33]            # rounding: within 1 of 100
    assert stated("1.5", "98.5") == [0.015, 0.985]
    assert stated("99.5", "0.5") == [0.995, 0.005]             # every bare number is on the scale, 0.5 too
    assert stated(8, 6, 3) == [None, None, None]               # scores, not percentages: sum 17
    assert stated("1.5", "0.5") == [None, 0.5]                 # 1.5 was read as 0.015 before
    assert stated("40%", 35) == [0.4, None]                    # mixed notation: only the explicit percentage
    assert stated("1/4", 75) == [0.25, None]
    assert stated(25, 75, "unsure") == [0.25, 0.75, None]      # a missing one does not change the scale
    c = parse_verbalized("[a] (probability: 1.5)\n[b] (probability: 0.5)")
    assert probs(c) == [0.5, 0.5] and c.fallback == "imputed"


def test_missing_negative_and_non_numeric_probabilities():
    # one missing: it gets the mean of the stated ones (0.4), then all are normalised
    c = parse_verbalized("<response><text>a</text><probability>0.6</probability></response>"
                         "<response><text>b</text></response>"
                         "<response><text>c</text><probability>0.2</probability></response>")
    assert c.fallback == "imputed" and probs(c) == [0.5, round(0.4 / 1.2, 9), round(0.2 / 1.2, 9)]
    assert c[1].stated is None
    # none usable: uniform, flagged
    c = parse_verbalized(tagged(("a", "-0.5"), ("b", "lots"), ("c", "")))
    assert c.fallback == "uniform" and c.uniform_fallback and probs(c) == [round(1 / 3, 9)] * 3
    c = parse_verbalized(tagged(("a", 0), ("b", 0)))
    assert c.fallback == "uniform" and probs(c) == [0.5, 0.5]
    c = parse_verbalized(tagged(("a", 0), ("b", 1)))
    assert probs(c) == [0.0, 1.0] and c.fallback is None  # a stated 0 is kept


def test_duplicates_are_merged():
    c = parse_verbalized(tagged(("Blue", 0.2), ("red", 0.3), ("  blue ", 0.5)))
    assert [x.text for x in c] == ["Blue", "red"] and probs(c) == [0.7, 0.3]


def test_truncated_and_unclosed_output():
    text = tagged(("a", 0.5)) + "\n<response><text>b is cut o"
    c = parse_verbalized(text)
    assert [x.text for x in c] == ["a", "b is cut o"] and c.fallback == "imputed"
    c = parse_verbalized("<response><text>x</text><probability>0.4</probability><response><text>y</text>"
                         "<probability>0.6</probability></response>")
    assert [x.text for x in c] == ["x", "y"] and probs(c) == [0.4, 0.6]
    c = parse_verbalized("<text>only</text><probability>0.3</probability><text>pairs</text><probability>0.1</probability>")
    assert [x.text for x in c] == ["only", "pairs"] and probs(c) == [0.75, 0.25]
    c = parse_verbalized("<response>no text tags <probability>0.5</probability></response>")
    assert [x.text for x in c] == ["no text tags"]


def test_echoed_prompt_templates_are_not_candidates():
    prompt = verbalized_prompt("Name a colour.", k=2, style="chapter")
    c = parse_verbalized(prompt + "\n[red] (probability: 0.6)\n[blue] (probability: 0.4)")
    assert [x.text for x in c] == ["red", "blue"] and c.fallback is None
    tags = verbalized_prompt("Name a colour.", k=2)
    c = parse_verbalized(tags + "\n" + tagged(("red", 0.6), ("blue", 0.4)))
    assert [x.text for x in c] == ["red", "blue"] and probs(c) == [0.6, 0.4]
    assert parse_verbalized(tags) == []


def test_nothing_to_parse():
    for junk in ["", "no candidates here", None, 42, b"<response>", ["x"], "<response></response>", "(probability: 0.5)"]:
        c = parse_verbalized(junk)
        assert isinstance(c, Candidates) and c == [] and c.fallback is None


def test_huge_output_is_bounded():
    for text in ["<response>" * 100_000, "a" * 1_000_000, "[x] (probability: 0.5)\n" * 50_000,
                 "<text>" * 200_000 + "</text>", "(" * 1_000_000]:
        t0 = time.perf_counter()
        c = parse_verbalized(text)
        assert time.perf_counter() - t0 < 5.0  # generous: the machine is shared; the scan is linear
        assert len(c) <= MAX_CANDIDATES
        if c:
            assert abs(sum(x.prob for x in c) - 1.0) < 1e-9


# ------------------------------------------------------------------------------------------- sampler


def test_sample_verbalized_is_seeded_and_follows_the_probabilities():
    c = parse_verbalized(tagged(("a", 0.7), ("b", 0.2), ("c", 0.1)))
    draws = [sample_verbalized(c, random.Random(i)).text for i in range(3000)]
    freq = {k: draws.count(k) / 3000 for k in "abc"}
    assert abs(freq["a"] - 0.7) < 0.04 and abs(freq["b"] - 0.2) < 0.04 and abs(freq["c"] - 0.1) < 0.03
    assert sample_verbalized(c, 123) == sample_verbalized(c, random.Random(123))
    assert sample_verbalized([], 0) is None
    zero = [Candidate("x", 0.0), Candidate("y", 1.0)]
    assert all(sample_verbalized(zero, s).text == "y" for s in range(50))
    np = pytest.importorskip("numpy")
    assert sample_verbalized(c, np.random.default_rng(0)).text in "abc"


# ------------------------------------------------------------------------------------------- fuzzing


def _check(c):
    assert isinstance(c, Candidates) and len(c) <= MAX_CANDIDATES
    if c:
        ps = [x.prob for x in c]
        assert all(math.isfinite(p) and 0.0 <= p <= 1.0 for p in ps)
        assert abs(sum(ps) - 1.0) < 1e-9
        assert all(isinstance(x.text, str) and x.text for x in c)
        assert c.fallback in (None, "imputed", "uniform")
        keys = [" ".join(x.text.split()).casefold() for x in c]
        assert len(keys) == len(set(keys))  # duplicates merged


@settings(max_examples=FUZZ["text"], deadline=None)
@given(st.text(max_size=400))
def test_fuzz_arbitrary_text(s):
    _check(parse_verbalized(s))


_prob = st.one_of(st.floats(allow_nan=True, allow_infinity=True).map(repr), st.integers(-5, 500).map(str),
                  st.sampled_from(["", "0.25", "25%", ".5", "1/3", "high", "-0.1", "1e9", "0.5.5", "½"]),
                  st.text(max_size=8))
_body = st.text(alphabet=st.characters(blacklist_characters="<>"), max_size=30)


@settings(max_examples=FUZZ["tags"], deadline=None)
@given(st.lists(st.tuples(_body, _prob), max_size=8), st.integers(0, 400), st.text(max_size=20))
def test_fuzz_tagged_blocks_with_bad_probabilities_and_truncation(pairs, cut, noise):
    full = noise + tagged(*pairs)
    c = parse_verbalized(full[:len(full) - cut] if cut < len(full) else full)
    _check(c)
    if cut == 0 and pairs and all(b.strip() for b, _ in pairs):
        assert 1 <= len(c) <= len(pairs)


@settings(max_examples=FUZZ["chapter"], deadline=None)
@given(st.lists(st.tuples(st.text(alphabet=st.characters(blacklist_characters="[]()\n"), min_size=1, max_size=20),
                          _prob), max_size=8),
       st.sampled_from(["[{t}] (probability: {p})", "{i}. [{t}] (probability: {p})", "- {t} (Prob: {p})",
                        "{t} (p = {p})"]))
def test_fuzz_chapter_lines(items, fmt):
    text = "\n".join(fmt.format(t=t, p=p, i=i + 1) for i, (t, p) in enumerate(items))
    _check(parse_verbalized(text))


_tag_soup = st.lists(st.sampled_from(["<response>", "</response>", "<text>", "</text>", "<probability>",
                                      "</probability>", "0.3", "x", " ", "\n", "[a]", "(probability: 0.2)", "50%",
                                      "<TEXT>", "< text >", "-1", "nan"]), max_size=60).map("".join)


@settings(max_examples=FUZZ["tag_soup"], deadline=None)
@given(_tag_soup)
def test_fuzz_tag_soup(s):
    _check(parse_verbalized(s))


@settings(max_examples=FUZZ["sampler"], deadline=None)
@given(st.lists(st.floats(allow_nan=True, allow_infinity=True), min_size=1, max_size=6), st.integers(0, 10**6))
def test_fuzz_sampler_never_fails(ws, seed):
    cands = [Candidate(str(i), w) for i, w in enumerate(ws)]
    got = sample_verbalized(cands, seed)
    assert got in cands
    good = [c for c in cands if math.isfinite(c.prob) and c.prob > 0]
    if good:
        assert got in good


_prob_text = st.one_of(
    st.text(alphabet="0123456789.eE+-%/ \u2212", max_size=16),
    st.tuples(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from(["", "%", ".", "%.", " %"]))
      .map(lambda t: repr(t[0]) + t[1]),
    st.tuples(st.integers(-5, 10**6), st.integers(0, 10**6), st.integers(-400, 400))
      .map(lambda t: f"{t[0]}.{t[1]}e{t[2]}"),
    st.floats(allow_nan=True, allow_infinity=True), st.integers(-10**6, 10**6),
)


@settings(max_examples=FUZZ["probability"], deadline=None)
@given(_prob_text)
def test_fuzz_parse_probability_is_a_probability_or_none(s):
    v = parse_probability(s)
    assert v is None or (type(v) is float and 0.0 <= v <= 1.0), (s, v)
    if isinstance(s, str) and v is not None and "%" not in s and "/" not in s:
        assert v == pytest.approx(float(s.replace("\u2212", "-").strip().removesuffix(".")))  # the number as written


def test_fuzz_case_count():
    assert FUZZ_CASES == 1800
    src = inspect.getsource(inspect.getmodule(test_fuzz_case_count))
    assert src.count("\n@settings(max_examples=FUZZ[") == len(FUZZ)
