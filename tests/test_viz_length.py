"""Aggregation weights, length drift, overlong penalty/filter, zero-gradient groups (03, 06, 07): no display."""

import math

import pytest
import torch

from grpo_lessons.core.aggregation import token_weights
from grpo_lessons.course.viz import length


def _controls(w):
    return {c.description for c in w.children if getattr(c, "description", "")}


# ----------------------------------------------------------------------------- 03 normalisations

def test_normalisation_weights_match_token_weights():
    lengths = [3, 7, 20]
    d = length.normalisation_weights(lengths, max_completion_length=32)
    B, T = 3, 20
    assert d["T"] == T
    # grpo: 1/(B |o_i|) per token, 1/B per completion
    assert torch.allclose(d["per_token"]["grpo"], torch.tensor([1 / (B * n) for n in lengths], dtype=torch.float64),
                          atol=1e-7)
    assert torch.allclose(d["per_sequence"]["grpo"], torch.full((3,), 1 / B, dtype=torch.float64), atol=1e-6)
    # bnpo = dapo: 1 / sum |o| per token
    for v in ("bnpo", "dapo"):
        assert torch.allclose(d["per_token"][v], torch.full((3,), 1 / sum(lengths), dtype=torch.float64), atol=1e-7)
    # dr_grpo: 1 / (B * max_completion_length)
    assert torch.allclose(d["per_token"]["dr_grpo"], torch.full((3,), 1 / (B * 32), dtype=torch.float64), atol=1e-7)
    mask = (torch.arange(T)[None] < torch.tensor(lengths)[:, None]).float()
    w = token_weights(mask, "seq_mean_token_mean")
    assert torch.allclose(d["per_sequence"]["grpo"].float(), w.sum(-1))
    length.plot_normalisation_weights(d)
    with pytest.raises(ValueError):
        length.normalisation_weights([0, 3])


def test_normalisation_widget_constructs():
    w = length.normalisation_widget()
    assert {"n_completions", "longest", "max_completion_length"} <= _controls(w)
    d = w.result
    assert d["lengths"][0].item() == 4 and d["lengths"][-1].item() == 256
    assert d["max_completion_length"] == 1024
# ----------------------------------------------------------------------------- 06 Dr. GRPO

def test_length_weight_curves_closed_forms():
    d = length.length_weight_curves([1, 4, 64, 256], other_lengths=(64,) * 7, max_completion_length=512)
    ls = d["lengths"]
    B, L = 8, 512
    assert torch.allclose(d["per_token"]["grpo"], 1 / (B * ls), rtol=1e-6)
    assert torch.allclose(d["per_sequence"]["grpo"], torch.full_like(ls, 1 / B), rtol=1e-6)
    assert torch.allclose(d["per_token"]["dapo"], 1 / (ls + 7 * 64), rtol=1e-6)
    assert torch.allclose(d["per_token"]["bnpo"], d["per_token"]["dapo"])
    assert torch.allclose(d["per_token"]["dr_grpo"], torch.full_like(ls, 1 / (B * L)), rtol=1e-6)
    assert torch.allclose(d["per_sequence"]["dr_grpo"], ls / (B * L), rtol=1e-6)
    # a 1-token answer's token weighs 256x a 256-token answer's token under grpo, the same under dr_grpo
    assert d["per_token"]["grpo"][0] / d["per_token"]["grpo"][-1] == pytest.approx(256)
    with pytest.raises(ValueError):
        length.length_weight_curves([600], max_completion_length=512)
    length.plot_length_weights(d)


def test_length_drift_grpo_lengthens_wrong_answers_dr_grpo_does_not():
    grpo = length.length_drift("grpo", steps=60, seed=0)
    dr = length.length_drift("dr_grpo", steps=60, seed=0)
    w0 = grpo["expected_length_wrong"][0].item()
    assert w0 == pytest.approx((1 - (1 - 1 / 16) ** 64) * 16, rel=1e-9)  # truncated geometric at the start
    assert grpo["expected_length_wrong"][-1] > 1.8 * w0  # wrong answers grow longer under 1/|o|
    assert grpo["expected_length_right"][-1] < 0.5 * grpo["expected_length_right"][0]  # right ones shorter
    assert abs(dr["expected_length_wrong"][-1] / w0 - 1) < 0.3  # no systematic drift under the constant
    assert abs(dr["expected_length_right"][-1] / dr["expected_length_right"][0] - 1) < 0.3
    again = length.length_drift("grpo", steps=5, seed=0)
    assert torch.equal(again["expected_length_wrong"], grpo["expected_length_wrong"][:6])  # seeded
    length.plot_length_drift([grpo, dr])


def test_length_weight_widget_constructs():
    w = length.length_weight_widget()
    assert {"other len", "B", "L"} <= _controls(w)
    assert w.result["batch_size"] == 8


# ----------------------------------------------------------------------------- 07 DAPO overlong, dynamic sampling

def test_overlong_penalty_curves():
    d = length.overlong_penalty_curves(20480, 4096, n=11, beyond=1.0)  # lengths 0, 2048, ..., 20480
    assert d["paper"].tolist() == pytest.approx([0] * 9 + [-0.5, -1.0])
    assert d["chapter"][2].item() == pytest.approx(-(4096 - 4096) / 16384)
    assert d["chapter"][4].item() == pytest.approx(-(8192 - 4096) / 16384)
    assert d["onset_paper"] == 16384 and d["onset_chapter"] == 4096
    big = length.overlong_penalty_curves(20480, 4096, n=6, beyond=1.25)
    assert big["paper"][-1] == -1 and big["chapter"][-1] < -1  # the chapter's keeps falling past L_max
    length.plot_overlong_penalty(d)


def test_zero_gradient_grid():
    d = length.zero_gradient_grid([0.0, 0.1, 0.5, 1.0], group_sizes=(2, 8))
    assert d["zero_share"][0].tolist() == pytest.approx([1.0, 0.82, 0.5, 1.0])
    assert d["zero_share"][1, 2].item() == pytest.approx(2 / 256)
    assert d["extra_per_useful"][0, 2].item() == pytest.approx(1.0)  # q = 1/2: one extra group per kept one
    assert math.isinf(d["extra_per_useful"][0, 0].item())
    length.plot_zero_gradient_grid(length.zero_gradient_grid())


def test_overlong_filter_effect():
    d = length.overlong_filter_effect([5, 8, 8, 3], [False, True, True, False])
    assert d["tokens_removed"] == 16 and d["share_removed"] == pytest.approx(16 / 24)
    assert d["completion_weight_after"].tolist() == pytest.approx([5 / 8, 0, 0, 3 / 8])  # dapo token mean
    assert d["completion_weight_before"].tolist() == pytest.approx([5 / 24, 8 / 24, 8 / 24, 3 / 24])
    with pytest.raises(ValueError):
        length.overlong_filter_effect([1, 2], [True])
    length.plot_overlong_filter(d)


def test_overlong_widget_constructs():
    w = length.overlong_widget()
    assert {"L_max", "L_cache", "factor"} <= _controls(w) and w.result["onset_paper"] == 16384
