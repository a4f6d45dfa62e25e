"""GDPO (decoupled_advantages), GOPO (rank_advantages) and unscorable completions.

Hand numbers from the papers' formulas, hypothesis properties, and parity with TRL 1.16's own advantage code:
a real ``GRPOTrainer`` on a tiny offline Qwen2 whose reward functions return a fixed reward table (with
``None``), whose ``_generate_and_score_completions`` then computes the advantages we compare against.
``python tests/test_gdpo_gopo.py`` prints the parity table (max |d|).
"""

from __future__ import annotations

import math
import statistics

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from grpo_lessons import (
    combine_rewards,
    decoupled_advantages,
    get_variant,
    group_advantages,
    policy_loss,
    rank_advantages,
    variant_advantages,
)

NAN = float("nan")
EPS = 1e-4


# -------------------------------------------------------------------------------------------- GOPO by hand


def test_gopo_hand_numbers():
    # G = 4: 0.9 is best (rank 1, A = 2), 0.1 worst (rank 4, A = -2); the two 0.5 share ranks 2 and 3 -> 2.5 -> 0
    r = [0.1, 0.9, 0.5, 0.5]
    assert rank_advantages(r, 4).tolist() == pytest.approx([-2.0, 2.0, 0.0, 0.0], abs=1e-12)
    # the authors' ties: distinct ranks 2 and 3, the earlier one better: 2 - 4/3, 2 - 8/3
    assert rank_advantages(r, 4, ties="first").tolist() == pytest.approx([-2.0, 2.0, 2 / 3, -2 / 3], abs=1e-6)
    assert rank_advantages([3.0, 1.0, 2.0], 3).tolist() == [2.0, -2.0, 0.0]
    # G = 5: 2 - 4 (rho - 1) / 4 = 3 - rho
    assert rank_advantages([5, 4, 3, 2, 1], 5).tolist() == [2.0, 1.0, 0.0, -1.0, -2.0]


def test_gopo_all_tied_group():
    assert rank_advantages([0.7] * 4, 4).tolist() == [0.0] * 4
    assert rank_advantages([0.7] * 4, 4, ties="first").tolist() == pytest.approx([2.0, 2 / 3, -2 / 3, -2.0])


def test_gopo_g2_is_plus_minus_two_and_g1_raises():
    assert rank_advantages([0.0, 1.0, 5.0, -3.0], 2).tolist() == [-2.0, 2.0, 2.0, -2.0]
    assert rank_advantages([1.0, 1.0], 2).tolist() == [0.0, 0.0]
    with pytest.raises(ValueError, match="group_size >= 2"):
        rank_advantages([1.0, 2.0], 1)
    with pytest.raises(ValueError, match="multiple of group_size"):
        rank_advantages([1.0, 2.0, 3.0], 2)
    with pytest.raises(ValueError, match="NaN"):
        rank_advantages([1.0, NAN], 2)
    with pytest.raises(ValueError, match="unknown ties"):
        rank_advantages([1.0, 2.0], 2, ties="dense")


def test_grpo_is_not_invariant_to_a_monotonic_transform_but_gopo_is():
    r = torch.tensor([0.0, 1.0, 2.0, 10.0], dtype=torch.float64)
    r2 = r**2  # strictly increasing on r >= 0
    a, b = group_advantages(r, 4), group_advantages(r2, 4)
    assert (a - b).abs().max() > 0.1  # GRPO's z-scores move: 1.0 -> -0.61 vs -0.56 ...
    assert rank_advantages(r, 4).tolist() == rank_advantages(r2, 4).tolist()
    assert rank_advantages(r, 4).tolist() == pytest.approx([-2.0, -2 / 3, 2 / 3, 2.0], abs=1e-12)


_TRANSFORMS = {
    "cubic": lambda x: x**3 + 5 * x,
    "affine": lambda x: 3 * x - 7,
    "exp": lambda x: math.exp(x / 7),
    "shift_log": lambda x: math.log(x + 100),
}


@settings(max_examples=300, deadline=None)
@given(st.integers(2, 8), st.integers(1, 4), st.data(), st.sampled_from(sorted(_TRANSFORMS)),
       st.sampled_from(["average", "first"]))
