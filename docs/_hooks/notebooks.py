"""MkDocs hook: the course's notebooks, executed, as pages of the site.

The notebooks are stored without outputs.  Before the site is built, each one is executed (the same short path
the test suite runs: ``GRPO_LESSONS_FAST=1``), a few at a time, into a cache keyed by the notebook and by everything
it can read (the package, the benchmarks and their committed results, the data, the configs).  A notebook that
fails to execute fails the build.  The executed copies are then prepared for a static page:

* a widget cannot move without a kernel, so its output is replaced by what it drew at its starting settings
  (the figures it captured), under a one-line caption that lists those settings; a progress bar becomes its text;
* links to other notebooks and to the site's pages (``../docs/notation.md``, ``08_gspo.ipynb``) point at the
  rendered pages;
* nbval's marker comments (``# NBVAL_CHECK_OUTPUT``) are taken out of the code cells;
* inline code in a heading is written as HTML, so that the page's table of contents keeps it and links to the
  heading's own id.

They are added to the build as ``notebooks/NN_topic.ipynb`` for mkdocs-jupyter to render.

Settings (environment): ``GRPO_LESSONS_DOCS_JOBS`` notebooks executed at once (default: 2, or 1 on one core);
``GRPO_LESSONS_DOCS_CACHE`` the cache folder (default ``.cache/docs-notebooks`` in the repository);
``GRPO_LESSONS_DOCS_EXECUTE`` comma-separated name patterns (``03_*,06_*``): only the notebooks that match are executed
when no executed copy is cached, the others become pages of their source, without outputs.  The test suite's build uses
it: the suite runs every notebook already, and the build needs only a few executed pages to check how they render.
"""

from __future__ import annotations

import concurrent.futures
import copy
import fnmatch
import hashlib
import html
import importlib.metadata
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.plugins import event_priority
from mkdocs.structure.files import File, Files

log = logging.getLogger("mkdocs.hooks.notebooks")

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
# what a notebook can read besides itself: a change to any of these, or to the version of a package below,
# re-executes every notebook
INPUTS = ("grpo_lessons", "benchmarks", "data", "configs")
PACKAGES = ("torch", "numpy", "transformers", "trl", "accelerate", "peft", "matplotlib", "ipywidgets", "ipykernel")
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
RUNNER = Path(__file__).with_name("run_notebook.py")  # nbclient, with the kernel on unix sockets (see there)


def _inputs_digest() -> str:
    """sha256 over the path and bytes of every file a notebook may read, and the versions it runs on."""
    h = hashlib.sha256(sys.version.encode())
    for name in PACKAGES:
        try:
            h.update(f"{name}=={importlib.metadata.version(name)}".encode())
        except importlib.metadata.PackageNotFoundError:
            h.update(f"{name} missing".encode())
    paths = []
    for name in INPUTS:
        p = ROOT / name
        if p.is_file():
            paths.append(p)
        elif p.is_dir():
            paths += [q for q in p.rglob("*") if q.is_file() and "__pycache__" not in q.parts
                      and not q.name.endswith(".pyc")]
    for p in sorted(paths):
        h.update(p.relative_to(ROOT).as_posix().encode())
        h.update(hashlib.sha256(p.read_bytes()).digest())
    return h.hexdigest()


def _execute(src: Path, out: Path, tmp: Path) -> tuple[Path, float, str | None]:
    """Execute ``src`` in its own folder (``run_notebook.py``), into ``out`` only if it succeeds.

    Returns (src, seconds, the end of the error output or None)."""
    env = dict(os.environ, GRPO_LESSONS_FAST="1", HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
               TMPDIR=str(tmp))  # a private temp dir: the test suite may run the same notebook at the same time
    env.pop("MPLBACKEND", None)  # the kernel's inline backend draws the figures
    work = tmp / src.stem
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, str(RUNNER), str(src), str(work / src.name), f"{work}-ipc"],
                          cwd=src.parent, env=env, capture_output=True, text=True)
    seconds = time.monotonic() - t0
    if proc.returncode != 0:
        return src, seconds, (proc.stdout + proc.stderr)[-3000:]
    out.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(work / src.name, out)  # the temp dir may be on another file system
    return src, seconds, None


