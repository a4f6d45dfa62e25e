"""Verbalized Sampling: ask for k responses *with their probabilities*, then sample from that distribution.

Zhang et al. 2025, *Verbalized Sampling: How to Mitigate Mode Collapse and Unlock LLM Diversity*,
arXiv 2510.01171.  Introduced in ``notebooks/18_verbalized_sampling.ipynb``.  Training-free: the model is
prompted to write ``k`` candidate responses, each with a probability, in one generation; one candidate is
then drawn from the verbalised distribution.

* :func:`verbalized_prompt` — the prompt, in the paper's tagged format (``<response><text>..</text>
  <probability>..</probability></response>``) or the chapter's ``[response] (probability: X.XX)``.
* :func:`parse_verbalized` — model text -> ``[Candidate(text, prob), ...]`` with probabilities summing to 1.
  It reads both formats and **never raises** on model output: missing, negative, non-numeric, NaN
  probabilities, percentages, sums other than 1, duplicates, stray text, truncated output, megabytes of
  text.  The work is bounded (:data:`MAX_CHARS`, :data:`MAX_CANDIDATES`, linear-time scanning).
* :func:`sample_verbalized` — draw one candidate with a seeded RNG.

Probability rules (documented fallbacks; the result's ``.fallback`` says which applied):

1. A stated probability is a number ``p`` in ``[0, 1]``, in decimal or scientific notation (``"0.35"``, ``".35"``,
   ``"1e-3"``; one sentence-ending period is ignored: ``"0.5."``); ``"35%"`` is 0.35; ``a/b`` is a fraction.
   A bare number above 1 (``"35"``, ``"1.5"``) is not a probability: reading it as a percentage would be a guess
   that is wrong for ``"1.5"`` (a typo of 0.15? 1.5%?), so on its own it is *invalid* -- except under 1b.
   Negative, above 1 (100%), NaN/inf, or non-numeric: *invalid* (treated as missing).

   1b. A reply on a percent scale: when every stated probability of a reply is a bare number in ``[0, 100]``
   (no ``%``, no fraction), at least one is above 1, and together they sum to 100 (within 1, for rounding:
   ``35, 30, 20, 10, 5``), each is read as a percentage.  The sum is what tells a percent scale from scores
   or weights (``8, 6, 3``), which stay invalid.
2. Candidates whose text is the same (whitespace and case ignored) are one response: their stated
   probabilities are added, the first spelling is kept.
3. The prompt's own templates, echoed back (``[response] (probability: X.XX)``, ``<text>...</text>``), are not
   candidates -- the chapter's snippet decodes the prompt together with the reply.
4. ``fallback=None``: every candidate had a valid probability and their sum is positive -> divide by the sum.
   ``fallback="imputed"``: some are missing/invalid -> each gets the mean of the valid ones, then normalise.
   ``fallback="uniform"``: none is usable (all missing/invalid, or all zero) -> ``1/n`` each.
"""

from __future__ import annotations

import math
import random
import re
from typing import Any, Literal, NamedTuple

__all__ = [
    "Candidate",
    "Candidates",
    "verbalized_prompt",
    "parse_verbalized",
    "parse_probability",
    "sample_verbalized",
    "MAX_CHARS",
    "MAX_CANDIDATES",
]

#: Only the first ``MAX_CHARS`` characters of a model's output are read (bounds the work on 10^6-char garbage).
MAX_CHARS = 100_000
#: At most this many candidates are kept (the prompt asks for k, usually 5).
MAX_CANDIDATES = 64
_MAX_TEXT = 4_000  # characters of one candidate's text


class Candidate(NamedTuple):
    text: str
    prob: float  # normalised: the candidates of one parse sum to 1
    stated: float | None = None  # the probability as the model wrote it (after rule 1), None if missing/invalid


class Candidates(list):
    """``list[Candidate]`` with how the probabilities were obtained: ``fallback`` in ``(None, "imputed", "uniform")``,
    ``format`` in ``("tags", "chapter", "none")``."""

    def __init__(self, items=(), fallback: str | None = None, format: str = "none"):
        super().__init__(items)
        self.fallback = fallback
        self.format = format

    @property
    def uniform_fallback(self) -> bool:
        return self.fallback == "uniform"

    def __repr__(self) -> str:
        return f"Candidates({list.__repr__(self)}, fallback={self.fallback!r}, format={self.format!r})"


