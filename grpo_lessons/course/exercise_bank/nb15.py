"""Exercises of notebooks/15_gdpo.ipynb."""

from __future__ import annotations

import torch

from ..exercises import Exercise, ExerciseError, learner_call, register


def _cases():
    gen = torch.Generator().manual_seed(15)
    out = []
    for n_groups, G, K in ((3, 4, 2), (2, 8, 3), (5, 2, 2)):
        r = torch.rand(n_groups * G, K, generator=gen, dtype=torch.float64)
        r[:, 0] = (r[:, 0] > 0.5).double()  # a 0/1 correctness column
        r[:, 1:] *= 50.0                     # wide-scale rewards
        w = torch.rand(K, generator=gen, dtype=torch.float64) + 0.1
        out.append((r, G, w))
    r = torch.tensor([[1.0, 3.0], [1.0, 5.0], [0.0, 7.0], [0.0, 9.0]], dtype=torch.float64)  # one all-equal column
    out.append((torch.cat([r, torch.tensor([[1.0, 4.0]] * 4, dtype=torch.float64)]), 4, torch.tensor([1.0, 0.5])))
    return out


def reference_gdpo(rewards, G, weights):
    """GDPO's advantages with TRL's conventions: the package's ``decoupled_advantages``."""
    from grpo_lessons.core.advantages import decoupled_advantages

    return decoupled_advantages(rewards, G, weights=torch.as_tensor(weights).tolist())


def _check_gdpo(fn) -> None:
    for r, G, w in _cases():
        want = reference_gdpo(r, G, w)
        got = learner_call(fn, r, G, w)
        try:
            got = torch.as_tensor(got, dtype=torch.float64)
        except (TypeError, ValueError, RuntimeError):
            raise ExerciseError(f"return a tensor of advantages, got {type(got).__name__}") from None
        if got.shape != want.shape:
            raise ExerciseError(f"return one advantage per completion: shape {tuple(want.shape)}, got {tuple(got.shape)}")
        if not torch.allclose(got, want, atol=1e-6, rtol=1e-5):
            batch_only = (want - want.mean()).abs().max()
            hint = ("Per reward k: (r_k - group mean) / (group std + 1e-4), Bessel std; weighted sum over k; then the "
                    "whole batch renormalised: (A - mean) / (std + 1e-4).")
            if torch.allclose(got.mean(), torch.zeros((), dtype=torch.float64), atol=1e-6) and batch_only > 0:
                hint = "The batch mean is right but the values are not: check the std (n - 1) and eps = 1e-4. " + hint
            raise ExerciseError(f"for rewards of shape {tuple(r.shape)}, G = {G}, the advantages differ from GDPO's by up "
                                f"to {float((got - want).abs().max()):.3g}. {hint}")


register(Exercise(
    name="15-gdpo-by-hand",
    notebook="15_gdpo.ipynb",
    variable="my_gdpo",
    prompt="Write my_gdpo(rewards, G, weights) -> (N,) GDPO advantages for rewards of shape (N, K) (TRL's "
           "normalize_then_sum: per-reward group normalisation, weighted sum, batch renormalisation).",
    kind="code",
    check=_check_gdpo,
    reference=reference_gdpo,
    package_code=("from grpo_lessons.core.advantages import decoupled_advantages\n\n"
                  "def my_gdpo(rewards, G, weights):\n"
                  "    return decoupled_advantages(rewards, G, weights=weights.tolist())\n"),
    solution_code=(
        "def my_gdpo(rewards, G, weights):\n"
        "    g = rewards.view(-1, G, rewards.shape[1])                       # (groups, G, K)\n"
        "    a_k = (g - g.mean(1, keepdim=True)) / (g.std(1, keepdim=True) + 1e-4)\n"
        "    a = (a_k * weights).sum(-1).reshape(-1)                        # (N,)\n"
        "    return (a - a.mean()) / (a.std() + 1e-4)\n"
    ),
    wrong_code=(
        # no batch renormalisation (the chapter's formula)
        "def my_gdpo(rewards, G, weights):\n"
        "    g = rewards.view(-1, G, rewards.shape[1])\n"
        "    a_k = (g - g.mean(1, keepdim=True)) / (g.std(1, keepdim=True) + 1e-4)\n"
        "    return (a_k * weights).sum(-1).reshape(-1)\n",
        # sum then normalise (TRL's default)
        "def my_gdpo(rewards, G, weights):\n"
        "    g = (rewards * weights).sum(-1).view(-1, G)\n"
        "    return ((g - g.mean(1, keepdim=True)) / (g.std(1, keepdim=True) + 1e-4)).reshape(-1)\n",
        # population std
        "def my_gdpo(rewards, G, weights):\n"
        "    g = rewards.view(-1, G, rewards.shape[1])\n"
        "    a_k = (g - g.mean(1, keepdim=True)) / (g.std(1, keepdim=True, correction=0) + 1e-4)\n"
        "    a = (a_k * weights).sum(-1).reshape(-1)\n"
        "    return (a - a.mean()) / (a.std(correction=0) + 1e-4)\n",
    ),
))


#: The group of section 1 of the notebook: correctness and a length score in tens of tokens.
GROUP_CORRECT = (1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0)
GROUP_LENGTH = (43.0, 12.0, 55.0, 20.0, 38.0, 61.0, 17.0, 49.0)


def _check_negatives(x) -> None:
    from grpo_lessons.core.advantages import group_advantages

    r = torch.tensor(GROUP_CORRECT, dtype=torch.float64) + 0.1 * torch.tensor(GROUP_LENGTH, dtype=torch.float64)
    a = group_advantages(r, len(GROUP_CORRECT))
    want = int(sum(1 for c, v in zip(GROUP_CORRECT, a.tolist()) if c == 1.0 and v < 0))
    if isinstance(x, bool) or not isinstance(x, (int, float)) or float(x) != want:
        raise ExerciseError(f"{x!r} is not it. Add 0.1 x length to each correctness, subtract the group mean "
                            "(the std only rescales), and count the correct completions that end up below it.")


register(Exercise(
    name="15-drowned",
    notebook="15_gdpo.ipynb",
    variable="n_negative",
    prompt="Before running section 1: in its group (correct [1, 0, 0, 1, 0, 0, 1, 0], length in tens [43, 12, 55, 20, "
           "38, 61, 17, 49]), under sum-then-normalise with weights [1, 0.1], how many of the three correct "
           "completions get a negative advantage? An integer.",
    kind="prediction",
    check=_check_negatives,
    reveal_cell="15-03",
    solution_code="n_negative = 2",
    wrong_code=("n_negative = 0", "n_negative = 3", "n_negative = 1"),
))
