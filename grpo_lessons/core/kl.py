"""KL estimators for the reference anchor (Schulman, "Approximating KL Divergence", 2020).

Introduced in ``notebooks/03_clipped_surrogate_and_kl.ipynb``.

We want ``KL(pi_theta || pi_ref)`` from tokens sampled from ``pi_theta``.  With
``log r = log pi_ref(x) - log pi_theta(x)`` (note the direction: reference over policy):

* k1 = ``-log r``                      unbiased, can be negative, high variance
* k2 = ``(log r)**2 / 2``              biased, low variance, always >= 0
* k3 = ``(r - 1) - log r``             unbiased and always >= 0 (DeepSeekMath, TRL, veRL ``low_var_kl``)

Writing k3 with ``pi_theta / pi_ref`` instead estimates the *reverse* KL; the tests check the
direction against the exact KL of a categorical.
"""

from __future__ import annotations

from typing import Literal

import torch

from ._checks import as_float_tensor, check_choice, check_same_shape

__all__ = ["kl_estimate", "exact_kl", "KL_KINDS"]

KLKind = Literal["k1", "k2", "k3"]
KL_KINDS: tuple[str, ...] = ("k1", "k2", "k3")


def kl_estimate(logp, ref_logp, kind: KLKind = "k3") -> torch.Tensor:
    """Per-token estimate of ``KL(pi_theta || pi_ref)``; same shape as ``logp`` (e.g. ``(B, T)``).

    ``logp`` are log-probs of tokens sampled from ``pi_theta`` under ``pi_theta``; ``ref_logp``
    the same tokens under ``pi_ref``.  TRL: the ``beta`` term of ``GRPOTrainer`` (k3);
    veRL: ``kl_loss_type`` = ``kl``/``k1``, ``mse``/``k2``, ``low_var_kl``/``k3``.
    """
    lp = as_float_tensor(logp, "logp")
    rp = as_float_tensor(ref_logp, "ref_logp")
    check_same_shape(lp, "logp", ref_logp=rp)
    check_choice(kind, KL_KINDS, "KL estimator")
    log_r = rp - lp  # log(pi_ref / pi_theta)
    if kind == "k1":
        return -log_r
    if kind == "k2":
        return 0.5 * log_r**2
    # k3 = r - 1 - log r; expm1 keeps precision near r = 1, clamp removes -1e-9 rounding
    return (torch.expm1(log_r) - log_r).clamp_min(0.0)


def exact_kl(p_logits: torch.Tensor, q_logits: torch.Tensor) -> torch.Tensor:
    """Exact ``KL(p || q)`` of categoricals given logits ``(..., V)``; returns ``(...)``."""
    logp = torch.log_softmax(p_logits, dim=-1)
    logq = torch.log_softmax(q_logits, dim=-1)
    return (logp.exp() * (logp - logq)).sum(-1)
