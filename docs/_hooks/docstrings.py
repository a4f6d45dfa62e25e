"""MkDocs hook: Sphinx roles in the package's docstrings, as links on the API reference pages.

The docstrings use reStructuredText roles (``:func:`~grpo_lessons.core.kl.kl_estimate```), which Markdown renders
as the literal role followed by code.  On the API pages each role becomes a cross-reference that mkdocs-autorefs
resolves (``~`` shows only the last name, as in Sphinx; an unknown target stays plain code), and a mention of a
course notebook (``notebooks/02_group_advantages.ipynb``) links to its page.
"""

from __future__ import annotations

import html
import posixpath
import re

ROLE = re.compile(r":(?:py:)?(?:func|class|meth|attr|data|mod|obj|exc|const):<code>(~?)([\w.]+)(\(\))?</code>")
NOTEBOOK = re.compile(r"<code>(?:\.\./)?notebooks/(\d\d_\w+)\.ipynb</code>")


def _role(match: re.Match) -> str:
    tilde, target, call = match.group(1), match.group(2), match.group(3) or ""
    shown = target.rsplit(".", 1)[-1] if tilde else target
    code = f"<code>{html.escape(shown + call)}</code>"
    if "." not in target:
        return code  # a bare name: no module to resolve it against
    return f'<autoref identifier="{html.escape(target)}" optional>{code}</autoref>'


def on_page_content(content: str, page, config, files) -> str:
    if not page.file.src_uri.startswith("reference/"):
        return content
    content = ROLE.sub(_role, content)
    to_root = posixpath.relpath(".", page.url or ".") if page.url else "."
    return NOTEBOOK.sub(lambda m: f'<a href="{to_root}/notebooks/{m.group(1)}/"><code>{m.group(1)}</code></a>',
                        content)
