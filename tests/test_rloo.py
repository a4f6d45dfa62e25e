"""RLOO through the registry: the leave-one-out advantage scale and the ``rloo`` variant (GRPO's loss pieces).

Ahmadian et al. 2024, arXiv 2402.14740: ``A_i = r_i - 1/(G-1) sum_{j != i} r_j = G/(G-1) (r_i - mean)``.
References: hand-computed cases from that equation, hypothesis properties, and TRL 1.16's own ``RLOOTrainer``
advantage computation run on the same rewards.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from grpo_lessons import group_advantages, policy_loss, variant_advantages
from grpo_lessons.core.advantages import ADVANTAGE_SCALES, combine_rewards, leave_one_out_advantages
from grpo_lessons.core.variants import get_variant

NAN = float("nan")


def test_leave_one_out_by_hand():
    r = [1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 1.0, 0.0]
    # group 1: 1 - 0 = 1, 0 - 1/3; group 2: all equal -> 0; group 3: 0 - 2/3, 1 - 1/3
    want = [1.0, -1 / 3, -1 / 3, -1 / 3, 0.0, 0.0, 0.0, 0.0, -2 / 3, 2 / 3, 2 / 3, -2 / 3]
    got = leave_one_out_advantages(r, 4)
    assert got.tolist() == pytest.approx(want, abs=1e-7)
    assert torch.equal(got, group_advantages(r, 4, scale="leave_one_out"))  # the registered scale is the function
    assert torch.equal(got[4:8], torch.zeros(4))  # exact zeros in an all-equal group
    # G = 2: +-(r_1 - r_2), twice the centred advantage
    assert leave_one_out_advantages([3.0, 1.0], 2).tolist() == [2.0, -2.0]


def test_unscored_rows_leave_the_baseline_by_hand():
    r = [1.0, NAN, 0.0, 0.0, NAN, 2.0, NAN, NAN]  # group 1: three scored; group 2: one scored
    got = leave_one_out_advantages(r, 4, allow_unscored=True)
    # 1 - (0 + 0)/2 = 1; 0 - (1 + 0)/2 = -0.5; the NaN row 0; a lone scored completion has no baseline: 0
    assert got.tolist() == pytest.approx([1.0, 0.0, -0.5, -0.5, 0.0, 0.0, 0.0, 0.0], abs=1e-7)
    with pytest.raises(ValueError, match="NaN or inf"):
        leave_one_out_advantages(r, 4)


@pytest.mark.parametrize("rewards, g, msg", [
    ([1.0, 0.0], 1, "group_size >= 2"),
    ([1.0, 0.0, 1.0], 2, "multiple of group_size"),
    ([1.0, float("inf")], 2, "inf"),
    ([[1.0, 0.0]], 2, "1-D"),
])
def test_clear_errors(rewards, g, msg):
    with pytest.raises(ValueError, match=msg):
        leave_one_out_advantages(rewards, g)


groups = st.integers(2, 6).flatmap(lambda G: st.tuples(
    st.just(G), st.lists(st.floats(-50, 50), min_size=G, max_size=3 * G).map(lambda xs: xs[: len(xs) // G * G])))


@settings(deadline=None, max_examples=60)
@given(groups, st.floats(-10, 10))
def test_properties(case, shift):
    G, vals = case
    r = torch.tensor(vals, dtype=torch.float64)
    a = leave_one_out_advantages(r, G)
    centred = group_advantages(r, G, scale="none")
    assert torch.allclose(a, G / (G - 1) * centred, atol=1e-9)  # = G/(G-1) (r - mean)
    assert torch.allclose(a.view(-1, G).sum(1), torch.zeros(len(vals) // G, dtype=r.dtype), atol=1e-9)
    assert torch.allclose(leave_one_out_advantages(r + shift, G), a, atol=1e-8)  # the baseline absorbs a shift


def test_registry_entry_and_variant():
    scale = ADVANTAGE_SCALES["leave_one_out"]
    assert scale.trl is None and scale.trl_scale_rewards is None  # TRL's GRPOTrainer cannot: the bridge computes it
    v = get_variant("rloo")
    assert (v.advantage_scale, v.ratio_level, v.objective, v.aggregation) == (
        "leave_one_out", "token", "clip", "seq_mean_token_mean")  # otherwise GRPO's pieces
    assert not v.in_trl


def test_variant_advantages_and_policy_loss_use_the_registry():
    g = torch.Generator().manual_seed(0)
    R = torch.randn(8, 2, generator=g)
    w = [1.0, 0.5]
    want = leave_one_out_advantages(combine_rewards(R, w), 4)
    assert torch.equal(variant_advantages(R, 4, "rloo", weights=w), want)
    # the loss is GRPO's: with the same advantages it is GRPO's loss, number for number
    logp = torch.randn(8, 5, generator=g).requires_grad_(True)
    old = logp.detach() + 0.3 * torch.randn(8, 5, generator=g)
    mask = (torch.rand(8, 5, generator=g) > 0.2).float()
    mask[:, 0] = 1.0
    a = policy_loss(logp, old, want, mask, variant="rloo")
    b = policy_loss(logp, old, want, mask, variant="grpo", beta=0.0)
    assert float(a.loss.detach()) == float(b.loss.detach()) and a.clip_frac > 0


# -- parity with TRL 1.16's RLOOTrainer on identical rewards ---------------------------------------------

TABLES = {
    "ties": [[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [2.0, 0.0], [0.5, 0.5], [0.5, 0.5], [0.5, 0.5], [0.5, 0.5],
             [0.3, 0.1], [0.7, 0.0], [0.7, 0.0], [0.1, 0.9]],
    "continuous": None,  # filled below: random normals, 3 decimals
    "unscored": [[0.2, 1.0], [None, None], [0.9, 0.0], [0.4, 0.3], [None, 0.5], [0.1, None], [0.6, 0.6],
                 [0.8, 0.2], [None, None], [None, None], [None, None], [0.7, 0.1]],
}
_g = torch.Generator().manual_seed(11)
TABLES["continuous"] = [[round(x, 3) for x in row] for row in torch.randn(12, 2, generator=_g).tolist()]
PARITY: dict[str, float] = {}


def trl_rloo_advantages(table, weights, G):
    """TRL 1.16's own RLOO advantages for ``table`` (rows of K rewards, None allowed), from its
    ``RLOOTrainer._generate_and_score_completions`` (no KL in the reward, no advantage normalisation: its defaults
    except ``beta``, which would move KL into the reward)."""
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import RLOOConfig, RLOOTrainer

    from trl_harness import _TMP, _tiny_model_dir

    n, k = len(table), len(table[0])
    path = _tiny_model_dir()

    def make(col):
        def f(completions, **_):
            assert len(completions) == n
            return [row[col] for row in table]
        f.__name__ = f"reward_{col}"
        return f

    args = RLOOConfig(output_dir=_TMP, report_to="none", use_cpu=True, bf16=False, per_device_train_batch_size=n,
                      num_generations=G, max_completion_length=3, reward_weights=list(weights), beta=0.0, seed=0)
    assert args.normalize_advantages is False  # TRL's default: the paper's plain leave-one-out advantage
    trainer = RLOOTrainer(model=path, args=args, processing_class=AutoTokenizer.from_pretrained(path),
                          train_dataset=Dataset.from_dict({"prompt": ["1+1"] * n}),
                          reward_funcs=[make(i) for i in range(k)])
    trainer.model.train()
    torch.manual_seed(0)
    batch = trainer._generate_and_score_completions([{"prompt": f"{i}+1"} for i in range(n // G) for _ in range(G)])
    return batch["advantages"].detach().float()


@pytest.mark.parametrize("G", [2, 4])
@pytest.mark.parametrize("name", sorted(TABLES))
def test_rloo_matches_trls_rloo_trainer(name, G):
    pytest.importorskip("trl")
    table, w = TABLES[name], [1.0, 0.5]
    R = torch.tensor([[NAN if x is None else x for x in row] for row in table], dtype=torch.float32)
    ours = variant_advantages(R, G, "rloo", weights=w, allow_unscored=True)
    theirs = trl_rloo_advantages(table, w, G)
    d = float((ours - theirs).abs().max())
    PARITY[f"{name} G={G}"] = d
    assert d < 1e-6, (ours, theirs)
    assert float(ours.abs().max()) > 0.1  # real advantages, not two zeros agreeing
    if name == "unscored":
        assert ours[1] == 0.0 and theirs[1] == 0.0  # an unscorable completion carries no signal in both


def test_rloo_in_the_trainer(tmp_path):
    """The package's own trainer takes rloo by name and computes leave-one-out advantages of its rewards."""
    from test_trainer_features import cfg, trainer

    b = trainer(cfg(tmp_path, variant="rloo")).sample_batch()
    torch.testing.assert_close(b.advantages, leave_one_out_advantages(b.rewards, 4))
    assert float((b.advantages - group_advantages(b.rewards, 4)).abs().max()) > 1e-3
    assert math.isfinite(float(b.advantages.sum()))


if __name__ == "__main__":  # the parity numbers for the report
    for G in (2, 4):
        for name in sorted(TABLES):
            test_rloo_matches_trls_rloo_trainer(name, G)
    for key, d in PARITY.items():
        print(f"rloo vs TRL RLOOTrainer, {key}: max |diff| = {d:.2e}")
