"""The GRPO loop on tiny Qwen models: metrics, determinism, resume after a kill, dynamic sampling, bad input."""

import csv
import math

import pytest
import torch

from grpo_lessons import group_advantages
from grpo_lessons.training.models import tiny_qwen, tiny_tokenizer
from grpo_lessons.core.rewards import completion_text
from grpo_lessons.training.trainer import (METRICS_NAME, PromptStream, TrainConfig, Trainer, load_history,
                                  score_completions, train)

ROWS = [{"prompt": [{"role": "user", "content": f"What is {a} + {b}?"}], "answer": a + b, "kind": "vary"}
        for a in range(3) for b in range(4)]
EVAL = ROWS[:4]


def digits(completions, **kw):
    """A stand-in reward with variance on a random model: the share of digit characters."""
    out = []
    for c in completions:
        t = completion_text(c)
        out.append(sum(ch.isdigit() for ch in t) / max(1, len(t)))
    return out


def const_or_digits(completions, kind, **kw):
    """1.0 for every completion of a 'const' row (a group with no signal), else ``digits``."""
    d = digits(completions)
    return [1.0 if k == "const" else x for k, x in zip(kind, d)]


def is_bf16_rounding(c: torch.Tensor, p: torch.Tensor) -> bool:
    """Every entry of the bf16 tensor ``c`` is one of the two bf16 neighbours of the fp32 entry of ``p``."""
    low = p.contiguous().view(torch.int32) & -65536  # truncated toward zero
    cf = c.float()
    return bool(((cf == low.view(torch.float32)) | (cf == (low + 65536).view(torch.float32))).all())


def cfg(tmp_path, name="run", **kw):
    base = dict(model="tiny-qwen2", steps=2, prompts_per_step=2, group_size=4, max_new_tokens=6, lr=1e-3,
                eval_size=4, eval_every=2, out=str(tmp_path / name), seed=0, beta=0.0, micro_batch_size=8)
    base.update(kw)
    return TrainConfig(**base)


def run(c, **kw):
    kw.setdefault("train_rows", ROWS)
    kw.setdefault("eval_rows", EVAL)
    kw.setdefault("reward_funcs", [digits])
    return train(c, progress=False, **kw)


def strip_time(history):
    return [{k: v for k, v in r.items() if k not in ("seconds", "elapsed") and not k.startswith("time_")}
            for r in history]


def test_history_csv_and_columns(tmp_path):
    res = run(cfg(tmp_path, beta=0.04))
    h = res.history
    assert [r["step"] for r in h] == [0, 1, 2]
    assert h[0]["accuracy"] is not None and h[0]["reward_mean"] is None  # step 0: evaluation only
    for key in ("step", "reward_mean", "reward_std", "accuracy", "kl", "clip_frac", "completion_len", "loss",
                "frac_zero_std_groups", "resample_rounds", "seconds", "reward_digits", "grad_norm"):
        assert key in h[1], key
    assert h[1]["kl"] is not None and h[1]["kl"] >= 0 and h[2]["accuracy"] is not None
    assert res.final_eval["step"] == 2 and res.initial_eval["step"] == 0
    assert load_history(res.csv_path) == h or strip_time(load_history(res.csv_path)) == strip_time(h)
    with open(res.csv_path) as f:
        lines = f.read().splitlines()
    assert len(lines) == 1 + len(h) and len({line.count(",") for line in lines}) == 1
    assert (tmp_path / "run" / "config.json").is_file()
    assert res.checkpoint_path is None and not (tmp_path / "run" / "checkpoint.pt").exists()  # finished: none kept


def test_seeded_runs_reproduce(tmp_path):
    a = run(cfg(tmp_path, "a", mu=2))
    b = run(cfg(tmp_path, "b", mu=2))
    assert strip_time(a.history) == strip_time(b.history)
    c = run(cfg(tmp_path, "c", mu=2, seed=1))
    assert strip_time(c.history) != strip_time(a.history)


