"""Loss aggregation: the ONE place that decides what a per-token loss is divided by.

Introduced in ``notebooks/03_clipped_surrogate_and_kl.ipynb`` and ``notebooks/06_dr_grpo.ipynb``.

The choice is where GRPO, BNPO, Dr. GRPO and DAPO really differ: it sets how much each token of
a long or short completion weighs in the gradient.
"""

from __future__ import annotations

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
      An all-zero row contributes nothing.
    * ``seq_mean_token_sum_norm`` (Dr. GRPO): ``sum_{i,t} l_{i,t} / (B * L)`` with ``L`` the
      constant ``max_completion_length`` (default: ``T``).  TRL ``dr_grpo``; veRL
      ``seq-mean-token-sum-norm``.
    """
    m = mask.to(per_token_loss.dtype)
    if per_token_loss.shape != m.shape:
        per_token_loss = per_token_loss.expand_as(m)  # (B, 1) sequence losses broadcast over tokens
    if mode == "seq_mean_token_mean":
        return ((per_token_loss * m).sum(-1) / m.sum(-1).clamp(min=1.0)).mean()
    if mode == "token_mean":
        denom = m.sum() if num_items_in_batch is None else torch.as_tensor(num_items_in_batch, dtype=m.dtype)
        return (per_token_loss * m).sum() / denom.clamp(min=1.0)
    if mode == "seq_mean_token_sum_norm":
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
    aggregate(probe, mask.to(torch.float64), mode, max_completion_length=max_completion_length).backward()
    return probe.grad.to(torch.float32)
