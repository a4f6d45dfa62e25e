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
for, and the subclass otherwise.  :func:`resolve_variant` is the one place that decides what trains from a variant,
a config and its overridden fields; the trainers, :func:`make_trainer` and :func:`variant_for_config` all ask it.

The subclass is a drop-in for ``GRPOTrainer``: every ``GRPOConfig`` TRL accepts builds and trains, with
:func:`grpo_lessons.policy_loss` where the registry has the exact computation (every ``loss_type`` at either
``importance_sampling_level``, LUSPO, ``delta``, ``top_entropy_quantile``, the entropy bonus with its adaptive
coefficient, the MoE router aux loss, image inputs) and TRL's own loss, with a one-line warning saying why,
where it has not (:func:`variant_for_config` returns ``None``).

Nothing here switches on the name of a variant or a piece: every TRL field is read off the registry entries of
the variant's pieces (an advantage scale's ``trl`` fields, a ratio level's ``importance_sampling_level``, an
objective's ``loss_type`` per aggregation and its hyper-parameter fields, a rollout correction's
``vllm_importance_sampling_mode``), so a newly registered piece reaches TRL without an edit here.
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import warnings
from typing import Any

import torch
from trl import GRPOConfig, GRPOTrainer

from grpo_lessons.core.advantages import ADVANTAGE_SCALES, AdvantageScale
from grpo_lessons.core.correction import CORRECTION_MODES
from grpo_lessons.core.divergence import topk_divergence
from grpo_lessons.core.entropy import adaptive_entropy_coef, entropy_pool, gated_entropy_coef, high_entropy_mask
from grpo_lessons.core.losses import policy_loss
from grpo_lessons.core.objectives import OBJECTIVES, Objective
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
    "resolve_variant",
    "GRPOLessonsTrainer",
    "make_trainer",
    "select_rows",
    "save_tiny_qwen",
    "QWEN_SHAPES",
    "memory_budget",
]

# Registry train_defaults that map one-to-one onto GRPOConfig fields.
_TRAIN_FIELDS = ("beta", "learning_rate", "mask_truncated_completions")
# The GRPOConfig fields that decide what TRL computes (beside num_generations where G defines a method): the
# objective with its aggregation, the importance ratio, and the advantages.
_LOSS_TYPE, _RATIO_FIELD = "loss_type", "importance_sampling_level"
_SCALE_FIELDS = ("multi_objective_aggregation", "scale_rewards")
# GRPOConfig's own defaults: what TRL's scoring runs with when a config names advantages TRL lacks.
_TRL_DEFAULTS = {f.name: f.default for f in dataclasses.fields(GRPOConfig) if f.default is not dataclasses.MISSING}


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


def _unknown_names(names, valid) -> str | None:
    """``"'x' (did you mean y?)"`` for each of ``names`` not in ``valid``; None when all are valid."""
    hints = []
    for name in names:
        if name not in valid:
            close = difflib.get_close_matches(str(name), sorted(valid), n=3, cutoff=0.6)
            hints.append(f"{name!r}" + (f" (did you mean {', '.join(close)}?)" if close else ""))
    return "; ".join(hints) or None


def _check_variant_fields(v: Variant) -> None:
    """A variant's ``trl`` names GRPOConfig fields only (run on every registered variant: a misspelt field would
    otherwise be passed to GRPOConfig or, worse, never read)."""
    bad = _unknown_names(v.trl, config_fields())
    if bad:
        raise ValueError(f"variant {v.name!r}: trl has no GRPOConfig field {bad}")


def _check_objective_fields(obj: Objective) -> None:
    """An objective's ``trl_fields`` map its parameters to GRPOConfig fields that exist (or None)."""
    bad = _unknown_names([f for f in obj.trl_fields.values() if f is not None], config_fields())
    if bad:
        raise ValueError(f"objective {obj.name!r}: trl_fields names no GRPOConfig field {bad}")


# Loading the bridge checks every registered variant and objective, and every one registered later.
VARIANTS.add_check(_check_variant_fields)
OBJECTIVES.add_check(_check_objective_fields)


# -- what TRL's fields select, read off the registries ------------------------------------------------------

def _trl_loss_types() -> dict[str, list[tuple[str, str, bool]]]:
    """``{TRL loss_type: [(objective, aggregation, tokens counted per micro-batch), ...]}`` from the objectives."""
    table: dict[str, list[tuple[str, str, bool]]] = {}
    for obj in OBJECTIVES.values():
        for loss_type, (agg, micro) in obj.trl_loss_types.items():
            table.setdefault(loss_type, []).append((obj.name, agg, micro))
    return table


def _trl_levels() -> dict[str, str]:
    """``{TRL importance_sampling_level: ratio level}``."""
    return {r.trl: r.name for r in RATIO_LEVELS.values() if r.trl is not None}


def _sum_first() -> dict[str, Any]:
    """The multi_objective_aggregation under which TRL reads ``scale_rewards`` (its sum-first setting)."""
    found = {s.trl["multi_objective_aggregation"] for s in ADVANTAGE_SCALES.values()
             if s.trl is not None and "scale_rewards" in s.trl and "multi_objective_aggregation" in s.trl}
    return {"multi_objective_aggregation": found.pop() if len(found) == 1 else _TRL_DEFAULTS["multi_objective_aggregation"]}