def test_resume_after_kill_matches_an_uninterrupted_run(tmp_path):
    full = run(cfg(tmp_path, "full", steps=4, checkpoint_every=2))

    class Kill(Exception):
        pass

    def kill_at_3(history):
        if history[-1]["step"] == 3:  # step 3 is logged but not checkpointed: a kill loses it
            raise Kill

    with pytest.raises(Kill):
        run(cfg(tmp_path, "killed", steps=4, checkpoint_every=2), callback=kill_at_3)
    assert [r["step"] for r in load_history(tmp_path / "killed" / METRICS_NAME)] == [0, 1, 2, 3]
    resumed = run(cfg(tmp_path, "killed", steps=4, checkpoint_every=2, resume=True))
    assert strip_time(resumed.history) == strip_time(full.history)
    assert strip_time(load_history(tmp_path / "killed" / METRICS_NAME)) == strip_time(full.history)
    for (n, p), (m, q) in zip(full.model.named_parameters(), resumed.model.named_parameters()):
        assert n == m and torch.equal(p, q), n

    # Two steps, then resume to four: the same again (checkpoint at the end of the short run).
    assert run(cfg(tmp_path, "short", steps=2, checkpoint="end")).checkpoint_path.is_file()
    longer = run(cfg(tmp_path, "short", steps=4, resume=True))
    assert strip_time(longer.history) == strip_time(full.history)


def test_resume_refuses_different_settings(tmp_path):
    run(cfg(tmp_path, "x", steps=1, eval_size=0, checkpoint="end"))
    with pytest.raises(ValueError, match="different settings.*lr"):
        run(cfg(tmp_path, "x", steps=2, eval_size=0, lr=5e-4, resume=True))


def test_prompt_stream_order_and_state():
    s = PromptStream(5, seed=3)
    first = s.take(7)
    assert sorted(first[:5]) == list(range(5)) and s.state() == {"epoch": 1, "pos": 2}
    again = PromptStream(5, seed=3, epoch=1, pos=2)
    assert again.take(4) == s.take(4)


def test_step_pieces_by_hand(tmp_path):
    tr = Trainer(cfg(tmp_path, eval_size=0), train_rows=ROWS, reward_funcs=[digits])
    batch = tr.sample_batch()
    G = tr.cfg.group_size
    assert len(batch.rewards) == 2 * G and batch.loss_mask.shape == batch.rollout.completion_ids.shape
    torch.testing.assert_close(batch.advantages, group_advantages(batch.rewards, G))
    total, parts = score_completions(batch.rollout, batch.rows, [digits])
    torch.testing.assert_close(total, batch.rewards)
    before = [p.detach().clone() for p in tr.params]
    m = tr.update(batch)
    assert m["ratio_mean"] == pytest.approx(1.0) and m["clip_frac"] == 0.0  # mu = 1: on policy
    assert any(not torch.equal(a, b) for a, b in zip(before, tr.params))


@pytest.mark.parametrize("variant", ["grpo", "dapo", "dr_grpo"])
def test_micro_batches_add_up_to_the_full_batch(tmp_path, variant):
    tok = tiny_tokenizer()
    params = []
    for mb in (4, 8):  # one group per micro-batch vs the whole batch at once
        model = tiny_qwen(tok)
        tr = Trainer(cfg(tmp_path, f"mb{mb}", eval_size=0, micro_batch_size=mb, variant=variant,
                         max_grad_norm=1e9), model=model, tokenizer=tok, train_rows=ROWS, reward_funcs=[digits])
        tr.optimizer = torch.optim.SGD(tr.params, lr=1.0)  # the step is minus the accumulated gradient
        tr.update(tr.sample_batch())
        params.append([p.detach().clone() for p in tr.params])
    for a, b in zip(*params):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


def test_dynamic_sampling_drops_all_equal_groups_and_refills(tmp_path):
    rows = [dict(r, kind="const" if i % 2 else "vary") for i, r in enumerate(ROWS)]
    tr = Trainer(cfg(tmp_path, eval_size=0, prompts_per_step=3, dynamic_sampling=True, max_resample_rounds=6),
                 train_rows=rows, reward_funcs=[const_or_digits])
    b = tr.sample_batch()
    assert all(r["kind"] == "vary" for r in b.rows) and len(b.rows) == 3
    assert b.stats["resample_rounds"] >= 1 and b.stats["frac_zero_std_groups"] > 0
    # the bound: with every group constant, sampling stops after max_resample_rounds and trains on nothing
    tr2 = Trainer(cfg(tmp_path, "b", eval_size=0, dynamic_sampling=True, max_resample_rounds=2),
                  train_rows=[dict(r, kind="const") for r in ROWS], reward_funcs=[const_or_digits])
    row = tr2.step()
    assert row["resample_rounds"] == 2 and row["groups_trained"] == 0 and row["loss"] is None
    assert row["frac_zero_std_groups"] == 1.0 and row["completions_sampled"] == 3 * 2 * 4


