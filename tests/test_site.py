"""The course site: ``mkdocs build --strict`` succeeds with no warning, every notebook is a page with its figures,
the API reference is generated, and the README and the site's own pages stay free of development notes.

The full build executes every notebook (the short path, cached by notebook and inputs) and is shared with the
browser test (``site_build.py``).  The pieces the build relies on are also tested on their own, cheaply: the strict
build fails on a broken link, widgets become static snapshots, links point at pages, the registry table lists every
variant, Sphinx roles become links.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.site_build import ROOT, build_site

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
    assert "jp-OutputArea-output" in html, f"{name}: rendered without outputs"
    assert 'class="jp-InputPrompt' in html or "jp-InputArea" in html
    # a widget is replaced by what it drew; nothing is left for a missing widget manager to fail on
    assert "application/vnd.jupyter.widget-view+json" not in html and "interactive(children=" not in html
    source = json.loads((ROOT / "notebooks" / f"{name}.ipynb").read_text())
    if any("plt." in "".join(c["source"]) or "_widget(" in "".join(c["source"])
           for c in source["cells"] if c["cell_type"] == "code"):
        assert "data:image/png;base64," in html, f"{name}: draws figures, but the page shows none"
    assert (page.parent / f"{name}.ipynb").exists(), f"{name}: no executed notebook to download"
    assert f'<a href="{name}.ipynb" download>' in html


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
