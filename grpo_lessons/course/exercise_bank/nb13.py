"""Exercises of notebooks/13_dppo.ipynb: the binary-TV mask by hand; how far binary-KL lets a token rise."""

from __future__ import annotations

import torch

from ..exercises import Exercise, ExerciseError, check_function, register
from grpo_lessons.core.objectives import dppo_trust_mask

_MU = torch.tensor([0.5, 0.5, 0.9, 0.05, 0.6], dtype=torch.float64)
_P = torch.tensor([0.7, 0.3, 0.99, 0.18, 0.4], dtype=torch.float64)
_ADV = torch.tensor([1.0, -1.0, 1.0, 1.0, 0.0], dtype=torch.float64)  # the last token's advantage is exactly 0


def _check_tv_keep(answer) -> None:
    try:
        keep = [int(x) for x in answer]
    except (TypeError, ValueError):
        raise ExerciseError(f"answer with a list of five 0/1 values, got {answer!r}") from None
    ref = dppo_trust_mask(_P.log(), _MU.log(), _ADV, kind="binary_tv", delta_low=0.15, delta_high=0.15).long().tolist()
    if len(keep) != 5 or any(k not in (0, 1) for k in keep):
        raise ExerciseError(f"answer with five values, each 0 (masked) or 1 (kept); got {answer!r}")
    if keep != ref:
        wrong = [i for i in range(5) if keep[i] != ref[i]]
        hint = ("A token is masked only if it moved MORE than delta = 0.15 in probability in the direction its "
                "advantage pushes (up for A > 0, down for A <= 0).")
        if wrong == [4]:
            hint = "Token 4 has A = 0: which side of the rule does A = 0 fall on (A > 0, or A <= 0)? " + hint
        raise ExerciseError(f"token(s) {wrong} are wrong. {hint}")


register(Exercise(
    name="13-tv-mask",
    notebook="13_dppo.ipynb",
    variable="keep",
    prompt="mu = [.5, .5, .9, .05, .6], pi_theta = [.7, .3, .99, .18, .4], A = [+1, -1, +1, +1, 0], delta = 0.15: "
           "which tokens does binary-TV keep? A list of five 0/1.",
    kind="number",
    check=_check_tv_keep,
    solution_code="keep = [0, 0, 1, 1, 0]",
    wrong_code=("keep = [0, 0, 1, 1, 1]", "keep = [1, 1, 1, 1, 1]", "keep = [0, 0, 0, 0, 0]", "keep = [0, 0, 1, 0, 0]",
                "keep = [0, 1, 1, 1, 0]", "keep = [0, 0, 1, 1]"),
))


def _bernoulli_kl(mu, p):
    return mu * torch.log(mu / p) + (1 - mu) * torch.log((1 - mu) / (1 - p))


def reference_kl_ceiling(mu, delta):
    """The largest pi_theta > mu with D(mu, pi_theta) <= delta (binary KL, A > 0), by bisection: D rises from 0 at
    pi_theta = mu to infinity as pi_theta -> 1, so the answer is unique and below 1."""
    mu = torch.as_tensor(mu, dtype=torch.float64)
    lo, hi = mu.clone(), torch.ones_like(mu)
    for _ in range(200):
        mid = (lo + hi) / 2
        inside = _bernoulli_kl(mu, mid) <= delta
        lo, hi = torch.where(inside, mid, lo), torch.where(inside, hi, mid)
    return lo


def _check_ceiling(fn) -> None:
    g = torch.Generator().manual_seed(13)
    cases = [(torch.tensor([0.5, 0.9, 0.05, 0.01, 0.99, 0.3], dtype=torch.float64), 0.05),
             (torch.tensor([1e-3, 0.2, 0.999], dtype=torch.float64), 0.05),
             (0.01 + 0.98 * torch.rand(20, generator=g, dtype=torch.float64), 0.15)]
    check_function(fn, reference_kl_ceiling, cases, what="kl_ceiling", atol=1e-6,
                   hint="For A > 0 a token is masked when pi > mu and D(mu, pi) = mu log(mu/pi) + (1 - mu) "
                        "log((1 - mu)/(1 - pi)) > delta (pi: pi_theta). D grows from 0 at pi = mu towards infinity at "
                        "pi = 1: find where "
                        "it reaches delta, e.g. by bisection on [mu, 1] (vectorised with torch.where).")


register(Exercise(
    name="13-kl-ceiling",
    notebook="13_dppo.ipynb",
    variable="kl_ceiling",
    prompt="Write kl_ceiling(mu, delta): for tokens with A > 0 and sampler probabilities mu (a tensor), the highest "
           "pi_theta that DPPO's binary-KL mask still keeps (D(mu, pi_theta) = delta with pi_theta > mu).",
    kind="code",
    check=_check_ceiling,
    reference=reference_kl_ceiling,
    solution_code=(
        "import torch\n"
        "def kl_ceiling(mu, delta):\n"
        "    D = lambda p: mu * torch.log(mu / p) + (1 - mu) * torch.log((1 - mu) / (1 - p))\n"
        "    lo, hi = mu.clone(), torch.ones_like(mu)          # D(lo) = 0 <= delta < D(hi) = infinity\n"
        "    for _ in range(100):\n"
        "        mid = (lo + hi) / 2\n"
        "        inside = D(mid) <= delta\n"
        "        lo, hi = torch.where(inside, mid, lo), torch.where(inside, hi, mid)\n"
        "    return lo\n"
    ),
    wrong_code=(
        # the chapter's p log(p / mu)
        "import torch\n"
        "def kl_ceiling(mu, delta):\n"
        "    lo, hi = mu.clone(), torch.ones_like(mu)\n"
        "    for _ in range(100):\n"
        "        mid = (lo + hi) / 2\n"
        "        inside = mid * torch.log(mid / mu) <= delta\n"
        "        lo, hi = torch.where(inside, mid, lo), torch.where(inside, hi, mid)\n"
        "    return lo\n",
        # binary TV's ceiling: the same absolute move everywhere
        "import torch\n"
        "def kl_ceiling(mu, delta):\n"
        "    return torch.clamp(mu + delta, max=1.0)\n",
        # the KL the other way round, D(p || mu)
        "import torch\n"
        "def kl_ceiling(mu, delta):\n"
        "    D = lambda p: p * torch.log(p / mu) + (1 - p) * torch.log((1 - p) / (1 - mu))\n"
        "    lo, hi = mu.clone(), torch.ones_like(mu) - 1e-12\n"
        "    for _ in range(100):\n"
        "        mid = (lo + hi) / 2\n"
        "        inside = D(mid) <= delta\n"
        "        lo, hi = torch.where(inside, mid, lo), torch.where(inside, hi, mid)\n"
        "    return lo\n",
    ),
    package_code=(
        "import torch\n"
        "from grpo_lessons.core.objectives import dppo_trust_mask\n"
        "def kl_ceiling(mu, delta):\n"
        "    lo, hi = mu.clone(), torch.ones_like(mu)\n"
        "    for _ in range(100):\n"
        "        mid = (lo + hi) / 2\n"
        "        kept = dppo_trust_mask(mid.log(), mu.log(), torch.ones_like(mu), kind='binary_kl', "
        "delta_low=delta, delta_high=delta).bool()\n"
        "        lo, hi = torch.where(kept, mid, lo), torch.where(kept, hi, mid)\n"
        "    return lo\n"
    ),
))
