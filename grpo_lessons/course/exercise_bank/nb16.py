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


def _check_gopo(fn) -> None:
    from grpo_lessons.core.advantages import rank_advantages

    for r, G in _cases():
        want = rank_advantages(r, G, ties="average")
        try:
            got = learner_call(fn, r.clone(), G)
        except ExerciseError:
            raise
        except Exception as err:  # noqa: BLE001
            if type(err).__name__ == "NotAttempted":
                raise
            raise ExerciseError(f"your function raised {type(err).__name__}: {err}") from None
        got = torch.as_tensor(got, dtype=torch.float64)
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


def _check_spread(x) -> None:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or abs(float(x) - 4.0) > 1e-9:
        raise ExerciseError(f"{x!r} is not it. Under the authors' tie-breaking four equal rewards still get four "
                            "distinct ranks 1..4, so the advantages run from +2 to -2. What is max - min?")


register(Exercise(
    name="16-tied-spread",
    notebook="16_gopo.ipynb",
    variable="spread",
    prompt="A group of G = 4 equal rewards under the authors' tie-breaking (ties='first'): what is "
           "max(A) - min(A)? A number.",
    kind="prediction",
    check=_check_spread,
    solution_code="spread = 4.0",
    wrong_code=("spread = 0.0", "spread = 2.0", "spread = 1.3333"),
))