def verbalized_prompt(task: str, k: int = 5, style: Literal["tags", "chapter"] = "tags") -> str:
    """The Verbalized Sampling prompt for ``task``: ``k`` different responses, each with a probability.

    ``style="tags"``: the paper's format, each candidate as ``<response><text>...</text><probability>...
    </probability></response>`` (arXiv 2510.01171 asks for the responses and their probabilities in tags /
    JSON).  ``style="chapter"``: the chapter's one-line ``[response] (probability: X.XX)``.  Both parse with
    :func:`parse_verbalized`.  Raises ``ValueError`` for ``k < 1`` or an unknown style.
    """
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}")
    if style == "tags":
        return (
            f"{task}\n\n"
            f"Write {k} different responses to the request above. For each one, also give the probability "
            f"that you would produce it, a number between 0 and 1; the {k} probabilities should sum to 1.\n"
            "Put every response in its own response block, with its text and its probability in their own "
            "tags, exactly like this:\n"
            "<response><text>...</text><probability>0.25</probability></response>\n"
            "Write nothing outside the blocks."
        )
    if style == "chapter":
        return (
            f"{task}\n\n"
            f"Generate {k} different responses and assign a probability to each (probabilities should sum "
            f"to 1.0). Format: [response] (probability: X.XX)"
        )
    raise ValueError(f"unknown style {style!r}; known: chapter, tags")


# -- probabilities -----------------------------------------------------------------------------------

_PROB_NUMBER = re.compile(r"\s*([+-]?(?:\d{1,12}(?:\.\d{0,12})?|\.\d{1,12})(?:[eE][+-]?\d{1,3})?)\s*(%?)\s*", re.ASCII)
_PROB_FRACTION = re.compile(r"\s*(\d{1,6})\s*/\s*(\d{1,6})\s*", re.ASCII)
_BARE_NUMBER = re.compile(r"\s*(\d{1,12}(?:\.\d{0,12})?|\.\d{1,12})\s*", re.ASCII)  # rule 1b's numbers


def _strip_period(s: str) -> str:
    """One sentence-ending period goes: ``"0.5."`` is 0.5 (``"0.5.5"`` and ``"0.5.."`` stay unreadable)."""
    s = s.strip()
    return s[:-1] if s.endswith(".") else s


def parse_probability(s: Any) -> float | None:
    """A stated probability (rule 1 of the module docstring): a float in ``[0, 1]``, or ``None``; never raises.

    ``"0.35"``, ``".35"``, ``"0.35."``, ``"3.5e-1"``, ``"35%"``, ``"7/20"`` -> 0.35.  A bare number above 1
    (``"35"``, ``"1.5"``) gives ``None`` here: only :func:`parse_verbalized` reads it, as a percentage, and only
    when the whole reply is on a percent scale (rule 1b).
    """
    if isinstance(s, bool):
        return None
    if isinstance(s, (int, float)):
        v = float(s)
    else:
        if not isinstance(s, str) or len(s) > 64:
            return None
        s = _strip_period(s.replace("\u2212", "-"))
        m = _PROB_FRACTION.fullmatch(s)
        if m:
            num, den = int(m.group(1)), int(m.group(2))
            return num / den if den > 0 and num <= den else None
        m = _PROB_NUMBER.fullmatch(s)
        if not m:
            return None
        v = float(m.group(1))
        if m.group(2):
            v = v / 100.0 if 0.0 <= v <= 100.0 else float("nan")
    if not math.isfinite(v) or v < 0 or v > 1.0:
        return None
    return v


def _bare_number(s: str | None) -> float | None:
    """The value of a bare non-negative number (no sign, ``%``, fraction or exponent), for rule 1b."""
    if not isinstance(s, str) or len(s) > 64:
        return None
    m = _BARE_NUMBER.fullmatch(_strip_period(s))
    return float(m.group(1)) if m else None


def _stated_probabilities(raws: list[str | None]) -> list[float | None]:
    """Rule 1 for each candidate's probability field (``None``: no field), then rule 1b for the reply as a whole."""
    probs = [None if r is None else parse_probability(r) for r in raws]
    written = [r for r in raws if r is not None and (parse_probability(r) is not None or _bare_number(r) is not None)]
    bare = [_bare_number(r) for r in written]
    if (written and all(b is not None and b <= 100.0 for b in bare) and max(bare) > 1.0
            and abs(sum(bare) - 100.0) <= 1.0):
        return [None if r is None or _bare_number(r) is None else _bare_number(r) / 100.0 for r in raws]
    return probs


