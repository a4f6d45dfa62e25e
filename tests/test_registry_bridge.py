"""The TRL bridge derives from the registries: every registered variant, and the variant a config names.

1. For every variant in the registry, the advantages the bridge hands TRL's loss (TRL's own ``GRPOTrainer`` where
   ``make_trainer`` picks it, and ``GRPOLessonsTrainer`` built from ``grpo_config`` alone) equal
   ``variant_advantages`` on the same rewards: ties, all-equal groups, continuous rewards, unscorable rows.  A
   throwaway scale registered inside a test proves the check bites: registered without saying how TRL computes
   it, it is refused; registered with a false claim, the check fails; registered as "TRL cannot", it passes.
2. ``GRPOLessonsTrainer(args=grpo_config(name))`` without ``variant=`` trains ``name`` (gopo, scalerl, gspo_token,
   rloo), and a plain TRL ``GRPOConfig`` trains what TRL itself would compute, refusing only where that is ambiguous.
"""

from __future__ import annotations


import pytest
import torch

pytest.importorskip("trl")

from test_trl_bridge import build, loss_and_grads, parity_batch, small_config, tiny  # noqa: E402,F401
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from grpo_lessons import policy_loss, variant_advantages  # noqa: E402
from grpo_lessons.core.advantages import ADVANTAGE_SCALES, register_advantage_scale  # noqa: E402
from grpo_lessons.core.aggregation import prompt_weights  # noqa: E402
from grpo_lessons.core.objectives import OBJECTIVES, clipped_surrogate, register_objective  # noqa: E402
from grpo_lessons.core.variants import VARIANTS, Variant, get_variant, register  # noqa: E402
from grpo_lessons.integrations.trl_bridge import (  # noqa: E402
    GRPOLessonsConfig,
    GRPOLessonsTrainer,
    grpo_config,
    make_trainer,
    variant_for_config,
)

N, WEIGHTS = 12, [1.0, 0.5]
_g = torch.Generator().manual_seed(7)
TABLES = {
    # dyadic values: ties inside groups, and the all-equal groups give exact zeros in TRL's float means too
    "ties": [[1, 0], [1, 0], [0, 1], [2, 0], [0.5, 0.5], [0.5, 0.5], [0.5, 0.5], [0.5, 0.5],
             [0, 0], [1, 1], [1, 1], [0.25, 0]],
    "all_equal": [[1, 0]] * 4 + [[0, 0]] * 4 + [[0.5, 0.25], [1.5, 0], [0, 0.75], [1, 1]],
    "continuous": [[round(x, 3) for x in row] for row in torch.randn(N, 2, generator=_g).tolist()],
    # unscorable rows (None in every column), a column that does not apply, a group with one scored completion
    "unscored": [[0.2, 1.0], [None, None], [0.9, 0.0], [0.4, 0.3], [None, 0.5], [0.1, None], [0.5, 0.5],
                 [0.75, 0.25], [None, None], [None, None], [None, None], [0.7, 0.1]],
}
_REWARDS = {"table": TABLES["ties"]}


def _column(k):
    def reward(completions, **_):
        assert len(completions) == N
        return [None if row[k] is None else float(row[k]) for row in _REWARDS["table"]]
    reward.__name__ = f"column_{k}"
    return reward


