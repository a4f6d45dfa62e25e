"""Generated tasks: row format, held-out splits, solvable Countdown, byte-identical regeneration, GSM8K offline."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grpo_lessons.training.data import (
    ARITHMETIC_LEVELS,
    SPLITS,
    TASKS,
    ArithmeticSpec,
    CountdownSpec,
    arithmetic_rows,
    countdown_rows,
    get_task,
    load_gsm8k,
    load_task,
    main,
    read_jsonl,
    write_jsonl,
)
from grpo_lessons.core.rewards import arithmetic_reward, countdown_reward

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data"
FILES = [f"{t}_{s}.jsonl" for t in sorted(TASKS) for s in SPLITS]


def _check_prompt(row):
    msgs = row["prompt"]
    assert [m["role"] for m in msgs] == ["system", "user"]
    assert all(isinstance(m["content"], str) and m["content"] for m in msgs)


@pytest.mark.parametrize("name", sorted(TASKS))
def test_rows_format_and_held_out_split(name):
    task = get_task(name)
    train, test = task.rows("train"), task.rows("test")
    assert len(train) == task.sizes["train"] and len(test) == task.sizes["test"]
    for row in train[:50] + test[:50]:
        _check_prompt(row)
        for col in task.columns:
            assert col in row
    ids = [r["id"] for r in train + test]
    assert len(set(ids)) == len(ids)
    assert not {task._key(r) for r in train} & {task._key(r) for r in test}  # held out: no shared question
    assert {r["question"] for r in train}.__len__() == len(train)           # no duplicates within a split


def test_arithmetic_answers_are_right():
    for spec in ARITHMETIC_LEVELS.values():
        rows = arithmetic_rows(150, 3, spec)  # "1digit" has only 155 distinct questions
        assert arithmetic_reward([str(r["answer"]) for r in rows], answer=[r["answer"] for r in rows]) == [1.0] * 150
        for r in rows:
            a, op, b = r["question"].removeprefix("What is ").removesuffix("?").split()
            want = {"+": int(a) + int(b), "-": int(a) - int(b), "*": int(a) * int(b)}[op]
            assert r["answer"] == want
            if op == "-" and not spec.allow_negative:
                assert want >= 0


def test_countdown_rows_are_solvable_by_their_stored_solution():
    rows = get_task("countdown").rows("train") + countdown_rows(100, 5, CountdownSpec(n_numbers=4, max_target=200))
    sols = [f"<answer>{r['solution']}</answer>" for r in rows]
    nums, tgts = [r["numbers"] for r in rows], [r["target"] for r in rows]
    assert countdown_reward(sols, numbers=nums, target=tgts, use_all_numbers=True) == [1.0] * len(rows)
    for r in rows[:100]:
        assert r["target"] not in r["numbers"] and r["numbers"] == sorted(r["numbers"])
        assert str(r["numbers"]) in r["question"] and str(r["target"]) in r["question"]


def test_generation_is_deterministic_and_seeded():
    spec = ArithmeticSpec(ops="+-*")
    assert arithmetic_rows(50, 7, spec) == arithmetic_rows(50, 7, spec)
    assert arithmetic_rows(50, 7, spec) != arithmetic_rows(50, 8, spec)
    assert countdown_rows(20, 1) == countdown_rows(20, 1)


def test_committed_files_match_the_generator_byte_for_byte(tmp_path):
    out = tmp_path / "regen"
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    r = subprocess.run([sys.executable, "-m", "grpo_lessons.training.data", "--out", str(out)], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    for name in FILES:
        assert (DATA / name).is_file(), f"data/{name} is missing: run `python -m grpo_lessons.training.data --out data`"
        assert (out / name).read_bytes() == (DATA / name).read_bytes(), f"data/{name} differs from the generator"
    assert sorted(p.name for p in out.iterdir()) == sorted(FILES)
    assert main(["--out", str(DATA), "--check"]) == 0


def test_check_mode_reports_stale_files(tmp_path, capsys):
    assert main(["--out", str(tmp_path), "--check", "--task", "arithmetic"]) == 1
    assert "differs or missing" in capsys.readouterr().err


def test_rows_from_files_equal_rows_in_memory():
    for name in TASKS:
        for split in SPLITS:
            assert load_task(name, split, data_dir=DATA) == load_task(name, split)


def test_task_prompt_and_rewards():
    a, c = get_task("arithmetic"), get_task("countdown")
    msgs = a.prompt("What is 2 + 3?")
    assert msgs[0]["role"] == "system" and msgs[1]["content"].startswith("What is 2 + 3?")
    assert a.rows("train")[0]["prompt"] == a.prompt(a.rows("train")[0]["question"])
    row = c.rows("train")[0]
    assert c.prompt(numbers=row["numbers"], target=row["target"]) == row["prompt"]
    assert len(a.reward_funcs) == len(a.reward_weights) and len(c.reward_funcs) == len(c.reward_weights)
    harder = a.with_spec(ops="+-*", max_operand=50)
    assert harder.spec.ops == "+-*" and harder.spec.max_operand == 50 and harder.name == "arithmetic"
    assert TASKS["arithmetic"].spec == a.spec  # with_spec copies; the registry is untouched


def test_bad_input_gives_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="unknown task 'nope'"):
        get_task("nope")
    with pytest.raises(ValueError, match="unknown split 'dev'"):
        get_task("arithmetic").rows("dev")
    with pytest.raises(FileNotFoundError, match="python -m grpo_lessons.training.data"):
        get_task("arithmetic").rows("train", data_dir=tmp_path)
    with pytest.raises(ValueError, match="ops must be"):
        ArithmeticSpec(ops="^")
    with pytest.raises(ValueError, match="unknown prompt style"):
        ArithmeticSpec(prompt_style="shouty")
    with pytest.raises(ValueError, match="could not draw 200 distinct"):
        arithmetic_rows(200, 0, ArithmeticSpec(ops="+", min_operand=0, max_operand=3))
    with pytest.raises(ValueError, match="n_numbers"):
        CountdownSpec(n_numbers=1)
    with pytest.raises(ValueError, match="no Countdown instance"):
        countdown_rows(1, 0, CountdownSpec(n_numbers=2, max_number=2, min_target=90, max_target=95))
    with pytest.raises(ValueError, match="countdown prompts need"):
        get_task("countdown").prompt(numbers=[1, 2])
    assert arithmetic_rows(0, 0) == []
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": 1}\n{not json\n')
    with pytest.raises(ValueError, match="bad.jsonl:2: not valid JSON"):
        read_jsonl(bad)
    (tmp_path / "arithmetic_train.jsonl").write_text("")
    with pytest.raises(ValueError, match="arithmetic_train.jsonl has no rows"):
        load_task("arithmetic", "train", data_dir=tmp_path)
    (tmp_path / "arithmetic_test.jsonl").write_text('{"prompt": [{"role": "user", "content": "hi"}]}\n')
    with pytest.raises(ValueError, match=r"row 1 lacks column\(s\) \['answer'\]"):
        load_task("arithmetic", "test", data_dir=tmp_path)
    p = write_jsonl([{"a": "ü"}], tmp_path / "x" / "ok.jsonl")
    assert p.read_bytes() == b'{"a": "\\u00fc"}\n' and json.loads(p.read_text())["a"] == "ü"


def test_gsm8k_offline_fails_fast_with_a_clear_message(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    t0 = time.perf_counter()
    with pytest.raises(RuntimeError, match="GSM8K .*(HF_HUB_OFFLINE|cannot be reached)"):
        load_gsm8k("test")
    assert time.perf_counter() - t0 < 60
    with pytest.raises(ValueError, match="splits 'train' and 'test'"):
        load_gsm8k("validation")


def test_gsm8k_unreachable_hub_fails_fast(monkeypatch):
    import grpo_lessons.training.data as D

    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setattr(D, "_hub_reachable", lambda timeout=3.0: False)
    with pytest.raises(RuntimeError, match="cannot be reached"):
        load_gsm8k("train")
