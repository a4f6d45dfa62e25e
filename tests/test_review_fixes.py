"""Fixes from the review of the loss pieces and the TRL bridge, each checked against the number it must give:
policy_loss in fp32 for bf16 inputs, Dr. GRPO's constant, TRL's logged kl, TRL's dapo normaliser, and the
2-GRPO / DPO gradient directions."""

import warnings

import pytest
import torch

from grpo_lessons import policy_loss
from grpo_lessons.core.aggregation import aggregate
from grpo_lessons.core.pairwise import pairwise_grpo_loss


# --- policy_loss computes in fp32 ------------------------------------------------------------------------------

def test_bf16_inputs_are_scored_in_fp32_so_gspo_clips():
    # log-ratio 5e-4 > GSPO's epsilon_high 4e-4: the sequence must clip. In bf16, exp(5e-4) rounds to 1.
    lp = torch.tensor([[-0.0010, -0.0010]], dtype=torch.bfloat16, requires_grad=True)
    old = torch.tensor([[-0.0015, -0.0015]], dtype=torch.bfloat16)
    assert float(lp.detach().float()[0, 0] - old.float()[0, 0]) > 4e-4  # the inputs themselves differ enough
    adv, mask = torch.tensor([1.0]), torch.ones(1, 2)
    out = policy_loss(lp, old, adv, mask, variant="gspo")
    ref = policy_loss(lp.detach().float(), old.float(), adv, mask, variant="gspo")
    assert out.loss.dtype == torch.float32
    assert out.clip_frac_high == 1.0 and ref.clip_frac_high == 1.0
    torch.testing.assert_close(out.loss.detach(), ref.loss)
    out.loss.backward()
    assert float(lp.grad.abs().max()) == 0.0  # clipped: no gradient


# --- Dr. GRPO needs its constant ----------------------------------------------------------------------------

