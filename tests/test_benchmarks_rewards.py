"""The quick paths of the reward / diversity benchmarks (tiny-qwen2, seconds) and the numbers they report.

The comparisons with arms (GOPO against GRPO among them) are checked through the study runner in test_studies.py."""

import json
import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def test_diversity_quick(tmp_path):
    from benchmarks import diversity as bench
    from grpo_lessons.core.diversity import pass_at_k

    assert bench.main(["--quick", "--out", str(tmp_path), "--no-entropy"]) == 0
    samples = json.loads((tmp_path / "samples.json").read_text())
    result = json.loads((tmp_path / "result.json").read_text())
    assert [r["method"] for r in result["table"]] == list(samples["methods"])
    for row in result["table"]:
        m = samples["methods"][row["method"]]
        k = len(m["texts"][0])
        # pass@1 is the mean reward of the samples; pass@k from the same counts
        assert row["pass@1"] == pytest.approx(sum(map(sum, m["rewards"])) / (k * len(m["rewards"])))
        assert row["pass@8"] == pytest.approx(sum(pass_at_k(k, int(sum(r)), min(8, k)) for r in m["rewards"])
                                              / len(m["rewards"]))
        assert 0.0 <= row["distinct_2"] <= 1.0 and row["answer_entropy"] <= math.log(k) + 1e-9
    curve = result["best_of_n"]["base"]
    assert curve["pass_at_k"][0] == pytest.approx(result["table"][0]["pass@1"])
    assert all(a <= b + 1e-12 for a, b in zip(curve["pass_at_k"], curve["pass_at_k"][1:]))  # pass@k grows with k
    for name in ("table.csv", "RESULT.md", "diversity.png", "best_of_n.png"):
        assert (tmp_path / name).is_file()
    # re-scoring the saved samples gives the same table
    assert bench.main(["--quick", "--out", str(tmp_path), "--metrics-only"]) == 0
    again = json.loads((tmp_path / "result.json").read_text())
    assert again["table"] == result["table"]


def test_verbalized_quick(tmp_path):
    from benchmarks import verbalized as bench
    from grpo_lessons.core.verbalized import parse_verbalized

    assert bench.main(["--quick", "--out", str(tmp_path)]) == 0
    gens = json.loads((tmp_path / "generations.json").read_text())
    res = json.loads((tmp_path / "result.json").read_text())
    for style in gens["config"]["styles"]:
        flat = [t for g in gens[f"verbalized_{style}"] for t in g]
        s = res["summary"][f"verbalized_{style}"]
        assert s["generations"] == len(flat)
        assert s["parse_rate"] == pytest.approx(sum(1 for t in flat if parse_verbalized(t)) / len(flat))
        assert sum(s["fallbacks"].values()) == len(flat)
    assert res["summary"]["direct"]["generations"] == gens["config"]["requests"] * gens["config"]["k"]
