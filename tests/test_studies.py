"""Every comparison with arms, through its public entry point's ``--quick`` path (tiny-qwen2, seconds).

For each study: (i) the layout ``runs/<arm>/seed<k>/metrics.csv`` and the study's files; (ii) the arms differ in
what they vary (their first steps' loss / gradient norm / batch); (iii) arms that sample the same way share the first
batch for a seed (the trainer's ``batch_hash``); (iv) a second invocation skips the finished runs and redoes a
partial one; (v) ``summary.csv`` says what the runs' own CSVs say.  Plus the repository check: every committed study
has at least three seeds per arm, the same seeds in every arm.
"""

import itertools
import csv
import json
import math
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import _study  # noqa: E402
from grpo_lessons.training.records import load_history  # noqa: E402

SEEDS = [0, 1, 2]


def _variant_study(out):
    from benchmarks import variant_study
    return variant_study.main(["--quick", "--threads", "1", "--out", str(out)])


def _gopo(out):
    from benchmarks import gopo_vs_grpo
    return gopo_vs_grpo.main(["--quick", "--threads", "1", "--out", str(out)])


def _gdpo(out):
    from benchmarks import gdpo_study
    return gdpo_study.main(["--quick", "--threads", "1", "--out", str(out)])


def _offpolicy(out):
    from benchmarks import offpolicy_run
    return offpolicy_run.main(["--quick", "--threads", "1", "--out", str(out)])


def _copy_rounding(out):
    from benchmarks import copy_rounding
    return copy_rounding.main(["--train", "--quick", "--threads", "1", "--out", str(out)])


def _diversity(out):
    from benchmarks import diversity
    return diversity.main(["--study", "--quick", "--threads", "1", "--out", str(out)])


def _ten_minutes(out):
    from benchmarks import cpu_learning
    return cpu_learning.main(["--study", "--preset", "ten-minutes", "--quick", "--threads", "1", "--out", str(out)])


def _length(out):
    from benchmarks import length_study
    return length_study.main(["--quick", "--threads", "1", "--out", str(out), "--seeds", *map(str, SEEDS)])


STUDIES = {"variant_study": _variant_study, "dr_grpo_length": _length, "gopo_vs_grpo": _gopo, "gdpo_vs_grpo": _gdpo,
           "offpolicy_run": _offpolicy, "copy_rounding_training": _copy_rounding, "diversity_study": _diversity,
           "cpu_learning_10min_seeds": _ten_minutes}


@pytest.fixture(scope="module")
def done():
    """Each study's quick path, run once into its own folder: name -> (entry point, folder, first-pass files).

    The folders are this module's own temporary directory, not pytest's numbered ones (which a concurrent pytest
    session of the same user may prune while a slow study is still using them)."""
    cache = {}
    with tempfile.TemporaryDirectory(prefix="grpo_studies_") as tmp:
        def get(name):
            if name not in cache:
                out = Path(tmp) / name
                assert STUDIES[name](out) == 0
                csvs = {p: p.read_bytes() for p in sorted((out / "runs").glob("*/seed*/metrics.csv"))}
                cache[name] = (STUDIES[name], out, csvs)
            return cache[name]
        yield get


def _definition(out):
    return json.loads((out / "study.json").read_text())


def _history(out, arm, seed):
    return load_history(out / "runs" / arm / f"seed{seed}" / "metrics.csv")


def _step(out, arm, seed, step):
    return next(r for r in _history(out, arm, seed) if r["step"] == step)


