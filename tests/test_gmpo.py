"""GMPO (Zhao et al. 2025, Geometric-Mean Policy Optimization, arXiv 2507.20673): the registry's worked example.

1. Parity with TRL 1.16's own ``trl.experimental.gmpo.GMPOTrainer._compute_loss`` on identical tensors (loss, gradient
   and clip fractions), at TRL's default ``GMPOConfig`` (the paper's log-space bounds 0.4 / 0.4); and the TRL bridge's
   ``GRPOLessonsTrainer(grpo_config("gmpo"))`` against ``GMPOTrainer`` on one real batch of a tiny model (loss and
   every parameter's gradient).
2. A hand-computed case from the paper's product form, ``sgn(A) prod_t |min(r A, clip(r, e^-0.4, e^0.4) A)|^(1/|o|)``,
   with one clipped token of each advantage sign.
3. Properties (hypothesis): on policy the gradient is GRPO's; with bounds that clip nothing GMPO is GSPO without its
   clip (value and gradient); a clipped token gets exactly zero gradient and every other token of its sequence the
   same ``-A w / (B |o|)``; the clip bounds the sequence weight on the side the advantage pushes.
4. The loss has a real policy gradient: nonzero, and a small step along it raises the objective.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from grpo_lessons import get_variant, policy_loss
from grpo_lessons.core.objectives import OBJECTIVES, gmpo_surrogate

EPS = 0.4  # the paper's log-space bound, both sides


def batch(seed, B=6, T=9, spread=0.5, dtype=torch.float64):
    """Unequal lengths (a full-length first row), log-ratios of size ``spread`` (so 0.4 clips), random advantages."""
    g = torch.Generator().manual_seed(seed)
    logp = -torch.rand(B, T, generator=g, dtype=dtype) * 3 - 0.05
    old = logp + spread * torch.randn(B, T, generator=g, dtype=dtype)
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    lengths[0] = T
    mask = (torch.arange(T)[None, :] < lengths[:, None]).to(dtype)
    adv = torch.randn(B, generator=g, dtype=dtype)
    return logp, old, adv, mask


def loss_and_grad(logp, old, adv, mask, variant="gmpo", **kw):
    x = logp.clone().requires_grad_(True)
    out = policy_loss(x, old, adv, mask, variant=variant, **kw)
    out.loss.backward()
    return out, x.grad


# -- the registry entry --------------------------------------------------------------------------------------


def test_registry_entry_is_the_papers_gmpo():
    v = get_variant("gmpo")
    assert (v.advantage_scale, v.ratio_level, v.objective, v.aggregation) == (
        "group", "token", "gmpo", "seq_mean_token_mean")
    assert dict(v.loss_defaults) == {"epsilon": EPS, "epsilon_high": EPS}
    assert v.train_defaults["beta"] == 0.0 and "2507.20673" in v.citation
    obj = OBJECTIVES["gmpo"]
    assert obj.fn is gmpo_surrogate and obj.trl is None  # TRL's GRPOTrainer has no GMPO loss_type
    assert dict(obj.trl_fields) == {"epsilon": "epsilon", "epsilon_high": "epsilon_high"}
    assert not v.in_trl and not dict(v.trl)
    out = policy_loss(*batch(0)[:1], batch(0)[1], batch(0)[2], batch(0)[3], variant="gmpo")
    assert out.params == {"epsilon": EPS, "epsilon_high": EPS}
    # an explicit epsilon alone sets both sides, as GMPOConfig's unset epsilon_high does
    assert policy_loss(*batch(0), variant="gmpo", epsilon=0.3).params == {"epsilon": 0.3, "epsilon_high": 0.3}


def test_trl_defaults_are_the_registrys():
    gmpo = pytest.importorskip("trl.experimental.gmpo")
    cfg = gmpo.GMPOConfig(output_dir="/tmp/unused", report_to="none", use_cpu=True)
    high = cfg.epsilon if cfg.epsilon_high is None else cfg.epsilon_high
    assert (cfg.epsilon, high) == (get_variant("gmpo").loss_defaults["epsilon"],
                                   get_variant("gmpo").loss_defaults["epsilon_high"])
    assert cfg.beta == get_variant("gmpo").train_defaults["beta"]


def test_grpo_config_hands_the_log_space_bounds_to_trl_fields():
    pytest.importorskip("trl")
    from grpo_lessons.integrations.trl_bridge import grpo_config, trl_supports

    cfg = grpo_config("gmpo")
    assert (cfg.epsilon, cfg.epsilon_high, cfg.beta) == (EPS, EPS, 0.0)  # GMPOConfig's fields, same meaning
    assert cfg.importance_sampling_level == "token" and cfg.scale_rewards == "group"
    assert not trl_supports("gmpo")  # make_trainer picks GRPOLessonsTrainer


# -- 1. parity with TRL's GMPOTrainer on identical tensors ---------------------------------------------------

_TRAINERS: dict = {}


def gmpo_trainer(beta: float):
    """TRL's ``GMPOTrainer`` at its default ``GMPOConfig`` (and ``beta``), on the tiny offline Qwen2."""
    if beta not in _TRAINERS:
        gmpo = pytest.importorskip("trl.experimental.gmpo")
        from datasets import Dataset
        from transformers import AutoTokenizer
        from trl_harness import _TMP, _tiny_model_dir

        path = _tiny_model_dir()
        args = gmpo.GMPOConfig(output_dir=_TMP, report_to="none", use_cpu=True, bf16=False,
                               per_device_train_batch_size=4, num_generations=2, beta=beta)
        _TRAINERS[beta] = gmpo.GMPOTrainer(
            model=path, args=args, processing_class=AutoTokenizer.from_pretrained(path),
            train_dataset=Dataset.from_dict({"prompt": ["1+1"] * 4}),
            reward_funcs=[lambda completions, **_: [0.0] * len(completions)])
    return _TRAINERS[beta]