# -- parsing -----------------------------------------------------------------------------------------

_TAG = re.compile(r"<(/?)(response|text|probability)\s*>", re.IGNORECASE)
_CHAPTER = re.compile(r"\(\s*(?:probability|prob|p)\s*[:=]\s*([^()\n]{0,40}?)\s*\)", re.IGNORECASE)
_LIST_MARK = re.compile(r"^\s*(?:[-*•]|\(?\d{1,3}[.)]|response\s*\d{1,3}\s*[:.)-])\s*", re.IGNORECASE)


def _clean_text(t: str) -> str:
    t = t.strip()
    if len(t) > _MAX_TEXT:
        t = t[:_MAX_TEXT]
    return t


def _parse_tags(text: str) -> list[tuple[str, str | None]]:
    """Linear scan of the tag events; a block runs from ``<response>`` to ``</response>`` or the next
    ``<response>`` or the end (truncated output)."""
    out: list[tuple[str, str | None]] = []
    events = [(m.start(), m.end(), m.group(1) == "/", m.group(2).lower()) for m in _TAG.finditer(text)]
    blocks: list[tuple[int, int]] = []
    start = None
    for s, e, closing, name in events:
        if name != "response":
            continue
        if not closing:
            if start is not None:
                blocks.append((start, s))  # an unclosed block ends where the next one starts
            start = e
        elif start is not None:
            blocks.append((start, s))
            start = None
    if start is not None:
        blocks.append((start, len(text)))  # truncated: the last block runs to the end
    if not blocks:  # <text>/<probability> pairs without <response> wrappers
        blocks = [(0, len(text))] if any(n == "text" for _, _, _, n in events) else []
        return _parse_text_prob_runs(text, events) if blocks else []
    for b0, b1 in blocks[:MAX_CANDIDATES]:
        inner = [(s, e, c, n) for s, e, c, n in events if b0 <= s and e <= b1]
        body, prob = _fields(text, b0, b1, inner)
        if body:
            out.append((body, prob))
    return out


def _fields(text: str, b0: int, b1: int, inner) -> tuple[str, str | None]:
    spans: dict[str, tuple[int, int]] = {}
    opened: dict[str, int] = {}
    for s, e, closing, name in inner:
        if name == "response":
            continue
        if not closing:
            opened.setdefault(name, e)
        elif name in opened and name not in spans:
            spans[name] = (opened[name], s)
    for name, o in opened.items():  # truncated field: runs to the end of the block
        spans.setdefault(name, (o, b1))
    prob = text[slice(*spans["probability"])] if "probability" in spans else None
    if "text" in spans:
        body = text[slice(*spans["text"])]
    else:  # no <text> tags: the block without its probability field
        body = text[b0:b1]
        if "probability" in spans:
            p0, p1 = spans["probability"]
            body = text[b0:p0] + text[p1:b1]
        body = _TAG.sub(" ", body)
    return _clean_text(body), prob


def _parse_text_prob_runs(text: str, events) -> list[tuple[str, str | None]]:
    """``<text>..</text><probability>..</probability>`` pairs without ``<response>`` blocks."""
    out: list[tuple[str, str | None]] = []
    cur_text, opened = None, {}
    for s, e, closing, name in events:
        if not closing:
            opened[name] = e
            continue
        if name not in opened:
            continue
        value = text[opened.pop(name):s]
        if name == "text":
            if cur_text is not None:
                out.append((_clean_text(cur_text), None))
            cur_text = value
        elif name == "probability" and cur_text is not None:
            out.append((_clean_text(cur_text), value))
            cur_text = None
        if len(out) >= MAX_CANDIDATES:
            break
    if cur_text is not None and len(out) < MAX_CANDIDATES:
        out.append((_clean_text(cur_text), None))
    return [(t, p) for t, p in out if t]


