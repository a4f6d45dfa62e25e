"""The course site: ``mkdocs build --strict`` succeeds with no warning, every notebook is a page with its figures,
the API reference is generated, and the README and the site's own pages stay free of development notes.

The full build executes every notebook (the short path, cached by notebook and inputs) and is shared with the
browser test (``site_build.py``).  The pieces the build relies on are also tested on their own, cheaply: the strict
build fails on a broken link, widgets become static snapshots, links point at pages, the registry table lists every
variant, Sphinx roles become links.
"""

from __future__ import annotations

import fnmatch
import importlib.util
import json
import re
import subprocess
import sys
from functools import lru_cache
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from tests.site_build import EXECUTED, ROOT, build_site, executes_all

pytest.importorskip("mkdocs", reason="the docs extra is not installed (pip install -e '.[docs]')")

HOOKS = ROOT / "docs" / "_hooks"
NOTEBOOKS = sorted(p.stem for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
# pages written for readers: no internal file names, no development history
FORBIDDEN = re.compile(r"(?-i:REFERENCES)|PROBE\.md|tests/|test_\w+\.py|\bissue #?\d|\bthe spec\b|previous session|"
                       r"before this work|\bTODO\b", re.IGNORECASE)
OWN_PAGES = [ROOT / "README.md"] + sorted(p for p in (ROOT / "docs").rglob("*.md") if "_hooks" not in p.parts)


def _hook(name: str):
    spec = importlib.util.spec_from_file_location(f"_site_hook_{name}", HOOKS / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    return build_site(tmp_path_factory)


def test_strict_build_has_no_warnings(site):
    log = site["log"]
    problems = [line for line in log.splitlines() if re.match(r"\s*(WARNING|ERROR)\b", line)]
    assert site["returncode"] == 0 and not problems, "\n".join(problems) or log[-4000:]
    print(f"site built in {site['seconds']} s")


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_every_notebook_is_a_page_with_its_outputs(site, name):
    page = site["site"] / "notebooks" / name / "index.html"
    assert page.exists(), f"no page for {name}"
    html = page.read_text(encoding="utf-8")
    assert 'class="jp-InputPrompt' in html or "jp-InputArea" in html
    assert (page.parent / f"{name}.ipynb").exists(), f"{name}: no notebook to download"
    assert f'<a href="{name}.ipynb" download>' in html
    if not (executes_all() or any(fnmatch.fnmatch(name, p) for p in EXECUTED)):
        return  # not executed by this build (the suite runs it under nbval); `make docs` executes every notebook
    assert "jp-OutputArea-output" in html, f"{name}: rendered without outputs"
    # a widget is replaced by what it drew; nothing is left for a missing widget manager to fail on
    assert "application/vnd.jupyter.widget-view+json" not in html and "interactive(children=" not in html
    source = json.loads((ROOT / "notebooks" / f"{name}.ipynb").read_text())
    if any("plt." in "".join(c["source"]) or "_widget(" in "".join(c["source"])
           for c in source["cells"] if c["cell_type"] == "code"):
        assert "data:image/png;base64," in html, f"{name}: draws figures, but the page shows none"


class _Page(HTMLParser):
    """The ids (and ``<a name>``) a page defines and the ``href`` of every element on it."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.ids: set[str] = set()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if a.get("id"):
            self.ids.add(a["id"])
        if tag == "a" and a.get("name"):
            self.ids.add(a["name"])
        if a.get("href") is not None:
            self.hrefs.append(a["href"])


@lru_cache(maxsize=None)
def _parse(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8", errors="replace"))
    return page


def broken_links(site_dir: Path) -> list[str]:
    """Every ``href`` on every page of a built site that leads nowhere: a relative link to a file that does not exist,
    or a ``#fragment`` that no element of its target page has as its id.  Links off the site are not followed."""
    site_dir = site_dir.resolve()
    problems = []
    for page in sorted(site_dir.rglob("*.html")):
        for href in _parse(page).hrefs:
            parts = urlsplit(href)
            if parts.scheme or parts.netloc or href.startswith("//"):
                continue  # https:, mailto:, data: ...
            path, fragment = unquote(parts.path), unquote(parts.fragment)
            if not path:
                target = page
            else:
                target = (site_dir / path.lstrip("/")) if path.startswith("/") else (page.parent / path)
                target = target.resolve()
                if target.is_dir():
                    target = target / "index.html"
            where = f"{page.relative_to(site_dir)}: {href}"
            if not target.is_file():
                problems.append(f"{where} (no such file)")
            elif fragment and target.suffix == ".html" and fragment not in _parse(target).ids:
                problems.append(f"{where} (no id {fragment!r} on {target.relative_to(site_dir)})")
    return problems


def test_link_checker_finds_missing_pages_and_anchors(tmp_path):
    """The checker itself, on a hand-made site: it passes good links and reports each kind of broken one."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "index.html").write_text('<h2 id="x">X</h2><a name="old">o</a><a href="#x">self</a>')
    (tmp_path / "style.css").write_text("")
    (tmp_path / "a" / "index.html").write_text(
        '<link href="../style.css" rel="stylesheet"><h1 id="top">A</h1>'
        '<a href="#top">ok</a> <a href="../b/#x">ok</a> <a href="../b/index.html#old">ok</a> '
        '<a href="https://example.org/#nowhere">off site</a> <a href="mailto:a@b.c">mail</a> '
        '<a href="#nope">1</a> <a href="../b/#3-never-a-models-answer">2</a> <a href="../c/">3</a> '
        '<a href="../b/x.ipynb" download>4</a>')
    assert broken_links(tmp_path) == [
        "a/index.html: #nope (no id 'nope' on a/index.html)",
        "a/index.html: ../b/#3-never-a-models-answer (no id '3-never-a-models-answer' on b/index.html)",
        "a/index.html: ../c/ (no such file)",
        "a/index.html: ../b/x.ipynb (no such file)",
    ]


def test_every_link_on_the_site_leads_somewhere(site):
    """Every href of every built page, the in-page anchors of the tables of contents included."""
    problems = broken_links(site["site"])
    assert not problems, f"{len(problems)} broken link(s):\n" + "\n".join(problems[:40])


def test_api_reference_is_generated_from_the_docstrings(site):
    core = (site["site"] / "reference" / "core" / "index.html").read_text(encoding="utf-8")
    for obj in ("grpo_lessons.core.losses.policy_loss", "grpo_lessons.core.advantages.group_advantages",
                "grpo_lessons.core.kl.kl_estimate"):
        assert f'id="{obj}"' in core, f"{obj} missing from the API reference"
    assert ":func:<code>" not in core  # Sphinx roles were turned into links
    for layer in ("training", "integrations", "course"):
        assert (site["site"] / "reference" / layer / "index.html").exists()
    # the exercises' reference solutions stay off the site
    assert 'id="grpo_lessons.course.exercise_bank' not in "".join(
        p.read_text(encoding="utf-8") for p in (site["site"] / "reference").rglob("*.html"))


def test_results_page_shows_the_committed_figures(site):
    html = (site["site"] / "results" / "index.html").read_text(encoding="utf-8")
    figures = re.findall(r'<img[^>]+src="([^"]+\.png)"', html)
    assert len(figures) >= 5, figures
    for src in figures:
        assert (site["site"] / "results" / src).resolve().exists(), f"results page: missing figure {src}"


def test_readme_is_a_short_landing_page():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.encode()) <= 15_000, f"README is {len(text.encode())} bytes"
    assert "make lab" in text and "make test" in text  # the two commands, exactly as CI and readers use them
    for link in re.findall(r"\]\((docs/[^)#]+)", text):
        assert (ROOT / link).exists(), f"README links to a missing page: {link}"


@pytest.mark.parametrize("path", OWN_PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_pages_have_no_internal_names_or_history(path):
    hits = [m.group(0) for m in FORBIDDEN.finditer(path.read_text(encoding="utf-8"))]
    assert not hits, f"{path.relative_to(ROOT)}: {hits}"


def test_strict_build_fails_on_a_broken_link(tmp_path):
    """The mechanism the site test relies on: a warning (here a link to a missing page) fails a strict build."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# Home\n\nSee [the missing page](missing.md).\n")
    (tmp_path / "mkdocs.yml").write_text("site_name: t\nstrict: true\nvalidation:\n  anchors: warn\n")
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "s")],
                          cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode != 0 and "missing.md" in proc.stdout + proc.stderr
    (docs / "index.md").write_text("# Home\n")
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "s")],
                          cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_widget_becomes_its_snapshot():
    nb_hook = _hook("notebooks")
    png = {"output_type": "display_data", "metadata": {}, "data": {"image/png": "iVBORw0KGgo=", "text/plain": "<Figure>"}}
    state = {
        "box": {"model_name": "VBoxModel", "state": {"children": ["IPY_MODEL_eps", "IPY_MODEL_kind", "IPY_MODEL_pick",
                                                                 "IPY_MODEL_out"]}},
        "eps": {"model_name": "FloatSliderModel", "state": {"description": "epsilon", "value": 0.2}},
        "kind": {"model_name": "DropdownModel", "state": {"description": "kind", "index": 1,
                                                           "_options_labels": ["k1", "k3"]}},
        "pick": {"model_name": "SelectMultipleModel", "state": {"description": "variants", "index": [0, 2],
                                                                 "_options_labels": ["grpo", "dapo", "gspo"]}},
        "out": {"model_name": "OutputModel", "state": {"outputs": [png]}},
    }
    nb = {"metadata": {"widgets": {"application/vnd.jupyter.widget-state+json": {"state": state}}},
          "cells": [{"cell_type": "code", "source": "w", "outputs": [
              {"output_type": "execute_result", "metadata": {},
               "data": {"application/vnd.jupyter.widget-view+json": {"model_id": "box"},
                        "text/plain": "interactive(children=(...))"}}]}]}
    assert nb_hook._static_widgets(nb) == 1
    outs = nb["cells"][0]["outputs"]
    assert "epsilon = 0.2, kind = k3, variants = grpo, gspo" in outs[0]["data"]["text/html"]
    assert outs[1]["data"]["image/png"] == "iVBORw0KGgo=" and "widgets" not in nb["metadata"]
    assert not any("application/vnd.jupyter.widget-view+json" in o.get("data", {}) for o in outs)


