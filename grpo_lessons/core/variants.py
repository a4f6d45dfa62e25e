"""The variant registry: each GRPO variant is a *choice of pieces*, not a copy of the loss.

A :class:`Variant` names

* ``advantage_scale`` — how rewards become advantages (:data:`grpo_lessons.core.advantages.ADVANTAGE_SCALES`),
* ``ratio_level`` — token / sequence / sequence-token importance ratio (:data:`grpo_lessons.core.ratios.RATIO_LEVELS`),
* ``objective`` — clip / soft gate ... (:data:`grpo_lessons.core.objectives.OBJECTIVES`),
* ``aggregation`` — what the loss is divided by (:data:`grpo_lessons.core.aggregation.AGGREGATIONS`),

each a name in its family's registry, plus the paper's defaults, the citation and the TRL ``GRPOConfig``
fields that reproduce it.  Adding a variant is one :func:`register` call (and a new piece one ``register_*``
call in its module); :func:`grpo_lessons.policy_loss`, :func:`variant_advantages`, the trainers, the command line
and the TRL bridge read everything from the registries.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import torch

from ._checks import check_finite
from .advantages import ADVANTAGE_SCALES, AdvantageScale, _reward_matrix_tensor, combine_rewards, group_advantages
from .aggregation import AGGREGATIONS, Aggregation
from .objectives import OBJECTIVES, Objective
from .ratios import RATIO_LEVELS, RatioLevel
from .registry import Registry

__all__ = ["Variant", "VARIANTS", "register", "get_variant", "list_variants", "variant_advantages", "NOT_IN_TRL",
           "TRAIN_DEFAULTS", "register_train_default"]


def _frozen(d: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return MappingProxyType(dict(d or {}))


class _NotInTRL(Mapping[str, Any]):
    """The type of :data:`NOT_IN_TRL`: an empty read-only mapping that is not ``{}``, so that "TRL's ``GRPOTrainer``
    cannot compute this variant" is said, never implied by an empty mapping."""

    _instance: _NotInTRL | None = None

    def __new__(cls) -> _NotInTRL:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __getitem__(self, key: str) -> Any:
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0

    def __repr__(self) -> str:
        return "NOT_IN_TRL"

    def __reduce__(self) -> str:
        return "NOT_IN_TRL"  # pickles and copies as the module's one instance


#: A variant's ``trl`` when TRL 1.16's ``GRPOTrainer`` does not compute it (a piece has no TRL setting): no
#: ``GRPOConfig`` fields reproduce it, and the TRL bridge's ``GRPOLessonsTrainer`` trains it.  It reads as an empty
#: mapping (``v.trl.get(...)``, ``dict(v.trl)``) but ``v.trl is NOT_IN_TRL`` says it on purpose.
NOT_IN_TRL: Mapping[str, Any] = _NotInTRL()

#: The keys a variant's ``train_defaults`` may hold, each with what it means and who reads it.  :class:`Variant`
#: refuses any other key: a misspelt ``"betta"`` would otherwise be dropped and the run trained with beta = 0.
#: :func:`register_train_default` adds a key.
TRAIN_DEFAULTS: Registry[str] = Registry("train default")


def register_train_default(name: str, meaning: str, *, replace: bool = False) -> str:
    """Allow ``name`` in ``Variant.train_defaults``; ``meaning`` says what it sets and who reads it."""
    if not isinstance(meaning, str) or not meaning:
        raise ValueError(f"train default {name!r}: say what it sets and who reads it")
    return TRAIN_DEFAULTS.add(name, meaning, replace=replace)