def _scale_fields(scale: AdvantageScale) -> dict[str, Any]:
    """The advantage fields ``grpo_config`` writes for ``scale``: its TRL setting, or, for a scale TRL lacks, its own
    name as ``scale_rewards`` (which TRL's ``GRPOTrainer`` refuses, so it cannot train other advantages)."""
    if scale.trl is not None:
        return dict(scale.trl)
    return {**_sum_first(), "scale_rewards": scale.name}


def _loss_type_field(v: Variant) -> str:
    """The ``loss_type`` of ``v``'s objective with its aggregation: TRL's where TRL has it, else a name TRL refuses
    (the objective's, or ``objective+aggregation`` where TRL has the objective with other aggregations)."""
    obj = v.objective_piece
    trl_name = (obj.trl or {}).get(v.aggregation)
    if trl_name is not None:
        return trl_name
    own = obj.name if obj.trl is None else f"{obj.name}+{v.aggregation}"
    return own if own not in _trl_loss_types() else f"{obj.name}+{v.aggregation}"


def _ratio_field(v: Variant) -> str:
    """``importance_sampling_level``: TRL's for the ratio level, else the level's own name (TRL refuses it)."""
    return v.ratio_piece.trl if v.ratio_piece.trl is not None else v.ratio_level


def _scale_of(args) -> str | None:
    """The registered advantage scale ``args``' advantage fields select (TRL's setting or a scale's own name)."""
    for scale in ADVANTAGE_SCALES.values():
        if _matches(args, _scale_fields(scale)):
            return scale.name
    return None


def trl_supports(variant: str | Variant) -> bool:
    """Whether TRL 1.16's own ``GRPOTrainer`` computes ``variant``: every piece's registry entry has a TRL setting
    (:attr:`grpo_lessons.core.variants.Variant.in_trl`)."""
    return get_variant(variant).in_trl