def test_gopo_properties(G, M, data, tname, ties):
    vals = data.draw(st.lists(st.integers(-50, 50), min_size=G * M, max_size=G * M))
    r = torch.tensor(vals, dtype=torch.float64)
    f = _TRANSFORMS[tname]
    a = rank_advantages(r, G, ties=ties)
    # invariant to any strictly increasing transform
    assert torch.equal(a, rank_advantages(torch.tensor([f(v) for v in vals], dtype=torch.float64), G, ties=ties))
    # each group sums to 0 and lies in [-2, 2]; the best completion of a group with distinct rewards gets +2
    groups = a.view(M, G)
    assert groups.sum(dim=1).abs().max() < 1e-9
    assert a.abs().max() <= 2.0 + 1e-12
    for m in range(M):
        row = vals[m * G:(m + 1) * G]
        if len(set(row)) == G:
            assert groups[m, row.index(max(row))] == 2.0 and groups[m, row.index(min(row))] == -2.0
        if ties == "average" and len(set(row)) == 1:
            assert groups[m].abs().max() == 0.0
    if G == 2:
        assert set(a.abs().tolist()) <= {0.0, 2.0}


def test_gopo_unscored_rows():
    r = [1.0, NAN, 0.0, 0.5, NAN, NAN, NAN, 3.0]
    a = rank_advantages(r, 4, allow_unscored=True).tolist()
    assert a == [2.0, 0.0, -2.0, 0.0, 0.0, 0.0, 0.0, 0.0]  # group 1: 3 scored -> ranks 1..3 over G' = 3
    with pytest.raises(ValueError, match="inf"):
        rank_advantages([1.0, float("inf")], 2, allow_unscored=True)


# -------------------------------------------------------------------------------------------- GDPO by hand


def _z(vals):
    m, s = statistics.fmean(vals), statistics.stdev(vals)
    return [0.0 if max(vals) == min(vals) else (v - m) / (s + EPS) for v in vals]


def test_gdpo_hand_numbers():
    R = [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [0.0, 1.0]]  # G = 2, two rewards
    w = [1.0, 0.5]
    cols = [[row[k] for row in R] for k in range(2)]
    z = [_z(c[:2]) + _z(c[2:]) for c in cols]  # per reward, per group
    s = [w[0] * z[0][i] + w[1] * z[1][i] for i in range(4)]
    want = [(v - statistics.fmean(s)) / (statistics.stdev(s) + EPS) for v in s]
    got = decoupled_advantages(torch.tensor(R, dtype=torch.float64), 2, weights=w)
    assert got.tolist() == pytest.approx(want, abs=1e-12)
    # the numbers: z = +-0.70701 per informative group; s = [0.3535, -0.3535, 0.7070, -0.7070]
    assert got[2].item() == pytest.approx(0.7070 / (statistics.stdev(s) + EPS), abs=1e-3)


def test_gdpo_keeps_reward_combinations_apart_where_grpo_collapses_them():
    # The paper's motivation: (1,0) and (0,1) sum to the same total, so GRPO on the sum sees a flat group
    R = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [0.0, 0.0]], dtype=torch.float64)  # one group of 4
    grpo = group_advantages(combine_rewards(R), 4)
    gdpo = decoupled_advantages(R, 4)
    assert grpo[0] == grpo[1] == 0.0 and gdpo[0] == gdpo[1] == 0.0
    assert gdpo[2] > 0 > gdpo[3]
    # with rewards (1,0),(0,1),(1,1),(1,1): GRPO gives (1,0) and (0,1) equal advantages, GDPO too (symmetric)
    # -- but weights break the tie only in GDPO after per-reward scaling
    R2 = torch.tensor([[1.0, 0.0], [0.0, 10.0], [1.0, 10.0], [0.0, 0.0]], dtype=torch.float64)
    g2 = decoupled_advantages(R2, 4)
    assert g2[0].item() == pytest.approx(g2[1].item(), abs=1e-3)  # the scale of reward 2 no longer dominates
    assert group_advantages(combine_rewards(R2), 4)[1] > group_advantages(combine_rewards(R2), 4)[0] + 1


