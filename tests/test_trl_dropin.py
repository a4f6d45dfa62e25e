"""GRPOLessonsTrainer is a drop-in for TRL's GRPOTrainer: every configuration TRL's own GRPO tests exercise builds,
trains, and -- where the package computes the loss -- gives TRL's loss and gradients.

Both trainers are built from the same plain ``trl.GRPOConfig`` (no ``variant=``: the subclass reads what TRL would
compute off the config) on the same offline stand-in models (``trl_standins``: a dense Qwen3, MoE Qwen3-MoE and
GPT-OSS models with their router aux loss, a tiny Qwen2-VL).  Two kinds of check:

* parity: one batch from TRL's own generation and scoring (then unequal lengths, off-policy ``pi_old`` and random
  advantages, so clipping, masks and ratios are exercised) goes through both ``_compute_loss``; the losses agree to
  1e-6 and so does every parameter's gradient;
* training: both trainers train 2 steps from the same seed; the subclass's first-step loss equals TRL's and its
  weights move.

The fast subset runs with the suite; the whole matrix with ``make trl-tests`` (``GRPO_LESSONS_TRL_TESTS=1``).
"""

from __future__ import annotations

import math
import os

import pytest
import torch

pytest.importorskip("trl")

from datasets import Dataset  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

import trl_standins as standins  # noqa: E402
from grpo_lessons.integrations.trl_bridge import GRPOLessonsTrainer  # noqa: E402

SLOW = pytest.mark.skipif(os.environ.get("GRPO_LESSONS_TRL_TESTS") != "1",
                          reason="the whole TRL drop-in matrix runs with `make trl-tests`")
TOL = 1e-6
DENSE = "Qwen3ForCausalLM"


def length_reward(completions, **kwargs):
    return [float(len(c[-1]["content"]) % 7) for c in completions]


def vowel_reward(completions, **kwargs):
    return [float(sum(ch in "aeiou" for ch in c[-1]["content"])) for c in completions]


@pytest.fixture(scope="module")
def zen():
    return Dataset.from_dict(standins.dataset_rows("zen", "conversational_prompt_only", "train"))


def plain_config(tmp, **fields) -> GRPOConfig:
    base = dict(output_dir=str(tmp), per_device_train_batch_size=4, num_generations=4, max_completion_length=8,
                report_to="none", use_cpu=True, bf16=False, logging_steps=1, save_strategy="no", seed=0)
    base.update(fields)
    return GRPOConfig(**base)


def pair(model: str, cfg: GRPOConfig, zen, reward_funcs=(length_reward,)):
    """TRL's trainer and the subclass on the same weights (one saved stand-in) and the same config."""
    path = standins.model_path(model)
    out = []
    for cls in (GRPOTrainer, GRPOLessonsTrainer):
        t = cls(model=path, args=cfg, reward_funcs=list(reward_funcs), train_dataset=zen)
        t.model.train()
        t.current_gradient_accumulation_steps = cfg.gradient_accumulation_steps
        out.append(t)
    return out


def trl_batch(trainer, seed: int, reshape: bool = True) -> dict:
    """A generation batch from TRL's own ``_generate_and_score_completions``; with ``reshape``, unequal completion
    lengths, ``pi_old`` off by ~0.3 nats per token and random advantages."""
    G = trainer.num_generations
    n = trainer.args.per_device_train_batch_size * trainer.args.gradient_accumulation_steps
    rows = [trainer.train_dataset[i] for i in range(n // G) for _ in range(G)]
    torch.manual_seed(seed)
    batch = trainer._generate_and_score_completions(rows)
    B, T = batch["completion_ids"].shape
    g = torch.Generator().manual_seed(seed)
    if reshape:
        lengths = torch.randint(1, T + 1, (B,), generator=g)
        lengths[0] = T
        mask = (torch.arange(T)[None, :] < lengths[:, None]).long()  # (B, T)
        batch["completion_mask"] = mask
        batch["num_items_in_batch"] = mask.sum()
        batch["advantages"] = torch.randn(B, generator=g)
    with torch.no_grad():
        ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], 1)
        att = torch.cat([batch["prompt_mask"], batch["completion_mask"]], 1)
        lp, _, _ = trainer._get_per_token_logps_and_entropies(trainer.model, ids, att, T)
    batch["old_per_token_logps"] = lp + 0.3 * torch.randn(B, T, generator=g)
    if trainer.beta != 0.0:
        batch["ref_per_token_logps"] = lp + 0.2 * torch.randn(B, T, generator=g)
    return batch


