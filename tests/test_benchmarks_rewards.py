"""The quick paths of the reward / diversity benchmarks (tiny-qwen2, seconds) and the numbers they report."""

import json
import math
import sys
from pathlib import Path

import pytest
import torch

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


def test_gopo_rank_trainer_uses_rank_advantages(tmp_path):
    from benchmarks.gopo_vs_grpo import RankTrainer, make_reward_model, true_score
    from grpo_lessons.core.advantages import rank_advantages
    from grpo_lessons.training.data import get_task
    from grpo_lessons.training.models import resolve_model
    from grpo_lessons.training.trainer import TrainConfig

    assert true_score(["12", "10", "x", "<answer>30</answer>"], answer=[12, 12, 12, 12]) == [1.0, 0.4, 0.0, 0.0]
    rm = make_reward_model(0.0, 3.0, seed=0)
    assert rm(["12", "x"], answer=[12, 12]) == pytest.approx([math.exp(3.0), 1.0])  # no noise: exp(3 s)
    model, tok = resolve_model("tiny-qwen2")
    rows = get_task("arithmetic").rows("train")[:8]
    cfg = TrainConfig(model="tiny-qwen2", steps=1, prompts_per_step=2, group_size=4, max_new_tokens=6, eval_size=0,
                      beta=0.0, out=str(tmp_path / "run"))
    noisy = make_reward_model(2.0, 3.0, seed=1)
    trainer = RankTrainer(cfg, model=model, tokenizer=tok, train_rows=rows, reward_funcs=[noisy])
    batch = trainer.sample_batch()
    assert torch.allclose(batch.advantages.double(), rank_advantages(batch.rewards, 4).double())
    assert float(batch.advantages.abs().max()) <= 2.0 + 1e-9


def test_gopo_quick(tmp_path):
    from benchmarks import gopo_vs_grpo as bench

    assert bench.main(["--quick", "--out", str(tmp_path)]) == 0
    res = json.loads((tmp_path / "result.json").read_text())
    assert set(res["results"]) == {"grpo", "gopo"}
    steps = (tmp_path / "steps.csv").read_text().splitlines()
    assert len(steps) == 1 + 2 * res["config"]["steps"]
    assert (tmp_path / "curves.png").is_file() and (tmp_path / "RESULT.md").is_file()


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