def test_overlong_filtering_and_soft_penalty(tmp_path):
    tr = Trainer(cfg(tmp_path, eval_size=0, mask_truncated_completions=True, overlong_cache_len=2),
                 train_rows=ROWS, reward_funcs=[digits])
    b = tr.sample_batch()
    trunc = b.rollout.truncated
    assert bool(trunc.all())  # a random tiny model never stops within 6 tokens
    assert float(b.loss_mask.sum()) == 0.0
    torch.testing.assert_close(b.stats["overlong_penalty"], torch.full((8,), -1.0))
    before = [p.detach().clone() for p in tr.params]
    m = tr.update(b)
    assert m["loss"] == 0.0 and all(torch.equal(a, p) for a, p in zip(before, tr.params))
    assert m["update_skipped"] == 1  # nothing to learn from: no optimiser step at all, not even weight decay


def test_lora_with_kl_uses_the_adapter_free_model_as_reference(tmp_path):
    pytest.importorskip("peft")
    res = run(cfg(tmp_path, lora=True, lora_r=4, beta=0.1, lr=1e-2, steps=2, eval_size=0))
    assert res.history[0]["kl"] == pytest.approx(0.0, abs=1e-7)  # LoRA starts at B = 0: policy == reference
    assert res.history[1]["kl"] > 0
    names = [n for n, p in res.model.named_parameters() if p.requires_grad]
    assert names and all("lora_" in n for n in names)


def test_trainable_layers_freezes_the_bottom(tmp_path):
    tr = Trainer(cfg(tmp_path, eval_size=0, trainable_layers=1), train_rows=ROWS, reward_funcs=[digits])
    names = [n for n, p in tr.model.named_parameters() if p.requires_grad]
    assert names and all(n.startswith(("model.layers.1.", "model.norm")) for n in names)


# --------------------------------------------------------------------------------------------
# Bad input: a clear error naming the problem, and nothing half-written.
# --------------------------------------------------------------------------------------------

def assert_csv_whole(path):
    with open(path) as f:
        rows = list(csv.reader(f))
    assert all(len(r) == len(rows[0]) for r in rows), "a partial row was written"
    return rows


def test_empty_dataset(tmp_path):
    with pytest.raises(ValueError, match="training set is empty"):
        run(cfg(tmp_path), train_rows=[])
    with pytest.raises(ValueError, match="evaluation set is empty"):
        run(cfg(tmp_path), eval_rows=[])
    assert not (tmp_path / "run").exists()


def test_group_size_one(tmp_path):
    with pytest.raises(ValueError, match="group_size must be >= 2"):
        run(cfg(tmp_path, group_size=1))


def test_prompt_longer_than_the_context(tmp_path):
    long = [{"prompt": [{"role": "user", "content": "What is 1 + 1? " * 200}], "answer": 2, "kind": "vary"}]
    with pytest.raises(ValueError, match=r"do not fit the model's context of 512 tokens.*row 1"):
        run(cfg(tmp_path), train_rows=ROWS + long)
    assert not (tmp_path / "run").exists()


def test_model_that_emits_nothing(tmp_path):
    tok = tiny_tokenizer()
    model = tiny_qwen(tok)
    head = torch.nn.Linear(model.config.hidden_size, model.config.vocab_size, bias=True)
    with torch.no_grad():
        head.weight.zero_()
        head.bias.fill_(-1e4)
        head.bias[tok.eos_token_id] = 0.0  # EOS is the only token it ever produces
    model.lm_head = head
    with pytest.raises(RuntimeError, match="only empty completions"):
        run(cfg(tmp_path, eval_size=0), model=model, tokenizer=tok)
    assert_csv_whole(tmp_path / "run" / METRICS_NAME)


def wrong_length(completions, **kw):
    return [0.0] * (len(completions) - 1)


def nan_reward(completions, **kw):
    return [math.nan] + [0.0] * (len(completions) - 1)


@pytest.mark.parametrize("fn, message", [(wrong_length, r"'wrong_length' returned 7 rewards for 8 completions"),
                                         (nan_reward, r"'nan_reward' returned nan at position 0")])