def _derived_fields(v: Variant) -> dict[str, Any]:
    """GRPOConfig fields read off the registry entries of the variant's pieces and its paper defaults (before
    its explicit ``.trl``)."""
    obj = v.objective_piece
    fields: dict[str, Any] = {
        # a piece TRL lacks is written under its own name, which TRL's GRPOTrainer refuses (GRPOLessonsTrainer
        # reads it): a config for GSPO-token, DPPO or GOPO cannot make TRL train another method
        _LOSS_TYPE: _loss_type_field(v),
        _RATIO_FIELD: _ratio_field(v),
        **_scale_fields(v.scale_piece),
    }
    for param in v.loss_params:
        value = v.loss_defaults.get(param)
        if value is not None and obj.trl_fields.get(param) is not None:  # DPPO's options have no GRPOConfig field
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

    An override of a field that decides what trains (``loss_type``, ``importance_sampling_level``,
    ``scale_rewards``, ``multi_objective_aggregation``) changes that piece of the variant, and the config still names
    the variant: ``grpo_config("gopo", loss_type="bnpo")`` trains GOPO's rank advantages with bnpo's token mean
    (:func:`variant_for_config` names the result ``gopo[loss_type=bnpo]``).  Where the pieces do not compose (a
    ``loss_type`` of another objective, whose hyper-parameters would not carry over; a group size that defines the
    method; a value no registry knows) it raises ``ValueError`` naming the variant and the field.  A piece TRL's
    own ``GRPOTrainer`` lacks is written under its own name (``grpo_config("gopo").scale_rewards == "rank"``,
    ``grpo_config("dppo_binary_tv").loss_type == "dppo"``), which TRL's trainer refuses: only
    :class:`GRPOLessonsTrainer` trains such a config.

    Raises ``TypeError`` naming the closest valid fields for an override GRPOConfig does not have.
    """
    v = get_variant(variant)
    unknown = _unknown_names(sorted(overrides), config_fields())
    if unknown:
        raise TypeError(f"grpo_config({v.name!r}): GRPOConfig has no field {unknown}")
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
    cfg = GRPOLessonsConfig(variant=v.name, **fields)
    _compose(v, cfg)  # an override that does not compose with the variant is refused here, naming both
    return cfg


def _trl_signature(v: Variant) -> dict[str, Any]:
    """The GRPOConfig fields that decide what TRL computes for ``v``: its loss_type, ratio level, the fields of
    its advantage scale, and the group size where that defines the method (2-GRPO)."""
    fields = {**_derived_fields(v), **v.trl}
    keys = [_LOSS_TYPE, _RATIO_FIELD, *_scale_fields(v.scale_piece)]
    if v.fixed_group_size is not None:
        keys.append("num_generations")
    return {k: fields[k] for k in keys}


def _matches(args, fields: dict[str, Any]) -> bool:
    return all(getattr(args, k, None) == value for k, value in fields.items())


def _pieces(v: Variant) -> tuple[str, str, str, str]:
    return (v.advantage_scale, v.ratio_level, v.objective, v.aggregation)


def _compose(v: Variant, args) -> Variant:
    """``v`` as ``args`` (a config made for it) train it: ``v`` itself while the deciding fields are the ones
    :func:`grpo_config` writes for it; else ``v`` with the pieces the changed fields select, an unregistered
    :class:`Variant` named after both (``"gopo[loss_type=bnpo]"``); ``ValueError`` naming both where they do not
    compose."""
    sig = _trl_signature(v)
    changed = {k: getattr(args, k, None) for k in sig if getattr(args, k, None) != sig[k]}
    if not changed:
        return v
    where = f"grpo_config({v.name!r}) with " + ", ".join(f"{k}={val!r}" for k, val in changed.items())
    if "num_generations" in changed:
        same = [u.name for u in VARIANTS.values() if _pieces(u) == _pieces(v) and u.fixed_group_size is None]
        raise ValueError(f"{where}: {v.name!r} is defined by num_generations={sig['num_generations']} ({v.title})"
                         + (f"; for another group size use grpo_config({same[0]!r})" if same else ""))
    pieces: dict[str, str] = {}
    if _LOSS_TYPE in changed:
        loss_type = changed[_LOSS_TYPE]
        found = _trl_loss_types().get(loss_type)
        if not found:
            raise ValueError(f"{where}: loss_type={loss_type!r} is neither a loss type TRL computes "
                             f"({', '.join(sorted(_trl_loss_types()))}) nor {v.name!r}'s own ({sig[_LOSS_TYPE]!r})")
        mine = [agg for obj, agg, _ in found if obj == v.objective]
        if not mine:
            theirs = sorted({obj for obj, _, _ in found})
            use = [u.name for u in VARIANTS.values() if u.in_trl and _trl_signature(u)[_LOSS_TYPE] == loss_type]
            raise ValueError(
                f"{where}: loss_type={loss_type!r} selects TRL's {' / '.join(theirs)} objective, and {v.name!r} is "
                f"built on the {v.objective!r} objective, whose hyper-parameters do not carry over"
                + (f"; use grpo_config({use[0]!r}) for that loss" if use else "")
                + ", or register a variant with the pieces you want")
        pieces["aggregation"] = mine[0]
    if _RATIO_FIELD in changed:
        level = changed[_RATIO_FIELD]
        name = _trl_levels().get(level, level if level in RATIO_LEVELS else None)
        if name is None:
            raise ValueError(f"{where}: importance_sampling_level={level!r} is neither TRL's "
                             f"({', '.join(sorted(_trl_levels()))}) nor a registered ratio level")
        pieces["ratio_level"] = name
    if any(k in changed for k in _SCALE_FIELDS):
        scale = _scale_of(args)
        if scale is None:
            held = {k: getattr(args, k, None) for k in _SCALE_FIELDS}
            raise ValueError(f"{where}: {held} select no registered advantage scale")
        pieces["advantage_scale"] = scale
    label = ", ".join(f"{k}={val}" for k, val in changed.items())
    out = dataclasses.replace(v, name=f"{v.name}[{label}]", title=f"{v.title} with {label}", trl=None,
                              **{k: val for k, val in pieces.items() if getattr(v, k) != val})
    if out.in_trl:  # TRL computes the result: the config's deciding fields are its TRL fields
        out = dataclasses.replace(out, trl={k: getattr(args, k) for k in sig})
    return out


def _refuse_unknown_values(args) -> None:
    """A config that names no variant must hold TRL's own values in the deciding fields: anything else (a loss
    TRL lacks, a piece's own name) is refused when the trainer is built, not at the first loss."""
    problems = []
    loss_type = getattr(args, _LOSS_TYPE, None)
    if loss_type not in _trl_loss_types():
        users = [u.name for u in VARIANTS.values() if loss_type in (u.name, u.objective)]
        problems.append(f"loss_type={loss_type!r} is not a loss type TRL's GRPOTrainer computes "
                        f"({', '.join(sorted(_trl_loss_types()))})"
                        + (f"; the registry's {' / '.join(repr(u) for u in users)} is: build the config with "
                           f"grpo_config({users[0]!r})" if users else ""))
    level = getattr(args, _RATIO_FIELD, None)
    if level not in _trl_levels():
        problems.append(f"importance_sampling_level={level!r} is not TRL's ({', '.join(sorted(_trl_levels()))})"
                        + ("; build the config with grpo_config(<variant>)" if level in RATIO_LEVELS else ""))
    scale = _scale_of(args)
    if scale is None or ADVANTAGE_SCALES[scale].trl is None:
        held = {k: getattr(args, k, None) for k in _SCALE_FIELDS}
        problems.append(f"{held} are not TRL's advantage settings"
                        + ("; build the config with grpo_config(<variant>)" if scale is not None else ""))
    if problems:
        raise ValueError("GRPOConfig: " + "; ".join(problems) + " (grpo_config(name) writes a registry variant's "
                         "fields, and GRPOLessonsTrainer trains them)")


