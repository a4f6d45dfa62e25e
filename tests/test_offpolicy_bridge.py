"""GRPOLessonsTrainer runs the off-policy variants TRL lacks (DPPO, ScaleRL) on TRL's own batches.

TRL has no reference for these; the checks are that the trainer feeds ``policy_loss`` the right tensors:
the sampler's log-probs as DPPO's anchor, logits aligned with TRL's log-probs for the top-K divergence,
ScaleRL's centred-advantage batch std, and a prompt-level normaliser that survives TRL's shuffled
micro-batches.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("trl")

from test_trl_bridge import build, parity_batch, small_config, text_reward, tiny  # noqa: E402,F401

from grpo_lessons import group_advantages, policy_loss  # noqa: E402
from grpo_lessons.core.aggregation import prompt_weights  # noqa: E402
from grpo_lessons.core.divergence import topk_divergence  # noqa: E402
from grpo_lessons.integrations.trl_bridge import GRPOLessonsTrainer  # noqa: E402


def _logps(trainer, batch):
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], 1)
    att = torch.cat([batch["prompt_mask"], batch["completion_mask"]], 1)
    lp, _, _ = trainer._get_per_token_logps_and_entropies(trainer.model, ids, att, batch["completion_ids"].size(1))
    return lp  # (B, T), with grad


def _grads(trainer, loss):
    trainer.model.zero_grad(set_to_none=True)
    loss.backward()
    return {n: p.grad.detach().clone() for n, p in trainer.model.named_parameters() if p.grad is not None}


def _max_diff(a, b):
    return max((a[n] - b[n]).abs().max().item() for n in a)


def test_dppo_anchor_is_trls_sampler_logps(tiny):
    cfg = small_config("dppo_binary_tv", tiny)
    delta = {"delta_low": 3e-4, "delta_high": 3e-4}  # a random tiny model spreads p ~ 1/V: a small trust region
    t = build(GRPOLessonsTrainer, tiny, cfg, variant="dppo_binary_tv", loss_options=delta)
    batch = parity_batch(t, seed=1)
    g = torch.Generator().manual_seed(1)
    batch["sampling_per_token_logps"] = batch["old_per_token_logps"] + 0.4 * torch.randn(
        batch["old_per_token_logps"].shape, generator=g)
    t.use_vllm, t.vllm_importance_sampling_correction = True, False  # sampler log-probs, no IS correction
    ours = _grads(t, t._compute_loss(t.model, batch))
    mask = batch["completion_mask"].float()
    direct = policy_loss(_logps(t, batch), batch["old_per_token_logps"], batch["advantages"], mask,
                         variant="dppo_binary_tv", sampling_logp=batch["sampling_per_token_logps"], **delta)
    assert 0.0 < direct.clip_frac < 1.0  # the trust region masks some tokens, not all
    assert _max_diff(ours, _grads(t, direct.loss)) < 1e-6
    pi_old = policy_loss(_logps(t, batch), batch["old_per_token_logps"], batch["advantages"], mask,
                         variant="dppo_binary_tv", **delta)
    assert _max_diff(ours, _grads(t, pi_old.loss)) > 1e-4  # the anchor really is the sampler


def test_dppo_topk_logits_line_up_with_trls_logps(tiny):
    cfg = small_config("dppo_topk_kl", tiny)
    t = build(GRPOLessonsTrainer, tiny, cfg, variant="dppo_topk_kl", dppo_top_k=5)
    batch = parity_batch(t, seed=2)
    batch = t._scalerl_fields(batch)  # the generation-time top-K of pi_old
    assert batch["old_topk_ids"].shape[-1] == 5
    logits = t._completion_logits(t.model, batch)  # (B, T, V)
    lp = torch.log_softmax(logits, -1).gather(-1, batch["completion_ids"][..., None]).squeeze(-1)
    mask = batch["completion_mask"].bool()
    assert torch.allclose(lp[mask], _logps(t, batch).detach()[mask], atol=1e-5)  # same positions, same temperature
    ours = _grads(t, t._compute_loss(t.model, batch))
    div = topk_divergence(batch["old_topk_ids"], batch["old_topk_logps"], logits, batch["completion_ids"], kind="kl",
                          sampled_logp=batch["old_per_token_logps"])
    direct = policy_loss(_logps(t, batch), batch["old_per_token_logps"], batch["advantages"], mask.float(),
                         variant="dppo_topk_kl", divergence=div)
    assert _max_diff(ours, _grads(t, direct.loss)) < 1e-6
    assert float(div[mask].max()) > 0.0


def test_scalerl_advantages_and_prompt_weights(tiny):
    cfg = small_config("scalerl", tiny, per_device_train_batch_size=8, mask_truncated_completions=False)
    t = GRPOLessonsTrainer(model=tiny["path"], args=cfg, reward_funcs=[text_reward], train_dataset=tiny["ds"],
                           processing_class=tiny["tok"], variant="scalerl")
    t.model.train()
    rows = [tiny["ds"][i] for i in (1, 3) for _ in range(4)]
    out = t._generate_and_score_completions(rows)
    rewards = (t._last_rewards_per_func * t.reward_weights.unsqueeze(0)).nansum(dim=1)  # (8,)
    expected = group_advantages(rewards, 4, scale="batch_centered")
    assert torch.allclose(out["advantages"], expected, atol=1e-6)
    assert not torch.allclose(out["advantages"], group_advantages(rewards, 4, scale="batch"), atol=1e-3)
    assert torch.allclose(out["prompt_weights"], prompt_weights(out["completion_mask"].float(), 4).float())


def test_scalerl_prompt_mean_survives_shuffled_micro_batches(tiny):
    """Two shuffled micro-batches of one generation batch add up to the whole batch's prompt-level loss."""
    cfg = small_config("scalerl", tiny, gradient_accumulation_steps=2)
    t = build(GRPOLessonsTrainer, tiny, cfg, variant="scalerl")
    batch = parity_batch(t, seed=4)  # 8 rows, groups of 4, unequal lengths
    batch["prompt_weights"] = prompt_weights(batch["completion_mask"].float(), t.num_generations)
    perm = torch.randperm(8, generator=torch.Generator().manual_seed(0))
    total = 0.0
    for rows in (perm[:4], perm[4:]):
        part = {k: (v[rows] if isinstance(v, torch.Tensor) and v.dim() > 0 else v) for k, v in batch.items()}
        total = total + t._compute_loss(t.model, part)
    ours = _grads(t, total)
    whole = policy_loss(_logps(t, batch), batch["old_per_token_logps"], batch["advantages"],
                        batch["completion_mask"].float(), variant="scalerl", group_size=t.num_generations)
    assert float(total.detach()) == pytest.approx(float(whole.loss.detach()), abs=1e-6)
    assert _max_diff(ours, _grads(t, whole.loss)) < 1e-6


def test_grpo_config_maps_corrections_to_trls_fields():
    from grpo_lessons.integrations.trl_bridge import grpo_config

    cfg = grpo_config("vespo", rollout_correction="token_mask", rollout_clip_min=0.5, rollout_clip_max=2.0,
                      off_policy_mask_threshold=0.1)
    assert (cfg.loss_type, cfg.vllm_importance_sampling_correction, cfg.vllm_importance_sampling_mode) == (
        "vespo", True, "token_mask")
    assert (cfg.vllm_importance_sampling_clip_min, cfg.vllm_importance_sampling_clip_max) == (0.5, 2.0)
    assert cfg.off_policy_mask_threshold == 0.1
    with pytest.raises(ValueError, match="token_truncate or token_mask"):
        grpo_config("vespo", rollout_correction="sequence_mask")
    with pytest.raises(ValueError, match="unknown rollout_correction"):
        grpo_config("cispo", rollout_correction="tis")