def test_nbval_markers_leave_the_site():
    nb_hook = _hook("notebooks")
    nb = {"cells": [
        {"cell_type": "code", "source": ["# NBVAL_CHECK_OUTPUT\n", "print(1)  # NBVAL_CHECK_OUTPUT stays here\n"]},
        {"cell_type": "code", "source": "x = 2\n  # NBVAL_IGNORE_OUTPUT\ny = 3"},
        {"cell_type": "markdown", "source": "Cells marked `# NBVAL_CHECK_OUTPUT` are compared."}]}
    assert nb_hook._strip_test_markers(nb) == 2
    assert nb["cells"][0]["source"] == "print(1)  # NBVAL_CHECK_OUTPUT stays here\n"
    assert nb["cells"][1]["source"] == "x = 2\ny = 3"
    assert nb["cells"][2]["source"] == "Cells marked `# NBVAL_CHECK_OUTPUT` are compared."


def test_code_in_a_heading_keeps_its_contents_link(tmp_path):
    """A heading with inline code: the page's table of contents links to the id the rendered heading has."""
    from mkdocs_jupyter import convert
    from mkdocs_jupyter.plugin import _get_nb_toc_tokens

    nb_hook = _hook("notebooks")
    source = ("# Title\n\n## 3. Never `eval` a model's answer\n\nText with `code`.\n\n"
              "```python\n# a comment with `ticks`\n```\n\n## Exercise: a reward for `\\boxed{}` answers\n")
    nb = {"cells": [{"cell_type": "markdown", "id": "a", "metadata": {}, "source": source}],
          "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
          "nbformat": 4, "nbformat_minor": 5}
    assert nb_hook._code_in_headings(nb) == 2
    text = nb["cells"][0]["source"]
    assert "## 3. Never <code>eval</code> a model's answer" in text and "Text with `code`." in text
    assert "# a comment with `ticks`" in text  # inside a code fence: not a heading
    path = tmp_path / "t.ipynb"
    path.write_text(json.dumps(nb))
    tokens, _ = _get_nb_toc_tokens(str(path), 6)
    toc = {t["id"]: t["name"] for t in tokens[0]["children"]}
    heading_ids = re.findall(r'<h2 id="([^"]+)"', convert.nb2html(str(path)))
    assert list(toc) == heading_ids == ["3-never-eval-a-models-answer", "exercise-a-reward-for-boxed-answers"]
    assert toc["3-never-eval-a-models-answer"] == "3. Never eval a model's answer"