def variant_for_config(args) -> str | Variant | None:
    """The variant ``args`` (a GRPOConfig) trains: the one it names, with its overridden fields, or what TRL
    computes with its fields.

    * A :class:`GRPOLessonsConfig` from :func:`grpo_config` names its variant.  While the fields that decide what
      trains (loss_type, importance_sampling_level, the advantage fields, a defining group size) are the ones
      ``grpo_config`` wrote, that name is returned, also for variants TRL lacks (``grpo_config("gopo")`` gives
      ``"gopo"``).  A changed field changes that piece and keeps the others: ``grpo_config("gopo",
      loss_type="bnpo")`` gives the unregistered :class:`Variant` ``gopo[loss_type=bnpo]`` (GOPO's ranks, bnpo's
      token mean); a change that does not compose raises ``ValueError`` naming both.
    * A plain ``GRPOConfig``: the registered variant TRL computes natively with exactly those fields (the most
      specific: ``loss_type="grpo"`` with ``num_generations=2`` is ``"2-grpo"``).  Where no registered variant is
      that combination (``loss_type="dr_grpo"`` with TRL's default ``scale_rewards="group"``), an unregistered
      :class:`Variant` with the loss of the registered variant of that ``loss_type`` and the ratio level and
      advantage scale TRL's fields select, named after both (``"dr_grpo[advantage_scale=group]"``).  A value TRL
      does not compute (``loss_type="gmpo"``) raises ``ValueError`` pointing to ``grpo_config``.  Where several
      registered combinations fit, it warns in one line naming them and returns ``None``, meaning "TRL's own
      loss" (:class:`GRPOLessonsTrainer` then keeps ``loss_impl="trl"``); pass ``variant=`` to choose one.
    """
    named = getattr(args, "variant", None)
    if named is not None:
        v = get_variant(named)
        out = _compose(v, args)
        return v.name if out is v else out
    _refuse_unknown_values(args)
    level, loss_type = getattr(args, "importance_sampling_level", "token"), getattr(args, "loss_type", None)
    native = [v for v in VARIANTS.values() if v.in_trl]
    exact = [v for v in native if _matches(args, _trl_signature(v))]
    if exact:
        most = max(len(_trl_signature(v)) for v in exact)
        best = [v for v in exact if len(_trl_signature(v)) == most]
        if len({_pieces(v) for v in best}) > 1:
            return _trl_fallback(f"registered variants {[v.name for v in best]} all match loss_type={loss_type!r}, "
                                 f"importance_sampling_level={level!r}")
        return best[0].name
    same_loss = [v for v in native if _trl_signature(v)["loss_type"] == loss_type
                 and v.fixed_group_size in (None, getattr(args, "num_generations", None))]
    levels = [r.name for r in RATIO_LEVELS.values() if r.trl == level]
    scales = [s.name for s in ADVANTAGE_SCALES.values() if s.trl is not None and _matches(args, dict(s.trl))]
    if not same_loss or not levels or not scales:
        return _trl_fallback(
            f"no registered pieces compute loss_type={loss_type!r}, importance_sampling_level={level!r}, "
            f"scale_rewards={getattr(args, 'scale_rewards', None)!r}, multi_objective_aggregation="
            f"{getattr(args, 'multi_objective_aggregation', None)!r}")
    if len({(v.objective, v.aggregation) for v in same_loss}) > 1 or len(levels) > 1 or len(scales) > 1:
        return _trl_fallback(f"loss_type={loss_type!r} fits variants {[v.name for v in same_loss]}, ratio levels "
                             f"{levels}, advantage scales {scales}")
    base = same_loss[0]
    changed = {k: new for k, new in (("ratio_level", levels[0]), ("advantage_scale", scales[0]))
               if getattr(base, k) != new}
    label = ", ".join(f"{k}={new}" for k, new in changed.items())
    return dataclasses.replace(base, name=f"{base.name}[{label}]", title=f"{base.title} with {label} (TRL's fields)",
                               trl={"loss_type": loss_type}, **changed)


def _trl_fallback(why: str) -> None:
    warnings.warn(f"GRPOConfig: {why}; training with TRL's own loss (pass variant= to choose a registry variant)",
                  stacklevel=3)
    return None


def resolve_variant(variant: str | Variant | None, args) -> tuple[Variant | None, Any]:
    """The one resolution from (variant, config) to what trains: ``(the variant, the config the trainer holds)``.

    * No ``variant``: :func:`variant_for_config` of ``args`` (``None``: TRL's own loss), and ``args`` themselves.
    * ``variant`` and a config :func:`grpo_config` made for it: the same, with its overridden fields composed.
    * ``variant`` and any other config (a plain ``GRPOConfig``, or one made for another variant): ``variant``
      trains, with the config's other settings (clip range, beta, batch sizes, ...).  The trainer gets a copy of the
      config that names ``variant`` and holds its deciding fields, so that ``args.variant``, the logged config and
      what trains agree; a one-line warning names both where the config said otherwise.  The caller's config is not
      changed.  A group size that defines the variant (2-GRPO) cannot be changed this way: ``ValueError``.
    """
    if variant is None:
        found = variant_for_config(args)
        return (None if found is None else get_variant(found)), args
    v = get_variant(variant)
    registered = VARIANTS.get(v.name) is v
    named = getattr(args, "variant", None)
    if registered and named == v.name:
        return get_variant(variant_for_config(args)), args
    sig = _trl_signature(v)
    held = {k: getattr(args, k, None) for k in sig}
    if v.fixed_group_size is not None and held["num_generations"] != v.fixed_group_size:
        raise ValueError(f"variant={v.name!r} is defined by num_generations={v.fixed_group_size} ({v.title}), but args "
                         f"hold num_generations={held['num_generations']}: build them with grpo_config({v.name!r})")
    if named is not None or held != sig:
        made = f"args were made by grpo_config({named!r})" if named is not None else "args are a plain GRPOConfig"
        diff = {k: val for k, val in held.items() if val != sig[k]}
        what = (", ".join(f"{k}={val!r}" for k, val in diff.items()) + f" become {v.name}'s "
                + ", ".join(f"{k}={sig[k]!r}" for k in diff)) if diff else f"variant={named!r} becomes {v.name!r}"
        warnings.warn(f"{made} but variant={v.name!r}: training {v.name!r}; in the trainer's copy of the config {what} "
                      f"(its other settings, e.g. epsilon and beta, stay the config's)", stacklevel=3)
    return v, _relabelled(args, v, registered)


