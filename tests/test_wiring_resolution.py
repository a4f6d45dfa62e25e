"""One resolution from (variant, config, overrides) to the pieces that train, and registries that refuse what they
would otherwise drop.

1. Registries: a misspelt ``loss_defaults`` / ``train_defaults`` / ``trl`` key, an objective that does not say which
   ``GRPOConfig`` field sets each of its parameters, and an empty ``trl`` mapping standing for "TRL cannot compute
   it" are refused when they are registered (``NOT_IN_TRL`` says it explicitly).
2. Objectives: one whose loss has no gradient path to ``logp`` (built from the detached ``log_ratio``) is refused
   at the first loss; every registered objective's on-policy gradient is REINFORCE's under its aggregation.
3. A config from ``grpo_config(name, **overrides)`` trains ``name`` with the overridden fields where the pieces
   compose, and is refused naming both where they do not; ``args.variant``, the config the trainer logs and the
   pieces that train agree.  ``make_trainer(name, args=...)`` trains ``name`` whatever ``args`` say.
4. A config for a variant TRL's own ``GRPOTrainer`` does not compute names the missing pieces in TRL's fields, so
   TRL's trainer refuses it instead of training something else; a ``loss_type`` TRL lacks is refused when the
   trainer is built, not at the first loss.
"""

from __future__ import annotations

import warnings

import pytest
import torch

from grpo_lessons import policy_loss, variant_advantages
from grpo_lessons.core.aggregation import aggregate
from grpo_lessons.core.objectives import OBJECTIVES, ObjectiveOut, clipped_surrogate, register_objective
from grpo_lessons.core.variants import VARIANTS, Variant, get_variant, register


@pytest.fixture
def throwaway():
    """Register throwaway entries inside a test; every one is removed afterwards."""
    added = []

    def add(registry, name):
        added.append((registry, name))

    yield add
    for registry, name in reversed(added):
        if name in registry:
            registry.unregister(name)


def _variant(**kw) -> Variant:
    fields = dict(name="throwaway", title="a test", advantage_scale="group", ratio_level="token", objective="clip",
                  aggregation="token_mean", citation="a test", loss_defaults={"epsilon": 0.2}, notebook="none")
    fields.update(kw)
    return Variant(**fields)


# -- 1. registries refuse what they would otherwise drop --------------------------------------------------------

def test_a_misspelt_loss_default_is_refused():
    with pytest.raises(ValueError, match=r"loss_defaults.*'epsilon_hgh'.*did you mean epsilon_high"):
        _variant(loss_defaults={"epsilon": 0.2, "epsilon_hgh": 0.28})


def test_a_misspelt_train_default_is_refused():
    with pytest.raises(ValueError, match=r"train_defaults.*'betta'.*did you mean beta"):
        _variant(train_defaults={"betta": 0.04})


def test_not_in_trl_is_an_explicit_marker():
    from grpo_lessons.core.variants import NOT_IN_TRL

    with pytest.raises(ValueError, match=r"trl=\{\}.*NOT_IN_TRL"):
        _variant(advantage_scale="rank", trl={})  # an empty mapping no longer means "TRL cannot compute it"
    v = _variant(advantage_scale="rank", trl=NOT_IN_TRL)
    assert v.trl is NOT_IN_TRL and not v.in_trl and not v.trl and dict(v.trl) == {}
    with pytest.raises(ValueError, match="TRL computes every piece"):
        _variant(trl=NOT_IN_TRL)  # GRPO's pieces with DAPO's aggregation: TRL has them all
    assert _variant(advantage_scale="rank").trl is NOT_IN_TRL  # left out: read off the pieces
    for name, entry in VARIANTS.items():
        assert (entry.trl is NOT_IN_TRL) == (not entry.in_trl), name


def test_an_objective_must_say_which_config_field_sets_each_parameter(throwaway):
    throwaway(OBJECTIVES, "clip_without_fields")
    with pytest.raises(TypeError, match=r"trl_fields.*'epsilon'"):
        register_objective("clip_without_fields", clipped_surrogate, params=("epsilon", "epsilon_high"), trl=None)
    assert "clip_without_fields" not in OBJECTIVES
    throwaway(OBJECTIVES, "clip_fields")
    register_objective("clip_fields", clipped_surrogate, params=("epsilon", "epsilon_high", "delta"), trl=None,
                       trl_fields={"epsilon": "epsilon", "epsilon_high": "epsilon_high", "delta": None})
    assert OBJECTIVES["clip_fields"].trl_fields["delta"] is None  # no GRPOConfig field: a loss option only