def loss_and_grads(trainer, batch):
    trainer.model.zero_grad(set_to_none=True)
    loss = trainer._compute_loss(trainer.model, batch)
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in trainer.model.named_parameters() if p.grad is not None}
    return loss.detach(), grads


def parity(native, ours, batch) -> dict:
    l_nat, g_nat = loss_and_grads(native, batch)
    l_our, g_our = loss_and_grads(ours, batch)
    assert set(g_nat) == set(g_our), set(g_nat) ^ set(g_our)
    return {"dloss": abs(float(l_nat - l_our)), "loss": float(l_nat),
            "dgrad": max(float((g_nat[n] - g_our[n]).abs().max()) for n in g_nat),
            "grad_norm": math.sqrt(sum(float(g.norm()) ** 2 for g in g_nat.values()))}


def assert_parity(res: dict) -> None:
    assert res["grad_norm"] > 1e-4, res  # a real gradient, not two zeros agreeing
    assert res["dloss"] < TOL and res["dgrad"] < TOL, res


# -- the configurations TRL's GRPO tests exercise --------------------------------------------------------------

LOSS_TYPES = ["grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo", "vespo"]
SEQUENCE_LOSS_TYPES = ["grpo", "bnpo", "dr_grpo", "dapo", "cispo", "luspo"]  # TRL accepts all (some with a warning)

CONFIGS: dict[str, tuple[str, dict]] = {
    **{f"loss_type={lt}": (DENSE, {"loss_type": lt}) for lt in LOSS_TYPES},
    **{f"sequence,loss_type={lt}": (DENSE, {"loss_type": lt, "importance_sampling_level": "sequence"})
       for lt in SEQUENCE_LOSS_TYPES},
    "beta>0,bias_correction": (DENSE, {"loss_type": "grpo", "beta": 0.04}),
    "beta>0,plain_k3": (DENSE, {"loss_type": "dapo", "beta": 0.1, "use_bias_correction_kl": False}),
    "entropy_coef,grpo": (DENSE, {"loss_type": "grpo", "entropy_coef": 0.2}),
    "entropy_coef,dapo,accum2": (DENSE, {"loss_type": "dapo", "entropy_coef": 0.2, "gradient_accumulation_steps": 2}),
    "entropy_coef,dr_grpo,accum2": (DENSE, {"loss_type": "dr_grpo", "entropy_coef": 0.5,
                                            "gradient_accumulation_steps": 2}),
    "entropy_coef,luspo": (DENSE, {"loss_type": "luspo", "importance_sampling_level": "sequence",
                                   "entropy_coef": 0.5}),
    "adaptive_entropy": (DENSE, {"loss_type": "dapo", "entropy_coef": 0.01, "use_adaptive_entropy": True,
                                 "entropy_target": 15.0}),
    "top_entropy_quantile": (DENSE, {"loss_type": "dapo", "top_entropy_quantile": 0.2}),
    "top_entropy+entropy_coef": (DENSE, {"loss_type": "grpo", "top_entropy_quantile": 0.5, "entropy_coef": 0.1}),
    "delta,grpo": (DENSE, {"loss_type": "grpo", "delta": 1.2}),
    "delta,dapo,beta": (DENSE, {"loss_type": "dapo", "delta": 1.25, "beta": 0.04}),
    "everything": (DENSE, {"loss_type": "dapo", "delta": 1.2, "entropy_coef": 0.05, "top_entropy_quantile": 0.5,
                           "beta": 0.04, "gradient_accumulation_steps": 2}),
    "moe,qwen3_moe": ("Qwen3MoeForCausalLM", {"loss_type": "dapo"}),
    "moe,qwen3_moe,grpo,accum2": ("Qwen3MoeForCausalLM", {"loss_type": "grpo", "gradient_accumulation_steps": 2}),
    "moe,gpt_oss,entropy": ("GptOssForCausalLM", {"loss_type": "dapo", "entropy_coef": 0.1}),
    "moe,qwen3_moe,aux_coef": ("Qwen3MoeForCausalLM", {"loss_type": "grpo", "router_aux_loss_coef": 0.5}),
    "multi_reward,weights": (DENSE, {"loss_type": "grpo", "reward_weights": [1.0, 0.5]}),
    "multi_reward,normalize_then_sum": (DENSE, {"loss_type": "grpo", "multi_objective_aggregation":
                                                "normalize_then_sum"}),
    "scale_rewards=batch": (DENSE, {"loss_type": "dapo", "scale_rewards": "batch"}),
    "scale_rewards=none": (DENSE, {"loss_type": "dr_grpo", "scale_rewards": "none"}),
    "epsilon_high": (DENSE, {"loss_type": "dapo", "epsilon_high": 0.28}),
    "sapo_temperatures": (DENSE, {"loss_type": "sapo", "sapo_temperature_pos": 0.8, "sapo_temperature_neg": 1.3}),
    "mask_truncated_completions": (DENSE, {"loss_type": "dapo", "mask_truncated_completions": True}),
    "num_iterations=2": (DENSE, {"loss_type": "grpo", "num_iterations": 2}),
    "off_policy_mask": (DENSE, {"loss_type": "dapo", "off_policy_mask_threshold": 0.05}),
}
MULTI_REWARD = {"multi_reward,weights", "multi_reward,normalize_then_sum"}
FAST = ["loss_type=dapo", "sequence,loss_type=luspo", "everything", "moe,qwen3_moe,grpo,accum2",
        "adaptive_entropy"]