def trl_gmpo(logp, old, adv, mask, ref=None, beta=0.0):
    """TRL's GMPO loss, its gradient w.r.t. ``logp`` and its clip fractions: ``_compute_loss`` runs on our tensors
    (its per-token log-prob function is replaced by one that returns ``logp``)."""
    trainer = gmpo_trainer(beta)
    leaf = logp.detach().clone().requires_grad_(True)
    B, T = leaf.shape
    trainer._get_per_token_logps_and_entropies = lambda *a, **k: (leaf, torch.zeros_like(leaf), None)
    inputs = {"prompt_ids": torch.ones(B, 1, dtype=torch.long), "prompt_mask": torch.ones(B, 1, dtype=torch.long),
              "completion_ids": torch.ones(B, T, dtype=torch.long), "completion_mask": mask.to(torch.long),
              "advantages": adv.detach().clone(), "old_per_token_logps": old.detach().clone(),
              "num_items_in_batch": mask.sum()}
    if ref is not None:
        inputs["ref_per_token_logps"] = ref.detach().clone()
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1
    loss = trainer._compute_loss(trainer.model, inputs)
    (grad,) = torch.autograd.grad(loss, leaf)
    metrics = trainer._metrics["train"]
    return loss.detach(), grad, metrics["clip_ratio/low_mean"][-1], metrics["clip_ratio/high_mean"][-1]


def f32_batch(seed):
    logp, old, adv, mask = batch(seed, dtype=torch.float32)
    g = torch.Generator().manual_seed(seed + 1000)
    ref = logp + 0.2 * torch.randn(logp.shape, generator=g)
    return logp, old, adv, mask, ref


@pytest.mark.parametrize("beta", [0.0, 0.04])
@pytest.mark.parametrize("seed", [0, 1, 3])  # seeds whose batch clips tokens of both signs
def test_loss_gradient_and_clip_fractions_match_trls_gmpo_trainer(seed, beta):
    pytest.importorskip("trl.experimental.gmpo")
    logp, old, adv, mask, ref = f32_batch(seed)
    t_loss, t_grad, t_low, t_high = trl_gmpo(logp, old, adv, mask, ref if beta else None, beta)
    # TRL's GMPO adds beta times the per-sequence mean of k3, not weighted by the ratio
    ours, grad = loss_and_grad(logp, old, adv, mask, beta=beta, ref_logp=ref if beta else None,
                               kl_importance_weighted=False)
    assert ours.clip_frac_low > 0.02 and ours.clip_frac_high > 0.02, "the batch must clip tokens of both signs"
    assert grad.abs().max() > 1e-3
    assert abs(float(ours.loss.detach()) - float(t_loss)) < 1e-6, (float(ours.loss.detach()), float(t_loss))
    assert (grad - t_grad).abs().max() < 1e-6
    assert ours.clip_frac_low == pytest.approx(t_low, abs=1e-7)
    assert ours.clip_frac_high == pytest.approx(t_high, abs=1e-7)