@pytest.mark.parametrize("name", list(STUDIES))
def test_layout_arms_and_shared_first_batch(done, name):
    _, out, _ = done(name)
    d = _definition(out)
    assert d["name"] == name and d["seeds"] == SEEDS
    arms = [a["name"] for a in d["arms"]]
    # (i) the layout
    for arm, seed in itertools.product(arms, SEEDS):
        rd = out / "runs" / arm / f"seed{seed}"
        info = json.loads((rd / "run.json").read_text())
        assert info["complete"] and info["arm"] == arm and info["seed"] == seed
        assert not (rd / "checkpoint.pt").exists()
        h = _history(out, arm, seed)
        assert h[0]["step"] == 0 and h[0]["accuracy"] is not None and h[-1]["step"] == info["steps"] >= 1
        assert info["config"]["seed"] == seed and info["initial_eval_reused"]
    for f in ("summary.csv", "analysis.json", "RESULT.md", "curves.png", "gains.png", "initial_eval.json"):
        assert (out / f).is_file(), f
    header = (out / "summary.csv").read_text().splitlines()[0].split(",")
    assert {"arm", "variant", "seed", "accuracy_before", "accuracy_after", "gain"} <= set(header)
    # one evaluation of the starting weights for the whole study, recorded as every run's step 0
    (ev,) = json.loads((out / "initial_eval.json").read_text())
    assert {_step(out, a, s, 0)["accuracy"] for a, s in itertools.product(arms, SEEDS)} == {ev["eval"]["accuracy"]}
    # (ii) every arm differs from the baseline in what it varies: its first two steps are not the same numbers
    # (the update's loss and gradient norm, the batch, the advantages, the sampler/trainer gap).  Not every pair of
    # arms need differ on a tiny random model: with near-uniform token probabilities DPPO's trust region never
    # masks, so DPPO-TV updates exactly as CISPO does, and a bf16 copy draws the same tokens as the fp32 weights.
    def sig(arm, seed):
        return [(r["loss"], r["grad_norm"], r["batch_hash"], r["adv_rms"], r["mismatch_k3"])
                for r in _history(out, arm, seed) if r["step"] in (1, 2)]
    for arm in arms:
        if arm != d["baseline"]:
            for seed in SEEDS:
                assert sig(arm, seed) != sig(d["baseline"], seed), (arm, seed)
    # (iii) the arms that sample the same way share the first batch for a seed, and so each reward function's mean
    # (reward_mean may differ: an entropy bonus in the reward adds to it)
    groups = {}
    for a in d["arms"]:
        groups.setdefault(a["sampling"], []).append(a["name"])
    for members in groups.values():
        for seed in SEEDS:
            firsts = [_step(out, a, seed, 1) for a in members]
            fn_cols = sorted(k for k in firsts[0] if k.startswith("reward_") and k not in ("reward_mean", "reward_std"))
            assert fn_cols
            assert len({(r["batch_hash"], r["completions_sampled"], *(r[k] for k in fn_cols)) for r in firsts}) == 1, \
                members
    # different seeds draw different first batches
    assert len({_step(out, arms[0], s, 1)["batch_hash"] for s in SEEDS}) == len(SEEDS)
    an = json.loads((out / "analysis.json").read_text())
    assert an["runs"] == an["expected_runs"] == len(arms) * len(SEEDS)
    assert all(all(g["identical_per_seed"].values()) for g in an["shared_first_batch"].values())


@pytest.mark.parametrize("name", list(STUDIES))
def test_summary_says_what_the_run_csvs_say(done, name):
    _, out, _ = done(name)
    rows = _study.read_summary(out / "summary.csv")
    d = _definition(out)
    assert sorted((r["arm"], r["seed"]) for r in rows) == sorted(
        (a["name"], s) for a in d["arms"] for s in SEEDS)
    for r in rows:
        h = _history(out, r["arm"], r["seed"])
        train = [x for x in h if x["step"] >= 1]
        evals = [x for x in h if x["accuracy"] is not None]
        assert r["accuracy_before"] == h[0]["accuracy"]
        assert r["accuracy_after"] == evals[-1]["accuracy"] and evals[-1]["step"] == train[-1]["step"]
        assert r["gain"] == pytest.approx(r["accuracy_after"] - r["accuracy_before"], abs=1e-12)
        assert r["steps"] == len(train)
        assert r["reward_first"] == train[0]["reward_mean"] and r["first_batch_hash"] == train[0]["batch_hash"]
        last5 = train[-5:]
        assert r["completion_len_last5"] == pytest.approx(sum(x["completion_len"] for x in last5) / len(last5))
        assert r["entropy_last5"] == pytest.approx(sum(x["entropy"] for x in last5) / len(last5))
        assert r["adv_rms_mean"] == pytest.approx(sum(x["adv_rms"] for x in train) / len(train))
        for key, col in (("grad_norm_mean", "grad_norm"), ("clip_frac_low_mean", "clip_frac_low")):
            vals = [x[col] for x in train if x[col] is not None]  # none where an update was skipped (all masked)
            assert r[key] == (pytest.approx(sum(vals) / len(vals)) if vals else None), key
        assert r["completions_sampled_total"] == sum(x["completions_sampled"] for x in train)
        info = json.loads((out / "runs" / r["arm"] / f"seed{r['seed']}" / "run.json").read_text())
        assert r["lr"] == pytest.approx(info["config"]["lr"]) and r["variant"] == info["config"]["variant"]
    # the analysis is the statistics of those rows: the gain's mean and the paired difference per seed
    an = json.loads((out / "analysis.json").read_text())
    base = {r["seed"]: r["gain"] for r in rows if r["arm"] == an["baseline"]}
    for arm, e in an["arms"].items():
        gains = {r["seed"]: r["gain"] for r in rows if r["arm"] == arm}
        assert e["gain"]["mean"] == pytest.approx(sum(gains.values()) / len(gains), abs=1e-12)
        if arm != an["baseline"]:
            per_seed = e["gain"]["paired_vs_baseline"]["per_seed"]
            assert {int(s): v for s, v in per_seed.items()} == pytest.approx(
                {s: gains[s] - base[s] for s in gains})


