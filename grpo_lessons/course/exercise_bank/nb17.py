"""Exercises of notebooks/17_diversity.ipynb."""

from __future__ import annotations

from ..exercises import Exercise, ExerciseError, close_to, learner_call, register


def _check_constant(x) -> None:
    import torch

    from grpo_lessons.core.advantages import group_advantages

    r = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 0.0, 0.0])
    want = float(group_advantages(r + 0.3, 8)[0] - group_advantages(r, 8)[0])
    close_to(x, want, what="the change of completion 0's advantage", abs_tol=1e-6,
             hint="The same number is added to every reward of the group: what happens to r_i - mean(r), and to std(r)?")


register(Exercise(
    name="17-entropy-constant",
    notebook="17_diversity.ipynb",
    variable="change",
    prompt="Rewards [1, 0, 0, 1, 0, 1, 0, 0] each get the prompt's alpha * H = 0.3 added. By how much does "
           "completion 0's GRPO advantage change? A number.",
    kind="prediction",
    check=_check_constant,
    solution_code="change = 0.0",
    wrong_code=("change = 0.3", "change = 0.3 / 0.5175", "change = -0.3"),
))


def _check_pass_at_k(fn) -> None:
    from grpo_lessons.core.diversity import pass_at_k

    for n in (1, 2, 5, 16):
        for c in range(n + 1):
            for k in range(1, n + 1):
                want = pass_at_k(n, c, k)
                try:
                    got = learner_call(fn, n, c, k)
                except ExerciseError:
                    raise
                except Exception as err:  # noqa: BLE001
                    if type(err).__name__ == "NotAttempted":
                        raise
                    raise ExerciseError(f"my_pass_at_k({n}, {c}, {k}) raised {type(err).__name__}: {err}. When n - c < k "
                                        "every set of k samples holds a right one: return 1.0.") from None
                try:
                    ok = abs(float(got) - want) <= 1e-9
                except (TypeError, ValueError):
                    ok = False
                if not ok:
                    raise ExerciseError(f"my_pass_at_k({n}, {c}, {k}) = {got!r}, expected {want:.6g}. "
                                        "pass@k = 1 - C(n - c, k) / C(n, k) (math.comb), and 1.0 when n - c < k; "
                                        "not 1 - (1 - c/n)**k, which is biased.")


register(Exercise(
    name="17-pass-at-k",
    notebook="17_diversity.ipynb",
    variable="my_pass_at_k",
    prompt="Write my_pass_at_k(n, c, k): the unbiased pass@k estimator 1 - C(n-c, k) / C(n, k) (1.0 when n - c < k).",
    kind="code",
    check=_check_pass_at_k,
    solution_code=(
        "import math\n\n"
        "def my_pass_at_k(n, c, k):\n"
        "    if n - c < k:\n"
        "        return 1.0\n"
        "    return 1.0 - math.comb(n - c, k) / math.comb(n, k)\n"
    ),
    wrong_code=(
        # the plug-in estimator: biased
        "def my_pass_at_k(n, c, k):\n"
        "    return 1.0 - (1.0 - c / n) ** k\n",
        # pass@1 for every k
        "def my_pass_at_k(n, c, k):\n"
        "    return c / n\n",
        # forgets n - c < k (math.comb gives 0 there, so this one is right by luck... unless it divides the other way)
        "import math\n\n"
        "def my_pass_at_k(n, c, k):\n"
        "    return math.comb(c, k) / math.comb(n, k)\n",
    ),
))