def bridge_advantage_gaps(variant: str, tiny) -> dict[str, float]:
    """Max |advantages handed to TRL's loss - variant_advantages| per (trainer, reward table).

    The trainers: what ``make_trainer`` picks for the variant (TRL's own ``GRPOTrainer`` where TRL computes it), and
    ``GRPOLessonsTrainer`` given only ``grpo_config(variant)`` (no ``variant=``).
    """
    v = get_variant(variant)
    G = v.fixed_group_size or 4
    args = grpo_config(v, output_dir=tiny["out"], per_device_train_batch_size=N, max_completion_length=3,
                       reward_weights=WEIGHTS, save_strategy="no", seed=0, beta=0.0,
                       **({} if v.fixed_group_size else {"num_generations": G}))
    common = dict(model=tiny["path"], args=args, reward_funcs=[_column(0), _column(1)], train_dataset=tiny["ds"],
                  processing_class=tiny["tok"])
    trainers = {"make_trainer": make_trainer(v, **common), "args only": GRPOLessonsTrainer(**common)}
    gaps = {}
    for label, t in trainers.items():
        t.model.train()
        for name, table in TABLES.items():
            _REWARDS["table"] = table
            R = torch.tensor([[float("nan") if x is None else float(x) for x in row] for row in table])
            want = variant_advantages(R, G, v, weights=WEIGHTS, allow_unscored=True)
            got = t._generate_and_score_completions([t.train_dataset[i] for i in range(N // G) for _ in range(G)])
            gaps[f"{label} ({type(t).__name__})/{name}"] = float((got["advantages"].float() - want).abs().max())
    return gaps


def check_bridge_advantages(variant: str, tiny, tol: float = 1e-5) -> None:
    gaps = bridge_advantage_gaps(variant, tiny)
    bad = {k: d for k, d in gaps.items() if not d < tol}
    assert not bad, f"{variant}: the bridge hands TRL's loss other advantages than variant_advantages: {bad}"


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_bridge_advantages_equal_variant_advantages_for_every_registered_variant(variant, tiny):
    check_bridge_advantages(variant, tiny)


@pytest.fixture
def throwaway():
    """Register throwaway pieces inside a test; every one is removed afterwards."""
    added = []

    def add(registry, entry):
        added.append((registry, entry.name))
        return entry

    yield add
    for registry, name in reversed(added):
        if name in registry:
            registry.unregister(name)


def _doubled_centred(r, group_size, *, allow_unscored=False):
    """A throwaway scale: twice Dr. GRPO's centred advantage (no TRL setting gives it)."""
    from grpo_lessons import group_advantages

    return 2.0 * group_advantages(r, group_size, scale="none", allow_unscored=allow_unscored)


def test_a_new_scale_must_say_how_trl_computes_it_and_a_false_claim_fails_the_check(tiny, throwaway):
    with pytest.raises(TypeError, match="say how TRL computes it"):
        register_advantage_scale("doubled", _doubled_centred)  # no trl=: refused, nothing registered
    assert "doubled" not in ADVANTAGE_SCALES
    # a false claim: "TRL computes it with scale_rewards='none'" (it computes half of it)
    throwaway(ADVANTAGE_SCALES, register_advantage_scale(
        "doubled", _doubled_centred, trl={"multi_objective_aggregation": "sum_then_normalize", "scale_rewards": "none"}))
    throwaway(VARIANTS, register(Variant(name="doubled_grpo", title="throwaway", advantage_scale="doubled",
                                         ratio_level="token", objective="clip", aggregation="seq_mean_token_mean",
                                         citation="a test", loss_defaults={"epsilon": 0.2}, notebook="none")))
    gaps = bridge_advantage_gaps("doubled_grpo", tiny)
    assert min(gaps.values()) > 0.1, gaps  # every trainer and table is caught
    with pytest.raises(AssertionError, match="other advantages than variant_advantages"):
        check_bridge_advantages("doubled_grpo", tiny)
    # told the truth ("TRL cannot"), the bridge computes the advantages itself and the check passes
    register_advantage_scale("doubled", _doubled_centred, trl=None, replace=True)
    check_bridge_advantages("doubled_grpo", tiny)


# -- the config carries the variant; a plain GRPOConfig maps to what TRL computes --------------------------

def _direct_loss(trainer, batch, variant, **kw):
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], 1)
    att = torch.cat([batch["prompt_mask"], batch["completion_mask"]], 1)
    lp, _, _ = trainer._get_per_token_logps_and_entropies(trainer.model, ids, att, batch["completion_ids"].size(1))
    return policy_loss(lp, batch["old_per_token_logps"], batch["advantages"], batch["completion_mask"].float(),
                       variant=variant, max_completion_length=trainer.max_completion_length, **kw).loss


@pytest.mark.parametrize("variant, guessed_before", [("gopo", "dapo"), ("scalerl", "cispo"),
                                                     ("gspo_token", "grpo"), ("rloo", "grpo")])
def test_grpo_config_alone_trains_its_variant(variant, guessed_before, tiny):
    cfg = small_config(variant, tiny, per_device_train_batch_size=8)
    assert isinstance(cfg, GRPOLessonsConfig) and cfg.variant == variant
    assert variant_for_config(cfg) == variant
    t = build(GRPOLessonsTrainer, tiny, cfg)  # no variant=
    assert t.variant.name == variant
    # its advantages are the variant's (gopo: ranks, rloo: leave-one-out), not those of the TRL variant its fields
    # resemble (dapo / grpo: group z-scores)
    G = t.num_generations
    rows = [t.train_dataset[i] for i in (1, 3) for _ in range(G)]  # prompts whose reward varies
    torch.manual_seed(0)
    batch = t._generate_and_score_completions(rows)
    R = (t._last_rewards_per_func * t.reward_weights.unsqueeze(0)).nansum(1)  # (8,)
    torch.testing.assert_close(batch["advantages"], variant_advantages(R, G, variant))
    guess = get_variant(guessed_before)
    if guess.advantage_scale != t.variant.advantage_scale:
        assert float((batch["advantages"] - variant_advantages(R, G, guess)).abs().max()) > 1e-3
    # and its loss is the variant's (scalerl: prompt-level mean; gspo_token: sequence ratio) on a batch with
    # off-policy old log-probs, unequal lengths and random advantages
    batch = parity_batch(t, seed=1)
    kw = {}
    if t.variant.aggregation_piece.batch_weights is not None:  # weights of the whole batch, as the trainer keeps them
        batch["prompt_weights"] = kw["prompt_weights"] = prompt_weights(batch["completion_mask"].float(), G)
    loss = float(t._compute_loss(t.model, batch).detach())
    assert loss == pytest.approx(float(_direct_loss(t, batch, variant, **kw).detach()), abs=1e-6)
    if (guess.ratio_level, guess.objective, guess.aggregation) != (t.variant.ratio_level, t.variant.objective,
                                                                   t.variant.aggregation):
        # the guess would have been another loss on the same batch
        assert abs(loss - float(_direct_loss(t, batch, guessed_before).detach())) > 1e-4


def plain_config(tiny, **kw):
    base = dict(output_dir=tiny["out"], per_device_train_batch_size=4, num_generations=4, max_completion_length=8,
                gradient_checkpointing=False, report_to="none", use_cpu=True, bf16=False, save_strategy="no", seed=0)
    base.update(kw)
    return GRPOConfig(**base)


def test_plain_trl_configs_map_to_the_variant_trl_computes(tiny):
    assert variant_for_config(plain_config(tiny)) == "dapo"  # TRL's defaults
    assert variant_for_config(plain_config(tiny, loss_type="grpo")) == "grpo"
    assert variant_for_config(plain_config(tiny, loss_type="grpo", num_generations=2)) == "2-grpo"
    assert variant_for_config(plain_config(tiny, loss_type="grpo", importance_sampling_level="sequence")) == "gspo"
    assert variant_for_config(plain_config(tiny, loss_type="grpo",
                                           multi_objective_aggregation="normalize_then_sum")) == "gdpo"
    assert variant_for_config(plain_config(tiny, loss_type="dr_grpo", scale_rewards="none")) == "dr_grpo"
    # no registered variant is TRL's dr_grpo loss with its default group-scaled advantages: the pieces are
    v = variant_for_config(plain_config(tiny, loss_type="dr_grpo"))
    assert isinstance(v, Variant) and v.name not in VARIANTS
    assert (v.advantage_scale, v.objective, v.aggregation) == ("group", "clip", "seq_mean_token_sum_norm")
    # a config from grpo_config whose deciding field was overridden still names its variant: GRPO with LUSPO's
    # aggregation (a token sum per completion) on its token-level ratios
    v = variant_for_config(grpo_config("grpo", loss_type="luspo"))
    assert v.name == "grpo[loss_type=luspo]" and (v.ratio_level, v.aggregation) == ("token", "seq_mean_token_sum")


@pytest.mark.parametrize("fields", [{"loss_type": "dr_grpo"}, {"loss_type": "dapo", "scale_rewards": "none"},
                                    {"loss_type": "sapo", "beta": 0.04},
                                    # epsilon_high unset: TRL's cap is epsilon (0.2), not the registry's 5.0
                                    {"loss_type": "cispo"}])
def test_a_plain_config_trains_exactly_what_trl_would(fields, tiny):
    """Loss and gradients of GRPOLessonsTrainer(args=plain GRPOConfig) equal TRL's own on the same batch."""
    cfg = plain_config(tiny, **fields)
    native = build(GRPOTrainer, tiny, cfg)
    ours = build(GRPOLessonsTrainer, tiny, cfg)  # no variant=
    batch = parity_batch(native, seed=2)
    l_nat, g_nat = loss_and_grads(native, batch)
    l_our, g_our = loss_and_grads(ours, batch)
    assert float(l_nat.abs()) > 1e-4 and abs(float(l_nat - l_our)) < 1e-6
    assert max(float((g_nat[n] - g_our[n]).abs().max()) for n in g_nat) < 1e-6
    assert not ours._own_advantages()  # TRL's advantages are the variant's: the trainer keeps them


def test_ambiguous_configs_fall_back_to_trls_loss(tiny, throwaway):
    # a second objective that TRL's loss_type "dapo" would also select makes a plain dapo config ambiguous
    throwaway(OBJECTIVES, register_objective("clip_copy", clipped_surrogate, params=("epsilon", "epsilon_high"),
                                             trl={"token_mean": "dapo"},
                                             trl_fields={"epsilon": "epsilon", "epsilon_high": "epsilon_high"}))
    throwaway(VARIANTS, register(Variant(name="dapo_copy", title="throwaway", advantage_scale="group",
                                         ratio_level="token", objective="clip_copy", aggregation="token_mean",
                                         citation="a test", loss_defaults={"epsilon": 0.2}, notebook="none")))
    # TRL accepts the config: no refusal, one warning naming why, and TRL's own loss
    with pytest.warns(UserWarning, match=r"\['dapo', 'dapo_copy'\] all match.*TRL's own loss"):
        assert variant_for_config(plain_config(tiny)) is None
    with pytest.warns(UserWarning, match="TRL's own loss"):
        t = GRPOLessonsTrainer(model=tiny["path"], args=plain_config(tiny), reward_funcs=[_column(0)],
                               train_dataset=tiny["ds"], processing_class=tiny["tok"])
    assert t.variant is None and t.loss_impl == "trl" and not t._own_advantages()
    assert variant_for_config(grpo_config("dapo", output_dir=tiny["out"])) == "dapo"  # a named config is not


def test_an_explicit_variant_wins_over_the_config_and_says_so(tiny):
    cfg = small_config("gspo", tiny)
    with pytest.warns(UserWarning, match=r"grpo_config\('gspo'\) but variant='gspo_token'"):
        t = build(GRPOLessonsTrainer, tiny, cfg, variant="gspo_token")
    assert t.variant.name == "gspo_token"
