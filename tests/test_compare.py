"""`grpo-lessons compare`: a paired, seeded study of variants from the command line, with Holm-corrected verdicts."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from grpo_lessons.core.stats import Interval
from grpo_lessons.training.study import holm_verdicts

ROOT = Path(__file__).resolve().parents[1]


def _entry(mean, sd, p):
    return {"mean": mean, "sd": sd, "p": p, "n": 3, "low": mean - 1, "high": mean + 1}


def test_holm_decides_the_verdicts_of_a_studys_comparisons():
    es = [_entry(5.0, 1.0, 0.01), _entry(3.0, 1.0, 0.04), _entry(-4.0, 1.0, 0.02)]
    holm_verdicts(es)
    assert [e["p_holm"] for e in es] == [pytest.approx(0.03), pytest.approx(0.04), pytest.approx(0.04)]
    assert es[0]["verdict"].startswith("higher") and es[2]["verdict"].startswith("lower")
    assert es[1]["verdict"].startswith("higher")  # 0.04 * 1 after the two smaller ones: still below 0.05
    es = [_entry(5.0, 1.0, 0.03), _entry(3.0, 1.0, 0.04)]
    holm_verdicts(es)
    assert es[0]["verdict"].startswith("no difference shown") and "0.06" in es[0]["verdict"]


def test_identical_differences_get_their_own_verdict_not_a_zero_width_interval():
    es = [_entry(2.0, 0.0, 0.0), _entry(0.0, 0.0, 1.0)]
    holm_verdicts(es)
    assert es[0]["verdict"] == "the same difference on every seed: no spread to test"
    assert es[1]["verdict"] == "no difference on any seed"


def test_compare_runs_a_paired_study_through_the_command_line(tmp_path):
    out = tmp_path / "cmp"
    cmd = [sys.executable, "-m", "grpo_lessons.training.cli", "compare", "--variants", "grpo,dr_grpo", "--model",
           "tiny-qwen2", "--steps", "1", "--seeds", "0,1", "--eval-size", "4", "--prompts-per-step", "2",
           "--group-size", "4", "--threads", "1", "--out", str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin"})
    assert r.returncode == 0, r.stderr[-2000:]
    analysis = json.loads((out / "analysis.json").read_text())
    assert analysis["runs"] == 4 and analysis["baseline"] == "grpo"
    paired = analysis["arms"]["dr_grpo"]["gain"]["paired_vs_baseline"]
    assert "p_holm" in paired and "verdict" in paired
    assert analysis["shared_first_batch"]  # the arms of a seed share their first batch
    for arm in ("grpo", "dr_grpo"):  # every arm got beta = 0: one change per comparison
        conf = json.loads((out / "runs" / arm / "seed0" / "run.json").read_text())["config"]
        assert conf["beta"] == 0.0 and conf["variant"] == arm
    assert "Holm" in (out / "RESULT.md").read_text() or "no difference" in (out / "RESULT.md").read_text()


def test_compare_at_equal_samples_stops_each_arm_at_the_same_completion_budget(tmp_path):
    """--max-completions through the command line: GRPO samples 2 x 4 = 8 completions a step and stops after 2 steps
    (16); DAPO's dynamic sampling refills the untrained model's all-zero groups, so it spends the 16 within its first
    step (one refill of two prompts, capped there) and stops, although --steps allows 6."""
    out = tmp_path / "eq"
    cmd = [sys.executable, "-m", "grpo_lessons.training.cli", "compare", "--variants", "grpo,dapo", "--model",
           "tiny-qwen2", "--steps", "6", "--max-completions", "16", "--seeds", "0,1", "--eval-size", "4",
           "--eval-every", "0", "--prompts-per-step", "2", "--group-size", "4", "--threads", "1", "--out", str(out),
           "--title", "Equal samples", "--question", "Does DAPO spend the same 16 completions in fewer steps?"]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin"})
    assert r.returncode == 0, r.stderr[-2000:]
    rows = {(x["arm"], int(x["seed"])): x for x in csv.DictReader(open(out / "summary.csv"))}
    for seed in (0, 1):
        g, d = rows[("grpo", seed)], rows[("dapo", seed)]
        assert (int(g["steps"]), int(g["completions_sampled_total"])) == (2, 16)
        assert (int(d["steps"]), int(d["completions_sampled_total"])) == (1, 16)
        assert g["accuracy_after"] != "" and d["accuracy_after"] != ""  # each evaluated where its budget ended it
    result = (out / "RESULT.md").read_text()
    assert result.startswith("# Equal samples\n\nDoes DAPO spend the same 16 completions in fewer steps?")
    assert "at most 16 sampled completions" in result and "### completions_sampled_total" in result
    an = json.loads((out / "analysis.json").read_text())
    paired = an["arms"]["dapo"]["completions_sampled_total"]["paired_vs_baseline"]
    assert paired["per_seed"] == {"0": 0, "1": 0} and paired["verdict"] == "no difference on any seed"


def test_compare_refuses_bad_input_in_one_line(tmp_path):
    for args, msg in ((["--variants", "grpo"], "two different variants"),
                      (["--variants", "grpo,nope"], "unknown variant"),
                      (["--variants", "grpo,dr_grpo", "--seeds", "0"], "seed"),
                      (["--variants", "grpo,dr_grpo", "--metrics", "gain_last2,nope"], "unknown --metrics ['nope']")):
        r = subprocess.run([sys.executable, "-m", "grpo_lessons.training.cli", "compare", *args, "--out",
                            str(tmp_path / "x")], capture_output=True, text=True, cwd=ROOT)
        assert r.returncode == 2 and msg in r.stderr and "Traceback" not in r.stderr, r.stderr[-600:]


def test_compare_help_documents_the_paired_design():
    r = subprocess.run([sys.executable, "-m", "grpo_lessons.training.cli", "compare", "--help"], capture_output=True,
                       text=True, cwd=ROOT)
    assert r.returncode == 0
    for words in ("paired", "seed", "Holm", "--variants", "--model", "--task", "--beta"):
        assert words in r.stdout
    assert Interval  # the statistics come from the core


def test_study_curves_draw_finished_runs_only(tmp_path):
    """A run whose run.json says complete: false (interrupted) stays out of the seed bands of the figures."""
    from grpo_lessons.training.records import write_csv
    from grpo_lessons.training.study import Arm, Study, _curve_data

    study = Study("s", "t", "q", [Arm("grpo", {"variant": "grpo"})], [0, 1], {}, min_seeds=2)
    for seed, complete, reward in ((0, True, 0.5), (1, False, 0.9)):
        rd = tmp_path / "runs" / "grpo" / f"seed{seed}"
        rd.mkdir(parents=True)
        write_csv(rd / "metrics.csv", ["step", "reward_mean"], [{"step": 1, "reward_mean": reward},
                                                               {"step": 2, "reward_mean": reward}])
        (rd / "run.json").write_text(json.dumps({"complete": complete, "arm": "grpo", "seed": seed}))
    band = _curve_data(study, tmp_path, ["reward_mean"])["reward_mean"]["grpo"]
    assert [(b[1], b[4]) for b in band] == [(0.5, 1), (0.5, 1)]  # the mean of the finished seed alone, n = 1


def _finished_run(rd: Path, conf: dict, steps: int = 2) -> None:
    from grpo_lessons.training.records import write_csv
    from grpo_lessons.training.study import RUN_JSON
    rd.mkdir(parents=True)
    (rd / RUN_JSON).write_text(json.dumps({"complete": True, "steps": steps, "config": conf}))
    write_csv(rd / "metrics.csv", ["step", "reward_mean"], [{"step": s, "reward_mean": 0.5} for s in range(1, steps + 1)])


def test_a_committed_run_made_before_a_new_config_field_is_still_complete(tmp_path):
    """A finished run's config.json lacks the fields TrainConfig gained since (it had their defaults): the study
    runner must still skip it, not refuse the study; a field that really differs is still refused."""
    from grpo_lessons.training.study import _run_state
    from grpo_lessons.training.trainer import TrainConfig
    cfg = TrainConfig(model="tiny-qwen2", task="arithmetic", steps=2, out=str(tmp_path / "a"))
    conf = json.loads(json.dumps(cfg.resolved(), default=str))
    older = {k: v for k, v in conf.items() if k not in ("plugins", "rewards")}  # made before those fields existed
    _finished_run(tmp_path / "a", older)
    assert _run_state(tmp_path / "a", cfg) == "complete"
    _finished_run(tmp_path / "b", dict(older, lr=1.0))
    with pytest.raises(RuntimeError, match="other settings.*'lr'"):
        _run_state(tmp_path / "b", cfg)


def test_the_dynamic_sampling_plugin_changes_exactly_one_thing():
    """The committed dynamic-sampling study's arm: GRPO's pieces and defaults, plus dynamic_sampling=True (checked in
    a subprocess: registering a variant here would add it to every later test's registry)."""
    root = Path(__file__).resolve().parents[1]
    code = """
import dataclasses, json
import benchmarks.dynamic_sampling_variant
from grpo_lessons import get_variant
ds, grpo = get_variant("grpo_dynamic_sampling"), get_variant("grpo")
differ = [f.name for f in dataclasses.fields(grpo) if f.name not in ("name", "title", "notes", "trl", "train_defaults")
          and getattr(ds, f.name) != getattr(grpo, f.name)]
print(json.dumps({"differ": differ, "ds": dict(ds.train_defaults), "grpo": dict(grpo.train_defaults)}))
"""
    proc = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["differ"] == []
    assert out["ds"] == {**out["grpo"], "dynamic_sampling": True}
    study = json.loads((root / "benchmarks" / "results" / "dynamic_sampling" / "study.json").read_text())
    assert [a["name"] for a in study["arms"]] == ["grpo", "grpo_dynamic_sampling"] and len(study["seeds"]) >= 5


def test_the_committed_equal_sample_study_held_every_run_to_its_budget():
    """The committed dynamic-sampling study at equal samples: no run sampled more than its budget, GRPO exactly it,
    and the arm with dynamic sampling took fewer steps to spend it (its refill rounds count against the budget)."""
    from grpo_lessons.training.records import load_history

    root = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "dynamic_sampling_equal_completions"
    study = json.loads((root / "study.json").read_text())
    budget = study["base"]["max_completions"]
    batch = study["base"]["prompts_per_step"] * study["base"]["group_size"]
    assert budget == 256 and len(study["seeds"]) >= 5
    for row in csv.DictReader(open(root / "summary.csv")):
        hist = [r for r in load_history(root / "runs" / row["arm"] / f"seed{row['seed']}" / "metrics.csv")
                if r["step"] >= 1]
        sampled = sum(r["completions_sampled"] for r in hist)
        assert sampled == int(row["completions_sampled_total"]) and budget - batch < sampled <= budget
        if row["arm"] == "grpo":
            assert (sampled, len(hist)) == (budget, budget // batch)
        else:
            assert len(hist) < budget // batch and all(r["frac_zero_std_groups"] is not None for r in hist)