def test_dr_grpo_without_the_constant_warns_and_depends_on_padding():
    per_tok = torch.tensor([[1.0, 2.0, 0.0], [3.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    wide_t = torch.cat([per_tok, torch.zeros(2, 2)], 1)
    wide_m = torch.cat([mask, torch.zeros(2, 2)], 1)
    with pytest.warns(UserWarning, match="padded width T = 3"):
        a = aggregate(per_tok, mask, "seq_mean_token_sum_norm")
    with pytest.warns(UserWarning, match="padded width T = 5"):
        b = aggregate(wide_t, wide_m, "seq_mean_token_sum_norm")
    assert float(a) == pytest.approx(6 / (2 * 3)) and float(b) == pytest.approx(6 / (2 * 5))  # same batch, two losses
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # with the constant: no warning, and padding does not matter
        assert float(aggregate(per_tok, mask, "seq_mean_token_sum_norm", max_completion_length=8)) == pytest.approx(
            float(aggregate(wide_t, wide_m, "seq_mean_token_sum_norm", max_completion_length=8)))


def test_the_trainer_passes_dr_grpos_constant(tmp_path):
    from test_trainer import ROWS, cfg, digits

    from grpo_lessons.training.trainer import Trainer

    tr = Trainer(cfg(tmp_path, eval_size=0, variant="dr_grpo"), train_rows=ROWS, reward_funcs=[digits])
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        tr.step()


def test_a_given_token_count_is_not_clamped_again():
    per_tok, mask = torch.tensor([[2.0, 0.0]]), torch.tensor([[1.0, 0.0]])
    # TRL: one loss token, rescaled to a quarter of the generation batch -> 0.25; loss = 2 / 0.25
    assert float(aggregate(per_tok, mask, "token_mean", num_items_in_batch=0.25)) == pytest.approx(8.0)
    with pytest.raises(ValueError, match="num_items_in_batch must be > 0"):
        aggregate(per_tok, mask, "token_mean", num_items_in_batch=0.0)


# --- 2-GRPO and DPO: the same direction only for equal lengths ------------------------------------------------

def _directions(len_w: int, len_l: int):
    """Gradients w.r.t. a shared unigram policy's logits: 2-GRPO's pair loss and DPO's log-likelihood margin."""
    V = 7
    g = torch.Generator().manual_seed(len_w * 10 + len_l)
    theta = torch.randn(V, generator=g, requires_grad=True)
    T = max(len_w, len_l)
    toks = torch.randint(0, V, (2, T), generator=g)
    mask = torch.zeros(2, T)
    mask[0, :len_w], mask[1, :len_l] = 1.0, 1.0
    logp = torch.log_softmax(theta, -1)[toks]  # (2, T)
    out = pairwise_grpo_loss(logp, logp.detach(), mask, torch.tensor([1.0, 0.0]))  # row 0 wins; on policy
    (g_2grpo,) = torch.autograd.grad(out.loss, theta, retain_graph=True)
    margin = (logp[0] * mask[0]).sum() - (logp[1] * mask[1]).sum()  # DPO: sums of log-probs
    (g_dpo,) = torch.autograd.grad(-margin, theta)  # DPO's loss decreases along +margin (positive weight)
    return torch.nn.functional.cosine_similarity(g_2grpo, g_dpo, dim=0)


def test_two_grpo_follows_dpos_direction_only_for_equal_lengths():
    for n in (1, 3, 6):
        assert float(_directions(n, n)) == pytest.approx(1.0, abs=1e-6)
    for w, l in ((2, 6), (6, 2), (1, 5)):
        assert float(_directions(w, l)) < 0.999  # a different direction


# --- the TRL subclass logs TRL's kl and normalises dapo as TRL does ---------------------------------------------

trl = pytest.importorskip("trl")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    import test_trl_bridge

    return test_trl_bridge.tiny.__wrapped__(tmp_path_factory)


@pytest.mark.parametrize("variant", ["grpo", "gspo"])
def test_logged_kl_is_trls(variant, tiny):
    from test_trl_bridge import build, loss_and_grads, parity_batch, small_config
    from trl import GRPOTrainer

    from grpo_lessons.integrations.trl_bridge import GRPOLessonsTrainer

    cfg = small_config(variant, tiny, beta=0.04)
    native, ours = build(GRPOTrainer, tiny, cfg), build(GRPOLessonsTrainer, tiny, cfg, variant=variant)
    batch = parity_batch(native, seed=1)  # off-policy: ratios != 1, so the ratio-weighted k3 differs from k3
    loss_and_grads(native, batch)
    loss_and_grads(ours, batch)
    kl_native, kl_ours = native._metrics["train"]["kl"][-1], ours._metrics["train"]["kl"][-1]
    assert kl_native > 0 and kl_ours == pytest.approx(kl_native, rel=1e-5, abs=1e-7)


def test_dapo_with_very_few_loss_tokens_matches_trl(tiny):
    from test_trl_bridge import build, loss_and_grads, parity_batch, small_config
    from trl import GRPOTrainer

    from grpo_lessons.integrations.trl_bridge import GRPOLessonsTrainer

    # a generation batch of 4 accumulation windows with a single loss token: TRL divides by 1 * 1 / 4
    cfg = small_config("dapo", tiny, steps_per_generation=4, beta=0.0)
    native, ours = build(GRPOTrainer, tiny, cfg), build(GRPOLessonsTrainer, tiny, cfg, variant="dapo")
    batch = parity_batch(native, seed=2)
    mask = torch.zeros_like(batch["completion_mask"])
    mask[0, 0] = 1
    batch["completion_mask"], batch["num_items_in_batch"] = mask, mask.sum()
    l_nat, g_nat = loss_and_grads(native, batch)
    l_our, g_our = loss_and_grads(ours, batch)
    assert float(l_nat) != 0.0
    assert float((l_nat - l_our).abs()) < 1e-6 * max(1.0, float(l_nat.abs()))
    assert max(float((g_nat[n] - g_our[n]).abs().max()) for n in g_nat) < 1e-5
