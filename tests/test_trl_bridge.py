"""grpo_lessons.integrations.trl_bridge: GRPOConfig mapping, the GRPOLessonsTrainer subclass against TRL's own loss,
dynamic sampling inside TRL, 2-step CPU training per variant, and the benchmark's --tiny mode.

Parity: TRL's native ``GRPOTrainer`` and ``GRPOLessonsTrainer`` are built from the same saved tiny
Qwen2 (identical weights); one batch comes from TRL's ``_generate_and_score_completions``, then gets
unequal completion lengths, off-policy old log-probs (so clipping is active) and random advantages;
both trainers' ``_compute_loss`` run on it, and the loss and every parameter's gradient are compared.
``python tests/test_trl_bridge.py`` prints the parity table.
"""

from __future__ import annotations

import importlib.util
import math
import sys
import tempfile
from pathlib import Path

import pytest
import torch

pytest.importorskip("trl")

from datasets import Dataset  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from grpo_lessons.training.models import tiny_qwen, tiny_tokenizer  # noqa: E402
from trl_harness import _tiny_model_dir  # noqa: E402
from grpo_lessons.integrations.trl_bridge import (  # noqa: E402
    GRPOLessonsTrainer,
    grpo_config,
    machine_precision,
    make_trainer,
    select_rows,
    trl_supports,
    variant_for_config,
)
from grpo_lessons.core.variants import VARIANTS, get_variant  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
NATIVE = ["grpo", "bnpo", "dr_grpo", "dapo", "gspo", "sapo", "2-grpo", "cispo", "vespo", "luspo"]
# Variants whose registry entry names no TRL fields (read off the registry, not copied from the bridge): the bridge
# must agree that TRL cannot compute them, from their pieces alone.
NOT_IN_TRL = {name for name, v in VARIANTS.items() if not v.trl}
TOL = 1e-6


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A tiny Qwen2 and its tokenizer saved to disk (with beta != 0 TRL loads the reference from the path)."""
    path, tok = _tiny_model_dir(), tiny_tokenizer()  # the harness's copy on disk, saved once per process
    prompts = [[{"role": "user", "content": f"What is {i}+{i + 1}?"}] for i in range(16)]
    ds = Dataset.from_dict({"prompt": prompts, "answer": [str(2 * i + 1) for i in range(16)],
                            "flat": [i % 2 == 0 for i in range(16)]})
    return {"path": str(path), "tok": tok, "ds": ds, "out": str(tmp_path_factory.mktemp("out"))}


def text_reward(completions, flat, **kwargs):
    """TRL signature; conversational completions are message lists. Constant on 'flat' prompts."""
    texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
    return [0.5 if f else float(sum(map(ord, t)) % 11) for t, f in zip(texts, flat)]


def varied_reward(completions, **kwargs):
    return text_reward(completions, flat=[False] * len(completions))


def small_config(variant, tiny, **kw):
    base = dict(output_dir=tiny["out"], per_device_train_batch_size=4, max_completion_length=8,
                gradient_checkpointing=False, logging_steps=1, save_strategy="no", seed=0)
    if get_variant(variant).trl.get("num_generations") is None:
        base["num_generations"] = 4
    base.update(kw)
    return grpo_config(variant, **base)


def build(cls, tiny, cfg, **kw):
    t = cls(model=tiny["path"], args=cfg, reward_funcs=[text_reward], train_dataset=tiny["ds"],
            processing_class=tiny["tok"], **kw)
    t.model.train()
    t.current_gradient_accumulation_steps = cfg.gradient_accumulation_steps
    return t


# -- grpo_config ----------------------------------------------------------------------------------------

EXPECTED = {  # the papers' settings (each registry entry cites its arXiv id), as TRL 1.16 fields
    "grpo": {"loss_type": "grpo", "scale_rewards": "group", "epsilon": 0.2, "epsilon_high": None, "beta": 0.04},
    "bnpo": {"loss_type": "bnpo", "scale_rewards": "group", "beta": 0.0},
    "dr_grpo": {"loss_type": "dr_grpo", "scale_rewards": "none", "beta": 0.0},
    "dapo": {"loss_type": "dapo", "epsilon": 0.2, "epsilon_high": 0.28, "mask_truncated_completions": True,
             "beta": 0.0},
    "gspo": {"loss_type": "grpo", "importance_sampling_level": "sequence", "epsilon": 3e-4, "epsilon_high": 4e-4},
    # a piece TRL's GRPOTrainer lacks is written under its own name, which that trainer refuses (GRPOLessonsTrainer
    # reads it): a config for a variant TRL does not compute cannot make TRL train another one
    "gspo_token": {"loss_type": "grpo", "importance_sampling_level": "sequence_token", "epsilon": 3e-4,
                   "epsilon_high": 4e-4},
    "luspo": {"loss_type": "luspo", "importance_sampling_level": "sequence", "epsilon": 3e-4, "epsilon_high": 4e-4,
              "beta": 0.0},
    "sapo": {"loss_type": "sapo", "sapo_temperature_pos": 1.0, "sapo_temperature_neg": 1.05, "beta": 0.0},
    "2-grpo": {"loss_type": "grpo", "num_generations": 2, "scale_rewards": "group", "beta": 0.0},
    "cispo": {"loss_type": "cispo", "epsilon_high": 5.0, "scale_rewards": "group", "beta": 0.0},
    "vespo": {"loss_type": "vespo", "vespo_k_pos": 2.0, "vespo_lambda_pos": 3.0, "vespo_k_neg": 3.0,
              "vespo_lambda_neg": 2.0, "beta": 0.0},
    # not in TRL: the subclass computes the loss
    "dppo_binary_tv": {"loss_type": "dppo", "beta": 0.0},
    "dppo_binary_kl": {"loss_type": "dppo", "beta": 0.0},
    "dppo_topk_tv": {"loss_type": "dppo", "beta": 0.0},
    "dppo_topk_kl": {"loss_type": "dppo", "beta": 0.0},
    # ScaleRL: CISPO's cap with a prompt-level mean (TRL has CISPO with a token mean only) and centred advantages
    # over the batch std
    "scalerl": {"loss_type": "cispo+prompt_mean", "epsilon_high": 5.0, "scale_rewards": "batch_centered",
                "beta": 0.0},
    "gdpo": {"loss_type": "grpo", "multi_objective_aggregation": "normalize_then_sum", "epsilon": 0.2},
    "gopo": {"loss_type": "dapo", "multi_objective_aggregation": "sum_then_normalize", "scale_rewards": "rank"},
    # RLOO: GRPO's loss with leave-one-out advantages (TRL's "none" would give r - mean_g, (G-1)/G of them)
    "rloo": {"loss_type": "grpo", "scale_rewards": "leave_one_out", "importance_sampling_level": "token",
             "beta": 0.0},
    # GMPO: TRL ships it as trl.experimental.gmpo.GMPOTrainer, whose GMPOConfig reads these same fields (log space)
    "gmpo": {"epsilon": 0.4, "epsilon_high": 0.4, "scale_rewards": "group", "beta": 0.0},
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_grpo_config_maps_each_variant_to_the_papers_settings(variant):
    assert variant in EXPECTED, f"add the expected TRL fields of the new variant {variant!r} here"
    cfg = grpo_config(variant)
    assert isinstance(cfg, GRPOConfig)
    for field, value in EXPECTED[variant].items():
        assert getattr(cfg, field) == value, (variant, field, getattr(cfg, field), value)
    scale = get_variant(variant).scale_piece  # the registry says which TRL fields give its advantages, if any
    own = {"multi_objective_aggregation": "sum_then_normalize", "scale_rewards": scale.name}  # TRL refuses the name
    for field, value in (scale.trl if scale.trl is not None else own).items():
        assert getattr(cfg, field) == value, (variant, field)
    assert cfg.report_to in ("none", [], ["none"])


def test_grpo_config_on_this_cpu_machine_is_fp32_on_cpu():
    if torch.cuda.is_available():
        pytest.skip("this check is for CPU-only machines")
    cfg = grpo_config("dapo")
    assert cfg.use_cpu and not cfg.bf16 and not cfg.fp16


def test_machine_precision_picks_bf16_on_a_gpu_that_has_it(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert machine_precision() == {"bf16": True, "fp16": False}
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)  # T4 / V100
    assert machine_precision() == {"bf16": False, "fp16": False}


def test_grpo_config_overrides_win_and_unknown_fields_are_named():
    cfg = grpo_config("dapo", epsilon_high=0.3, num_generations=16, per_device_train_batch_size=16,
                      max_completion_length=64)
    assert (cfg.epsilon_high, cfg.num_generations, cfg.max_completion_length) == (0.3, 16, 64)
    with pytest.raises(TypeError, match=r"'epsilon_hgh' \(did you mean epsilon_high"):
        grpo_config("dapo", epsilon_hgh=0.3)
    with pytest.raises(TypeError, match="tokenizer"):
        grpo_config("grpo", tokenizer="x")  # the chapter's GRPOTrainer argument is not a config field either
    with pytest.raises(ValueError, match="unknown variant"):
        grpo_config("ppo")


def test_registry_trl_entries_agree_with_the_pieces():
    from grpo_lessons.integrations.trl_bridge import _derived_fields

    for name, v in VARIANTS.items():
        derived = _derived_fields(v)
        for field, value in v.trl.items():
            if field == "loss_type" and v.aggregation == "token_mean":
                continue  # bnpo (micro-batch tokens) and dapo (generation-batch tokens) share our token_mean
            if field in derived:
                assert derived[field] == value, (name, field, derived[field], value)
        assert trl_supports(name) == (name not in NOT_IN_TRL)


def test_variant_for_config_reads_trl_configs_back():
    for name in NATIVE:
        assert variant_for_config(grpo_config(name)) == name
    plain = GRPOConfig(output_dir="/tmp/unused", loss_type="luspo", report_to="none", use_cpu=True, bf16=False)
    v = variant_for_config(plain)  # TRL's default token level: LUSPO's aggregation on token ratios (TRL warns)
    assert v.name == "luspo[ratio_level=token]" and v.aggregation == "seq_mean_token_sum"



# -- parity: GRPOLessonsTrainer (policy_loss) vs TRL's native _compute_loss ----------------------------


def parity_batch(trainer, seed=0):
    """One real TRL generation batch, then unequal lengths, off-policy old log-probs and random advantages."""
    G = trainer.num_generations
    n = trainer.args.per_device_train_batch_size * trainer.args.gradient_accumulation_steps
    rows = [trainer.train_dataset[i] for i in range(n // G) for _ in range(G)]
    torch.manual_seed(seed)
    batch = trainer._generate_and_score_completions(rows)
    g = torch.Generator().manual_seed(seed)
    B, T = batch["completion_ids"].shape
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    lengths[0] = T
    mask = (torch.arange(T)[None, :] < lengths[:, None]).long()  # (B, T)
    batch["completion_mask"] = mask
    batch["completion_ids"] = batch["completion_ids"].masked_fill(mask == 0, trainer._tokenizer.pad_token_id)
    batch["num_items_in_batch"] = mask.sum()
    with torch.no_grad():
        ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], 1)
        att = torch.cat([batch["prompt_mask"], mask], 1)
        lp, _, _ = trainer._get_per_token_logps_and_entropies(trainer.model, ids, att, T)
    batch["old_per_token_logps"] = lp + 0.3 * torch.randn(B, T, generator=g)
    batch["advantages"] = torch.randn(B, generator=g)
    if trainer.beta != 0.0:
        batch["ref_per_token_logps"] = lp + 0.2 * torch.randn(B, T, generator=g)
    return batch


def loss_and_grads(trainer, batch):
    trainer.model.zero_grad(set_to_none=True)
    loss = trainer._compute_loss(trainer.model, batch)
    loss.backward()
    return loss.detach(), {n: p.grad.detach().clone() for n, p in trainer.model.named_parameters()}


def compare(variant, tiny, native_variant=None, seed=0, vllm_is=None, sampler=False, **cfg_kw):
    """Max |loss difference| and max |gradient difference| over all parameters, native vs subclass.

    ``vllm_is``: a ``vllm_importance_sampling_mode``; the batch then carries sampler log-probs (pi_old plus
    noise) and the ``importance_sampling_ratio`` TRL's own generation step computes from them
    (``trl_harness.trl_sampling_inputs``).  ``sampler``: the sampler log-probs without the correction.
    """
    if vllm_is:
        cfg_kw.update(vllm_importance_sampling_correction=True, vllm_importance_sampling_mode=vllm_is,
                      vllm_importance_sampling_clip_min=0.5, vllm_importance_sampling_clip_max=2.0)
    cfg = small_config(native_variant or variant, tiny, **cfg_kw)
    native = build(GRPOTrainer, tiny, cfg)
    ours = build(GRPOLessonsTrainer, tiny, cfg, variant=variant)
    batch = parity_batch(native, seed)
    if vllm_is or sampler:
        from trl_harness import trl_sampling_inputs

        g = torch.Generator().manual_seed(seed + 100)
        old, mask = batch["old_per_token_logps"], batch["completion_mask"]
        sampling = old + 0.5 * torch.randn(old.shape, generator=g)
        batch["sampling_per_token_logps"] = sampling
        if vllm_is:
            trl_fields = {k: getattr(cfg, k) for k in ("loss_type", "vllm_importance_sampling_correction",
                                                       "vllm_importance_sampling_mode",
                                                       "vllm_importance_sampling_clip_min",
                                                       "vllm_importance_sampling_clip_max")}
            batch["importance_sampling_ratio"] = trl_sampling_inputs(
                old, sampling, mask.float(), max_completion_length=old.shape[1], **trl_fields
            )["importance_sampling_ratio"]
        for t in (native, ours):
            t.use_vllm, t.vllm_importance_sampling_correction = True, bool(vllm_is)
    l_nat, g_nat = loss_and_grads(native, batch)
    l_our, g_our = loss_and_grads(ours, batch)
    clip = native._metrics["train"].get("clip_ratio/region_mean", [float("nan")])[-1]
    return {
        "dloss": (l_nat - l_our).abs().item(),
        "dgrad": max((g_nat[n] - g_our[n]).abs().max().item() for n in g_nat),
        "loss": l_nat.item(),
        "grad_norm": math.sqrt(sum(float(g.norm()) ** 2 for g in g_nat.values())),
        "clip": clip,
    }


@pytest.mark.parametrize("variant", NATIVE)
def test_subclass_matches_trl_native_loss_and_gradient(variant, tiny):
    res = compare(variant, tiny, beta=0.04)  # beta != 0 everywhere: the KL path is compared too
    assert res["grad_norm"] > 1e-3, res  # a real gradient, not two zeros agreeing
    if variant not in ("sapo", "cispo", "vespo"):  # those log no clip_ratio/region_mean
        assert res["clip"] > 0.02, res  # the batch exercises clipping
    assert res["dloss"] < TOL and res["dgrad"] < TOL, res


@pytest.mark.parametrize("variant", ["grpo", "dapo", "dr_grpo"])
def test_parity_under_gradient_accumulation(variant, tiny):
    """TRL divides by the accumulation steps (dapo: rescales its generation-batch token count)."""
    res = compare(variant, tiny, seed=3, gradient_accumulation_steps=2, per_device_train_batch_size=4)
    assert res["grad_norm"] > 1e-3 and res["dloss"] < TOL and res["dgrad"] < TOL, res


@pytest.mark.parametrize("variant,mode", [
    ("grpo", "sequence_mask"), ("sapo", "sequence_truncate"), ("dapo", "token_truncate"), ("dapo", "token_mask"),
    ("cispo", "sequence_mask"), ("vespo", "token_truncate"), ("vespo", "token_mask"),
])
def test_parity_with_vllm_importance_sampling(variant, mode, tiny):
    """Every vLLM correction mode: the subclass uses TRL's sampler log-probs and matches TRL's loss."""
    res = compare(variant, tiny, seed=5, vllm_is=mode)
    assert res["grad_norm"] > 1e-3 and res["dloss"] < TOL and res["dgrad"] < TOL, res


def test_parity_with_off_policy_mask_on_sampler_logps(tiny):
    res = compare("dapo", tiny, seed=6, sampler=True, off_policy_mask_threshold=0.05)
    assert res["grad_norm"] > 1e-3 and res["dloss"] < TOL and res["dgrad"] < TOL, res


def test_gspo_token_in_trl_equals_trls_gspo(tiny):
    """GSPO-token (TRL lacks it) with a sequence-constant advantage has GSPO's value and gradient."""
    res = compare("gspo_token", tiny, native_variant="gspo", seed=2, beta=0.0)
    assert res["grad_norm"] > 1e-3 and res["dloss"] < 1e-6 and res["dgrad"] < 1e-6, res


