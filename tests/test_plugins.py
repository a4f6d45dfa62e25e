"""Plug-ins on the command line: ``grpo-lessons train --reward MODULE:FUNCTION[=WEIGHT]`` (several, weighted, each a
``reward_<FUNCTION>`` column of metrics.csv) and ``--plugin MODULE`` (a variant registered by the user's own module,
trained by the CLI).  The end-to-end runs use the tiny offline Qwen2; the numbers in metrics.csv are checked against
what the reward functions returned and the plug-in's objective was called.  Every bad name is one clear line, exit 2,
before any file is written."""

from __future__ import annotations

import json
import math
import re
import sys
import textwrap

import pytest

from grpo_lessons.core.objectives import OBJECTIVES
from grpo_lessons.core.variants import VARIANTS
from grpo_lessons.training.cli import build_parser, config_from_args, main
from grpo_lessons.training.plugins import load_reward, parse_reward_spec
from grpo_lessons.training.trainer import TrainConfig, load_history

SMOKE = ["--model", "tiny-qwen2", "--steps", "2", "--group-size", "4", "--prompts-per-step", "2",
         "--max-new-tokens", "8", "--eval-size", "3", "--no-progress"]
N = 8  # completions per training step: 2 prompts x G = 4 (evaluation scores 3 at a time)

REWARDS = """
    CALLS = []  # (function, what it returned), in call order

    def _text(c):
        return c[-1]["content"] if isinstance(c, list) else c

    def char_sum(completions, **kwargs):
        out = [(sum(map(ord, _text(c))) % 7) / 6 for c in completions]
        CALLS.append(("char_sum", out))
        return out

    def brevity(completions, completion_ids, **kwargs):
        out = [1.0 - len(ids) / 16 for ids in completion_ids]
        CALLS.append(("brevity", out))
        return out

    NOT_A_FUNCTION = 3

    def positional_only(completions):
        return [0.0] * len(completions)
"""

VARIANT = """
    import torch

    from grpo_lessons.core.objectives import ObjectiveOut, register_objective
    from grpo_lessons.core.variants import Variant, register

    CALLS = []

    def tanh_gate(ratio, adv, *, tau=2.0):
        '''-A tanh(tau (r - 1)) / tau: REINFORCE's gradient on policy, bounded off policy.'''
        CALLS.append(float(adv.abs().sum()))
        return ObjectiveOut(-adv * torch.tanh(tau * (ratio - 1.0)) / tau, None, None)

    register_objective("{name}", tanh_gate, params=("tau",), trl=None, trl_fields={{"tau": None}})
    register(Variant(name="{name}", title="tanh gate", advantage_scale="group", ratio_level="token",
                     objective="{name}", aggregation="token_mean", citation="a plug-in of the test suite",
                     loss_defaults={{"tau": 2.0}}, train_defaults={{"beta": 0.0}}, notebook="05_grpo_end_to_end.ipynb"))
"""


@pytest.fixture
def user_modules(tmp_path, monkeypatch):
    """Write the user's modules into a folder on sys.path; remove them and what they registered afterwards."""
    written: list[str] = []

    def write(name: str, source: str) -> str:
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
        written.append(name)
        return name

    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    before_v, before_o = set(VARIANTS), set(OBJECTIVES)
    yield write
    for name in written:
        sys.modules.pop(name, None)
    for name in set(VARIANTS) - before_v:
        VARIANTS.unregister(name)
    for name in set(OBJECTIVES) - before_o:
        OBJECTIVES.unregister(name)


