"""grpo_lessons.course.viz.study: a study folder read back, its table checked against numbers worked out by hand,
an unfinished study and a missing folder handled, the seed bands and the widget."""

import json
import math

import matplotlib
import pytest

matplotlib.use("Agg")

from grpo_lessons.course.viz import study as vs  # noqa: E402
from grpo_lessons.training.records import write_csv  # noqa: E402

T2 = 4.302653  # t_{0.975, 2}: three seeds
BEFORE = 0.40
# accuracy after 12 steps per (arm, seed); the gain is after - 0.40
AFTER = {
    "grpo": {0: 0.50, 1: 0.60, 2: 0.70},     # gains 0.10 0.20 0.30: mean 0.20, sd 0.10
    "dr_grpo": {0: 0.55, 1: 0.60, 2: 0.80},  # gains 0.15 0.20 0.40: minus grpo 0.05 0.00 0.10 -> mean 0.05, sd 0.05
    "gspo": {0: 0.60, 1: 0.72, 2: 0.81},     # minus grpo 0.10 0.12 0.11 -> mean 0.11, sd 0.01
}
COLUMNS = ["step", "reward_mean", "completion_len", "entropy", "clip_frac", "accuracy", "seconds"]


def _write_run(root, arm, seed, after, *, complete=True, steps=4, length=10.0):
    rd = root / "runs" / arm / f"seed{seed}"
    rd.mkdir(parents=True)
    rows = [{"step": 0, "accuracy": BEFORE}]
    for s in range(1, steps + 1):
        rows.append({"step": s, "reward_mean": 0.1 * s, "completion_len": length + seed + s, "entropy": 0.5 - 0.01 * s,
                     "clip_frac": 0.01 * seed, "seconds": 1.0,
                     "accuracy": after if s == steps else None})
    write_csv(rd / "metrics.csv", COLUMNS, rows)
    info = {"arm": arm, "seed": seed, "complete": complete, "minutes": 2.0 + seed, "config": {"variant": arm},
            "steps": steps}
    (rd / "run.json").write_text(json.dumps(info))


@pytest.fixture
def study(tmp_path):
    for arm, afters in AFTER.items():
        for seed, after in afters.items():
            _write_run(tmp_path, arm, seed, after, length={"grpo": 10.0, "dr_grpo": 20.0, "gspo": 30.0}[arm])
    (tmp_path / "study.json").write_text(json.dumps({
        "name": "t", "title": "a test study", "seeds": [0, 1, 2], "baseline": "grpo",
        "arms": [{"name": a, "label": a.upper()} for a in AFTER]}))
    return tmp_path


