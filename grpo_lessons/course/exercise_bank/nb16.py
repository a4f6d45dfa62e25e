"""Exercises of notebooks/16_gopo.ipynb."""

from __future__ import annotations

import torch

from ..exercises import Exercise, ExerciseError, learner_call, register


def _cases():
    gen = torch.Generator().manual_seed(16)
    out = [(torch.rand(5 * 6, generator=gen, dtype=torch.float64), 6),
           (torch.randn(3 * 4, generator=gen, dtype=torch.float64) * 100, 4),
           (torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0], dtype=torch.float64), 4),  # ties
           (torch.tensor([3.0, 3.0, 3.0, 3.0, 2.0, 5.0], dtype=torch.float64), 2)]  # an all-tied pair, a G = 2 group
    out.append((torch.tensor([0.2, 0.9, 0.9, 0.1, 0.9, 0.5], dtype=torch.float64), 6))
    return out


def reference_gopo(rewards, G):
    """GOPO's advantages with average ranks for ties: the package's ``rank_advantages``."""
    from grpo_lessons.core.advantages import rank_advantages

    return rank_advantages(rewards, G, ties="average")


def _check_gopo(fn) -> None:
    for r, G in _cases():
        want = reference_gopo(r, G)
        got = learner_call(fn, r, G)
        try:
            got = torch.as_tensor(got, dtype=torch.float64)
        except (TypeError, ValueError, RuntimeError):
            raise ExerciseError(f"return a tensor of advantages, got {type(got).__name__}") from None
        if got.shape != want.shape:
            raise ExerciseError(f"return one advantage per completion: shape {tuple(want.shape)}, got {tuple(got.shape)}")
        if not torch.allclose(got, want, atol=1e-9):
            i = int((got - want).abs().argmax())
            hint = ("A_i = 2 - 4 (rank_i - 1) / (G - 1) with rank 1 = the BEST reward of the group; tied rewards share "
                    "the average of their ranks.")
            if torch.allclose(got, -want, atol=1e-9):
                hint = "Your signs are flipped: rank 1 is the highest reward, and it gets +2. " + hint
            raise ExerciseError(f"rewards {r.view(-1, G).tolist()} (G = {G}): completion {i} should get "
                                f"{float(want[i]):.4g}, you give {float(got[i]):.4g}. {hint}")


register(Exercise(
    name="16-gopo-by-hand",
    notebook="16_gopo.ipynb",
    variable="my_gopo",
    prompt="Write my_gopo(rewards, G) -> (N,) GOPO advantages 2 - 4 (rank - 1) / (G - 1), rank 1 = best, with "
           "average ranks for ties.",
    kind="code",
    check=_check_gopo,
    reference=reference_gopo,
    package_code=("from grpo_lessons.core.advantages import rank_advantages\n\n"
                  "def my_gopo(rewards, G):\n    return rank_advantages(rewards, G)\n"),
    solution_code=(
        "import torch\n\n"
        "def my_gopo(rewards, G):\n"
        "    g = rewards.view(-1, G)                                             # (groups, G)\n"
        "    better = (g[:, None, :] > g[:, :, None]).sum(-1).double()           # how many beat each one\n"
        "    tied = (g[:, None, :] == g[:, :, None]).sum(-1).double()            # itself included\n"
        "    rank = better + (tied + 1) / 2                                      # average rank, 1 = best\n"
        "    return (2 - 4 * (rank - 1) / (G - 1)).reshape(-1)\n"
    ),
    wrong_code=(
        # rank 1 = worst (the chapter's convention) with the paper's formula: every sign flipped
        "import torch\n\n"
        "def my_gopo(rewards, G):\n"
        "    g = rewards.view(-1, G)\n"
        "    worse = (g[:, None, :] < g[:, :, None]).sum(-1).double()\n"
        "    tied = (g[:, None, :] == g[:, :, None]).sum(-1).double()\n"
        "    rank = worse + (tied + 1) / 2\n"
        "    return (2 - 4 * (rank - 1) / (G - 1)).reshape(-1)\n",
        # ties broken by position (argsort): an all-tied group still gets +-2
        "import torch\n\n"
        "def my_gopo(rewards, G):\n"
        "    g = rewards.view(-1, G)\n"
        "    rank = torch.argsort(torch.argsort(-g, dim=1, stable=True), dim=1).double() + 1\n"
        "    return (2 - 4 * (rank - 1) / (G - 1)).reshape(-1)\n",
    ),
))


_TIED = (0.7, 0.2, 0.7, 0.7, 0.1)


def _check_tie_rules(answer) -> None:
    from grpo_lessons.core.advantages import rank_advantages

    if not isinstance(answer, (tuple, list)) or len(answer) != 2:
        raise ExerciseError(f"answer with a pair (ties='first', ties='average'), got {answer!r}")
    r = torch.tensor(_TIED, dtype=torch.float64)
    want = (float(rank_advantages(r, 5, ties="first")[3]), float(rank_advantages(r, 5, ties="average")[3]))
    names = ("under ties='first'", "under ties='average'")
    hints = ("The three 0.7s take ranks 1, 2, 3 in the order they appear: completion 3 is the third of them.",
             "The three 0.7s share ranks 1, 2 and 3: each gets the average rank 2.")
    for got, w, name, hint in zip(answer, want, names, hints):
        if isinstance(got, bool) or not isinstance(got, (int, float)) or abs(float(got) - w) > 1e-6:
            raise ExerciseError(f"{got!r} is not completion 3's advantage {name}. {hint} Then A = 2 - 4 (rank - 1) / (G - 1) "
                                "with G = 5.")


register(Exercise(
    name="16-tie-rules",
    notebook="16_gopo.ipynb",
    variable="tie_advantages",
    prompt="A group of G = 5 rewards [0.7, 0.2, 0.7, 0.7, 0.1]: the advantage of completion 3 (0-based, the third "
           "0.7) under the authors' ties='first' and under ties='average'. A pair.",
    kind="prediction",
    check=_check_tie_rules,
    solution_code="tie_advantages = (2 - 4 * (3 - 1) / 4, 2 - 4 * (2 - 1) / 4)",
    wrong_code=("tie_advantages = (2.0, 1.0)", "tie_advantages = (0.0, 0.0)", "tie_advantages = (1.0, 1.0)",
                "tie_advantages = (-1.0, 1.0)", "tie_advantages = 4.0"),
))