def test_trl_loss_settings_are_the_packages_now(tiny):
    """top_entropy_quantile, delta and the entropy bonus were refused at construction; the subclass now computes
    them with policy_loss and matches TRL's loss and gradients."""
    res = compare("grpo", tiny, seed=4, beta=0.04, top_entropy_quantile=0.5, delta=1.2, entropy_coef=0.1)
    assert res["grad_norm"] > 1e-3 and res["dloss"] < TOL and res["dgrad"] < TOL, res


# -- dynamic sampling inside TRL --------------------------------------------------------------------------


def test_select_rows_repads_prompts_left_and_completions_right():
    a = {"prompt_ids": torch.tensor([[7, 1, 2], [7, 7, 3]]), "prompt_mask": torch.tensor([[0, 1, 1], [0, 0, 1]]),
         "completion_ids": torch.tensor([[4, 5], [6, 7]]), "completion_mask": torch.tensor([[1, 1], [1, 0]]),
         "advantages": torch.tensor([1.0, -1.0]), "num_items_in_batch": torch.tensor(3)}
    b = {"prompt_ids": torch.tensor([[1, 2, 3, 4]]), "prompt_mask": torch.tensor([[1, 1, 1, 1]]),
         "completion_ids": torch.tensor([[8, 9, 10]]), "completion_mask": torch.tensor([[1, 1, 1]]),
         "advantages": torch.tensor([0.5]), "num_items_in_batch": torch.tensor(3)}
    out = select_rows([(a, torch.tensor([1])), (b, torch.tensor([0]))], pad_token_id=7)
    assert out["prompt_ids"].tolist() == [[7, 7, 7, 3], [1, 2, 3, 4]]
    assert out["prompt_mask"].tolist() == [[0, 0, 0, 1], [1, 1, 1, 1]]
    assert out["completion_ids"].tolist() == [[6, 7, 7], [8, 9, 10]]
    assert out["completion_mask"].tolist() == [[1, 0, 0], [1, 1, 1]]
    assert out["advantages"].tolist() == [-1.0, 0.5] and int(out["num_items_in_batch"]) == 4
    with pytest.raises(NotImplementedError, match="pixel_values"):
        select_rows([({**a, "pixel_values": torch.zeros(2, 3)}, torch.tensor([0]))], 7)


