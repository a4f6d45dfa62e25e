"""grpo_lessons.core.diversity (hand-checked) and grpo_lessons.core.dpo (DPO's sigmoid loss against TRL 1.16's own
``DPOTrainer._compute_loss``, loss and gradient; diverse pairs from GRPO groups).

``python tests/test_diversity_dpo.py`` prints the DPO parity numbers.
"""

from __future__ import annotations

import math
import sys
import types
from fractions import Fraction
from math import comb

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from grpo_lessons.core.diversity import (
    NO_ANSWER,
    answer_entropy,
    best_of_n,
    canonical_expression,
    distinct_n,
    distinct_structures,
    edit_distance,
    pairwise_edit_diversity,
    pass_at_k,
    rejection_sample,
    solution_structure,
)
from grpo_lessons.core.dpo import DPOPair, diverse_dpo_pairs, dpo_implicit_rewards, dpo_loss

# ------------------------------------------------------------------------------------------- distinct-n


def test_distinct_n_by_hand():
    texts = ["the cat sat", "the cat ran"]
    # unigrams: the cat sat the cat ran -> 6 tokens, distinct {the, cat, sat, ran} = 4
    assert distinct_n(texts, 1) == 4 / 6
    # bigrams: (the cat) (cat sat) (the cat) (cat ran) -> 4, distinct 3; no bigram crosses the two texts
    assert distinct_n(texts, 2) == 3 / 4
    assert distinct_n(["a a a a"], 1) == 1 / 4
    assert distinct_n(["a  b\n c\tb"], 1) == 3 / 4  # any whitespace splits
    assert distinct_n(["", "one"], 2) == 0.0  # no bigrams at all
    assert distinct_n([[{"role": "assistant", "content": "x y"}]], 1) == 1.0  # chat completions
    with pytest.raises(ValueError, match="positive integer"):
        distinct_n(["a"], 0)
    with pytest.raises(ValueError, match="list of completions"):
        distinct_n("the cat", 1)


# ------------------------------------------------------------------------------------------- edit distance


def test_edit_distance_and_pairwise_diversity_by_hand():
    assert edit_distance("kitten", "sitting") == 3
    assert edit_distance("", "abc") == 3 and edit_distance("abc", "abc") == 0
    assert edit_distance(["a", "b"], ["b"]) == 1
    # words: "a b c" vs "a x c": 1 substitution / 3; "a b c" vs "a b c d": 1 / 4; "a x c" vs "a b c d": 2 / 4
    got = pairwise_edit_diversity(["a b c", "a x c", "a b c d"])
    assert got == pytest.approx((1 / 3 + 1 / 4 + 2 / 4) / 3)
    assert pairwise_edit_diversity(["same", "same", "same"]) == 0.0
    assert pairwise_edit_diversity(["ab", "cd"], unit="char") == 1.0
    assert pairwise_edit_diversity(["", ""]) == 0.0
    with pytest.raises(ValueError, match="at least 2"):
        pairwise_edit_diversity(["only one"])
    with pytest.raises(ValueError, match="unknown unit"):
        pairwise_edit_diversity(["a", "b"], unit="token")


def test_pairwise_edit_diversity_is_bounded_on_huge_text():
    big = "word " * 200_000
    assert pairwise_edit_diversity([big, big + "x"], max_units=64) == 0.0  # only the first 64 words compared


# ------------------------------------------------------------------------------------------- answers


def test_answer_entropy_by_hand_and_no_answer_modes():
    texts = ["= 5", "so 5", "I get 6", "no idea", "hmm"]
    # answers 5, 5, 6, None, None
    cat = -(2 / 5 * math.log(2 / 5) * 2 + 1 / 5 * math.log(1 / 5))  # {5: 2, 6: 1, none: 2}
    assert answer_entropy(texts) == pytest.approx(cat)
    drop = -(2 / 3 * math.log(2 / 3) + 1 / 3 * math.log(1 / 3))  # {5: 2, 6: 1}
    assert answer_entropy(texts, no_answer="drop") == pytest.approx(drop)
    distinct = -(2 / 5 * math.log(2 / 5) + 3 * (1 / 5 * math.log(1 / 5)))  # each none its own answer
    assert answer_entropy(texts, no_answer="distinct") == pytest.approx(distinct)
    assert answer_entropy(["5", "5.0", "<answer>5</answer>"]) == 0.0  # the same answer, written three ways
    assert answer_entropy(["1", "2", "3", "4"], base=2) == pytest.approx(2.0)
    assert answer_entropy(["x", "y"], no_answer="drop") == 0.0
    assert NO_ANSWER == "<no answer>"
    with pytest.raises(ValueError, match="at least one"):
        answer_entropy([])
    with pytest.raises(ValueError, match="unknown no_answer"):
        answer_entropy(["1"], no_answer="skip")