for _key, _meaning in (
    ("beta", "KL coefficient: TrainConfig.resolve and grpo_config (GRPOConfig beta)"),
    ("learning_rate", "the paper's learning rate: grpo_config (GRPOConfig learning_rate) and trl_train's default"),
    ("mask_truncated_completions", "DAPO's overlong filtering: TrainConfig.resolve and grpo_config"),
    ("dynamic_sampling", "DAPO's dynamic sampling (drop all-equal groups, refill): TrainConfig.resolve, the CLI"),
    ("group_size", "the paper's group size G; the trainers use it only when group_size_defines_method is set"),
    ("group_size_defines_method", "True when G is the method (2-GRPO): TrainConfig and grpo_config fix G"),
    ("prompts_per_step", "prompts (groups) per step: TrainConfig.resolve"),
    ("max_completion_length", "the paper's completion budget in tokens (recorded; runs set their own)"),
    ("overlong_cache_len", "the paper's soft overlong-penalty window (recorded; TrainConfig.overlong_cache_len sets it)"),
):
    register_train_default(_key, _meaning)


def _unknown_keys(what: str, given, known) -> str | None:
    """``"what has 'x' (did you mean 'y'?)"`` for the keys of ``given`` not in ``known``, else None."""
    bad = [k for k in given if k not in known]
    if not bad:
        return None
    hints = []
    for k in bad:
        close = difflib.get_close_matches(str(k), [str(n) for n in known], n=1, cutoff=0.6)
        hints.append(f"{k!r}" + (f" (did you mean {close[0]}?)" if close else ""))
    return f"{what} has unknown key(s) {', '.join(hints)}; known: {', '.join(sorted(known)) or 'none'}"


@dataclass(frozen=True)
class Variant:
    """One GRPO variant as a combination of pieces (see module docstring)."""

    name: str
    title: str
    advantage_scale: str
    ratio_level: str
    objective: str
    aggregation: str
    citation: str
    loss_defaults: Mapping[str, Any] = field(default_factory=dict)  # read by policy_loss: the objective's params
    train_defaults: Mapping[str, Any] = field(default_factory=dict)  # read by the trainers: keys of TRAIN_DEFAULTS
    # GRPOConfig fields reproducing the method beyond what its pieces imply, or NOT_IN_TRL; None: read off the pieces
    trl: Mapping[str, Any] | None = None
    notebook: str = ""
    notes: str = ""

    def __post_init__(self) -> None:
        problems = []
        for piece, registry in (("advantage_scale", ADVANTAGE_SCALES), ("ratio_level", RATIO_LEVELS),
                                ("objective", OBJECTIVES), ("aggregation", AGGREGATIONS)):
            if getattr(self, piece) not in registry:
                problems.append(f"{piece} {getattr(self, piece)!r} not in {tuple(registry)}")
        if problems:
            raise ValueError(f"variant {self.name!r}: " + "; ".join(problems))
        # A key nothing reads is a key silently dropped (a misspelt epsilon_high keeps the default clip range).
        for what, given, known in (("loss_defaults", self.loss_defaults,
                                    f"the {self.objective} objective's parameters"),
                                   ("train_defaults", self.train_defaults, "TRAIN_DEFAULTS (register_train_default)")):
            keys = self.objective_piece.params if what == "loss_defaults" else tuple(TRAIN_DEFAULTS)
            bad = _unknown_keys(what, given or {}, keys)
            if bad:
                problems.append(f"{bad} ({known})")
        in_trl = self.in_trl
        if self.trl is None:
            trl = {} if in_trl else NOT_IN_TRL  # left out: what the pieces say
        elif self.trl is NOT_IN_TRL:
            if in_trl:
                problems.append("trl=NOT_IN_TRL, but TRL computes every piece (advantage scale, ratio level, the "
                                "objective with this aggregation): name the GRPOConfig fields that reproduce it, or "
                                "leave trl out")
            trl = NOT_IN_TRL
        else:
            trl = self.trl
            if not in_trl:
                problems.append(f"trl={dict(trl)!r} names GRPOConfig fields, but TRL's GRPOTrainer lacks a piece "
                                f"(see Variant.in_trl): pass trl=NOT_IN_TRL (an empty mapping no longer means it)")
        if problems:
            raise ValueError(f"variant {self.name!r}: " + "; ".join(problems))
        object.__setattr__(self, "loss_defaults", _frozen(self.loss_defaults))
        object.__setattr__(self, "train_defaults", _frozen(self.train_defaults))
        object.__setattr__(self, "trl", trl if trl is NOT_IN_TRL else _frozen(trl))

    @property
    def fixed_group_size(self) -> int | None:
        """G when the method is defined by it (2-GRPO: G = 2), else None (G is a free hyper-parameter)."""
        if self.train_defaults.get("group_size_defines_method"):
            return int(self.train_defaults["group_size"])
        return None

    @property
    def loss_params(self) -> tuple[str, ...]:
        """Hyper-parameter names the objective accepts."""
        return self.objective_piece.params

    # The registry entries of the four pieces (what the trainers and the TRL bridge read).
    @property
    def scale_piece(self) -> AdvantageScale:
        return ADVANTAGE_SCALES[self.advantage_scale]

    @property
    def ratio_piece(self) -> RatioLevel:
        return RATIO_LEVELS[self.ratio_level]

    @property
    def objective_piece(self) -> Objective:
        return OBJECTIVES[self.objective]

    @property
    def aggregation_piece(self) -> Aggregation:
        return AGGREGATIONS[self.aggregation]

    @property
    def in_trl(self) -> bool:
        """Whether TRL 1.16's own ``GRPOTrainer`` computes this variant: every piece has a TRL setting
        (advantage scale, ratio level, and the objective with this aggregation)."""
        obj = self.objective_piece
        return (self.scale_piece.trl is not None and self.ratio_piece.trl is not None
                and obj.trl is not None and self.aggregation in obj.trl)