def test_dynamic_sampling_drops_flat_groups_and_refills(tiny):
    """Half the prompts have a constant reward: the scored batch must come back with no zero-std group."""
    cfg = small_config("dapo", tiny, per_device_train_batch_size=8, mask_truncated_completions=False)
    t = build(GRPOLessonsTrainer, tiny, cfg, variant="dapo", dynamic_sampling=True, max_sampling_rounds=4)
    rows = [tiny["ds"][i] for i in range(2) for _ in range(4)]  # prompt 0 flat, prompt 1 varied
    out = t._generate_and_score_completions(rows)
    assert out["advantages"].shape == (8,) and out["completion_ids"].shape[0] == 8
    groups = out["advantages"].view(-1, 4)
    assert (groups.abs().amax(dim=1) > 1e-3).all(), groups  # every group informative
    m = t._metrics["train"]
    assert m["dynamic_sampling/dropped_groups"][-1] == 1.0 and m["dynamic_sampling/unfilled_groups"][-1] == 0.0
    assert m["dynamic_sampling/extra_rounds"][-1] >= 1
    assert int(out["num_items_in_batch"]) == int(out["completion_mask"].sum())


def test_dynamic_sampling_is_bounded_when_nothing_is_informative(tiny):
    def flat(completions, **kw):
        return [1.0] * len(completions)

    cfg = small_config("dapo", tiny)
    t = GRPOLessonsTrainer(model=tiny["path"], args=cfg, reward_funcs=[flat], train_dataset=tiny["ds"],
                           processing_class=tiny["tok"], dynamic_sampling=True, max_sampling_rounds=2)
    t.model.train()
    out = t._generate_and_score_completions([tiny["ds"][0]] * 4)
    assert out["advantages"].shape == (4,) and float(out["advantages"].abs().max()) == 0.0
    assert t._metrics["train"]["dynamic_sampling/extra_rounds"][-1] == 2.0
    assert t._metrics["train"]["dynamic_sampling/unfilled_groups"][-1] == 1.0