def test_gdpo_trl_vs_authors_on_nan_and_single_reward():
    R = torch.tensor([[1.0, NAN], [0.0, 1.0], [1.0, 1.0], [0.0, 0.0]], dtype=torch.float64)
    c = 0.5 / (math.sqrt(0.5) + EPS)  # one informative pair: z = +-0.70701
    # TRL: the NaN is left out; reward 2 of group 1 has one value (no std) -> contributes nothing
    s_trl = [c, -c, 2 * c, -2 * c]
    want_trl = [v / (statistics.stdev(s_trl) + EPS) for v in s_trl]  # batch mean is 0
    assert decoupled_advantages(R, 2).tolist() == pytest.approx(want_trl, abs=1e-12)
    # authors: NaN -> 0 first, so reward 2 of group 1 is (0, 1): z = (-c, +c)
    s_auth = [c - c, -c + c, 2 * c, -2 * c]
    want_auth = [v / (statistics.stdev(s_auth) + EPS) for v in s_auth]
    assert decoupled_advantages(R, 2, convention="authors").tolist() == pytest.approx(want_auth, abs=1e-12)
    # one reward: the authors fall back to GRPO, TRL still renormalises over the batch
    r1 = torch.tensor([[1.0], [0.0], [1.0], [1.0]], dtype=torch.float64)
    assert decoupled_advantages(r1, 2, convention="authors").tolist() == pytest.approx([c, -c, 0.0, 0.0], abs=1e-12)
    s1 = [c, -c, 0.0, 0.0]
    assert decoupled_advantages(r1, 2).tolist() == pytest.approx(
        [v / (statistics.stdev(s1) + EPS) for v in s1], abs=1e-12)


def test_gdpo_unscorable_row_and_errors():
    R = torch.tensor([[1.0, 0.0], [NAN, NAN], [0.0, 1.0], [0.5, 0.5]], dtype=torch.float64)
    a = decoupled_advantages(R, 4)
    assert a[1] == 0.0
    # the unscorable row is out of the statistics: same as the group of the other three
    b = decoupled_advantages(R[[0, 2, 3]], 3)
    assert a[[0, 2, 3]].tolist() == pytest.approx(b.tolist(), abs=1e-12)
    with pytest.raises(ValueError, match="inf"):
        decoupled_advantages([[1.0, float("inf")], [0.0, 0.0]], 2)
    with pytest.raises(ValueError, match="2 weights for 3"):
        decoupled_advantages(torch.zeros(4, 3), 2, weights=[1.0, 1.0])
    with pytest.raises(ValueError, match="multiple of group_size"):
        decoupled_advantages(torch.zeros(5, 2), 2)
    with pytest.raises(ValueError, match="unknown convention"):
        decoupled_advantages(torch.zeros(4, 2), 2, convention="verl")


@settings(max_examples=200, deadline=None)
@given(st.integers(2, 6), st.integers(1, 4), st.integers(1, 3), st.data())
def test_gdpo_properties(G, M, K, data):
    vals = data.draw(st.lists(st.sampled_from([0.0, 0.25, 0.5, 1.0, 2.0]), min_size=G * M * K, max_size=G * M * K))
    R = torch.tensor(vals, dtype=torch.float64).view(G * M, K)
    a = decoupled_advantages(R, G)
    n = G * M
    assert torch.isfinite(a).all()
    assert abs(a.mean().item()) < 1e-9  # batch renormalisation: mean 0
    assert a.abs().max().item() <= (n - 1) / math.sqrt(n) + 1e-9  # a Bessel z-score is bounded by (n-1)/sqrt(n)
    if bool((R == R[0]).all()):
        assert a.abs().max().item() == 0.0  # nothing differs: no signal
    # the authors' convention equals TRL's when nothing is NaN and K > 1
    if K > 1:
        assert torch.equal(decoupled_advantages(R, G, convention="authors"), a)


# -------------------------------------------------------------------------------------------- unscored GRPO


def test_group_advantages_unscored_by_hand_and_default_raises():
    r = [1.0, NAN, 0.0, 0.5]
    with pytest.raises(ValueError, match="NaN"):
        group_advantages(r, 4)
    a = group_advantages(r, 4, allow_unscored=True).tolist()
    s = statistics.stdev([1.0, 0.0, 0.5])  # 0.5
    assert a == pytest.approx([0.5 / (s + EPS), 0.0, -0.5 / (s + EPS), 0.0], abs=1e-7)
    assert group_advantages(r, 4, scale="none", allow_unscored=True).tolist() == [0.5, 0.0, -0.5, 0.0]
    # a group with one scored completion gives it 0, a fully unscored group 0
    assert group_advantages([NAN, 2.0, NAN, NAN], 2, allow_unscored=True).tolist() == [0.0] * 4