def test_answer_entropy_countdown_uses_structures():
    texts = ["<answer>(3 + 5) * 2</answer>", "<answer>2 * (5 + 3)</answer>", "<answer>3 * 5 + 2</answer>", "nothing"]
    h = -(2 / 4 * math.log(2 / 4) + 2 * (1 / 4 * math.log(1 / 4)))
    assert answer_entropy(texts, "countdown") == pytest.approx(h)
    from grpo_lessons.training.data import get_task

    assert answer_entropy(texts, get_task("countdown")) == pytest.approx(h)
    assert answer_entropy(["1", "2"], get_task("arithmetic")) == pytest.approx(math.log(2))
    with pytest.raises(ValueError, match="no answer extractor"):
        answer_entropy(["1"], "poetry")


# ------------------------------------------------------------------------------------------- structures


@pytest.mark.parametrize("a, b, same", [
    ("(3 + 5) * 2", "2 * (5 + 3)", True),
    ("3 + 5 + 2", "2 + (3 + 5)", True),        # associativity
    ("3 * 5 * 2", "(2 * 3) * 5", True),
    ("10 - 3 + 2", "10 + 2 - 3", True),         # a - b + c = a + c - b
    ("10 - (3 - 2)", "10 - 3 + 2", True),       # signs distributed over a sum
    ("8 / 2 * 3", "3 * 8 / 2", True),
    ("2 × (3 + 5)", "(3+5)*2", True),           # unicode times, spacing
    ("2 * (3 + 5)", "2 * 3 + 2 * 5", False),    # distributivity is a different approach
    ("10 - 3", "3 - 10", False),
    ("8 / 2", "2 / 8", False),
    ("3 + 5", "3 + 6", False),
])
def test_canonical_expression(a, b, same):
    ca, cb = canonical_expression(a), canonical_expression(b)
    assert ca is not None and cb is not None
    assert (ca == cb) is same, (ca, cb)


@pytest.mark.parametrize("bad", ["__import__('os')", "2 ** 10", "1 // 2", "x + 1", "(" * 300 + "1" + ")" * 300,
                                 "1.5 + 2", "", None, 7, "open('f')", "-" * 100 + "1"])
def test_canonical_expression_rejects_without_running_anything(bad):
    assert canonical_expression(bad) is None


def test_distinct_structures():
    texts = ["<answer>(3 + 5) * 2</answer>", "So 2 × (5 + 3) = 16.", "<answer>2 * 3 + 2 * 5</answer>",
             "I give up", "<answer>(5 + 3) * 2 = 16</answer>"]
    assert distinct_structures(texts) == 2
    assert solution_structure("I give up") is None
    assert distinct_structures(texts, only_correct=lambda t: "16" in t) == 1


# ------------------------------------------------------------------------------------------- pass@k


def test_pass_at_k_by_hand_and_against_binomials():
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)
    assert pass_at_k(4, 1, 2) == pytest.approx(1 - comb(3, 2) / comb(4, 2))  # 1 - 3/6
    assert pass_at_k(5, 0, 3) == 0.0
    assert pass_at_k(5, 3, 3) == 1.0  # n - c = 2 < k: every 3-subset has a correct one
    for n, c, k in [(20, 5, 4), (100, 1, 10), (200, 37, 100), (7, 7, 7)]:
        exact = 1 - Fraction(comb(n - c, k), comb(n, k))
        assert pass_at_k(n, c, k) == pytest.approx(float(exact), abs=1e-12)
    # numerically stable where the binomials overflow a float
    assert 0.0 < pass_at_k(10_000, 3, 5_000) < 1.0
    assert pass_at_k(10_000, 3, 5_000) == pytest.approx(1 - (5000 * 4999 * 4998) / (10000 * 9999 * 9998), abs=1e-12)
    for bad in [(5, 6, 1), (5, 1, 6), (0, 0, 1), (5, -1, 1), (5, 1, 0), (5.0, 1, 1), (True, 1, 1)]:
        with pytest.raises(ValueError):
            pass_at_k(*bad)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 60), st.data())
def test_pass_at_k_is_monotone_and_exact(n, data):
    c = data.draw(st.integers(0, n))
    k = data.draw(st.integers(1, n))
    p = pass_at_k(n, c, k)
    assert p == pytest.approx(float(1 - Fraction(comb(n - c, k), comb(n, k))), abs=1e-9)
    if k < n:
        assert pass_at_k(n, c, k + 1) >= p - 1e-12


# ------------------------------------------------------------------------------------------- selection


