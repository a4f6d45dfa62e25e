"""The pieces TRL's GRPOTrainer has beyond the loss types: INTELLECT-2's two-sided ``delta`` clip, LUSPO's
aggregation, the top-entropy token mask, the entropy bonus (static and Skywork-OR1's adaptive coefficient) and the
MoE router aux loss.  Each is checked against TRL 1.16's own ``GRPOTrainer._compute_loss`` on identical tensors
(loss and gradients w.r.t. the log-probs, the entropies and the aux loss), by hand from the paper's equation, and
shown to bite (the setting changes the number it claims to change).
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from grpo_lessons import policy_loss
from grpo_lessons.core.aggregation import aggregate
from grpo_lessons.core.entropy import adaptive_entropy_coef, gated_entropy_coef, high_entropy_mask
from grpo_lessons.core.objectives import clipped_surrogate
from test_parity_core import random_batch
from trl_harness import trl_loss_full

TOL = 1e-6


def _entropies(seed: int, shape) -> torch.Tensor:
    g = torch.Generator().manual_seed(1000 + seed)
    return torch.rand(shape, generator=g) * 3.0  # nats, as a small vocabulary's


def compare(variant: str, trl_fields: dict, ours: dict, *, seed: int = 0, beta: float = 0.04, entropy: bool = False,
            aux: float | None = None, aux_coef: float = 0.0) -> dict:
    """policy_loss vs TRL's _compute_loss on one random batch: max |dloss|, |dgrad| (log-probs, entropies, aux)."""
    logp, old, ref, adv, mask = random_batch(seed)
    T = logp.shape[1]
    ent = _entropies(seed, logp.shape) if entropy else None
    aux_t = None if aux is None else torch.tensor(aux)
    trl = trl_loss_full(logp, old, adv, mask, ref_logp=ref if beta else None, beta=beta, max_completion_length=T,
                        entropy=ent, aux_loss=aux_t, router_aux_loss_coef=aux_coef, **trl_fields)
    x = logp.clone().requires_grad_(True)
    e = None if ent is None else ent.clone().requires_grad_(True)
    a = None if aux_t is None else aux_t.clone().requires_grad_(True)
    kw = dict(ours)
    if a is not None:
        kw.update(aux_loss=a, aux_loss_coef=aux_coef)
    out = policy_loss(x, old, adv, mask, variant=variant, beta=beta, ref_logp=ref if beta else None,
                      max_completion_length=T, entropy=e, **kw)
    leaves = [t for t in (x, e, a) if t is not None]
    grads = torch.autograd.grad(out.loss, leaves, allow_unused=True)
    grads = [torch.zeros_like(t) if g is None else g for t, g in zip(leaves, grads)]
    res = {"dloss": (out.loss.detach() - trl["loss"]).abs().item(), "loss": trl["loss"].item(), "out": out,
           "dgrad": (grads[0] - trl["grad_logp"]).abs().max().item(), "grad_norm": trl["grad_logp"].norm().item()}
    if e is not None:
        res["dgrad_entropy"] = (grads[1] - trl["grad_entropy"]).abs().max().item()
        res["grad_entropy_norm"] = trl["grad_entropy"].norm().item()
    if a is not None:
        res["dgrad_aux"] = abs(float(grads[-1]) - float(trl["grad_aux"]))
    return res


def _ok(res: dict) -> None:
    assert res["grad_norm"] > 1e-3, res  # a real gradient, not two zeros agreeing
    for k in ("dloss", "dgrad", "dgrad_entropy", "dgrad_aux"):
        if k in res:
            assert res[k] < TOL, (k, res)


# -- delta: INTELLECT-2's two-sided clip ---------------------------------------------------------------------------

DELTA_CASES = {
    "grpo": ({"loss_type": "grpo", "epsilon": 0.2}, {}),
    "dapo": ({"loss_type": "dapo", "epsilon": 0.2, "epsilon_high": 0.28}, {}),
    "dr_grpo": ({"loss_type": "dr_grpo", "epsilon": 0.2}, {}),
    "luspo": ({"loss_type": "luspo", "importance_sampling_level": "sequence", "epsilon": 0.2}, {"epsilon": 0.2}),
}


