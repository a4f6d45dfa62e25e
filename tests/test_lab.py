"""The lab: exact metrics against enumeration and sampling, the update going through ``policy_loss`` by variant name,
paired arms that differ in exactly their change, the verdict rule, and the committed claims table."""

from __future__ import annotations

import dataclasses
import itertools
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import grpo_lessons.lab.run as lab_run
from grpo_lessons.core.stats import Interval, claim_verdict, holm, mean_interval, t_test_p
from grpo_lessons.lab import CLAIMS, LabConfig, exact_metrics, make_task, probe, train
from grpo_lessons.lab.claims import (COLUMNS, Claim, arm_difference, get_claim, read_rows, run_claim,
                                     with_holm, write_rows)
from grpo_lessons.lab.policy import TabularPolicy, sample, token_logp

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "benchmarks" / "results" / "claims" / "claims.csv"


# ---------------------------------------------------------------------------------------------------------------
# the policy: exact metrics are exact
# ---------------------------------------------------------------------------------------------------------------

def _tiny_task():
    return make_task(pass_rates=(0.3, 0.02), n_answers=3, n_fillers=2, max_len=4, init_length=2.5, task_seed=3)


def _enumerate(task, a_logits, b_logits):
    """Every completion of every prompt with its probability, by brute force (tiny task only)."""
    pa = torch.softmax(a_logits, -1)
    pb = torch.softmax(b_logits, -1)
    L, V = task.max_len, task.n_fillers
    out = []
    for p in range(task.n_prompts):
        for a in range(task.n_answers):
            # body sequences: n fillers then EOS (n = 0 .. L-2), or L-1 fillers (truncated)
            for n in range(L - 1):
                for fills in itertools.product(range(V), repeat=n):
                    pr = pa[p, a] * math.prod(pb[p, a, t, f] for t, f in enumerate(fills)) * pb[p, a, n, V]
                    out.append((p, a, n + 2, False, float(pr)))
            for fills in itertools.product(range(V), repeat=L - 1):
                pr = pa[p, a] * math.prod(pb[p, a, t, f] for t, f in enumerate(fills))
                out.append((p, a, L, True, float(pr)))
    return out


def test_exact_metrics_equal_brute_force_enumeration():
    task = _tiny_task()
    g = torch.Generator().manual_seed(0)
    a = task.answer_logits + 0.7 * torch.randn(task.answer_logits.shape, generator=g, dtype=torch.float64)
    b = task.body_logits + 0.7 * torch.randn(task.body_logits.shape, generator=g, dtype=torch.float64)
    seqs = _enumerate(task, a, b)
    P = task.n_prompts
    total = sum(s[4] for s in seqs)
    assert total == pytest.approx(P, rel=1e-12)  # each prompt's completions sum to 1
    right = task.right
    w_r = sum(pr for p, ans, n, t, pr in seqs if right[p, ans])
    w_w = sum(pr for p, ans, n, t, pr in seqs if not right[p, ans])
    m = exact_metrics(a, b, task)
    assert m["p_correct"] == pytest.approx(w_r / P, rel=1e-12)
    assert m["len_right"] == pytest.approx(sum(pr * n for p, ans, n, t, pr in seqs if right[p, ans]) / w_r, rel=1e-12)
    assert m["len_wrong"] == pytest.approx(sum(pr * n for p, ans, n, t, pr in seqs if not right[p, ans]) / w_w,
                                           rel=1e-12)
    assert m["truncated"] == pytest.approx(sum(pr for *_, t, pr in seqs if t) / P, rel=1e-12)
    assert m["length"] == pytest.approx(sum(pr * n for p, ans, n, t, pr in seqs) / P, rel=1e-12)


