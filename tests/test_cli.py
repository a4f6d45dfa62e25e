"""``grpo-lessons``: an offline smoke run on the tiny model, and clear errors for bad settings."""

import json
import os
import subprocess
import sys
from pathlib import Path

from grpo_lessons.training.cli import build_parser, config_from_args, main
from grpo_lessons.training.trainer import load_history

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ["--model", "tiny-qwen2", "--steps", "2", "--group-size", "4", "--prompts-per-step", "2",
         "--max-new-tokens", "8", "--eval-size", "4", "--no-progress"]


def test_offline_smoke_run_writes_csv_png_and_summary(tmp_path):
    out = tmp_path / "run"
    env = dict(os.environ, HF_HUB_OFFLINE="1", MPLBACKEND="Agg")
    proc = subprocess.run([sys.executable, "-m", "grpo_lessons.training.cli", "train", *SMOKE, "--out", str(out)],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "held-out accuracy" in proc.stdout
    history = load_history(out / "metrics.csv")
    assert [r["step"] for r in history] == [0, 1, 2]
    assert (out / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == 2 and summary["config"]["model"] == "tiny-qwen2"
    assert not (out / "checkpoint.pt").exists()  # a finished run keeps no checkpoint by default (--checkpoint)


def test_defaults_are_the_cpu_run():
    args = build_parser().parse_args(["train"])
    cfg = config_from_args(args)
    assert cfg.model == "smollm2" and cfg.task == "arithmetic" and cfg.variant == "grpo"
    assert cfg.out == os.path.join("runs", "arithmetic-grpo")
    assert cfg.beta is None and cfg.dynamic_sampling is None  # the variant decides
    args = build_parser().parse_args(["train", "--no-dynamic-sampling", "--reward-weights", "1", "0.5"])
    cfg = config_from_args(args)
    assert cfg.dynamic_sampling is False and cfg.reward_weights == (1.0, 0.5)


def test_bad_settings_give_one_line_and_exit_2(tmp_path, capsys):
    code = main(["train", *SMOKE, "--group-size", "1", "--out", str(tmp_path / "x")])
    err = capsys.readouterr().err
    assert code == 2 and "group_size must be >= 2" in err and "Traceback" not in err
    assert not (tmp_path / "x").exists()
    code = main(["train", *SMOKE, "--variant", "nope", "--out", str(tmp_path / "y")])
    assert code == 2 and "unknown variant" in capsys.readouterr().err


def test_variants_and_tasks_commands(capsys):
    assert main(["variants"]) == 0
    out = capsys.readouterr().out
    assert "dapo" in out and "arXiv 2503.14476" in out
    assert main(["tasks"]) == 0
    assert "arithmetic" in capsys.readouterr().out


def test_two_grpo_gets_g2_from_the_cli_and_refuses_another_g(tmp_path, capsys):
    from grpo_lessons.training.cli import build_parser, config_from_args

    cfg = config_from_args(build_parser().parse_args(["train", "--variant", "2-grpo"]))
    assert cfg.resolved()["group_size"] == 2
    code = main(["train", "--variant", "2-grpo", "-G", "4", "--out", str(tmp_path / "y")])
    assert code == 2 and "defined by group_size=2" in capsys.readouterr().err


def test_default_completion_budget_comes_from_the_task(tmp_path):
    from grpo_lessons.training.trainer import TrainConfig

    assert TrainConfig(task="arithmetic").resolved()["max_new_tokens"] == 12
    assert TrainConfig(task="countdown").resolved()["max_new_tokens"] == 32
    assert TrainConfig(task="countdown", max_new_tokens=7).resolved()["max_new_tokens"] == 7
    cfg = config_from_args(build_parser().parse_args(["train", "--task", "countdown"]))
    assert cfg.max_new_tokens is None and cfg.resolved()["max_new_tokens"] == 32


def test_speed_flags_reach_the_config():
    args = build_parser().parse_args(["train", "--precision", "bf16-mixed", "--sampler-dtype", "bfloat16",
                                      "--optimizer", "adamw", "--max-minutes", "3", "--rollout-correction", "tis"])
    cfg = config_from_args(args)
    assert (cfg.precision, cfg.sampler_dtype, cfg.optimizer, cfg.max_minutes) == ("bf16-mixed", "bfloat16", "adamw", 3.0)
    assert cfg.rollout_correction == "tis" and cfg.rollout_clip_max == 3.0
    d = config_from_args(build_parser().parse_args(["train"]))
    assert (d.precision, d.sampler_dtype, d.prompts_per_step) == ("auto", None, None)
    assert d.resolve().precision == "fp32"  # on a CPU
    assert (d.sampler_fp32_head, d.attn_implementation, d.reuse_freed_memory) == (False, "auto", True)  # the CLI turns it on
    assert d.copy_rounding == "dither"
    assert config_from_args(build_parser().parse_args(["train", "--copy-rounding", "nearest"])).copy_rounding == "nearest"
    e = config_from_args(build_parser().parse_args(["train", "--sampler-dtype", "bfloat16", "--sampler-fp32-head",
                                                    "--attn-implementation", "sdpa", "--no-reuse-freed-memory"]))
    assert (e.sampler_fp32_head, e.attn_implementation, e.reuse_freed_memory) == (True, "sdpa", False)


def test_a_core_install_gets_the_extra_to_install_not_a_traceback():
    """Without transformers (a core install), `grpo-lessons train` names the [train] extra; `lab` still runs."""
    import subprocess
    import sys

    block = ("import sys, importlib.abc\n"
             "class Block(importlib.abc.MetaPathFinder):\n"
             "    def find_spec(self, name, path, target=None):\n"
             "        if name.split('.')[0] in ('transformers', 'accelerate', 'peft'):\n"
             "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
             "sys.meta_path.insert(0, Block())\n"
             "from grpo_lessons.training.cli import main\n"
             "raise SystemExit(main(sys.argv[1:]))\n")
    r = subprocess.run([sys.executable, "-c", block, "train", "--steps", "1"], capture_output=True, text=True)
    assert r.returncode == 2 and "[train]" in r.stderr and "Traceback" not in r.stderr, r.stderr[-800:]
    r = subprocess.run([sys.executable, "-c", block, "lab", "--list"], capture_output=True, text=True)
    assert r.returncode == 0 and "dr_grpo_wrong_length" in r.stdout, r.stderr[-800:]