def test_table_matches_the_hand_computed_intervals(study):
    res = vs.load_study(study)
    assert res.complete and res.finished == res.expected == 9
    assert res.status().startswith("9 of 9 runs finished")
    table = {r["variant"]: r for r in vs.study_table(res)}
    assert list(table) == ["grpo", "dr_grpo", "gspo"]
    g = table["grpo"]["gain"]
    half = T2 * 0.10 / math.sqrt(3)  # 0.2484
    assert (g.n, g.mean, g.sd) == (3, pytest.approx(0.20), pytest.approx(0.10))
    assert g.low == pytest.approx(0.20 - half, abs=1e-6) and g.high == pytest.approx(0.20 + half, abs=1e-6)
    assert table["grpo"]["paired"] is None  # the baseline is not paired with itself
    p = table["dr_grpo"]["paired"]
    assert table["dr_grpo"]["paired_per_seed"] == pytest.approx({0: 0.05, 1: 0.0, 2: 0.10})
    assert p.mean == pytest.approx(0.05) and p.sd == pytest.approx(0.05)
    assert p.low == pytest.approx(0.05 - T2 * 0.05 / math.sqrt(3), abs=1e-6)  # -0.0742: covers 0
    q = table["gspo"]["paired"]
    assert q.low == pytest.approx(0.11 - T2 * 0.01 / math.sqrt(3), abs=1e-6) and q.low > 0  # +0.0852: excludes 0
    # length: the mean over the last five training steps (here all four), averaged over the seeds
    assert table["dr_grpo"]["final_length"] == pytest.approx(20.0 + 1.0 + 2.5)
    assert table["gspo"]["minutes"] == pytest.approx(3.0)
    assert table["gspo"]["label"] == "GSPO"
    v = vs.interval_verdicts(list(table.values()))
    assert v["paired_excludes_0"] == ["gspo"] and v["paired_covers_0"] == ["dr_grpo"]
    # gains: grpo 20.0 [-4.8, +44.8], dr_grpo 25.0 [-7.9, +57.9], gspo 31.0 [+4.8, +57.2] points
    assert v["gain_excludes_0"] == ["gspo"] and v["gain_covers_0"] == ["grpo", "dr_grpo"]
    text = vs.format_table(list(table.values()))
    assert "+20.0 [-4.8, +44.8]" in text and "+5.0 [-7.4, +17.4]" in text and "covers 0" in text
    assert "+11.0 [+8.5, +13.5]" in text and "higher" in text and "+31.0 [+4.8, +57.2]" in text
    # Holm over the two comparisons: gspo's paired t (0.11 / (0.01 / sqrt 3) = 19.05, 2 df) has p = 0.00274,
    # doubled as the smaller of two; dr_grpo's (t = 1.732) p = 0.225, kept as the larger
    assert table["gspo"]["p"] == pytest.approx(0.002744, abs=2e-5)
    assert table["gspo"]["p_holm"] == pytest.approx(2 * table["gspo"]["p"])
    assert table["dr_grpo"]["p_holm"] == pytest.approx(table["dr_grpo"]["p"]) and table["dr_grpo"]["p"] == \
        pytest.approx(0.2254, abs=1e-3)
    assert table["gspo"]["verdict"].startswith("higher (Holm p") and table["grpo"]["verdict"] is None
    assert "0.005" in text


def test_an_interval_that_excludes_0_alone_is_not_called_after_holm(study):
    # gspo's second paired difference far off: its own interval still excludes 0 but Holm over 2 does not call it
    res = vs.load_study(study)
    table = {r["variant"]: r for r in vs.study_table(res)}
    gspo = table["gspo"]
    iv = gspo["paired"]
    fake = vs.Interval(mean=0.11, low=0.001, high=0.219, n=3, sd=0.0436)  # p = 0.0497 alone, 0.099 after Holm
    rows = [table["grpo"], dict(table["dr_grpo"]), dict(gspo, paired=fake, p=0.0497, p_holm=0.0994)]
    text = vs.format_table(rows)
    assert "not after Holm" in text and "higher" not in text
    assert iv.excludes_zero()


def test_identical_paired_differences_get_their_own_verdict(study):
    res = vs.load_study(study)
    table = {r["variant"]: r for r in vs.study_table(res)}
    same = vs.Interval(mean=0.02, low=0.02, high=0.02, n=3, sd=0.0)
    text = vs.format_table([table["grpo"], dict(table["gspo"], paired=same, p=0.0, p_holm=0.0)])
    assert "same on every seed" in text and "higher" not in text


def test_an_unfinished_study_says_how_far_it_is(study):
    # seed 2 of gspo still running; seed 2 of dr_grpo not started
    (study / "runs" / "gspo" / "seed2" / "run.json").write_text(json.dumps({"arm": "gspo", "seed": 2,
                                                                          "complete": False}))
    for p in (study / "runs" / "dr_grpo" / "seed2").iterdir():
        p.unlink()
    (study / "runs" / "dr_grpo" / "seed2").rmdir()
    res = vs.load_study(study)
    assert (res.finished, res.expected) == (7, 9) and not res.complete
    assert res.status().startswith("7 of 9 runs finished") and "gspo/seed2" in res.status()
    assert res.unfinished == [("gspo", 2)]
    table = {r["variant"]: r for r in vs.study_table(res)}
    assert table["gspo"]["seeds"] == [0, 1] and table["gspo"]["n"] == 2
    p = table["gspo"]["paired"]  # two pairs: 0.10, 0.12 -> mean 0.11, sd 0.01414, t_{0.975,1} = 12.706
    assert p.n == 2 and p.low == pytest.approx(0.11 - 12.7062 * math.sqrt(2) * 0.01 / math.sqrt(2), abs=1e-4)
    bands = vs.curve_bands(res, "completion_len", ["gspo"])["gspo"]
    assert all(b[4] == 2 for b in bands)  # two seeds