def test_combine_rewards_and_variant_advantages():
    R = torch.tensor([[1.0, NAN], [NAN, NAN], [0.0, 2.0], [1.0, 1.0]])
    assert combine_rewards(R, [1.0, 0.5]).tolist()[0] == 1.0
    assert math.isnan(combine_rewards(R).tolist()[1])
    assert combine_rewards(R, [1.0, 0.5]).tolist()[2:] == [1.0, 1.5]
    with pytest.raises(ValueError, match="unscorable"):
        variant_advantages(R, 2, "grpo")
    a = variant_advantages(R, 2, "grpo", allow_unscored=True)
    assert a[1] == 0.0 and a[0] == 0.0  # group 1 has one scored row
    g = variant_advantages(R, 2, "gopo", weights=[1.0, 0.5], allow_unscored=True)  # sums [1, nan | 1, 1.5]
    assert g.tolist() == [0.0, 0.0, -2.0, 2.0]
    assert torch.equal(variant_advantages(R, 2, "gdpo", allow_unscored=True), decoupled_advantages(R, 2))
    assert torch.equal(variant_advantages([1.0, 0.0, 3.0, 3.0], 2, "dr_grpo"),
                       group_advantages([1.0, 0.0, 3.0, 3.0], 2, scale="none"))


def test_registry_entries_and_policy_loss_run_with_them():
    assert get_variant("gdpo").advantage_scale == "decoupled"
    assert get_variant("gopo").advantage_scale == "rank"
    torch.manual_seed(0)
    logp = torch.randn(4, 5, requires_grad=True)
    mask = torch.ones(4, 5)
    assert get_variant("gopo").aggregation == "token_mean"  # the authors' token mean
    for name, same in (("gdpo", "grpo"), ("gopo", "bnpo")):
        adv = variant_advantages(torch.tensor([[1.0, 0.0], [0.0, 0.0], [1.0, 1.0], [0.0, 1.0]]), 2, name)
        mask = torch.tensor([[1.0] * 5, [1.0] * 3 + [0.0] * 2, [1.0] * 4 + [0.0], [1.0] * 5])  # unequal lengths
        old = logp.detach() + 0.3 * torch.randn(4, 5)
        out = policy_loss(logp, old, adv, mask, variant=name)
        ref = policy_loss(logp, old, adv, mask, variant=same)  # same ratio/objective/aggregation pieces
        assert torch.allclose(out.loss, ref.loss) and out.loss.abs() > 0
    # group_advantages takes the new scales too (1-D rewards)
    assert group_advantages([1.0, 0.0, 2.0, 2.0], 2, scale="rank").tolist() == [2.0, -2.0, 0.0, 0.0]


# -------------------------------------------------------------------------------------------- TRL parity

trl = pytest.importorskip("trl")


def _table(seed: int, n: int, k: int) -> list[list[float | None]]:
    """A reward table with the awkward cases: an unscorable row, a lone scored value, a constant group."""
    g = torch.Generator().manual_seed(seed)
    t = torch.randn(n, k, generator=g).tolist()
    t = [[round(v, 3) for v in row] for row in t]
    t[1] = [None] * k                      # unscorable completion
    t[4][0] = None                         # a function that does not apply here ...
    for i in range(8, 12):
        t[i][1 % k] = None if i < 11 else t[i][1 % k]  # ... and one with a single scored value in its group
    for i in range(4, 8):
        t[i][k - 1] = 0.5                  # a constant column in a group
    return t