def _parse_chapter(text: str) -> list[tuple[str, str | None]]:
    """``[response] (probability: X.XX)``: the text is the last ``[...]`` before each probability, else the last
    non-empty line before it (list markers such as ``1.`` or ``-`` removed)."""
    out: list[tuple[str, str | None]] = []
    prev = 0
    for m in _CHAPTER.finditer(text):
        segment = text[prev:m.start()]
        prev = m.end()
        close = segment.rfind("]")
        opening = segment.rfind("[", 0, close) if close >= 0 else -1
        if close >= 0 and opening >= 0 and not segment[close + 1:].strip():
            body = segment[opening + 1:close]
        else:
            lines = [ln for ln in segment.splitlines() if ln.strip()]
            body = lines[-1] if lines else ""
            body = body.strip().strip("[]").strip()
        body = _LIST_MARK.sub("", body, count=1).strip().strip('"').strip()
        if m.group(1).strip().upper() == "X.XX":
            continue  # the prompt's own template, echoed (e.g. the whole sequence decoded, prompt included)
        if body:
            out.append((_clean_text(body), m.group(1)))
        if len(out) >= MAX_CANDIDATES:
            break
    return out


# The placeholders of verbalized_prompt's examples: a model (or a decode that includes the prompt) echoing
# the format is not a candidate.
_TEMPLATE_TEXTS = frozenset({"...", "…"})


def _key(t: str) -> str:
    return " ".join(t.split()).casefold()


def parse_verbalized(text: Any, max_chars: int = MAX_CHARS) -> Candidates:
    """Candidates and their normalised probabilities from a Verbalized Sampling reply (see the module docstring).

    Reads the paper's tags (``<response><text>..</text><probability>..</probability></response>``, also
    unclosed/truncated blocks and ``<text>``/``<probability>`` pairs without wrappers), else the chapter's
    ``[response] (probability: X.XX)`` lines.  Returns a :class:`Candidates` list (empty when nothing is
    found) whose probabilities sum to 1, with ``.fallback`` naming the rule used.  Never raises; reads at most
    ``max_chars`` characters and keeps at most :data:`MAX_CANDIDATES` candidates.
    """
    try:
        if not isinstance(text, str):
            return Candidates()
        text = text[:max(0, int(max_chars))]
        raw, fmt = _parse_tags(text), "tags"
        if not raw:
            raw, fmt = _parse_chapter(text), "chapter"
        if not raw:
            return Candidates()
        raw = [(b, p) for b, p in raw if b.strip() not in _TEMPLATE_TEXTS]  # echoed prompt templates
        if not raw:
            return Candidates()
        raw = list(zip([b for b, _ in raw], _stated_probabilities([p for _, p in raw])))  # rules 1 and 1b
        merged: dict[str, list] = {}
        for body, p in raw:  # rule 2: duplicates are one response
            k = _key(body)
            if k in merged:
                if p is not None:
                    merged[k][1] = p if merged[k][1] is None else merged[k][1] + p
            else:
                merged[k] = [body, p]
        items = list(merged.values())
        stated = [p for _, p in items if p is not None]
        fallback = None
        if not stated or sum(stated) <= 0:
            fallback, weights = "uniform", [1.0] * len(items)
        elif len(stated) < len(items):
            mean = sum(stated) / len(stated)
            fallback, weights = "imputed", [mean if p is None else p for _, p in items]
            if sum(weights) <= 0:
                fallback, weights = "uniform", [1.0] * len(items)
        else:
            weights = [p for _, p in items]
        total = sum(weights)
        return Candidates([Candidate(b, w / total, p) for (b, p), w in zip(items, weights)], fallback, fmt)
    except Exception:  # pragma: no cover - defensive: model output must never crash a notebook
        return Candidates()


def sample_verbalized(candidates: list[Candidate], rng: random.Random | int | None = None) -> Candidate | None:
    """Draw one candidate with probability ``prob`` (inverse CDF on one uniform draw); ``None`` if there are none.

    ``rng``: a ``random.Random`` (or an int seed, or ``None`` for a fresh unseeded one; ``numpy.random.Generator``
    works too).  Probabilities need not be normalised (they are weights); non-finite or negative weights count 0,
    and all-zero weights fall back to uniform.
    """
    items = list(candidates or [])
    if not items:
        return None
    if rng is None or isinstance(rng, int):
        rng = random.Random(rng)
    u = float(rng.random())
    w = [c.prob if isinstance(c.prob, (int, float)) and math.isfinite(c.prob) and c.prob > 0 else 0.0 for c in items]
    total = sum(w)
    if total <= 0:
        w, total = [1.0] * len(items), float(len(items))
    acc = 0.0
    for c, wi in zip(items, w):
        acc += wi / total
        if u < acc:
            return c
    return next(c for c, wi in zip(reversed(items), reversed(w)) if wi > 0)  # rounding: the last positive one