# -- 2-step CPU training per variant ------------------------------------------------------------------------


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_two_step_cpu_training_run(variant, tiny):
    cfg = small_config(variant, tiny, max_steps=2, learning_rate=1e-3,
                       mask_truncated_completions=False)  # the tiny model never emits EOS in 8 tokens
    dyn = variant == "dapo"  # the paper's dynamic sampling on one of them
    t = make_trainer(variant, model=tiny["path"], args=cfg, reward_funcs=[text_reward if dyn else varied_reward],
                     train_dataset=tiny["ds"], processing_class=tiny["tok"], dynamic_sampling=dyn)
    assert isinstance(t, GRPOLessonsTrainer) == (variant in NOT_IN_TRL or dyn)
    before = {n: p.detach().clone() for n, p in t.model.named_parameters()}
    t.train()
    logs = [h for h in t.state.log_history if "loss" in h]
    assert len(logs) == 2 and all(math.isfinite(h["loss"]) for h in logs), logs
    assert all(math.isfinite(h["grad_norm"]) for h in logs)
    assert "reward" in logs[-1] and "entropy" in logs[-1]
    moved = max((p.detach() - before[n]).abs().max().item() for n, p in t.model.named_parameters())
    assert moved > 0, "two optimizer steps left every weight unchanged"
    if dyn:
        assert "dynamic_sampling/dropped_groups" in logs[-1]