def _relabelled(args, v: Variant, registered: bool):
    """A copy of ``args`` (any GRPOConfig) as a :class:`GRPOLessonsConfig` naming ``v``, with ``v``'s deciding
    fields.  The copy takes the initialised config's attributes as they are: running ``__post_init__`` again would
    redo conversions it already made (generation batch size, precision flags)."""
    new = object.__new__(GRPOLessonsConfig)
    new.__dict__.update(vars(args))
    new.variant = v.name if registered else None
    for k, val in _trl_signature(v).items():
        setattr(new, k, val)
    return new


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

# The loss type whose clip share TRL logs alone, as "cispo_clip_ratio" (the others log "clip_ratio/*").
_CAP_ONLY_LOSS_TYPE = "cispo"

# The keyword inputs TRL's per-token log-prob function takes besides the token ids and its own switches (image
# tensors, image_grid_thw, token types, ...), read off its signature: TRL's loss passes each from the batch.
_MODEL_INPUTS: tuple[str, ...] = tuple(
    name for name in inspect.signature(GRPOTrainer._get_per_token_logps_and_entropies).parameters
    if name not in ("self", "model", "input_ids", "attention_mask", "logits_to_keep", "batch_size",
                    "compute_entropy", "compute_aux_loss"))


_TRL_INIT = inspect.signature(GRPOTrainer.__init__)