def test_best_of_n_and_rejection_sample():
    b = best_of_n(["a", "b", "c", "d"], [0.2, 0.9, None, 0.9])
    assert (b.index, b.candidate, b.reward) == (1, "b", 0.9)  # first of the tied best; None never picked
    assert best_of_n(["x"], [0.0]).candidate == "x" and best_of_n(["x", "y"], torch.tensor([0.0, 1.0])).index == 1
    with pytest.raises(ValueError, match="no candidate has a reward"):
        best_of_n(["a", "b"], [None, float("nan")])
    with pytest.raises(ValueError, match="2 rewards for 3"):
        best_of_n(["a", "b", "c"], [1, 2])
    groups = [["a", "b", "c", "d"], ["e", "f"]]
    rewards = [[0.1, 0.7, 0.7, None], [0.0, -1.0]]
    assert rejection_sample(groups, rewards, 2) == [["b", "c"], ["e", "f"]]
    assert rejection_sample(groups, rewards, 3, min_reward=0.5) == [["b", "c"], []]
    with pytest.raises(ValueError, match="k must be >= 1"):
        rejection_sample(groups, rewards, 0)


# ------------------------------------------------------------------------------------------- DPO pairs


def test_diverse_dpo_pairs_differ_in_approach():
    group = ["<answer>(3 + 5) * 2</answer>",     # 1.0  structure A
             "<answer>2 * (5 + 3)</answer>",     # 1.0  structure A again
             "<answer>(3 + 5) * 2 + 1</answer>",  # 0.0  a different structure (near copy, but not A)
             "<answer>3 * 5 + 2</answer>",       # 0.0  structure C
             "no idea"]                          # 0.0  no expression: its whitespace text is its key
    rewards = [1.0, 1.0, 0.0, 0.0, 0.0]
    pairs = diverse_dpo_pairs([group], [rewards])
    assert pairs == [DPOPair(0, group[0], group[2], 0, 2, 1.0, 0.0)]
    assert all(pairs[0].chosen != p for p in group[1:2])  # the same-structure winner is never the rejected side
    two = diverse_dpo_pairs([group], [rewards], pairs_per_group=3)
    assert [(p.chosen_index, p.rejected_index) for p in two] == [(0, 2), (1, 3)]
    # a group where every lower-reward completion shares the winner's structure gives no pair
    same = ["<answer>(3 + 5) * 2</answer>", "<answer>2 * (3 + 5)</answer>"]
    assert diverse_dpo_pairs([same], [[1.0, 0.0]]) == []
    # min_gap: rewards must differ by more than it
    assert diverse_dpo_pairs([group], [[1.0, 1.0, 0.95, 0.0, 0.0]], min_gap=0.1)[0].rejected_index == 3
    with pytest.raises(ValueError, match="groups but"):
        diverse_dpo_pairs([group], [])


# ------------------------------------------------------------------------------------------- DPO loss


def test_dpo_loss_by_hand():
    pc, pr = torch.tensor([-1.0, -2.0]), torch.tensor([-3.0, -1.0])
    rc, rr = torch.tensor([-1.5, -2.0]), torch.tensor([-2.5, -2.0])
    # margins: (0.5) - (-0.5) = 1.0 ; (0) - (1.0) = -1.0
    want = [-math.log(1 / (1 + math.exp(-0.1))), -math.log(1 / (1 + math.exp(0.1)))]
    assert dpo_loss(pc, pr, rc, rr, beta=0.1, reduction="none").tolist() == pytest.approx(want, abs=1e-7)
    assert dpo_loss(pc, pr, rc, rr).item() == pytest.approx(sum(want) / 2, abs=1e-7)
    assert dpo_loss(pc, pr, rc, rr, beta=1.0, reduction="none")[0].item() == pytest.approx(math.log1p(math.exp(-1.0)))
    # at the reference (policy == ref) the loss is log 2 whatever beta is
    assert dpo_loss(rc, rr, rc, rr, beta=0.7).item() == pytest.approx(math.log(2))
    # stable: a margin of -1e4 gives beta * 1e4, not inf
    assert dpo_loss([-1e4], [0.0], [0.0], [0.0], beta=1.0).item() == pytest.approx(1e4)
    assert dpo_implicit_rewards(pc, rc).tolist() == pytest.approx([0.05, 0.0])
    for bad in [dict(beta=0.0), dict(beta=-1.0), dict(beta=float("nan")), dict(reduction="sum")]:
        with pytest.raises(ValueError):
            dpo_loss(pc, pr, rc, rr, **bad)
    with pytest.raises(ValueError, match="shape"):
        dpo_loss(pc, pr[:1], rc, rr)
    with pytest.raises(ValueError, match="NaN"):
        dpo_loss(pc, torch.tensor([float("nan"), 0.0]), rc, rr)