def _params(names):
    return [pytest.param(n, marks=() if n in FAST else SLOW) for n in names]


@pytest.mark.parametrize("name", _params(CONFIGS))
def test_subclass_loss_and_gradients_equal_trls(name, zen, tmp_path):
    model, fields = CONFIGS[name]
    rewards = (length_reward, vowel_reward) if name in MULTI_REWARD else (length_reward,)
    native, ours = pair(model, plain_config(tmp_path, **fields), zen, rewards)
    assert ours.loss_impl == "grpo_lessons", "the package computes every one of these losses"
    batch = trl_batch(native, seed=1)
    if fields.get("mask_truncated_completions"):  # rows TRL's truncation mask empties (a random model never stops)
        batch["completion_mask"][1::3] = 0
        batch["num_items_in_batch"] = batch["completion_mask"].sum()
    res = parity(native, ours, batch)
    assert_parity(res)
    if model != DENSE:
        assert native.aux_loss_enabled and ours.aux_loss_enabled  # TRL turns the router aux loss on for MoE
        assert native._metrics["train"]["aux_loss"][-1] == pytest.approx(ours._metrics["train"]["aux_loss"][-1])
    if fields.get("use_adaptive_entropy"):
        assert ours._metrics["train"]["entropy_coef"] and native.entropy_coef == pytest.approx(ours.entropy_coef)


def test_each_setting_changes_the_loss(zen, tmp_path):
    """The settings the subclass used to refuse are not ignored: each moves the loss TRL computes, and ours."""
    native, ours = pair(DENSE, plain_config(tmp_path, loss_type="grpo"), zen)
    batch = trl_batch(native, seed=2)
    base = float(ours._compute_loss(ours.model, batch).detach())
    for field, value in (("delta", 1.05), ("top_entropy_quantile", 0.2), ("entropy_coef", 0.5)):
        setattr(ours.args, field, value)
        ours.top_entropy_quantile, ours.entropy_coef = ours.args.top_entropy_quantile, ours.args.entropy_coef
        ours._entropy_bonus_enabled = ours.entropy_coef != 0.0
        moved = float(ours._compute_loss(ours.model, batch).detach())
        assert abs(moved - base) > 1e-4, field
        setattr(ours.args, field, GRPOConfig.__dataclass_fields__[field].default)
        ours.top_entropy_quantile, ours.entropy_coef = ours.args.top_entropy_quantile, ours.args.entropy_coef
        ours._entropy_bonus_enabled = ours.entropy_coef != 0.0


# -- vision-language: the image inputs reach the model -----------------------------------------------------------


def _vlm_batch(tok, B: int = 2, T: int = 5, seed: int = 0) -> dict:
    """A batch as TRL's generation step stores it for Qwen2-VL: one 28 x 28 image per prompt (one image token)."""
    g = torch.Generator().manual_seed(seed)
    im = tok.convert_tokens_to_ids
    prompt = [im("<|im_start|>"), 5, im("<|vision_start|>"), im("<|image_pad|>"), im("<|vision_end|>"), 7, 8]
    prompt_ids = torch.tensor([prompt] * B)
    completion_ids = torch.randint(10, 400, (B, T), generator=g)
    mask = torch.ones(B, T, dtype=torch.long)
    mask[1, 3:] = 0
    pixel_values, image_grid_thw = standins.qwen_vl_image_inputs(B, seed=seed)
    ids = torch.cat([prompt_ids, completion_ids], 1)
    return {"prompt_ids": prompt_ids, "prompt_mask": torch.ones_like(prompt_ids), "completion_ids": completion_ids,
            "completion_mask": mask, "advantages": torch.randn(B, generator=g), "num_items_in_batch": mask.sum(),
            "old_per_token_logps": -5.0 + 0.3 * torch.randn(B, T, generator=g), "pixel_values": pixel_values,
            "image_grid_thw": image_grid_thw, "num_images": [1] * B,
            "mm_token_type_ids": (ids == im("<|image_pad|>")).long()}


