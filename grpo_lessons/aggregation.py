"""Loss aggregation: the ONE place that decides what a per-token loss is divided by.

Introduced in ``notebooks/03_clipped_surrogate_and_kl.ipynb`` and ``notebooks/06_dr_grpo.ipynb``.

The choice is where GRPO, BNPO, Dr. GRPO and DAPO really differ: it sets how much each token of
a long or short completion weighs in the gradient.
"""

from __future__ import annotations

import warnings

import torch

__all__ = ["aggregate", "AGGREGATIONS", "token_weights"]

AGGREGATIONS: tuple[str, ...] = ("seq_mean_token_mean", "token_mean", "seq_mean_token_sum_norm")


def aggregate(
    per_token_loss: torch.Tensor,
    mask: torch.Tensor,
    mode: str,
    *,
    max_completion_length: int | None = None,
    num_items_in_batch: float | torch.Tensor | None = None,
) -> torch.Tensor:
    """Reduce a ``(B, T)`` per-token loss to a scalar.

    * ``seq_mean_token_mean`` (GRPO, SAPO, GSPO): ``(1/B) sum_i (1/|o_i|) sum_t l_{i,t}``.
      TRL ``loss_type="grpo"``; veRL ``seq-mean-token-mean``.  A row whose mask is all zero
      contributes 0 but still counts in ``B``.
    * ``token_mean`` (BNPO, DAPO): ``sum_{i,t} l_{i,t} / sum_i |o_i|``.  TRL ``bnpo`` (this
      micro-batch's tokens) and ``dapo`` (pass ``num_items_in_batch``, the token count of the
      whole generation batch, to reproduce TRL under gradient accumulation); veRL ``token-mean``.
      An all-zero row contributes nothing.  A given ``num_items_in_batch`` is used as it is (it must be
      > 0): TRL clamps the token count to >= 1 *before* rescaling it to one accumulation window, and a
      second clamp here would change the loss of a batch with very few loss tokens.
    * ``seq_mean_token_sum_norm`` (Dr. GRPO): ``sum_{i,t} l_{i,t} / (B * L)`` with ``L`` the
      constant ``max_completion_length``.  TRL ``dr_grpo``; veRL ``seq-mean-token-sum-norm``.  Pass it:
      without it ``L`` is the padded width ``T`` of this batch, so the same completions give different
      losses at different paddings (a ``UserWarning`` says so).
    """
    m = mask.to(per_token_loss.dtype)
    if per_token_loss.shape != m.shape:
        per_token_loss = per_token_loss.expand_as(m)  # (B, 1) sequence losses broadcast over tokens
    if mode == "seq_mean_token_mean":
        return ((per_token_loss * m).sum(-1) / m.sum(-1).clamp(min=1.0)).mean()
    if mode == "token_mean":
        if num_items_in_batch is None:
            return (per_token_loss * m).sum() / m.sum().clamp(min=1.0)
        denom = torch.as_tensor(num_items_in_batch, dtype=m.dtype, device=m.device)
        if not bool(denom > 0):
            raise ValueError(f"num_items_in_batch must be > 0, got {float(denom)}")
        return (per_token_loss * m).sum() / denom
    if mode == "seq_mean_token_sum_norm":
        if max_completion_length is None:
            warnings.warn(
                f"Dr. GRPO aggregation without max_completion_length: dividing by this batch's padded width "
                f"T = {m.shape[-1]}, so the same completions give a different loss at another padding. Pass the "
                "generation budget (TRL: max_completion_length).", UserWarning, stacklevel=2)
        length = m.shape[-1] if max_completion_length is None else max_completion_length
        if length <= 0:
            raise ValueError(f"max_completion_length must be positive, got {length}")
        return (per_token_loss * m).sum() / (m.shape[0] * length)
    raise ValueError(f"unknown aggregation {mode!r}; known: {', '.join(AGGREGATIONS)}")


def token_weights(mask: torch.Tensor, mode: str, *, max_completion_length: int | None = None) -> torch.Tensor:
    """The weight each token's loss gets in the scalar, ``(B, T)``: d aggregate / d l_{i,t}.

    Used by the length-bias plots: under ``seq_mean_token_mean`` a token of a 10-token answer
    weighs ten times a token of a 100-token answer; under the other two all tokens weigh the same.
    """
    probe = torch.zeros_like(mask, dtype=torch.float64, requires_grad=True)
    if max_completion_length is None and mode == "seq_mean_token_sum_norm":
        max_completion_length = mask.shape[-1]  # a picture of one batch: its width is the budget
    aggregate(probe, mask.to(torch.float64), mode, max_completion_length=max_completion_length).backward()
    return probe.grad.to(torch.float32)
