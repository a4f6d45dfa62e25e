"""The claims table: every claim of ``grpo_lessons.lab`` at 20 paired seeds, and along its swept knob.

    python benchmarks/claims.py                       # the whole table into benchmarks/results/claims/ (~15 min)
    python benchmarks/claims.py --claims dr_grpo_wrong_length gdpo_training --out /tmp/claims   # some claims
    python benchmarks/claims.py --quick --out /tmp/claims   # 3 seeds, no sweeps, two claims: the test's path
    python benchmarks/claims.py --claims typicality_bias_collapses --merge   # rerun some claims into the table

Writes ``claims.csv`` (one row per claim, the columns of ``grpo-lessons lab --help``; ``p_holm`` corrects over the
whole table), ``sweeps.csv`` (the same comparison at each value of each claim's knob), ``figures/<claim>.png`` (the
paired seeds and the interval along the knob) and ``RESULT.md`` (the table, the machine, the load and the seconds per
claim).  Each claim runs in a worker process with one torch thread (the lab's tensors are tiny: a second thread only
costs), two workers on a 2-core machine; the numbers do not depend on the number of workers.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from benchmarks._machine import machine  # noqa: E402
from grpo_lessons.lab.claims import (CLAIMS, COLUMNS, get_claim, read_rows, run_claim, run_sweep,  # noqa: E402
                                     sweep_summary, with_holm, write_rows)

OUT = ROOT / "benchmarks" / "results" / "claims"
QUICK_CLAIMS = ("dr_grpo_wrong_length", "gdpo_distinct_advantages")


def _one(name: str, seeds: int, first_seed: int, sweep: bool) -> dict:
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    c = get_claim(name)
    row = run_claim(c, seeds, first_seed)
    rows = run_sweep(c, seeds, first_seed) if sweep else []
    if rows:
        row["regime"] += "; " + sweep_summary(c, rows)
    values = row.pop("values", None)
    for r in rows:
        r.pop("values", None)
    return {"row": row, "sweep": rows, "values": values, "seconds": time.perf_counter() - t0,
            "seconds_headline": row["seconds"]}


def _figure(name: str, row: dict, values: dict | None, sweep: list[dict], path: Path, seeds: int,
            first_seed: int) -> None:
    import matplotlib.pyplot as plt

    from grpo_lessons.course.viz.lab import plot_claim

    live = dict(row, values=values) if values else run_claim(name, seeds, first_seed)  # per-seed values
    fig = plot_claim(live, sweep=sweep or None)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _markdown(rows: list[dict], timings: dict, info: dict, seeds: int, first_seed: int, minutes: float,
              workers: int) -> str:
    from grpo_lessons.course.viz.lab import format_claims_table, verdict_counts

    counts = verdict_counts(rows)
    survive = sum(1 for r in rows if r["p_holm"] is not None and r["p_holm"] < 0.05)
    lines = [
        "# The claims table: each paper's mechanism on an exact policy",
        "",
        f"{len(rows)} claims, each a paired comparison of two arms that differ only in the paper's change, over seeds "
        f"{first_seed}..{first_seed + seeds - 1} (common random numbers: both arms of a seed draw the same uniforms). "
        "Every update goes through the package's `variant_advantages` and `policy_loss` by variant name; every metric "
        "is computed exactly from the policy's tables. `grpo-lessons lab --claim NAME --seeds 20` reprints a row; "
        "`--first-seed 100` checks it on fresh seeds.",
        "",
        f"Verdicts: {counts['reproduced']} reproduced, {counts['not reproduced']} not reproduced, "
        f"{counts['reversed']} reversed (95 % paired t-interval against the paper's sign). "
        f"{survive} of {len(rows)} differences keep p < 0.05 after Holm's correction over the table.",
        "",
        format_claims_table(rows),
        "",
        "## Regimes",
        "",
        "Each row's settings and the verdict at each value of its swept knob (the same 20 seeds):",
        "",
    ]
    for r in rows:
        lines.append(f"- `{r['claim']}`: {r['regime']}")
    lines += [
        "",
        "## Cost",
        "",
        f"- Machine: {info['cpu']}, {info['logical_cpus']} logical CPUs, torch {info['torch']}; {workers} worker "
        f"processes with 1 torch thread each. Load average (1 min) at the start {info['load_average_at_start'][0]}, "
        f"at the end {info['load_average_at_end'][0]} (of the last invocation"
        + (f", a --merge of {', '.join(info['merged'])}" if info.get("merged") else "") + "; sampled at those two "
        "moments only, so other jobs between them are not seen: read the seconds as upper bounds).",
        f"- {minutes:.1f} minutes for the table and its sweeps. Seconds per claim (headline row, {seeds} seeds x 2 "
        "arms, one worker):",
        "",
        "| claim | seconds (row) | seconds (row + sweep) |",
        "|---|---|---|",
    ]
    for r in rows:
        t = timings[r["claim"]]
        lines.append(f"| `{r['claim']}` | {t['seconds_headline']:.1f} | {t['seconds']:.1f} |")
    return "\n".join(lines) + "\n"


def _values(name: str, seeds: int, first_seed: int) -> dict:
    torch.set_num_threads(1)
    return run_claim(name, seeds, first_seed)["values"]


def _figures_only(out: Path, names: list[str], workers: int) -> int:
    rows = {r["claim"]: r for r in read_rows(out / "claims.csv")}
    sweeps = read_rows(out / "sweeps.csv") if (out / "sweeps.csv").is_file() else []
    run = json.loads((out / "run.json").read_text())
    todo = [n for n in names if n in rows]
    with ProcessPoolExecutor(max(1, workers)) as ex:
        vals = dict(zip(todo, ex.map(_values, todo, [run["seeds"]] * len(todo), [run["first_seed"]] * len(todo))))
    for n in todo:
        v = vals[n]
        got = sum(v["variant"][s] - v["baseline"][s] for s in v["variant"]) / len(v["variant"])
        if abs(got - rows[n]["diff"]) > 1e-5 * max(1e-3, abs(rows[n]["diff"])):  # the same seeds, the same numbers
            raise RuntimeError(f"{n}: recomputed diff {got} differs from the table's {rows[n]['diff']}")
        sw = [r for r in sweeps if r["claim"] == n]
        _figure(n, rows[n], vals[n], sw, out / "figures" / f"{n}.png", run["seeds"], run["first_seed"])
        print(f"figures/{n}.png", flush=True)
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--claims", nargs="+", default=None, help="claim names (default: all)")
    p.add_argument("--seeds", type=int, default=20)
    p.add_argument("--first-seed", type=int, default=0)
    p.add_argument("--no-sweep", action="store_true")
    p.add_argument("--no-figures", action="store_true")
    p.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--quick", action="store_true", help="3 seeds, no sweeps, two claims")
    p.add_argument("--figures-only", action="store_true", help="redraw figures/ from the table in --out (the per-seed "
                   "values are recomputed: the same seeds give the same numbers)")
    p.add_argument("--merge", action="store_true", help="replace (or add) the given claims' rows in the existing "
                   "table in --out, keep the others, and redo Holm's correction over all of them")
    args = p.parse_args(argv)
    names = list(args.claims or (QUICK_CLAIMS if args.quick else CLAIMS))
    for n in names:
        get_claim(n)
    seeds = 3 if args.quick else args.seeds
    sweep = not (args.no_sweep or args.quick)
    if args.figures_only:
        return _figures_only(args.out, names, args.workers)
    info = machine()
    t0 = time.perf_counter()
    results: dict[str, dict] = {}
    if args.workers > 1:
        with ProcessPoolExecutor(args.workers) as ex:
            futs = {n: ex.submit(_one, n, seeds, args.first_seed, sweep) for n in names}
            for n, f in futs.items():
                results[n] = f.result()
                print(f"{n}: {results[n]['row']['verdict']} ({results[n]['seconds']:.1f} s)", flush=True)
    else:
        for n in names:
            results[n] = _one(n, seeds, args.first_seed, sweep)
            print(f"{n}: {results[n]['row']['verdict']} ({results[n]['seconds']:.1f} s)", flush=True)
    minutes = (time.perf_counter() - t0) / 60
    info["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    out = args.out
    timings = {n: {"seconds": results[n]["seconds"], "seconds_headline": results[n]["seconds_headline"]}
               for n in names}
    if args.merge and (out / "claims.csv").is_file():
        old_rows = {r["claim"]: r for r in read_rows(out / "claims.csv")}
        old_sweeps = read_rows(out / "sweeps.csv") if (out / "sweeps.csv").is_file() else []
        old_run = json.loads((out / "run.json").read_text())
        for n in CLAIMS:  # the registry's order
            if n not in names and n in old_rows:
                results[n] = {"row": old_rows[n], "sweep": [r for r in old_sweeps if r["claim"] == n]}
                timings[n] = old_run["timings"][n]
        info["merged"] = list(args.claims or [])
        names = [n for n in CLAIMS if n in results]
        minutes += old_run["minutes"]
    rows = with_holm([results[n]["row"] for n in names])
    write_rows(rows, out / "claims.csv")
    sweep_rows = [dict(r, claim=n) for n in names for r in results[n]["sweep"]]
    if sweep_rows:
        write_rows(sweep_rows, out / "sweeps.csv", ["claim", "knob", "value"] + [c for c in COLUMNS[1:]
                                                                                  if c != "p_holm"])
    if not args.no_figures:
        torch.set_num_threads(1)
        for n in (args.claims or names):
            _figure(n, results[n]["row"], results[n].get("values"), results[n]["sweep"], out / "figures" / f"{n}.png",
                    seeds, args.first_seed)
    (out / "RESULT.md").write_text(_markdown(rows, timings, info, seeds, args.first_seed, minutes, args.workers))
    (out / "run.json").write_text(json.dumps({"machine": info, "seeds": seeds, "first_seed": args.first_seed,
                                              "sweep": sweep, "workers": args.workers, "minutes": minutes,
                                              "timings": timings}, indent=1) + "\n")
    print(f"{len(rows)} claims in {minutes:.1f} min -> {out}")
    return 0


if __name__ == "__main__":
    import matplotlib

    matplotlib.use("Agg")  # a script: draw to files only (never in importable code, which notebooks call)
    raise SystemExit(main())