@pytest.mark.parametrize("arch", ["qwen2_vl", pytest.param("qwen2_5_vl", marks=SLOW)])
def test_vision_language_inputs_reach_the_forward(arch, tmp_path, zen):
    """Qwen2-VL: the subclass's loss and gradients equal TRL's with the image tensors in the batch, and the loss
    depends on the pixels (the subclass used to drop them)."""
    model, tok = standins.qwen_vl_model(arch)
    path = tmp_path / arch
    model.save_pretrained(path)
    tok.save_pretrained(path)
    cfg = plain_config(tmp_path, loss_type="grpo", per_device_train_batch_size=2, num_generations=2)
    trainers = [cls(model=str(path), args=cfg, reward_funcs=[length_reward], train_dataset=zen, processing_class=tok)
                for cls in (GRPOTrainer, GRPOLessonsTrainer)]
    for t in trainers:
        t.model.train()
        t.current_gradient_accumulation_steps = 1
    batch = _vlm_batch(tok)
    assert_parity(parity(*trainers, batch))
    ours = trainers[1]
    other = dict(batch, pixel_values=batch["pixel_values"] + 1.0)
    assert abs(float(ours._compute_loss(ours.model, other)) - float(ours._compute_loss(ours.model, batch))) > 1e-6


# -- training: 2 steps from the same seed -------------------------------------------------------------------------

TRAIN = {
    "loss_type=luspo": (DENSE, {"loss_type": "luspo", "importance_sampling_level": "sequence"}),
    "sequence,loss_type=dapo": (DENSE, {"loss_type": "dapo", "importance_sampling_level": "sequence"}),
    "entropy+adaptive+top_entropy+delta": (DENSE, {"loss_type": "dapo", "entropy_coef": 0.01, "delta": 1.2,
                                                   "use_adaptive_entropy": True, "entropy_target": 15.0,
                                                   "top_entropy_quantile": 0.5}),
    "moe,qwen3_moe": ("Qwen3MoeForCausalLM", {"loss_type": "grpo"}),
    "moe,gpt_oss": ("GptOssForCausalLM", {"loss_type": "dapo"}),
    "multi_reward,beta": (DENSE, {"loss_type": "grpo", "beta": 0.04, "reward_weights": [1.0, 0.5]}),
    "num_iterations=2,accum2": (DENSE, {"loss_type": "dapo", "num_iterations": 2, "gradient_accumulation_steps": 2,
                                        "per_device_train_batch_size": 2}),
    "vespo": (DENSE, {"loss_type": "vespo"}),
}
FAST_TRAIN = ["moe,qwen3_moe"]


@pytest.mark.parametrize("name", [pytest.param(n, marks=() if n in FAST_TRAIN else SLOW) for n in TRAIN])
def test_subclass_trains_and_its_first_step_is_trls(name, zen, tmp_path):
    model, fields = TRAIN[name]
    rewards = (length_reward, vowel_reward) if "reward_weights" in fields else (length_reward,)
    cfg = plain_config(tmp_path, max_steps=2, learning_rate=0.05, **fields)
    logs, moved = [], []
    for t in pair(model, cfg, zen, rewards):
        before = {n: p.detach().clone() for n, p in t.model.named_parameters()}
        torch.manual_seed(0)  # the same sampled completions for both trainers
        t.train()
        logs.append([h for h in t.state.log_history if "loss" in h])
        moved.append(max(float((p.detach() - before[n]).abs().max()) for n, p in t.model.named_parameters()))
    native_logs, our_logs = logs
    assert len(our_logs) == 2 and all(math.isfinite(h["loss"]) for h in our_logs), our_logs
    assert moved[1] > 0, "two optimizer steps left every weight unchanged"
    assert our_logs[0]["loss"] == pytest.approx(native_logs[0]["loss"], abs=TOL), (native_logs[0], our_logs[0])
    for key in ("entropy", "policy_loss", "aux_loss", "entropy_coef"):
        if key in native_logs[0]:
            assert our_logs[0][key] == pytest.approx(native_logs[0][key], abs=1e-5), key
