"""Exercises of notebooks/14_cispo_scalerl.ipynb: TRL's CISPO fallback on two tokens; ScaleRL's loss in code."""

from __future__ import annotations

import torch

from ..exercises import Exercise, ExerciseError, call_learner, close_to, register
from grpo_lessons.core.losses import policy_loss


def reference_scalerl_loss(logp, old_logp, adv, mask, G):
    """ScaleRL's loss: CISPO's weight sg(min(rho, 5)) and prompt-level aggregation
    (``policy_loss(variant="scalerl")``)."""
    return policy_loss(logp, old_logp, adv, mask, variant="scalerl", group_size=G).loss


def _cases():
    g = torch.Generator().manual_seed(14)
    out = []
    for G, lengths in ((4, [6, 6, 5, 6, 2, 1, 2, 1]), (2, [3, 6, 1, 4, 5, 2])):
        B, T = len(lengths), 6
        mask = (torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]).double()  # (B, T)
        logp = -1.5 * torch.rand(B, T, generator=g, dtype=torch.float64)
        old = logp + 0.6 * torch.randn(B, T, generator=g, dtype=torch.float64)
        old[0, :2] = logp[0, :2] - 2.5  # ratios e^2.5 > 5: the cap binds
        old = torch.where(mask.bool(), old, old + 9.0)  # padding holds garbage
        adv = torch.randn(B, generator=g, dtype=torch.float64)
        out.append((logp, old, adv, mask, G))
    return out


def _check_loss(fn) -> None:
    for logp, old, adv, mask, G in _cases():
        x = logp.clone().requires_grad_(True)
        want = reference_scalerl_loss(x, old, adv, mask, G)
        (g_want,) = torch.autograd.grad(want, x)
        out, (xc, *_), _ = call_learner(fn, (x, old, adv, mask, G), with_args=True)
        if not isinstance(out, torch.Tensor) or out.numel() != 1:
            raise ExerciseError(f"return the loss as a one-element tensor, got {type(out).__name__} {out!r}")
        close_to(float(out.detach()), float(want.detach()), what=f"the ScaleRL loss (G = {G})", rel=1e-7, abs_tol=1e-10,
                 hint="Per token -sg(min(rho, 5)) A log pi; then a token mean WITHIN each prompt's group of G rows "
                      "(divide by that group's number of real tokens), then the mean over the prompts.")
        if not out.requires_grad:
            raise ExerciseError("your loss has the right value but no gradient: it must be computed from logp.")
        (gr,) = torch.autograd.grad(out.sum(), xc, allow_unused=True)
        gr = torch.zeros_like(xc) if gr is None else gr
        if not torch.allclose(gr, g_want, atol=1e-9, rtol=1e-6):
            raise ExerciseError("the value is right but the gradient is not. CISPO's weight min(rho, 5) sits under "
                                "a stop-gradient (`.detach()`): every token's gradient is -min(rho, 5) A / (P n_g), "
                                "never zero, and not the derivative of the weight.")