def test_dpo_gradient_by_hand():
    # d/dpc of -log sigmoid(beta m) = -beta sigmoid(-beta m) / P
    pc = torch.tensor([-1.0, -2.0], requires_grad=True)
    pr, rc, rr = torch.tensor([-3.0, -1.0]), torch.tensor([-1.5, -2.0]), torch.tensor([-2.5, -2.0])
    dpo_loss(pc, pr, rc, rr, beta=0.5).backward()
    m = torch.tensor([1.0, -1.0])
    assert pc.grad.tolist() == pytest.approx((-0.5 * torch.sigmoid(-0.5 * m) / 2).tolist(), abs=1e-7)


trl = pytest.importorskip("trl")

_DPO_TRAINERS: dict[float, object] = {}


def _dpo_trainer(beta: float):
    if beta not in _DPO_TRAINERS:
        from datasets import Dataset
        from transformers import AutoTokenizer
        from trl import DPOConfig, DPOTrainer

        from tests.trl_harness import _TMP, _tiny_model_dir

        path = _tiny_model_dir()
        args = DPOConfig(output_dir=_TMP, report_to="none", use_cpu=True, bf16=False, per_device_train_batch_size=2,
                         beta=beta, loss_type=["sigmoid"])
        ds = Dataset.from_dict({"prompt": ["1+1=", "2+2="], "chosen": ["2", "4"], "rejected": ["3", "5"]})
        t = DPOTrainer(model=path, args=args, processing_class=AutoTokenizer.from_pretrained(path), train_dataset=ds)
        t.precompute_ref_logps = True  # the reference log-probs come from the inputs: ours
        t.model.train()
        _DPO_TRAINERS[beta] = t
    return _DPO_TRAINERS[beta]


def trl_dpo(pc, pr, rc, rr, beta):
    """TRL 1.16's DPOTrainer._compute_loss on our sequence log-probs: its model forward is replaced by one whose
    per-token log-probs sum to exactly ``[pc; pr]`` (batch order [chosen, rejected]); returns loss and d loss / d[pc; pr]."""
    t = _dpo_trainer(beta)
    leaf = torch.cat([pc, pr]).detach().clone().requires_grad_(True)  # (2P,)
    B, L = leaf.shape[0], 5

    def fake_model(**kw):
        T = kw["labels"].shape[1] - 1
        lp = torch.cat([leaf.unsqueeze(1), torch.zeros(B, T - 1)], dim=1)  # (2P, T): the sum over T is leaf
        z = torch.zeros(B, T)
        return types.SimpleNamespace(log_probs=lp, entropy=z, mean_logits=z, is_top1=z.bool(), aux_loss=None)

    inputs = {"input_ids": torch.ones(B, L, dtype=torch.long), "attention_mask": torch.ones(B, L, dtype=torch.long),
              "completion_mask": torch.ones(B, L, dtype=torch.long),
              "ref_chosen_logps": rc.detach().clone(), "ref_rejected_logps": rr.detach().clone()}
    loss = t._compute_loss(fake_model, inputs, return_outputs=False)
    (grad,) = torch.autograd.grad(loss, leaf)
    return loss.detach(), grad


PARITY: dict[str, tuple[float, float]] = {}


@pytest.mark.parametrize("beta", [0.1, 0.5])
def test_dpo_loss_matches_trl(beta):
    g = torch.Generator().manual_seed(int(beta * 10))
    P = 6
    pc, pr, rc, rr = (-20 * torch.rand(P, generator=g) for _ in range(4))
    pc[0], rc[0] = pr[0] + 30.0, pr[0]  # a confident pair: a large margin
    theirs_loss, theirs_grad = trl_dpo(pc, pr, rc, rr, beta)
    leaf = torch.cat([pc, pr]).detach().clone().requires_grad_(True)
    ours = dpo_loss(leaf[:P], leaf[P:], rc, rr, beta=beta)
    (ours_grad,) = torch.autograd.grad(ours, leaf)
    dl, dg = (ours - theirs_loss).abs().item(), (ours_grad - theirs_grad).abs().max().item()
    PARITY[f"beta_DPO={beta}"] = (dl, dg)
    assert dl < 1e-6 and dg < 1e-7, (ours, theirs_loss)
    assert theirs_grad.abs().max() > 1e-3  # a real gradient was compared


if __name__ == "__main__":
    for b in (0.1, 0.5):
        test_dpo_loss_matches_trl(b)
    for k, (dl, dg) in PARITY.items():
        print(f"DPO {k}: |d loss| = {dl:.3g}, max |d grad| = {dg:.3g}")
    sys.exit(0)