def test_exact_kl_matches_the_log_ratio_of_enumerated_sequences():
    task = _tiny_task()
    g = torch.Generator().manual_seed(1)
    a = task.answer_logits + torch.randn(task.answer_logits.shape, generator=g, dtype=torch.float64)
    b = task.body_logits + torch.randn(task.body_logits.shape, generator=g, dtype=torch.float64)
    new = {(p, ans, n, t): pr for p, ans, n, t, pr in _enumerate(task, a, b)}
    # the enumeration merges filler sequences; recompute KL per full sequence instead
    kl = 0.0
    pa, pb = torch.softmax(a, -1), torch.softmax(b, -1)
    pa0, pb0 = torch.softmax(task.answer_logits, -1), torch.softmax(task.body_logits, -1)
    L, V = task.max_len, task.n_fillers
    for p in range(task.n_prompts):
        for ans in range(task.n_answers):
            for n in range(L):
                for fills in itertools.product(range(V), repeat=min(n, L - 1)):
                    if n == L - 1:  # truncated: L - 1 fillers, no EOS
                        toks = list(fills)
                    elif n < L - 1:
                        toks = list(fills) + [V]
                    else:
                        continue
                    q = float(pa[p, ans] * math.prod(pb[p, ans, t, k] for t, k in enumerate(toks)))
                    q0 = float(pa0[p, ans] * math.prod(pb0[p, ans, t, k] for t, k in enumerate(toks)))
                    kl += q * math.log(q / q0)
    assert new  # the enumeration ran
    assert exact_metrics(a, b, task)["kl_start"] == pytest.approx(kl / task.n_prompts, rel=1e-10)