register(Exercise(
    name="14-scalerl-loss",
    notebook="14_cispo_scalerl.ipynb",
    variable="scalerl_loss",
    prompt="Write scalerl_loss(logp, old_logp, adv, mask, G): ScaleRL's scalar loss, CISPO's stop-gradient weight "
           "min(rho, 5) with prompt-level aggregation over groups of G contiguous rows; value and gradient are "
           "checked.",
    kind="code",
    check=_check_loss,
    reference=reference_scalerl_loss,
    solution_code=(
        "import torch\n"
        "def scalerl_loss(logp, old_logp, adv, mask, G):\n"
        "    w = torch.clamp(torch.exp(logp - old_logp), max=5.0).detach()     # (B, T) sg(min(rho, 5))\n"
        "    per_token = -w * adv[:, None] * logp * mask                        # (B, T)\n"
        "    per_prompt = per_token.view(-1, G, logp.shape[1]).sum((1, 2))      # (P,)\n"
        "    tokens = mask.view(-1, G, logp.shape[1]).sum((1, 2))               # (P,) n_g\n"
        "    return (per_prompt / tokens).mean()\n"
    ),
    wrong_code=(
        # CISPO's token mean over the whole batch
        "import torch\n"
        "def scalerl_loss(logp, old_logp, adv, mask, G):\n"
        "    w = torch.clamp(torch.exp(logp - old_logp), max=5.0).detach()\n"
        "    return (-w * adv[:, None] * logp * mask).sum() / mask.sum()\n",
        # no stop-gradient on the weight
        "import torch\n"
        "def scalerl_loss(logp, old_logp, adv, mask, G):\n"
        "    w = torch.clamp(torch.exp(logp - old_logp), max=5.0)\n"
        "    per_token = -w * adv[:, None] * logp * mask\n"
        "    per_prompt = per_token.view(-1, G, logp.shape[1]).sum((1, 2))\n"
        "    return (per_prompt / mask.view(-1, G, logp.shape[1]).sum((1, 2))).mean()\n",
        # PPO's clipped surrogate in place of CISPO's weight
        "import torch\n"
        "def scalerl_loss(logp, old_logp, adv, mask, G):\n"
        "    r = torch.exp(logp - old_logp)\n"
        "    A = adv[:, None]\n"
        "    per_token = -torch.minimum(r * A, torch.clamp(r, 0.8, 1.28) * A) * mask\n"
        "    per_prompt = per_token.view(-1, G, logp.shape[1]).sum((1, 2))\n"
        "    return (per_prompt / mask.view(-1, G, logp.shape[1]).sum((1, 2))).mean()\n",
        # the per-sequence mean (GRPO's aggregation) instead of the prompt mean
        "import torch\n"
        "def scalerl_loss(logp, old_logp, adv, mask, G):\n"
        "    w = torch.clamp(torch.exp(logp - old_logp), max=5.0).detach()\n"
        "    per_token = -w * adv[:, None] * logp * mask\n"
        "    return (per_token.sum(-1) / mask.sum(-1)).mean()\n",
    ),
    package_code=("from grpo_lessons import policy_loss\n"
                  "def scalerl_loss(logp, old_logp, adv, mask, G):\n"
                  "    return policy_loss(logp, old_logp, adv, mask, variant='scalerl', group_size=G).loss\n"),
))


def _check_fallback(answer) -> None:
    if not isinstance(answer, (tuple, list)) or len(answer) != 2:
        raise ExerciseError(f"answer with a pair (weight at rho = 0.1, weight at rho = 3.0), got {answer!r}")
    try:
        lo, hi = float(answer[0]), float(answer[1])
    except (TypeError, ValueError):
        raise ExerciseError(f"answer with two numbers, got {answer!r}") from None
    if abs(hi - 1.2) < 1e-6 or abs(lo - 0.8) < 1e-6:
        raise ExerciseError("1.2 (or 0.8) reads the cap as 1 + epsilon (veRL's relative clip); TRL's cap on rho is "
                            "absolute, and TRL has no lower bound.")
    if abs(hi - 3.0) < 1e-6:
        raise ExerciseError("3.0 would be right under ScaleRL's cap 5. Here epsilon_high is unset: which value does "
                            "TRL fall back to?")
    close_to(lo, 0.1, what="the weight at rho = 0.1",
             hint="The weight is min(rho, cap): a ratio below the cap keeps its value.")
    close_to(hi, 0.2, what="the weight at rho = 3.0",
             hint="The weight is min(rho, cap) with the cap epsilon_high, which falls back to epsilon = 0.2 "
                  "when unset.")


register(Exercise(
    name="14-trl-fallback",
    notebook="14_cispo_scalerl.ipynb",
    variable="weights_fallback",
    prompt="TRL, loss_type='cispo', epsilon_high left unset (epsilon = 0.2): which weights multiply A grad log pi for "
           "a token with rho = 0.1 and for one with rho = 3.0 (rho: the token ratio)? A pair.",
    kind="number",
    check=_check_fallback,
    solution_code="weights_fallback = (min(0.1, 0.2), min(3.0, 0.2))",
    wrong_code=("weights_fallback = (0.8, 1.2)", "weights_fallback = (0.1, 3.0)", "weights_fallback = (0.2, 0.2)",
                "weights_fallback = (0.1, 1.2)", "weights_fallback = 0.2"),
))
