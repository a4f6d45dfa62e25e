"""The update's pieces: :func:`batch_loss` (the loss of one micro-batch: a forward pass, then
:func:`grpo_lessons.core.losses.policy_loss`), precision, micro-batches, the rollout-correction settings handed to
``policy_loss``, the sampler/trainer gap, and the running sums of one update's diagnostics (the loss columns of
``metrics.csv``).

Introduced in ``notebooks/05_grpo_end_to_end.ipynb`` (the update) and ``notebooks/11_train_inference_mismatch.ipynb``
(the sampler/trainer gap); :meth:`grpo_lessons.training.trainer.Trainer.update` calls them, :func:`batch_loss` once per
micro-batch.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from grpo_lessons.core.aggregation import aggregate
from grpo_lessons.core.divergence import topk_divergence
from grpo_lessons.core.losses import LossOutput, policy_loss
from .rollout import Rollout, rollout_logps
from grpo_lessons.core.shaping import token_entropy
from .train_config import TrainConfig
from grpo_lessons.core.variants import Variant, get_variant

__all__ = ["batch_loss", "autocast", "micro_batches", "correction_settings", "mismatch_stats", "LossTally",
           "EMPTY_UPDATE"]

# What Trainer.update returns when it takes no optimiser step: a batch with no groups (dynamic sampling found no
# informative one) or no unmasked token (e.g. every completion truncated under overlong filtering).
EMPTY_UPDATE = {"loss": None, "policy_loss": None, "kl": None, "clip_frac": None, "clip_frac_low": None,
                "clip_frac_high": None, "ratio_mean": None, "grad_norm": None, "groups_trained": 0,
                "update_skipped": 1}


def batch_loss(model, rollout: Rollout, advantages: torch.Tensor, loss_mask: torch.Tensor, *,
               variant: str | Variant = "grpo", temperature: float = 1.0, beta: float = 0.0,
               old_logps: torch.Tensor | None = None, ref_logps: torch.Tensor | None = None,
               epsilon: float | None = None, epsilon_high: float | None = None,
               max_completion_length: int | None = None, num_items_in_batch: float | None = None,
               rows: slice | None = None, precision: str = "fp32",
               correction: dict | None = None, group_size: int | None = None,
               prompt_weights: torch.Tensor | None = None,
               entropy_coef: float = 0.0,
               loss_fn: Callable[..., LossOutput] = policy_loss) -> tuple[LossOutput, torch.Tensor]:
    """The GRPO loss of (a slice of) a batch, with gradient: forward pass, then :func:`policy_loss`.

    ``advantages`` is ``(N,)``, ``loss_mask``/``old_logps``/``ref_logps`` are ``(N, T)``; ``rows`` picks a
    micro-batch.  ``old_logps=None`` means on policy: ``pi_old = sg(pi_theta)``, every ratio exactly 1.
    ``precision="bf16-mixed"`` runs the forward of an fp32 ``model`` under bf16 autocast (a bf16 ``model``, the
    trainer's compute copy, runs as it is); the log-softmax and the loss are fp32.  ``correction`` (``sampling_logp`` of the whole batch ``(N, T)`` plus the
    rollout-correction settings) goes to :func:`policy_loss` only when given.
    ``group_size`` / ``prompt_weights`` ``(N,)`` (of the whole batch) are ScaleRL's ``prompt_mean`` normaliser.
    DPPO's top-K variants get ``divergence = topk_divergence(...)`` between the sampler's top-K
    (``rollout.sampler_topk_ids``/``sampler_topk_logps``, recorded at generation) and this forward's logits.
    ``entropy_coef = alpha > 0`` subtracts ``alpha * aggregate(H)`` from the loss, ``H`` ``(b, T)`` the token
    entropy of the current (tempered) policy with its gradient, aggregated as the variant aggregates the loss
    (veRL ``actor.entropy_coeff``); ``out.extras["entropy"]`` is its token mean, ``["entropy_term"]`` the
    aggregate.  ``loss_fn`` is :func:`policy_loss` (the trainer passes the one it imports, so it can be swapped
    there).  Returns ``(LossOutput, logp)`` with ``logp`` the ``(b, T)`` log-probs that carry the gradient.
    """
    v = get_variant(variant)
    sl = rows if rows is not None else slice(0, len(rollout))
    kind = str(v.loss_defaults.get("kind", "")) if v.objective == "dppo" else ""
    need_logits = bool(entropy_coef) or kind.startswith("topk")
    with autocast(model, precision):
        logp = rollout_logps(model, rollout, temperature, rows=sl, return_logits=need_logits)  # (b, T)
    logits = None
    if need_logits:
        logp, logits = logp  # (b, T), (b, T, V) tempered
    old = logp.detach() if old_logps is None else old_logps[sl]
    mask = loss_mask[sl]
    extra = {}
    if correction:
        extra = dict(correction, sampling_logp=correction["sampling_logp"][sl])
    if kind.startswith("topk"):
        if rollout.sampler_topk_ids is None:
            raise ValueError(f"variant {v.name!r} needs the sampler's top-K (generate_completions(record_topk=K))")
        with torch.no_grad():  # the trust region is a mask: no gradient through D
            extra["divergence"] = topk_divergence(
                rollout.sampler_topk_ids[sl], rollout.sampler_topk_logps[sl], logits.detach().float(),
                rollout.completion_ids[sl], kind[len("topk_"):], temperature=1.0,
                sampled_logp=rollout.sampling_logps[sl])  # (b, T)
    agg_kw = {"max_completion_length": max_completion_length, "num_items_in_batch": num_items_in_batch,
              "group_size": group_size, "prompt_weights": None if prompt_weights is None else prompt_weights[sl]}
    out = loss_fn(
        logp, old, advantages[sl], mask, variant=v, epsilon=epsilon, epsilon_high=epsilon_high,
        beta=beta, ref_logp=None if ref_logps is None else ref_logps[sl], **agg_kw, **extra,
    )
    if entropy_coef:
        h = token_entropy(logits)  # (b, T), with gradient
        term = aggregate(h, mask, v.aggregation, **agg_kw)
        out.loss = out.loss - entropy_coef * term
        m = mask.to(h.dtype)
        out.extras["entropy"] = float((h.detach() * m).sum() / m.sum().clamp(min=1.0))
        out.extras["entropy_term"] = float(term.detach())
    return out, logp


def micro_batches(n: int, group_size: int, micro_batch_size: int) -> list[slice]:
    """Row slices of whole groups, about ``micro_batch_size`` rows each (at least one group)."""
    step = max(1, micro_batch_size // group_size) * group_size
    return [slice(s, min(n, s + step)) for s in range(0, n, step)]


def correction_settings(cfg: TrainConfig, variant: Variant, sampling_logp: torch.Tensor | None) -> dict | None:
    """What :func:`batch_loss` hands :func:`policy_loss` about the sampler, or ``None``.

    ``sampling_logp`` ``(N, T)``: the sampler's log-probs.  With ``rollout_correction`` /
    ``off_policy_mask_threshold`` set, those settings and ``sampling_logp``; for DPPO with a low-precision sampler
    copy, ``sampling_logp`` alone (DPPO's anchor ``mu``); otherwise nothing (notebook 11).
    """
    if cfg.corrects_rollouts:
        return {"sampling_logp": sampling_logp, "rollout_correction": cfg.rollout_correction,
                "rollout_clip_max": cfg.rollout_clip_max, "rollout_clip_min": cfg.rollout_clip_min,
                "off_policy_mask_threshold": cfg.off_policy_mask_threshold}
    if variant.objective == "dppo" and cfg.sampler_dtype is not None:
        return {"sampling_logp": sampling_logp}  # DPPO's anchor mu: the sampler copy's log-probs
    return None


def autocast(model, precision: str):
    """bf16 autocast on the model's device for ``precision="bf16-mixed"`` and an fp32 model (a caller's fp32 model);
    a no-op context for ``"fp32"`` or a model already in bf16 (the trainer's compute copy,
    :func:`grpo_lessons.training.train_setup.make_compute_model`, and its frozen reference, a copy of it)."""
    param = next(model.parameters())
    on = precision == "bf16-mixed" and param.dtype == torch.float32
    return torch.autocast(device_type=param.device.type, dtype=torch.bfloat16, enabled=on)


def mismatch_stats(sampling_logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    """The sampler/trainer gap of one batch: mean k3 and min/mean/max of the token ratio ``pi_old / mu``.

    ``sampling_logp`` (the sampler's ``log mu``), ``old_logp`` (the trainer's ``log pi_old``), ``mask``: ``(N, T)``.
    With ``r = pi_old / mu`` per token, ``k3 = r - 1 - log r`` >= 0 is an unbiased estimate of KL(mu || pi_old)
    from the sampler's own draws (Schulman's k3; notebook 11).
    """
    keep = mask > 0
    if not bool(keep.any()):
        return {}
    log_r = (old_logp.double() - sampling_logp.double())[keep]  # (n,) log pi_old - log mu over real tokens
    ratio = torch.exp(log_r)  # (n,) pi_old / mu
    k3 = torch.expm1(log_r) - log_r  # (n,) r - 1 - log r, accurate for tiny log r
    return {"mismatch_k3": float(k3.mean()), "mismatch_ratio_min": float(ratio.min()),
            "mismatch_ratio_mean": float(ratio.mean()), "mismatch_ratio_max": float(ratio.max())}


class LossTally:
    """Running sums of one update's diagnostics over its micro-batches and ``mu`` passes.

    Each micro-batch's loss terms count with the weight its loss was scaled by (so they add up to the full batch's);
    ratio and clip fractions with its share of the batch's tokens; :meth:`metrics` divides by ``mu``.
    ``token_modes``: the rollout correction works per token, so its truncated/masked shares are shares of tokens
    (else of sequences, as the off-policy mask's always are).
    """

    KEYS = ("loss", "policy_loss", "kl", "ratio_mean", "clip_low", "clip_high", "grad_norm", "truncated", "masked",
            "opm", "time_forward", "time_backward", "time_optimizer", "entropy_term")

    def __init__(self, mu: int, token_modes: bool) -> None:
        self.mu, self.token_modes = mu, token_modes
        self.acc = {k: 0.0 for k in self.KEYS}
        self.has_clip = self.has_kl = False
        self.seen_diag: set[str] = set()

    def add(self, out: LossOutput, weight: float, tok_share: float, seq_share: float) -> None:
        """Add one micro-batch's :class:`LossOutput` (``weight``: its loss scale; shares: of tokens / sequences)."""
        acc = self.acc
        share = tok_share if self.token_modes else seq_share
        for key, attr, w in (("truncated", "is_truncated_frac", share), ("masked", "is_masked_frac", share),
                             ("opm", "off_policy_masked_frac", seq_share)):
            val = getattr(out, attr, None)
            if val is not None:
                self.seen_diag.add(key)
                acc[key] += float(val) * w
        acc["loss"] += float(out.loss.detach()) * weight
        acc["policy_loss"] += float(out.policy_loss) * weight
        if out.kl is not None:
            self.has_kl = True
            acc["kl"] += float(out.kl) * weight
        acc["ratio_mean"] += out.ratio_mean * tok_share
        acc["entropy_term"] += out.extras.get("entropy_term", 0.0) * weight
        if out.clip_frac_low is not None:
            self.has_clip = True
            acc["clip_low"] += out.clip_frac_low * tok_share
            acc["clip_high"] += out.clip_frac_high * tok_share

    def metrics(self, mismatch: dict, groups_trained: int, entropy_coef: float) -> dict:
        """The loss columns of a ``metrics.csv`` row: means over the ``mu`` passes (times: sums)."""
        acc, mu, seen, has_clip = self.acc, self.mu, self.seen_diag, self.has_clip
        return {
            **mismatch,
            "correction_truncated_frac": acc["truncated"] / mu if "truncated" in seen else None,
            "correction_masked_frac": acc["masked"] / mu if "masked" in seen else None,
            "off_policy_masked_frac": acc["opm"] / mu if "opm" in seen else None,
            "time_forward": acc["time_forward"], "time_backward": acc["time_backward"],
            "time_optimizer": acc["time_optimizer"],
            "loss": acc["loss"] / mu, "policy_loss": acc["policy_loss"] / mu,
            "kl": acc["kl"] / mu if self.has_kl else None,
            "clip_frac": (acc["clip_low"] + acc["clip_high"]) / mu if has_clip else None,
            "clip_frac_low": acc["clip_low"] / mu if has_clip else None,
            "clip_frac_high": acc["clip_high"] / mu if has_clip else None,
            "ratio_mean": acc["ratio_mean"] / mu, "grad_norm": acc["grad_norm"] / mu,
            "groups_trained": groups_trained, "update_skipped": 0,
            **({"entropy_bonus": entropy_coef * acc["entropy_term"] / mu} if entropy_coef else {}),
        }
