"""MkDocs hook: the claims table, generated from the committed CSV at build time.

A page that holds ``<!-- claims-table -->`` gets the table of ``benchmarks/results/claims/claims.csv`` (one row per
claim: arms, metric, the paper's sign, seeds, the paired difference with its 95 % interval, the verdict, Holm's p);
``<!-- claims-details -->`` gets one section per claim (what the paper claims, the arms, the metric, the regime and the
sweep, the figure, the notebook that runs it).  The page cannot drift from the committed table because it is read
from it; a claim registered in the package but missing from the table fails the build.
"""

from __future__ import annotations

from pathlib import Path

from mkdocs.exceptions import PluginError

ROOT = Path(__file__).resolve().parents[2]
TABLE_MARKER = "<!-- claims-table -->"
DETAILS_MARKER = "<!-- claims-details -->"


def _rows():
    from grpo_lessons.course.viz.lab import CLAIMS, claims_table

    rows = claims_table(ROOT / "benchmarks" / "results" / "claims" / "claims.csv")
    missing = sorted(set(CLAIMS) - {r["claim"] for r in rows})
    if missing:
        raise PluginError(f"claims registered but not in the committed table: {missing} "
                          "(run python benchmarks/claims.py --claims ... --merge)")
    return rows


def table() -> str:
    from grpo_lessons.course.viz.lab import format_claims_table, verdict_counts

    rows = _rows()
    c = verdict_counts(rows)
    survive = sum(1 for r in rows if r["p_holm"] is not None and r["p_holm"] < 0.05)
    head = (f"**{len(rows)} claims: {c['reproduced']} reproduced, {c['not reproduced']} not reproduced, "
            f"{c['reversed']} reversed**; {survive} of the {len(rows)} differences keep p < 0.05 after Holm's "
            "correction over the whole table.\n\n")
    return head + format_claims_table(rows)


def details() -> str:
    from grpo_lessons.course.viz.lab import describe, get_claim

    out = []
    for r in _rows():
        c = get_claim(r["claim"])
        nb = f" Runs live at the end of [notebook {c.notebook[:2]}](notebooks/{c.notebook})." if c.notebook else ""
        fig = f"benchmarks/results/claims/figures/{r['claim']}.png"
        out.append("\n".join([
            f"### `{r['claim']}`",
            "",
            describe(r["claim"]) + nb,
            "",
            f"**{r['verdict']}**: {r['variant']} minus {r['baseline']} = {r['diff']:+.4g} "
            f"[{r['low']:+.4g}, {r['high']:+.4g}] over {r['seeds']} paired seeds (the paper predicts "
            f"{r['paper_direction']}).",
            "",
            f"Regime: {r['regime']}.",
            "",
            f"![{r['claim']}: paired seeds and the interval along the knob]({fig})" if (ROOT / fig).is_file() else "",
            "",
        ]))
    return "\n".join(out)


def on_page_markdown(markdown: str, page, config, files) -> str:
    if TABLE_MARKER in markdown:
        markdown = markdown.replace(TABLE_MARKER, table())
    if DETAILS_MARKER in markdown:
        markdown = markdown.replace(DETAILS_MARKER, details())
    return markdown