#: Variants by name (read-only; :func:`register` adds one).
VARIANTS: Registry[Variant] = Registry("variant")


def register(variant: Variant, *, replace: bool = False) -> Variant:
    """Add ``variant`` to the registry (``replace=True`` to overwrite an entry)."""
    if not isinstance(variant, Variant):
        raise TypeError(f"register() takes a Variant, got {type(variant).__name__}")
    return VARIANTS.add(variant.name, variant, replace=replace)


def get_variant(name: str | Variant) -> Variant:
    """Look a variant up by name; ``ValueError`` listing the known names otherwise."""
    if isinstance(name, Variant):
        return name
    try:
        return VARIANTS[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown variant {name!r}; known variants: {', '.join(sorted(VARIANTS))}") from None


def list_variants() -> list[str]:
    """The names of every registered variant, sorted (``grpo``, ``dr_grpo``, ``dapo``, ...)."""
    return sorted(VARIANTS)



def variant_advantages(rewards, group_size: int, variant="grpo", weights=None, *,
                       allow_unscored: bool = False) -> torch.Tensor:
    """The advantages a registry variant uses, from ``(N,)`` rewards or an ``(N, K)`` reward matrix.

    The variant's advantage scale (an entry of :data:`~grpo_lessons.core.advantages.ADVANTAGE_SCALES`) gets the
    weighted ``nansum`` of the columns (:func:`~grpo_lessons.core.advantages.combine_rewards`, TRL's
    ``sum_then_normalize``) through :func:`~grpo_lessons.core.advantages.group_advantages`, or, for a per-reward
    scale (GDPO's ``"decoupled"``), the matrix itself with ``weights``, columns kept apart.

    ``allow_unscored=True`` lets NaN through (unscorable rows: advantage 0, left out of the statistics).
    GDPO is NaN-aware per column whatever this flag says, as in TRL, but with ``allow_unscored=False`` a
    row NaN in every column still raises.  Shapes: returns ``(N,)``.
    """
    v = get_variant(variant)
    R = _reward_matrix_tensor(rewards, allow_nan=True)  # (N, K)
    if not allow_unscored and bool(torch.isnan(R).all(dim=1).any()):
        bad = torch.isnan(R).all(dim=1).nonzero().flatten().tolist()[:8]
        raise ValueError(f"rewards are NaN in every column at rows {bad} (unscorable); "
                         "pass allow_unscored=True to give them advantage 0 as TRL does")
    scale = v.scale_piece
    if scale.per_reward:
        return scale.fn(R, group_size, weights=weights, allow_unscored=allow_unscored)
    if R.shape[1] == 1 and weights is None:
        r = R[:, 0]
        if not allow_unscored:
            check_finite(r, "rewards")
    else:
        r = combine_rewards(R, weights)
    return group_advantages(r, group_size, scale=v.advantage_scale, allow_unscored=allow_unscored)


_GRPO = "Shao et al. 2024, DeepSeekMath, arXiv 2402.03300"

register(Variant(
    name="grpo",
    title="GRPO",
    advantage_scale="group", ratio_level="token", objective="clip", aggregation="seq_mean_token_mean",
    citation=_GRPO,
    loss_defaults={"epsilon": 0.2, "epsilon_high": None},
    train_defaults={"beta": 0.04, "group_size": 64, "learning_rate": 1e-6, "max_completion_length": 1024},
    trl={"loss_type": "grpo", "scale_rewards": "group", "importance_sampling_level": "token",
         "epsilon": 0.2, "beta": 0.04},
    notebook="03_clipped_surrogate_and_kl.ipynb",
    notes="Per-sequence mean of per-token means: short completions' tokens weigh more (length bias).",
))

register(Variant(
    name="bnpo",
    title="BNPO (token-mean GRPO)",
    advantage_scale="group", ratio_level="token", objective="clip", aggregation="token_mean",
    citation="TRL loss_type='bnpo' (batch-normalised token mean); cf. Yu et al. 2025, arXiv 2503.14476",
    loss_defaults={"epsilon": 0.2, "epsilon_high": None},
    train_defaults={"beta": 0.0},
    trl={"loss_type": "bnpo", "scale_rewards": "group", "epsilon": 0.2, "beta": 0.0},
    notebook="03_clipped_surrogate_and_kl.ipynb",
))

register(Variant(
    name="dr_grpo",
    title="Dr. GRPO",
    advantage_scale="none", ratio_level="token", objective="clip", aggregation="seq_mean_token_sum_norm",
    citation="Liu et al. 2025, Understanding R1-Zero-Like Training: A Critical Perspective, arXiv 2503.20783",
    loss_defaults={"epsilon": 0.2, "epsilon_high": None},
    train_defaults={"beta": 0.0, "group_size": 8, "learning_rate": 1e-6},
    trl={"loss_type": "dr_grpo", "scale_rewards": "none", "epsilon": 0.2, "beta": 0.0},
    notebook="06_dr_grpo.ipynb",
    notes="No std division and a constant normaliser (max completion length). Not the chapter's A*(1-pi_ref).",
))

register(Variant(
    name="dapo",
    title="DAPO (Decoupled Clip and Dynamic sAmpling Policy Optimization)",
    advantage_scale="group", ratio_level="token", objective="clip", aggregation="token_mean",
    citation="Yu et al. 2025, DAPO, arXiv 2503.14476",
    loss_defaults={"epsilon": 0.2, "epsilon_high": 0.28},
    train_defaults={"beta": 0.0, "group_size": 16, "learning_rate": 1e-6, "mask_truncated_completions": True,
                    "dynamic_sampling": True, "overlong_cache_len": 4096, "max_completion_length": 20480},
    trl={"loss_type": "dapo", "scale_rewards": "group", "epsilon": 0.2, "epsilon_high": 0.28,
         "mask_truncated_completions": True, "beta": 0.0},
    notebook="07_dapo.ipynb",
    notes="TRL's default loss_type, but TRL's default epsilon_high equals epsilon (0.2), not the paper's 0.28.",
))

register(Variant(
    name="gspo",
    title="GSPO",
    advantage_scale="group", ratio_level="sequence", objective="clip", aggregation="seq_mean_token_mean",
    citation="Zheng et al. 2025, Group Sequence Policy Optimization, arXiv 2507.18071",
    loss_defaults={"epsilon": 3e-4, "epsilon_high": 4e-4},
    train_defaults={"beta": 0.0},
    trl={"loss_type": "grpo", "importance_sampling_level": "sequence", "epsilon": 3e-4, "epsilon_high": 4e-4,
         "beta": 0.0},
    notebook="08_gspo.ipynb",
))

register(Variant(
    name="luspo",
    title="LUSPO (Length-Unbiased Sequence Policy Optimization)",
    advantage_scale="group", ratio_level="sequence", objective="clip", aggregation="seq_mean_token_sum",
    citation="Liu et al. 2026, Length-Unbiased Sequence Policy Optimization, arXiv 2602.05261",
    loss_defaults={"epsilon": 3e-4, "epsilon_high": 4e-4},
    train_defaults={"beta": 0.0},
    trl={"loss_type": "luspo", "importance_sampling_level": "sequence", "scale_rewards": "group",
         "epsilon": 3e-4, "epsilon_high": 4e-4, "beta": 0.0},
    notebook="08_gspo.ipynb",
    notes="GSPO with each completion's loss scaled by its length |o_i| (a token sum per completion, then the mean "
          "over completions), which removes GSPO's pull towards short completions. LUSPO changes only that weight: "
          "the clip range kept here is GSPO's.",
))

register(Variant(
    name="gspo_token",
    title="GSPO-token",
    advantage_scale="group", ratio_level="sequence_token", objective="clip", aggregation="seq_mean_token_mean",
    citation="Zheng et al. 2025, arXiv 2507.18071, Eq. (13)",
    loss_defaults={"epsilon": 3e-4, "epsilon_high": 4e-4},
    train_defaults={"beta": 0.0},
    trl=NOT_IN_TRL,  # TRL 1.16 has only "token" and "sequence" levels: use GRPOLessonsTrainer
    notebook="08_gspo.ipynb",
    notes="sg[s_i] * pi/sg[pi]: GSPO's value with a per-token gradient (per-token advantages possible).",
))

register(Variant(
    name="sapo",
    title="SAPO (Soft Adaptive Policy Optimization)",
    advantage_scale="group", ratio_level="token", objective="sapo", aggregation="seq_mean_token_mean",
    citation="Gao et al. 2025, Soft Adaptive Policy Optimization, arXiv 2511.20347",
    loss_defaults={"tau_pos": 1.0, "tau_neg": 1.05},
    train_defaults={"beta": 0.0},
    trl={"loss_type": "sapo", "sapo_temperature_pos": 1.0, "sapo_temperature_neg": 1.05, "beta": 0.0},
    notebook="10_sapo.ipynb",
    notes="f(r) = sigmoid(tau (r-1)) 4/tau; not the chapter's -A sigmoid((r-1)/tau) r.",
))

register(Variant(
    name="2-grpo",
    title="2-GRPO (G = 2)",
    advantage_scale="group", ratio_level="token", objective="clip", aggregation="seq_mean_token_mean",
    citation="Wu et al. 2025, It Takes Two: Your GRPO Is Secretly DPO, arXiv 2510.00977",
    loss_defaults={"epsilon": 0.2, "epsilon_high": None},
    train_defaults={"beta": 0.0, "group_size": 2, "group_size_defines_method": True, "prompts_per_step": 32},
    trl={"loss_type": "grpo", "num_generations": 2, "scale_rewards": "group", "beta": 0.0},
    notebook="09_two_grpo.ipynb",
    notes="No new loss: G = 2 with more prompts per step at the same number of completions (the trainer's "
          "default: 32 prompts x 2 = 8 x 8; the paper: 8x the prompts of its G = 16). Advantages are +-0.7071 or 0.",
))

# -- off-policy family (notebooks 12-14) ---------------------------------------------------------------

register(Variant(
    name="cispo",
    title="CISPO (Clipped IS-weight Policy Optimization)",
    advantage_scale="group", ratio_level="token", objective="cispo", aggregation="token_mean",
    citation="MiniMax 2025, MiniMax-M1, arXiv 2506.13585, Eq. (4); absolute cap as in Khatri et al. 2025, arXiv 2510.13786",
    loss_defaults={"epsilon_high": 5.0},
    train_defaults={"beta": 0.0},
    trl={"loss_type": "cispo", "scale_rewards": "group", "epsilon_high": 5.0, "beta": 0.0},
    notebook="14_cispo_scalerl.ipynb",
    notes="-sg(min(r, eps_max)) A log pi: clips the IS weight, never the gradient; no lower clip (the paper "
          "sets eps_low large). epsilon_high is an ABSOLUTE cap (TRL); TRL's unset epsilon_high falls back "
          "to epsilon = 0.2. Loss value is not 0 on policy. Not the chapter's 'batch norm + DAPO loss'.",
))

register(Variant(
    name="vespo",
    title="VESPO (smooth weight phi(W) of the sequence importance ratio)",
    advantage_scale="group", ratio_level="token", objective="vespo", aggregation="token_mean",
    citation="Shen et al. 2026, VESPO, arXiv 2602.10693",
    loss_defaults={"k_pos": 2.0, "lambda_pos": 3.0, "k_neg": 3.0, "lambda_neg": 2.0},
    train_defaults={"beta": 0.0},
    trl={"loss_type": "vespo", "scale_rewards": "group", "vespo_k_pos": 2.0, "vespo_lambda_pos": 3.0,
         "vespo_k_neg": 3.0, "vespo_lambda_neg": 2.0, "beta": 0.0},
    notebook="12_vespo.ipynb",
    notes="-sg[phi(W)] A log pi with phi(W) = W^k exp(lambda (1 - W)) of the full sequence ratio W; phi(1) = 1. "
          "Sampler-correction weights enter W instead of multiplying the loss.",
))

_DPPO = "Qi et al. 2026, Rethinking the Trust Region in LLM Reinforcement Learning, arXiv 2602.04879"
for _kind, _delta, _what in (
    ("binary_tv", 0.15, "|p - mu| of the sampled token"),
    ("binary_kl", 0.05, "the Bernoulli KL of the sampled token"),
    ("topk_tv", 0.15, "the TV distance over the sampler's top-K plus a rest bucket"),
    ("topk_kl", 0.05, "KL(mu || pi_theta) over the sampler's top-K plus a rest bucket"),
):
    register(Variant(
        name=f"dppo_{_kind}",
        title=f"DPPO ({_kind.replace('_', '-')})",
        advantage_scale="group", ratio_level="token", objective="dppo", aggregation="token_mean",
        citation=_DPPO,
        loss_defaults={"kind": _kind, "delta_low": _delta, "delta_high": _delta, "ratio_cap": 3.0},
        train_defaults={"beta": 0.0},
        trl=NOT_IN_TRL,  # not in TRL 1.16: GRPOLessonsTrainer computes it
        notebook="13_dppo.ipynb",
        notes=f"-A sg(min(p/mu, 3)) M log p; M drops a token that moved beyond delta = {_delta} in {_what}, in the "
              "direction its advantage pushes. mu = sampler log-probs when given, else pi_old."
              + (" Needs divergence= (topk_divergence)." if _kind.startswith("topk") else ""),
    ))

register(Variant(
    name="scalerl",
    title="ScaleRL (CISPO + prompt-level aggregation + batch-level advantage normalisation)",
    advantage_scale="batch_centered", ratio_level="token", objective="cispo", aggregation="prompt_mean",
    citation="Khatri et al. 2025, The Art of Scaling Reinforcement Learning Compute for LLMs, arXiv 2510.13786",
    loss_defaults={"epsilon_high": 5.0},
    train_defaults={"beta": 0.0},
    trl=NOT_IN_TRL,  # TRL has neither prompt-level aggregation nor centred-advantage batch std: GRPOLessonsTrainer
    notebook="14_cispo_scalerl.ipynb",
    notes="CISPO loss (eps_max = 5), token mean within each prompt's group then mean over prompts, advantages "
          "r - mean_g divided by the batch std of those centred advantages (not TRL's std of raw rewards); "
          "the recipe also filters zero-variance prompts and uses FP32 LM-head logits.",
))

# -- rewards family (notebooks 15-16) ------------------------------------------------------------------

register(Variant(
    name="gdpo",
    title="GDPO (Group reward-Decoupled normalization Policy Optimization)",
    advantage_scale="decoupled", ratio_level="token", objective="clip", aggregation="seq_mean_token_mean",
    citation="Liu et al. 2026, GDPO, arXiv 2601.05242",
    loss_defaults={"epsilon": 0.2, "epsilon_high": None},
    train_defaults={},
    trl={"loss_type": "grpo", "multi_objective_aggregation": "normalize_then_sum", "scale_rewards": "group"},
    notebook="15_gdpo.ipynb",
    notes="Each reward z-scored in its group, weighted sum, batch renormalisation (decoupled_advantages). "
          "TRL ignores scale_rewards under normalize_then_sum; the authors zero NaN rewards first.",
))

register(Variant(
    name="gopo",
    title="GOPO (Group Ordinal Policy Optimization)",
    advantage_scale="rank", ratio_level="token", objective="clip", aggregation="token_mean",
    citation="Choi et al. 2026, GOPO: Policy Optimization using Ranked Rewards, arXiv 2602.03876",
    loss_defaults={"epsilon": 0.2, "epsilon_high": None},
    train_defaults={},
    trl=NOT_IN_TRL,  # not in TRL 1.16: GRPOLessonsTrainer replaces TRL's advantages by rank_advantages
    notebook="16_gopo.ipynb",
    notes="A = 2 - 4 (rank - 1)/(G - 1), rank 1 = best; invariant to monotonic reward transforms. Ties: the "
          "package's default is average ranks, so equal rewards get equal advantages and an all-tied group gets 0 "
          "(no gradient from nothing); the authors' code breaks ties arbitrarily with a non-stable double argsort, "
          "reproduced deterministically by rank_advantages(ties='first'). Loss: the clipped surrogate with a token "
          "mean over the batch ('token_mean'); the authors' code takes the token mean of each micro-batch "
          "(TRL's bnpo), not a per-sequence mean.",
))

register(Variant(
    name="rloo",
    title="RLOO (REINFORCE Leave-One-Out advantages in GRPO's loss)",
    advantage_scale="leave_one_out", ratio_level="token", objective="clip", aggregation="seq_mean_token_mean",
    citation="Ahmadian et al. 2024, Back to Basics: Revisiting REINFORCE Style Optimization for Learning from "
             "Human Feedback in LLMs, arXiv 2402.14740",
    loss_defaults={"epsilon": 0.2, "epsilon_high": None},
    train_defaults={"beta": 0.0},
    trl=NOT_IN_TRL,  # TRL's GRPOTrainer has no leave-one-out scale: GRPOLessonsTrainer computes the advantages
    notebook="01_why_grpo.ipynb",
    notes="A_i = r_i - mean of the other G - 1 rewards = G/(G-1) (r_i - mean): no std division. TRL's own "
          "RLOOTrainer computes the same advantages only at beta = 0 (its default 0.05 puts the KL into the reward), "
          "and a different loss (sequence-level ratio).",
))

register(Variant(
    name="gmpo",
    title="GMPO (Geometric-Mean Policy Optimization)",
    advantage_scale="group", ratio_level="token", objective="gmpo", aggregation="seq_mean_token_mean",
    citation="Zhao et al. 2025, Geometric-Mean Policy Optimization, arXiv 2507.20673",
    loss_defaults={"epsilon": 0.4, "epsilon_high": 0.4},  # log-space bounds: ratios in [e^-0.4, e^0.4]
    train_defaults={"beta": 0.0},
    trl=NOT_IN_TRL,  # GRPOTrainer has no GMPO loss (TRL ships trl.experimental.gmpo.GMPOTrainer): GRPOLessonsTrainer
    notebook="08_gspo.ipynb",
    notes="-A_i exp(mean_t clip_A(log r_t)): the geometric mean of the token ratios, each clipped in log space on the "
          "side its advantage pushes (A > 0: log r <= eps_high; A < 0: log r >= -eps_low), then a mean over "
          "sequences. TRL 1.16 computes the same loss in trl.experimental.gmpo.GMPOTrainer with "
          "GMPOConfig(epsilon=0.4) (log-space epsilon / epsilon_high); its KL term is the per-sequence mean of k3 without the ratio weight "
          "(policy_loss's kl_importance_weighted=False). With no token clipped the value is GSPO's sequence-ratio "
          "objective without its clip.",
))
