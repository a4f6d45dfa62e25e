"""Run every variant of the registry inside TRL's ``GRPOTrainer`` (TRL 1.16).

Introduced in ``notebooks/19_trl_qwen.ipynb``; the variants race in ``notebooks/20_variant_shootout.ipynb``.

Two pieces:

* :func:`grpo_config` — a ``trl.GRPOConfig`` (a :class:`GRPOLessonsConfig`, which also carries the variant's
  name) holding a variant's paper settings (``loss_type``, ``importance_sampling_level``,
  ``epsilon``/``epsilon_high``, ``scale_rewards``, ``beta``, ``mask_truncated_completions``, SAPO
  temperatures, ``num_generations`` for 2-GRPO) and a precision that suits the machine (bf16 on a GPU that
  has it, fp32 on CPU).
* :class:`GRPOLessonsTrainer` — a ``trl.GRPOTrainer`` whose loss is :func:`grpo_lessons.policy_loss`
  for any registry variant, including those TRL lacks (``gspo_token``, ``gopo``, ``rloo``), and which can do
  DAPO's dynamic sampling (drop groups with equal rewards, refill from the dataset).  Where TRL's settings do
  not give a variant's advantages (GOPO's ranks, ScaleRL's centred batch std, RLOO's leave-one-out; GDPO when
  ``multi_objective_aggregation`` is not ``"normalize_then_sum"``) it replaces TRL's advantages by
  :func:`grpo_lessons.variant_advantages` of the scored rewards (unscorable completions get 0, as in TRL).
  It overrides only
  ``_compute_loss`` (the per-token log-probs still come from TRL's own
  ``_get_per_token_logps_and_entropies``) and, for dynamic sampling, wraps
  ``_generate_and_score_completions``.  The test suite checks that for every variant
  TRL has natively, this path and TRL's give the same loss and gradients on the same batch.

:func:`make_trainer` picks TRL's own trainer where TRL has the variant and nothing else is asked
for, and the subclass otherwise.

Nothing here switches on the name of a variant or a piece: every TRL field is read off the registry entries of
the variant's pieces (an advantage scale's ``trl`` fields, a ratio level's ``importance_sampling_level``, an
objective's ``loss_type`` per aggregation and its hyper-parameter fields, a rollout correction's
``vllm_importance_sampling_mode``), so a newly registered piece reaches TRL without an edit here.
"""

from __future__ import annotations

import dataclasses
import difflib
import warnings
from typing import Any

import torch
from trl import GRPOConfig, GRPOTrainer

from grpo_lessons.core.advantages import ADVANTAGE_SCALES
from grpo_lessons.core.correction import CORRECTION_MODES
from grpo_lessons.core.divergence import topk_divergence
from grpo_lessons.core.losses import policy_loss
from grpo_lessons.core.ratios import RATIO_LEVELS
from grpo_lessons.core.shaping import informative_groups
from grpo_lessons.core.variants import VARIANTS, Variant, get_variant, variant_advantages

__all__ = [
    "grpo_config",
    "GRPOLessonsConfig",
    "config_fields",
    "machine_precision",
    "trl_supports",
    "variant_for_config",
    "GRPOLessonsTrainer",
    "make_trainer",
    "select_rows",
    "save_tiny_qwen",
    "QWEN_SHAPES",
    "memory_budget",
]

# Registry train_defaults that map one-to-one onto GRPOConfig fields.
_TRAIN_FIELDS = ("beta", "learning_rate", "mask_truncated_completions")
# TRL loss types that normalise a token mean by the micro-batch's own tokens (not the generation batch's).
_MICRO_BATCH_TOKEN_MEANS = ("bnpo",)


@dataclasses.dataclass
class GRPOLessonsConfig(GRPOConfig):
    """A ``trl.GRPOConfig`` that also names the registry variant it was made for (:func:`grpo_config` returns one).

    :class:`GRPOLessonsTrainer` trains ``variant`` when it is given no ``variant=``, so a config made for a
    variant TRL lacks (``grpo_config("gopo")``) never trains the TRL variant its fields resemble.  TRL's own
    ``GRPOTrainer`` accepts it like any ``GRPOConfig`` and ignores the extra field.
    """

    variant: str | None = dataclasses.field(
        default=None, metadata={"help": "grpo_lessons registry variant these settings were made for"})


def machine_precision() -> dict[str, Any]:
    """Precision fields for this machine: bf16 on a CUDA GPU that supports it, else fp32 (and CPU without a GPU).

    A GPU without bf16 (T4, V100) gets fp32 rather than fp16: GRPO's ratios ``exp(logp - old_logp)``
    are sensitive to fp16 rounding; pass ``fp16=True`` to :func:`grpo_config` to choose it anyway.
    """
    if torch.cuda.is_available():
        return {"bf16": bool(torch.cuda.is_bf16_supported()), "fp16": False}
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return {"bf16": False, "fp16": False}
    return {"bf16": False, "fp16": False, "use_cpu": True}


def config_fields() -> frozenset[str]:
    """The names ``trl.GRPOConfig`` accepts."""
    return frozenset(f.name for f in dataclasses.fields(GRPOConfig) if f.init)


def trl_supports(variant: str | Variant) -> bool:
    """Whether TRL 1.16's own ``GRPOTrainer`` computes ``variant``: every piece's registry entry has a TRL setting
    (:attr:`grpo_lessons.core.variants.Variant.in_trl`)."""
    return get_variant(variant).in_trl