def test_the_course_reads_the_study_as_the_runner_analysed_it(done):
    """Notebook 20's reader (grpo_lessons.course.viz.study) on the variant study's quick folder: the same runs, the
    same gains and paired intervals as the runner's analysis.json."""
    from grpo_lessons.course.viz import study as viz_study

    _, out, _ = done("variant_study")
    res = viz_study.load_study(out)
    an = json.loads((out / "analysis.json").read_text())
    assert res.complete and res.finished == an["runs"] == an["expected_runs"] and res.baseline == an["baseline"]
    table = viz_study.study_table(res)
    assert [r["variant"] for r in table] == [a["name"] for a in _definition(out)["arms"]]
    for r in table:
        e = an["arms"][r["variant"]]["gain"]
        assert r["gain"].mean == pytest.approx(e["mean"], abs=1e-12) and r["n"] == e["n"]
        assert (r["gain"].low, r["gain"].high) == (pytest.approx(e["low"], abs=1e-12), pytest.approx(e["high"], abs=1e-12))
        if r["variant"] == an["baseline"]:
            assert r["paired"] is None
        else:
            p = e["paired_vs_baseline"]
            assert (r["paired"].low, r["paired"].high) == (pytest.approx(p["low"], abs=1e-12),
                                                           pytest.approx(p["high"], abs=1e-12))
    bands = viz_study.curve_bands(res, "completion_len")
    assert set(bands) == set(res.arms) and all(b[4] == len(SEEDS) for band in bands.values() for b in band)


@pytest.mark.parametrize("name", list(STUDIES))
def test_second_invocation_skips_finished_runs_and_redoes_a_partial_one(done, name, capsys):
    entry, out, first = done(name)
    d = _definition(out)
    partial = out / "runs" / d["arms"][-1]["name"] / "seed1"
    info = json.loads((partial / "run.json").read_text())
    (partial / "run.json").write_text(json.dumps(dict(info, complete=False)))  # as if killed before the end
    capsys.readouterr()
    assert entry(out) == 0
    log = capsys.readouterr().out
    n = len(d["arms"]) * len(SEEDS)
    assert log.count("complete, skipped") == n - 1 and log.count("partial, redone") == 1
    again = {p: p.read_bytes() for p in sorted((out / "runs").glob("*/seed*/metrics.csv"))}
    assert again.keys() == first.keys()
    for p, content in first.items():
        if p.parent != partial:
            assert again[p] == content  # untouched
    # the redone run is the same run: a seeded run reproduces (times aside)
    def numbers(b):
        import csv
        import io
        rows = list(csv.DictReader(io.StringIO(b.decode())))
        return [{k: v for k, v in r.items() if not k.startswith("time_") and k not in ("seconds", "elapsed")}
                for r in rows]
    assert numbers(again[partial / "metrics.csv"]) == numbers(first[partial / "metrics.csv"])


def test_a_finished_run_with_other_settings_stops_the_study(done):
    from benchmarks import gdpo_study

    _, out, _ = done("gdpo_vs_grpo")
    with pytest.raises(RuntimeError, match="other settings"):
        gdpo_study.main(["--quick", "--threads", "1", "--out", str(out), "--steps", "3"])