def test_the_bridge_trains_what_trls_gmpo_trainer_trains(tmp_path):
    """``GRPOLessonsTrainer`` with ``grpo_config("gmpo")`` against ``GMPOTrainer`` at the same fields, one real
    batch of the tiny Qwen2 made off-policy: the loss and every parameter's gradient agree."""
    gmpo = pytest.importorskip("trl.experimental.gmpo")
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl_harness import _tiny_model_dir

    from grpo_lessons.integrations.trl_bridge import (
        GRPOLessonsTrainer,
        grpo_config,
        make_trainer,
    )

    path = _tiny_model_dir()
    tok = AutoTokenizer.from_pretrained(path)
    ds = Dataset.from_dict({"prompt": [f"What is {i}+{i}?" for i in range(8)]})

    def reward(completions, **_):
        return [float(len(c) % 5) for c in completions]

    size = {"output_dir": str(tmp_path), "per_device_train_batch_size": 4, "num_generations": 4, "max_completion_length": 8,
                "save_strategy": "no", "seed": 0}
    ours_cfg = grpo_config("gmpo", **size)
    trl_cfg = gmpo.GMPOConfig(report_to="none", use_cpu=True, bf16=False, **size)
    assert (ours_cfg.epsilon, ours_cfg.epsilon_high) == (trl_cfg.epsilon, trl_cfg.epsilon)
    ours = make_trainer("gmpo", model=path, args=ours_cfg, processing_class=tok, reward_funcs=[reward],
                        train_dataset=ds)
    assert isinstance(ours, GRPOLessonsTrainer)
    native = gmpo.GMPOTrainer(model=path, args=trl_cfg, processing_class=tok, reward_funcs=[reward],
                              train_dataset=ds)
    for t in (ours, native):
        t.model.train()
        t.current_gradient_accumulation_steps = 1
    torch.manual_seed(0)
    batch_ = native._generate_and_score_completions([ds[i] for i in range(1) for _ in range(4)])
    g = torch.Generator().manual_seed(0)
    B, T = batch_["completion_ids"].shape
    with torch.no_grad():
        ids = torch.cat([batch_["prompt_ids"], batch_["completion_ids"]], 1)
        att = torch.cat([batch_["prompt_mask"], batch_["completion_mask"]], 1)
        lp, _, _ = native._get_per_token_logps_and_entropies(native.model, ids, att, T)
    batch_["old_per_token_logps"] = lp + 0.5 * torch.randn(B, T, generator=g)
    batch_["advantages"] = torch.tensor([1.0, -1.0, 0.5, -0.5])

    def loss_grads(t):
        t.model.zero_grad(set_to_none=True)
        loss = t._compute_loss(t.model, batch_)
        loss.backward()
        return loss.detach(), {n: p.grad.clone() for n, p in t.model.named_parameters() if p.grad is not None}

    l_nat, g_nat = loss_grads(native)
    l_our, g_our = loss_grads(ours)
    assert native._metrics["train"]["clip_ratio/region_mean"][-1] > 0  # the batch clips
    assert abs(float(l_nat) - float(l_our)) < 1e-6
    assert g_nat.keys() == g_our.keys()
    assert max((g_nat[n] - g_our[n]).abs().max().item() for n in g_nat) < 1e-6
    assert math.sqrt(sum(float(v.norm()) ** 2 for v in g_nat.values())) > 1e-4


# -- 2. a hand-computed case ---------------------------------------------------------------------------------


