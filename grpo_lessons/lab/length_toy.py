"""Notebook 06's first length experiment: a toy policy over lengths, two stop logits, trained with ``policy_loss``.

The tabular lab (:mod:`grpo_lessons.lab.policy`) generalises it to answers, fillers and per-position stop logits; this
smaller model keeps the one mechanism in view: GRPO's ``1/|o|`` weighting makes wrong answers longer.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

from grpo_lessons.core.advantages import group_advantages
from grpo_lessons.core.losses import policy_loss
from grpo_lessons.core.variants import get_variant

__all__ = ["length_drift"]


def length_drift(
    variant: str = "grpo",
    *,
    steps: int = 100,
    prompts: int = 16,
    group_size: int = 8,
    pass_rate: float = 0.5,
    init_length: float = 16.0,
    max_len: int = 64,
    lr: float = 0.03,
    seed: int = 0,
) -> dict[str, Any]:
    """A toy policy over lengths trained with ``policy_loss``: do wrong answers grow longer?

    Each completion is right with fixed probability ``pass_rate`` (reward 1) or wrong (reward 0); then it
    emits tokens, stopping after each with probability ``q_k = sigmoid(phi_k)`` — one learnable stop logit
    for right (``k = 1``) and one for wrong (``k = 0``) answers — up to ``max_len`` (no stop: truncated).
    The per-token log-probs are ``log(1 - q_k)`` ("continue") and ``log q_k`` ("stop"), so a completion's
    log-prob is the sum over its tokens and the variant's aggregation weighs them as it would weigh an LLM's.

    On-policy steps with Adam.  Since ``E[grad log pi(o)] = 0``, a loss whose weight does not depend on
    ``|o|`` (Dr. GRPO) has no drift in expectation; GRPO's ``1/|o|`` makes ``E[(1/|o|) grad log pi] != 0``:
    negative advantages push the wrong answers' stop probability down (longer), positive ones push the
    right answers' up (shorter).  Returns per-step ``expected_length_wrong / _right (steps+1,)`` (the
    analytic mean of the truncated geometric), ``sampled_length_wrong / _right (steps,)`` and the settings.
    """
    v = get_variant(variant)
    g = torch.Generator().manual_seed(int(seed))
    q0 = 1.0 / float(init_length)
    phi = torch.full((2,), math.log(q0 / (1 - q0)), dtype=torch.float64, requires_grad=True)  # [wrong, right]
    opt = torch.optim.Adam([phi], lr=lr)
    B, T = prompts * group_size, int(max_len)
    pos = torch.arange(T)

    def expected_len(p):
        q = torch.sigmoid(p)
        return (1 - (1 - q) ** T) / q  # E[min(Geometric(q), T)]

    exp_w, exp_r = [float(expected_len(phi.detach())[0])], [float(expected_len(phi.detach())[1])]
    samp_w, samp_r, rew = [], [], []
    for _ in range(int(steps)):
        right = (torch.rand(B, generator=g) < pass_rate).long()  # (B,) 1 = right answer
        q = torch.sigmoid(phi.detach())[right]  # (B,) stop probability of each completion's mode
        stops = torch.rand(B, T, generator=g, dtype=torch.float64) < q[:, None]  # (B, T) would stop here
        first = torch.where(stops.any(-1), stops.double().argmax(-1), torch.full((B,), T))  # (B,)
        truncated = first >= T
        length = torch.where(truncated, torch.full((B,), T), first + 1)  # (B,)
        mask = (pos[None, :] < length[:, None]).double()  # (B, T)
        is_stop = (pos[None, :] == (length - 1)[:, None]) & ~truncated[:, None]  # (B, T) the EOS token
        ph = phi[right][:, None]  # (B, 1) with grad
        logp = torch.where(is_stop, F.logsigmoid(ph), F.logsigmoid(-ph))  # (B, T) log pi of each token
        rewards = right.double()
        adv = group_advantages(rewards, group_size, scale=v.advantage_scale)  # the variant's advantages
        out = policy_loss(logp, logp.detach(), adv, mask, variant=v, max_completion_length=T)
        opt.zero_grad()
        out.loss.backward()
        opt.step()
        lw, lr_ = length[right == 0].double(), length[right == 1].double()
        samp_w.append(float(lw.mean()) if lw.numel() else float("nan"))
        samp_r.append(float(lr_.mean()) if lr_.numel() else float("nan"))
        rew.append(float(rewards.mean()))
        e = expected_len(phi.detach())
        exp_w.append(float(e[0]))
        exp_r.append(float(e[1]))
    t64 = lambda x: torch.tensor(x, dtype=torch.float64)  # noqa: E731
    return {"variant": v.name, "expected_length_wrong": t64(exp_w), "expected_length_right": t64(exp_r),
            "sampled_length_wrong": t64(samp_w), "sampled_length_right": t64(samp_r), "reward_mean": t64(rew),
            "max_len": T, "steps": int(steps), "seed": int(seed)}