@pytest.mark.parametrize("variant", list(DELTA_CASES))
@pytest.mark.parametrize("seed", [0, 1])
def test_delta_matches_trl_and_bites(variant, seed):
    trl_fields, ours = DELTA_CASES[variant]
    delta = 1.02 if variant == "luspo" else 1.25  # token ratios of the batch reach ~2.5, sequence ones ~1.1
    res = compare(variant, {**trl_fields, "delta": delta}, {**ours, "delta": delta}, seed=seed)
    _ok(res)
    plain = compare(variant, trl_fields, ours, seed=seed)
    assert abs(plain["loss"] - res["loss"]) > 1e-4, "delta changed nothing: the batch must put A < 0 beyond it"


def test_delta_by_hand():
    """-min(min(r, d) A, clip(r, 0.8, 1.2) A) for r = 3, A = -1, d = 2: 2 (plain clip: 3), and no gradient."""
    r = torch.tensor([[3.0]], requires_grad=True)
    adv = torch.tensor([[-1.0]])
    out = clipped_surrogate(r, adv, epsilon=0.2, delta=2.0)
    assert float(out.per_token_loss.detach()) == pytest.approx(2.0)
    out.per_token_loss.sum().backward()
    assert float(r.grad) == 0.0  # beyond delta the token is clipped
    assert float(clipped_surrogate(r.detach(), adv, epsilon=0.2).per_token_loss) == pytest.approx(3.0)
    # A > 0 and delta >= 1 + eps: the plain clip already binds, delta changes nothing
    pos = torch.tensor([[1.0]])
    assert float(clipped_surrogate(r.detach(), pos, epsilon=0.2, delta=2.0).per_token_loss) == pytest.approx(-1.2)
    with pytest.raises(ValueError, match="delta"):
        clipped_surrogate(r.detach(), adv, epsilon=0.2, delta=0.0)


# -- LUSPO: GSPO with each completion's loss times its length ----------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("beta", [0.0, 0.04])
def test_luspo_matches_trl(seed, beta):
    fields = {"loss_type": "luspo", "importance_sampling_level": "sequence", "epsilon": 3e-4, "epsilon_high": 4e-4}
    _ok(compare("luspo", fields, {}, seed=seed, beta=beta))


def test_luspo_is_gspo_times_length_by_hand():
    """One sequence-level loss per completion: LUSPO averages |o_i| times it, GSPO averages it."""
    lengths = torch.tensor([2.0, 5.0, 1.0])
    per_seq = torch.tensor([0.3, -0.1, 0.7])  # any per-completion loss, constant along the tokens
    mask = (torch.arange(5)[None, :] < lengths[:, None]).float()  # (3, 5)
    per_token = per_seq[:, None].expand(3, 5)
    assert float(aggregate(per_token, mask, "seq_mean_token_sum")) == pytest.approx(float((lengths * per_seq).mean()))
    assert float(aggregate(per_token, mask, "seq_mean_token_mean")) == pytest.approx(float(per_seq.mean()))


# -- the top-entropy mask (Beyond the 80/20 Rule) ------------------------------------------------------------------


@pytest.mark.parametrize("variant,fields", [
    ("grpo", {"loss_type": "grpo", "epsilon": 0.2}),
    ("dapo", {"loss_type": "dapo", "epsilon": 0.2, "epsilon_high": 0.28}),
    ("cispo", {"loss_type": "cispo", "epsilon_high": 5.0}),
    ("sapo", {"loss_type": "sapo"}),
])
@pytest.mark.parametrize("rho", [0.0, 0.2, 0.5])
def test_top_entropy_quantile_matches_trl(variant, fields, rho):
    res = compare(variant, {**fields, "top_entropy_quantile": rho}, {"top_entropy_quantile": rho}, seed=3,
                  entropy=True)
    _ok(res)
    kept = res["out"].entropy_kept_frac
    assert kept < 0.65 if rho < 1 else kept == 1.0, kept  # the mask drops tokens


