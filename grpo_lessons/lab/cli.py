"""``grpo-lessons lab``: the claims table from the command line (torch only).

    grpo-lessons lab --list                                        # every claim: name, paper, metric, direction
    grpo-lessons lab --claim dr_grpo_wrong_length --seeds 20       # rerun one claim, print its row
    grpo-lessons lab --claim dr_grpo_wrong_length --seeds 20 --first-seed 100   # fresh seeds: an out-of-sample check
    grpo-lessons lab --claim gspo_stale_batches --sweep            # the row at every value of the swept knob
    grpo-lessons lab --claim dapo_soft_overlong --csv row.csv      # the row as CSV (the table's columns)

The committed table (``benchmarks/results/claims/claims.csv``) was made with ``--first-seed 0 --seeds 20``; rerunning
with those settings reprints the committed numbers exactly, and a fresh range of seeds is an independent check of the
verdict.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from collections.abc import Sequence

__all__ = ["main", "build_parser"]


def _column_help() -> str:
    from .claims import COLUMN_DOCS, COLUMNS

    lines = ["columns of a row:"]
    for c in COLUMNS:
        lines.append(textwrap.fill(f"{c}: {COLUMN_DOCS[c]}", width=100, initial_indent="  ",
                                   subsequent_indent="      "))
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    """The ``grpo-lessons lab`` parser (its epilog explains every column of a row)."""
    p = argparse.ArgumentParser(
        prog="grpo-lessons lab",
        description="Rerun a claim of the claims table: two arms that differ only in a paper's change, trained on an "
                    "exact tabular policy with the package's own losses, paired by seed.",
        epilog=_column_help(), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--list", action="store_true", help="list the claims and exit")
    p.add_argument("--claim", metavar="NAME", help="the claim to run (see --list)")
    p.add_argument("--seeds", type=int, default=20, help="number of paired seeds (default 20, at least 2)")
    p.add_argument("--first-seed", type=int, default=0, help="the first seed; the run uses first-seed .. "
                   "first-seed + seeds - 1 (default 0, as the committed table)")
    p.add_argument("--sweep", action="store_true", help="run the claim at every value of its swept knob")
    p.add_argument("--csv", metavar="PATH", help="also write the row(s) to PATH as CSV")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    return p


def _list() -> int:
    from .claims import CLAIMS

    w = max(len(n) for n in CLAIMS)
    for name, c in CLAIMS.items():
        sweep = f"; sweeps {c.sweep[0]}" if c.sweep else ""
        print(f"{name:<{w}}  {c.metric} ({c.direction}): {c.variant_label} vs {c.baseline_label}")
        print(f"{'':<{w}}  {c.statement} [{c.paper}]{sweep}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``grpo-lessons lab``; returns the exit status (2 with one line on stderr for bad input)."""
    args = build_parser().parse_args(argv)
    from .claims import COLUMNS, format_row, get_claim, run_claim, run_sweep, sweep_summary, write_rows

    if args.list:
        return _list()
    if not args.claim:
        print("grpo-lessons lab: error: give --claim NAME (or --list)", file=sys.stderr)
        return 2
    try:
        claim = get_claim(args.claim)
        progress = None if args.quiet else (lambda s: print(f"  {s}", file=sys.stderr, flush=True))
        if args.sweep:
            rows = run_sweep(claim, args.seeds, args.first_seed, progress=progress)
            if not rows:
                print(f"grpo-lessons lab: claim {claim.name!r} has no sweep", file=sys.stderr)
                return 2
            for r in rows:
                print(f"{r['knob']} = {r['value']}: {format_row(r)}  ({r['seconds']:.1f} s)")
            print(sweep_summary(claim, rows))
        else:
            rows = [run_claim(claim, args.seeds, args.first_seed, progress=progress)]
            r = rows[0]
            print(format_row(r))
            print("  " + ", ".join(f"{k}={r[k]}" for k in COLUMNS if k not in ("p_holm",)))
            print(f"  {r['seconds']:.1f} s for {2 * r['seeds']} runs")
        if args.csv:
            write_rows(rows, args.csv, COLUMNS + (["knob", "value"] if args.sweep else []))
    except ValueError as e:
        print(f"grpo-lessons lab: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
