"""Per-position divergences between the sampler and the trainer over the sampler's top-K tokens (DPPO).

Introduced in ``notebooks/13_dppo.ipynb``.

DPPO (Qi et al. 2026, arXiv 2602.04879) replaces PPO's ratio clip with a trust region on a
divergence between the rollout policy ``mu`` and ``pi_theta``.  Its top-K variants estimate the
divergence of the whole next-token distribution from what a sampler can cheaply return: the
log-probs of its K most likely tokens at each position, plus one "rest" bucket for the remaining
mass.  The result feeds ``policy_loss(..., variant="dppo_topk_tv" | "dppo_topk_kl", divergence=D)``.
"""

from __future__ import annotations

from typing import Literal

import torch

from ._checks import as_float_tensor, check_finite

__all__ = ["topk_divergence"]

_REST_FLOOR = 1e-12


def topk_divergence(
    sampler_topk_ids,
    sampler_topk_logp,
    logits,
    sampled_ids,
    kind: Literal["tv", "kl"] = "tv",
    temperature: float = 1.0,
    *,
    sampled_logp=None,
) -> torch.Tensor:
    """TV or KL between the sampler ``mu`` and ``pi_theta`` over mu's top-K plus a rest bucket; ``(B, T)``.

    Shapes: ``sampler_topk_ids`` ``(B, T, K)`` (token ids in the sampler's rank order, most likely
    first), ``sampler_topk_logp`` ``(B, T, K)`` their log-probs under ``mu``, ``logits`` ``(B, T, V)``
    the trainer's logits at the same positions, ``sampled_ids`` ``(B, T)`` the tokens actually drawn.
    ``q = softmax(logits / temperature)`` is read at the K ids.  Where the sampled token is not among
    the K ids it replaces the K-th (last) entry, with log-prob ``sampled_logp[b, t]`` (``(B, T)``, the
    sampler's log-prob of the sampled token; needed only then) — the authors' rollout does the same.

    With ``p_rest = clamp(1 - sum_k p_k, min=1e-12)`` (same for ``q``):

    * ``kind="kl"``: ``KL(mu || pi_theta) = sum_k p_k log(p_k / q_k) + p_rest log(p_rest / q_rest)``;
    * ``kind="tv"``: ``(sum_k |p_k - q_k| + |p_rest - q_rest|) / 2``.

    With K = V (every token listed) both equal the exact divergences of the full distributions.
    A sampler log-prob of ``-inf`` is probability 0 (a sampler truncated by ``top_k < K`` records ``-inf`` for
    the tokens it cut): it adds ``0 * log 0 = 0`` to the KL and ``|0 - q_k|`` to the TV.
    Computed in at least fp32.  The authors' code: sail-sg/Stable-RL ``compute_topk_kl``; not in TRL.
    Raises ``ValueError`` for mismatched shapes, ids outside ``[0, V)``, a repeated id within a
    position's K, NaN or ``+inf`` in the sampler's log-probs, a sampled token whose sampler log-prob is
    ``-inf``, a non-positive temperature, an unknown ``kind``, or a missing ``sampled_logp`` where it is needed.
    """
    if kind not in ("tv", "kl"):
        raise ValueError(f"unknown divergence kind {kind!r}; known: kl, tv")
    if not float(temperature) > 0:
        raise ValueError(f"temperature must be > 0, got {temperature!r}")
    ids = torch.as_tensor(sampler_topk_ids)
    lg = as_float_tensor(logits, "logits")
    dtype = torch.promote_types(lg.dtype, torch.float32)
    lg = lg.to(dtype)
    lp_mu = as_float_tensor(sampler_topk_logp, "sampler_topk_logp").to(dtype)
    tok = torch.as_tensor(sampled_ids)
    if ids.dim() != 3 or lg.dim() != 3:
        raise ValueError(f"sampler_topk_ids must be (B, T, K) and logits (B, T, V); got {tuple(ids.shape)} "
                         f"and {tuple(lg.shape)}")
    B, T, K = ids.shape
    V = lg.shape[-1]
    if lg.shape[:2] != (B, T) or tuple(lp_mu.shape) != (B, T, K) or tuple(tok.shape) != (B, T):
        raise ValueError(f"shapes disagree: topk ids {tuple(ids.shape)}, topk logp {tuple(lp_mu.shape)}, "
                         f"logits {tuple(lg.shape)}, sampled_ids {tuple(tok.shape)}")
    if ids.is_floating_point() or tok.is_floating_point():
        raise ValueError("sampler_topk_ids and sampled_ids must be integer token ids")
    for name, t in (("sampler_topk_ids", ids), ("sampled_ids", tok)):
        if t.numel() and (int(t.min()) < 0 or int(t.max()) >= V):
            raise ValueError(f"{name} holds ids outside the vocabulary [0, {V}): min {int(t.min())}, max {int(t.max())}")
    # -inf is probability 0 (a top_k-truncated sampler); NaN and +inf are errors
    check_finite(lp_mu.masked_fill(lp_mu == float("-inf"), 0.0), "sampler_topk_logp")
    ids = ids.long()
    tok = tok.long()
    srt = ids.sort(dim=-1).values
    if bool((srt[..., 1:] == srt[..., :-1]).any()):
        raise ValueError("sampler_topk_ids repeats a token id within one position's top-K")

    # the sampled token must be one of the K entries: replace the K-th where it is absent
    absent = ~(ids == tok.unsqueeze(-1)).any(-1)  # (B, T)
    if bool(absent.any()):
        if sampled_logp is None:
            raise ValueError(f"the sampled token is missing from the top-K at {int(absent.sum())} positions: pass "
                             "sampled_logp= (the sampler's log-prob of the sampled token) so it can replace the K-th")
        slp = as_float_tensor(sampled_logp, "sampled_logp").to(dtype)
        if tuple(slp.shape) != (B, T):
            raise ValueError(f"sampled_logp must be (B, T) = ({B}, {T}), got {tuple(slp.shape)}")
        check_finite(slp, "sampled_logp", where=absent)
        ids = ids.clone()
        lp_mu = lp_mu.clone()
        ids[..., -1] = torch.where(absent, tok, ids[..., -1])
        lp_mu[..., -1] = torch.where(absent, slp, lp_mu[..., -1])

    sampled_zero = (lp_mu == float("-inf")) & (ids == tok.unsqueeze(-1))  # (B, T, K)
    if bool(sampled_zero.any()):
        raise ValueError(f"the sampler gives the sampled token probability 0 (log-prob -inf) at "
                         f"{int(sampled_zero.any(-1).sum())} positions: it cannot have been drawn")

    log_q = torch.log_softmax(lg / temperature, dim=-1).gather(-1, ids)  # (B, T, K)
    p, q = lp_mu.exp(), log_q.exp()  # (B, T, K); p = 0 where lp_mu = -inf
    p_rest = (1.0 - p.sum(-1)).clamp(min=_REST_FLOOR)  # (B, T)
    q_rest = (1.0 - q.sum(-1)).clamp(min=_REST_FLOOR)  # (B, T)
    if kind == "kl":
        zero = p == 0  # 0 * log(0 / q) = 0; computed on a finite stand-in so neither value nor gradient is NaN
        terms = torch.where(zero, torch.zeros_like(p), p * (lp_mu.masked_fill(zero, 0.0) - log_q))  # (B, T, K)
        return terms.sum(-1) + p_rest * (p_rest.log() - q_rest.log())  # (B, T)
    return 0.5 * ((p - q).abs().sum(-1) + (p_rest - q_rest).abs())  # (B, T)
