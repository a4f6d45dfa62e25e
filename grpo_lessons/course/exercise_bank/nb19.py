"""Exercise of notebook 19 (TRL on Qwen): a TRL reward function for ``\\boxed{}`` answers."""

import random

from ..exercises import Exercise, ExerciseError, learner_call, register

# (completion text, reference answer, reward a correct function gives): worked out by hand
_CASES = [("So \\boxed{42}.", "42", 1.0), ("\\boxed{41} no wait \\boxed{42}", "42", 1.0),
          ("\\boxed{42} no wait \\boxed{41}", "42", 0.0), ("42", "42", 0.0), ("\\boxed{", "42", 0.0),
          ("\\boxed{1,234}", "1234", 1.0), ("\\boxed{x}", "42", 0.0), ("\\boxed{-7}", "-7", 1.0),
          ("\\boxed{ 3.5 }", "3.5", 1.0), ("", "1", 0.0)]


def _check(fn):
    texts = [t for t, _, _ in _CASES]
    rng = random.Random(19)
    alphabet = "\\boxed{}0123456789-,. x"
    garbage = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30))) for _ in range(40)]
    completions = [[{"role": "assistant", "content": t}] for t in texts]
    got = learner_call(fn, completions, [a for _, a, _ in _CASES])
    if not isinstance(got, (list, tuple)) or len(got) != len(_CASES):
        raise ExerciseError(f"return one float per completion: expected a list of {len(_CASES)}, got {got!r}")
    for (t, a, want), g in zip(_CASES, got):
        if g != want:
            raise ExerciseError(f"on {t!r} with answer {a!r} you return {g!r}, expected {want}. Hint: use the LAST "
                                "\\boxed{...}, drop thousands commas, compare as numbers, 0.0 when nothing parses.")
    try:
        out = fn([[{"role": "assistant", "content": t}] for t in garbage], ["1"] * len(garbage))
    except Exception as err:  # a reward function must never raise on model output
        raise ExerciseError(f"your function raised {type(err).__name__} on garbage model output; "
                            "catch parse errors and return 0.0") from None
    if any(v not in (0.0, 1.0) for v in out):
        raise ExerciseError("rewards must be 0.0 or 1.0")


register(Exercise(
    name="19-boxed-reward", notebook="19_trl_qwen.ipynb", variable="boxed_reward", kind="code",
    prompt="Write boxed_reward(completions, answer, **kwargs) with TRL's signature: 1.0 where the last \\boxed{...} "
           "of a conversational completion holds the right number, else 0.0; never raise.",
    check=_check,
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
        "    return out")))