def test_bad_reward_function(tmp_path, fn, message):
    with pytest.raises(ValueError, match=message):
        run(cfg(tmp_path, eval_size=0), reward_funcs=[digits, fn])
    rows = assert_csv_whole(tmp_path / "run" / METRICS_NAME)
    assert len(rows) == 1  # the header only: the failing step left no row


def test_bad_settings(tmp_path):
    with pytest.raises(ValueError, match="unknown variant"):
        cfg(tmp_path, variant="nope").validate()
    with pytest.raises(ValueError, match="reward weights"):
        run(cfg(tmp_path, reward_weights=(1.0, 2.0)))
    with pytest.raises(ValueError, match="overlong_cache_len"):
        cfg(tmp_path, overlong_cache_len=100).validate()
    with pytest.raises(ValueError, match="steps"):
        cfg(tmp_path, steps=0).validate()


def test_two_grpo_trains_with_the_group_size_that_defines_it(tmp_path):
    # 2-GRPO *is* GRPO at G = 2: leaving group_size unset must give 2, and any other G is refused.
    assert TrainConfig(variant="2-grpo").resolved()["group_size"] == 2
    assert TrainConfig(variant="grpo").resolved()["group_size"] == 8
    with pytest.raises(ValueError, match=r"defined by group_size=2.*got group_size=8"):
        TrainConfig(variant="2-grpo", group_size=8).validate()
    tr = Trainer(cfg(tmp_path, variant="2-grpo", group_size=None, eval_size=0), train_rows=ROWS,
                 reward_funcs=[digits])
    batch = tr.sample_batch()
    assert tr.cfg.group_size == 2 and batch.rollout.group_size == 2 and len(batch.rewards) == 2 * 2
    # two completions per group: advantages are +-1/sqrt(2) (or 0 for a tie), as in the paper -- up to TRL's
    # eps = 1e-4 added to the std d / sqrt(2), which matters when the two rewards differ by little
    a = batch.advantages.view(-1, 2)
    for pair, r in zip(a, batch.rewards.view(-1, 2)):
        d = float((r[0] - r[1]).abs())
        expected = (d / 2) / (d * 2 ** -0.5 + 1e-4)  # = 2 ** -0.5 for d >> 1e-4, 0 for a tie
        assert torch.allclose(pair.abs(), torch.full((2,), expected), atol=1e-5), (pair, r)
    assert float(a.sum(1).abs().max()) < 1e-6


def alternating_or_const(completions, kind, **kw):
    """1.0 for a 'const' row's completions (all-equal group), 0/1 alternating for a 'vary' row (informative)."""
    return [1.0 if k == "const" else float(i % 2) for i, k in enumerate(kind)]


@pytest.mark.parametrize("seed, rounds", [(0, 6), (1, 6), (2, 1), (3, 0)])
def test_trainer_dynamic_sampling_agrees_with_the_reference_loop(tmp_path, seed, rounds):
    # The trainer samples each round's prompts in one batch; grpo_lessons.core.dynamic_sampling.dynamic_sample is the
    # one-group-at-a-time loop of notebook 07. On the same prompt stream they must keep, drop and count the same.
    from grpo_lessons.core.dynamic_sampling import dynamic_sample

    kinds = ["const", "vary", "const", "const", "vary", "const", "vary", "const", "const", "const", "vary", "const"]
    rows = [dict(r, kind=k, idx=i) for i, (r, k) in enumerate(zip(ROWS, kinds))]
    tr = Trainer(cfg(tmp_path, eval_size=0, prompts_per_step=3, dynamic_sampling=True, max_resample_rounds=rounds,
                     seed=seed), train_rows=rows, reward_funcs=[alternating_or_const])
    b = tr.sample_batch()
    G = tr.cfg.group_size
    ref = dynamic_sample(iter(PromptStream(len(rows), seed).take(10_000)),
                         lambda i: [1.0] * G if kinds[i] == "const" else [float(j % 2) for j in range(G)],
                         batch_size=3, max_rounds=rounds + 1)
    assert [r["idx"] for r in b.rows] == ref.prompts
    assert b.stats["resample_rounds"] == ref.rounds - 1
    assert b.stats["completions_sampled"] == ref.sampled * G
    assert round(b.stats["frac_zero_std_groups"] * ref.sampled) == ref.dropped


# --------------------------------------------------------------------------------------------
# Review fixes
# --------------------------------------------------------------------------------------------

