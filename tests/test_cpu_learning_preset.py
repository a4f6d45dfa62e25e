"""benchmarks/cpu_learning.py --preset ten-minutes: the committed 10-minute configuration, explicit flags still win."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _load():
    spec = importlib.util.spec_from_file_location("cpu_learning", ROOT / "benchmarks" / "cpu_learning.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_ten_minute_preset_and_overrides():
    mod = _load()
    a = mod.parse_args(["--preset", "ten-minutes"])
    assert (a.minutes, a.precision, a.sampler_dtype, a.threads) == (10.0, "bf16-mixed", "bfloat16", 2)
    assert (a.lr, a.prompts_per_step, a.group_size, a.temperature, a.eval_size) == (3e-5, 16, 8, 0.7, 200)
    assert a.out.endswith("cpu_learning_10min") and a.rollout_correction is None and a.copy_rounding == "dither"
    slow = mod.parse_args(["--preset", "ten-minutes", "--precision", "fp32", "--rollout-correction", "token_truncate",
                           "--copy-rounding", "nearest"])
    assert (slow.precision, slow.sampler_dtype, slow.rollout_correction) == ("fp32", "bfloat16", "token_truncate")
    assert slow.copy_rounding == "nearest"
    b = mod.parse_args(["--preset", "ten-minutes", "--lr", "5e-5", "--minutes", "2"])
    assert (b.lr, b.minutes, b.precision) == (5e-5, 2.0, "bf16-mixed")
    c = mod.parse_args([])
    assert (c.minutes, c.precision, c.sampler_dtype) == (30.0, "fp32", None)  # the committed 30-minute run