def test_progress_bar_becomes_its_text():
    nb_hook = _hook("notebooks")
    state = {
        "bar": {"model_name": "HBoxModel", "state": {"children": ["IPY_MODEL_a", "IPY_MODEL_p", "IPY_MODEL_b"]}},
        "a": {"model_name": "HTMLModel", "state": {"value": "Loading\u2007weights:\u2007100%", "description": ""}},
        "p": {"model_name": "FloatProgressModel", "state": {"value": 26.0, "max": 26.0, "description": ""}},
        "b": {"model_name": "HTMLModel", "state": {"value": "\u200726/26\u2007[00:00&lt;00:00]", "description": ""}},
    }
    nb = {"metadata": {"widgets": {"application/vnd.jupyter.widget-state+json": {"state": state}}},
          "cells": [{"cell_type": "code", "source": "train()", "outputs": [
              {"output_type": "display_data", "metadata": {},
               "data": {"application/vnd.jupyter.widget-view+json": {"model_id": "bar"}, "text/plain": "0%|"}}]}]}
    assert nb_hook._static_widgets(nb) == 1
    assert nb["cells"][0]["outputs"] == [{"output_type": "stream", "name": "stdout",
                                          "text": "Loading weights: 100% 26/26 [00:00<00:00]\n"}]