def test_trainable_layers_with_kl_builds_the_frozen_reference(tmp_path):
    tr = Trainer(cfg(tmp_path, eval_size=0, trainable_layers=1, beta=0.1, lr=1e-2), train_rows=ROWS,
                 reward_funcs=[digits])
    assert tr.ref_model is not None and not any(p.requires_grad for p in tr.ref_model.parameters())
    first = tr.step()
    assert first["kl"] == pytest.approx(0.0, abs=1e-7)  # before any update the policy is the reference
    second = tr.step()
    assert second["kl"] > 0  # the last block moved away from the frozen copy


def test_max_minutes_is_a_budget_per_invocation(tmp_path):
    # a tiny budget: each invocation runs exactly one step, then stops; a resume gets a new budget
    c = cfg(tmp_path, "budget", steps=4, eval_size=0, max_minutes=1e-9)
    first = run(c)
    assert [r["step"] for r in first.history] == [1]
    resumed = run(cfg(tmp_path, "budget", steps=4, eval_size=0, max_minutes=1e-9, resume=True))
    assert [r["step"] for r in resumed.history] == [1, 2]
    assert resumed.history[1]["elapsed"] > resumed.history[0]["elapsed"]  # the CSV's clock still accumulates


def test_options_the_variant_lacks_fail_in_validate(tmp_path):
    with pytest.raises(ValueError, match="'sapo'.*no clip range"):
        TrainConfig(variant="sapo", epsilon=0.2).validate()
    with pytest.raises(ValueError, match="no clip range"):
        run(cfg(tmp_path, variant="sapo", epsilon_high=0.3))
    assert not (tmp_path / "run").exists()  # refused before any file was written


def test_prompts_per_step_default_keeps_the_completion_budget():
    two = TrainConfig(variant="2-grpo").resolve()
    eight = TrainConfig(variant="grpo").resolve()
    assert (eight.prompts_per_step, eight.group_size) == (8, 8)
    assert (two.prompts_per_step, two.group_size) == (32, 2)
    assert two.prompts_per_step * two.group_size == eight.prompts_per_step * eight.group_size
    assert TrainConfig(variant="2-grpo", prompts_per_step=5).resolve().prompts_per_step == 5


def test_checkpoint_saves_and_restores_the_cuda_generators(tmp_path, monkeypatch):
    from grpo_lessons.training import records

    saved_cuda = [torch.tensor([1, 2, 3], dtype=torch.uint8)]
    restored = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_rng_state_all", lambda: saved_cuda)
    monkeypatch.setattr(torch.cuda, "set_rng_state_all", lambda s: restored.append(s))
    state = records.rng_state()
    assert state["cuda_rng"] is saved_cuda
    tr = Trainer(cfg(tmp_path, eval_size=0, steps=1), train_rows=ROWS, reward_funcs=[digits])
    path = tr.save_checkpoint()
    assert torch.equal(torch.load(path, weights_only=False)["cuda_rng"][0], saved_cuda[0])
    tr.load_checkpoint()
    assert len(restored) == 1 and torch.equal(restored[0][0], saved_cuda[0])


# --------------------------------------------------------------------------------------------
# Speed: bf16-mixed training, a low-precision sampler, the fused optimiser
# --------------------------------------------------------------------------------------------

def test_bf16_mixed_keeps_fp32_weights_and_loss_and_stays_close_to_fp32(tmp_path):
    from grpo_lessons.training.trainer import batch_loss

    tr = Trainer(cfg(tmp_path, eval_size=0, precision="bf16-mixed"), train_rows=ROWS, reward_funcs=[digits])
    b = tr.sample_batch()
    kw = dict(variant="grpo", temperature=tr.cfg.temperature, max_completion_length=tr.cfg.max_new_tokens)
    out16, lp16 = batch_loss(tr.model, b.rollout, b.advantages, b.loss_mask, precision="bf16-mixed", **kw)
    out32, lp32 = batch_loss(tr.model, b.rollout, b.advantages, b.loss_mask, precision="fp32", **kw)
    m = b.loss_mask > 0
    diff = float((lp16 - lp32).detach()[m].abs().max())
    assert 0 < diff < 0.5  # bf16 matmuls: visibly different, still close
    assert lp16.dtype == torch.float32 and out16.loss.dtype == torch.float32
    row = tr.step()
    assert all(p.dtype == torch.float32 for p in tr.params) and math.isfinite(row["loss"])


