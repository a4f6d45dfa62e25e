"""Exercises of notebooks/12_vespo.ipynb: VESPO's loss in code, and where a bad sequence's weight falls back to 1."""

from __future__ import annotations

import math

import torch

from ..exercises import Exercise, ExerciseError, call_learner, close_to, register
from grpo_lessons.core.losses import policy_loss


def reference_vespo_loss(logp, old_logp, adv, mask):
    """VESPO's scalar loss with the paper's (k, lambda): ``policy_loss(variant="vespo")``, DAPO's token mean."""
    return policy_loss(logp, old_logp, adv, mask, variant="vespo").loss


def _cases():
    g = torch.Generator().manual_seed(12)
    B, T = 6, 8
    lengths = torch.tensor([8, 3, 5, 1, 6, 2])
    mask = (torch.arange(T)[None, :] < lengths[:, None]).double()  # (B, T)
    out = []
    for adv in (torch.tensor([1.0, -1.0, 0.5, -0.5, 1.5, 0.0], dtype=torch.float64),
                torch.tensor([-1.0, 1.0, -2.0, 0.5, -0.5, 1.0], dtype=torch.float64)):
        logp = -2 * torch.rand(B, T, generator=g, dtype=torch.float64)
        old = logp + 0.15 * torch.randn(B, T, generator=g, dtype=torch.float64)  # log W of order 0.1 to 1
        old = torch.where(mask.bool(), old, old + 7.0)  # padding holds garbage
        out.append((logp, old, adv, mask))
    return out


def _check_loss(fn) -> None:
    for logp, old, adv, mask in _cases():
        x = logp.clone().requires_grad_(True)
        want = reference_vespo_loss(x, old, adv, mask)
        (g_want,) = torch.autograd.grad(want, x)
        out, (xc, *_), _ = call_learner(fn, (x, old, adv, mask), with_args=True)
        if not isinstance(out, torch.Tensor) or out.numel() != 1:
            raise ExerciseError(f"return the loss as a one-element tensor, got {type(out).__name__} {out!r}")
        close_to(float(out.detach()), float(want.detach()), what="the VESPO loss", rel=1e-7, abs_tol=1e-10,
                 hint="log W_i is the SUM of the real tokens' log-ratios (no 1/|o_i|); phi = W^k exp(lambda (1 - W)) "
                      "with (k, lambda) = (2, 3) for A >= 0 and (3, 2) for A < 0; loss = -sum phi_i A_i logp m / sum m "
                      "(one mean over all real tokens of the batch).")
        if not out.requires_grad:
            raise ExerciseError("your loss has the right value but no gradient: it must be computed from logp.")
        (gr,) = torch.autograd.grad(out.sum(), xc, allow_unused=True)
        gr = torch.zeros_like(xc) if gr is None else gr
        if not torch.allclose(gr, g_want, atol=1e-9, rtol=1e-6):
            raise ExerciseError("the value is right but the gradient is not. phi(W) is a weight under a stop-gradient "
                                "(sg[phi], `.detach()`): the gradient of a token is -phi_i A_i / sum m, REINFORCE's "
                                "times one number per sequence, not the derivative of phi itself.")


