"""MkDocs hook: the variant registry as a table, generated from the package at build time.

A page that holds the line ``<!-- registry-table -->`` gets, in its place, one entry per registered variant: name and
title, citation, notebook, pieces, the loss defaults ``policy_loss`` reads, the TRL ``GRPOConfig`` fields, the notes.
The table cannot drift from the package because it is read from it.
"""

from __future__ import annotations

from mkdocs.exceptions import PluginError

MARKER = "<!-- registry-table -->"


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _fields(mapping) -> str:
    return ", ".join(f"`{k}={v!r}`" for k, v in mapping.items()) if mapping else ""


def registry_table() -> str:
    """One list item per registered variant (a list, not a table: the TRL fields need the width)."""
    from grpo_lessons.core.variants import VARIANTS

    if not VARIANTS:
        raise PluginError("the variant registry is empty")
    items = []
    for v in VARIANTS.values():
        nb = f"; [notebook {v.notebook[:2]}](../notebooks/{v.notebook})" if v.notebook else ""
        trl = _fields(v.trl) or "not in TRL 1.16: use `GRPOLessonsTrainer`"
        lines = [f"* **`{v.name}`** ({_cell(v.title)}) — {_cell(v.citation)}{nb}",
                 f"    * pieces: advantages `{v.advantage_scale}`, ratio `{v.ratio_level}`, objective `{v.objective}`, "
                 f"aggregation `{v.aggregation}`",
                 f"    * loss defaults: {_fields(v.loss_defaults) or 'none'}",
                 f"    * TRL `GRPOConfig`: {trl}"]
        if v.notes:
            lines.append(f"    * notes: {_cell(v.notes)}")
        items.append("\n".join(lines))
    return "\n".join(items)


def on_page_markdown(markdown: str, page, config, files) -> str:
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, registry_table())