def test_bf16_sampler_is_a_resynced_copy_and_the_mismatch_is_logged(tmp_path):
    from grpo_lessons.training.rollout import rollout_logps

    tr = Trainer(cfg(tmp_path, eval_size=0, sampler_dtype="bfloat16", lr=1e-2), train_rows=ROWS,
                 reward_funcs=[digits])
    assert tr.sampler is not tr.model and next(tr.sampler.parameters()).dtype == torch.bfloat16
    b = tr.sample_batch()
    # the sampler's log-probs are its own (bf16 weights), recorded at generation time
    own = rollout_logps(tr.sampler, b.rollout, tr.cfg.temperature) * b.rollout.completion_mask
    torch.testing.assert_close(b.rollout.sampling_logps, own.float(), atol=0.05, rtol=0)
    row = tr.step()
    for (n, s), (_, p) in zip(tr.sampler.named_parameters(), tr.model.named_parameters()):
        assert is_bf16_rounding(s, p.detach()), n  # resynced after the update (dithered rounding, test_speed.py)
    assert row["mismatch_k3"] > 1e-7
    assert row["mismatch_ratio_min"] <= row["mismatch_ratio_mean"] <= row["mismatch_ratio_max"]
    assert row["mismatch_ratio_min"] < 1 < row["mismatch_ratio_max"]
    # no sampler copy: the same fp32 weights sample and train, the gap is float rounding only
    same = Trainer(cfg(tmp_path, "same", eval_size=0), train_rows=ROWS, reward_funcs=[digits])
    assert same.sampler is same.model
    r2 = same.step()
    assert r2["mismatch_k3"] < 1e-8 < row["mismatch_k3"]


def test_mu_2_with_bf16_mixed_and_a_bf16_sampler(tmp_path):
    res = run(cfg(tmp_path, mu=2, precision="bf16-mixed", sampler_dtype="bfloat16", eval_size=0, lr=1e-2))
    h = res.history
    assert [r["step"] for r in h] == [1, 2]
    assert all(math.isfinite(r["loss"]) and r["mismatch_k3"] is not None for r in h)
    assert all(r["ratio_mean"] != 1.0 for r in h)  # the second pass is off-policy


def test_rollout_correction_settings_reach_policy_loss_only_when_set(tmp_path, monkeypatch):
    import grpo_lessons.training.trainer as trainer_mod

    seen = []
    real = trainer_mod.policy_loss

    def spy(*args, **kw):
        seen.append({k: kw[k] for k in kw if k in ("sampling_logp", "rollout_correction", "rollout_clip_max",
                                                   "rollout_clip_min", "off_policy_mask_threshold")})
        for k in list(seen[-1]):
            kw.pop(k)
        return real(*args, **kw)

    monkeypatch.setattr(trainer_mod, "policy_loss", spy)
    Trainer(cfg(tmp_path, "plain", eval_size=0), train_rows=ROWS, reward_funcs=[digits]).step()
    assert seen and all(s == {} for s in seen)
    seen.clear()
    tr = Trainer(cfg(tmp_path, "tis", eval_size=0, sampler_dtype="bfloat16", rollout_correction="token_truncate",
                     rollout_clip_max=2.0), train_rows=ROWS, reward_funcs=[digits])
    tr.step()
    assert seen and all(s["rollout_correction"] == "token_truncate" and s["rollout_clip_max"] == 2.0 for s in seen)
    assert all(s["sampling_logp"].shape[0] == 8 for s in seen)  # the micro-batch's rows


def test_fused_adamw_makes_the_same_update(tmp_path):
    tok = tiny_tokenizer()
    params = {}
    for opt in ("adamw-fused", "adamw"):
        tr = Trainer(cfg(tmp_path, opt, eval_size=0, optimizer=opt), model=tiny_qwen(tok), tokenizer=tok,
                     train_rows=ROWS, reward_funcs=[digits])
        tr.step()
        params[opt] = [p.detach().clone() for p in tr.params]
    for a, b in zip(params["adamw-fused"], params["adamw"]):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