def test_high_entropy_mask_by_hand():
    h = torch.tensor([[1.0, 4.0, 2.0, 3.0], [0.5, 9.0, 9.0, 9.0]])
    m = torch.tensor([[1.0, 1.0, 1.0, 1.0], [1.0, 0.0, 0.0, 0.0]])
    # pool = [1, 4, 2, 3, 0.5]; the 0.6 quantile (rho = 0.4) of it is 2.4: keep 4 and 3, never the padding
    keep = high_entropy_mask(h, m, 0.4)
    assert keep.tolist() == [[0.0, 1.0, 0.0, 1.0], [0.0, 0.0, 0.0, 0.0]]
    assert high_entropy_mask(h, m, 1.0).tolist() == m.tolist()
    assert high_entropy_mask(h, m, 0.0).tolist() == [[0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]]
    # a pool from elsewhere (every process's tokens) sets the threshold
    assert high_entropy_mask(h, m, 0.5, pool=torch.tensor([10.0, 20.0])).sum() == 0
    assert high_entropy_mask(h, torch.zeros_like(m), 0.5).sum() == 0
    for bad in (-0.1, 1.5, True):
        with pytest.raises(ValueError, match="top_quantile"):
            high_entropy_mask(h, m, bad)
    with pytest.raises(ValueError, match="NaN"):
        high_entropy_mask(torch.full_like(h, float("nan")), m, 0.5)


@given(st.lists(st.floats(0.0, 10.0), min_size=1, max_size=40), st.floats(0.0, 1.0))
def test_high_entropy_mask_keeps_the_top_tokens(values, rho):
    h = torch.tensor([values], dtype=torch.float64)
    keep = high_entropy_mask(h, torch.ones_like(h), rho)[0].bool()
    assert keep.any()  # the maximum is always kept
    if (~keep).any():
        assert float(h[0][keep].min()) > float(h[0][~keep].max())  # every kept token beats every dropped one


# -- the entropy bonus ------------------------------------------------------------------------------------------

BONUS_CASES = {
    "grpo": {"loss_type": "grpo", "epsilon": 0.2},
    "bnpo": {"loss_type": "bnpo", "epsilon": 0.2},
    "dr_grpo": {"loss_type": "dr_grpo", "epsilon": 0.2},
    "dapo": {"loss_type": "dapo", "epsilon": 0.2, "epsilon_high": 0.28},
    "cispo": {"loss_type": "cispo", "epsilon_high": 5.0},
    "sapo": {"loss_type": "sapo"},
    "vespo": {"loss_type": "vespo"},
    "luspo": {"loss_type": "luspo", "importance_sampling_level": "sequence", "epsilon": 3e-4, "epsilon_high": 4e-4},
}


@pytest.mark.parametrize("variant", list(BONUS_CASES))
def test_entropy_bonus_matches_trl_for_every_loss_type(variant):
    res = compare(variant, {**BONUS_CASES[variant], "entropy_coef": 0.3}, {"entropy_coef": 0.3}, seed=4,
                  entropy=True)
    _ok(res)
    assert res["grad_entropy_norm"] > 1e-3  # the bonus pushes the entropies


def test_entropy_bonus_with_the_top_entropy_mask_matches_trl():
    res = compare("dr_grpo", {"loss_type": "dr_grpo", "epsilon": 0.2, "entropy_coef": 0.2, "top_entropy_quantile": 0.4},
                  {"entropy_coef": 0.2, "top_entropy_quantile": 0.4}, seed=5, entropy=True)
    _ok(res)


def test_entropy_bonus_by_hand():
    """loss = policy + beta KL - c * (token mean of H over the kept tokens), whatever the aggregation."""
    logp, old, ref, adv, mask = random_batch(6)
    h = _entropies(6, logp.shape)
    base = policy_loss(logp, old, adv, mask, variant="dr_grpo", max_completion_length=32)
    out = policy_loss(logp, old, adv, mask, variant="dr_grpo", max_completion_length=32, entropy=h, entropy_coef=0.5)
    token_mean = float((h * mask).sum() / mask.sum())
    assert float(out.loss) == pytest.approx(float(base.loss) - 0.5 * token_mean, abs=1e-6)
    assert out.entropy_bonus == pytest.approx(token_mean)
    assert float(out.policy_kl_loss) == pytest.approx(float(base.loss))
    # aggregated as the loss is instead (veRL's entropy_coeff): Dr. GRPO's constant divides it
    agg = policy_loss(logp, old, adv, mask, variant="dr_grpo", max_completion_length=32, entropy=h, entropy_coef=0.5,
                      entropy_aggregation="seq_mean_token_sum_norm")
    assert agg.entropy_bonus == pytest.approx(float((h * mask).sum() / (mask.shape[0] * 32)))
    with pytest.raises(ValueError, match="entropy_coef != 0 needs entropy"):
        policy_loss(logp, old, adv, mask, variant="grpo", entropy_coef=0.1)
    with pytest.raises(ValueError, match="top_entropy_quantile < 1 needs entropy"):
        policy_loss(logp, old, adv, mask, variant="grpo", top_entropy_quantile=0.2)
    with pytest.raises(ValueError, match="not both"):
        policy_loss(logp, old, adv, mask, variant="grpo", entropy=h, top_entropy_quantile=0.2, entropy_mask=mask)
    with pytest.raises(ValueError, match="entropy contains NaN"):
        policy_loss(logp, old, adv, mask, variant="grpo", entropy=torch.full_like(h, float("nan")), entropy_coef=0.1)