def _derived_fields(v: Variant) -> dict[str, Any]:
    """GRPOConfig fields read off the registry entries of the variant's pieces and its paper defaults (before
    its explicit ``.trl``)."""
    obj, scale = v.objective_piece, v.scale_piece
    fields: dict[str, Any] = {
        # the TRL loss_type computing this objective with this aggregation, else the nearest (our loss computes it)
        "loss_type": (obj.trl or {}).get(v.aggregation, obj.trl_loss_type_fallback),
        # a ratio level TRL lacks (GSPO-token) is computed by our loss, so TRL is told "token"
        "importance_sampling_level": v.ratio_piece.trl or "token",
        # the fields under which TRL's advantages are this scale's, else the nearest (the subclass recomputes)
        **(scale.trl if scale.trl is not None else scale.trl_fallback),
    }
    for param in v.loss_params:
        value = v.loss_defaults.get(param)
        if value is not None and param in obj.trl_fields:  # e.g. DPPO's options have no GRPOConfig field
            fields[obj.trl_fields[param]] = value
    for name in _TRAIN_FIELDS:
        if name in v.train_defaults:
            fields[name] = v.train_defaults[name]
    if v.fixed_group_size is not None:  # 2-GRPO: G = 2 defines the method
        fields["num_generations"] = v.fixed_group_size
    return fields


def grpo_config(variant: str | Variant = "grpo", *, rollout_correction: str | None = None,
                rollout_clip_max: float | None = 3.0, rollout_clip_min: float | None = None, **overrides: Any):
    """A ``trl.GRPOConfig`` reproducing ``variant`` with its paper's loss settings.

    ``rollout_correction`` / ``rollout_clip_max`` / ``rollout_clip_min`` take :func:`grpo_lessons.policy_loss`'s
    names for the sampler correction and become TRL's ``vllm_importance_sampling_correction=True``,
    ``vllm_importance_sampling_mode``, ``vllm_importance_sampling_clip_max/min`` (they act only with
    ``use_vllm=True``: without vLLM TRL has no sampler log-probs).  Left unset, TRL's own default stays
    (with vLLM: on, ``sequence_mask``, clip_max 3).  The off-policy sequence mask is TRL's own field:
    pass ``off_policy_mask_threshold=``.

    Precedence: fields derived from the variant's pieces, then the registry's ``.trl`` entry (the
    TRL fields that reproduce the method), then :func:`machine_precision`, then ``report_to="none"``,
    then ``overrides``.  Group size, batch size and lengths are left to TRL's defaults unless the
    group size defines the method (2-GRPO) — the papers' G = 64 / 16 and 20k-token completions are
    not laptop settings; pass ``num_generations=``, ``max_completion_length=`` to set them.

    Raises ``TypeError`` naming the closest valid fields for an override GRPOConfig does not have.
    """
    v = get_variant(variant)
    valid = config_fields()
    unknown = sorted(set(overrides) - valid)
    if unknown:
        hints = []
        for name in unknown:
            close = difflib.get_close_matches(name, valid, n=3, cutoff=0.6)
            hints.append(f"{name!r}" + (f" (did you mean {', '.join(close)}?)" if close else ""))
        raise TypeError(f"grpo_config({v.name!r}): GRPOConfig has no field " + "; ".join(hints))
    fields = _derived_fields(v)
    fields.update(v.trl)
    fields.update(machine_precision())
    fields["report_to"] = "none"
    if rollout_correction is not None:
        correction = CORRECTION_MODES.lookup(rollout_correction, "rollout_correction")
        if correction.trl is None:
            raise ValueError(f"rollout_correction {rollout_correction!r} has no TRL vllm_importance_sampling_mode")
        obj = v.objective_piece
        if obj.trl is not None and "is_weights" in obj.inputs and correction.sequence:
            tokens = [c.name for c in CORRECTION_MODES.values() if not c.sequence and c.trl is not None]
            raise ValueError(f"TRL's {obj.name} objective folds only token-level weights into its sequence weight: "
                             f"use {' or '.join(tokens)}")
        fields.update(vllm_importance_sampling_correction=True, vllm_importance_sampling_mode=correction.trl,
                      vllm_importance_sampling_clip_max=rollout_clip_max,
                      vllm_importance_sampling_clip_min=rollout_clip_min)
    fields.update(overrides)
    return GRPOLessonsConfig(variant=v.name, **fields)


def _trl_signature(v: Variant) -> dict[str, Any]:
    """The GRPOConfig fields that decide what TRL computes for ``v``: its loss_type, ratio level, the fields of
    its advantage scale, and the group size where that defines the method (2-GRPO)."""
    fields = {**_derived_fields(v), **v.trl}
    keys = ["loss_type", "importance_sampling_level", *(v.scale_piece.trl or {})]
    if v.fixed_group_size is not None:
        keys.append("num_generations")
    return {k: fields[k] for k in keys}


def _matches(args, fields: dict[str, Any]) -> bool:
    return all(getattr(args, k, None) == value for k, value in fields.items())


def _pieces(v: Variant) -> tuple[str, str, str, str]:
    return (v.advantage_scale, v.ratio_level, v.objective, v.aggregation)