def test_the_time_budget_excludes_evaluation(tmp_path, monkeypatch):
    slow_eval = {"seconds": 0.3}
    real = Trainer.evaluate

    def slow(self):
        import time
        time.sleep(slow_eval["seconds"])
        return real(self)

    monkeypatch.setattr(Trainer, "evaluate", slow)
    tr = Trainer(cfg(tmp_path, steps=3, eval_every=1, max_minutes=1.0 / 60), train_rows=ROWS, eval_rows=EVAL,
                 reward_funcs=[digits])
    res = tr.run(progress=False)
    steps = [r for r in res.history if r["step"] > 0]
    assert all(r["time_eval"] >= 0.3 for r in steps)
    train_time = sum(r["seconds"] - r["time_eval"] for r in steps)
    assert tr.session_elapsed == pytest.approx(train_time)
    # 3 steps x (>= 0.3 s of evaluation) would exceed the 1 s budget if evaluation counted
    assert len(steps) == 3 or train_time >= 1.0


def test_rollout_correction_runs_and_logs_its_shares(tmp_path):
    # a bf16 sampler and a tight truncation: some token weights pi_old / mu exceed 1.001 and are truncated
    row = Trainer(cfg(tmp_path, eval_size=0, sampler_dtype="bfloat16", rollout_correction="token_truncate",
                      rollout_clip_max=1.001, off_policy_mask_threshold=10.0), train_rows=ROWS,
                  reward_funcs=[digits]).step()
    assert row["mismatch_ratio_max"] > 1.001
    assert 0 < row["correction_truncated_frac"] < 1
    assert row["off_policy_masked_frac"] == 0.0  # a threshold of 10 nats masks nothing
    assert math.isfinite(row["loss"])


def test_mismatch_stats_by_hand():
    from grpo_lessons.training.trainer import mismatch_stats

    mu = torch.log(torch.tensor([[0.5, 0.25, 0.9]]))  # the sampler's log-probs
    old = torch.log(torch.tensor([[0.25, 0.5, 0.1]]))  # the trainer's; the third token is padding
    st = mismatch_stats(mu, old, torch.tensor([[1.0, 1.0, 0.0]]))
    k3 = [(0.5 - 1 - math.log(0.5)), (2.0 - 1 - math.log(2.0))]  # r - 1 - log r with r = pi_old / mu
    assert st["mismatch_k3"] == pytest.approx(sum(k3) / 2)
    assert (st["mismatch_ratio_min"], st["mismatch_ratio_max"]) == pytest.approx((0.5, 2.0))
    assert st["mismatch_ratio_mean"] == pytest.approx(1.25)


def test_resume_with_the_fast_settings_matches_an_uninterrupted_run(tmp_path):
    fast = dict(precision="bf16-mixed", sampler_dtype="bfloat16", eval_size=0, lr=1e-2)
    full = run(cfg(tmp_path, "full", steps=2, **fast))
    run(cfg(tmp_path, "split", steps=1, checkpoint="end", **fast))
    resumed = run(cfg(tmp_path, "split", steps=2, resume=True, **fast))  # the bf16 sampler is rebuilt from the checkpoint
    assert strip_time(resumed.history) == strip_time(full.history)


def test_lora_with_a_bf16_sampler_resyncs_the_adapter(tmp_path):
    pytest.importorskip("peft")
    tr = Trainer(cfg(tmp_path, eval_size=0, lora=True, lora_r=4, lr=1e-2, sampler_dtype="bfloat16"), train_rows=ROWS,
                 reward_funcs=[digits])
    tr.step()
    tr.step()
    lora = {n: p for n, p in tr.model.named_parameters() if p.requires_grad}
    own = dict(tr.sampler.named_parameters())
    assert lora and all(is_bf16_rounding(own[n], p.detach()) for n, p in lora.items())
    assert any(float(p.detach().abs().max()) > 0 for n, p in lora.items() if "lora_B" in n)  # the adapter did move


def even_length_is_right(completions, **kw):
    """A stand-in accuracy function on a random model: right when the completion's text has an even length."""
    return [1.0 if len(completion_text(c)) % 2 == 0 else 0.0 for c in completions]