def test_notebook_links_point_at_site_pages():
    nb_hook = _hook("notebooks")
    assert nb_hook._site_link("../docs/notation.md") == "../../notation/"
    assert nb_hook._site_link("../docs/guides/cpu-training.md#models") == "../../guides/cpu-training/#models"
    assert nb_hook._site_link(f"{NOTEBOOKS[1]}.ipynb") == f"../{NOTEBOOKS[1]}/"
    assert nb_hook._site_link("https://arxiv.org/abs/2402.03300") == "https://arxiv.org/abs/2402.03300"


def test_registry_table_lists_every_variant_with_its_trl_fields():
    from grpo_lessons.core.variants import VARIANTS

    table = _hook("registry").registry_table()
    for name, v in VARIANTS.items():
        assert f"**`{name}`**" in table
        for key, value in v.trl.items():
            assert f"`{key}={value!r}`" in table
    gspo = table.split("**`gspo`**")[1].split("\n* ")[0]
    assert "`loss_type='grpo'`" in gspo  # TRL's default loss_type is 'dapo'


def test_sphinx_roles_become_links():
    hook = _hook("docstrings")

    class Page:
        url = "reference/core/"

        class file:
            src_uri = "reference/core.md"

    html = ('<p>:func:<code>~grpo_lessons.core.kl.kl_estimate</code> and :class:<code>Variant</code>, '
            'see <code>notebooks/03_clipped_surrogate_and_kl.ipynb</code></p>')
    out = hook.on_page_content(html, Page, None, None)
    assert '<autoref identifier="grpo_lessons.core.kl.kl_estimate" optional><code>kl_estimate</code></autoref>' in out
    assert "<code>Variant</code>" in out and ":class:" not in out
    assert '<a href="../../notebooks/03_clipped_surrogate_and_kl/">' in out


def test_each_notebook_says_where_its_outputs_are_and_the_site_drops_it():
    hook = _hook("notebooks")
    for name in NOTEBOOKS:
        nb = json.loads((ROOT / "notebooks" / f"{name}.ipynb").read_text(encoding="utf-8"))
        first = "".join(nb["cells"][0]["source"])
        note = [line for line in first.splitlines() if line.startswith(hook.OUTPUTS_NOTE)]
        assert len(note) == 1 and f"site/notebooks/{name}/index.html" in note[0], f"{name}: {note}"
        assert hook._drop_outputs_note(nb) == 1
        assert hook.OUTPUTS_NOTE not in "".join(nb["cells"][0]["source"])
        assert "".join(nb["cells"][0]["source"]).startswith("# ")