# -- memory budget -------------------------------------------------------------------------------------------


def test_memory_budget_by_hand_for_qwen25_05b():
    from grpo_lessons.integrations.trl_bridge import memory_budget

    b = memory_budget("Qwen2.5-0.5B", 24, master_dtype="fp32", micro_batch=1, seq_len=1000, num_sequences=10,
                      overhead_gib=0.0, vllm_gpu_memory_utilization=0.3)
    gib = 2**30
    assert b["weights"] == pytest.approx(0.494e9 * 4 / gib) and b["adam"] == pytest.approx(2 * b["weights"])
    assert b["kv_per_token_kib"] == pytest.approx(2 * 24 * 2 * 64 * 2 / 1024)  # 12 KiB per token
    assert b["kv_cache"] == pytest.approx(2 * 24 * 2 * 64 * 2 * 1000 * 10 / gib)
    assert b["activations"] == pytest.approx((24 * 2 + 34) * 1000 * 896 / gib)
    assert b["trainer"] == pytest.approx(b["weights"] * 4 + b["activations"])  # fp32: 16 bytes/param
    assert b["fits"] and b["u_min"] < 0.3 < b["u_max"]
    big = memory_budget("Qwen2.5-7B", 80, master_dtype="bf16", vllm_gpu_memory_utilization=0.7)
    assert not big["fits"]  # the chapter's 7B with vllm_gpu_memory_utilization=0.7 on one 80 GB GPU