class GRPOLessonsTrainer(GRPOTrainer):
    """``trl.GRPOTrainer`` with the loss of :func:`grpo_lessons.policy_loss` and optional dynamic sampling.

    Extra arguments:

    * ``variant`` — registry name or :class:`~grpo_lessons.core.variants.Variant` (default: the one ``args``
      names when it comes from :func:`grpo_config`, with its overridden fields, else what TRL computes with
      ``args``: :func:`variant_for_config`).  Given, it trains whatever ``args`` say: the trainer keeps a copy of
      ``args`` that names it (:func:`resolve_variant`).
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
    TRL's loss metrics are logged under TRL's names with TRL's values (``entropy``, ``kl``, ``clip_ratio/*`` -- at
    the sequence level shares of sequences --, ``cispo_clip_ratio``, ``vespo/phi_seq_mean``, ``policy_loss``),
    each reduced over processes as TRL reduces it.

    Off-policy pieces: with vLLM the sampler's log-probs TRL keeps (``inputs["sampling_per_token_logps"]``;
    NaN where vLLM could not score a token, read as TRL reads it: weight 1 in the correction, KL 0 in the off-policy
    mask) go to ``policy_loss`` as
    ``sampling_logp``: DPPO's anchor, the off-policy mask's reference (``off_policy_mask_threshold``) and,
    with ``vllm_importance_sampling_correction``, the TIS/MIS weights of every
    ``vllm_importance_sampling_mode`` (recomputed from the same tensors, so equal to TRL's
    ``importance_sampling_ratio``).  Without vLLM the anchor is ``pi_old``.  Advantages: where the variant's
    advantage scale has no TRL setting, or ``args`` holds another one, TRL's advantages are replaced by
    :func:`grpo_lessons.variant_advantages` of the gathered rewards (the whole generation batch, every
    process).  An aggregation normalised over the whole batch (ScaleRL's ``prompt_mean``) gets its per-row
    weights before TRL shuffles the batch.
    Every setting TRL's own loss reads is honoured, as TRL computes it: ``delta`` (INTELLECT-2's two-sided clip,
    an option of the clip objective), ``top_entropy_quantile`` (the top-entropy token mask, its threshold taken
    over every process's tokens), ``entropy_coef`` / ``use_adaptive_entropy`` (the entropy bonus, a token mean
    divided by the accumulation steps only, and Skywork-OR1's coefficient controller updated once per optimizer
    step with TRL's own state, so checkpoints carry it), the MoE router aux loss (on for every model whose config
    has ``output_router_logits``, weighted by ``router_aux_loss_coef``), and every model input TRL passes (image
    tensors, ``image_grid_thw``, token types) reaches the forward.  A config whose loss no registry variant is
    exactly (:func:`variant_for_config` returns ``None``, with a warning saying why) and per-token ``(B, T)``
    advantages keep TRL's own loss.  DPPO's top-K variants: TRL keeps no sampler top-K, so the trainer keeps
    ``pi_old``'s top ``dppo_top_k`` log-probs per position at generation time (the paper's "recompute" anchor) and, at
    each loss, runs one extra no-grad forward for the current logits to get the divergence
    (:func:`grpo_lessons.core.divergence.topk_divergence`).  Dynamic sampling recomputes
    nothing TRL computed: refill groups keep the advantages of the batch they were scored in (exact
    for ``scale_rewards="group"``/``"none"``; with ``"batch"`` each refill has its own batch std).
    """

    def __init__(self, *args, variant: str | Variant | None = None, loss_impl: str = "grpo_lessons",
                 dynamic_sampling: bool = False, max_sampling_rounds: int = 4,
                 loss_options: dict[str, Any] | None = None, dppo_top_k: int = 20, **kwargs):
        if loss_impl not in ("grpo_lessons", "trl"):
            raise ValueError(f"loss_impl must be 'grpo_lessons' or 'trl', got {loss_impl!r}")
        # resolve before TRL reads the config: a refusal costs nothing, and TRL copies the fields the variant decides
        bound = _TRL_INIT.bind_partial(self, *args, **kwargs)
        config = bound.arguments.get("args")
        if config is None and variant is not None:
            config = grpo_config(variant)  # TRL would make a plain default config, which is DAPO's
        resolved = None
        if config is not None:
            resolved, bound.arguments["args"] = resolve_variant(variant, config)
        super().__init__(*bound.args[1:], **bound.kwargs)
        self.variant = resolved if config is not None else resolve_variant(None, self.args)[0]
        self.loss_impl = "trl" if self.variant is None else loss_impl  # None: no registry variant is TRL's loss
        self._trl_scoring_fields()
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

    def _trl_scoring_fields(self) -> None:
        """Where the config names advantages TRL lacks (``scale_rewards="rank"``), TRL's own scoring runs with
        TRL's defaults (or the scale's ``trl_fallback``) and :meth:`_score` replaces its advantages; the config
        keeps the scale's name, so what is logged is what trains."""
        scale = None if self.variant is None else self.variant.scale_piece
        if scale is not None and scale.trl is None:
            nearest = {k: _TRL_DEFAULTS[k] for k in _SCALE_FIELDS}
            nearest.update(_sum_first())
            nearest.update(scale.trl_fallback)
            for k, val in nearest.items():
                setattr(self, k, val)  # TRL's copies of the fields, read by its scoring

    def _check_supported(self) -> None:
        a, v = self.args, self.variant
        if self.loss_impl == "trl" and v is not None and (
                a.loss_type not in _trl_loss_types() or a.importance_sampling_level not in _trl_levels()):
            raise ValueError(f"loss_impl='trl': TRL's GRPOTrainer cannot compute {v.name!r} (loss_type={a.loss_type!r}, "
                             f"importance_sampling_level={a.importance_sampling_level!r}); keep loss_impl='grpo_lessons'")
        if self.dynamic_sampling:
            if not hasattr(self.train_dataset, "__getitem__") or not hasattr(self.train_dataset, "__len__"):
                raise NotImplementedError("dynamic_sampling draws refill prompts by index: use a map-style Dataset")

    # ---- the loss ------------------------------------------------------------------------------

    def _loss_params(self) -> dict[str, Any]:
        """The objective's hyper-parameters from ``args``, as TRL reads them: an unset ``epsilon_high`` is
        ``epsilon`` (TRL's trainer resolves it so: CISPO's cap is then 0.2, DAPO's upper clip 1.2), then
        ``loss_options``."""
        params = {}
        fields = self.variant.objective_piece.trl_fields
        resolved = {"epsilon": self.epsilon_low, "epsilon_high": self.epsilon_high}  # GRPOConfig field -> TRL's value
        for name in self.variant.loss_params:
            field = fields.get(name)
            value = resolved[field] if field in resolved else getattr(self.args, field, None) if field else None
            if value is not None:
                params[name] = value
        params.update(self.loss_options)
        return params

    def _global_token_norm(self) -> bool:
        """DAPO-style token mean over the whole generation batch (TRL ``dapo``), not per micro-batch (``bnpo``): the
        config's ``loss_type`` says which, through the objectives' ``trl_micro_batch`` entries."""
        micro = any(m for _, _, m in _trl_loss_types().get(self.args.loss_type, ()))
        return self.variant.aggregation_piece.token_count and not micro

    def _compute_loss(self, model, inputs):
        if self.loss_impl == "trl":
            return super()._compute_loss(model, inputs)
        adv = inputs["advantages"]
        if adv.dim() != 1:  # a subclass handing TRL per-token advantages: policy_loss takes one per completion
            if not getattr(self, "_warned_token_adv", False):
                warnings.warn("advantages of shape (B, T): policy_loss takes one per completion; this batch uses "
                              "TRL's own loss", stacklevel=2)
                self._warned_token_adv = True
            return super()._compute_loss(model, inputs)
        prompt_ids, prompt_mask = inputs["prompt_ids"], inputs["prompt_mask"]
        completion_ids, completion_mask = inputs["completion_ids"], inputs["completion_mask"]
        input_ids = torch.cat([prompt_ids, completion_ids], dim=1)  # (B, P + T)
        attention_mask = torch.cat([prompt_mask, completion_mask], dim=1)  # (B, P + T)
        logits_to_keep = completion_ids.size(1)  # T
        mask = completion_mask if "tool_mask" not in inputs else completion_mask * inputs["tool_mask"]  # (B, T)

        # every model input TRL's loss passes (image tensors, image_grid_thw, token types) reaches the forward;
        # a MoE model also returns its router load-balancing loss
        logps, entropies, aux_loss = self._get_per_token_logps_and_entropies(
            model, input_ids, attention_mask, logits_to_keep, compute_entropy=True,
            compute_aux_loss=self.aux_loss_enabled, **{k: inputs.get(k) for k in _MODEL_INPUTS},
        )  # (B, T), (B, T), scalar or None
        old = inputs.get("old_per_token_logps")
        old = logps.detach() if old is None else old  # on-policy: ratio exactly 1
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
        regularisers = self._regulariser_kwargs(entropies, mask, aux_loss, scale=divide_by / accum)
        out = policy_loss(
            logps, old, adv, mask, variant=self.variant,
            beta=self.beta, ref_logp=inputs.get("ref_per_token_logps") if self.beta != 0.0 else None,
            max_completion_length=self.max_completion_length,
            kl_importance_weighted=self.args.use_bias_correction_kl,
            num_items_in_batch=num_items, **off_policy, **regularisers, **self._loss_params(),
        )
        self._adaptive_entropy_step(entropies, mask, regularisers.get("entropy_mask"))
        self._log_loss_metrics(out, entropies, mask)
        return out.loss / divide_by

    def _regulariser_kwargs(self, entropies: torch.Tensor, mask: torch.Tensor, aux_loss, *,
                            scale: float) -> dict[str, Any]:
        """policy_loss's top-entropy mask, entropy bonus and aux-loss arguments, as TRL's settings ask.

        ``policy_loss`` adds ``- c H + a aux`` to the aggregated loss, which this trainer then divides by
        ``divide_by``; TRL divides those two terms by the accumulation steps alone, so ``c`` and ``a`` come in
        multiplied by ``scale = divide_by / accumulation steps``.
        """
        kw: dict[str, Any] = {}
        if self.top_entropy_quantile < 1.0:  # one threshold for the whole batch, every process's tokens
            kw["entropy_mask"] = high_entropy_mask(entropies, mask, self.top_entropy_quantile,
                                                   pool=self._entropy_pool(entropies, mask))  # (B, T)
        if self._entropy_bonus_enabled:
            coef = self.entropy_coef
            if self.use_adaptive_entropy:  # the coefficient and gate of the last optimizer step hold for this one
                coef = gated_entropy_coef(coef, self._last_world_entropy, self.args.entropy_target)
            kw.update(entropy=entropies, entropy_coef=float(coef) * scale)
        if self.aux_loss_enabled:
            kw.update(aux_loss=aux_loss, aux_loss_coef=float(self.router_aux_loss_coef) * scale)
        return kw

    def _entropy_pool(self, entropies: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The completion tokens' entropies of every process (``(n,)``), for one top-entropy threshold."""
        local = entropy_pool(entropies, mask)  # (n_local,)
        if self.accelerator.num_processes == 1:
            return local
        sentinel = -1.0  # entropies are >= 0, so the padding cannot be mistaken for one
        padded = self.accelerator.pad_across_processes(local, dim=0, pad_index=sentinel)
        gathered = self.accelerator.gather(padded)
        return gathered[gathered != sentinel]

    def _adaptive_entropy_step(self, entropies: torch.Tensor, mask: torch.Tensor, entropy_mask) -> None:
        """Skywork-OR1's controller (:func:`grpo_lessons.core.entropy.adaptive_entropy_coef`): sum the entropy of the
        tokens the bonus acts on over the accumulation window, and at the optimizer step update ``entropy_coef``
        from the window's token mean over every process.  Logs ``entropy_coef`` per optimizer step, as TRL."""
        if not self._entropy_bonus_enabled or not self.model.training:
            return
        if self.use_adaptive_entropy:
            m = mask.to(entropies.dtype) if entropy_mask is None else mask.to(entropies.dtype) * entropy_mask
            stats = torch.stack([(entropies.detach() * m).sum(), m.sum()])  # (2,) entropy sum, token count
            window = getattr(self, "_entropy_window_stats", None)
            self._entropy_window_stats = stats if window is None else window + stats
            if self.accelerator.sync_gradients:
                total = self.accelerator.reduce(self._entropy_window_stats, reduction="sum")
                world_entropy = float(total[0] / total[1].clamp(min=1.0))
                a = self.args
                self.entropy_coef = adaptive_entropy_coef(self.entropy_coef, world_entropy, target=a.entropy_target,
                                                          step=a.entropy_coef_delta, coef_min=a.entropy_coef_min,
                                                          coef_max=a.entropy_coef_max)
                self._last_world_entropy = world_entropy
                self._entropy_window_stats = None
        if self.accelerator.sync_gradients:
            self._metrics["train"]["entropy_coef"].append(self.entropy_coef)

    def _off_policy_kwargs(self, inputs, old: torch.Tensor) -> dict[str, Any]:
        """policy_loss's off-policy arguments from TRL's batch: sampler log-probs, correction, masks, weights."""
        kw: dict[str, Any] = {}
        sampling = inputs.get("sampling_per_token_logps")
        if sampling is not None:
            # vLLM could not score some tokens (NaN): read as TRL reads them, rho = 1 in the correction and KL 0 in
            # the off-policy mask (policy_loss's allow_unscored_tokens)
            kw["sampling_logp"], kw["allow_unscored_tokens"] = sampling, True
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
        if v is None:
            return None
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

    def _log(self, name: str, value: float) -> None:
        self._metrics["train" if self.model.training else "eval"][name].append(value)

    def _global_mean(self, x: torch.Tensor, mask: torch.Tensor) -> float:
        """TRL's reduction of a per-token ``(B, T)`` or per-sequence ``(B, 1)`` quantity: its sum over the completion
        tokens (per sequence: over the rows, each once) and their count, both summed over every process, divided."""
        x = x.detach().float()
        if x.shape[1] == 1:  # one value per sequence (sequence-level ratios, VESPO's phi)
            local = torch.stack([x.sum(), torch.tensor(float(x.shape[0]), device=x.device)])  # (2,)
        else:
            m = mask.to(x.dtype)
            local = torch.stack([(x * m).sum(), m.sum()])  # (2,)
        total = self.accelerator.reduce(local, reduction="sum")
        return float(total[0] / total[1].clamp(min=1.0))

    def _gathered_seq_means(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Every process's per-sequence means of ``x`` (``(B, T)``: over each row's tokens, NaN for a row without one;
        ``(B, 1)``: the values), gathered: what TRL takes the extremes of."""
        x = x.detach().float()
        local = x.squeeze(1) if x.shape[1] == 1 else (x * mask).sum(-1) / mask.sum(-1)  # (B,)
        return self.accelerator.gather(local)

    @staticmethod
    def _nan_extreme(x: torch.Tensor, largest: bool) -> float:
        kept = x[~torch.isnan(x)]
        if kept.numel() == 0:
            return float("nan")
        return float(kept.max() if largest else kept.min())

    def _log_loss_metrics(self, out, entropies, mask) -> None:
        """TRL's loss metrics under TRL's names, each reduced over processes as TRL reduces it (sums and counts for
        the means; gathered per-sequence shares for ``clip_ratio/low_min`` / ``high_max``); the names depend on
        ``loss_type`` as in TRL (``cispo``: ``cispo_clip_ratio`` alone)."""
        t = out.tensors
        self._log("entropy", self._global_mean(entropies, mask))
        if "kl" in t:  # TRL's "kl": the KL term as it enters the loss (k3, x the ratio under use_bias_correction_kl)
            self._log("kl", self._global_mean(t["kl"], mask))
        low, high = t.get("clipped_low"), t.get("clipped_high")
        # TRL names a loss type's clip shares after it: cispo logs its one share (above the cap, A > 0) alone
        cap_only = _CAP_ONLY_LOSS_TYPE in {self.loss_type, *(self.variant.objective_piece.trl or {}).values()}
        if cap_only and high is not None:
            self._log("cispo_clip_ratio", self._global_mean(high, mask))
        elif low is not None and high is not None:
            self._log("clip_ratio/low_mean", self._global_mean(low, mask))
            self._log("clip_ratio/high_mean", self._global_mean(high, mask))
            self._log("clip_ratio/region_mean", self._global_mean(low | high, mask))
            self._log("clip_ratio/low_min", self._nan_extreme(self._gathered_seq_means(low, mask), largest=False))
            self._log("clip_ratio/high_max", self._nan_extreme(self._gathered_seq_means(high, mask), largest=True))
        for name, x in t.items():  # the objective's diagnostics, e.g. VESPO's phi -> "vespo/phi_seq_mean" (TRL's)
            if "/" in name:
                self._log(f"{name}_seq_mean" if x.shape[-1] == 1 else f"{name}_mean", self._global_mean(x, mask))
        self._log_mean("policy_loss", float(out.policy_kl_loss))  # TRL's: the policy term + beta KL
        self._log_mean("aux_loss", out.aux_loss)
        for name in ("is_weight_mean", "is_masked_frac", "is_truncated_frac", "off_policy_masked_frac"):
            self._log_mean(f"off_policy/{name}", getattr(out, name, None))

    # ---- advantages TRL does not compute (GOPO's ranks, ScaleRL, RLOO; GDPO when TRL sums first) -----

    def _own_advantages(self) -> bool:
        """Whether TRL's advantages are not the variant's: its scale has no TRL setting, or ``args`` hold another."""
        if self.variant is None:  # TRL's own loss and advantages
            return False
        trl = self.variant.scale_piece.trl
        return trl is None or not _matches(self.args, dict(trl))

    def _group_size(self) -> int:
        """The completions per prompt of the batch being generated: ``num_generations`` in training,
        ``num_generations_eval`` in evaluation (TRL's rule)."""
        return self.num_generations if self.model.training else self.num_generations_eval

    def _score(self, inputs):
        """TRL's generation and scoring, with the advantages replaced where the variant's piece is not TRL's
        (with the evaluation group size in evaluation; a group of one gets advantage 0, as in TRL)."""
        batch = super()._generate_and_score_completions(inputs)
        if not self._own_advantages():
            return batch
        G = self._group_size()
        R = self._last_rewards_per_func.detach().float().cpu()  # (N_all, K) gathered over processes
        if G == 1:  # evaluation with num_generations_eval=1: a group of one has no baseline, TRL's advantages are 0
            adv = torch.zeros(R.shape[0])
        else:
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
        per_reward = self.variant is not None and self.variant.scale_piece.per_reward
        if per_reward or self.multi_objective_aggregation == "normalize_then_sum":
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
            vision = sorted(k for k in _MODEL_INPUTS if batch.get(k) is not None)
            if vision:
                raise NotImplementedError(f"DPPO's top-K divergence re-runs the model on token ids alone; this batch "
                                          f"also has {vision}")
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
            w = batch_weights(lengths.unsqueeze(-1), self._group_size())  # (N_total,) eval: its own group size
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
    """A trainer for ``variant``: TRL's own ``GRPOTrainer`` where TRL computes what trains and nothing extra is
    asked, else :class:`GRPOLessonsTrainer`.  ``args`` defaults to :func:`grpo_config` ``(variant)``;
    ``dynamic_sampling`` defaults to ``False`` (DAPO's paper uses it: pass ``True``).

    ``variant`` always trains (:func:`resolve_variant`): with a config made for it, its overridden fields compose
    with its pieces; with any other config (``make_trainer("gspo", args=GRPOConfig())``) the trainer gets a copy
    that names ``variant`` and holds its deciding fields, and a warning says which fields it replaced.
    """
    v = get_variant(variant)
    args = grpo_config(v) if args is None else args
    trained, args = resolve_variant(v, args)  # `variant` trains, whatever args say (a warning names both)
    if trained.in_trl and not dynamic_sampling and not force_subclass:
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
