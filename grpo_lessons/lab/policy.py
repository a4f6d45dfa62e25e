"""An exact tabular policy over short token sequences, small enough that every expectation is a sum.

A completion of prompt ``p`` is ``(a, f_1, ..., f_n, EOS)``: an **answer token** ``a`` out of ``K`` (the first
token, drawn from ``softmax(answer_logits[p])``), then **body tokens** drawn at each position ``t`` from
``softmax(body_logits[p, a, t])`` over ``V`` filler tokens and the stop token ``EOS`` (index ``V``).  A completion
that has not stopped after ``L`` tokens (``L = max_len``, the answer counted) is *truncated*.  The body depends on the
prompt, the answer and the position, so the policy can learn a length per answer, and a filler token's ratio moves on
its own; the fillers never change the reward (they are the "thinking" tokens of a real completion).

Everything a claim measures is computed **exactly** from the tables (:func:`exact_metrics`): P(correct), the
expected length split by right and wrong answers, the truncated share, the per-token entropy, the mass on a rare
correct answer, and the sequence-level KL to the starting policy.  Sampling (:func:`sample`) draws every token by
inverse CDF from uniforms the caller supplies, so two arms given the same uniforms sample the same completions until
their policies differ (common random numbers).

Introduced in ``notebooks/06_dr_grpo.ipynb``; used by every notebook from 06 to 18 through :mod:`grpo_lessons.lab`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

__all__ = ["LabTask", "make_task", "TabularPolicy", "Batch", "sample", "token_logp", "token_entropy",
           "exact_metrics", "METRIC_DOCS"]


@dataclass(frozen=True)
class LabTask:
    """The problem a tabular policy is trained on (fixed by ``task_seed``; a run's seed changes only the sampling).

    ``quality (P, K)``: the true reward of each answer in ``[0, 1]`` (1 = right; graded values for a reward model);
    ``answer_logits (P, K)`` and ``body_logits (P, K, L - 1, V + 1)``: the starting policy; ``rare (P,)``: the prompts
    whose right answer starts rare (below 5 %).
    """

    name: str
    quality: torch.Tensor  # (P, K)
    answer_logits: torch.Tensor  # (P, K)
    body_logits: torch.Tensor  # (P, K, L - 1, V + 1); the last entry of the last axis is EOS
    rare: torch.Tensor  # (P,) bool

    @property
    def n_prompts(self) -> int:
        return int(self.quality.shape[0])

    @property
    def n_answers(self) -> int:
        return int(self.quality.shape[1])

    @property
    def n_fillers(self) -> int:
        return int(self.body_logits.shape[-1]) - 1

    @property
    def max_len(self) -> int:
        return int(self.body_logits.shape[2]) + 1

    @property
    def right(self) -> torch.Tensor:
        """``(P, K)`` bool: the answers that count as right (quality above one half)."""
        return self.quality > 0.5

    def start_pass_rates(self) -> torch.Tensor:
        """``(P,)``: the starting policy's probability of a right answer on each prompt."""
        return (torch.softmax(self.answer_logits, -1) * self.right).sum(-1)


def _logit(p: float) -> float:
    return math.log(p / (1.0 - p))


def make_task(
    *,
    pass_rates=(0.1, 0.3, 0.5, 0.5, 0.5, 0.7, 0.9, 0.02),
    n_answers: int = 4,
    n_fillers: int = 3,
    max_len: int = 16,
    init_length: float = 6.0,
    graded: bool = False,
    n_right: int = 1,
    filler_spread: float = 0.5,
    task_seed: int = 0,
    name: str = "lab",
) -> LabTask:
    """A task with one prompt per entry of ``pass_rates``: answer 0 is right with that starting probability, the
    ``K - 1`` wrong answers share the rest; every answer starts with expected length ``init_length`` (a constant stop
    probability per body position) and filler logits spread by ``filler_spread`` (seeded by ``task_seed``).

    ``graded=True`` gives the wrong answers qualities 0.1 .. 0.4 (a reward model's partial credit) instead of 0.
    ``n_right > 1`` makes answers ``0 .. n_right - 1`` all right, sharing the pass rate unequally (shares proportional
    to ``n_right, n_right - 1, ..., 1``): one right answer is more *typical* than the others.
    A prompt whose pass rate is below 5 % is *rare*: its right answer is the rare correct token.
    """
    P, K, V, L = len(pass_rates), int(n_answers), int(n_fillers), int(max_len)
    if K < 2 or V < 1 or L < 3:
        raise ValueError(f"need n_answers >= 2, n_fillers >= 1, max_len >= 3; got {K}, {V}, {L}")
    R = int(n_right)
    if not 1 <= R < K:
        raise ValueError(f"n_right must be in [1, n_answers - 1 = {K - 1}], got {n_right}")
    if not all(0.0 < float(p) < 1.0 for p in pass_rates):
        raise ValueError(f"pass rates must be in (0, 1), got {list(pass_rates)}")
    if not 1.0 < float(init_length) < L:
        raise ValueError(f"init_length must be in (1, max_len = {L}), got {init_length}")
    g = torch.Generator().manual_seed(int(task_seed))
    quality = torch.zeros(P, K, dtype=torch.float64)
    quality[:, :R] = 1.0
    if graded:
        quality[:, R:] = torch.linspace(0.1, 0.4, K - R, dtype=torch.float64)
    answer = torch.empty(P, K, dtype=torch.float64)
    shares = [float(R - j) for j in range(R)]
    for i, p in enumerate(pass_rates):
        rest = (1.0 - float(p)) / (K - R)
        for j in range(R):
            answer[i, j] = math.log(float(p) * shares[j] / sum(shares))
        answer[i, R:] = math.log(rest)
    # a stop probability q per body position gives E[length] = 1 + sum_t (1 - q)^t over L - 1 positions
    q = _solve_stop_probability(float(init_length), L)
    body = float(filler_spread) * torch.randn(P, K, L - 1, V + 1, generator=g, dtype=torch.float64)
    body[..., V] = 0.0
    # set the EOS logit so that softmax gives exactly q at every position
    fill = torch.logsumexp(body[..., :V], -1)  # (P, K, L - 1)
    body[..., V] = fill + _logit(q)
    rare = torch.tensor([float(p) < 0.05 for p in pass_rates])  # the right answers start rare on these prompts
    return LabTask(name=name, quality=quality, answer_logits=answer, body_logits=body, rare=rare)


def _solve_stop_probability(length: float, L: int) -> float:
    """The constant stop probability ``q`` with ``1 + sum_{t < L-1} (1 - q)^t = length`` (bisection)."""
    lo, hi = 1e-6, 1.0 - 1e-9
    for _ in range(200):
        q = 0.5 * (lo + hi)
        e = 1.0 + (1.0 - (1.0 - q) ** (L - 1)) / q
        lo, hi = (q, hi) if e > length else (lo, q)
    return 0.5 * (lo + hi)


class TabularPolicy(torch.nn.Module):
    """The learnable tables of a :class:`LabTask`: ``answer_logits (P, K)`` and ``body_logits (P, K, L-1, V+1)``."""

    def __init__(self, task: LabTask, dtype: torch.dtype = torch.float64) -> None:
        super().__init__()
        self.task = task
        self.answer_logits = torch.nn.Parameter(task.answer_logits.clone().to(dtype))
        self.body_logits = torch.nn.Parameter(task.body_logits.clone().to(dtype))

    def tables(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.answer_logits, self.body_logits

    def frozen(self) -> tuple[torch.Tensor, torch.Tensor]:
        """A detached copy of the tables (pi_old at sampling time)."""
        return self.answer_logits.detach().clone(), self.body_logits.detach().clone()


@dataclass
class Batch:
    """Sampled completions: ``prompts (B,)``, ``tokens (B, L)`` (answer then body; padding 0), ``lengths (B,)``,
    ``truncated (B,)`` bool, ``mask (B, L)`` float (1 on completion tokens)."""

    prompts: torch.Tensor
    tokens: torch.Tensor
    lengths: torch.Tensor
    truncated: torch.Tensor
    mask: torch.Tensor

    @property
    def answers(self) -> torch.Tensor:
        return self.tokens[:, 0]

    def select(self, rows: torch.Tensor) -> "Batch":
        return Batch(self.prompts[rows], self.tokens[rows], self.lengths[rows], self.truncated[rows], self.mask[rows])

    @staticmethod
    def cat(batches: list["Batch"]) -> "Batch":
        return Batch(*(torch.cat([getattr(b, f) for b in batches]) for f in
                       ("prompts", "tokens", "lengths", "truncated", "mask")))


def sample(answer_logits: torch.Tensor, body_logits: torch.Tensor, prompts: torch.Tensor,
           uniforms: torch.Tensor) -> Batch:
    """Draw one completion per entry of ``prompts (B,)`` from the tables, token ``t`` by inverse CDF of
    ``uniforms[:, t]`` (``(B, L)``, in ``[0, 1)``).  No gradient."""
    with torch.no_grad():
        B, L = uniforms.shape
        V1 = body_logits.shape[-1]
        if L != body_logits.shape[2] + 1:
            raise ValueError(f"uniforms must be (B, max_len = {body_logits.shape[2] + 1}), got {tuple(uniforms.shape)}")
        u = uniforms.to(torch.float64)
        pa = torch.softmax(answer_logits[prompts].double(), -1)  # (B, K)
        ans = torch.searchsorted(pa.cumsum(-1), u[:, :1].contiguous()).squeeze(-1).clamp(max=pa.shape[-1] - 1)  # (B,)
        pb = torch.softmax(body_logits[prompts, ans].double(), -1)  # (B, L - 1, V + 1)
        body = torch.searchsorted(pb.cumsum(-1), u[:, 1:, None].contiguous()).squeeze(-1).clamp(max=V1 - 1)  # (B, L - 1)
        eos = body == V1 - 1
        stopped = eos.any(-1)
        first = torch.where(stopped, eos.to(torch.int64).argmax(-1), torch.full((B,), L - 1))  # body index of EOS
        lengths = torch.where(stopped, first + 2, torch.full((B,), L))  # (B,)
        tokens = torch.cat([ans[:, None], body], 1)  # (B, L)
        pos = torch.arange(L)
        mask = (pos[None, :] < lengths[:, None]).to(torch.float64)  # (B, L)
        tokens = torch.where(mask > 0, tokens, torch.zeros_like(tokens))
        return Batch(prompts.clone(), tokens, lengths, ~stopped, mask)


def _log_tables(answer_logits, body_logits, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
    la = torch.log_softmax(answer_logits[batch.prompts], -1)  # (B, K)
    lb = torch.log_softmax(body_logits[batch.prompts, batch.answers], -1)  # (B, L - 1, V + 1)
    return la, lb


def token_logp(answer_logits: torch.Tensor, body_logits: torch.Tensor, batch: Batch) -> torch.Tensor:
    """``(B, L)`` log-probabilities of the batch's tokens under the tables (with their gradient); 0 on padding."""
    la, lb = _log_tables(answer_logits, body_logits, batch)
    first = la.gather(-1, batch.answers[:, None])  # (B, 1)
    rest = lb.gather(-1, batch.tokens[:, 1:, None]).squeeze(-1)  # (B, L - 1)
    return torch.cat([first, rest], 1) * batch.mask


def token_entropy(answer_logits: torch.Tensor, body_logits: torch.Tensor, batch: Batch) -> torch.Tensor:
    """``(B, L)`` entropy (nats) of the distribution each token was drawn from (with gradient); 0 on padding."""
    la, lb = _log_tables(answer_logits, body_logits, batch)
    ha = -(la.exp() * la).sum(-1, keepdim=True)  # (B, 1)
    hb = -(lb.exp() * lb).sum(-1)  # (B, L - 1)
    return torch.cat([ha, hb], 1) * batch.mask


METRIC_DOCS: dict[str, str] = {
    "p_correct": "P(the answer token is right), mean over prompts (exact; a right answer later cut off at max_len "
                 "counts, although a reward that scores truncation 0 gives it nothing)",
    "quality": "expected true quality of the answer, mean over prompts (exact; = p_correct for a 0/1 reward)",
    "len_wrong": "expected completion length of wrong answers, tokens (exact; answer, fillers and EOS counted)",
    "len_right": "expected completion length of right answers, tokens (exact)",
    "length": "expected completion length, tokens (exact)",
    "truncated": "probability that a completion is truncated at max_len (exact)",
    "entropy": "per-token entropy, nats: expected entropy summed over a completion / expected length (exact)",
    "answer_entropy": "entropy of the answer token, nats, mean over prompts (exact)",
    "rare_mass": "probability of the right answer on the prompts where it started below 5 % (exact)",
    "right_entropy": "entropy of the answer among the right answers (P(a | a right)), nats, mean over prompts (exact)",
    "kl_start": "KL(pi || pi_start) of whole completions, nats, mean over prompts (exact)",
}


def exact_metrics(answer_logits: torch.Tensor, body_logits: torch.Tensor, task: LabTask) -> dict[str, float]:
    """Every quantity of :data:`METRIC_DOCS`, computed from the tables (no sampling)."""
    with torch.no_grad():
        la = torch.log_softmax(answer_logits.double(), -1)  # (P, K)
        lb = torch.log_softmax(body_logits.double(), -1)  # (P, K, L - 1, V + 1)
        pa, pb = la.exp(), lb.exp()
        stop = pb[..., -1]  # (P, K, L - 1)
        reach = torch.cumprod(torch.cat([torch.ones_like(stop[..., :1]), 1.0 - stop[..., :-1]], -1), -1)  # S_t
        trunc = reach[..., -1] * (1.0 - stop[..., -1])  # (P, K) no EOS in any body position
        elen = 1.0 + reach.sum(-1)  # (P, K): the answer plus the expected number of body tokens
        right = task.right.to(torch.float64)
        w_right, w_wrong = pa * right, pa * (1.0 - right)
        hb = -(pb * lb).sum(-1)  # (P, K, L - 1)
        ha = -(pa * la).sum(-1)  # (P,)
        ent_sum = ha + (pa * (reach * hb).sum(-1)).sum(-1)  # (P,)
        len_p = (pa * elen).sum(-1)  # (P,)
        la0 = torch.log_softmax(task.answer_logits.double(), -1)
        lb0 = torch.log_softmax(task.body_logits.double(), -1)
        kl_b = (pb * (lb - lb0)).sum(-1)  # (P, K, L - 1)
        kl = (pa * (la - la0)).sum(-1) + (pa * (reach * kl_b).sum(-1)).sum(-1)  # (P,)
        rare = task.rare
        pr = w_right / w_right.sum(-1, keepdim=True).clamp(min=1e-300)  # (P, K) P(a | right)
        right_ent = -(pr * torch.log(pr.clamp(min=1e-300))).sum(-1)  # (P,)
        out = {
            "p_correct": float(w_right.sum(-1).mean()),
            "quality": float((pa * task.quality).sum(-1).mean()),
            "len_wrong": float((w_wrong * elen).sum() / w_wrong.sum().clamp(min=1e-300)),
            "len_right": float((w_right * elen).sum() / w_right.sum().clamp(min=1e-300)),
            "length": float(len_p.mean()),
            "truncated": float((pa * trunc).sum(-1).mean()),
            "entropy": float(ent_sum.sum() / len_p.sum()),
            "answer_entropy": float(ha.mean()),
            "rare_mass": float(w_right[rare].sum(-1).mean()) if bool(rare.any()) else float("nan"),
            "kl_start": float(kl.mean()),
            "right_entropy": float(right_ent.mean()),
        }
        return out