def variant_for_config(args) -> str | Variant:
    """The variant ``args`` (a GRPOConfig) trains: the name it carries, or what TRL computes with its fields.

    * A :class:`GRPOLessonsConfig` from :func:`grpo_config` names its variant; that name is returned while the
      fields that decide TRL's computation (loss_type, ratio level, advantage fields, a defining group size)
      are still the variant's — also for variants TRL lacks (``grpo_config("gopo")`` gives ``"gopo"``).
    * Otherwise (a plain ``GRPOConfig``, or one whose deciding fields were overridden) the registered variant TRL
      computes natively with exactly those fields (the most specific: ``loss_type="grpo"`` with
      ``num_generations=2`` is ``"2-grpo"``).  Where no registered variant is that combination
      (``loss_type="dr_grpo"`` with TRL's default ``scale_rewards="group"``), an unregistered :class:`Variant` with
      the loss of the registered variant of that ``loss_type`` and the ratio level and advantage scale TRL's
      fields select, named after both (``"dr_grpo[advantage_scale=group]"``).

    Raises ``ValueError`` where that is ambiguous (several registered combinations fit the fields) or where no
    registered piece fits (an unknown ``loss_type``): pass ``variant=`` then.
    """
    named = getattr(args, "variant", None)
    if named is not None:
        v = get_variant(named)
        if _matches(args, _trl_signature(v)):
            return v.name
    level, loss_type = getattr(args, "importance_sampling_level", "token"), getattr(args, "loss_type", None)
    native = [v for v in VARIANTS.values() if v.in_trl]
    exact = [v for v in native if _matches(args, _trl_signature(v))]
    if exact:
        most = max(len(_trl_signature(v)) for v in exact)
        best = [v for v in exact if len(_trl_signature(v)) == most]
        if len({_pieces(v) for v in best}) > 1:
            raise ValueError(f"ambiguous GRPOConfig: registered variants {[v.name for v in best]} all match "
                             f"loss_type={loss_type!r}, importance_sampling_level={level!r}; pass variant=")
        return best[0].name
    same_loss = [v for v in native if _trl_signature(v)["loss_type"] == loss_type
                 and v.fixed_group_size in (None, getattr(args, "num_generations", None))]
    levels = [r.name for r in RATIO_LEVELS.values() if r.trl == level]
    scales = [s.name for s in ADVANTAGE_SCALES.values() if s.trl is not None and _matches(args, dict(s.trl))]
    if not same_loss or not levels or not scales:
        raise ValueError(
            f"no registry variant matches loss_type={loss_type!r}, importance_sampling_level={level!r}, "
            f"scale_rewards={getattr(args, 'scale_rewards', None)!r}, multi_objective_aggregation="
            f"{getattr(args, 'multi_objective_aggregation', None)!r}; pass variant= explicitly")
    if len({(v.objective, v.aggregation) for v in same_loss}) > 1 or len(levels) > 1 or len(scales) > 1:
        raise ValueError(f"ambiguous GRPOConfig: loss_type={loss_type!r} fits variants {[v.name for v in same_loss]}, "
                         f"ratio levels {levels}, advantage scales {scales}; pass variant=")
    base = same_loss[0]
    changed = {k: new for k, new in (("ratio_level", levels[0]), ("advantage_scale", scales[0]))
               if getattr(base, k) != new}
    label = ", ".join(f"{k}={new}" for k, new in changed.items())
    return dataclasses.replace(base, name=f"{base.name}[{label}]", title=f"{base.title} with {label} (TRL's fields)",
                               trl={"loss_type": loss_type}, **changed)


def _resolve_variant(variant: str | Variant | None, args) -> Variant:
    """The variant a trainer trains: ``variant`` when given (warning if ``args`` names another), else
    :func:`variant_for_config` of ``args``."""
    if variant is None:
        return get_variant(variant_for_config(args))
    v = get_variant(variant)
    named = getattr(args, "variant", None)
    if named is not None and named != v.name:
        warnings.warn(f"args were made by grpo_config({named!r}) but variant={v.name!r}: training {v.name!r}",
                      stacklevel=3)
    return v


# -- dynamic sampling: merging rows of several generation batches ------------------------------------

_LEFT_PADDED = {"prompt_ids", "prompt_mask"}
_PER_TOKEN = {"completion_ids", "completion_mask", "old_per_token_logps", "ref_per_token_logps",
              "sampling_per_token_logps", "tool_mask", "importance_sampling_ratio"}
_PER_ROW = {"advantages", "prompt_weights"}


def _pad_to(t: torch.Tensor, length: int, value: float, left: bool) -> torch.Tensor:
    extra = length - t.shape[1]
    if extra <= 0:
        return t
    pad = torch.full((t.shape[0], extra), value, dtype=t.dtype, device=t.device)
    return torch.cat([pad, t] if left else [t, pad], dim=1)


def select_rows(pieces: list[tuple[dict[str, Any], torch.Tensor]], pad_token_id: int) -> dict[str, Any]:
    """Concatenate chosen rows of several TRL generation batches into one, re-padding to a common width.

    ``pieces``: ``(batch, rows)`` pairs, ``batch`` as returned by ``_generate_and_score_completions``
    and ``rows`` a 1-D index tensor.  Prompts stay left-padded, completions right-padded;
    ``num_items_in_batch`` is recounted from the kept loss mask.  Multimodal batches are refused.
    """
    keys = set(pieces[0][0])
    for batch, _ in pieces:
        if set(batch) != keys:
            raise ValueError(f"generation batches disagree on keys: {sorted(keys ^ set(batch))}")
    unknown = keys - _LEFT_PADDED - _PER_TOKEN - _PER_ROW - {"num_items_in_batch"}
    if unknown:
        raise NotImplementedError(f"dynamic sampling cannot merge batch fields {sorted(unknown)} (multimodal?)")
    out: dict[str, Any] = {}
    for key in keys - {"num_items_in_batch"}:
        parts = [batch[key][rows.to(batch[key].device)] for batch, rows in pieces]
        if key in _PER_ROW or parts[0].dim() == 1:
            out[key] = torch.cat(parts)  # (B,)
            continue
        width = max(p.shape[1] for p in parts)
        if key in _LEFT_PADDED:
            value = pad_token_id if key == "prompt_ids" else 0
        elif key == "completion_ids":
            value = pad_token_id
        elif key in ("tool_mask", "importance_sampling_ratio"):
            value = 1
        else:
            value = 0
        out[key] = torch.cat([_pad_to(p, width, value, left=key in _LEFT_PADDED) for p in parts])  # (B, width)
    mask = out["completion_mask"] if "tool_mask" not in out else out["completion_mask"] * out["tool_mask"]
    out["num_items_in_batch"] = mask.sum()
    return out