def paper_objective(log_r: list[float], adv: float, eps_low: float = EPS, eps_high: float = EPS) -> float:
    """One sequence's term of the paper's objective, in its product form, in plain floats:
    ``sgn(A) (prod_t |min(r_t A, clip(r_t, e^-eps_low, e^eps_high) A)|)^(1/|o|)``."""
    prod = 1.0
    for lr in log_r:
        r = math.exp(lr)
        clipped = min(max(r, math.exp(-eps_low)), math.exp(eps_high))
        prod *= abs(min(r * adv, clipped * adv))
    return math.copysign(prod ** (1.0 / len(log_r)), adv)


def test_hand_case_with_a_clipped_token_of_each_sign():
    """Sequence 1 (A = +1.5): log r = (0.6, -0.6, 0.1); 0.6 > 0.4 is clipped (A > 0 caps it), -0.6 is not (the
    lower bound binds only for A < 0).  Sequence 2 (A = -0.5): log r = (-0.7, 0.7) and one padding token; -0.7 is
    clipped (floored at -0.4), 0.7 is not."""
    log_r = torch.tensor([[0.6, -0.6, 0.1], [-0.7, 0.7, 0.0]], dtype=torch.float64)
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]], dtype=torch.float64)
    adv = torch.tensor([1.5, -0.5], dtype=torch.float64)
    old = torch.full_like(log_r, -1.0)
    logp = old + log_r

    j1 = paper_objective([0.6, -0.6, 0.1], 1.5)
    j2 = paper_objective([-0.7, 0.7], -0.5)
    # the same numbers by hand: 1.5 exp((0.4 - 0.6 + 0.1) / 3) and -0.5 exp((-0.4 + 0.7) / 2)
    assert j1 == pytest.approx(1.5 * math.exp(-0.1 / 3), rel=1e-12) and j1 == pytest.approx(1.450824, abs=1e-6)
    assert j2 == pytest.approx(-0.5 * math.exp(0.15), rel=1e-12) and j2 == pytest.approx(-0.580917, abs=1e-6)
    want_loss = -(j1 + j2) / 2  # the mean over the two sequences, as a loss
    assert want_loss == pytest.approx(-0.434954, abs=1e-6)

    out, grad = loss_and_grad(logp, old, adv, mask)
    assert float(out.loss.detach()) == pytest.approx(want_loss, abs=1e-12)
    # d loss / d log pi_t = -A w / (B |o|) on an unclipped token, exactly 0 on a clipped one and on padding
    g1 = -1.5 * math.exp(-0.1 / 3) / (2 * 3)
    g2 = 0.5 * math.exp(0.15) / (2 * 2)
    want_grad = torch.tensor([[0.0, g1, g1], [0.0, g2, 0.0]], dtype=torch.float64)
    assert torch.allclose(grad, want_grad, atol=1e-12, rtol=0), grad
    assert g1 == pytest.approx(-0.241804, abs=1e-6) and g2 == pytest.approx(0.145229, abs=1e-6)
    assert out.clip_frac_low == pytest.approx(1 / 5) and out.clip_frac_high == pytest.approx(1 / 5)
    assert out.extras["gmpo/seq_weight_mean"] == pytest.approx((3 * math.exp(-0.1 / 3) + 2 * math.exp(0.15)) / 5)

    if _has_trl_gmpo():  # TRL's trainer on the same six numbers
        t_loss, t_grad, t_low, t_high = trl_gmpo(logp.float(), old.float(), adv.float(), mask.float())
        assert float(t_loss) == pytest.approx(want_loss, abs=1e-6)
        assert torch.allclose(t_grad.double(), want_grad, atol=1e-6)
        assert (t_low, t_high) == (pytest.approx(0.2), pytest.approx(0.2))


def _has_trl_gmpo() -> bool:
    try:
        import trl.experimental.gmpo  # noqa: F401
    except ImportError:
        return False
    return True


# -- 3. properties -------------------------------------------------------------------------------------------


