"""Rollout: sample a group of ``G`` completions per prompt and score their tokens under the policy.

Introduced in ``notebooks/05_grpo_end_to_end.ipynb``.

    ro = generate_completions(model, tokenizer, prompts, group_size=8, max_new_tokens=32, temperature=1.0)
    ro.completion_ids, ro.completion_mask   # (N, T) with N = len(prompts) * G, groups contiguous
    ro.is_eos, ro.truncated, ro.texts       # (N,), (N,), N strings
    ro.logps                                # (N, T) log-probs of the sampled tokens (sampling distribution)

The completions of one prompt are contiguous, ``[p0_c0, ..., p0_c{G-1}, p1_c0, ...]``, the order
:func:`grpo_lessons.group_advantages` expects (and TRL uses).

Sampling uses the full distribution at ``temperature`` (``top_k=0``, ``top_p=1``), so the log-probs
that :func:`per_token_logps` computes -- log-softmax of ``logits / temperature`` -- are the
log-probs of the distribution the tokens were actually drawn from.  TRL divides by the temperature
in the same place (``GRPOTrainer._get_per_token_logps_and_entropies``).  Without it, ``pi_old`` in
the importance ratio would not be the sampler and the ratio would drift from 1 even on policy.

Nothing else may touch the sampler: a hub model's ``generation_config`` often sets
``repetition_penalty``, ``top_k=50``, ``typical_p``, ``no_repeat_ngram_size`` ..., and ``generate`` would
apply them, so the tokens would come from some other distribution than ``softmax(logits / T)`` and every
ratio would be biased.  :func:`generate_completions` therefore builds the whole generation config itself
(as TRL does, :func:`sampling_generation_config`) and passes it to ``generate``; the draw itself is
:class:`InverseCDFSampler`, which also records each drawn token's log-prob (``Rollout.sampling_logps``).

Sampling changes no shared object, so another thread may use the same model and tokenizer meanwhile: the padding side
is an argument of the tokenizer call (the tokenizer's ``padding_side`` is never set) and the generation settings are an
argument of ``generate`` (the model's ``generation_config`` is never swapped).  (``model.eval()`` is still set for the
duration of the call and restored after it: dropout must be off while sampling.)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

__all__ = [
    "Rollout",
    "generate_completions",
    "per_token_logps",
    "rollout_logps",
    "encode_prompts",
    "prompt_lengths",
    "context_length",
    "prompts_over_context",
    "eos_token_ids",
    "completion_mask_from_ids",
    "concat_rollouts",
    "is_conversational",
    "InverseCDFSampler",
    "TemperedTokenLogp",
    "sampling_generation_config",
]


def is_conversational(prompt) -> bool:
    """True for a list of chat messages ``[{"role": ..., "content": ...}, ...]`` (TRL's conversational format)."""
    return isinstance(prompt, (list, tuple)) and len(prompt) > 0 and all(
        isinstance(m, dict) and "role" in m and "content" in m for m in prompt)


def _prompt_text(tokenizer, prompt) -> str:
    if is_conversational(prompt):
        return tokenizer.apply_chat_template(list(prompt), tokenize=False, add_generation_prompt=True)
    if isinstance(prompt, str):
        return prompt
    raise TypeError(
        "a prompt must be a string or a list of chat messages {'role': ..., 'content': ...}; "
        f"got {type(prompt).__name__}")


def encode_prompts(tokenizer, prompts: Sequence) -> dict[str, torch.Tensor]:
    """Apply the chat template (conversational prompts) and tokenize, padded on the left.

    Returns ``input_ids`` and ``attention_mask``, both ``(B, P)``.  Left padding puts every prompt's last
    token in the last column, so generated tokens line up in columns ``P, P+1, ...`` for the whole batch.
    """
    if len(prompts) == 0:
        raise ValueError("no prompts to encode")
    conversational = [is_conversational(p) for p in prompts]
    texts = [_prompt_text(tokenizer, p) for p in prompts]
    # The chat template already wrote any special tokens; plain strings get the tokenizer's own.  The padding side is
    # an argument of this call: setting tokenizer.padding_side would change it for every other user of the tokenizer.
    enc = tokenizer(texts, add_special_tokens=not all(conversational), padding=True, padding_side="left",
                    return_tensors="pt")
    return {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}


def prompt_lengths(tokenizer, prompts: Sequence) -> list[int]:
    """Token count of each prompt after the chat template (no padding)."""
    out = []
    for p in prompts:
        text = _prompt_text(tokenizer, p)
        out.append(len(tokenizer(text, add_special_tokens=not is_conversational(p))["input_ids"]))
    return out


def prompts_over_context(tokenizer, model, prompts: Sequence, max_new_tokens: int) -> tuple[int | None, list[tuple[int, int]]]:
    """``(context, [(index, prompt tokens), ...])``: the model's context (None: unknown, nothing is checked) and every
    prompt that does not leave room for ``max_new_tokens`` in it."""
    ctx = context_length(model)
    if ctx is None:
        return None, []
    return ctx, [(i, n) for i, n in enumerate(prompt_lengths(tokenizer, prompts)) if n + max_new_tokens > ctx]


def context_length(model) -> int | None:
    """The model's context window in tokens (``config.max_position_embeddings``), or None if it does not say."""
    cfg = getattr(model, "config", None)
    for name in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
        n = getattr(cfg, name, None)
        if isinstance(n, int) and n > 0:
            return n
    return None


def eos_token_ids(model, tokenizer) -> list[int]:
    """Every token id that ends a completion: the generation config's EOS id(s) and the tokenizer's."""
    ids: list[int] = []
    gen = getattr(model, "generation_config", None)
    for source in (getattr(gen, "eos_token_id", None), tokenizer.eos_token_id):
        if source is None:
            continue
        for i in (source if isinstance(source, (list, tuple)) else [source]):
            if int(i) not in ids:
                ids.append(int(i))
    if not ids:
        raise ValueError("neither the model's generation config nor the tokenizer defines an EOS token")
    return ids


def completion_mask_from_ids(completion_ids: torch.Tensor, eos_ids: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """``(N, T)`` ids -> ``(mask, is_eos)``: mask is 1 up to and including the first EOS, 0 after it.

    A completion without any EOS (cut at ``max_new_tokens``) keeps all ``T`` tokens and ``is_eos = False``.
    """
    is_eos_tok = torch.isin(completion_ids, torch.as_tensor(list(eos_ids), device=completion_ids.device))  # (N, T)
    has_eos = is_eos_tok.any(dim=1)  # (N,)
    T = completion_ids.shape[1]
    first = torch.where(has_eos, is_eos_tok.int().argmax(dim=1), torch.full_like(has_eos, T, dtype=torch.long))  # (N,)
    cols = torch.arange(T, device=completion_ids.device).expand_as(completion_ids)  # (N, T)
    mask = (cols <= first.unsqueeze(1)).long()  # (N, T); for no EOS, first = T keeps every column
    return mask, has_eos


def per_token_logps(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, logits_to_keep: int,
                    temperature: float = 1.0, batch_size: int | None = None, *, return_logits: bool = False):
    """Log-probs of the last ``logits_to_keep`` tokens of each row under ``model``; ``(B, L) -> (B, K)``.

    ``input_ids`` / ``attention_mask`` are ``(B, L)`` = prompt (left-padded) then completion, and
    ``K = logits_to_keep`` is the completion width ``T``.  Position ``t``'s logits predict token
    ``t + 1``, so we keep ``K + 1`` logits and drop the last.  Logits are divided by the sampling
    ``temperature`` before the log-softmax: the result is ``log pi(o_t | q, o_<t)`` of the *sampling*
    distribution, the ``pi_old`` / ``pi_theta`` of the importance ratio (TRL does the same).
    Gradients flow when called outside ``torch.no_grad()``.  ``batch_size`` splits the rows to bound
    memory (the logits tensor is ``B x (K+1) x vocab``).  ``return_logits=True`` returns
    ``(logps, logits)`` with the tempered fp32 ``logits`` ``(B, K, V)`` too (entropy, DPPO top-K).
    """
    if input_ids.shape != attention_mask.shape or input_ids.dim() != 2:
        raise ValueError(f"input_ids and attention_mask must both be (B, L); got {tuple(input_ids.shape)} "
                         f"and {tuple(attention_mask.shape)}")
    if not 0 < logits_to_keep < input_ids.shape[1]:
        raise ValueError(f"logits_to_keep must be in 1..L-1 = {input_ids.shape[1] - 1}, got {logits_to_keep}")
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if batch_size is not None and batch_size < input_ids.shape[0] and not return_logits:
        return torch.cat([
            per_token_logps(model, input_ids[i:i + batch_size], attention_mask[i:i + batch_size], logits_to_keep,
                            temperature)
            for i in range(0, input_ids.shape[0], batch_size)
        ])
    # Positions count real tokens only, as generate() does, so a left-padded row sees the positions it
    # was sampled with (RoPE is relative, but this keeps the numbers identical, not just close).
    position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)  # (B, L)
    kwargs = dict(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False)
    try:
        logits = model(**kwargs, logits_to_keep=logits_to_keep + 1).logits  # (B, K+1, V)
    except TypeError:  # a model without logits_to_keep: compute them all and slice
        logits = model(**kwargs).logits[:, -(logits_to_keep + 1):]  # (B, K+1, V)
    targets = input_ids[:, -logits_to_keep:]  # (B, K)
    return _token_logps(logits[:, :-1, :], targets, temperature, return_logits)  # row t predicts completion token t


class TemperedTokenLogp(torch.autograd.Function):
    """``log softmax(logits / T)[target]`` per position, ``(B, K, V) -> (B, K)``, in fp32 whatever the logits' dtype,
    with a hand-written backward.

    Same numbers as ``logits.float() / T`` -> ``gather`` -> ``- logsumexp`` (a test checks values and gradients),
    but the vocabulary-sized work -- the largest tensors of a GRPO step on a small model -- is a few passes instead
    of autograd's dozen: the backward is ``dL/dlogits = g / T * (onehot(target) - softmax(logits / T))``, written
    straight into one buffer in the logits' dtype.  Only the fp32 ``logsumexp`` ``(B, K)`` and the logits (already
    kept by the model's graph) are saved.
    """

    @staticmethod
    def forward(ctx, logits: torch.Tensor, targets: torch.Tensor, temperature: float) -> torch.Tensor:
        x = _tempered(logits, temperature)  # (B, K, V) fp32 (fp64 for fp64 logits)
        lse = torch.logsumexp(x, dim=-1)  # (B, K)
        picked = x.gather(-1, targets.unsqueeze(-1)).squeeze(-1)  # (B, K)
        ctx.save_for_backward(logits, targets, lse)
        ctx.temperature = float(temperature)
        return picked - lse

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        logits, targets, lse = ctx.saved_tensors
        t = ctx.temperature
        g = grad_out.to(lse.dtype) / t  # (B, K)
        p = _tempered(logits, t).sub_(lse.unsqueeze(-1)).exp_()  # (B, K, V) softmax(logits / T), a fresh buffer
        grad = p.mul_(-g.unsqueeze(-1))
        grad.scatter_add_(-1, targets.unsqueeze(-1), g.unsqueeze(-1))
        return grad.to(logits.dtype), None, None


def _tempered(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """A new tensor ``logits / T`` in at least fp32 (one pass when the logits are bf16: cast, then divide in place)."""
    dtype = torch.promote_types(logits.dtype, torch.float32)
    if logits.dtype == dtype:
        return logits / temperature
    return logits.to(dtype).div_(temperature)


def _token_logps(logits: torch.Tensor, targets: torch.Tensor, temperature: float, return_logits: bool):
    """``(B, K)`` log-probs of ``targets`` under ``softmax(logits / temperature)``; ``return_logits`` adds the tempered
    fp32 logits ``(B, K, V)`` (the entropy bonus and DPPO's top-K need them, with their own gradient)."""
    if return_logits:
        x = logits.float() / temperature  # (B, K, V)
        # log_softmax(x)[y] = x[y] - logsumexp(x), without materialising the (B, K, V) log-softmax
        lp = x.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(x, dim=-1)  # (B, K)
        return lp, x
    return TemperedTokenLogp.apply(logits, targets, temperature)


def _shared_prompt_logps(model, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, completion_ids: torch.Tensor,
                         completion_mask: torch.Tensor, group_size: int, temperature: float,
                         return_logits: bool = False):
    """:func:`per_token_logps` for groups that share a prompt, running each prompt through the model once.

    ``prompt_ids``/``prompt_mask`` are ``(n, P)`` -- one row per *group* -- and the completions ``(n * G, T)``.
    The prompt's keys and values (with their gradient) are repeated ``G`` times and the completions attend to
    them, so the prompt costs ``1/G`` of the plain forward.  Same numbers as :func:`per_token_logps` on the
    concatenated rows, up to float rounding (a test checks values and gradients).
    """
    G = group_size
    pos = (prompt_mask.long().cumsum(-1) - 1).clamp(min=0)  # (n, P)
    out = model(input_ids=prompt_ids, attention_mask=prompt_mask, position_ids=pos, use_cache=True, logits_to_keep=1)
    cache = out.past_key_values
    cache.batch_repeat_interleave(G)  # (n * G, heads, P, d) per layer; differentiable (repeat_interleave)
    first = out.logits[:, -1:, :].repeat_interleave(G, dim=0)  # (n * G, 1, V): predicts completion token 0
    T = completion_ids.shape[1]
    pm = prompt_mask.repeat_interleave(G, dim=0)  # (n * G, P)
    start = pm.long().sum(-1, keepdim=True)  # (n * G, 1): generate() gave token t the position start + t
    cpos = start + torch.arange(T, device=completion_ids.device)  # (n * G, T)
    if T == 1:
        return _token_logps(first, completion_ids, temperature, return_logits)
    rest = model(input_ids=completion_ids[:, :-1], attention_mask=torch.cat([pm, completion_mask[:, :-1]], dim=1),
                 position_ids=cpos[:, :-1], past_key_values=cache, use_cache=True).logits  # (n * G, T-1, V)
    if return_logits:
        return _token_logps(torch.cat([first, rest], dim=1), completion_ids, temperature, True)  # (n * G, T, V)
    # token 0 and tokens 1.. apart: no (n * G, T, V) concatenation, forward or backward
    return torch.cat([_token_logps(first, completion_ids[:, :1], temperature, False),
                      _token_logps(rest, completion_ids[:, 1:], temperature, False)], dim=1)  # (n * G, T)


def rollout_logps(model, rollout: "Rollout", temperature: float = 1.0, rows: slice | None = None,
                  share_prompt: bool = True, *, return_logits: bool = False):
    """Per-token log-probs ``(b, T)`` of a rollout's completions (or the rows ``rows``) under ``model``.

    With ``share_prompt`` and whole groups selected, each prompt goes through the model once for its ``G``
    completions (:func:`_shared_prompt_logps`); otherwise this is :func:`per_token_logps` on
    ``prompt + completion``.  Gradients flow unless called under ``torch.no_grad()``.  ``return_logits=True``
    gives ``(logps, logits)``, the tempered fp32 logits ``(b, T, V)`` at the completion positions too.
    """
    sl = rows if rows is not None else slice(0, len(rollout))
    start, stop = sl.start or 0, len(rollout) if sl.stop is None else min(sl.stop, len(rollout))
    G = rollout.group_size
    T = rollout.completion_ids.shape[1]
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if share_prompt and G > 1 and start % G == 0 and stop % G == 0 and stop > start:
        groups = slice(start, stop, G)  # the first row of each group holds the group's prompt
        pm = rollout.prompt_mask[groups]
        keep = int(pm.sum(0).gt(0).nonzero().min()) if bool(pm.any()) else 0  # drop all-padding columns
        return _shared_prompt_logps(model, rollout.prompt_ids[groups][:, keep:], pm[:, keep:],
                                    rollout.completion_ids[start:stop], rollout.completion_mask[start:stop], G,
                                    temperature, return_logits)
    ids = torch.cat([rollout.prompt_ids[start:stop], rollout.completion_ids[start:stop]], dim=1)
    am = torch.cat([rollout.prompt_mask[start:stop], rollout.completion_mask[start:stop]], dim=1)
    return per_token_logps(model, ids, am, T, temperature, return_logits=return_logits)


@dataclass
class Rollout:
    """``N = num_prompts * group_size`` sampled completions, groups contiguous.

    ``prompt_ids``/``prompt_mask`` are left-padded ``(N, P)``; ``completion_ids``/``completion_mask``
    right-padded ``(N, T)`` with the mask covering the tokens up to and including the first EOS.
    ``truncated`` marks completions cut at ``max_new_tokens`` without an EOS (``= ~is_eos``).
    ``lengths`` counts the masked tokens (EOS included).  ``logps`` (or None) are the per-token
    log-probs of the sampling distribution, 0 on padding, recomputed by a forward pass of the model;
    ``sampling_logps`` (or None) are the log-probs the sampler itself used when it drew each token (its own
    logits, possibly a low-precision copy of the policy), 0 on padding; ``sampling_entropy`` the entropy of each
    position's sampling distribution, and (``record_topk``) ``sampler_topk_ids``/``sampler_topk_logps`` its K
    most likely tokens, for the entropy bonus and DPPO's top-K divergence.
    """

    prompts: list  # the P prompts as given (strings or chat messages)
    prompt_ids: torch.Tensor  # (N, P)
    prompt_mask: torch.Tensor  # (N, P)
    completion_ids: torch.Tensor  # (N, T)
    completion_mask: torch.Tensor  # (N, T)
    is_eos: torch.Tensor  # (N,) bool
    texts: list[str]  # N decoded completions, special tokens removed
    group_size: int
    temperature: float | None  # None: greedy
    logps: torch.Tensor | None = None  # (N, T)
    meta: dict = field(default_factory=dict)
    sampling_logps: torch.Tensor | None = None  # (N, T) log-probs the sampler drew with, recorded at generation
    sampling_entropy: torch.Tensor | None = None  # (N, T) entropy of the distribution each token was drawn from, 0 on padding
    sampler_topk_ids: torch.Tensor | None = None  # (N, T, K) the sampler's K most likely ids per position (DPPO top-K)
    sampler_topk_logps: torch.Tensor | None = None  # (N, T, K) their log-probs under the sampler

    @property
    def truncated(self) -> torch.Tensor:  # (N,) bool
        return ~self.is_eos

    @property
    def lengths(self) -> torch.Tensor:  # (N,) tokens in each completion, EOS included
        return self.completion_mask.sum(dim=1)

    @property
    def num_prompts(self) -> int:
        return len(self.prompts)

    def __len__(self) -> int:
        return self.completion_ids.shape[0]

    @property
    def input_ids(self) -> torch.Tensor:  # (N, P + T)
        return torch.cat([self.prompt_ids, self.completion_ids], dim=1)

    @property
    def attention_mask(self) -> torch.Tensor:  # (N, P + T)
        return torch.cat([self.prompt_mask, self.completion_mask], dim=1)

    def completions(self) -> list:
        """The completions as TRL hands them to reward functions: chat messages for conversational prompts."""
        conv = [is_conversational(p) for p in self.prompts]
        G = self.group_size
        return [[{"role": "assistant", "content": t}] if conv[i // G] else t for i, t in enumerate(self.texts)]

    def select_groups(self, groups: Sequence[int]) -> "Rollout":
        """The rollout restricted to the given prompt (group) indices, in that order."""
        G = self.group_size
        rows = [g * G + j for g in groups for j in range(G)]
        idx = torch.as_tensor(rows, dtype=torch.long)
        return Rollout(
            prompts=[self.prompts[g] for g in groups],
            prompt_ids=self.prompt_ids[idx], prompt_mask=self.prompt_mask[idx],
            completion_ids=self.completion_ids[idx], completion_mask=self.completion_mask[idx],
            is_eos=self.is_eos[idx], texts=[self.texts[r] for r in rows], group_size=G,
            temperature=self.temperature, logps=None if self.logps is None else self.logps[idx], meta=dict(self.meta),
            sampling_logps=None if self.sampling_logps is None else self.sampling_logps[idx],
            **{k: None if getattr(self, k) is None else getattr(self, k)[idx] for k in _SAMPLER_EXTRAS},
        )


# Per-token records of the sampler that travel with a rollout: (N, T) or (N, T, K), padded with 0 on the right.
_SAMPLER_EXTRAS = ("sampling_entropy", "sampler_topk_ids", "sampler_topk_logps")


def _pad_extra(t: torch.Tensor, width: int) -> torch.Tensor:
    """Right-pad a sampler record to ``width`` columns: 0, except top-K ids get the distinct ids 0..K-1."""
    if t.dim() == 3 and not t.is_floating_point() and width > t.shape[1]:
        K = t.shape[-1]
        fill = torch.arange(K, dtype=t.dtype, device=t.device).expand(t.shape[0], width - t.shape[1], K)
        return torch.cat([t, fill], dim=1)
    return _pad_to(t, width, 0, left=False)


def _pad_to(t: torch.Tensor, width: int, value, left: bool) -> torch.Tensor:
    extra = width - t.shape[1]
    if extra <= 0:
        return t
    pad = torch.full((t.shape[0], extra, *t.shape[2:]), value, dtype=t.dtype, device=t.device)
    return torch.cat([pad, t] if left else [t, pad], dim=1)


def concat_rollouts(parts: Sequence[Rollout], pad_token_id: int) -> Rollout:
    """Stack rollouts of the same group size: prompts re-padded on the left, completions on the right."""
    parts = [p for p in parts if len(p)]
    if not parts:
        raise ValueError("nothing to concatenate: every rollout is empty")
    if len(parts) == 1:
        return parts[0]
    G = parts[0].group_size
    if any(p.group_size != G for p in parts):
        raise ValueError("rollouts with different group sizes cannot be concatenated")
    P = max(p.prompt_ids.shape[1] for p in parts)
    T = max(p.completion_ids.shape[1] for p in parts)
    has_logps = all(p.logps is not None for p in parts)
    has_slp = all(p.sampling_logps is not None for p in parts)
    return Rollout(
        prompts=[q for p in parts for q in p.prompts],
        prompt_ids=torch.cat([_pad_to(p.prompt_ids, P, pad_token_id, left=True) for p in parts]),
        prompt_mask=torch.cat([_pad_to(p.prompt_mask, P, 0, left=True) for p in parts]),
        completion_ids=torch.cat([_pad_to(p.completion_ids, T, pad_token_id, left=False) for p in parts]),
        completion_mask=torch.cat([_pad_to(p.completion_mask, T, 0, left=False) for p in parts]),
        is_eos=torch.cat([p.is_eos for p in parts]),
        texts=[t for p in parts for t in p.texts],
        group_size=G,
        temperature=parts[0].temperature,
        logps=torch.cat([_pad_to(p.logps, T, 0.0, left=False) for p in parts]) if has_logps else None,
        meta=dict(parts[0].meta),
        sampling_logps=(torch.cat([_pad_to(p.sampling_logps, T, 0.0, left=False) for p in parts])
                        if has_slp else None),
        **{k: (torch.cat([_pad_extra(getattr(p, k), T) for p in parts])
               if all(getattr(p, k) is not None for p in parts) else None) for k in _SAMPLER_EXTRAS},
    )


class InverseCDFSampler:
    """A logits processor that draws the next token from ``softmax(logits / T)`` and records its log-prob.

    Used with greedy ``generate``: it returns 0 for the drawn token and ``-inf`` elsewhere, so the argmax *is*
    the draw.  The draw is inverse-CDF sampling, one uniform per row: ``token = min{i : cumsum(p)_i > u * sum(p)}``,
    with the cumulative sum and ``u`` in fp64 so that every token with mass gets its own interval of the right
    width (in fp32 both are spaced 6e-8 apart near 1); it is ~15x cheaper on a CPU than ``torch.multinomial`` over a
    49k vocabulary (one random number per row instead of per vocabulary entry).  ``top_k`` / ``top_p`` (optional) truncate the distribution first;
    the recorded log-probs are then those of the truncated, renormalised distribution actually sampled.
    After ``generate``, :meth:`logps` is ``(N, T')``: ``log p(o_t)`` of each drawn token (vLLM's "sampler
    log-probs"; in TRL the ``sampling_per_token_logps`` of its vLLM path).
    """

    def __init__(self, temperature: float, top_k: int = 0, top_p: float = 1.0, record_topk: int = 0) -> None:
        if not temperature > 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        if not 0 < top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {top_p}")
        self.temperature, self.top_k, self.top_p = float(temperature), int(top_k or 0), float(top_p)
        self._steps: list[torch.Tensor] = []
        # Also recorded per step: the entropy of the distribution drawn from (the entropy bonus), and with
        # record_topk = K its K most likely ids and their log-probs (DPPO's top-K divergence).
        self.record_topk = int(record_topk or 0)
        self._entropy: list[torch.Tensor] = []
        self._topk: list[tuple[torch.Tensor, torch.Tensor]] = []

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if not self.top_k and self.top_p >= 1.0:
            # The whole tempered softmax (the trainer's case), in as few passes over (N, V) as it takes -- on a CPU
            # the vocabulary-sized work is a large part of each decoding step: log-softmax in place, and the
            # entropy -sum_v p_v log p_v as one batched dot product (no (N, V) temporary).
            lp = scores.float() / self.temperature  # (N, V), a new tensor
            lp = lp.sub_(torch.logsumexp(lp, dim=-1, keepdim=True))
            p = lp.exp()  # (N, V)
            entropy = -torch.bmm(p.unsqueeze(1), lp.unsqueeze(2)).view(-1)  # (N,)
        else:
            lp = torch.log_softmax(scores.float() / self.temperature, dim=-1)  # (N, V)
            if self.top_k and self.top_k < lp.shape[-1]:
                kth = lp.topk(self.top_k, dim=-1).values[:, -1:]  # (N, 1)
                lp = torch.log_softmax(lp.masked_fill(lp < kth, float("-inf")), dim=-1)
            if self.top_p < 1.0:
                srt, idx = lp.sort(dim=-1, descending=True)  # (N, V)
                before = srt.exp().cumsum(-1) - srt.exp()  # probability mass strictly above each entry
                drop = torch.zeros_like(lp, dtype=torch.bool).scatter(-1, idx, before >= self.top_p)
                lp = torch.log_softmax(lp.masked_fill(drop, float("-inf")), dim=-1)
            p = lp.exp()  # (N, V)
            entropy = -(p * lp).nansum(-1)  # (N,); a truncated-away token gives 0 * -inf = NaN: skipped
        self._entropy.append(entropy)
        if self.record_topk:
            top = lp.topk(min(self.record_topk, lp.shape[-1]), dim=-1)  # (N, K), most likely first
            self._topk.append((top.indices, top.values))
        # The CDF and the uniform in fp64: in fp32 both are spaced 6e-8 apart near 1, so the tokens of p < 6e-8 in the
        # top of the CDF got intervals of the wrong width or none (up to 1.4e-4 of SmolLM2's mass was never drawn,
        # TV 3e-5 to 2e-4 from the recorded softmax); in fp64 the draw is the recorded distribution to its own
        # fp32 rounding.  Costs one fp64 (N, V) buffer; the cumulative sum was a pass over (N, V) already.
        cdf = p.double().cumsum_(-1)  # (N, V) fp64
        total = cdf[:, -1:]  # (N, 1)
        u = torch.rand(cdf.shape[0], 1, dtype=torch.float64, device=cdf.device) * total  # (N, 1), one uniform per row
        u = torch.minimum(u, torch.nextafter(total, torch.zeros_like(total)))  # u < total even after rounding
        tok = torch.searchsorted(cdf, u, right=True)  # (N, 1): the first cdf > u, never a p = 0 token
        self._steps.append(lp.gather(-1, tok).squeeze(-1))  # (N,)
        return torch.full_like(scores, float("-inf")).scatter_(-1, tok, 0.0)  # greedy argmax is the draw

    def logps(self) -> torch.Tensor:
        """``(N, T')`` log-probs of the drawn tokens, one column per generated position."""
        return torch.stack(self._steps, dim=1)

    def entropy(self) -> torch.Tensor:
        """``(N, T')`` entropy ``-sum_v p_v log p_v`` of the distribution each token was drawn from (tempered)."""
        return torch.stack(self._entropy, dim=1)

    def topk(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        """``(ids, logps)``, each ``(N, T', K)``: the sampler's K most likely tokens per position (``record_topk``)."""
        if not self._topk:
            return None
        return torch.stack([i for i, _ in self._topk], dim=1), torch.stack([v for _, v in self._topk], dim=1)


def _sampler_records(sampler: InverseCDFSampler | None, mask: torch.Tensor) -> dict:
    """The sampler's entropy ``(N, T)`` and top-K ``(N, T, K)`` records, cut to the completion width, 0 on padding."""
    if sampler is None:
        return {}
    T = mask.shape[1]
    keep = mask.bool()  # (N, T)
    ent = sampler.entropy()[:, :T]  # (N, T)
    out = {"sampling_entropy": torch.where(keep, ent, torch.zeros_like(ent))}
    top = sampler.topk()
    if top is not None:
        ids, lps = top
        K = ids.shape[-1]  # padding: ids 0..K-1 (distinct, as a top-K must be), log-probs 0
        out["sampler_topk_ids"] = torch.where(keep.unsqueeze(-1), ids[:, :T], torch.arange(K, device=ids.device))
        # where, not * mask: with the sampler's top_k below K the record holds -inf, and -inf * 0 is NaN
        lps = lps[:, :T]  # (N, T, K)
        out["sampler_topk_logps"] = torch.where(keep.unsqueeze(-1), lps, torch.zeros_like(lps))
    return out


# Fields generate() would still take from the model's own generation_config (ours leaves them None) that change
# nothing here: token ids we set ourselves or that greedy decoding without an assistant never reads.
_HARMLESS_MODEL_FIELDS = frozenset({
    "bos_token_id", "decoder_start_token_id", "_from_model_config", "transformers_version",
    "min_p", "top_h",  # sampling warpers: do_sample is off (InverseCDFSampler draws)
    "assistant_early_exit", "assistant_ensemble_weight", "max_matching_ngram_size",  # assisted decoding only
    "cache_config", "max_cache_len", "compile_config", "continuous_batching_config",  # unused without them
})


def sampling_generation_config(model, *, prompt_length: int, max_new_tokens: int, eos_token_id: Sequence[int],
                               pad_token_id: int):
    """The ``GenerationConfig`` :func:`generate_completions` passes to ``model.generate`` for prompts padded to
    ``prompt_length`` tokens: greedy over what :class:`InverseCDFSampler` returns, every processor off, so the draw is
    exactly the sampler's, and at most ``max_new_tokens`` new tokens.

    ``generate`` fills each field the config passed to it leaves ``None`` from ``model.generation_config`` (a hub
    model's ``repetition_penalty``, ``top_k``, ``suppress_tokens`` ...).  Every field with a neutral value is set here,
    so the model's config cannot reach the sampler, and it is read, never swapped or changed.  The few whose only
    neutral value is ``None`` (``suppress_tokens``, ``bad_words_ids``, ``forced_eos_token_id``, ``sequence_bias``,
    ``stop_strings``, ...) are checked instead: a model whose config sets one raises ``ValueError`` naming it, rather
    than sampling from something other than ``softmax(logits / T)``.  Three settings that only bound the run are
    overridden instead: the model's ``max_new_tokens`` by ours, its ``max_time`` by no limit, a ``cache_implementation``
    (``"static"``, ...) by a dynamic cache.
    """
    from transformers import GenerationConfig

    # The length as max_length = prompt + new tokens: generate() warns at every call when max_new_tokens meets a
    # max_length (ours or the model's), and max_new_tokens would take precedence over the model's max_length anyway.
    config = GenerationConfig(
        max_length=prompt_length + max_new_tokens, min_length=0, do_sample=False, num_beams=1,
        num_return_sequences=1, eos_token_id=list(eos_token_id), pad_token_id=pad_token_id,
        temperature=1.0, top_k=50, top_p=1.0,  # transformers' neutral defaults, unused by greedy decoding
        repetition_penalty=1.0, no_repeat_ngram_size=0, renormalize_logits=False, guidance_scale=1.0,
        low_memory=False, token_healing=False, is_assistant=False, disable_compile=True, use_mtp=False,
        output_attentions=False, output_hidden_states=False, output_logits=False)
    # transformers' global defaults (use_cache, max_length, ...) come after the model's values in generate(): set them
    # here too, so they are ours and not the model's
    defaults = getattr(GenerationConfig, "_get_default_generation_params", None)
    if defaults is not None:
        config.update(**defaults(), defaults_only=True)
    own = getattr(model, "generation_config", None)
    if own is not None:
        # Settings of the model's that only bound the run, each overridden by a value of ours that bounds nothing more
        # than ours do: its max_new_tokens (it would win over our max_length) by ours, its max_time by none, its
        # cache by a dynamic one (generate_completions then prefills each prompt inside generate, not shared).
        if own.max_new_tokens is not None:
            config.max_new_tokens, config.max_length = max_new_tokens, None
        if own.max_time is not None:
            config.max_time = math.inf
        if own.cache_implementation not in (None, "hybrid"):  # generate() drops "hybrid" itself
            config.cache_implementation = "dynamic"
        ours = config.to_dict()
        leaks = sorted(k for k, v in own.to_dict().items()
                       if v is not None and k in ours and ours[k] is None and k not in _HARMLESS_MODEL_FIELDS
                       and k not in ("max_length", "cache_implementation"))  # ours where the model sets them
        if leaks:
            raise ValueError(
                f"the model's generation_config sets {', '.join(f'{k}={getattr(own, k)!r}' for k in leaks)}, which "
                "generate() would merge in on top of the sampler, so the tokens would not come from "
                "softmax(logits / T), and which no value passed to generate() can switch off. Sampling reads the "
                "model's generation_config and never changes it: sample with a model whose generation_config leaves "
                f"{'these' if len(leaks) > 1 else 'it'} unset")
    return config


@torch.no_grad()
def generate_completions(model, tokenizer, prompts: Sequence, group_size: int = 8, *, max_new_tokens: int = 32,
                         temperature: float | None = 1.0, top_p: float = 1.0, top_k: int = 0,
                         compute_logps: bool = True, batch_size: int | None = None,
                         generator_seed: int | None = None, share_prompt: bool = True,
                         record_topk: int = 0) -> Rollout:
    """Sample ``group_size`` completions for each prompt with ``model.generate``; returns a :class:`Rollout`.

    ``prompts``: strings or chat messages (the tokenizer's chat template is applied, with the
    assistant turn opened).  ``temperature=None`` decodes greedily (held-out evaluation).
    ``batch_size`` bounds how many prompts go to ``generate`` at once.  ``generator_seed`` reseeds
    torch's global RNG first (sampling uses it); by default the caller's RNG state is used.
    ``compute_logps`` adds the sampled tokens' log-probs under ``model`` (one extra forward pass).
    ``share_prompt`` runs each prompt through the model once for its ``G`` samples (a prefilled cache
    copied ``G`` times) instead of ``G`` times; the sampled distribution is the same.
    The tokens are drawn from exactly ``softmax(logits / temperature)`` (optionally ``top_k``/``top_p``
    truncated): the generation config is built here in full and passed to ``generate``, so the model's own
    ``generation_config`` cannot bend the draw (:func:`sampling_generation_config`).  Neither the tokenizer nor the
    model's ``generation_config`` is changed, even for the duration of the call.  ``Rollout.sampling_logps`` holds the log-probs the draw
    used (:class:`InverseCDFSampler`), ``Rollout.sampling_entropy`` the entropy of each position's sampling
    distribution, and with ``record_topk = K`` ``Rollout.sampler_topk_ids``/``sampler_topk_logps`` its K most
    likely tokens (DPPO's top-K divergence, :func:`grpo_lessons.core.divergence.topk_divergence`).

    Raises ``ValueError`` if a prompt plus ``max_new_tokens`` does not fit in the model's context,
    ``RuntimeError`` if ``generate`` returns no new tokens.
    """
    prompts = list(prompts)
    if not prompts:
        raise ValueError("no prompts: the rollout needs at least one prompt")
    if not isinstance(group_size, int) or group_size < 1:
        raise ValueError(f"group_size must be a positive integer, got {group_size!r}")
    if not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be a positive integer, got {max_new_tokens!r}")
    greedy = temperature is None
    if not greedy and temperature <= 0:
        raise ValueError(f"temperature must be > 0 (or None for greedy decoding), got {temperature}")
    if greedy and group_size > 1:
        raise ValueError("greedy decoding gives G identical completions; use temperature > 0 or group_size=1")
    ctx, too_long = prompts_over_context(tokenizer, model, prompts, max_new_tokens)
    if too_long:
        i, n = too_long[0]
        raise ValueError(
            f"prompt {i} has {n} tokens; with max_new_tokens={max_new_tokens} that exceeds the model's "
            f"context of {ctx} tokens ({len(too_long)} prompt(s) too long). Shorten the prompts or "
            f"lower max_new_tokens.")
    if generator_seed is not None:
        torch.manual_seed(generator_seed)
    eos_ids = eos_token_ids(model, tokenizer)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos_ids[0]
    device = next(model.parameters()).device

    from transformers import LogitsProcessorList

    was_training = model.training
    model.eval()
    parts = []
    step = batch_size or len(prompts)
    try:
        for s in range(0, len(prompts), step):
            chunk = prompts[s:s + step]
            enc = encode_prompts(tokenizer, chunk)
            ids, am = enc["input_ids"].to(device), enc["attention_mask"].to(device)  # (b, P)
            P = ids.shape[1]
            # Greedy over what the sampler returns (0 at the drawn token, -inf elsewhere) is the draw itself.
            sampler = None if greedy else InverseCDFSampler(float(temperature), top_k, top_p, record_topk)
            gen_config = sampling_generation_config(model, prompt_length=P, max_new_tokens=max_new_tokens,
                                                    eos_token_id=eos_ids, pad_token_id=pad_id)
            gen_kw = dict(generation_config=gen_config, logits_processor=LogitsProcessorList([sampler] if sampler else []))
            if share_prompt and group_size > 1 and P > 1 and gen_config.cache_implementation is None:
                # Prefill each prompt once (all but its last token), then copy its keys/values G times:
                # the G samples of a prompt share the prompt's forward pass instead of repeating it.
                pos = (am.long().cumsum(-1) - 1).clamp(min=0)  # (b, P)
                cache = model(input_ids=ids[:, :-1], attention_mask=am[:, :-1], position_ids=pos[:, :-1],
                              use_cache=True, logits_to_keep=1).past_key_values
                cache.batch_repeat_interleave(group_size)
                out = model.generate(input_ids=ids.repeat_interleave(group_size, dim=0),
                                     attention_mask=am.repeat_interleave(group_size, dim=0),
                                     past_key_values=cache, **gen_kw)  # (b * G, P + T')
            else:  # (b * G, P + T'), T' <= max_new_tokens
                out = model.generate(input_ids=ids.repeat_interleave(group_size, dim=0),
                                     attention_mask=am.repeat_interleave(group_size, dim=0), **gen_kw)
            comp = out[:, P:]  # (b * G, T')
            if comp.shape[1] == 0:
                raise RuntimeError("model.generate returned no new tokens; check max_new_tokens and the "
                                   "generation config")
            mask, has_eos = completion_mask_from_ids(comp, eos_ids)  # (b * G, T'), (b * G,)
            comp = torch.where(mask.bool(), comp, torch.full_like(comp, pad_id))  # clean padding after EOS
            texts = []
            for row, m in zip(comp, mask):
                n = int(m.sum()) - (1 if bool(torch.isin(row[int(m.sum()) - 1], torch.tensor(eos_ids))) else 0)
                texts.append(tokenizer.decode(row[:n].tolist(), skip_special_tokens=True))
            parts.append(Rollout(
                prompts=chunk,
                prompt_ids=ids.repeat_interleave(group_size, dim=0),  # (b * G, P): completions of a prompt together
                prompt_mask=am.repeat_interleave(group_size, dim=0),
                completion_ids=comp, completion_mask=mask, is_eos=has_eos, texts=texts,
                group_size=group_size, temperature=temperature,
                sampling_logps=None if sampler is None else sampler.logps()[:, :comp.shape[1]] * mask,
                **_sampler_records(sampler, mask),
            ))
        ro = concat_rollouts(parts, pad_id)
        if compute_logps:
            t = 1.0 if greedy else float(temperature)
            step_rows = (batch_size or len(prompts)) * group_size
            lp = torch.cat([rollout_logps(model, ro, t, rows=slice(s, s + step_rows), share_prompt=share_prompt)
                            for s in range(0, len(ro), step_rows)])
            ro.logps = lp * ro.completion_mask  # (N, T), 0 on padding
    finally:
        model.train(was_training)
    ro.meta.update(eos_token_ids=eos_ids, pad_token_id=pad_id, max_new_tokens=max_new_tokens)
    return ro