def _pad_value(key: str, pad_token_id: int) -> int:
    """The fill of a padded column of a TRL generation batch (as :func:`select_rows` pads)."""
    if key == "prompt_ids" or key == "completion_ids":
        return pad_token_id
    return 1 if key in ("tool_mask", "importance_sampling_ratio") else 0


# -- the trainer --------------------------------------------------------------------------------------


class GRPOLessonsTrainer(GRPOTrainer):
    """``trl.GRPOTrainer`` with the loss of :func:`grpo_lessons.policy_loss` and optional dynamic sampling.

    Extra arguments:

    * ``variant`` — registry name or :class:`~grpo_lessons.core.variants.Variant` (default: the one ``args``
      names when it comes from :func:`grpo_config`, else what TRL computes with ``args``: :func:`variant_for_config`).
    * ``loss_impl`` — ``"grpo_lessons"`` (default) or ``"trl"`` (keep TRL's own loss, e.g. to use
      dynamic sampling with a TRL feature our loss lacks).
    * ``dynamic_sampling`` — DAPO Sec. 3.2: after scoring, drop groups whose rewards are all
      equal and refill the batch with informative groups of freshly drawn prompts, at most
      ``max_sampling_rounds`` extra generation rounds; an unfilled slot keeps an uninformative
      group (zero advantage, no policy gradient).  Works on several processes (DDP, FSDP, ZeRO): the
      keep/drop decision reads the gathered rewards, every process draws the same refill prompts and
      generates its own slice of them, and the merged batch is re-split in TRL's process order.
    * ``loss_options`` — objective options that have no GRPOConfig field (e.g. DPPO's ``delta_low``).
    * ``dppo_top_k`` — K of DPPO's top-K variants (default 20).

    Hyper-parameters come from ``args``: ``epsilon``/``epsilon_high``, ``sapo_temperature_*``,
    ``beta``, ``use_bias_correction_kl``, ``max_completion_length`` (Dr. GRPO's constant).  The loss
    is divided for gradient accumulation exactly as TRL divides each ``loss_type`` (``dapo``-style
    token means by the generation batch's token count, the others by the accumulation steps), and
    TRL's metric names (``entropy``, ``kl``, ``clip_ratio/*``) are logged.

    Off-policy pieces: with vLLM the sampler's log-probs TRL keeps (``inputs["sampling_per_token_logps"]``;
    NaN where vLLM could not score a token, read as "no correction" as TRL does) go to ``policy_loss`` as
    ``sampling_logp``: DPPO's anchor, the off-policy mask's reference (``off_policy_mask_threshold``) and,
    with ``vllm_importance_sampling_correction``, the TIS/MIS weights of every
    ``vllm_importance_sampling_mode`` (recomputed from the same tensors, so equal to TRL's
    ``importance_sampling_ratio``).  Without vLLM the anchor is ``pi_old``.  Advantages: where the variant's
    advantage scale has no TRL setting, or ``args`` holds another one, TRL's advantages are replaced by
    :func:`grpo_lessons.variant_advantages` of the gathered rewards (the whole generation batch, every
    process).  An aggregation normalised over the whole batch (ScaleRL's ``prompt_mean``) gets its per-row
    weights before TRL shuffles the batch.
    What ``policy_loss`` cannot express raises ``NotImplementedError`` at construction
    (``top_entropy_quantile``, ``delta``, the entropy bonus, the MoE aux loss): use ``loss_impl="trl"``
    for those.  DPPO's top-K variants: TRL keeps no sampler top-K, so the trainer keeps ``pi_old``'s top
    ``dppo_top_k`` log-probs per position at generation time (the paper's "recompute" anchor) and, at
    each loss, runs one extra no-grad forward for the current logits to get the divergence
    (:func:`grpo_lessons.core.divergence.topk_divergence`).  Dynamic sampling recomputes
    nothing TRL computed: refill groups keep the advantages of the batch they were scored in (exact
    for ``scale_rewards="group"``/``"none"``; with ``"batch"`` each refill has its own batch std).
    """

    def __init__(self, *args, variant: str | Variant | None = None, loss_impl: str = "grpo_lessons",
                 dynamic_sampling: bool = False, max_sampling_rounds: int = 4,
                 loss_options: dict[str, Any] | None = None, dppo_top_k: int = 20, **kwargs):
        super().__init__(*args, **kwargs)
        if loss_impl not in ("grpo_lessons", "trl"):
            raise ValueError(f"loss_impl must be 'grpo_lessons' or 'trl', got {loss_impl!r}")
        self.variant = _resolve_variant(variant, self.args)
        self.loss_impl = loss_impl
        self.dynamic_sampling = bool(dynamic_sampling)
        if max_sampling_rounds < 0:
            raise ValueError(f"max_sampling_rounds must be >= 0, got {max_sampling_rounds}")
        self.max_sampling_rounds = int(max_sampling_rounds)
        self.loss_options = dict(loss_options or {})
        if not isinstance(dppo_top_k, int) or dppo_top_k < 1:
            raise ValueError(f"dppo_top_k must be a positive integer, got {dppo_top_k!r}")
        self.dppo_top_k = dppo_top_k
        self._last_rewards_per_func: torch.Tensor | None = None
        self._draw_count = 0
        self._check_supported()

    # ---- checks --------------------------------------------------------------------------------

    def _check_supported(self) -> None:
        a, v = self.args, self.variant
        scale = v.scale_piece
        if scale.trl is not None and not _matches(a, dict(scale.trl)):
            asked = {k: getattr(a, k, None) for k in scale.trl}
            warnings.warn(
                f"variant {v.name!r} uses advantage scale {v.advantage_scale!r} (TRL: {dict(scale.trl)}) but args "
                f"hold {asked}; the trainer computes the variant's advantages itself instead of TRL's",
                stacklevel=3,
            )
        if self.dynamic_sampling:
            if not hasattr(self.train_dataset, "__getitem__") or not hasattr(self.train_dataset, "__len__"):
                raise NotImplementedError("dynamic_sampling draws refill prompts by index: use a map-style Dataset")
        if self.loss_impl == "trl":
            return
        unsupported = []
        if a.top_entropy_quantile < 1.0:
            unsupported.append("top_entropy_quantile < 1")
        if a.delta is not None:
            unsupported.append("delta (two-sided clip)")
        if a.entropy_coef != 0.0 or a.use_adaptive_entropy:
            unsupported.append("entropy_coef / use_adaptive_entropy")
        if self.aux_loss_enabled:
            unsupported.append("MoE router aux loss")
        if unsupported:
            raise NotImplementedError(
                f"GRPOLessonsTrainer(loss_impl='grpo_lessons') does not implement: {', '.join(unsupported)}. "
                "Turn them off, or pass loss_impl='trl' to keep TRL's loss."
            )

    # ---- the loss ------------------------------------------------------------------------------

    def _loss_params(self) -> dict[str, Any]:
        params = {}
        fields = self.variant.objective_piece.trl_fields
        for name in self.variant.loss_params:
            field = fields.get(name)
            if field is not None and getattr(self.args, field, None) is not None:
                params[name] = getattr(self.args, field)
        params.update(self.loss_options)
        return params

    def _global_token_norm(self) -> bool:
        """DAPO-style token mean over the whole generation batch (TRL ``dapo``), not per micro-batch (``bnpo``)."""
        v = self.variant
        return v.aggregation_piece.token_count and v.trl.get("loss_type") not in _MICRO_BATCH_TOKEN_MEANS

    def _compute_loss(self, model, inputs):
        if self.loss_impl == "trl":
            return super()._compute_loss(model, inputs)
        prompt_ids, prompt_mask = inputs["prompt_ids"], inputs["prompt_mask"]
        completion_ids, completion_mask = inputs["completion_ids"], inputs["completion_mask"]
        input_ids = torch.cat([prompt_ids, completion_ids], dim=1)  # (B, P + T)
        attention_mask = torch.cat([prompt_mask, completion_mask], dim=1)  # (B, P + T)
        logits_to_keep = completion_ids.size(1)  # T
        mask = completion_mask if "tool_mask" not in inputs else completion_mask * inputs["tool_mask"]  # (B, T)

        logps, entropies, _ = self._get_per_token_logps_and_entropies(
            model, input_ids, attention_mask, logits_to_keep, compute_entropy=True
        )  # (B, T), (B, T)
        old = inputs.get("old_per_token_logps")
        old = logps.detach() if old is None else old  # on-policy: ratio exactly 1
        adv = inputs["advantages"]
        if adv.dim() != 1:
            raise NotImplementedError("policy_loss takes one advantage per completion, (B,)")
        off_policy = self._off_policy_kwargs(inputs, old)

        training = self.model.training
        accum = self.current_gradient_accumulation_steps if training else 1
        num_items = None
        divide_by = accum
        if self._global_token_norm():
            # num_items_in_batch counts the whole generation batch: rescale to one accumulation window
            num_items = inputs["num_items_in_batch"].clamp(min=1.0) / self.accelerator.num_processes
            if training:
                num_items = num_items * accum / self.args.steps_per_generation
            divide_by = 1
        if self.variant.aggregation_piece.batch_weights is not None:
            # prompt_weights sum the whole generation batch (all processes) to one prompt mean: undo DDP's
            # average over processes and spread the batch over its accumulation window, as TRL does for dapo
            divide_by = accum / self.args.steps_per_generation if training else 1
            divide_by = divide_by / self.accelerator.num_processes
        out = policy_loss(
            logps, old, adv, mask, variant=self.variant,
            beta=self.beta, ref_logp=inputs.get("ref_per_token_logps") if self.beta != 0.0 else None,
            max_completion_length=self.max_completion_length,
            kl_importance_weighted=self.args.use_bias_correction_kl,
            num_items_in_batch=num_items, **off_policy, **self._loss_params(),
        )
        self._log_loss_metrics(out, entropies, mask)
        return out.loss / divide_by

    def _off_policy_kwargs(self, inputs, old: torch.Tensor) -> dict[str, Any]:
        """policy_loss's off-policy arguments from TRL's batch: sampler log-probs, correction, masks, weights."""
        kw: dict[str, Any] = {}
        sampling = inputs.get("sampling_per_token_logps")
        if sampling is not None:
            # vLLM could not score some tokens (NaN): TRL reads them as "no correction" (rho = 1, no KL evidence)
            kw["sampling_logp"] = torch.where(torch.isnan(sampling), old.to(sampling.dtype), sampling)
            if self.use_vllm and self.vllm_importance_sampling_correction:
                kw["rollout_correction"] = self.vllm_importance_sampling_mode
                kw["rollout_clip_max"] = self.vllm_importance_sampling_clip_max
                kw["rollout_clip_min"] = self.vllm_importance_sampling_clip_min
        if self.args.off_policy_mask_threshold is not None:
            kw["off_policy_mask_threshold"] = self.args.off_policy_mask_threshold
        if self.variant.aggregation_piece.batch_weights is not None:
            kw["prompt_weights"] = inputs["prompt_weights"]
        if self._topk_kind() is not None:
            parts = []
            for rows in self._row_chunks(inputs):  # one row's (T, V) logits at a time: V may be 150k
                logits = self._completion_logits(self.model, inputs, rows)  # (b, T, V), no grad, tempered
                parts.append(topk_divergence(inputs["old_topk_ids"][rows], inputs["old_topk_logps"][rows], logits,
                                             inputs["completion_ids"][rows], kind=self._topk_kind(),
                                             sampled_logp=old[rows].detach()))
            kw["divergence"] = torch.cat(parts)  # (B, T)
        return kw

    @staticmethod
    def _row_chunks(batch, size: int = 1) -> list[slice]:
        n = batch["completion_ids"].shape[0]
        return [slice(i, min(i + size, n)) for i in range(0, n, size)]

    def _topk_kind(self) -> str | None:
        """``"tv"`` / ``"kl"`` when the objective needs a top-K divergence with these options (DPPO's top-K
        variants), else None."""
        v = self.variant
        return v.objective_piece.divergence_kind({**v.loss_defaults, **self.loss_options})

    @torch.no_grad()
    def _completion_logits(self, model, batch, rows: slice = slice(None)) -> torch.Tensor:
        """The model's logits at the completion positions divided by the sampling temperature, ``(b, T, V)`` fp32."""
        ids = torch.cat([batch["prompt_ids"][rows], batch["completion_ids"][rows]], dim=1)  # (b, P + T)
        att = torch.cat([batch["prompt_mask"][rows], batch["completion_mask"][rows]], dim=1)  # (b, P + T)
        T = batch["completion_ids"].size(1)
        with self.accelerator.autocast():
            logits = model(input_ids=ids, attention_mask=att).logits[:, -T - 1:-1, :]  # (B, T, V)
        return logits.float() / self.temperature

    def _log_mean(self, name: str, value: float | None) -> None:
        if value is None:
            return
        mode = "train" if self.model.training else "eval"
        t = torch.tensor(float(value), device=self.accelerator.device)
        self._metrics[mode][name].append(self.accelerator.gather(t).nanmean().item())

    def _log_loss_metrics(self, out, entropies, mask) -> None:
        m = mask.to(entropies.dtype)
        self._log_mean("entropy", float((entropies.detach() * m).sum() / m.sum().clamp(min=1.0)))
        if out.kl_token_mean is not None:  # TRL's "kl": token mean of k3 (x the ratio under use_bias_correction_kl)
            self._log_mean("kl", out.kl_token_mean)
        if out.clip_frac_low is not None:  # same names as TRL's, so its logs and plots carry over
            self._log_mean("clip_ratio/low_mean", out.clip_frac_low)
            self._log_mean("clip_ratio/high_mean", out.clip_frac_high)
            self._log_mean("clip_ratio/region_mean", out.clip_frac)
        self._log_mean("policy_loss", float(out.policy_loss))
        for name in ("is_weight_mean", "is_masked_frac", "is_truncated_frac", "off_policy_masked_frac"):
            self._log_mean(f"off_policy/{name}", getattr(out, name, None))
        for name, value in out.extras.items():
            self._log_mean(name, value)

    # ---- advantages TRL does not compute (GOPO's ranks, ScaleRL, RLOO; GDPO when TRL sums first) -----

    def _own_advantages(self) -> bool:
        """Whether TRL's advantages are not the variant's: its scale has no TRL setting, or ``args`` hold another."""
        trl = self.variant.scale_piece.trl
        return trl is None or not _matches(self.args, dict(trl))

    def _score(self, inputs):
        """TRL's generation and scoring, with the advantages replaced where the variant's piece is not TRL's."""
        batch = super()._generate_and_score_completions(inputs)
        if not self._own_advantages():
            return batch
        G = self.num_generations if self.model.training else self.num_generations_eval
        R = self._last_rewards_per_func.detach().float().cpu()  # (N_all, K) gathered over processes
        adv = variant_advantages(R, G, self.variant, weights=self.reward_weights.detach().float().cpu(),
                                 allow_unscored=True)  # (N_all,) unscorable rows: 0, as TRL
        local = batch["advantages"].shape[0]
        start = self.accelerator.process_index * local  # TRL's process slice
        batch["advantages"] = adv[start:start + local].to(batch["advantages"].device, batch["advantages"].dtype)
        return batch

    # ---- dynamic sampling ------------------------------------------------------------------------

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._last_rewards_per_func = rewards  # (N, n_funcs), kept for the group filter
        return rewards

    def _informative(self, num_generations: int) -> torch.Tensor:
        """``(N // G,)`` bool: groups of the last scored batch whose reward is not constant."""
        r = self._last_rewards_per_func
        if self.variant.scale_piece.per_reward or self.multi_objective_aggregation == "normalize_then_sum":
            cols = [informative_groups(torch.nan_to_num(r[:, k]).cpu(), num_generations) for k in range(r.shape[1])]
            return torch.stack(cols).any(dim=0)
        total = (r * self.reward_weights.to(r.device).unsqueeze(0)).nansum(dim=1)
        return informative_groups(total.cpu(), num_generations)

    def _draw_prompts(self, n: int) -> list[dict]:
        g = torch.Generator().manual_seed(int(self.args.seed) * 100_003 + self._draw_count)
        self._draw_count += 1
        idx = torch.randint(len(self.train_dataset), (n,), generator=g).tolist()
        return [self.train_dataset[i] for i in idx]

    def _generate_and_score_completions(self, inputs):
        return self._batch_fields(self._dynamic_sampling_batch(inputs))

    def _batch_fields(self, batch: dict[str, Any]) -> dict[str, Any]:
        """Batch-level pieces, computed before TRL shuffles and splits the generation batch: the per-row weights
        of an aggregation normalised over the whole batch (ScaleRL's prompt weights) and the ``pi_old`` top-K
        log-probs of an objective that needs a top-K divergence (DPPO's top-K variants)."""
        v = self.variant
        if self.loss_impl == "trl":
            return batch
        if self._topk_kind() is not None:
            ids, lps = [], []
            for rows in self._row_chunks(batch):
                logp_old = torch.log_softmax(self._completion_logits(self.model, batch, rows), dim=-1)  # (b, T, V)
                top = logp_old.topk(min(self.dppo_top_k, logp_old.shape[-1]), dim=-1)  # most likely first
                ids.append(top.indices)
                lps.append(top.values)
            batch["old_topk_ids"], batch["old_topk_logps"] = torch.cat(ids), torch.cat(lps)  # (B, T, K)
        batch_weights = v.aggregation_piece.batch_weights
        if batch_weights is not None:
            mask = batch["completion_mask"] if "tool_mask" not in batch else batch["completion_mask"] * batch["tool_mask"]
            lengths = self.accelerator.gather(mask.sum(-1).float())  # (N_total,) TRL keeps groups contiguous
            w = batch_weights(lengths.unsqueeze(-1), self.num_generations)  # (N_total,)
            n = mask.shape[0]
            start = self.accelerator.process_index * n
            batch["prompt_weights"] = w[start:start + n]  # (B,) this process's rows
        return batch

    _scalerl_fields = _batch_fields  # the older name

    def _dynamic_sampling_batch(self, inputs):
        batch = self._score(inputs)
        if not self.dynamic_sampling or not self.model.training:
            return batch
        G = self.num_generations
        world, rank, n_local = self.accelerator.num_processes, self.accelerator.process_index, len(inputs)
        # A group's G rows may sit on two processes (TRL splits the generation batch in process order), so
        # decide, draw and merge on the whole batch: the rewards are gathered, every process draws the same
        # refill prompts (seeded by args.seed and the draw count) and generates only its slice of them.
        n_groups = n_local * world // G
        keep = self._informative(G)  # (n_groups,), the same on every process
        kept = keep.nonzero().flatten().tolist()
        spare = (~keep).nonzero().flatten().tolist()  # used only if refilling falls short
        pieces: list[tuple[dict[str, Any], list[int]]] = [(batch, kept)]
        missing = n_groups - len(kept)
        rounds = 0
        while missing > 0 and rounds < self.max_sampling_rounds:
            rows = [row for row in self._draw_prompts(n_groups) for _ in range(G)]  # G copies, contiguous
            extra = self._score(rows[rank * n_local:(rank + 1) * n_local])
            good = self._informative(G).nonzero().flatten().tolist()[:missing]
            pieces.append((extra, good))
            missing -= len(good)
            rounds += 1
        if missing > 0:
            pieces[0] = (batch, kept + spare[:missing])
        sel = [(self._gather_batch(b), torch.tensor([g * G + j for g in groups for j in range(G)], dtype=torch.long))
               for b, groups in pieces if groups]
        log = self._metrics["train"]
        log["dynamic_sampling/dropped_groups"].append(float(n_groups - len(kept)))
        log["dynamic_sampling/extra_rounds"].append(float(rounds))
        log["dynamic_sampling/unfilled_groups"].append(float(max(missing, 0)))
        merged = select_rows(sel, self._tokenizer.pad_token_id)  # the whole batch; num_items_in_batch is global
        if world == 1:
            return merged
        mine = slice(rank * n_local, (rank + 1) * n_local)
        return {k: (v if k == "num_items_in_batch" else v[mine]) for k, v in merged.items()}

    def _gather_batch(self, batch: dict[str, Any]) -> dict[str, Any]:
        """All processes' rows of a generation batch, in process order (TRL's global row order).

        ``(B_local, T_p)`` tensors are padded to the widest process (prompts on the left, completions on the
        right) and gathered to ``(B_local * world, T)``; ``num_items_in_batch`` is already global.
        """
        if self.accelerator.num_processes == 1:
            return batch
        out: dict[str, Any] = {}
        for key in sorted(batch):
            t = batch[key]
            if key != "num_items_in_batch" and isinstance(t, torch.Tensor):
                if t.dim() > 1:
                    fill = _pad_value(key, self._tokenizer.pad_token_id)
                    t = self.accelerator.pad_across_processes(t, dim=1, pad_index=fill, pad_first=key in _LEFT_PADDED)
                t = self.accelerator.gather(t.contiguous())
            out[key] = t
        return out