def test_analyse_only_keeps_the_arms_the_study_ran_with(done, tmp_path):
    """An arm added to a script's defaults after a study ran must not turn the committed study into an 'incomplete'
    one when it is re-analysed: --analyse-only reads the arms from the folder's study.json (or --arms)."""
    import shutil

    from benchmarks import gdpo_study

    _, src, _ = done("gdpo_vs_grpo")
    out = tmp_path / "older"
    shutil.copytree(src, out)
    shutil.rmtree(out / "runs" / "gdpo")  # as if the study had been run before the gdpo arm existed
    d = _definition(out)
    d["arms"] = [a for a in d["arms"] if a["name"] == "grpo"]
    (out / "study.json").write_text(json.dumps(d))
    assert gdpo_study.main(["--quick", "--threads", "1", "--out", str(out), "--analyse-only"]) == 0
    result = (out / "RESULT.md").read_text()
    assert "Incomplete" not in result and "`gdpo`" not in result
    assert [a["name"] for a in _definition(out)["arms"]] == ["grpo"]
    with pytest.raises(SystemExit, match="not arms"):
        gdpo_study.main(["--quick", "--threads", "1", "--out", str(out), "--analyse-only", "--arms", "nope"])


def test_gopo_arms_share_the_batch_and_differ_in_the_update(done):
    """The bug this replaces: an override the loop never called trained GRPO in both arms (equal step-1 gradient
    norms).  Here GOPO is the registry's variant: same first batch, other advantages, other gradient."""
    from benchmarks.gopo_vs_grpo import make_reward_model, true_score

    assert true_score(["12", "10", "x", "<answer>30</answer>"], answer=[12, 12, 12, 12]) == [1.0, 0.4, 0.0, 0.0]
    rm = make_reward_model(0.0, 3.0, seed=0)
    assert rm(["12", "x"], answer=[12, 12]) == pytest.approx([math.exp(3.0), 1.0])  # no noise: exp(3 s)
    _, out, _ = done("gopo_vs_grpo")
    for seed in SEEDS:
        g, o, m = (_step(out, a, seed, 1) for a in ("grpo", "gopo", "gopo_lr_matched"))
        assert g["batch_hash"] == o["batch_hash"] == m["batch_hash"] and g["reward_mean"] == o["reward_mean"]
        assert g["grad_norm"] != pytest.approx(o["grad_norm"], rel=1e-3)
        assert o["grad_norm"] == m["grad_norm"]  # same batch, same weights: the lr acts from step 2 on
        assert g["adv_rms"] < 1.0 < o["adv_rms"] <= 2.0  # z-scores vs ranks in [-2, 2]
        info = json.loads((out / "runs" / "gopo_lr_matched" / f"seed{seed}" / "run.json").read_text())
        der = info["derived"]
        grpo_rms = [r["adv_rms"] for r in _history(out, "grpo", seed) if r["adv_rms"] is not None]
        gopo_rms = [r["adv_rms"] for r in _history(out, "gopo", seed) if r["adv_rms"] is not None]
        factor = (sum(grpo_rms) / len(grpo_rms)) / (sum(gopo_rms) / len(gopo_rms))
        assert der["lr_factor"] == pytest.approx(factor) and 0.4 < factor < 1.0
        base_lr = json.loads((out / "runs" / "gopo" / f"seed{seed}" / "run.json").read_text())["config"]["lr"]
        assert info["config"]["lr"] == pytest.approx(base_lr * factor)