def test_an_arm_with_one_seed_has_no_interval(study):
    res = vs.load_study(study)
    for s in (1, 2):
        del res.rows[("gspo", s)]
    row = next(r for r in vs.study_table(res) if r["variant"] == "gspo")
    assert row["gain"].low is None and row["paired"].low is None
    assert "gspo" in vs.interval_verdicts([row])["no_interval"]
    assert "(n = 1)" in vs.format_table([row])


def test_a_folder_without_study_json_is_read_from_its_runs(tmp_path):
    _write_run(tmp_path, "sapo", 0, 0.5)
    _write_run(tmp_path, "grpo", 0, 0.6)
    _write_run(tmp_path, "grpo", 1, 0.6, complete=False)
    res = vs.load_study(tmp_path)
    assert res.baseline == "grpo" and res.arms == ["grpo", "sapo"] and res.seeds == [0, 1]
    assert res.status().startswith("2 of 4 runs finished")


def test_a_missing_folder_is_a_clear_message(tmp_path, capsys):
    with pytest.raises(vs.StudyNotFound, match="no study folder at .*benchmarks/results/<study>.*variant_study.py"):
        vs.load_study(tmp_path / "nope")
    with pytest.raises(vs.StudyNotFound, match="gopo_vs_grpo.py"):  # the message names the study's own script
        vs.load_study(tmp_path / "gopo_vs_grpo")
    (tmp_path / "empty").mkdir()
    with pytest.raises(vs.StudyNotFound, match="not a study folder"):
        vs.load_study(tmp_path / "empty")
    vs.show_variant("dr_grpo", tmp_path / "nope")  # the notebooks' last cell: a message, no traceback
    assert "no study folder" in capsys.readouterr().out


def test_seed_bands_by_hand(study):
    res = vs.load_study(study)
    bands = vs.curve_bands(res, "completion_len", ["grpo", "gspo"])
    # step 1: grpo lengths 10 + seed + 1 over seeds 0, 1, 2 -> 11, 12, 13
    assert bands["grpo"][0] == (1, pytest.approx(12.0), 11.0, 13.0, 3)
    acc = vs.curve_bands(res, "accuracy", ["dr_grpo"])["dr_grpo"]
    assert acc[0] == (0, pytest.approx(40.0), pytest.approx(40.0), pytest.approx(40.0), 3)  # in points
    assert acc[-1][2:4] == (pytest.approx(55.0), pytest.approx(80.0))


def test_plots_and_show_variant(study, capsys):
    import matplotlib.pyplot as plt

    res = vs.load_study(study)
    fig = vs.plot_curves(res, ["grpo", "dr_grpo"])
    assert len(fig.axes) == 4 and "min-max" in fig._suptitle.get_text()
    line_labels = [ln.get_label() for ln in fig.axes[0].get_lines()]
    assert line_labels == ["grpo (3 seeds)", "dr_grpo (3 seeds)"]
    plt.close(fig)
    vs.show_variant("dr_grpo", study)
    out = capsys.readouterr().out
    assert "9 of 9 runs finished" in out and "dr_grpo" in out and "gspo" not in out.split("\n", 1)[1]
    plt.close("all")


