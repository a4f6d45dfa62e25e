"""benchmarks/trainer_vs_trl.py --quick: both trainers run alternately on tiny-qwen2 and the report adds up."""

import importlib.util
import json
from pathlib import Path

import pytest

pytest.importorskip("trl")
ROOT = Path(__file__).resolve().parents[1]


def test_quick_path_times_both_trainers_by_phase(tmp_path):
    spec = importlib.util.spec_from_file_location("trainer_vs_trl", ROOT / "benchmarks" / "trainer_vs_trl.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(["--quick", "--steps", "1", "--threads", "1", "--out", str(tmp_path)]) == 0
    res = json.loads((tmp_path / "result.json").read_text())
    assert set(res["results"]) == {"fp32", "bf16"}
    assert res["matmul_gflops"]["float32"] > 0 and res["matmul_gflops"]["bfloat16"] > 0
    for prec, r in res["results"].items():
        for side in ("ours", "trl"):
            raw = r["raw"][side]
            assert len(raw) == 2 and r[side]["steps_timed"] == 1  # one warm-up, one timed
            assert r[side]["s_per_step"] == pytest.approx(raw[1]["seconds"])
            for row in raw:
                phases = sum(row[p] for p in mod.PHASES)
                assert all(row[p] >= 0 for p in mod.PHASES if p != "backward")
                assert phases <= row["seconds"] * 1.05 + 0.05  # the phases are parts of the step
                assert row["generate"] > 0 and row["forward"] > 0
    base = res["baseline"]  # our fp32 steps with the settings, measured first
    assert base["steps_timed"] == 1 and base["s_per_step"] > 0 and base["generate"] > 0
    assert res["baseline_settings"] == {"attn_implementation": None, "reuse_freed_memory": False, "optimizer": "adamw"}
    md = (tmp_path / "RESULT.md").read_text()
    assert "| fp32 |" in md and "the issue's settings" in md and "x faster" in md
