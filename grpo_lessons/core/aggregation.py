"""Loss aggregation: the ONE place that decides what a per-token loss is divided by.

Introduced in ``notebooks/03_clipped_surrogate_and_kl.ipynb`` and ``notebooks/06_dr_grpo.ipynb``;
``prompt_mean`` (ScaleRL) in ``notebooks/14_cispo_scalerl.ipynb``.

The choice is where GRPO, BNPO, Dr. GRPO and DAPO really differ: it sets how much each token of
a long or short completion weighs in the gradient.  Each is an entry of :data:`AGGREGATIONS`;
:func:`register_aggregation` adds one.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from .registry import Registry

__all__ = ["aggregate", "AGGREGATIONS", "Aggregation", "register_aggregation", "token_weights", "prompt_weights"]

#: The keyword arguments :func:`aggregate` can hand an aggregation.
AGGREGATION_OPTIONS: tuple[str, ...] = ("max_completion_length", "num_items_in_batch", "group_size", "prompt_weights")


@dataclass(frozen=True)
class Aggregation:
    """An entry of :data:`AGGREGATIONS`: ``fn(per_token_loss (B, T), mask (B, T), **options) -> scalar``.

    * ``options`` — which of :data:`AGGREGATION_OPTIONS` ``fn`` takes.
    * ``token_count`` — the normaliser is a count of completion tokens that a trainer cutting the batch into
      micro-batches takes over the whole batch (``num_items_in_batch``), as TRL's ``dapo`` does.
    * ``batch_weights`` — ``(mask (B, T), group_size) -> (B,)`` per-row weights computed once over the whole
      batch and passed back as ``prompt_weights=`` for each micro-batch (ScaleRL's ``prompt_mean``); ``None``
      when the normaliser needs nothing batch-wide.
    """

    name: str
    fn: Callable[..., torch.Tensor]
    options: tuple[str, ...] = ()
    token_count: bool = False
    batch_weights: Callable[[torch.Tensor, int], torch.Tensor] | None = None


#: Loss aggregations by name (a variant's ``aggregation``).
AGGREGATIONS: Registry[Aggregation] = Registry("aggregation")


def register_aggregation(name: str, fn: Callable[..., torch.Tensor], *, options: tuple[str, ...] = (),
                         token_count: bool = False,
                         batch_weights: Callable[[torch.Tensor, int], torch.Tensor] | None = None,
                         replace: bool = False) -> Aggregation:
    """Add an aggregation to :data:`AGGREGATIONS` (see :class:`Aggregation`)."""
    if not callable(fn):
        raise TypeError(f"aggregation {name!r}: fn must be callable, got {type(fn).__name__}")
    unknown = set(options) - set(AGGREGATION_OPTIONS)
    if unknown:
        raise ValueError(f"aggregation {name!r}: unknown options {sorted(unknown)}; aggregate passes "
                         f"{', '.join(AGGREGATION_OPTIONS)}")
    return AGGREGATIONS.add(name, Aggregation(name, fn, tuple(options), token_count, batch_weights), replace=replace)


def prompt_weights(mask: torch.Tensor, group_size: int) -> torch.Tensor:
    """Per-row weights ``(B,)`` of ``prompt_mean``: ``1 / (P * n_g)`` for a row of prompt ``g``.

    ``mask`` ``(B, T)`` holds ``P = B / group_size`` contiguous groups; ``n_g`` is the number of
    completion tokens of group ``g`` (floored at 1).  ``prompt_mean(l) = sum_i w_i sum_t l_{i,t} m_{i,t}``,
    so a batch cut into shuffled micro-batches (as TRL does) keeps its prompt-level normaliser when
    each micro-batch is aggregated with these weights (``aggregate(..., prompt_weights=w[rows])``).
    """
    B = mask.shape[0]
    if not isinstance(group_size, int) or isinstance(group_size, bool) or group_size < 1:
        raise ValueError(f"prompt_mean needs group_size, a positive integer; got {group_size!r}")
    if B % group_size != 0:
        raise ValueError(f"prompt_mean: {B} rows cannot be split into groups of group_size={group_size} "
                         "(the G completions of a prompt must be contiguous rows)")
    m = mask.to(torch.float64) if not torch.is_floating_point(mask) else mask
    tokens = m.sum(-1).view(-1, group_size).sum(-1, keepdim=True).clamp(min=1.0)  # (P, 1)
    P = B // group_size
    return (1.0 / (P * tokens)).expand(P, group_size).reshape(B)  # (B,)


_prompt_weights_of = prompt_weights  # aggregate() has an argument of the same name


def aggregate(
    per_token_loss: torch.Tensor,
    mask: torch.Tensor,
    mode: str,
    *,
    max_completion_length: int | None = None,
    num_items_in_batch: float | torch.Tensor | None = None,
    group_size: int | None = None,
    prompt_weights: torch.Tensor | None = None,
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
    * ``prompt_mean`` (ScaleRL, Khatri et al. 2025, arXiv 2510.13786, "prompt-level" loss
      aggregation): the token mean within each prompt's group of ``group_size`` contiguous rows,
      then the mean over prompts: ``(1/P) sum_g (1 / sum_{i in g} |o_i|) sum_{i in g, t} l_{i,t}``.
      Needs ``group_size``; a group without completion tokens contributes 0 but counts in ``P``.
      ``prompt_weights`` ``(B,)`` (from :func:`prompt_weights` of the whole batch) replace the
      normaliser for a micro-batch of it.  Neither TRL nor veRL has it.
    * any other name registered with :func:`register_aggregation`.
    """
    entry = AGGREGATIONS.lookup(mode)
    m = mask.to(per_token_loss.dtype)
    if per_token_loss.shape != m.shape:
        per_token_loss = per_token_loss.expand_as(m)  # (B, 1) sequence losses broadcast over tokens
    given: dict[str, Any] = {"max_completion_length": max_completion_length, "num_items_in_batch": num_items_in_batch,
                             "group_size": group_size, "prompt_weights": prompt_weights}
    return entry.fn(per_token_loss, m, **{k: given[k] for k in entry.options})


def _seq_mean_token_mean(per_token: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    return ((per_token * m).sum(-1) / m.sum(-1).clamp(min=1.0)).mean()


def _token_mean(per_token: torch.Tensor, m: torch.Tensor, *, num_items_in_batch=None) -> torch.Tensor:
    if num_items_in_batch is None:
        return (per_token * m).sum() / m.sum().clamp(min=1.0)
    denom = torch.as_tensor(num_items_in_batch, dtype=m.dtype, device=m.device)
    if not bool(denom > 0):
        raise ValueError(f"num_items_in_batch must be > 0, got {float(denom)}")
    return (per_token * m).sum() / denom


def _seq_mean_token_sum_norm(per_token: torch.Tensor, m: torch.Tensor, *, max_completion_length=None) -> torch.Tensor:
    if max_completion_length is None:
        warnings.warn(
            f"Dr. GRPO aggregation without max_completion_length: dividing by this batch's padded width "
            f"T = {m.shape[-1]}, so the same completions give a different loss at another padding. Pass the "
            "generation budget (TRL: max_completion_length).", UserWarning, stacklevel=3)
    length = m.shape[-1] if max_completion_length is None else max_completion_length
    if length <= 0:
        raise ValueError(f"max_completion_length must be positive, got {length}")
    return (per_token * m).sum() / (m.shape[0] * length)


def _prompt_mean(per_token: torch.Tensor, m: torch.Tensor, *, group_size=None, prompt_weights=None) -> torch.Tensor:
    if prompt_weights is None:
        if group_size is None:
            raise ValueError("aggregation 'prompt_mean' (ScaleRL) needs group_size=G: the G completions "
                             "of each prompt are contiguous rows of the batch")
        prompt_weights = _prompt_weights_of(m, group_size)
    w = torch.as_tensor(prompt_weights, dtype=m.dtype, device=m.device)
    if w.shape != (m.shape[0],):
        raise ValueError(f"prompt_weights must be (B,) = ({m.shape[0]},), got {tuple(w.shape)}")
    return ((per_token * m).sum(-1) * w).sum()


register_aggregation("seq_mean_token_mean", _seq_mean_token_mean)
register_aggregation("token_mean", _token_mean, options=("num_items_in_batch",), token_count=True)
register_aggregation("seq_mean_token_sum_norm", _seq_mean_token_sum_norm, options=("max_completion_length",))
register_aggregation("prompt_mean", _prompt_mean, options=("group_size", "prompt_weights"),
                     batch_weights=prompt_weights)


def token_weights(mask: torch.Tensor, mode: str, *, max_completion_length: int | None = None,
                  group_size: int | None = None) -> torch.Tensor:
    """The weight each token's loss gets in the scalar, ``(B, T)``: d aggregate / d l_{i,t}.

    Used by the length-bias plots: under ``seq_mean_token_mean`` a token of a 10-token answer
    weighs ten times a token of a 100-token answer; under the other two all tokens weigh the same.
    """
    probe = torch.zeros_like(mask, dtype=torch.float64, requires_grad=True)
    if max_completion_length is None and "max_completion_length" in AGGREGATIONS.lookup(mode).options:
        max_completion_length = mask.shape[-1]  # a picture of one batch: its width is the budget (Dr. GRPO's L)
    aggregate(probe, mask.to(torch.float64), mode, max_completion_length=max_completion_length,
              group_size=group_size).backward()
    return probe.grad.to(torch.float32)
