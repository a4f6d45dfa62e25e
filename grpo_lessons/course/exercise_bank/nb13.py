"""Exercises of notebooks/13_dppo.ipynb."""

from __future__ import annotations

import torch

from ..exercises import Exercise, ExerciseError, learner_call, register
from grpo_lessons.core.objectives import dppo_trust_mask


def _check_tv_keep(answer) -> None:
    try:
        keep = [int(x) for x in answer]
    except (TypeError, ValueError):
        raise ExerciseError(f"answer with a list of four 0/1 values, got {answer!r}") from None
    mu = torch.tensor([0.5, 0.5, 0.9, 0.05], dtype=torch.float64)
    p = torch.tensor([0.7, 0.3, 0.99, 0.18], dtype=torch.float64)
    adv = torch.tensor([1.0, -1.0, 1.0, 1.0], dtype=torch.float64)
    ref = dppo_trust_mask(p.log(), mu.log(), adv, kind="binary_tv", delta_low=0.15, delta_high=0.15).long().tolist()
    if len(keep) != 4 or any(k not in (0, 1) for k in keep):
        raise ExerciseError(f"answer with four values, each 0 (masked) or 1 (kept); got {answer!r}")
    if keep != ref:
        wrong = [i for i in range(4) if keep[i] != ref[i]]
        raise ExerciseError(f"token(s) {wrong} are wrong. A token is masked only if it moved MORE than delta = 0.15 "
                            "in probability in the direction its advantage pushes (up for A > 0, down for A < 0).")


register(Exercise(
    name="13-tv-mask",
    notebook="13_dppo.ipynb",
    variable="keep",
    prompt="mu = [.5, .5, .9, .05], pi_theta = [.7, .3, .99, .18], A = [+, -, +, +], delta = 0.15: which tokens "
           "does binary-TV keep? A list of four 0/1.",
    kind="number",
    check=_check_tv_keep,
    solution_code="keep = [0, 0, 1, 1]",
    wrong_code=("keep = [1, 1, 1, 1]", "keep = [0, 0, 0, 0]", "keep = [0, 0, 1, 0]", "keep = [0, 1, 1, 1]"),
))


def _check_kl_keep(fn) -> None:
    g = torch.Generator().manual_seed(13)
    mu = torch.tensor([0.5, 0.5, 0.9, 0.05], dtype=torch.float64)  # the worked case first
    p = torch.tensor([0.7, 0.3, 0.99, 0.2], dtype=torch.float64)
    adv = torch.tensor([1.0, -1.0, 1.0, 1.0], dtype=torch.float64)
    cases = [(p, mu, adv, 0.05), (p, mu, adv, 0.1)]
    for _ in range(6):
        mu_r = torch.rand(200, generator=g, dtype=torch.float64) * 0.98 + 0.01
        p_r = (mu_r + 0.3 * torch.randn(200, generator=g, dtype=torch.float64)).clamp(0.005, 0.995)
        a_r = torch.randn(200, generator=g, dtype=torch.float64)
        cases.append((p_r, mu_r, a_r, 0.05))
    for p_c, mu_c, a_c, delta in cases:
        got = torch.as_tensor(learner_call(fn, p_c.clone(), mu_c.clone(), a_c.clone(), delta)).double().flatten()
        ref = dppo_trust_mask(p_c.log(), mu_c.log(), a_c, kind="binary_kl", delta_low=delta, delta_high=delta)
        if got.shape != ref.shape:
            raise ExerciseError(f"return one 0/1 value per token, shape {tuple(ref.shape)}; got {tuple(got.shape)}")
        bad = (got != ref).nonzero().flatten()
        if len(bad):
            i = int(bad[0])
            raise ExerciseError(
                f"token with mu = {float(mu_c[i]):.3f}, pi_theta = {float(p_c[i]):.3f}, A = {float(a_c[i]):+.2f}, "
                f"delta = {delta}: you return {float(got[i]):g}, expected {float(ref[i]):g} "
                f"({len(bad)} tokens differ). "
                "D is the KL of two Bernoullis, mu log(mu/p) + (1-mu) log((1-mu)/(1-p)); mask only if D > delta AND "
                "the token moved the way A pushes (p > mu for A > 0, p < mu for A <= 0).")


register(Exercise(
    name="13-binary-kl",
    notebook="13_dppo.ipynb",
    variable="binary_kl_keep",
    prompt="Write binary_kl_keep(p, mu, adv, delta) -> a 0/1 tensor: DPPO's binary-KL trust-region mask per token.",
    kind="code",
    check=_check_kl_keep,
    solution_code=(
        "import torch\n"
        "def binary_kl_keep(p, mu, adv, delta):\n"
        "    D = mu * torch.log(mu / p) + (1 - mu) * torch.log((1 - mu + 1e-8) / (1 - p + 1e-8))\n"
        "    bad = torch.where(adv > 0, (D > delta) & (p > mu), (D > delta) & (p < mu))\n"
        "    return (~bad).double()\n"
    ),
    wrong_code=(
        # the chapter's p log(p / mu)
        "import torch\n"
        "def binary_kl_keep(p, mu, adv, delta):\n"
        "    D = p * torch.log(p / mu)\n"
        "    bad = torch.where(adv > 0, (D > delta) & (p > mu), (D > delta) & (p < mu))\n"
        "    return (~bad).double()\n",
        # symmetric: ignores the direction of the advantage
        "import torch\n"
        "def binary_kl_keep(p, mu, adv, delta):\n"
        "    D = mu * torch.log(mu / p) + (1 - mu) * torch.log((1 - mu) / (1 - p))\n"
        "    return (D <= delta).double()\n",
        # only the sampled token's term
        "import torch\n"
        "def binary_kl_keep(p, mu, adv, delta):\n"
        "    D = mu * torch.log(mu / p)\n"
        "    bad = torch.where(adv > 0, (D > delta) & (p > mu), (D > delta) & (p < mu))\n"
        "    return (~bad).double()\n",
    ),
))
