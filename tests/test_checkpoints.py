"""When a run writes ``<out>/checkpoint.pt`` (``TrainConfig.checkpoint``): never, only when unfinished (the default),
at the end, every N steps; the command line's flag; and the study runner, which keeps none and still resumes.

A full SmolLM2-135M checkpoint is ~1.6 GB (fp32 weights + AdamW's two moments); here a tiny offline Qwen2 stands in.
"""

import json

import pytest
import torch

from grpo_lessons.core.rewards import completion_text
from grpo_lessons.training import records
from grpo_lessons.training.cli import build_parser, config_from_args
from grpo_lessons.training.trainer import CHECKPOINT_NAME, TrainConfig, train

ROWS = [{"prompt": [{"role": "user", "content": f"What is {a} + {b}?"}], "answer": a + b}
        for a in range(3) for b in range(4)]


def digits(completions, **kw):
    """A reward with variance on a random model: the share of digit characters."""
    return [sum(ch.isdigit() for ch in t) / max(1, len(t)) for t in map(completion_text, completions)]


def cfg(tmp_path, name="run", **kw):
    base = dict(model="tiny-qwen2", steps=4, prompts_per_step=2, group_size=4, max_new_tokens=4, lr=1e-3,
                eval_size=0, out=str(tmp_path / name), seed=0, beta=0.0, micro_batch_size=8)
    return TrainConfig(**{**base, **kw})


def run(c, **kw):
    return train(c, progress=False, train_rows=ROWS, eval_rows=ROWS[:2], reward_funcs=[digits], **kw)


@pytest.fixture
def saves(monkeypatch):
    """The step of every checkpoint written, in order."""
    steps = []
    original = records.save_checkpoint

    def spy(trainer, path):
        steps.append(trainer.step_count)
        return original(trainer, path)

    monkeypatch.setattr(records, "save_checkpoint", spy)
    return steps


def files(out):
    return sorted(p.name for p in out.iterdir() if p.suffix == ".pt" or p.name.endswith(".tmp"))


def test_the_default_keeps_no_checkpoint_for_a_finished_run(tmp_path, saves):
    assert TrainConfig().checkpoint == "unfinished"
    res = run(cfg(tmp_path))
    assert saves == [] and files(tmp_path / "run") == [] and res.checkpoint_path is None
    assert json.loads((tmp_path / "run" / "config.json").read_text())["checkpoint"] == "unfinished"


def test_never_writes_nothing_even_when_the_run_stops_early(tmp_path, saves):
    res = run(cfg(tmp_path, checkpoint="never", max_minutes=1e-9))  # stops after one step
    assert [r["step"] for r in res.history] == [1]
    assert saves == [] and files(tmp_path / "run") == [] and res.checkpoint_path is None
    with pytest.raises(ValueError, match="checkpoint_every"):
        cfg(tmp_path, checkpoint="never", checkpoint_every=2).validate()
    with pytest.raises(ValueError, match="checkpoint must be one of"):
        cfg(tmp_path, checkpoint="sometimes").validate()


def test_end_writes_one_file_with_the_last_step(tmp_path, saves):
    res = run(cfg(tmp_path, checkpoint="end"))
    assert saves == [4] and files(tmp_path / "run") == [CHECKPOINT_NAME]
    assert res.checkpoint_path == tmp_path / "run" / CHECKPOINT_NAME
    assert torch.load(res.checkpoint_path, map_location="cpu", weights_only=False)["step"] == 4
    # ... and a finished run continues from it with more steps
    longer = run(cfg(tmp_path, steps=6, checkpoint="end", resume=True))
    assert [r["step"] for r in longer.history] == [1, 2, 3, 4, 5, 6] and saves == [4, 6]


def test_every_k_steps_saves_at_the_multiples_of_k(tmp_path, saves):
    on_disk = []

    def after_step(history):  # the step stored in the file after each step
        path = tmp_path / "run" / CHECKPOINT_NAME
        on_disk.append(torch.load(path, weights_only=False)["step"] if path.is_file() else None)

    run(cfg(tmp_path, steps=5, checkpoint="end", checkpoint_every=2), callback=after_step)
    assert saves == [2, 4, 5]  # every 2 steps, then the end
    assert on_disk == [None, 2, 2, 4, 4] and files(tmp_path / "run") == [CHECKPOINT_NAME]


def test_unfinished_keeps_a_checkpoint_only_while_the_run_is_unfinished(tmp_path, saves):
    # periodic checkpoints guard against a kill; once the run reaches its steps they are removed
    run(cfg(tmp_path, "periodic", checkpoint_every=2))
    assert saves == [2] and files(tmp_path / "periodic") == []
    saves.clear()
    # a run stopped by its time budget keeps one, so that a resume can finish it; the finished run then removes it
    first = run(cfg(tmp_path, "budget", max_minutes=1e-9))
    assert saves == [1] and first.checkpoint_path.is_file()
    rest = run(cfg(tmp_path, "budget", resume=True))
    assert [r["step"] for r in rest.history] == [1, 2, 3, 4] and saves == [1]
    assert rest.checkpoint_path is None and files(tmp_path / "budget") == []


def test_the_command_line_flag():
    default = config_from_args(build_parser().parse_args(["train"]))
    assert default.checkpoint == TrainConfig().checkpoint == "unfinished"
    for policy in ("never", "unfinished", "end"):
        args = build_parser().parse_args(["train", "--checkpoint", policy, "--checkpoint-every", "0"])
        assert config_from_args(args).checkpoint == policy
    assert config_from_args(build_parser().parse_args(["train", "--checkpoint-every", "5"])).checkpoint_every == 5
    with pytest.raises(SystemExit):
        build_parser().parse_args(["train", "--checkpoint", "sometimes"])


def test_the_study_runner_keeps_no_checkpoint_and_still_resumes(tmp_path, saves):
    from grpo_lessons.training import study as st

    base = dict(model="tiny-qwen2", steps=2, prompts_per_step=2, group_size=4, max_new_tokens=4, lr=1e-3,
                eval_size=2, eval_every=0, beta=0.0, micro_batch_size=8)
    s = st.Study("ckpt", "t", "q", [st.Arm("grpo", {"variant": "grpo"})], [0], base, min_seeds=1,
                 rewards=lambda seed: st.Rewards([digits]), train_rows=ROWS, eval_rows=ROWS[:2])
    arm = s.arms[0]
    assert st._config(s, arm, 0, tmp_path, None).checkpoint == "never"
    for setting in ({"checkpoint": "end"}, {"checkpoint_every": 2}):  # the runner's to set, not the study's
        with pytest.raises(ValueError, match="set by the runner"):
            st.Study("ckpt", "t", "q", [st.Arm("grpo", setting)], [0], base, min_seeds=1)

    models = st._Models()
    info = st.run_one(s, arm, 0, tmp_path, models)
    rd = st.run_dir(tmp_path, "grpo", 0)
    assert info["complete"] and saves == [] and files(rd) == []
    # resumable without a checkpoint: a finished run is skipped, also one recorded before the policy existed
    run_json = json.loads((rd / st.RUN_JSON).read_text())
    for k in ("checkpoint", "checkpoint_every"):
        run_json["config"].pop(k)
    (rd / st.RUN_JSON).write_text(json.dumps(run_json))
    assert st._run_state(rd, st._config(s, arm, 0, rd, None)) == "complete"
    before = (rd / "metrics.csv").read_bytes()
    st.run_one(s, arm, 0, tmp_path, models)
    assert (rd / "metrics.csv").read_bytes() == before and saves == []
