"""Exercises of notebook 08 (GSPO): the sequence ratio, whether a sequence is clipped, GSPO's loss in code."""

import torch

from ..exercises import Exercise, ExerciseError, call_learner, close_to, register
from grpo_lessons.core.losses import policy_loss
from grpo_lessons.core.ratios import sequence_log_ratio

_LR = torch.tensor([[0.1, -0.2, 0.4]], dtype=torch.float64)
_M = torch.ones(1, 3, dtype=torch.float64)


def _s(answer):
    close_to(answer, float(torch.exp(sequence_log_ratio(_LR, torch.zeros_like(_LR), _M))[0, 0]), what="s_i",
             hint="s_i is the GEOMETRIC mean of the token ratios: exp of the mean log-ratio, not the product.")


def _clipped(answer):
    if not isinstance(answer, bool):
        raise ExerciseError(f"answer_b is True or False, got {answer!r}")
    x = _LR.clone().requires_grad_(True)
    policy_loss(x, torch.zeros_like(_LR), torch.tensor([1.0]), _M, variant="gspo").loss.backward()
    if answer != bool((x.grad == 0).all()):
        raise ExerciseError("compare s_i with GSPO's clip range 1 + 4e-4 (not 1.2): a positive advantage and "
                            "s_i above the range means the whole sequence is clipped.")


def reference_gspo_loss(logp, old_logp, adv, mask):
    """GSPO's scalar loss with the paper's range 3e-4 / 4e-4: ``policy_loss(variant="gspo")``."""
    return policy_loss(logp, old_logp, adv, mask, variant="gspo").loss


def _loss_cases():
    gen = torch.Generator().manual_seed(8)
    mask = torch.tensor([[1.0, 1, 1, 1, 0, 0], [1, 1, 0, 0, 0, 0], [1, 1, 1, 1, 1, 1],
                         [1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 0], [1, 0, 0, 0, 0, 0]], dtype=torch.float64)
    # per-row drift of log s_i: above the range, below it, inside it; A of both signs and 0
    shift = torch.tensor([1e-3, -1e-3, 1e-4, 1e-3, -1e-3, -1e-4], dtype=torch.float64)[:, None]
    cases = []
    for adv in (torch.tensor([1.0, -1.0, 0.5, -0.5, 1.5, 0.0], dtype=torch.float64),
                torch.tensor([-1.0, 1.0, -0.5, 0.5, -1.5, 2.0], dtype=torch.float64)):
        logp = -2 * torch.rand(6, 6, generator=gen, dtype=torch.float64)
        old = logp - shift + 2e-5 * torch.randn(6, 6, generator=gen, dtype=torch.float64)
        old = torch.where(mask.bool(), old, old - 5.0)  # padding holds garbage
        cases.append((logp, old, adv, mask))
    return cases


def _loss_fn(fn):
    for logp, old, adv, mask in _loss_cases():
        x = logp.clone().requires_grad_(True)
        want = reference_gspo_loss(x, old, adv, mask)
        (g_want,) = torch.autograd.grad(want, x)
        out, (xc, *_), _ = call_learner(fn, (x, old, adv, mask), with_args=True)
        if not isinstance(out, torch.Tensor) or out.numel() != 1:
            raise ExerciseError(f"return the loss as a one-element tensor, got {type(out).__name__} {out!r}")
        close_to(float(out.detach()), float(want.detach()), what="the GSPO loss", rel=1e-9, abs_tol=1e-12,
                 hint="s_i = exp(mean over real tokens of logp - old_logp); loss = -(1/B) sum_i "
                      "min(s_i A_i, clip(s_i, 1 - 3e-4, 1 + 4e-4) A_i).")
        if not out.requires_grad:
            raise ExerciseError("your loss has the right value but no gradient: keep it a tensor computed from logp "
                                "(no .item(), no .detach(), no torch.tensor(...) around a result).")
        (g,) = torch.autograd.grad(out.sum(), xc, allow_unused=True)
        g = torch.zeros_like(xc) if g is None else g
        if not torch.allclose(g, g_want, atol=1e-9, rtol=1e-6):
            i = int((g - g_want).abs().sum(-1).argmax())
            raise ExerciseError(f"the value is right but the gradient of sequence {i} (A = {float(adv[i]):+g}) is not. "
                                "A clipped sequence gets zero gradient on EVERY token; an unclipped one gets A_i s_i / "
                                "|o_i| per real token, divided by B (and padding none).")