# -- adaptive entropy (Skywork-OR1) -------------------------------------------------------------------------------


def test_adaptive_entropy_follows_trl_step_by_step():
    """Five optimizer steps through TRL's controller and ours: the same gated coefficient in the loss and the same
    next coefficient, with the entropy crossing the target both ways."""
    fields = {"loss_type": "grpo", "epsilon": 0.2, "entropy_coef": 0.02, "use_adaptive_entropy": True,
              "entropy_target": 1.5, "entropy_coef_delta": 0.01, "entropy_coef_min": 0.005, "entropy_coef_max": 0.035}
    logp, old, _, adv, mask = random_batch(7)
    T = logp.shape[1]
    coef, last = 0.02, math.inf
    from trl_harness import trl_trainer

    trl_trainer(beta=0.0, max_completion_length=T, **fields).entropy_coef = 0.02  # a fresh controller
    trl_trainer(beta=0.0, max_completion_length=T, **fields)._last_world_entropy = math.inf
    for step, level in enumerate([1.0, 1.0, 2.5, 0.4, 0.4]):  # mean entropy below, below, above, below, below
        h = torch.full(logp.shape, level)
        trl = trl_loss_full(logp, old, adv, mask, beta=0.0, max_completion_length=T, entropy=h, **fields)
        applied = gated_entropy_coef(coef, last, fields["entropy_target"])
        out = policy_loss(logp, old, adv, mask, variant="grpo", epsilon=0.2, entropy=h, entropy_coef=applied)
        assert abs(float(out.loss) - float(trl["loss"])) < TOL, (step, applied)
        coef = adaptive_entropy_coef(coef, level, target=fields["entropy_target"], step=fields["entropy_coef_delta"],
                                     coef_min=fields["entropy_coef_min"], coef_max=fields["entropy_coef_max"])
        last = level
        assert trl["trainer"].entropy_coef == pytest.approx(coef), step
    assert coef == pytest.approx(0.035)  # 0.02 -> 0.03 -> 0.035 (cap) -> 0.025 -> 0.035 -> 0.035 (cap)


def test_adaptive_entropy_by_hand():
    assert gated_entropy_coef(0.1, math.inf, 0.2) == 0.0  # nothing measured yet: no bonus
    assert gated_entropy_coef(0.1, 0.2, 0.2) == 0.1 and gated_entropy_coef(0.1, 0.21, 0.2) == 0.0
    assert adaptive_entropy_coef(0.1, 0.1, target=0.2, step=0.05) == pytest.approx(0.15)
    assert adaptive_entropy_coef(0.1, 0.3, target=0.2, step=0.05, coef_min=0.08) == pytest.approx(0.08)
    assert adaptive_entropy_coef(0.98, 0.0, target=0.2, step=0.05) == 1.0
    with pytest.raises(ValueError, match="finite"):
        adaptive_entropy_coef(0.1, float("nan"), target=0.2, step=0.05)


# -- the MoE router aux loss -------------------------------------------------------------------------------------


@pytest.mark.parametrize("variant,fields", [("grpo", {"loss_type": "grpo", "epsilon": 0.2}),
                                            ("dapo", {"loss_type": "dapo", "epsilon": 0.2})])
def test_aux_loss_matches_trl(variant, fields):
    res = compare(variant, fields, {"epsilon": 0.2}, seed=8, aux=0.73, aux_coef=0.01)
    _ok(res)
    plain = compare(variant, fields, {"epsilon": 0.2}, seed=8)
    assert res["loss"] - plain["loss"] == pytest.approx(0.01 * 0.73, abs=1e-6)  # + coef * aux, no normaliser
    assert res["out"].aux_loss == pytest.approx(0.73)
    with pytest.raises(ValueError, match="aux_loss_coef != 0 needs aux_loss"):
        logp, old, _, adv, mask = random_batch(8)
        policy_loss(logp, old, adv, mask, variant="grpo", aux_loss_coef=0.01)