def test_trl_keys_are_checked_against_grpoconfig(throwaway):
    pytest.importorskip("trl")
    import grpo_lessons.integrations.trl_bridge  # noqa: F401  (loading the bridge checks every registration)

    throwaway(VARIANTS, "typo")
    with pytest.raises(ValueError, match=r"'loss_tpye'.*did you mean loss_type"):
        register(_variant(name="typo", trl={"loss_tpye": "grpo"}))
    assert "typo" not in VARIANTS
    throwaway(OBJECTIVES, "typo_objective")
    with pytest.raises(ValueError, match=r"'epsilon_hi'.*did you mean epsilon_high"):
        register_objective("typo_objective", clipped_surrogate, params=("epsilon", "epsilon_high"), trl=None,
                           trl_fields={"epsilon": "epsilon", "epsilon_high": "epsilon_hi"})
    assert "typo_objective" not in OBJECTIVES


# -- 2. the gradient path of an objective ----------------------------------------------------------------------

def _batch(seed=0, B=4, T=5):
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(B, T, generator=g) - 0.1
    mask = (torch.arange(T)[None, :] < torch.tensor([5, 3, 1, 4])[:, None]).float()
    adv = torch.randn(B, generator=g)
    return old, mask, adv


def _from_log_ratio(ratio, adv, *, log_ratio):
    return ObjectiveOut(-adv * torch.exp(log_ratio), None, None)  # the right value, built on a detached input


def test_an_objective_with_no_policy_gradient_is_refused(throwaway):
    throwaway(OBJECTIVES, "detached")
    register_objective("detached", _from_log_ratio, inputs=("log_ratio",), trl=None)
    throwaway(VARIANTS, "detached_v")
    register(_variant(name="detached_v", objective="detached", loss_defaults={}))
    old, mask, adv = _batch()
    logp = (old + 0.05).requires_grad_(True)
    # beta > 0: the KL term alone would give the loss a gradient, so nothing else would notice
    with pytest.raises(ValueError, match=r"objective 'detached'.*no gradient path to logp"):
        policy_loss(logp, old, adv, mask, variant="detached_v", beta=0.04, ref_logp=old)
    # no gradient asked for (an evaluation, a plot): the value is still computed
    out = policy_loss(logp.detach(), old, adv, mask, variant="detached_v")
    assert torch.isfinite(out.loss)


def reinforce_gap(name: str) -> float:
    """Max |grad of policy_loss(name) - grad of REINFORCE under name's aggregation| over logp, on policy."""
    v = get_variant(name)
    old, mask, adv = _batch(seed=3)
    logp = old.clone().requires_grad_(True)
    kw = {"max_completion_length": mask.shape[1], "group_size": 2}
    extra = {"divergence": torch.zeros_like(old)} if v.objective_piece.divergence_kind(v.loss_defaults) else {}
    policy_loss(logp, old, adv, mask, variant=v, **kw, **extra).loss.backward()
    ref = old.clone().requires_grad_(True)
    aggregate(-adv[:, None] * ref, mask, v.aggregation, **kw).backward()
    return float((logp.grad - ref.grad).abs().max())


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_every_objective_is_reinforce_on_policy(name):
    assert reinforce_gap(name) < 1e-6


def test_the_reinforce_check_catches_a_gradient_that_is_zero(throwaway):
    def zero_gradient(ratio, adv, *, logp, log_ratio):
        return ObjectiveOut(-adv * torch.exp(log_ratio) + 0.0 * logp, None, None)  # a gradient path, of zeros

    throwaway(OBJECTIVES, "zero_grad")
    register_objective("zero_grad", zero_gradient, inputs=("logp", "log_ratio"), trl=None)
    throwaway(VARIANTS, "zero_grad_v")
    register(_variant(name="zero_grad_v", objective="zero_grad", loss_defaults={}))
    assert reinforce_gap("zero_grad_v") > 0.05