def make_trainer(variant: str | Variant, *, model, reward_funcs, train_dataset, args=None,
                 dynamic_sampling: bool | None = None, force_subclass: bool = False, **kwargs):
    """A trainer for ``variant``: TRL's own ``GRPOTrainer`` where TRL implements it and nothing extra is
    asked, else :class:`GRPOLessonsTrainer`.  ``args`` defaults to :func:`grpo_config` ``(variant)``;
    ``dynamic_sampling`` defaults to ``False`` (DAPO's paper uses it: pass ``True``).
    """
    v = get_variant(variant)
    args = grpo_config(v) if args is None else args
    if trl_supports(v) and not dynamic_sampling and not force_subclass:
        return GRPOTrainer(model=model, reward_funcs=reward_funcs, args=args, train_dataset=train_dataset, **kwargs)
    return GRPOLessonsTrainer(model=model, reward_funcs=reward_funcs, args=args, train_dataset=train_dataset,
                              variant=v, dynamic_sampling=bool(dynamic_sampling), **kwargs)



# -- helpers for the GPU notebooks and the benchmark ------------------------------------------------------


def save_tiny_qwen(path: str | None = None, **kwargs) -> str:
    """Save :func:`grpo_lessons.training.models.tiny_qwen` and its tokenizer to ``path`` (a new temp dir by default).

    TRL wants a path when ``beta != 0`` (it loads the reference model from it) and vLLM always does.
    """
    import tempfile

    from grpo_lessons.training.models import tiny_qwen, tiny_tokenizer

    path = path or tempfile.mkdtemp(prefix="tiny-qwen-")
    tok = tiny_tokenizer()
    tiny_qwen(tok, **kwargs).save_pretrained(path)
    tok.save_pretrained(path)
    return path


