"""Every family of pieces is a registry like VARIANTS, and everything downstream reads it.

* Each family (advantage scales, ratio levels, objectives, aggregations, rollout corrections, variants) is a
  read-only :class:`~grpo_lessons.core.registry.Registry` with a ``register_*`` function; a register function
  refuses an entry that does not say how TRL computes it; unknown names fail with the known ones listed.
* One throwaway piece of every family, registered here and nowhere else, goes through ``policy_loss``,
  ``variant_advantages``, ``rollout_weights``, the command line and ``grpo_config`` with no other edit, and gives
  the hand-computed numbers.
* The modules that consume the registries hold no comparison with a registered name (no ``if x == "rank"``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

from grpo_lessons import policy_loss, rollout_weights, variant_advantages
from grpo_lessons.core.advantages import ADVANTAGE_SCALES, register_advantage_scale
from grpo_lessons.core.aggregation import AGGREGATIONS, aggregate, register_aggregation
from grpo_lessons.core.correction import CORRECTION_MODES, register_rollout_correction
from grpo_lessons.core.objectives import OBJECTIVES, ObjectiveOut, register_objective
from grpo_lessons.core.ratios import RATIO_LEVELS, register_ratio_level
from grpo_lessons.core.registry import Registry
from grpo_lessons.core.variants import VARIANTS, Variant, register

FAMILIES = {"advantage scale": ADVANTAGE_SCALES, "ratio level": RATIO_LEVELS, "objective": OBJECTIVES,
            "aggregation": AGGREGATIONS, "rollout correction mode": CORRECTION_MODES, "variant": VARIANTS}
ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("kind", sorted(FAMILIES))
def test_each_family_is_a_read_only_registry(kind):
    reg = FAMILIES[kind]
    assert isinstance(reg, Registry) and len(reg) >= 3
    name = next(iter(reg))
    with pytest.raises(TypeError):
        reg[name] = reg[name]  # no item assignment: only register_* adds
    with pytest.raises(ValueError, match=f"unknown {kind} 'nope'; known: " + ", ".join(sorted(reg))):
        reg.lookup("nope")
    with pytest.raises(ValueError, match="already registered"):
        reg.add(name, reg[name])


@pytest.mark.parametrize("register_fn, args", [
    (register_advantage_scale, ("x", lambda r, g, **k: r)),
    (register_ratio_level, ("x", lambda lp, olp, m: lp - olp)),
    (register_objective, ("x", lambda ratio, adv: None)),
    (register_rollout_correction, ("x", lambda rho, lo, hi: rho)),
])
def test_a_piece_must_say_how_trl_computes_it(register_fn, args):
    kw = {"sequence": False, "masks": False} if register_fn is register_rollout_correction else {}
    with pytest.raises(TypeError, match="say how TRL computes it"):
        register_fn(*args, **kw)
    assert all("x" not in reg for reg in FAMILIES.values())


def test_a_variant_is_checked_against_the_registries():
    with pytest.raises(ValueError, match=r"advantage_scale 'zscore' not in .*objective 'ppo' not in"):
        Variant(name="bad", title="t", advantage_scale="zscore", ratio_level="token", objective="ppo",
                aggregation="token_mean", citation="c")


# -- one new piece of every family, through everything downstream --------------------------------------------

def _double_token(logp, old_logp, mask):
    return 2.0 * (logp - old_logp)  # (B, T)


def _linear(ratio, adv):
    return ObjectiveOut(-ratio * adv, None, None)  # REINFORCE-like: no clip


def _masked_sum(per_token, m):
    return (per_token * m).sum()


def _cap_at_one(rho, clip_min, clip_max):
    return rho.clamp(max=1.0)


def _sign(r, group_size, *, allow_unscored=False):
    g = r.view(-1, group_size)
    return torch.sign(g - g.mean(dim=1, keepdim=True)).reshape(-1)


@pytest.fixture
def new_pieces():
    added = [
        (ADVANTAGE_SCALES, register_advantage_scale("sign", _sign, trl=None)),
        (RATIO_LEVELS, register_ratio_level("double_token", _double_token, trl=None)),
        (OBJECTIVES, register_objective("linear", _linear, trl=None)),
        (AGGREGATIONS, register_aggregation("masked_sum", _masked_sum)),
        (CORRECTION_MODES, register_rollout_correction("token_cap1", _cap_at_one, sequence=False, masks=False,
                                                       trl=None)),
    ]
    v = register(Variant(name="toy", title="toy", advantage_scale="sign", ratio_level="double_token",
                         objective="linear", aggregation="masked_sum", citation="a test", notebook="none"))
    yield v
    VARIANTS.unregister(v.name)
    for reg, entry in added:
        reg.unregister(entry.name)


def test_new_pieces_reach_policy_loss_advantages_and_corrections(new_pieces):
    logp = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -0.7, -9.0]], requires_grad=True)
    old = torch.tensor([[-1.1, -1.8, -0.5], [-0.3, -0.9, -9.0]])
    samp = torch.tensor([[-1.0, -2.0, -0.4], [-0.5, -0.9, -9.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    adv = torch.tensor([1.0, -0.5])
    out = policy_loss(logp, old, adv, mask, variant="toy", sampling_logp=samp, rollout_correction="token_cap1")
    # by hand: ratio = exp(2 (logp - old)), loss = -sum ratio * A * min(exp(old - samp), 1) over completion tokens
    ratio = torch.exp(2 * (logp.detach() - old))
    w = torch.exp(old - samp).clamp(max=1.0)
    want = -(ratio * adv[:, None] * w * mask).sum()
    assert float(out.loss.detach()) == pytest.approx(float(want), rel=1e-6)
    out.loss.backward()
    assert torch.allclose(logp.grad, -2 * ratio * adv[:, None] * w * mask, atol=1e-6)
    assert torch.equal(rollout_weights(old, samp, mask, "token_cap1"), torch.where(mask > 0, w, torch.ones_like(w)))
    assert float(aggregate(torch.ones(2, 3), mask, "masked_sum")) == 5.0
    r = torch.tensor([0.0, 1.0, 3.0, 3.0])
    assert variant_advantages(r, 2, "toy").tolist() == [-1.0, 1.0, 0.0, 0.0]


def test_new_pieces_reach_the_command_line_and_the_trl_config(new_pieces):
    from grpo_lessons.training.cli import build_parser, config_from_args

    text = build_parser()._subparsers._group_actions[0].choices["train"].format_help()
    assert "toy" in text and "token_cap1" in text  # the help lists the registries as they are now
    cfg = config_from_args(build_parser().parse_args(["train", "--variant", "toy", "--rollout-correction",
                                                      "token_cap1"]))
    cfg.validate()
    pytest.importorskip("trl")
    from grpo_lessons.integrations.trl_bridge import grpo_config, trl_supports

    assert not trl_supports("toy")  # no piece has a TRL setting: GRPOLessonsTrainer computes it
    with pytest.raises(ValueError, match="no TRL vllm_importance_sampling_mode"):
        grpo_config("toy", rollout_correction="token_cap1")
    assert grpo_config("toy").variant == "toy"


# -- no switch on registered names downstream -----------------------------------------------------------------

CONSUMERS = ["grpo_lessons/core/losses.py", "grpo_lessons/core/variants.py", "grpo_lessons/core/advantages.py",
             "grpo_lessons/core/aggregation.py", "grpo_lessons/core/correction.py", "grpo_lessons/core/ratios.py",
             "grpo_lessons/core/objectives.py", "grpo_lessons/integrations/trl_bridge.py",
             "grpo_lessons/training/cli.py", "grpo_lessons/training/train_config.py",
             "grpo_lessons/training/trainer.py", "grpo_lessons/training/update.py",
             "grpo_lessons/training/train_setup.py"]


def _string_constants(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [s for elt in node.elts for s in _string_constants(elt)]
    return []


#: Scripts and modules outside the package's consumers above that choose by a registered name (a variant, a piece, a
#: task) all the same: each must read the registry entry instead.
CHOOSERS = ["benchmarks/variant_study.py", "benchmarks/gpu_bench.py", "grpo_lessons/training/data.py"]


def _registered_names() -> set[str]:
    from grpo_lessons.training.data import TASKS

    return {name for reg in FAMILIES.values() for name in reg} | set(TASKS)


@pytest.mark.parametrize("path", CONSUMERS + CHOOSERS)
def test_no_comparison_with_a_registered_name(path):
    names = _registered_names()
    found = []
    for node in ast.walk(ast.parse((ROOT / path).read_text())):
        if isinstance(node, ast.Compare):
            presence = all(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops)  # `"grpo" in chosen`: not a switch
            for side in (node.comparators if presence else (node.left, *node.comparators)):
                found += [(node.lineno, s) for s in _string_constants(side) if s in names]
    assert not found, f"{path} switches on registered names (read the registry entry instead): {found}"


@pytest.mark.parametrize("path", CONSUMERS)
def test_no_list_of_registered_names_to_switch_on(path):
    """A module-level tuple / list / set of registered names (``_MICRO_BATCH = ("bnpo",)``) is a switch in waiting:
    the property it stands for belongs in the registry entry."""
    names = _registered_names()
    found = []
    for node in ast.parse((ROOT / path).read_text()).body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, (ast.Tuple, ast.List, ast.Set)):
            found += [(node.lineno, s) for s in _string_constants(node.value) if s in names]
    assert not found, f"{path} keeps a list of registered names (put the property in the registry entry): {found}"
