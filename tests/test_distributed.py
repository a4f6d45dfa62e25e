"""Beyond one machine: ``python -m grpo_lessons.integrations.trl_train`` on 2 processes equals 1 process, and the
accelerate configs of ``configs/accelerate/`` are what ``accelerate launch`` accepts.

Parity: ``tests/dist_worker.py`` builds the trainer through the documented entry point and trains one
optimizer step of a tiny Qwen2, once as 1 process with 12 completions per device and once under
``torchrun --nproc_per_node 2`` (gloo, CPU) with 6 per device: the same global batch of 3 groups of 4,
the middle group split across the two processes.  Plain SGD without gradient clipping makes the weight
change the learning rate times the gradient, so equal weights mean equal gradients (Adam's first step,
about ``lr * sign(g)``, would hide a gradient off by a constant factor, e.g. summed instead of averaged
over processes).  Cases: ``grpo`` with beta = 0.04 (reference model, KL term) and ``dapo`` with dynamic
sampling (one group dropped, refilled from a fresh draw of prompts).

Generation is fixed, not sampled: TRL seeds each process's sampler differently
(``set_seed(seed, device_specific=True)``), so sampled completions differ between world sizes.  The
worker replaces ``_generate_single_turn`` with a deterministic function of the prompt and of the
completion's place in its group (right / wrong / alternating answers of varying length); rewards,
advantages, the dynamic-sampling filter and refill, log-probs, the loss, DDP and the optimizer run as in
a real launch.  ``python tests/test_distributed.py`` prints the measured differences.

The parity check catches real mistakes (tried by editing ``trl_bridge.py`` by hand): padding the
gathered prompts on the right instead of the left gives max |Δweight| = 7e-5 for dapo with dynamic
sampling, a per-process token count in DAPO's token mean 0.064, and the single-process refill that
preceded the multi-process one indexes groups of the whole batch into one process's rows (IndexError).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

ROOT = Path(__file__).resolve().parents[1]
WORKER = ROOT / "tests" / "dist_worker.py"
CONFIGS = ROOT / "configs" / "accelerate"
CASES = ("grpo", "dapo_dynamic")
TOL = 1e-6  # fp32: the 2-process gradient is a mean of two partial sums, so it differs only by rounding

needs_gloo = pytest.mark.skipif(
    not (dist.is_available() and dist.is_gloo_available()),
    reason="torch.distributed with the gloo backend is not available in this torch build",
)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(PYTHONPATH=str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""), HF_HUB_OFFLINE="1",
               TOKENIZERS_PARALLELISM="false", OMP_NUM_THREADS="1")
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)  # the 1-process run must not think it is part of a launch
    return env


def _run_both(out: Path) -> dict:
    """Start the 1-process and the 2-process run side by side; both must succeed."""
    one = [sys.executable, str(WORKER), str(out / "one")]
    two = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           str(WORKER), str(out / "two")]
    t0 = time.perf_counter()
    procs = {name: subprocess.Popen(cmd, cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    text=True) for name, cmd in (("one", one), ("two", two))}
    for name, p in procs.items():
        try:
            log, _ = p.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            p.kill()
            log, _ = p.communicate()
        assert p.returncode == 0, f"{name}-process run failed ({shlex.join(p.args)}):\n{log[-4000:]}"
    return {"seconds": time.perf_counter() - t0}


def _load(out: Path, which: str, case: str) -> tuple[dict, dict]:
    weights = torch.load(out / which / case / "weights.pt")
    log = json.loads((out / which / case / "log.json").read_text())
    return weights, log


def _max_abs(a: dict, b: dict) -> float:
    return max((a[k].double() - b[k].double()).abs().max().item() for k in a)


def measure(out: Path) -> dict[str, dict[str, float]]:
    """Per case: max |Δweight| between the two runs, the size of the update, and the logged step."""
    res = {}
    for case in CASES:
        (w1, log1), (w2, log2) = _load(out, "one", case), _load(out, "two", case)
        assert set(w1["after"]) == set(w2["after"])
        res[case] = {
            "world": (log1["world"], log2["world"]),
            "init_diff": _max_abs(w1["before"], w2["before"]),
            "max_abs_dweight": _max_abs(w1["after"], w2["after"]),
            "update": _max_abs(w1["after"], w1["before"]),
            "log1": log1["log"][0], "log2": log2["log"][0],
        }
    return res


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    timing = _run_both(out)
    return {"res": measure(out), **timing}


@needs_gloo
@pytest.mark.parametrize("case", CASES)
def test_two_processes_take_the_same_step_as_one(runs, case):
    r = runs["res"][case]
    assert r["world"] == (1, 2)
    assert r["init_diff"] == 0.0  # both start from the seeded tiny Qwen2
    assert r["update"] > 1e-2, "the step must move the weights, or equality proves nothing"
    assert r["max_abs_dweight"] <= TOL, f"{case}: max |Δweight| {r['max_abs_dweight']:.3g}, update {r['update']:.3g}"
    for key in ("reward", "grad_norm"):  # what both runs logged for the global batch
        assert r["log1"][key] == pytest.approx(r["log2"][key], rel=1e-5, abs=1e-7), key


@needs_gloo
def test_dynamic_sampling_drops_and_refills_the_same_groups_on_both(runs):
    l1, l2 = runs["res"]["dapo_dynamic"]["log1"], runs["res"]["dapo_dynamic"]["log2"]
    for key in ("dynamic_sampling/dropped_groups", "dynamic_sampling/extra_rounds", "dynamic_sampling/unfilled_groups"):
        assert l1[key] == l2[key], key
    assert l1["dynamic_sampling/dropped_groups"] >= 1 and l1["dynamic_sampling/unfilled_groups"] == 0


# -- accelerate configs: structure only (deepspeed is not a dependency; nothing is launched) -------------

EXPECTED = {"ddp.yaml": "MULTI_GPU", "zero2.yaml": "DEEPSPEED", "zero3.yaml": "DEEPSPEED", "fsdp.yaml": "FSDP"}


def _validated(path: Path):
    """What ``accelerate launch --config_file path --num_processes 2 -m grpo_lessons.integrations.trl_train`` resolves."""
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser

    argv = ["--config_file", str(path), "--num_processes", "2", "-m", "grpo_lessons.integrations.trl_train", "--variant", "dapo"]
    args, defaults, _ = _validate_launch_command(launch_command_parser().parse_args(argv))
    return args, defaults


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_accelerate_config_has_only_keys_accelerate_knows(name):
    from accelerate.commands.config.config_args import load_config_from_file
    from accelerate.commands.launch import launch_command_parser

    cfg = load_config_from_file(str(CONFIGS / name))  # raises ValueError on an unknown top-level key
    assert cfg.distributed_type.value == EXPECTED[name]
    assert cfg.compute_environment.value == "LOCAL_MACHINE" and cfg.num_machines == 1
    launch_dests = {a.dest for a in launch_command_parser()._actions}
    fsdp = {(k if k.startswith("fsdp") else "fsdp_" + k): v for k, v in cfg.fsdp_config.items()}  # as launch reads them
    nested = {**cfg.deepspeed_config, **fsdp}
    unknown = sorted(set(nested) - launch_dests)
    assert not unknown, f"{name}: accelerate launch has no option for {unknown}"


def test_zero_and_fsdp_configs_become_the_launch_environment():
    from accelerate.utils.launch import prepare_deepspeed_cmd_env, prepare_multi_gpu_env

    for name, stage in (("zero2.yaml", "2"), ("zero3.yaml", "3")):
        args, defaults = _validated(CONFIGS / name)
        assert args.use_deepspeed and args.num_processes == 2 and args.mixed_precision == "bf16"
        args.deepspeed_fields_from_accelerate_config = ",".join(defaults.deepspeed_config)  # as launch_command does
        _, env = prepare_deepspeed_cmd_env(args)
        assert env["ACCELERATE_DEEPSPEED_ZERO_STAGE"] == stage
        assert env["ACCELERATE_DEEPSPEED_ZERO3_INIT"] == ("true" if stage == "3" else "false")
    args, _ = _validated(CONFIGS / "fsdp.yaml")
    env = prepare_multi_gpu_env(args)
    assert env["ACCELERATE_USE_FSDP"] == "true" and env["FSDP_VERSION"] == "2"
    assert env["FSDP_AUTO_WRAP_POLICY"] == "TRANSFORMER_BASED_WRAP" and env["FSDP_STATE_DICT_TYPE"] == "FULL_STATE_DICT"
    args, _ = _validated(CONFIGS / "ddp.yaml")
    assert args.multi_gpu and not args.use_deepspeed and not args.use_fsdp
    assert args.training_script == "grpo_lessons.integrations.trl_train" and args.module


# -- the documented commands parse --------------------------------------------------------------------


def _readme_commands() -> list[list[str]]:
    section = (ROOT / "docs" / "guides" / "scale-out.md").read_text()  # the course site's scale-out guide
    cmds, buf, in_code = [], "", False
    for line in section.splitlines():
        if line.startswith("```"):
            in_code = not in_code
            continue
        if not in_code:
            continue
        line = line.split(" #", 1)[0].rstrip() if not line.lstrip().startswith("#") else ""
        buf += line[:-1] + " " if line.endswith("\\") else line
        if not line.endswith("\\"):
            if "grpo_lessons.integrations.trl_train" in buf:
                cmds.append(shlex.split(buf))
            buf = ""
    return cmds


def test_readme_commands_parse_and_name_existing_configs():
    from grpo_lessons.integrations.trl_train import build_parser

    cmds = _readme_commands()
    assert len(cmds) >= 4
    launchers = set()
    for cmd in cmds:
        launchers.add(next(w for w in cmd if w in ("python", "torchrun", "accelerate")))
        if "--config_file" in cmd:
            assert (ROOT / cmd[cmd.index("--config_file") + 1]).is_file(), cmd
        build_parser().parse_args(cmd[cmd.index("grpo_lessons.integrations.trl_train") + 1:])  # exits on a bad flag
    assert launchers == {"python", "torchrun", "accelerate"}


# -- the entry point's own choices ------------------------------------------------------------------


def test_entry_point_maps_vllm_server_and_sets_onto_grpo_config():
    from grpo_lessons.integrations.trl_bridge import config_fields, grpo_config
    from grpo_lessons.integrations.trl_train import build_parser, grpo_fields, parse_sets

    a = build_parser().parse_args(["--variant", "dapo", "--model", "Qwen/Qwen2.5-0.5B-Instruct", "--vllm-server",
                                   "10.0.0.5:8000", "--set", "beta=0.04", "--set", "report_to=none"])
    cfg = grpo_config(a.variant, **grpo_fields(a, [1.0, 0.1], 256))
    server = (cfg.use_vllm, cfg.vllm_mode, cfg.vllm_server_host, cfg.vllm_server_port)
    assert server == (True, "server", "10.0.0.5", 8000)
    # the server-mode fields the README names exist in TRL's GRPOConfig
    assert {"vllm_server_base_url", "vllm_server_timeout", "vllm_group_port", "vllm_gpu_memory_utilization",
            "vllm_tensor_parallel_size", "vllm_importance_sampling_mode"} <= config_fields()
    assert cfg.beta == 0.04 and cfg.loss_type == "dapo" and cfg.epsilon_high == 0.28
    assert cfg.max_completion_length == 256 and cfg.reward_weights == [1.0, 0.1] and cfg.learning_rate == 1e-6
    assert parse_sets(["x=1", "y=[1, 2]", "z=cpu"]) == {"x": 1, "y": [1, 2], "z": "cpu"}
    with pytest.raises(ValueError, match="FIELD=VALUE"):
        parse_sets(["beta"])
    for bad in (["--vllm-server", "8000"], ["--vllm-server", "h:80", "--vllm-colocate"],
                ["--variant", "2-grpo", "--num-generations", "4"]):
        with pytest.raises(ValueError):
            grpo_fields(build_parser().parse_args(bad), [1.0], 12)
    two = grpo_config("2-grpo", **grpo_fields(build_parser().parse_args(["--variant", "2-grpo"]), [1.0], 12))
    assert two.num_generations == 2


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        t = _run_both(Path(d))
        for case, r in measure(Path(d)).items():
            print(f"{case:14s} max|Δweight| 1 vs 2 processes = {r['max_abs_dweight']:.3g}   "
                  f"(largest weight change of the step {r['update']:.3g})")
        print(f"both runs, side by side: {t['seconds']:.1f} s")