def test_variant_study_arms_differ_only_in_what_they_name(done):
    """The repaired design: GRPO at beta = 0 is the baseline; every other arm has beta = 0 unless beta is its change;
    the single-change arms share the baseline's first batch; DAPO at equal samples stops at GRPO's budget."""
    from benchmarks.variant_study import REQUIRED, SINGLE_CHANGES, default_arms

    _, out, _ = done("variant_study")
    d = _definition(out)
    names = [a["name"] for a in d["arms"]]
    assert names == [a.name for a in default_arms(d["base"])] and set(REQUIRED) <= set(names)
    assert names[0] == d["baseline"] == "grpo" and {n for n, _, _ in SINGLE_CHANGES} <= set(names)
    budget = d["base"]["steps"] * d["base"]["prompts_per_step"] * d["base"]["group_size"]
    for seed in SEEDS:
        hist = {arm: [r for r in _history(out, arm, seed) if r["step"] >= 1] for arm in names}
        for arm in names:
            c = json.loads((out / "runs" / arm / f"seed{seed}" / "config.json").read_text())
            assert c["variant"] == ("grpo" if arm.startswith("grpo") else "dapo" if arm.startswith("dapo") else arm)
            assert c["lr"] == d["base"]["lr"] and c["mu"] == d["base"]["mu"] == 2
            assert c["prompts_per_step"] * c["group_size"] == d["base"]["prompts_per_step"] * d["base"]["group_size"]
            assert c["beta"] == (0.04 if arm == "grpo_beta" else 0.0), arm
            # clip-higher is the only explicit clip setting; DAPO's 0.28 comes from its registry defaults
            assert c["epsilon_high"] == (0.28 if arm == "grpo_clip_higher" else None) and c["epsilon"] is None
            sampled = [r["completions_sampled"] for r in hist[arm]]
            if arm == "dapo_equal_completions":  # stopped by the sample budget, not the step count
                assert sum(sampled) >= budget > sum(sampled[:-1]) and len(sampled) < c["steps"]
            else:
                assert len(sampled) == d["base"]["steps"]
            if not c["dynamic_sampling"]:
                assert sum(sampled) == budget
        first = {arm: hist[arm][0]["batch_hash"] for arm in names}
        assert first["grpo"] == first["grpo_beta"] == first["grpo_clip_higher"] == first["gspo"] == first["sapo"]
        assert first["dapo"] == first["dapo_equal_completions"]
    # beta = 0.04 adds a KL term (logged), the baseline has none; mu = 2: GSPO's clip and SAPO's gate (same batch,
    # identical gradients while every ratio is 1) give different updates from the second pass on
    assert _step(out, "grpo_beta", 0, 1)["kl"] is not None and _step(out, "grpo", 0, 1)["kl"] is None
    assert _step(out, "gspo", 0, 1)["grad_norm"] != _step(out, "sapo", 0, 1)["grad_norm"]
    two = json.loads((out / "runs" / "2-grpo" / "seed0" / "run.json").read_text())["config"]
    assert two["group_size"] == 2


def test_length_study_splits_length_by_correctness_and_pairs_it(done):
    """The Dr. GRPO length study through its entry point: every training step logs the lengths of the right and the
    wrong completions, each run's summary averages them over its last five steps, and the analysis pairs the arms'
    values seed by seed on exactly those numbers."""
    _, out, _ = done("dr_grpo_length")
    d = _definition(out)
    assert [a["name"] for a in d["arms"]] == ["grpo", "dr_grpo"] and d["base"]["beta"] == 0.0
    rows = {(r["arm"], int(r["seed"])): r for r in csv.DictReader(open(out / "summary.csv"))}
    an = json.loads((out / "analysis.json").read_text())
    for seed in SEEDS:
        for arm in ("grpo", "dr_grpo"):
            train = [r for r in _history(out, arm, seed) if r["step"] >= 1]
            wrong = [r["completion_len_wrong"] for r in train[-5:] if r["completion_len_wrong"] is not None]
            assert wrong and float(rows[(arm, seed)]["completion_len_wrong_last5"]) == pytest.approx(
                sum(wrong) / len(wrong))
            assert all(r["train_accuracy"] is not None for r in train)
        diff = an["arms"]["dr_grpo"]["completion_len_wrong_last5"]["paired_vs_baseline"]["per_seed"][str(seed)]
        assert diff == pytest.approx(float(rows[("dr_grpo", seed)]["completion_len_wrong_last5"])
                                     - float(rows[("grpo", seed)]["completion_len_wrong_last5"]))


def test_diversity_study_measures_each_trained_model(done):
    from benchmarks.diversity import DIVERSITY_METRICS, group_metrics

    _, out, _ = done("diversity_study")
    rows = _study.read_summary(out / "summary.csv")
    for r in rows:
        samples = json.loads((out / "runs" / r["arm"] / f"seed{r['seed']}" / "samples.json").read_text())
        m = group_metrics(samples["texts"], samples["rewards"])
        for k in DIVERSITY_METRICS:
            assert r[k] == pytest.approx(m[k]), k
    ref = json.loads((out / "reference.json").read_text())
    assert set(DIVERSITY_METRICS) <= set(ref)
    configs = {r["arm"]: json.loads((out / "runs" / r["arm"] / "seed0" / "run.json").read_text())["config"]
               for r in rows}
    assert configs["grpo"]["beta"] == 0.0 and configs["grpo_kl0.1"]["beta"] == 0.1
    assert configs["entropy_loss"]["entropy_in"] == "loss" and configs["entropy_reward"]["entropy_bonus"] > 0


