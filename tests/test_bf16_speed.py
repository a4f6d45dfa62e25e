"""bf16 is the fast path only on a CPU that multiplies bf16 in hardware.

On x86 CPUs with AVX2 only, PyTorch emulates bf16 matrix products: measured on such a 2-core machine, a 512x576 @
576x1536 product took 13.4 ms in fp32 and 762 ms in bf16.  ``precision="auto"`` already picks fp32 on a CPU; a run
that asks for bf16 there is warned, and the study scripts' ``--precision auto`` keeps their bf16 settings only
where bf16 is faster.
"""

from __future__ import annotations

import argparse
import warnings

import pytest
import torch

from grpo_lessons.training import train_config as tc
from grpo_lessons.training import train_setup
from grpo_lessons.training.train_config import TrainConfig


def test_speedup_is_a_positive_ratio_measured_once():
    tc.cpu_bf16_speedup.cache_clear()
    r = tc.cpu_bf16_speedup()
    assert r > 0 and r == tc.cpu_bf16_speedup()
    assert tc.cpu_bf16_speedup.cache_info().hits >= 1


def _model():
    return torch.nn.Linear(4, 4)


@pytest.mark.parametrize("precision,sampler,ratio,warns", [
    ("bf16-mixed", "bfloat16", 0.03, True),   # emulated bf16: warn
    ("fp32", "bfloat16", 0.03, True),         # a bf16 sampler alone is slow too
    ("bf16-mixed", None, 0.03, True),
    ("fp32", None, 0.03, False),              # nothing in bf16
    ("bf16-mixed", "bfloat16", 3.0, False),   # native bf16: the fast path, no warning
    ("bf16-mixed", "bfloat16", 0.6, False),   # close to fp32: not worth a warning
])
def test_warning_only_where_bf16_is_slow(monkeypatch, precision, sampler, ratio, warns):
    monkeypatch.setattr(train_setup, "cpu_bf16_speedup", lambda: ratio)
    cfg = TrainConfig(precision=precision, sampler_dtype=sampler)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = train_setup.warn_if_bf16_is_slow(cfg, _model())
    slow = [w for w in caught if "no native bf16" in str(w.message)]
    assert got is warns and bool(slow) is warns
    if warns:
        assert f"{1 / ratio:.0f}x slower" in str(slow[0].message)


def test_study_precision_auto_follows_the_cpu(monkeypatch):
    from benchmarks import _study

    base = dict(precision="bf16-mixed", sampler_dtype="bfloat16", copy_rounding="dither", steps=3)
    args = argparse.Namespace(quick=False, model="smollm2", steps=None, prompts_per_step=None, eval_size=None,
                              eval_every=None, lr=None, device="cpu", precision="auto")
    monkeypatch.setattr(_study, "cpu_bf16_speedup", lambda: 0.03)
    slow = _study.apply_common(args, base, {})
    assert slow["precision"] == "fp32" and slow["sampler_dtype"] is None
    monkeypatch.setattr(_study, "cpu_bf16_speedup", lambda: 3.0)
    fast = _study.apply_common(args, base, {})
    assert fast["precision"] == "bf16-mixed" and fast["sampler_dtype"] == "bfloat16"
    forced = _study.apply_common(argparse.Namespace(**{**vars(args), "precision": "fp32"}), base, {})
    assert forced["precision"] == "fp32" and forced["sampler_dtype"] is None