def _model_state(state: dict, ref: str) -> dict:
    return state.get(ref.removeprefix("IPY_MODEL_"), {}).get("state", {})


def _walk(state: dict, model_id: str, settings: list[str], outputs: list[dict], texts: list[str]) -> None:
    """Collect the controls' settings, the captured outputs and the plain texts of one widget and its children."""
    entry = state.get(model_id, {})
    s = entry.get("state", {})
    name = entry.get("model_name", "")
    if name == "OutputModel":
        outputs += s.get("outputs", [])
    elif name in ("HTMLModel", "LabelModel") and not s.get("description"):
        text = html.unescape(re.sub(r"<[^>]+>", "", str(s.get("value", "")))).replace("\u2007", " ").strip()
        if text:
            texts.append(text)
    elif s.get("description") and ("value" in s or "_options_labels" in s):
        if "_options_labels" in s:  # Dropdown, ToggleButtons ...: ipywidgets 8 keeps the index, not the value
            labels, index = s["_options_labels"], s.get("index")
            if isinstance(index, (list, tuple)):  # SelectMultiple: the indices of every chosen option
                value = ", ".join(labels[i] for i in index if isinstance(i, int) and 0 <= i < len(labels))
            else:
                value = labels[index] if isinstance(index, int) and 0 <= index < len(labels) else None
        else:
            value = s["value"]  # a log slider's too: only its min and max are exponents
        if isinstance(value, float):
            value = f"{value:.3g}"
        label = s["description"].rstrip(": ") or "value"
        settings.append(f"{label} = {value}")
    for child in s.get("children", []):
        _walk(state, child.removeprefix("IPY_MODEL_"), settings, outputs, texts)


