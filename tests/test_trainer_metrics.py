"""The trainer's per-step diagnostics a comparison reads: advantage RMS, KL to the start weights, the batch
fingerprint, and a step-0 evaluation passed in instead of recomputed."""

import copy

import pytest
import torch

from grpo_lessons.core.kl import kl_estimate
from grpo_lessons.training.records import BASE_COLUMNS, batch_hash, check_initial_eval
from grpo_lessons.training.rollout import rollout_logps
from grpo_lessons.training.trainer import Trainer
from test_trainer import EVAL, ROWS, cfg, digits, run


def trainer(c, **kw):
    kw.setdefault("train_rows", ROWS)
    kw.setdefault("eval_rows", EVAL)
    kw.setdefault("reward_funcs", [digits])
    return Trainer(c, **kw)


def test_the_study_columns_are_in_every_metrics_file():
    for col in ("adv_rms", "kl_start", "batch_hash", "reward_mean", "completion_len", "truncated_frac", "entropy",
                "clip_frac_low", "clip_frac_high", "grad_norm", "kl"):
        assert col in BASE_COLUMNS, col


@pytest.mark.parametrize("variant", ["grpo", "gopo"])
def test_adv_rms_and_batch_hash_are_those_of_the_trained_batch(tmp_path, variant):
    """Two trainers with one seed, one after the other (they share torch's global generator): the one that runs
    step() logs what the other's sampled batch gives by hand."""
    row = trainer(cfg(tmp_path, "a", variant=variant, steps=1, eval_size=0)).step()
    b = trainer(cfg(tmp_path, "b", variant=variant, steps=1, eval_size=0))
    batch = b.prepare(b.sample())
    A = batch.advantages.double()  # (N,)
    assert row["adv_rms"] == pytest.approx(float((A ** 2).mean().sqrt()), rel=1e-12)
    assert row["adv_rms"] > 0.5  # z-scores / ranks of a varied reward, not zeros
    assert row["batch_hash"] == batch_hash(batch.rollout.completion_ids)


def test_batch_hash_sees_every_token_and_the_shape():
    ids = torch.arange(12).view(3, 4)
    h = batch_hash(ids)
    assert h == batch_hash(ids.clone()) and isinstance(h, int) and 0 <= h < 2 ** 48
    other = ids.clone()
    other[2, 3] += 1
    assert batch_hash(other) != h
    assert batch_hash(ids.view(4, 3)) != h  # same bytes, other shape


@pytest.mark.parametrize("precision,sampler", [("fp32", None), ("bf16-mixed", "bfloat16")])
def test_kl_start_is_zero_at_step_one_and_the_k3_of_the_start_weights_later(tmp_path, precision, sampler):
    c = dict(steps=2, eval_size=0, kl_start_every=1, precision=precision, sampler_dtype=sampler, lr=3e-3)
    a = trainer(cfg(tmp_path, "a", **c))
    rows = [a.step(), a.step()]
    assert rows[0]["kl_start"] == 0.0  # the policy before the first update is the start
    assert rows[1]["kl_start"] > 1e-4

    b = trainer(cfg(tmp_path, "b", **c))
    start = copy.deepcopy(b.train_model)  # the weights the training pass starts from
    b.step()
    batch = b.prepare(b.sample())
    with torch.no_grad():
        pol = rollout_logps(b.train_model, batch.rollout, b.cfg.temperature)  # (N, T) before step 2's update
        ref = rollout_logps(start, batch.rollout, b.cfg.temperature)
    k3 = kl_estimate(pol.float(), ref.float(), "k3")
    m = batch.rollout.completion_mask.float()
    assert rows[1]["kl_start"] == pytest.approx(float((k3 * m).sum() / m.sum()), rel=1e-4, abs=1e-7)


def test_kl_start_cadence_lora_and_off(tmp_path):
    h = run(cfg(tmp_path, "every2", steps=3, kl_start_every=2, eval_size=0)).history
    assert [r["kl_start"] is not None for r in h] == [False, True, False]
    h = run(cfg(tmp_path, "lora", steps=2, kl_start_every=1, eval_size=0, lora=True, lr=1e-2)).history
    assert h[0]["kl_start"] == 0.0 and h[1]["kl_start"] > 0
    h = run(cfg(tmp_path, "off", steps=1, eval_size=0)).history
    assert h[0]["kl_start"] is None and h[0]["adv_rms"] is not None
    with pytest.raises(ValueError, match="kl_start_every"):
        cfg(tmp_path, kl_start_every=-1).validate()


def test_a_known_initial_eval_is_recorded_instead_of_recomputed(tmp_path, monkeypatch):
    computed = run(cfg(tmp_path, "computed", steps=1, eval_every=0))
    ev = dict(computed.initial_eval)
    ev.pop("step")
    calls = []
    original = Trainer.evaluate
    monkeypatch.setattr(Trainer, "evaluate", lambda self: calls.append(self.step_count) or original(self))
    given = run(cfg(tmp_path, "given", steps=1, eval_every=0), initial_eval=ev)
    assert calls == [1]  # only the final evaluation ran
    assert given.history[0] == computed.history[0]  # the same step-0 row
    assert given.history[1]["batch_hash"] == computed.history[1]["batch_hash"]  # and the same first batch

    with pytest.raises(ValueError, match="held-out prompts"):
        trainer(cfg(tmp_path, "bad"), initial_eval=dict(ev, n=ev["n"] + 1))
    with pytest.raises(ValueError, match="initial_eval"):
        trainer(cfg(tmp_path, "bad"), initial_eval={"accuracy": 0.5})
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        check_initial_eval(dict(ev, accuracy=float("nan")), ev["n"])