# Published configs (config.json of each hub repo): parameters, layers, hidden size, KV heads, head dim.
QWEN_SHAPES: dict[str, dict[str, float]] = {
    "Qwen2.5-0.5B": {"params": 0.494e9, "layers": 24, "hidden": 896, "kv_heads": 2, "head_dim": 64},
    "Qwen3-0.6B": {"params": 0.596e9, "layers": 28, "hidden": 1024, "kv_heads": 8, "head_dim": 128},
    "Qwen2.5-1.5B": {"params": 1.54e9, "layers": 28, "hidden": 1536, "kv_heads": 2, "head_dim": 128},
    "Qwen2.5-3B": {"params": 3.09e9, "layers": 36, "hidden": 2048, "kv_heads": 2, "head_dim": 128},
    "Qwen2.5-7B": {"params": 7.62e9, "layers": 28, "hidden": 3584, "kv_heads": 4, "head_dim": 128},
}
_GIB = 2**30


def memory_budget(model: str | dict, gpu_gib: float, *, master_dtype: str = "fp32", micro_batch: int = 8,
                  seq_len: int = 1280, num_sequences: int = 64, gradient_checkpointing: bool = True,
                  vllm_gpu_memory_utilization: float | None = 0.3, overhead_gib: float = 1.5) -> dict[str, float]:
    """A back-of-the-envelope GiB budget of GRPO full fine-tuning with vLLM colocated on one GPU.

    Trainer: weights + gradients + AdamW's two moments, in ``master_dtype`` (TRL loads a model given
    by name in fp32 unless ``model_init_kwargs={"dtype": "bfloat16"}``): 16 bytes/param in fp32,
    8 in bf16.  Activations of one micro-batch of ``micro_batch`` sequences of ``seq_len`` tokens, bf16:
    ``34 * s * b * h`` bytes per layer (Korthikanti et al. 2022, with flash/SDPA attention), all layers
    without checkpointing, or ``2 * s * b * h`` per layer kept plus one layer recomputed with it.
    TRL 1.16 scores log-probs with a fused, tiled LM head, so the ``(b, s, vocab)`` logits are never
    materialised (add them yourself, ``4 * b * s * V`` bytes, for a trainer without that).
    vLLM: a bf16 copy of the weights (2 bytes/param) plus the KV cache of ``num_sequences`` sequences of
    ``seq_len`` tokens, ``2 * layers * kv_heads * head_dim * 2`` bytes per token.  vLLM reserves
    ``vllm_gpu_memory_utilization * gpu`` up front, whatever it needs; the trainer gets the rest.
    ``overhead_gib`` stands for the CUDA context, allocator fragmentation and vLLM's CUDA graphs.
    """
    shape = QWEN_SHAPES[model] if isinstance(model, str) else dict(model)
    n, L, h = shape["params"], shape["layers"], shape["hidden"]
    per_param = {"fp32": 4, "bf16": 2}[master_dtype]
    weights = n * per_param
    grads = n * per_param
    adam = 2 * n * per_param
    act_layer = 34 * seq_len * micro_batch * h  # bytes, one layer, bf16
    activations = (L * 2 * seq_len * micro_batch * h + act_layer) if gradient_checkpointing else L * act_layer
    kv_per_token = 2 * L * shape["kv_heads"] * shape["head_dim"] * 2
    kv = kv_per_token * seq_len * num_sequences
    vllm_weights = 2 * n
    trainer = (weights + grads + adam + activations) / _GIB + overhead_gib / 2
    vllm_needed = (vllm_weights + kv) / _GIB + overhead_gib / 2
    out = {
        "weights": weights / _GIB, "grads": grads / _GIB, "adam": adam / _GIB, "activations": activations / _GIB,
        "trainer": trainer, "vllm_weights": vllm_weights / _GIB, "kv_cache": kv / _GIB, "vllm_needed": vllm_needed,
        "kv_per_token_kib": kv_per_token / 1024, "gpu": gpu_gib,
        # the window of vllm_gpu_memory_utilization that works: vLLM gets enough, the trainer too
        "u_min": vllm_needed / gpu_gib, "u_max": 1.0 - trainer / gpu_gib,
    }
    out["fits_somewhere"] = out["u_min"] <= out["u_max"]
    if vllm_gpu_memory_utilization is not None:
        u = vllm_gpu_memory_utilization
        out["u"] = u
        out["fits"] = vllm_needed <= u * gpu_gib and trainer <= (1.0 - u) * gpu_gib
    return out