def _static_widgets(nb: dict) -> int:
    """Replace each widget view by the outputs its Output widgets captured; return how many were replaced."""
    state = nb.get("metadata", {}).pop("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    replaced = 0
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        new_outputs = []
        for output in cell.get("outputs", []):
            view = output.get("data", {}).get(WIDGET_VIEW)
            if view is None:
                new_outputs.append(output)
                continue
            settings: list[str] = []
            captured: list[dict] = []
            texts: list[str] = []
            _walk(state, view.get("model_id", ""), settings, captured, texts)
            if not settings and not captured:
                # no control and nothing drawn: a progress bar (tqdm) or a label; keep its text, if any
                if texts:
                    new_outputs.append({"output_type": "stream", "name": "stdout", "text": " ".join(texts) + "\n"})
                replaced += 1
                continue
            caption = ("<p class=\"widget-snapshot\"><em>Widget at its starting settings"
                       + (": " + html.escape(", ".join(settings)) if settings else "")
                       + ". Open the notebook in JupyterLab to move the controls.</em></p>")
            new_outputs.append({"output_type": "display_data", "metadata": {},
                                "data": {"text/html": caption}})
            for c in captured:
                c = copy.deepcopy(c)
                if c.get("output_type") in ("display_data", "execute_result"):
                    c = {"output_type": "display_data", "metadata": c.get("metadata", {}), "data": c["data"]}
                    c["data"].pop(WIDGET_VIEW, None)
                new_outputs.append(c)
            replaced += 1
        cell["outputs"] = new_outputs
    return replaced


_LINK = re.compile(r"\]\((?!https?:|mailto:|#)([^)\s]+)\)")


def _site_link(target: str) -> str:
    """A notebook's relative link, as seen from its page ``notebooks/NN_topic/`` on the site."""
    path, _, anchor = target.partition("#")
    anchor = "#" + anchor if anchor else ""
    name = path.rsplit("/", 1)[-1]
    if path.endswith(".ipynb") and (NOTEBOOKS / name).exists():
        return f"../{name[:-len('.ipynb')]}/{anchor}"
    if path.startswith("../docs/") and path.endswith(".md"):
        page = path[len("../docs/"):-len(".md")]
        return f"../../{'' if page == 'index' else page + '/'}{anchor}"
    return target


def _fix_links(nb: dict) -> None:
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown":
            src = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
            cell["source"] = _LINK.sub(lambda m: "](" + _site_link(m.group(1)) + ")", src)


# a Markdown heading, an inline code span, a code fence
_HEADING = re.compile(r"#{1,6}[ \t]")
_CODE_SPAN = re.compile(r"`([^`\n]+)`")
_FENCE = re.compile(r"[ \t]*(```|~~~)")


def _code_in_headings(nb: dict) -> int:
    """Write inline code in a heading as ``<code>`` (``## Never `eval` it`` -> ``## Never <code>eval</code> it``).

    mkdocs-jupyter builds a page's table of contents from the notebook's Markdown after deleting every backtick
    span, so a heading with inline code got a contents entry without the code and a link to an id the heading does
    not have; as HTML the code stays in both, and the two ids agree.  Returns how many spans were rewritten."""
    count = 0
    for cell in nb["cells"]:
        if cell["cell_type"] != "markdown":
            continue
        src = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        lines, fenced = src.split("\n"), False
        for i, line in enumerate(lines):
            if _FENCE.match(line):
                fenced = not fenced
            elif not fenced and _HEADING.match(line):
                lines[i], n = _CODE_SPAN.subn(lambda c: f"<code>{html.escape(c.group(1), quote=False)}</code>", line)
                count += n
        cell["source"] = "\n".join(lines)
    return count


# nbval's markers (``# NBVAL_CHECK_OUTPUT`` ...) tell the test suite what to compare; a reader of the site needs none
_TEST_MARKER = re.compile(r"^[ \t]*#[ \t]*NBVAL_[A-Z_]+[ \t]*(?:\n|$)", re.MULTILINE)


def _strip_test_markers(nb: dict) -> int:
    """Remove nbval's marker lines from the code cells; return how many were removed."""
    removed = 0
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            src = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
            cell["source"], n = _TEST_MARKER.subn("", src)
            removed += n
    return removed


# each stored notebook says, under its title, where its outputs are; on the executed page the reader is already there
OUTPUTS_NOTE = "> **Outputs.**"


def _drop_outputs_note(nb: dict) -> int:
    """Remove the repository's "where are the outputs" note from the markdown cells; return how many were removed."""
    removed = 0
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown":
            src = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
            lines = src.split("\n")
            keep = [line for line in lines if not line.startswith(OUTPUTS_NOTE)]
            removed += len(lines) - len(keep)
            cell["source"] = "\n".join(keep).replace("\n\n\n", "\n\n")
    return removed


def executed_notebooks(cache: Path | None = None, jobs: int | None = None) -> list[Path]:
    """Executed, page-ready copies of every notebook, in course order.

    A notebook is executed only when no executed copy of it exists for its current bytes and the current inputs;
    the page-ready copy (static widgets, site links) is rewritten from the executed one at every build.
    """
    cache = Path(os.environ.get("GRPO_LESSONS_DOCS_CACHE", ROOT / ".cache" / "docs-notebooks")) \
        if cache is None else cache
    jobs = jobs or int(os.environ.get("GRPO_LESSONS_DOCS_JOBS", min(2, os.cpu_count() or 1)))
    sources = sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
    if not sources:
        raise PluginError(f"no notebooks found in {NOTEBOOKS}")
    digest = _inputs_digest()
    executed = {src: cache / "executed" / f"{src.stem}.{hashlib.sha256(digest.encode() + src.read_bytes()).hexdigest()[:16]}.ipynb"
                for src in sources}
    todo = [src for src in sources if not executed[src].exists()]
    only = [p.strip() for p in os.environ.get("GRPO_LESSONS_DOCS_EXECUTE", "").split(",") if p.strip()]
    if only:
        skipped = [src for src in todo
                   if not any(fnmatch.fnmatch(src.name, p) or fnmatch.fnmatch(src.stem, p) for p in only)]
        if skipped:
            log.info("not executing %d notebook(s) (GRPO_LESSONS_DOCS_EXECUTE=%s): their pages show no outputs",
                     len(skipped), ",".join(only))
        todo = [src for src in todo if src not in skipped]
    if todo:
        log.info("executing %d notebook(s), %d at a time", len(todo), jobs)
        t0 = time.monotonic()
        failures = []
        with tempfile.TemporaryDirectory(prefix="grpo-lessons-docs-") as tmp, \
                concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
            runs = [pool.submit(_execute, src, executed[src], Path(tmp)) for src in todo]
            for run in concurrent.futures.as_completed(runs):
                src, seconds, error = run.result()
                if error is not None:
                    failures.append(f"{src.name} failed to execute:\n{error}")
                    continue
                log.info("executed %s in %.0f s", src.name, seconds)
                for old in executed[src].parent.glob(f"{src.stem}.*.ipynb"):
                    if old != executed[src]:
                        old.unlink()  # an executed copy of an older version
        if failures:
            raise PluginError("\n\n".join(failures))
        log.info("executed %d notebook(s) in %.0f s", len(todo), time.monotonic() - t0)
    pages = []
    for src in sources:
        nb = json.loads((executed[src] if executed[src].exists() else src).read_text(encoding="utf-8"))
        _static_widgets(nb)
        _fix_links(nb)
        _strip_test_markers(nb)
        _drop_outputs_note(nb)
        _code_in_headings(nb)
        page = cache / "pages" / "notebooks" / src.name
        page.parent.mkdir(parents=True, exist_ok=True)
        page.write_text(json.dumps(nb, indent=1, ensure_ascii=False), encoding="utf-8")
        pages.append(page)
    return pages


def on_config(config):
    # mkdocs-jupyter logs two lines per notebook at INFO; its warnings and errors still show
    for name in ("mkdocs.plugins.mkdocs_jupyter", "mkdocs.mkdocs-jupyter"):
        logging.getLogger(name).setLevel(logging.WARNING)
    return config


@event_priority(100)  # before mkdocs-jupyter wraps the notebooks as pages
def on_files(files: Files, config) -> Files:
    # plain Files with a real source folder (not File.generated): mkdocs-jupyter's wrapper reads abs_src_path
    # from the File class itself, which a generated file leaves empty
    for path in executed_notebooks():
        files.append(File(f"notebooks/{path.name}", src_dir=str(path.parent.parent), dest_dir=config.site_dir,
                          use_directory_urls=config.use_directory_urls))
    # the committed benchmark figures, at the same path on the site as in the repository (the results page shows them)
    for png in sorted((ROOT / "benchmarks" / "results").rglob("*.png")):
        files.append(File(png.relative_to(ROOT).as_posix(), src_dir=str(ROOT), dest_dir=config.site_dir,
                          use_directory_urls=config.use_directory_urls))
    return files


def on_page_content(content: str, page, config, files) -> str:
    """A notebook page starts with a link to the executed notebook (mkdocs-jupyter copies it next to the page)."""
    src = page.file.src_uri
    if not (src.startswith("notebooks/") and src.endswith(".ipynb")):
        return content
    name = src.rsplit("/", 1)[-1]
    link = (f'<p class="nb-download"><a href="{name}" download>Download this notebook with its outputs</a>; '
            "to run it and move its widgets, open it in JupyterLab (<code>make lab</code>).</p>")
    return link + content