# -- 3. (variant, config, overrides) -> the pieces that train --------------------------------------------------

pytest.importorskip("trl")

from test_registry_bridge import plain_config  # noqa: E402
from test_trl_bridge import build, small_config, tiny  # noqa: E402,F401
from trl import GRPOTrainer  # noqa: E402

from grpo_lessons.integrations.trl_bridge import (  # noqa: E402
    GRPOLessonsTrainer,
    make_trainer,
    variant_for_config,
)

PIECES = ("advantage_scale", "ratio_level", "objective", "aggregation")


def _pieces(v) -> dict[str, str]:
    return {p: getattr(v, p) for p in PIECES}


def _ours(messages) -> list[str]:
    """The package's own warnings among ``messages`` (transformers and TRL may add theirs)."""
    return [str(w.message) for w in messages if "grpo_lessons" in (w.filename or "") or "variant" in str(w.message)]


@pytest.mark.parametrize("name, fields, changed", [
    ("gopo", {"loss_type": "bnpo"}, {}),  # GOPO's ranks kept; bnpo's token count per micro-batch
    ("rloo", {"loss_type": "dapo"}, {"aggregation": "token_mean"}),
    ("scalerl", {"scale_rewards": "none"}, {"advantage_scale": "none"}),
    ("gspo_token", {"loss_type": "dapo"}, {"aggregation": "token_mean"}),
    ("gdpo", {"multi_objective_aggregation": "sum_then_normalize"}, {"advantage_scale": "group"}),
    ("rloo", {"importance_sampling_level": "sequence"}, {"ratio_level": "sequence"}),
])
def test_an_override_trains_the_named_variant_with_that_field(name, fields, changed, tiny):
    cfg = small_config(name, tiny, **fields)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        t = build(GRPOLessonsTrainer, tiny, cfg)
    assert not _ours(seen), _ours(seen)
    assert _pieces(t.variant) == {**_pieces(get_variant(name)), **changed}
    assert t.variant.name.startswith(f"{name}[")
    logged = t.args.to_dict()
    assert logged["variant"] == name and all(logged[k] == val for k, val in fields.items())
    assert variant_for_config(cfg).name == t.variant.name  # one resolution, whoever asks


def test_gopo_with_bnpo_keeps_its_ranks_and_counts_tokens_per_micro_batch(tiny):
    t = build(GRPOLessonsTrainer, tiny, small_config("gopo", tiny, loss_type="bnpo", per_device_train_batch_size=8))
    assert not t._global_token_norm()  # bnpo: the micro-batch's own tokens
    assert build(GRPOLessonsTrainer, tiny, small_config("gopo", tiny))._global_token_norm()  # GOPO's default
    G = t.num_generations
    rows = [t.train_dataset[i] for i in (1, 3) for _ in range(G)]  # prompts whose reward varies
    torch.manual_seed(0)
    batch = t._generate_and_score_completions(rows)
    R = (t._last_rewards_per_func * t.reward_weights.unsqueeze(0)).nansum(1)
    torch.testing.assert_close(batch["advantages"], variant_advantages(R, G, "gopo"))


@pytest.mark.parametrize("name, fields, named", [
    ("scalerl", {"loss_type": "dapo"}, ["scalerl", "loss_type='dapo'", "cispo", "clip"]),
    ("dppo_binary_tv", {"loss_type": "grpo"}, ["dppo_binary_tv", "loss_type='grpo'", "dppo", "clip"]),
    ("grpo", {"loss_type": "sapo"}, ["grpo", "loss_type='sapo'", "clip", "sapo"]),
    ("2-grpo", {"num_generations": 4}, ["2-grpo", "num_generations=4", "2"]),
    ("gopo", {"loss_type": "not_a_loss"}, ["gopo", "loss_type='not_a_loss'"]),
    ("grpo", {"importance_sampling_level": "per_word"}, ["grpo", "importance_sampling_level='per_word'"]),
])
def test_a_field_that_does_not_compose_is_refused_naming_both(name, fields, named, tiny):
    with pytest.raises(ValueError) as err:
        small_config(name, tiny, **fields)
    assert all(s in str(err.value) for s in named), str(err.value)
    # the same check when the config is changed after it was made: at the trainer, before anything is loaded
    cfg = small_config(name, tiny)
    for k, val in fields.items():
        setattr(cfg, k, val)
    with pytest.raises(ValueError, match=name):
        build(GRPOLessonsTrainer, tiny, cfg)