def test_sampled_means_agree_with_the_exact_metrics():
    task = make_task(task_seed=5)
    pol = TabularPolicy(task)
    n = 20_000
    prompts = torch.arange(task.n_prompts).repeat(n // task.n_prompts)
    u = torch.rand(prompts.numel(), task.max_len, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    batch = sample(pol.answer_logits, pol.body_logits, prompts, u)
    m = exact_metrics(pol.answer_logits, pol.body_logits, task)
    right = task.right[batch.prompts, batch.answers]
    assert float(right.double().mean()) == pytest.approx(m["p_correct"], abs=0.01)
    assert float(batch.lengths.double().mean()) == pytest.approx(m["length"], abs=0.06)
    assert float(batch.lengths[~right].double().mean()) == pytest.approx(m["len_wrong"], abs=0.08)
    assert float(batch.truncated.double().mean()) == pytest.approx(m["truncated"], abs=0.01)
    # the log-probs of the sampled tokens average to minus the entropy (per token, ratio of expectations)
    lp = token_logp(pol.answer_logits, pol.body_logits, batch).detach()
    assert float(-lp.sum() / batch.mask.sum()) == pytest.approx(m["entropy"], rel=0.02)


def test_common_random_numbers_give_the_same_completions():
    task = make_task()
    u = torch.rand(16, task.max_len, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    prompts = torch.arange(8).repeat(2)
    b1 = sample(task.answer_logits, task.body_logits, prompts, u)
    b2 = sample(task.answer_logits + 1e-9, task.body_logits, prompts, u)
    assert torch.equal(b1.tokens, b2.tokens) and torch.equal(b1.lengths, b2.lengths)
    assert bool((b1.mask.sum(-1) == b1.lengths).all())


def test_make_task_rejects_bad_settings():
    for kw in ({"pass_rates": (0.0, 0.5)}, {"pass_rates": (1.2,)}, {"n_answers": 1}, {"max_len": 2},
               {"init_length": 40.0}, {"n_right": 4}):
        with pytest.raises(ValueError):
            make_task(**kw)


# ---------------------------------------------------------------------------------------------------------------
# training goes through the package's losses
# ---------------------------------------------------------------------------------------------------------------

def test_every_update_calls_policy_loss_with_the_named_variant(monkeypatch):
    seen = []
    real = lab_run.policy_loss

    def spy(*args, **kwargs):
        seen.append(kwargs["variant"].name)
        return real(*args, **kwargs)

    monkeypatch.setattr(lab_run, "policy_loss", spy)
    train(LabConfig(variant="sapo", steps=3, num_iterations=2, minibatches=4), seed=0)
    assert seen == ["sapo"] * (3 * 2 * 4)


def test_a_registry_change_changes_the_lab(monkeypatch):
    """The lab reads the variant from the registry: a variant whose aggregation is swapped trains differently, and
    the same swap through ``pieces`` gives the identical run."""
    from grpo_lessons.core.variants import VARIANTS, get_variant, register

    cfg = LabConfig(variant="grpo", steps=5)
    base = train(cfg, seed=1).final("len_wrong")
    swapped = dataclasses.replace(get_variant("grpo"), name="lab_test_grpo_token_mean", aggregation="token_mean")
    register(swapped)
    try:
        via_registry = train(cfg.replace(variant="lab_test_grpo_token_mean"), seed=1).final("len_wrong")
    finally:
        VARIANTS.unregister("lab_test_grpo_token_mean")
    via_pieces = train(cfg.replace(pieces={"aggregation": "token_mean"}), seed=1).final("len_wrong")
    assert via_registry != base
    assert via_registry == via_pieces


def test_a_run_is_a_function_of_its_seed():
    cfg = LabConfig(variant="dapo", steps=6, dynamic_sampling=True)
    a, b, c = train(cfg, 3), train(cfg, 3), train(cfg, 4)
    assert a.history == b.history
    assert a.history != c.history


def test_the_length_drift_of_grpo_and_not_of_dr_grpo():
    """The first claim in miniature: over 4 seeds GRPO's wrong answers grow from 6 tokens, Dr. GRPO's do not grow."""
    cfg = LabConfig(variant="grpo", steps=100, lr=0.05)
    g = [train(cfg, s).final("len_wrong") for s in range(4)]
    d = [train(cfg.replace(variant="dr_grpo"), s).final("len_wrong") for s in range(4)]
    assert min(g) > 6.5 and max(d) < 6.2


def test_clip_higher_changes_nothing_with_one_pass():
    """With one pass over each batch (four minibatch steps) every ratio stays close to 1: eps_high cannot act."""
    c = get_claim("dapo_clip_higher_entropy").with_knob(1)
    a, b = train(c.arm.replace(steps=10), 0), train(c.base.replace(steps=10), 0)
    assert a.history == b.history
    a2, b2 = train(c.arm.replace(steps=10, num_iterations=2), 0), train(c.base.replace(steps=10, num_iterations=2), 0)
    assert a2.history != b2.history


def test_sapo_and_cispo_never_zero_a_token_but_the_clip_does():
    cfg = LabConfig(variant="grpo", steps=20, num_iterations=2, minibatches=4)
    assert train(cfg, 0).mean("zero_grad_share") > 0
    assert train(cfg.replace(variant="sapo"), 0).mean("zero_grad_share") == 0
    assert train(cfg.replace(variant="cispo"), 0).mean("zero_grad_share") == 0


def test_dynamic_sampling_trains_only_informative_groups_and_pays_for_it():
    cfg = LabConfig(variant="dapo", steps=5, dynamic_sampling=True, task={"pass_rates": (0.02, 0.98) * 4})
    run = train(cfg, 0)
    assert all(h["completions_sampled"] > 64 for h in run.history[1:])
    plain = train(cfg.replace(dynamic_sampling=False), 0)
    assert all(h["completions_sampled"] == 64 for h in plain.history[1:])


def test_an_equal_sample_budget_stops_the_run():
    run = train(LabConfig(variant="dapo", steps=1000, max_completions=640, dynamic_sampling=True), 0)
    assert run.history[-1]["completions"] >= 640 > run.history[-2]["completions"]


def test_probe_gradient_bias_falls_with_truncated_importance_sampling():
    cfg = LabConfig(variant="grpo", sampler_shift=0.8)
    plain = probe(cfg, 0, batches=32)["grad_bias"]
    tis = probe(cfg.replace(rollout_correction="token_truncate"), 0, batches=32)["grad_bias"]
    assert tis < plain
    assert math.isnan(probe(LabConfig(), 0, batches=2)["grad_bias"])  # no sampler mismatch: nothing to compare


def test_rloo_advantages_are_the_group_mean_ones_times_g_over_g_minus_1():
    base = probe(LabConfig(variant="rloo", pieces={"advantage_scale": "none"}), 0, batches=8)["adv_abs"]
    rloo = probe(LabConfig(variant="rloo"), 0, batches=8)["adv_abs"]
    assert rloo == pytest.approx(base * 8 / 7, rel=1e-12)


@pytest.mark.parametrize("bad, match", [
    ({"group_size": 1}, "group_size"), ({"steps": 0}, "steps"), ({"lr": float("nan")}, "lr"),
    ({"optimizer": "rmsprop"}, "optimizer"), ({"prompts_per_step": 9}, "prompts_per_step"),
    ({"minibatches": 5}, "minibatches"), ({"reward": "nope"}, "reward"),
    ({"rollout_correction": "token_truncate"}, "sampler_shift"), ({"pieces": {"clip": "x"}}, "pieces"),
    ({"pieces": {"aggregation": "nope"}}, "aggregation"), ({"variant": "nope"}, "variant"),
])
def test_bad_settings_are_refused(bad, match):
    with pytest.raises(ValueError, match=match):
        train(LabConfig(steps=1).replace(**bad), 0)


def test_a_reward_that_returns_nan_is_an_error_not_a_number():
    from grpo_lessons.lab.run import LAB_REWARDS, register_lab_reward

    register_lab_reward("lab_test_nan", lambda task, batch, cfg, g: torch.full((batch.lengths.numel(),), math.nan))
    try:
        with pytest.raises(ValueError, match="non-finite"):
            train(LabConfig(steps=1, reward="lab_test_nan"), 0)
    finally:
        LAB_REWARDS.unregister("lab_test_nan")


# ---------------------------------------------------------------------------------------------------------------
# claims: single-change arms, the verdict rule, Holm
# ---------------------------------------------------------------------------------------------------------------

#: What a claim's arms may differ in: the paper's change, nothing shared (task, seed schedule, steps ...).
CHANGES = {"variant", "pieces", "loss_options", "dynamic_sampling", "mask_truncated", "overlong_cache", "beta",
           "entropy_coef", "rollout_correction", "rollout_clip_min", "rollout_clip_max", "typicality_bias",
           "group_size", "prompts_per_step"}


@pytest.mark.parametrize("name", list(CLAIMS))
def test_a_claims_arms_differ_only_in_the_papers_change(name):
    c = get_claim(name)
    diff = arm_difference(c)
    assert diff and set(diff) <= CHANGES, f"{name}: arms differ in {sorted(diff)}"
    if "group_size" in diff or "prompts_per_step" in diff:  # 2-GRPO: G and prompts per step together, nothing else
        assert set(diff) <= {"group_size", "prompts_per_step"}
    if c.sweep is not None:
        for v in c.sweep[1]:
            assert arm_difference(c.with_knob(v)).keys() <= set(diff) | {c.sweep[0]}


@pytest.mark.parametrize("name", [n for n, c in CLAIMS.items() if c.reduce != "probe"])
def test_a_claims_arms_share_the_first_batch_and_differ_after_it(name, monkeypatch):
    """Run both arms five steps through the public entry point: the first sampled batch is the same (common random
    numbers) unless the arms differ in what they sample, and the updated policies differ."""
    c = get_claim(name)
    batches = []
    real = lab_run._sample_batch

    def spy(task, tables, cfg, prompts, g):
        out = real(task, tables, cfg, prompts, g)
        batches.append(out[0])
        return out

    monkeypatch.setattr(lab_run, "_sample_batch", spy)
    steps = 5
    ra, rb = train(c.arm.replace(steps=steps, max_completions=None), 0), train(c.base.replace(steps=steps,
                                                                                              max_completions=None), 0)
    a_first, b_first = batches[0], batches[steps]
    sampling = {"dynamic_sampling", "group_size", "prompts_per_step"} & set(arm_difference(c))
    if not sampling:
        assert torch.equal(a_first.tokens, b_first.tokens)
    keys = ["p_correct", "len_wrong", "entropy", "kl_start"]
    assert [[h[k] for k in keys] for h in ra.history] != [[h[k] for k in keys] for h in rb.history], (
        f"{name}: arms did not differ")


def test_claim_verdict_follows_the_interval_and_the_papers_sign():
    up = Interval(1.0, 0.5, 1.5, 20, 1.0)
    down = Interval(-1.0, -1.5, -0.5, 20, 1.0)
    both = Interval(0.1, -0.2, 0.4, 20, 1.0)
    assert claim_verdict(up, "+") == "reproduced" and claim_verdict(up, "-") == "reversed"
    assert claim_verdict(down, "-") == "reproduced" and claim_verdict(down, "+") == "reversed"
    assert claim_verdict(both, "+") == claim_verdict(both, "-") == "not reproduced"
    with pytest.raises(ValueError):
        claim_verdict(Interval(1.0, None, None, 1, None), "+")
    with pytest.raises(ValueError):
        claim_verdict(up, "up")
    with pytest.raises(ValueError):
        claim_verdict(Interval(math.inf, math.inf, math.inf, 3, 0.0), "+")
    same = mean_interval([0.25, 0.25, 0.25])
    assert claim_verdict(same, "+") == "reproduced" and t_test_p(same) == 0.0


def test_t_test_p_and_holm_by_hand():
    iv = mean_interval([1.0, 2.0, 3.0])  # t = 2 / (1 / sqrt 3) = 3.4641, df 2
    assert t_test_p(iv) == pytest.approx(0.0741799, rel=1e-5)
    assert holm([0.01, 0.04, 0.03, None, 0.5]) == [0.04, pytest.approx(0.09), pytest.approx(0.09), None, 0.5]
    with pytest.raises(ValueError):
        holm([0.2, float("nan")])


def test_run_claim_pairs_by_seed_and_a_fresh_range_is_another_sample():
    c = get_claim("gdpo_distinct_advantages")
    r = run_claim(c, seeds=3, first_seed=0)
    assert list(r["values"]["variant"]) == [0, 1, 2]
    diffs = [r["values"]["variant"][s] - r["values"]["baseline"][s] for s in range(3)]
    assert r["diff"] == pytest.approx(sum(diffs) / 3)
    assert run_claim(c, seeds=3, first_seed=10)["diff"] != r["diff"]
    with pytest.raises(ValueError, match="2 seeds"):
        run_claim(c, seeds=1)


def test_a_claim_needs_two_different_arms_and_a_known_metric():
    cfg = LabConfig()
    with pytest.raises(ValueError, match="same configuration"):
        Claim(name="x", paper="", statement="", variant_label="a", baseline_label="b", arm=cfg, base=cfg,
              metric="p_correct", direction="+")
    with pytest.raises(ValueError, match="metric"):
        Claim(name="x", paper="", statement="", variant_label="a", baseline_label="b", arm=cfg.replace(lr=1.0),
              base=cfg, metric="accuracy", direction="+")


def test_rows_round_trip_through_csv(tmp_path):
    rows = with_holm([{"claim": "a", "variant": "v", "baseline": "b", "metric": "m", "paper_direction": "+",
                       "seeds": 20, "diff": 0.5, "low": 0.1, "high": 0.9, "verdict": "reproduced",
                       "regime": "x; y", "p": 0.01},
                      {"claim": "b", "variant": "v", "baseline": "b", "metric": "m", "paper_direction": "-",
                       "seeds": 20, "diff": 0.5, "low": -0.1, "high": 1.1, "verdict": "not reproduced",
                       "regime": "z", "p": 0.2}])
    write_rows(rows, tmp_path / "t.csv")
    back = read_rows(tmp_path / "t.csv")
    assert [r["claim"] for r in back] == ["a", "b"] and back[0]["p_holm"] == pytest.approx(0.02)
    assert back[1]["low"] == -0.1 and back[0]["seeds"] == 20


# ---------------------------------------------------------------------------------------------------------------
# the committed table and the command line
# ---------------------------------------------------------------------------------------------------------------

def test_the_committed_table_has_every_claim_with_twenty_seeds_and_honest_verdicts():
    rows = read_rows(TABLE)
    assert list(rows[0]) == COLUMNS
    assert [r["claim"] for r in rows] == list(CLAIMS)  # every registered claim, in the registry's order
    assert len(rows) >= 18
    for r in rows:
        c = get_claim(r["claim"])
        assert r["seeds"] >= 20
        assert r["metric"] == c.metric and r["paper_direction"] == c.direction
        iv = Interval(r["diff"], r["low"], r["high"], r["seeds"], 1.0)
        assert r["verdict"] == claim_verdict(iv, r["paper_direction"]), r["claim"]
        assert r["low"] <= r["diff"] <= r["high"]
    adj = holm([r["p"] for r in rows])
    assert [r["p_holm"] for r in rows] == pytest.approx(adj, rel=1e-5)


def test_every_claim_has_its_figure():
    for name in CLAIMS:
        assert (TABLE.parent / "figures" / f"{name}.png").is_file(), name


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "grpo_lessons.training.cli", "lab", *args], capture_output=True,
                          text=True, cwd=ROOT)


def test_cli_list_names_every_claim():
    out = _cli("--list")
    assert out.returncode == 0, out.stderr
    for name in CLAIMS:
        assert name in out.stdout


def test_cli_help_explains_every_column():
    out = _cli("--help")
    assert out.returncode == 0
    for col in COLUMNS:
        assert f"{col}:" in out.stdout


def test_cli_reprints_the_committed_dr_grpo_row(tmp_path):
    """`grpo-lessons lab --claim dr_grpo_wrong_length --seeds 20` gives the committed row (same numbers, verdict)."""
    out = _cli("--claim", "dr_grpo_wrong_length", "--seeds", "20", "--quiet", "--csv", str(tmp_path / "r.csv"))
    assert out.returncode == 0, out.stderr
    row = read_rows(tmp_path / "r.csv")[0]
    committed = next(r for r in read_rows(TABLE) if r["claim"] == "dr_grpo_wrong_length")
    assert row["verdict"] == committed["verdict"] == "reproduced"
    for k in ("diff", "low", "high"):
        assert row[k] == pytest.approx(committed[k], rel=1e-5)
    assert "reproduced" in out.stdout


def test_cli_errors_are_one_line():
    out = _cli("--claim", "no_such_claim")
    assert out.returncode == 2 and "unknown claim" in out.stderr and "Traceback" not in out.stderr
    out = _cli("--claim", "dr_grpo_wrong_length", "--seeds", "1")
    assert out.returncode == 2 and "2 seeds" in out.stderr


def test_the_benchmark_quick_path_through_its_entry_point(tmp_path):
    sys.path.insert(0, str(ROOT))
    try:
        from benchmarks import claims as script
    finally:
        sys.path.remove(str(ROOT))
    assert script.main(["--quick", "--out", str(tmp_path), "--workers", "1", "--no-figures"]) == 0
    rows = read_rows(tmp_path / "claims.csv")
    assert [r["claim"] for r in rows] == list(script.QUICK_CLAIMS)
    assert all(r["seeds"] == 3 for r in rows)
    assert (tmp_path / "RESULT.md").read_text().count("| `") >= 2 * len(rows)