# -- the benchmark's tiny mode ------------------------------------------------------------------------------


def test_gpu_bench_tiny_mode_runs_on_cpu(capsys):
    spec = importlib.util.spec_from_file_location("gpu_bench", ROOT / "benchmarks" / "gpu_bench.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    with tempfile.TemporaryDirectory() as d:
        rows = bench.main(["--tiny", "--steps", "2", "--out", d])
    assert {r["variant"] for r in rows} == {"grpo", "dapo"}
    for r in rows:
        assert r["step_time_s"] > 0 and r["completion_tokens_per_s"] > 0 and r["mode"] == "tiny"
    assert "step time" in capsys.readouterr().out


if __name__ == "__main__":  # print the parity table for the closing note / README
    import logging

    logging.disable(logging.WARNING)
    with tempfile.TemporaryDirectory() as d:
        tok = tiny_tokenizer()
        tiny_qwen(tok).save_pretrained(d)
        tok.save_pretrained(d)
        prompts = [[{"role": "user", "content": f"What is {i}+{i + 1}?"}] for i in range(16)]
        ds = Dataset.from_dict({"prompt": prompts, "flat": [i % 2 == 0 for i in range(16)]})
        fx = {"path": d, "tok": tok, "ds": ds, "out": d + "/out"}
        print("| variant | beta | max abs dloss | max abs dgrad | loss | grad norm | clip frac |")
        print("|---|---|---|---|---|---|---|")
        for v in NATIVE:
            for beta in (0.0, 0.04):
                worst = {"dloss": 0.0, "dgrad": 0.0}
                for seed in (0, 1, 2):
                    r = compare(v, fx, seed=seed, beta=beta)
                    worst = {k: max(worst[k], r[k]) for k in worst}
                print(f"| {v} | {beta} | {worst['dloss']:.1e} | {worst['dgrad']:.1e} | {r['loss']:.4f} | "
                      f"{r['grad_norm']:.3f} | {r['clip']:.3f} |")
        r = compare("gspo_token", fx, native_variant="gspo", seed=2, beta=0.0)
        print(f"| gspo_token vs TRL gspo | 0.0 | {r['dloss']:.1e} | {r['dgrad']:.1e} | {r['loss']:.4f} | "
              f"{r['grad_norm']:.3f} | {r['clip']:.3f} |")
    sys.exit(0)