@settings(max_examples=30)
@given(seed=st.integers(0, 10_000), B=st.integers(1, 6), T=st.integers(1, 9))
def test_on_policy_gradient_is_grpos(seed, B, T):
    """At ratio 1 nothing is clipped and w = 1: the value is -mean(A) and the gradient GRPO's, -A / (B |o|)."""
    logp, _, adv, mask = batch(seed, B=B, T=T)
    out, g = loss_and_grad(logp, logp, adv, mask)
    _, g_grpo = loss_and_grad(logp, logp, adv, mask, variant="grpo")
    assert float(out.loss.detach()) == pytest.approx(float(-adv.mean()), abs=1e-12)
    assert torch.allclose(g, g_grpo, atol=1e-12)
    assert out.clip_frac == 0.0


@settings(max_examples=30)
@given(seed=st.integers(0, 10_000), spread=st.sampled_from([0.05, 0.3, 1.0]))
def test_without_clipping_gmpo_is_gspo_without_its_clip(seed, spread):
    """Bounds no token reaches: exp(mean log r) is GSPO's sequence ratio s_i, so the loss is GSPO's unclipped."""
    logp, old, adv, mask = batch(seed, spread=spread)
    out, g = loss_and_grad(logp, old, adv, mask, epsilon=50.0)
    ref, g_ref = loss_and_grad(logp, old, adv, mask, variant="gspo", epsilon=1e6)
    assert out.clip_frac == 0.0 and ref.clip_frac == 0.0
    assert torch.allclose(out.loss, ref.loss, atol=1e-12)
    assert torch.allclose(g, g_ref, atol=1e-12)


@settings(max_examples=40)
@given(seed=st.integers(0, 10_000), spread=st.sampled_from([0.2, 0.5, 1.0]),
       eps_low=st.sampled_from([0.1, 0.2, 0.4]), eps_high=st.sampled_from([0.1, 0.28, 0.4]))
def test_clipped_tokens_get_zero_gradient_and_the_rest_share_one(seed, spread, eps_low, eps_high):
    logp, old, adv, mask = batch(seed, spread=spread)
    out, g = loss_and_grad(logp, old, adv, mask, epsilon=eps_low, epsilon_high=eps_high)
    lr = logp - old
    a = adv[:, None].expand_as(lr)
    clipped = (((lr > eps_high) & (a > 0)) | ((lr < -eps_low) & (a < 0))) & (mask > 0)
    assert (g[clipped] == 0).all() and (g[mask == 0] == 0).all()
    # the sequence weight w_i = exp(mean of the clipped log-ratios), from the equation
    clip_lr = torch.where(a > 0, lr.clamp(max=eps_high), lr.clamp(min=-eps_low))
    w = torch.exp((clip_lr * mask).sum(-1) / mask.sum(-1))  # (B,)
    B = lr.shape[0]
    want = (-adv * w / (B * mask.sum(-1)))[:, None].expand_as(lr)
    free = ~clipped & (mask > 0)
    assert torch.allclose(g[free], want[free], atol=1e-12, rtol=1e-10)
    assert float(out.loss.detach()) == pytest.approx(float((-adv * w).mean()), abs=1e-12)
    # the clip bounds the weight on the side the advantage pushes
    assert (w[adv > 0] <= math.exp(eps_high) + 1e-12).all()
    assert (w[adv < 0] >= math.exp(-eps_low) - 1e-12).all()
    n = mask.sum()
    assert out.clip_frac_low == pytest.approx(float((((lr < -eps_low) & (a < 0)) * mask).sum() / n))
    assert out.clip_frac_high == pytest.approx(float((((lr > eps_high) & (a > 0)) * mask).sum() / n))


# -- 4. a real policy gradient -------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_objective_has_a_policy_gradient_that_raises_it(seed):
    logp, old, adv, mask = batch(seed, spread=0.3)
    out, g = loss_and_grad(logp, old, adv, mask)
    assert g.norm() > 1e-3
    # unclipped tokens of a positive-advantage sequence are pushed up, of a negative one down
    rows_up, rows_down = adv > 0, adv < 0
    assert (g[rows_up][mask[rows_up] > 0] <= 0).all() and (g[rows_up] < 0).any()
    assert (g[rows_down][mask[rows_down] > 0] >= 0).all() and (g[rows_down] > 0).any()
    stepped = policy_loss(logp - 1e-3 * g, old, adv, mask, variant="gmpo").loss
    assert float(stepped) < float(out.loss.detach())  # gradient descent on the loss raises the objective