def trl_advantages(table, weights, G, aggregation, scale_rewards="group", cls=None, variant=None):
    """TRL 1.16's own advantages for ``table`` (rows of K rewards, None allowed) from _generate_and_score_completions."""
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from tests.trl_harness import _TMP, _tiny_model_dir

    n, k = len(table), len(table[0])
    path = _tiny_model_dir()

    def make(col):
        def f(completions, **_):
            assert len(completions) == n
            return [row[col] for row in table]
        f.__name__ = f"reward_{col}"
        return f

    args = GRPOConfig(output_dir=_TMP, report_to="none", use_cpu=True, bf16=False, per_device_train_batch_size=n,
                      num_generations=G, max_completion_length=3, reward_weights=list(weights),
                      multi_objective_aggregation=aggregation, scale_rewards=scale_rewards, seed=0)
    kw = {} if cls is None else {"variant": variant}
    trainer = (cls or GRPOTrainer)(model=path, args=args, processing_class=AutoTokenizer.from_pretrained(path),
                                   train_dataset=Dataset.from_dict({"prompt": ["1+1"] * n}),
                                   reward_funcs=[make(i) for i in range(k)], **kw)
    trainer.model.train()
    torch.manual_seed(0)
    batch = trainer._generate_and_score_completions([{"prompt": f"{i}+1"} for i in range(n // G) for _ in range(G)])
    return batch["advantages"].detach().float()


def _as_tensor(table):
    return torch.tensor([[NAN if v is None else v for v in row] for row in table], dtype=torch.float32)


PARITY: dict[str, float] = {}


@pytest.mark.parametrize("seed", [0, 1])
def test_gdpo_matches_trl_normalize_then_sum(seed):
    table, w, G = _table(seed, 12, 3), [1.0, 0.5, 2.0], 4
    ours = decoupled_advantages(_as_tensor(table), G, weights=w)
    theirs = trl_advantages(table, w, G, "normalize_then_sum")
    d = (ours - theirs).abs().max().item()
    PARITY[f"gdpo normalize_then_sum seed {seed}"] = d
    assert d < 1e-5, (ours, theirs)
    assert ours[1] == 0.0 and theirs[1] == 0.0  # the unscorable row


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_unscored_grpo_matches_trl_sum_then_normalize(scale):
    table, w, G = _table(3, 12, 2), [1.0, 0.5], 4
    ours = variant_advantages(_as_tensor(table), G, {"group": "grpo", "batch": "grpo", "none": "dr_grpo"}[scale],
                              weights=w, allow_unscored=True)
    if scale == "batch":  # no registry variant is ScaleRL here: the piece directly
        ours = group_advantages(combine_rewards(_as_tensor(table), w), G, scale="batch", allow_unscored=True)
    theirs = trl_advantages(table, w, G, "sum_then_normalize", scale_rewards=scale)
    d = (ours - theirs).abs().max().item()
    PARITY[f"unscored grpo scale={scale}"] = d
    assert d < 1e-5, (ours, theirs)


def test_trl_config_of_gdpo_and_gopo():
    from grpo_lessons.integrations.trl_bridge import grpo_config, trl_supports, variant_for_config

    cfg = grpo_config("gdpo")
    assert cfg.multi_objective_aggregation == "normalize_then_sum" and cfg.loss_type == "grpo"
    assert variant_for_config(cfg) == "gdpo" and trl_supports("gdpo")
    assert not trl_supports("gopo") and grpo_config("gopo").multi_objective_aggregation == "sum_then_normalize"


def test_bridge_computes_gopo_and_gdpo_advantages():
    from grpo_lessons.integrations.trl_bridge import GRPOLessonsTrainer

    table, w, G = _table(5, 12, 2), [1.0, 0.5], 4
    R = _as_tensor(table)
    got = trl_advantages(table, w, G, "sum_then_normalize", cls=GRPOLessonsTrainer, variant="gopo")
    want = rank_advantages(combine_rewards(R, w), G, allow_unscored=True)
    assert torch.equal(got, want.float())
    assert got.abs().max() == 2.0
    # GDPO through the subclass when TRL is configured to sum first: the bridge applies decoupled_advantages
    got = trl_advantages(table, w, G, "sum_then_normalize", cls=GRPOLessonsTrainer, variant="gdpo")
    assert (got - decoupled_advantages(R, G, weights=w)).abs().max() < 1e-6


if __name__ == "__main__":
    for seed in (0, 1):
        test_gdpo_matches_trl_normalize_then_sum(seed)
    for scale in ("group", "batch", "none"):
        test_unscored_grpo_matches_trl_sum_then_normalize(scale)
    print("\n".join(f"{k:40s} max|d| = {v:.3g}" for k, v in PARITY.items()))