def test_study_definitions_are_checked():
    arm = _study.Arm("a", {"variant": "grpo"})
    with pytest.raises(ValueError, match="at least 3"):
        _study.Study("s", "t", "q", [arm], [0, 1], {})
    with pytest.raises(ValueError, match="not TrainConfig fields"):
        _study.Study("s", "t", "q", [_study.Arm("a", {"learning_rate": 1.0})], SEEDS, {})
    with pytest.raises(ValueError, match="set by the runner"):
        _study.Study("s", "t", "q", [arm], SEEDS, {"seed": 3})
    with pytest.raises(ValueError, match="repeat"):
        _study.Study("s", "t", "q", [arm, arm], SEEDS, {})
    with pytest.raises(ValueError, match="directory name"):
        _study.Study("s", "t", "q", [_study.Arm("../x")], SEEDS, {})
    with pytest.raises(ValueError, match="baseline"):
        _study.Study("s", "t", "q", [arm], SEEDS, {}, baseline="b")
    with pytest.raises(ValueError, match="distinct"):
        _study.Study("s", "t", "q", [arm], [0, 0, 1], {})


# ---------------------------------------------------------------------------------------------
# the repository: every committed study has >= 3 seeds per arm, the same in every arm
# ---------------------------------------------------------------------------------------------


def committed_runs(results: Path) -> dict[str, dict[str, set[int]]]:
    """``{study: {arm: {seeds with a metrics.csv}}}`` for every ``<results>/<study>/runs/<arm>/``."""
    found = {}
    for runs in sorted(results.glob("*/runs")):
        arms = {}
        for arm in sorted(p for p in runs.iterdir() if p.is_dir()):
            arms[arm.name] = {int(p.name[4:]) for p in arm.glob("seed*") if p.name[4:].isdigit()
                              and (p / "metrics.csv").is_file()}
        found[runs.parent.name] = arms
    return found


def check_studies(found: dict[str, dict[str, set[int]]]) -> list[str]:
    problems = []
    for study, arms in found.items():
        for arm, seeds in arms.items():
            if len(seeds) < 3:
                problems.append(f"{study}/runs/{arm}: {len(seeds)} seed(s) with metrics.csv, need >= 3")
        if len({frozenset(s) for s in arms.values()}) > 1:
            problems.append(f"{study}: arms have different seed sets {({a: sorted(s) for a, s in arms.items()})}")
    return problems


def test_committed_studies_have_three_seeds_per_arm_and_the_same_seeds():
    """Checks whatever exists under benchmarks/results/<study>/runs/ (studies not yet run are simply absent)."""
    assert check_studies(committed_runs(ROOT / "benchmarks" / "results")) == []


def test_the_repository_check_fails_for_too_few_or_unpaired_seeds(tmp_path):
    for arm, seeds in (("a", [0, 1, 2]), ("b", [0, 1]), ("c", [0, 1, 3])):
        for s in seeds:
            (tmp_path / "st" / "runs" / arm / f"seed{s}").mkdir(parents=True)
            (tmp_path / "st" / "runs" / arm / f"seed{s}" / "metrics.csv").write_text("step\n")
    (tmp_path / "st" / "runs" / "a" / "seed7").mkdir()  # no metrics.csv: not a run
    found = committed_runs(tmp_path)
    assert found == {"st": {"a": {0, 1, 2}, "b": {0, 1}, "c": {0, 1, 3}}}
    problems = check_studies(found)
    assert any("runs/b: 2 seed(s)" in p for p in problems) and any("different seed sets" in p for p in problems)
    assert check_studies({"ok": {"a": {0, 1, 2}, "b": {0, 1, 2}}}) == []


def test_analyse_only_reads_the_seeds_the_study_ran_with(done, tmp_path):
    """A study extended to more seeds than its script's default is re-analysed on all of them by a plain
    --analyse-only (its study.json records them), not on the default seeds only."""
    import shutil

    from benchmarks import gdpo_study

    _, src, _ = done("gdpo_vs_grpo")
    out = tmp_path / "extended"
    shutil.copytree(src, out)
    seeds = sorted(_definition(out)["seeds"])
    more = seeds + [max(seeds) + 1]
    assert gdpo_study.main(["--quick", "--threads", "1", "--out", str(out), "--seeds", *map(str, more)]) == 0
    assert _definition(out)["seeds"] == more
    (out / "RESULT.md").unlink()
    assert gdpo_study.main(["--quick", "--threads", "1", "--out", str(out), "--analyse-only"]) == 0
    assert f"{len(more)} seeds {more}" in (out / "RESULT.md").read_text()