register(Exercise(
    name="12-vespo-loss",
    notebook="12_vespo.ipynb",
    variable="vespo_loss",
    prompt="Write vespo_loss(logp, old_logp, adv, mask): VESPO's scalar loss for (B, T) log-probs and mask and (B,) "
           "advantages, with the paper's (k, lambda) per sign and DAPO's token mean; value and gradient are checked.",
    kind="code",
    check=_check_loss,
    reference=reference_vespo_loss,
    solution_code=(
        "import torch\n"
        "def vespo_loss(logp, old_logp, adv, mask):\n"
        "    W = torch.exp(((logp - old_logp) * mask).sum(-1)).detach()      # (B,) the full sequence ratio\n"
        "    k = torch.where(adv >= 0, 2.0, 3.0)\n"
        "    lam = torch.where(adv >= 0, 3.0, 2.0)\n"
        "    phi = W ** k * torch.exp(lam * (1 - W))                         # (B,) sg[phi(W)]\n"
        "    return -(phi[:, None] * adv[:, None] * logp * mask).sum() / mask.sum()\n"
    ),
    wrong_code=(
        # no stop-gradient: the value is right, the gradient is not
        "import torch\n"
        "def vespo_loss(logp, old_logp, adv, mask):\n"
        "    W = torch.exp(((logp - old_logp) * mask).sum(-1))\n"
        "    k = torch.where(adv >= 0, 2.0, 3.0)\n"
        "    lam = torch.where(adv >= 0, 3.0, 2.0)\n"
        "    phi = W ** k * torch.exp(lam * (1 - W))\n"
        "    return -(phi[:, None] * adv[:, None] * logp * mask).sum() / mask.sum()\n",
        # GSPO's geometric mean instead of the full product
        "import torch\n"
        "def vespo_loss(logp, old_logp, adv, mask):\n"
        "    W = torch.exp(((logp - old_logp) * mask).sum(-1) / mask.sum(-1)).detach()\n"
        "    k = torch.where(adv >= 0, 2.0, 3.0)\n"
        "    lam = torch.where(adv >= 0, 3.0, 2.0)\n"
        "    phi = W ** k * torch.exp(lam * (1 - W))\n"
        "    return -(phi[:, None] * adv[:, None] * logp * mask).sum() / mask.sum()\n",
        # the two signs' parameters swapped
        "import torch\n"
        "def vespo_loss(logp, old_logp, adv, mask):\n"
        "    W = torch.exp(((logp - old_logp) * mask).sum(-1)).detach()\n"
        "    k = torch.where(adv >= 0, 3.0, 2.0)\n"
        "    lam = torch.where(adv >= 0, 2.0, 3.0)\n"
        "    phi = W ** k * torch.exp(lam * (1 - W))\n"
        "    return -(phi[:, None] * adv[:, None] * logp * mask).sum() / mask.sum()\n",
        # GRPO's per-sequence mean instead of DAPO's token mean
        "import torch\n"
        "def vespo_loss(logp, old_logp, adv, mask):\n"
        "    W = torch.exp(((logp - old_logp) * mask).sum(-1)).detach()\n"
        "    k = torch.where(adv >= 0, 2.0, 3.0)\n"
        "    lam = torch.where(adv >= 0, 3.0, 2.0)\n"
        "    phi = W ** k * torch.exp(lam * (1 - W))\n"
        "    return -((phi[:, None] * adv[:, None] * logp * mask).sum(-1) / mask.sum(-1)).mean()\n",
    ),
    package_code=("from grpo_lessons import policy_loss\n"
                  "def vespo_loss(logp, old_logp, adv, mask):\n"
                  "    return policy_loss(logp, old_logp, adv, mask, variant='vespo').loss\n"),
))


def _crossing() -> float:
    """The W > 1 where phi(W) = W^3 exp(2 (1 - W)) comes back down to 1: 3 log W = 2 (W - 1), by bisection."""
    lo, hi = 1.5, 4.0  # phi > 1 at the peak W = 3/2, phi < 1 at 4
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if 3 * math.log(mid) - 2 * (mid - 1) > 0 else (lo, mid)
    return (lo + hi) / 2


def _check_crossing(answer) -> None:
    try:
        x = float(answer)
    except (TypeError, ValueError):
        raise ExerciseError(f"the answer is a number (a value of W), got {answer!r}") from None
    if abs(x - 1.5) < 1e-3:
        raise ExerciseError("1.5 is where phi PEAKS for A < 0 (W = k / lambda). Past the peak phi falls again: "
                            "where does it cross 1?")
    if abs(x - 1.0) < 1e-6:
        raise ExerciseError("phi(1) = 1 on policy, yes; the question asks for the OTHER W > 1 with phi(W) = 1.")
    close_to(x, _crossing(), what="the W where phi falls back to 1", rel=2e-4,
             hint="Solve W^3 exp(2 (1 - W)) = 1, i.e. 3 log W = 2 (W - 1), for W > 1.5: bisection between 1.5 and 4.")


register(Exercise(
    name="12-vespo-crossing",
    notebook="12_vespo.ipynb",
    variable="w_cross",
    prompt="For a negative advantage ((k, lambda) = (3, 2)), phi rises above 1 for W > 1 and falls again past its "
           "peak. At which W > 1 is phi back to exactly 1 (REINFORCE's weight)? A number, to 4 digits.",
    kind="number",
    check=_check_crossing,
    solution_code=("import math\nlo, hi = 1.5, 4.0\nfor _ in range(100):\n    mid = (lo + hi) / 2\n"
                   "    lo, hi = (mid, hi) if 3 * math.log(mid) > 2 * (mid - 1) else (lo, mid)\nw_cross = lo"),
    wrong_code=("w_cross = 1.5", "w_cross = 1.0", "w_cross = 2.0", "w_cross = 2.5"),
))