@pytest.mark.parametrize("among_rewards", [False, True])
def test_lengths_split_by_correctness(tmp_path, among_rewards):
    funcs = [even_length_is_right, digits] if among_rewards else [digits]
    tr = Trainer(cfg(tmp_path, eval_size=0, prompts_per_step=3, seed=3), train_rows=ROWS, reward_funcs=funcs,
                 accuracy_fn=even_length_is_right)
    b = tr.sample_batch()
    row = tr._sample_fields(b.stats)
    right = [len(completion_text(c)) % 2 == 0 for c in b.rollout.completions()]
    lengths = b.rollout.lengths.tolist()
    assert 0 < sum(right) < len(right)  # this seed samples both kinds, so both means are checked
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    assert row["completion_len_right"] == pytest.approx(mean([n for n, r in zip(lengths, right) if r]))
    assert row["completion_len_wrong"] == pytest.approx(mean([n for n, r in zip(lengths, right) if not r]))
    assert row["train_accuracy"] == pytest.approx(sum(right) / len(right))
    assert row["completion_len_right"] != row["completion_len_wrong"]


def test_lengths_by_correctness_when_none_is_right(tmp_path):
    tr = Trainer(cfg(tmp_path, eval_size=0), train_rows=ROWS, reward_funcs=[digits],
                 accuracy_fn=lambda completions, **kw: [0.0] * len(completions))
    row = tr.step()
    assert row["completion_len_right"] is None and row["train_accuracy"] == 0.0
    assert row["completion_len_wrong"] == pytest.approx(row["completion_len"])
    header = open(tmp_path / "run" / METRICS_NAME).readline().strip().split(",")
    assert {"completion_len_right", "completion_len_wrong", "train_accuracy"} <= set(header)


def test_max_completions_stops_at_an_equal_sample_budget(tmp_path):
    # 2 prompts x G = 4 = 8 completions a step: a budget of 20 fits two steps (16); a third would need 24 > 20
    res = run(cfg(tmp_path, steps=10, max_completions=20, eval_every=0))
    h = res.history
    assert [r["step"] for r in h] == [0, 1, 2]
    assert sum(r["completions_sampled"] or 0 for r in h) == 16
    assert h[-1]["accuracy"] is not None and res.final_eval["step"] == 2  # evaluated where the budget ended it
    assert res.checkpoint_path is None  # the budget finished the run: nothing left to resume
    # dynamic sampling refills the constant groups (half the rows), but only within what the budget has left
    rows = [dict(r, kind="const" if i % 2 else "vary") for i, r in enumerate(ROWS)]
    ds = run(cfg(tmp_path, "ds", steps=10, max_completions=24, eval_every=0, dynamic_sampling=True),
             train_rows=rows, reward_funcs=[const_or_digits])
    sampled = [r["completions_sampled"] for r in ds.history[1:]]
    assert 24 - 8 < sum(sampled) <= 24 and max(sampled) > 8  # never over the budget; refills did happen
    assert len(sampled) < 3  # GRPO's three steps of 8 = 24; the refills used part of the budget


def test_max_completions_caps_the_refill_rounds_of_a_step(tmp_path):
    """Every group constant: without a budget a step draws 1 + max_resample_rounds rounds (3 x 8 = 24 completions);
    with 12 left it draws its first round (8) and one refill of a single prompt (4), then trains on nothing."""
    rows = [dict(r, kind="const") for r in ROWS]
    free = Trainer(cfg(tmp_path, "free", eval_size=0, dynamic_sampling=True, max_resample_rounds=2),
                   train_rows=rows, reward_funcs=[const_or_digits]).step()
    assert free["completions_sampled"] == 24
    tr = Trainer(cfg(tmp_path, "capped", eval_size=0, dynamic_sampling=True, max_resample_rounds=2,
                     max_completions=12), train_rows=rows, reward_funcs=[const_or_digits])
    row = tr.step()
    assert row["completions_sampled"] == 12 and row["groups_trained"] == 0 and row["resample_rounds"] == 1


@pytest.mark.parametrize("bad", [0, -5, 2.5, True, 7])
def test_max_completions_must_be_a_positive_integer_of_at_least_one_batch(tmp_path, bad):
    with pytest.raises(ValueError, match="max_completions"):  # 7 < one step's 2 x 4
        cfg(tmp_path, max_completions=bad).validate()


def test_max_completions_on_the_command_lines():
    from grpo_lessons.training.cli import build_parser, config_from_args

    assert config_from_args(build_parser().parse_args(["train", "--max-completions", "256"])).max_completions == 256
    args = build_parser().parse_args(["compare", "--variants", "grpo,dapo", "--max-completions", "512", "--out", "x"])
    assert args.max_completions == 512
