"""benchmarks/reward_signal.py: its quick path (tiny-qwen2, seconds), the consistency of what it records, and the
strict ``<answer>`` reward on malformed output."""

import json
import sys
from fractions import Fraction
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import reward_signal as bench  # noqa: E402


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    out = tmp_path_factory.mktemp("reward_signal")
    assert bench.main(["--quick", "--out", str(out)]) == 0
    return out, json.loads((out / "results.json").read_text())


def test_quick_files_and_numbers(quick):
    out, res = quick
    for name in ("results.json", "RESULT.md", "reward_signal.png"):
        assert (out / name).is_file()
    assert set(res["runs"]) == set(bench.ARMS)
    seeds = res["config"]["seeds"]
    for arm, runs in res["runs"].items():
        assert sorted(runs) == [f"seed{s}" for s in seeds]  # paired: every arm on the same seeds
        for run in runs.values():
            groups = run["group_rewards"]
            assert len(groups) == res["config"]["prompts"] and all(len(g) == run["G"] for g in groups)
            dead = sum(1 for g in groups if max(g) == min(g))
            assert run["all_equal_groups"] == dead
            assert run["all_equal_share"] == pytest.approx(dead / len(groups))
            flat = [r for g in groups for r in g]
            assert run["mean_reward"] == pytest.approx(sum(flat) / len(flat))
            p = sum(r == 1.0 for r in flat) / len(flat)
            if run["predicted_all_equal"] is not None:
                assert run["predicted_all_equal"] == pytest.approx(p ** run["G"] + (1 - p) ** run["G"])
            # a batch of dead groups has exactly zero gradient; any live group gives a non-zero one
            if dead == len(groups):
                assert run["grad_norm"] == 0.0
            else:
                assert run["grad_norm"] > 0.0
    # the arms vary what they claim: group size (d against c) and the reward (e against c) on the same draw
    assert res["runs"]["d_one_shot_G16"]["seed0"]["G"] == 2 * res["runs"]["c_one_shot"]["seed0"]["G"]
    c, d = res["runs"]["c_one_shot"]["seed0"], res["runs"]["d_one_shot_G16"]["seed0"]
    assert [g[: c["G"]] for g in d["group_rewards"]] == c["group_rewards"]  # c is the first half of d's draw
    summary = res["summary"]["a_question"]["all_equal_share"]
    shares = [r["all_equal_share"] for r in res["runs"]["a_question"].values()]
    assert summary["mean"] == pytest.approx(sum(shares) / len(shares)) and summary["min"] == min(shares)


def test_grad_norm_zero_when_dead_and_positive_when_live():
    from grpo_lessons.training.models import resolve_model
    from grpo_lessons.training.rollout import generate_completions

    model, tok = resolve_model("tiny-qwen2")
    ro = generate_completions(model, tok, ["What is 2 + 3?", "What is 4 - 1?"], 4, max_new_tokens=6,
                              compute_logps=False, generator_seed=0)
    dead = [0.0] * 8
    live = [1.0, 0.0, 0.0, 0.0] + [0.0] * 4  # one live group
    assert bench.step0_grad_norm(model, ro, dead) == (0.0, 0)
    assert bench.step0_grad_norm(model, ro, dead, skip_dead=True) == (0.0, 2)
    g_live, skipped = bench.step0_grad_norm(model, ro, live)
    assert g_live > 0.0 and skipped == 0
    # chunking by groups gives the gradient of the whole batch's loss
    g_one_chunk, _ = bench.step0_grad_norm(model, ro, live, chunk_groups=1)
    assert g_one_chunk == pytest.approx(g_live, rel=1e-4)
    sub = bench.first_of_each_group(ro, 2)
    assert sub.group_size == 2 and sub.texts == [ro.texts[i] for i in (0, 1, 4, 5)]
    assert torch.equal(sub.completion_ids, ro.completion_ids[[0, 1, 4, 5]])


@pytest.mark.parametrize("text, gold, reward", [
    ("<answer>12</answer>", 12, 1.0),
    ("So 5 + 7 = 12. <answer> 12 </answer>", 12, 1.0),
    ([{"role": "assistant", "content": "<answer>12</answer>"}], 12, 1.0),  # TRL's conversational completions
    ("<answer>-3</answer>", "-3", 1.0),
    ("<answer>13</answer>", 12, 0.0),  # wrong
    ("<answer>12", 12, 0.0),  # unclosed
    ("12</answer>", 12, 0.0),  # never opened
    ("</answer>12<answer>", 12, 0.0),  # closed before opened
    ("<answer>12</answer> <answer>12</answer>", 12, 0.0),  # two answers
    ("<answer>3</answer> <answer>12</answer>", 12, 0.0),  # two answers, the last right: still no
    ("<answer><answer>12</answer>", 12, 0.0),  # nested opening
    ("<answer>5 + 7 = 12</answer>", 12, 0.0),  # not one number
    ("<answer>twelve</answer>", 12, 0.0),  # not a number
    ("<answer></answer>", 12, 0.0),  # empty
    ("<answer>12 apples</answer>", 12, 0.0),
    ("<ANSWER>12</ANSWER>", 12, 0.0),  # the tags are exact
    ("<answer>" + "9" * 5000 + "</answer>", 12, 0.0),  # huge number
    ("<answer>" + "1" + "0" * 60 + "</answer>", 10 ** 60, 0.0),  # too long to be read, even when "right"
    ("<answer>1e999999</answer>", 12, 0.0),
    ("<answer>9**9**9</answer>", 12, 0.0),  # never evaluated
    ("<answer>__import__('os')</answer>", 12, 0.0),
    ("<answer>12</answer>" + "x" * 30_000, 12, 0.0),  # over the length bound
    ("12", 12, 0.0),  # right number, no tag
    (None, 12, 0.0),
    ("<answer>12</answer>", None, 0.0),  # no gold
])
def test_tag_reward_malformed(text, gold, reward):
    assert bench.tag_reward([text], [gold]) == [reward]


def test_tag_answer_never_a_wrong_number():
    assert bench.tag_answer("<answer>7/2</answer>") == Fraction(7, 2)
    assert bench.tag_answer("<answer>1,234</answer>") == 1234
    for bad in ("<answer>3.14.15</answer>", "<answer>1,00</answer>", "<answer>--5</answer>", "<answer>1/0</answer>",
                "<answer>0x1F</answer>", "<answer>12</answer><answer>", "<answer>12</answer></answer>"):
        assert bench.tag_answer(bad) is None, bad


def test_partial_credit_reward():
    texts = ["<answer>12</answer>", "<answer>13</answer>", "12", "<answer>x</answer>"]
    assert bench.partial_credit_reward(texts, [12] * 4) == pytest.approx([1.0, 0.2, 0.0, 0.0])


def test_prompts():
    q = "What is 2 + 3?"
    assert bench.messages(q, "question")[-1] == {"role": "user", "content": q}
    assert bench.messages(q, "instruction")[-1]["content"] == q + bench.INSTRUCTION
    shot = bench.messages(q, "one_shot")
    assert [m["role"] for m in shot] == ["system", "user", "assistant", "user"]
    assert shot[2]["content"] == "<answer>7</answer>" and bench.tag_reward([shot[2]["content"]], [7]) == [1.0]
    with pytest.raises(ValueError):
        bench.messages(q, "nope")