def _common(tiny):
    from test_trl_bridge import text_reward

    return dict(model=tiny["path"], reward_funcs=[text_reward], train_dataset=tiny["ds"], processing_class=tiny["tok"])


def test_make_trainer_never_ignores_its_variant(tiny):
    plain = plain_config(tiny, loss_type="dapo")
    with pytest.warns(UserWarning, match=r"training 'gspo'.*loss_type='dapo'"):
        t = make_trainer("gspo", args=plain, **_common(tiny))
    assert (t.args.variant, t.args.loss_type, t.args.importance_sampling_level) == ("gspo", "grpo", "sequence")
    assert (t.loss_type, t.importance_sampling_level) == ("grpo", "sequence")  # what TRL's trainer computes
    assert plain.loss_type == "dapo" and plain.importance_sampling_level == "token"  # the caller's config: untouched
    made = small_config("grpo", tiny)
    with pytest.warns(UserWarning, match=r"grpo_config\('grpo'\) but variant='sapo'"):
        t = make_trainer("sapo", args=made, **_common(tiny))
    assert (t.args.variant, t.loss_type) == ("sapo", "sapo") and made.loss_type == "grpo"
    # a variant TRL lacks, given a plain config: the subclass, with the variant's pieces named in its config
    with pytest.warns(UserWarning, match="training 'rloo'"):
        t = make_trainer("rloo", args=plain_config(tiny, loss_type="grpo"), **_common(tiny))
    assert isinstance(t, GRPOLessonsTrainer) and t.variant.name == "rloo" and t.args.scale_rewards == "leave_one_out"
    # nothing to say when the config already is the variant's
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        make_trainer("gspo", args=small_config("gspo", tiny), **_common(tiny))
    assert not _ours(seen), _ours(seen)


def test_an_explicit_variant_relabels_the_trainers_copy_of_the_config(tiny):
    cfg = small_config("gspo", tiny)
    with pytest.warns(UserWarning, match=r"grpo_config\('gspo'\) but variant='gspo_token'"):
        t = build(GRPOLessonsTrainer, tiny, cfg, variant="gspo_token")
    assert t.variant.name == "gspo_token"
    assert (t.args.variant, t.args.importance_sampling_level) == ("gspo_token", "sequence_token")
    assert (cfg.variant, cfg.importance_sampling_level) == ("gspo", "sequence")


# -- 4. configs TRL's own trainer cannot misread ---------------------------------------------------------------

TRL_REFUSES = "Unknown loss type|Invalid value for scale_rewards|Unknown importance sampling level"


@pytest.mark.parametrize("name", sorted(n for n, v in VARIANTS.items() if not v.in_trl))
def test_trls_own_trainer_refuses_a_config_for_a_variant_it_lacks(name, tiny):
    t = build(GRPOTrainer, tiny, small_config(name, tiny))
    G = t.num_generations
    rows = [t.train_dataset[i] for i in (1, 3) for _ in range(G)]
    with pytest.raises(ValueError, match=TRL_REFUSES):
        batch = t._generate_and_score_completions(rows)
        t._compute_loss(t.model, batch)
    # the subclass trains it from the same config
    ours = build(GRPOLessonsTrainer, tiny, small_config(name, tiny))
    assert ours.variant.name == name and torch.isfinite(ours._compute_loss(ours.model,
                                                                            ours._generate_and_score_completions(rows)))


@pytest.mark.parametrize("objective", sorted(n for n, o in OBJECTIVES.items() if o.trl is None))
def test_a_loss_type_trl_lacks_is_refused_when_the_trainer_is_built(objective, tiny):
    with pytest.raises(ValueError, match=rf"loss_type='{objective}'.*grpo_config"):
        build(GRPOLessonsTrainer, tiny, plain_config(tiny, loss_type=objective))