register(Exercise(
    name="08-sequence-ratio", notebook="08_gspo.ipynb", variable="answer_a", kind="number",
    prompt="Token log-ratios [0.1, -0.2, 0.4]: what is GSPO's sequence ratio s_i?",
    check=_s, solution_code="import math\nanswer_a = math.exp((0.1 - 0.2 + 0.4) / 3)",
    wrong_code=("import math\nanswer_a = math.exp(0.1 - 0.2 + 0.4)", "answer_a = (0.1 - 0.2 + 0.4) / 3")))
register(Exercise(
    name="08-clipped", notebook="08_gspo.ipynb", variable="answer_b", kind="choice",
    prompt="With advantage +1 and GSPO's default clip range, is that sequence clipped (zero gradient)? True/False.",
    check=_clipped, solution_code="answer_b = True", wrong_code=("answer_b = False",)))
register(Exercise(
    name="08-gspo-loss", notebook="08_gspo.ipynb", variable="gspo_loss", kind="code",
    prompt="Write gspo_loss(logp, old_logp, adv, mask): GSPO's scalar loss for (B, T) log-probs and mask and (B,) "
           "advantages, with the paper's range 3e-4 / 4e-4; the check compares its value and its gradient.",
    check=_loss_fn, reference=reference_gspo_loss,
    solution_code=("import torch\n\ndef gspo_loss(logp, old_logp, adv, mask):\n"
                   "    s = torch.exp(((logp - old_logp) * mask).sum(-1) / mask.sum(-1))  # (B,) sequence ratios\n"
                   "    J = torch.minimum(s * adv, torch.clamp(s, 1 - 3e-4, 1 + 4e-4) * adv)  # (B,)\n"
                   "    return -J.mean()"),
    wrong_code=(
        # GRPO's token ratios with GSPO's range
        "import torch\n\ndef gspo_loss(logp, old_logp, adv, mask):\n"
        "    r = torch.exp(logp - old_logp)\n    A = adv[:, None]\n"
        "    J = torch.minimum(r * A, torch.clamp(r, 1 - 3e-4, 1 + 4e-4) * A)\n"
        "    return -((J * mask).sum(-1) / mask.sum(-1)).mean()",
        # the full product instead of the geometric mean
        "import torch\n\ndef gspo_loss(logp, old_logp, adv, mask):\n"
        "    s = torch.exp(((logp - old_logp) * mask).sum(-1))\n"
        "    return -torch.minimum(s * adv, torch.clamp(s, 1 - 3e-4, 1 + 4e-4) * adv).mean()",
        # the clipped term alone: no min, so the non-binding side is clipped too
        "import torch\n\ndef gspo_loss(logp, old_logp, adv, mask):\n"
        "    s = torch.exp(((logp - old_logp) * mask).sum(-1) / mask.sum(-1))\n"
        "    return -(torch.clamp(s, 1 - 3e-4, 1 + 4e-4) * adv).mean()",
        # padding counted
        "import torch\n\ndef gspo_loss(logp, old_logp, adv, mask):\n"
        "    s = torch.exp((logp - old_logp).mean(-1))\n"
        "    return -torch.minimum(s * adv, torch.clamp(s, 1 - 3e-4, 1 + 4e-4) * adv).mean()",
        # the value through a detached ratio: right number, no gradient
        "import torch\n\ndef gspo_loss(logp, old_logp, adv, mask):\n"
        "    s = torch.exp(((logp - old_logp) * mask).sum(-1) / mask.sum(-1)).detach()\n"
        "    return -torch.minimum(s * adv, torch.clamp(s, 1 - 3e-4, 1 + 4e-4) * adv).mean()"),
    package_code=("from grpo_lessons import policy_loss\n\n"
                  "def gspo_loss(logp, old_logp, adv, mask):\n"
                  "    return policy_loss(logp, old_logp, adv, mask, variant='gspo').loss")))