def test_metric_table_gives_any_summary_column_its_intervals(study):
    """A study's own per-run measures (run.json's ``extra``, e.g. the diversity study's) get the same treatment as the
    gain: mean with its t-interval over seeds, the paired difference to the baseline, the starting model's row."""
    distinct = {"grpo": {0: 0.2, 1: 0.3, 2: 0.4}, "dr_grpo": {0: 0.25, 1: 0.3, 2: 0.5}, "gspo": {0: 0.3, 1: 0.42}}
    for arm, per_seed in distinct.items():
        for seed, v in per_seed.items():
            f = study / "runs" / arm / f"seed{seed}" / "run.json"
            info = json.loads(f.read_text())
            f.write_text(json.dumps({**info, "extra": {"distinct_2": v}}))
    (study / "reference.json").write_text(json.dumps({"distinct_2": 0.6, "samples": {"texts": []}}))
    res = vs.load_study(study)
    assert res.reference == {"distinct_2": 0.6}  # numbers only: the samples stay out
    table = {r["variant"]: r for r in vs.metric_table(res, ["distinct_2"])}
    g = table["grpo"]["distinct_2"]
    assert (g.n, g.mean, g.sd) == (3, pytest.approx(0.3), pytest.approx(0.1))
    assert g.low == pytest.approx(0.3 - T2 * 0.1 / math.sqrt(3), abs=1e-6)
    assert table["grpo"]["distinct_2_paired"] is None and table["grpo"]["is_baseline"]
    p = table["dr_grpo"]["distinct_2_paired"]  # 0.05, 0.00, 0.10 on seeds 0, 1, 2
    assert (p.n, p.mean, p.sd) == (3, pytest.approx(0.05), pytest.approx(0.05))
    q = table["gspo"]["distinct_2_paired"]  # seed 2 has no value: paired over seeds 0 and 1 only (0.1, 0.12)
    assert (q.n, q.mean) == (2, pytest.approx(0.11))
    text = vs.format_metric_table(list(table.values()), ["distinct_2"], reference=res.reference)
    lines = text.splitlines()
    assert lines[1].split() == ["starting", "model", "0.60"]
    assert lines[2].split()[:2] == ["grpo", "0.30"] and f"[{g.low:.2f}," in lines[2]
    paired = vs.format_metric_table(list(table.values()), ["distinct_2"], paired=True, reference=res.reference)
    assert "starting" not in paired and paired.splitlines()[1].split() == ["grpo", "baseline"]
    assert paired.splitlines()[2].split()[:2] == ["dr_grpo", "+0.05"]


def test_panel_titles_name_the_metric():
    assert vs.curve_title("accuracy") == vs.CURVE_TITLES["accuracy"]
    assert vs.curve_title("reward_brevity") == "reward 'brevity' (sampled mean)"  # one reward of several, as logged
    assert vs.curve_title("eval_completion_len") == "held-out greedy length (tokens)"
    assert vs.curve_title("some_column") == "some_column"


def test_a_seed_band_draws_the_mean_only_where_every_seed_reached():
    """Under a wall-clock budget seeds stop at different steps: the mean line must end at the last step that every seed
    logged, and a later step shows the seeds' own values (open points), not a mean over fewer seeds."""
    import matplotlib.pyplot as plt

    from grpo_lessons.training.plots import draw_seed_band
    from grpo_lessons.training.stats import seed_band

    band = seed_band([[(0, 40.0), (10, 60.0), (20, 70.0)], [(0, 40.0), (10, 50.0), (18, 64.0)],
                      [(0, 40.0), (10, 70.0), (20, 66.0)]])
    fig, ax = plt.subplots()
    draw_seed_band(ax, band, color="C0", label="arm")
    lines = ax.get_lines()
    mean = lines[0]
    assert list(mean.get_xdata()) == [0, 10] and list(mean.get_ydata()) == pytest.approx([40.0, 60.0])
    points = sorted((float(x), float(y)) for ln in lines[1:] if ln.get_marker() == "o"
                    for x, y in zip(ln.get_xdata(), ln.get_ydata()))
    assert points == [(18.0, 64.0), (20.0, 66.0), (20.0, 70.0)]  # each seed's own value at the steps not all reached
    assert [h.get_label() for h in ax.get_legend_handles_labels()[0]] == ["arm"]  # one legend entry per arm
    plt.close(fig)


def test_widget_redraws_and_its_labels_fit(study):
    import matplotlib.pyplot as plt

    res = vs.load_study(study)
    w = vs.study_widget(res, ["grpo", "gspo"], "completion_len")
    pick, metric = w.children[:2]
    assert pick.value == ("grpo", "gspo") and metric.value == "completion_len"
    assert set(w.result["bands"]) == {"grpo", "gspo"}
    metric.value = "entropy"
    assert w.result["metric"] == "entropy" and set(w.result["bands"]) == {"grpo", "gspo"}
    pick.value = ("dr_grpo",)
    assert set(w.result["bands"]) == {"dr_grpo"}
    pick.value = ()
    assert w.result["bands"] == {}
    for c in (pick, metric):
        assert int(c.style.description_width[:-2]) >= 7 * len(c.description)
    assert "accuracy" in metric.options and "clip_frac" in metric.options
    plt.close("all")
