"""Exercises of notebooks/04_tasks_and_rewards.ipynb."""

from __future__ import annotations

from ..exercises import Exercise, ExerciseError, call_learner, close_to, register
from grpo_lessons.core.rewards import answer_tag, completion_text, parse_number

# Completions a reward function meets in practice, with the ``answer`` column TRL passes alongside.
_CASES = (
    ("<answer>12</answer>", 12),
    ("13 - 1 = 12", 12),                                   # right number, no tag
    ("<answer>12</answer> no wait <answer>13</answer>", 12),  # the LAST tag counts
    ("<answer>twelve</answer>", 12),
    ("", 12),
    ([{"role": "assistant", "content": "<answer>7</answer>"}], 7),  # TRL's conversational form
    ("<answer> 12.0 </answer>", 12),
    ("<answer>" * 500, 12),                                # unclosed, long
    (None, 12),                                            # garbage must score 0, not raise
    ("<answer>-3</answer>", -3),
)


def _one(completion, answer) -> float:
    inner = answer_tag(completion_text(completion))
    value = parse_number(inner) if inner is not None else None
    return 1.0 if value is not None and value == parse_number(answer) else 0.0


def reference_tagged(completions, answer, **kwargs):
    """1.0 where the last <answer> tag holds exactly the number ``answer``, else 0.0 (the package's readers)."""
    return [_one(c, a) for c, a in zip(completions, answer)]


def _check_tagged(fn) -> None:
    completions = [c for c, _ in _CASES]
    answers = [a for _, a in _CASES]
    want = reference_tagged(completions, answers)
    try:
        got = call_learner(fn, (completions,), {"answer": answers})
    except ExerciseError as err:
        if str(err).startswith("your function raised"):
            raise ExerciseError(f"{err}. A reward must never raise on model output: give 0.0 for anything it "
                                "cannot read (None, lists, broken tags).") from None
        raise
    if not isinstance(got, (list, tuple)) or len(got) != len(completions):
        raise ExerciseError(f"return one float per completion: expected a list of {len(completions)}, got {got!r}")
    for (c, a), g, w in zip(_CASES, got, want):
        try:
            ok = float(g) == w
        except (TypeError, ValueError):
            ok = False
        if not ok:
            shown = repr(c) if len(repr(c)) < 60 else repr(c)[:57] + "..."
            raise ExerciseError(f"for completion {shown} with answer {a} you return {g!r}, expected {w}. Hint: "
                                "read only the last <answer> tag (answer_tag), parse it as one number "
                                "(parse_number), and take the text of conversational completions (completion_text).")


register(Exercise(
    name="04-tagged-reward",
    notebook="04_tasks_and_rewards.ipynb",
    variable="tagged_reward",
    prompt="Write a TRL reward function tagged_reward(completions, answer, **kwargs) that returns 1.0 where the "
           "last <answer> tag holds exactly the number `answer`, else 0.0, and never raises.",
    kind="code",
    check=_check_tagged,
    reference=reference_tagged,
    allowed_calls=tuple(f"grpo_lessons.core.rewards.extract.{f}" for f in ("answer_tag", "parse_number",
                                                                           "completion_text")),
    solution_code=(
        "from grpo_lessons.core.rewards import answer_tag, completion_text, parse_number\n\n"
        "def tagged_reward(completions, answer, **kwargs):\n"
        "    out = []\n"
        "    for c, a in zip(completions, answer):\n"
        "        inner = answer_tag(completion_text(c))\n"
        "        value = parse_number(inner) if inner is not None else None\n"
        "        out.append(1.0 if value is not None and value == parse_number(a) else 0.0)\n"
        "    return out\n"
    ),
    wrong_code=(
        # the last number anywhere: pays an untagged answer
        "import re\n\n"
        "def tagged_reward(completions, answer, **kwargs):\n"
        "    out = []\n"
        "    for c, a in zip(completions, answer):\n"
        "        nums = re.findall(r'-?\\d+', c if isinstance(c, str) else '')\n"
        "        out.append(1.0 if nums and int(nums[-1]) == a else 0.0)\n"
        "    return out\n",
        # a substring test: raises on None, misses conversational completions and '12.0'
        "def tagged_reward(completions, answer, **kwargs):\n"
        "    return [1.0 if f'<answer>{a}</answer>' in c else 0.0 for c, a in zip(completions, answer)]\n",
    ),
))


def _check_threshold(w) -> None:
    if isinstance(w, (int, float)) and not isinstance(w, bool) and abs(float(w) - 0.35) < 1e-3:
        raise ExerciseError("0.35 is the threshold under the SUM, where the format point is paid whatever the answer. "
                            "Under the gated reward the format bonus is paid only on a right answer.")
    close_to(w, 7.0, what="the format weight w", rel=1e-3, abs_tol=1e-3,
             hint="Under the gated reward q (1 + w f), the always-'0' policy earns 0.05 (1 + w) (right 5% of the "
                  "time, always formatted) and the honest untagged policy earns p = 0.4. Solve 0.05 (1 + w) = 0.4.")


register(Exercise(
    name="04-hack-threshold",
    notebook="04_tasks_and_rewards.ipynb",
    variable="w_threshold",
    prompt="With honest accuracy p = 0.4, above which format weight w does the 'tags, always 0' policy (right 5% of "
           "the time) earn more than the honest untagged one under the GATED reward correct * (1 + w * format)?",
    kind="number",
    check=_check_threshold,
    solution_code="w_threshold = 0.4 / 0.05 - 1",
    wrong_code=("w_threshold = 0.4 - 0.05", "w_threshold = 0.4 / 0.05", "w_threshold = 0.4"),
))