def test_train_with_own_rewards_logs_each_by_name_and_their_weighted_sum(user_modules, tmp_path, capsys):
    mod = user_modules("gl_test_rewards", REWARDS)
    out = tmp_path / "run"
    code = main(["train", *SMOKE, "--reward", f"{mod}:char_sum=0.5", "--reward", f"{mod}:brevity", "--out", str(out)])
    printed = capsys.readouterr()
    assert code == 0, printed.err[-2000:]
    assert "rewards: char_sum x 0.5, brevity x 1 (metrics.csv: reward_char_sum, reward_brevity)" in printed.out

    calls = sys.modules[mod].CALLS
    train = [values for _, values in calls if len(values) == N]  # the training steps' scoring, not the evaluation
    steps = [{"char_sum": train[2 * k], "brevity": train[2 * k + 1]} for k in range(len(train) // 2)]
    assert [name for name, v in calls if len(v) == N] == ["char_sum", "brevity"] * 2
    history = [r for r in load_history(out / "metrics.csv") if r["step"] >= 1]
    assert len(history) == len(steps) == 2
    for row, got in zip(history, steps):
        mean = {k: sum(v) / len(v) for k, v in got.items()}
        assert row["reward_char_sum"] == pytest.approx(mean["char_sum"], abs=1e-6)
        assert row["reward_brevity"] == pytest.approx(mean["brevity"], abs=1e-6)
        total = [0.5 * a + 1.0 * b for a, b in zip(got["char_sum"], got["brevity"])]
        assert row["reward_mean"] == pytest.approx(sum(total) / N, abs=1e-6)
    assert len({round(x, 6) for s in steps for x in s["char_sum"]}) > 1  # rewards that vary: a real signal
    conf = json.loads((out / "config.json").read_text())
    assert conf["rewards"] == [f"{mod}:char_sum=0.5", f"{mod}:brevity"] and conf["reward_weights"] is None
    # the step-0 evaluation scores 3 held-out completions with the same weighted rewards; its accuracy is the task's
    start = load_history(out / "metrics.csv")[0]
    ev = [values for _, values in calls if len(values) == 3][:2]
    assert start["eval_reward_mean"] == pytest.approx(sum(0.5 * a + b for a, b in zip(*ev)) / 3, abs=1e-6)
    assert start["accuracy"] is not None


def test_train_a_variant_registered_by_the_users_module(user_modules, tmp_path, capsys):
    rewards = user_modules("gl_test_rewards2", REWARDS)
    plugin = user_modules("gl_test_variant", VARIANT.format(name="gl_tanh_gate"))
    out = tmp_path / "run"
    code = main(["train", *SMOKE, "--plugin", plugin, "--variant", "gl_tanh_gate", "--reward", f"{rewards}:char_sum",
                 "--lr", "1e-3", "--out", str(out)])
    printed = capsys.readouterr()
    assert code == 0, printed.err[-2000:]
    assert f"plug-in {plugin}: registered variant 'gl_tanh_gate'" in printed.out
    gate_calls = sys.modules[plugin].CALLS
    assert len(gate_calls) >= 2 and sum(gate_calls) > 0  # the plug-in's objective computed the loss, on real advantages
    history = [r for r in load_history(out / "metrics.csv") if r["step"] >= 1]
    assert all(math.isfinite(r["loss"]) for r in history)
    assert any(r["grad_norm"] > 0 for r in history)  # it trained: a nonzero gradient through the plug-in's loss
    conf = json.loads((out / "config.json").read_text())
    assert conf["variant"] == "gl_tanh_gate" and conf["plugins"] == [plugin]
    # the variant is listed by `grpo-lessons variants --plugin` and named in `train --help`
    assert main(["variants", "--plugin", plugin]) == 0
    assert "gl_tanh_gate" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["train", "--plugin", plugin, "--help"])
    assert "gl_tanh_gate" in capsys.readouterr().out


def test_reward_specs_are_parsed_strictly():
    assert parse_reward_spec("pkg.mod:fn") == parse_reward_spec(" pkg.mod:fn ")
    s = parse_reward_spec("pkg.mod:Obj.method=-0.25")
    assert (s.module, s.function, s.weight, s.target) == ("pkg.mod", "Obj.method", -0.25, "pkg.mod:Obj.method")
    assert parse_reward_spec("m:f").weight is None
    bad = {
        "my_rewards": "names no function",
        "my_rewards:": "names no function",
        ":f": "names no function",
        "my rewards:f": "not a dotted Python name",
        "../evil:f": "not a dotted Python name",
        ".rel:f": "not a dotted Python name",
        "m:f()": "not a dotted Python name",
        "m:f;import os": "not a dotted Python name",
        "m:__class__": "special attribute",
        "m:f.__globals__": "special attribute",
        "m:f=abc": "is not a number",
        "m:f=nan": "finite",
        "m:f=inf": "finite",
        "m:f=": "is not a number",
    }
    for spec, message in bad.items():
        with pytest.raises(ValueError, match=message):
            parse_reward_spec(spec)


def test_loading_a_reward_names_what_is_wrong(user_modules):
    mod = user_modules("gl_test_rewards3", REWARDS)
    fn, w = load_reward(f"{mod}:brevity=2")
    assert fn is sys.modules[mod].brevity and w == 2.0
    cases = {
        "gl_no_such_module:f": "no module named 'gl_no_such_module'",
        f"{mod}:missing": r"has no attribute 'missing'; its functions: brevity, char_sum",
        f"{mod}:NOT_A_FUNCTION": "is a int, not a function",
        f"{mod}:positional_only": r"\(completions, \*\*kwargs\)",
    }
    for spec, message in cases.items():
        with pytest.raises(ValueError, match=message):
            load_reward(spec)


@pytest.mark.parametrize("args, message", [
    (["--reward", "gl_no_such_module:f"], "no module named 'gl_no_such_module'"),
    (["--reward", "{mod}:missing"], "has no attribute 'missing'"),
    (["--reward", "{mod}:NOT_A_FUNCTION"], "not a function"),
    (["--reward", "{mod}:char_sum=heavy"], "weight 'heavy' .* is not a number"),
    (["--reward", "{mod}:char_sum=0.5", "--reward-weights", "1"], "reward weights are given twice"),
    (["--reward", "{mod}:char_sum", "--reward-weights", "1", "2"], "2 reward weights for 1 reward functions"),
    (["--plugin", "gl_no_such_plugin"], "plug-in gl_no_such_plugin: no module named 'gl_no_such_plugin'"),
    (["--plugin", "{broken}"], r"importing 'gl_test_broken' failed: ZeroDivisionError"),
    (["--plugin", "os;rm"], "not a dotted Python module name"),
    (["--variant", "gl_unregistered"], "unknown variant 'gl_unregistered'"),
])
def test_bad_plugins_and_rewards_are_one_line_and_exit_2(user_modules, tmp_path, capsys, args, message):
    mod = user_modules("gl_test_rewards4", REWARDS)
    broken = user_modules("gl_test_broken", "x = 1 / 0\n")
    out = tmp_path / "never"
    code = main(["train", *SMOKE, *[a.format(mod=mod, broken=broken) for a in args], "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1
    assert re.search(message, err), err
    assert not out.exists()  # refused before any file is written


def test_config_from_args_and_train_config_carry_rewards_and_plugins():
    args = build_parser().parse_args(["train", "--reward", "a:f=2", "--reward", "b.c:g", "--plugin", "x.y"])
    cfg = config_from_args(args)
    assert cfg.rewards == ("a:f=2", "b.c:g") and cfg.plugins == ("x.y",)
    d = config_from_args(build_parser().parse_args(["train"]))
    assert d.rewards is None and d.plugins == ()
    with pytest.raises(ValueError, match="sequences of names"):
        TrainConfig(plugins="x.y").validate()
