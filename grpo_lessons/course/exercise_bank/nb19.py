"""Exercise of notebook 19 (TRL on Qwen): a TRL reward function for ``\\boxed{}`` answers."""

import random

from ..exercises import Exercise, ExerciseError, call_learner, register

# (completion text, reference answer, reward a correct function gives): worked out by hand
_CASES = [("So \\boxed{42}.", "42", 1.0), ("\\boxed{41} no wait \\boxed{42}", "42", 1.0),
          ("\\boxed{42} no wait \\boxed{41}", "42", 0.0), ("42", "42", 0.0), ("\\boxed{", "42", 0.0),
          ("\\boxed{1,234}", "1234", 1.0), ("\\boxed{x}", "42", 0.0), ("\\boxed{-7}", "-7", 1.0),
          ("\\boxed{ 3.5 }", "3.5", 1.0), ("", "1", 0.0)]


def reference_boxed(completions, answer, **kwargs):
    """1.0 where the last ``\\boxed{...}`` holds the right number, else 0.0 (the package's readers)."""
    from grpo_lessons.core.rewards.extract import boxed, completion_text, parse_number

    out = []
    for c, a in zip(completions, answer):
        inner = boxed(completion_text(c))
        value = parse_number(inner) if inner is not None else None
        out.append(1.0 if value is not None and value == parse_number(a) else 0.0)
    return out


def _check(fn):
    texts = [t for t, _, _ in _CASES]
    rng = random.Random(19)
    alphabet = "\\boxed{}0123456789-,. x"
    garbage = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30))) for _ in range(40)]
    completions = [[{"role": "assistant", "content": t}] for t in texts]
    answers = [a for _, a, _ in _CASES]
    got = call_learner(fn, (completions, answers))
    if not isinstance(got, (list, tuple)) or len(got) != len(_CASES):
        raise ExerciseError(f"return one float per completion: expected a list of {len(_CASES)}, got {got!r}")
    for (t, a, want), g in zip(_CASES, got):
        if g != want:
            raise ExerciseError(f"on {t!r} with answer {a!r} you return {g!r}, expected {want}. Hint: use the LAST "
                                "\\boxed{...}, drop thousands commas, compare as numbers, 0.0 when nothing parses.")
    try:
        out = call_learner(fn, ([[{"role": "assistant", "content": t}] for t in garbage], ["1"] * len(garbage)))
    except ExerciseError as err:
        if str(err).startswith("your function raised"):
            raise ExerciseError(f"on garbage model output {err}. A reward function must never raise on what a "
                                "model wrote: catch parse errors and return 0.0") from None
        raise
    if not isinstance(out, (list, tuple)) or len(out) != len(garbage) or any(v not in (0.0, 1.0) for v in out):
        raise ExerciseError("on garbage model output, return one reward per completion, each 0.0 or 1.0")


register(Exercise(
    name="19-boxed-reward", notebook="19_trl_qwen.ipynb", variable="boxed_reward", kind="code",
    prompt="Write boxed_reward(completions, answer, **kwargs) with TRL's signature: 1.0 where the last \\boxed{...} "
           "of a conversational completion holds the right number, else 0.0; never raise.",
    check=_check, reference=reference_boxed,
    solution_code=(
        "import re\n\n\ndef boxed_reward(completions, answer, **kwargs):\n    out = []\n"
        "    for c, a in zip(completions, answer):\n"
        "        text = c[-1][\"content\"] if isinstance(c, list) else str(c)\n"
        "        found = re.findall(r\"\\\\boxed\\{\\s*(-?[\\d,]*\\.?\\d+)\\s*\\}\", text)\n"
        "        try:\n"
        "            out.append(1.0 if found and float(found[-1].replace(\",\", \"\")) == float(a) else 0.0)\n"
        "        except ValueError:\n            out.append(0.0)\n    return out"),
    wrong_code=(
        "import re\n\n\ndef boxed_reward(completions, answer, **kwargs):\n"
        "    return [1.0 if re.search(r\"\\\\boxed\\{\" + re.escape(a) + r\"\\}\", c[-1][\"content\"]) else 0.0\n"
        "            for c, a in zip(completions, answer)]",
        "import re\n\n\ndef boxed_reward(completions, answer, **kwargs):\n    out = []\n"
        "    for c, a in zip(completions, answer):\n"
        "        found = re.findall(r\"\\\\boxed\\{([^}]*)\\}\", c[-1][\"content\"])\n"
        "        out.append(1.0 if found and float(found[0].replace(\",\", \"\")) == float(a) else 0.0)\n"
        "    return out"),
    package_code=(
        "from grpo_lessons.core.rewards.extract import boxed, completion_text, parse_number\n\n"
        "def boxed_reward(completions, answer, **kwargs):\n"
        "    out = []\n"
        "    for c, a in zip(completions, answer):\n"
        "        inner = boxed(completion_text(c))\n"
        "        v = parse_number(inner) if inner is not None else None\n"
        "        out.append(1.0 if v is not None and v == parse_number(a) else 0.0)\n"
        "    return out\n")))
