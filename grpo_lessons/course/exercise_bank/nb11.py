"""Exercises of notebooks/11_train_inference_mismatch.ipynb."""

from __future__ import annotations

import math

import torch

from grpo_lessons.core.correction import rollout_weights
from ..exercises import Exercise, ExerciseError, close_to, learner_call, register


def reference_sequence_mask(old_logp, mu_logp, mask, clip_min, clip_max):
    """TRL's ``sequence_mask`` weights, ``(B, 1)``: the package's ``rollout_weights``."""
    return rollout_weights(old_logp, mu_logp, mask, "sequence_mask", clip_max=clip_max, clip_min=clip_min)


def _check_sequence_mask(fn) -> None:
    g = torch.Generator().manual_seed(11)
    cases = []
    for B, T, scale in ((4, 6, 0.05), (8, 30, 0.1), (16, 12, 0.3), (5, 128, 0.05)):
        old = -3 * torch.rand(B, T, generator=g, dtype=torch.float64)
        mu = old + scale * torch.randn(B, T, generator=g, dtype=torch.float64)
        lengths = torch.randint(1, T + 1, (B,), generator=g)
        mask = (torch.arange(T)[None, :] < lengths[:, None]).double()
        mu = torch.where(mask.bool(), mu, torch.full_like(mu, -50.0))  # padding holds garbage
        cases.append((old, mu, mask))
    for old, mu, mask in cases:
        for lo, hi in ((0.5, 2.0), (None, 3.0)):
            ref = reference_sequence_mask(old, mu, mask, lo, hi)  # (B, 1)
            got = learner_call(fn, old, mu, mask, lo, hi)
            try:
                got = torch.as_tensor(got, dtype=torch.float64)
            except (TypeError, ValueError, RuntimeError):
                raise ExerciseError(f"return a tensor of weights, got {type(got).__name__}") from None
            if got.numel() != ref.numel():
                raise ExerciseError(f"return one weight per sequence, shape (B, 1) = {tuple(ref.shape)}; got "
                                    f"{tuple(got.shape)}")
            got = got.reshape(ref.shape)
            if not torch.allclose(got, ref, rtol=1e-6, atol=1e-9):
                i = int((got - ref).abs().argmax())
                raise ExerciseError(
                    f"sequence {i} (length {int(mask[i].sum())}, band [{lo}, {hi}]): you return {float(got[i]):.6g}, "
                    f"expected {float(ref[i]):.6g}. The sequence ratio is the PRODUCT of the token ratios over the "
                    "completion tokens only (sum the masked log-ratios, then exp; no 1/|o|); outside the band the "
                    "weight is 0, inside it keeps its value rho (not 1). clip_min None means no lower bound.")


register(Exercise(
    name="11-sequence-mask",
    notebook="11_train_inference_mismatch.ipynb",
    variable="sequence_mask_weights",
    prompt="Write sequence_mask_weights(old_logp, mu_logp, mask, clip_min, clip_max) -> (B, 1): TRL's "
           "sequence_mask correction (MIS), rho = prod_t pi_old/mu over completion tokens, 0 outside "
           "[clip_min, clip_max].",
    kind="code",
    check=_check_sequence_mask,
    reference=reference_sequence_mask,
    package_code=("from grpo_lessons.core.correction import rollout_weights\n"
                  "def sequence_mask_weights(old_logp, mu_logp, mask, clip_min, clip_max):\n"
                  "    return rollout_weights(old_logp, mu_logp, mask, 'sequence_mask', clip_max=clip_max, "
                  "clip_min=clip_min)\n"),
    solution_code=(
        "import torch\n"
        "def sequence_mask_weights(old_logp, mu_logp, mask, clip_min, clip_max):\n"
        "    d = ((old_logp - mu_logp) * mask).sum(-1, keepdim=True)\n"
        "    rho = torch.exp(d)\n"
        "    lo = -float('inf') if clip_min is None else clip_min\n"
        "    return torch.where((rho < lo) | (rho > clip_max), torch.zeros_like(rho), rho)\n"
    ),
    wrong_code=(
        # the chapter's geometric mean
        "import torch\n"
        "def sequence_mask_weights(old_logp, mu_logp, mask, clip_min, clip_max):\n"
        "    d = ((old_logp - mu_logp) * mask).sum(-1, keepdim=True) / mask.sum(-1, keepdim=True)\n"
        "    rho = torch.exp(d)\n"
        "    lo = -float('inf') if clip_min is None else clip_min\n"
        "    return torch.where((rho < lo) | (rho > clip_max), torch.zeros_like(rho), rho)\n",
        # an indicator instead of the kept ratio
        "import torch\n"
        "def sequence_mask_weights(old_logp, mu_logp, mask, clip_min, clip_max):\n"
        "    rho = torch.exp(((old_logp - mu_logp) * mask).sum(-1, keepdim=True))\n"
        "    lo = -float('inf') if clip_min is None else clip_min\n"
        "    return ((rho >= lo) & (rho <= clip_max)).double()\n",
        # padding not masked out
        "import torch\n"
        "def sequence_mask_weights(old_logp, mu_logp, mask, clip_min, clip_max):\n"
        "    rho = torch.exp((old_logp - mu_logp).sum(-1, keepdim=True))\n"
        "    lo = -float('inf') if clip_min is None else clip_min\n"
        "    return torch.where((rho < lo) | (rho > clip_max), torch.zeros_like(rho), rho)\n",
    ),
))


def _check_long_weight(answer) -> None:
    try:
        x = float(answer)
    except (TypeError, ValueError):
        raise ExerciseError(f"the answer is a number (a weight), got {answer!r}") from None
    if abs(x - math.exp(0.01)) < 1e-4:
        raise ExerciseError("exp(0.01) is the geometric mean of the token ratios (the chapter's version); TRL "
                            "multiplies them.")
    if abs(x - 3.0) < 1e-6:
        raise ExerciseError("3 is the cap; is the product of the 100 ratios above it?")
    close_to(x, math.exp(1.0), what="the sequence_truncate weight", rel=1e-4,
             hint="The sequence ratio is exp(sum of the token log-ratios) = exp(100 x 0.01), then min(., 3).")


register(Exercise(
    name="11-long-sequence-weight",
    notebook="11_train_inference_mismatch.ipynb",
    variable="weight_100",
    prompt="A 100-token completion, every token with log pi_old - log mu = +0.01: its sequence_truncate weight "
           "with TRL's cap 3?",
    kind="prediction",
    check=_check_long_weight,
    solution_code="import math\nweight_100 = min(math.exp(100 * 0.01), 3.0)",
    wrong_code=("import math\nweight_100 = math.exp(0.01)", "weight_100 = 3.0", "weight_100 = 1.01"),
))
