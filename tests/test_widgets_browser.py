"""Every notebook with a widget, opened in JupyterLab in a real (headless) Chromium: run all cells, move one
control of every widget, and check that its FIGURE was redrawn (the ``<img>`` in the widget's output has a new
``src``) and that no cell shows an error.

The figure itself is compared, not the whole output area: a widget whose readouts change while its figure is gone
(a later cell switched matplotlib's backend to Agg, so ``plt.show()`` draws nowhere) must fail.  Every control is
moved only after *Run All* has finished, so any cell further down the notebook has already run.

And one notebook page of the built course site, served from a loopback HTTP server: its figures load.

Notebooks are found generically (any notebook whose code builds a widget: ``*_widget(``, ``ipywidgets``,
``interact(``), so notebooks added later are covered; this file checks every other one and
``test_widgets_browser_half.py`` the rest, so the two test workers share the work.  Needs Debian's ``chromium`` (/usr/bin/chromium, or
``$CHROMIUM``) and the ``playwright`` Python package, pointed at that browser; skipped with a reason where
either is missing.  The browser runs with no network features (closed network, no downloads).
"""

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
WIDGET_CODE = re.compile(r"_widget\(|import ipywidgets|from ipywidgets|interact\(")
CONTROLS = ".widget-slider, .widget-toggle-buttons, .widget-dropdown, .widget-checkbox"
TOKEN = "grpo-lessons-browser-test"

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no chromium browser installed (apt-get install chromium)")


def widget_notebooks() -> list[str]:
    out = []
    for p in sorted((ROOT / "notebooks").glob("*.ipynb")):
        code = "".join("".join(c["source"]) for c in json.loads(p.read_text())["cells"] if c["cell_type"] == "code")
        if WIDGET_CODE.search(code):
            out.append(p.name)
    return out


def test_discovery_finds_the_widget_notebooks():
    names = widget_notebooks()
    assert "03_clipped_surrogate_and_kl.ipynb" in names and "10_sapo.ipynb" in names
    assert "19_trl_qwen.ipynb" not in names


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    pytest.importorskip("playwright.sync_api", reason="the playwright Python package is not installed")
    work = tmp_path_factory.mktemp("lab")
    for name in widget_notebooks():  # a copy: JupyterLab may save, the repository stays untouched
        shutil.copy(ROOT / "notebooks" / name, work / name)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", f"--port={port}", "--ip=127.0.0.1",
           f"--IdentityProvider.token={TOKEN}", f"--notebook-dir={work}", "--ServerApp.open_browser=False",
           "--LabApp.news_url=", f"--LabApp.workspaces_dir={work / 'workspaces'}", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
    if os.geteuid() == 0:
        cmd.append("--allow-root")
    log = open(work / "lab.log", "w")
    proc = subprocess.Popen(cmd, cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    for _ in range(120):
        try:
            urllib.request.urlopen(f"{url}/api/status?token={TOKEN}", timeout=2)
            break
        except Exception:
            time.sleep(0.5)
    else:
        proc.terminate()
        pytest.fail("JupyterLab did not start: " + (work / "lab.log").read_text()[-2000:])
    yield url
    proc.terminate()
    proc.wait(timeout=30)


@pytest.fixture(scope="module")
def browser():
    pytest.importorskip("playwright.sync_api", reason="the playwright Python package is not installed")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                              args=["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                                    "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"])
        yield b
        b.close()


_PROMPTS = """() => [...document.querySelectorAll('.jp-CodeCell .jp-InputArea-prompt')].map(e => e.textContent)"""


def _wait_idle(page, timeout_s=240):
    """Wait until every code cell has run: each prompt shows its execution count, none is queued or running ([*])."""
    t0 = time.time()
    while time.time() - t0 < timeout_s:
        prompts = page.evaluate(_PROMPTS)
        if prompts and all(re.search(r"\[\d+\]", t) for t in prompts):
            page.wait_for_timeout(700)  # a widget's first draw may still be on its way
            prompts = page.evaluate(_PROMPTS)
            if all(re.search(r"\[\d+\]", t) for t in prompts):
                return
        page.wait_for_timeout(300)
    raise AssertionError("cells still running after %d s" % timeout_s)


def _run_all(page) -> None:
    """Run All Cells from the menu; clicked again if no cell was queued (the kernel may still have been starting)."""
    for _ in range(3):
        page.locator(".jp-Notebook").first.click()
        page.keyboard.press("Escape")
        page.get_by_role("menuitem", name="Run", exact=True).click()
        page.get_by_role("menuitem", name=re.compile(r"^Run All Cells")).click()
        for _ in range(20):
            page.wait_for_timeout(500)
            if any(re.search(r"\[(\*|\d+)\]", t) for t in page.evaluate(_PROMPTS)):
                return
    raise AssertionError("Run All Cells queued no cell")


def _errors(page) -> list[str]:
    return page.evaluate("""() => {
        const out = [];
        document.querySelectorAll('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"], '
            + '.jp-RenderedText[data-mime-type="application/vnd.jupyter.error"]').forEach(e => {
            if (/Error|Traceback/.test(e.textContent)) out.push(e.textContent.slice(0, 400)); });
        document.querySelectorAll('.jp-OutputArea-output').forEach(e => {
            if (e.textContent.includes('Error displaying widget')) out.push('Error displaying widget'); });
        return out; }""")


def _figures(out) -> list[str]:
    """The ``src`` of every image in one cell's output area (inline matplotlib figures are PNG data URLs)."""
    return out.locator("img").evaluate_all("els => els.map(e => e.getAttribute('src') || '')")


def _cut_labels(page) -> list[str]:
    """Descriptions of widget controls whose label box is narrower than its text (drawn as ``max_com…``)."""
    return page.evaluate("""() => [...document.querySelectorAll('.jp-OutputArea .widget-label')]
        .filter(e => e.offsetParent !== null && e.textContent.trim() && e.scrollWidth > e.clientWidth + 1)
        .map(e => e.textContent.trim())""")


MOVED: dict[str, int] = {}


def half(k: int) -> list[str]:
    """Every other widget notebook, from the ``k``-th: this file checks half 0 and ``test_widgets_browser_half.py``
    half 1, so that the test runner's two workers open them side by side."""
    return widget_notebooks()[k::2]


def test_the_two_halves_cover_every_widget_notebook():
    assert sorted(half(0) + half(1)) == sorted(widget_notebooks()) and not set(half(0)) & set(half(1))


@pytest.mark.parametrize("nb_name", half(0))
def test_widgets_respond_in_the_browser(browser, lab, nb_name):
    check_widgets(browser, lab, nb_name)


def check_widgets(browser, lab, nb_name: str) -> None:
    """Run All in JupyterLab, then move one control of every widget and check that its figure was redrawn."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        ws = re.sub(r"\W", "-", nb_name)  # a fresh workspace per notebook: no other notebook is restored
        page.goto(f"{lab}/lab/workspaces/{ws}/tree/{nb_name}?reset&token={TOKEN}")
        page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=90_000)
        page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle'], .jp-Toolbar-kernelStatus",
                               timeout=90_000)
        page.wait_for_timeout(1500)
        _run_all(page)
        _wait_idle(page)
        assert not _errors(page), _errors(page)
        cells = page.locator(".jp-CodeCell").filter(has=page.locator(CONTROLS))
        n = cells.count()
        assert n >= 1, f"{nb_name}: no widget rendered"
        cut = _cut_labels(page)
        assert not cut, f"{nb_name}: control labels cut off (shown with an ellipsis): {cut}"
        for i in range(n):
            cell = cells.nth(i)
            cell.scroll_into_view_if_needed()
            out = cell.locator(".jp-Cell-outputArea").first
            before = _figures(out)
            assert before, f"{nb_name}: widget {i} shows no figure after Run All"
            _move_one_control(cell)
            page.wait_for_timeout(500)
            _wait_idle(page, 120)
            after = before
            for _ in range(40):
                after = _figures(out)
                if after and after != before:
                    break
                page.wait_for_timeout(250)
            assert after, f"{nb_name}: widget {i} lost its figure after its control moved (nothing was drawn)"
            assert after != before, f"{nb_name}: widget {i} did not redraw its figure after its control moved"
        MOVED[nb_name] = n
        assert not _errors(page), _errors(page)
        print(f"{nb_name}: moved a control of {n} widget(s); total so far {sum(MOVED.values())}")
    finally:
        page.close()


def _move_one_control(cell):
    handle = cell.locator(".widget-slider .noUi-handle, .widget-slider .ui-slider-handle")
    if handle.count():
        handle.first.focus()
        for _ in range(3):
            handle.first.press("ArrowRight")
        return
    toggle = cell.locator(".widget-toggle-buttons button:not(.mod-active)")
    if toggle.count():
        toggle.first.click()
        return
    select = cell.locator(".widget-dropdown select")
    if select.count():
        opts = select.first.locator("option").all_inner_texts()
        cur = select.first.input_value()
        select.first.select_option(next(o for o in opts if o != cur))
        return
    cell.locator(".widget-checkbox input").first.click()


@pytest.fixture(scope="module")
def site_server(tmp_path_factory):
    """The course site of this test run (built once, shared with the site test), served on 127.0.0.1."""
    pytest.importorskip("mkdocs", reason="the docs extra is not installed (pip install -e '.[docs]')")
    from tests.site_build import build_site

    built = build_site(tmp_path_factory)
    assert built["returncode"] == 0, "the site did not build:\n" + built["log"][-3000:]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1",
                             "--directory", str(built["site"])], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(60):
        try:
            urllib.request.urlopen(url + "/", timeout=2)
            break
        except Exception:
            time.sleep(0.25)
    else:
        proc.terminate()
        pytest.fail("the site's http.server did not start")
    yield url
    proc.terminate()
    proc.wait(timeout=30)


SITE_PAGE = "notebooks/03_clipped_surrogate_and_kl/"  # figures from plain cells and from a widget's snapshot


def test_site_notebook_page_shows_its_figures(browser, site_server):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        response = page.goto(f"{site_server}/{SITE_PAGE}", wait_until="load")
        assert response is not None and response.ok, f"{SITE_PAGE}: HTTP {response and response.status}"
        page.wait_for_selector(".jp-OutputArea-output img", timeout=30_000)
        images = page.evaluate("""() => [...document.querySelectorAll('.jp-OutputArea-output img')].map(
            i => ({complete: i.complete, width: i.naturalWidth, height: i.naturalHeight}))""")
        assert len(images) >= 3, f"{SITE_PAGE}: only {len(images)} figure(s)"
        broken = [i for i, img in enumerate(images) if not (img["complete"] and img["width"] > 0 and img["height"] > 0)]
        assert not broken, f"{SITE_PAGE}: figures {broken} of {len(images)} did not load"
        caption = page.locator(".widget-snapshot").first
        assert caption.count() and "starting settings" in caption.inner_text()
        assert page.title().startswith("03")
        print(f"{SITE_PAGE}: {len(images)} figures loaded")
    finally:
        page.close()


def _typeset_offline(browser, url: str, minimum: int) -> tuple[int, list[str]]:
    """Open ``url`` with every request that leaves the local server refused; return how many formulas MathJax
    typeset and the outside requests that were refused."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    refused: list[str] = []

    def route(r):
        if r.request.url.startswith("http://127.0.0.1"):
            r.continue_()
        else:
            refused.append(r.request.url)
            r.abort()

    page.route("**/*", route)
    try:
        response = page.goto(url, wait_until="load")
        assert response is not None and response.ok, f"{url}: HTTP {response and response.status}"
        count, last, stable = 0, -1, 0
        for _ in range(120):  # MathJax typesets after load: wait until the count stops growing
            count = page.evaluate("() => document.querySelectorAll('.MathJax, .MathJax_Display, "
                                  ".MathJax_SVG, mjx-container').length")
            stable = stable + 1 if count == last and count >= minimum else 0
            if stable >= 4:
                break
            last = count
            page.wait_for_timeout(500)
        return count, refused
    finally:
        page.close()


@pytest.mark.parametrize("path, minimum", [("notation/", 40), ("notebooks/06_dr_grpo/", 10)])
def test_site_typesets_its_formulas_with_the_network_blocked(browser, site_server, path, minimum):
    """MathJax ships with the site: with every outside request refused, the notation page and a notebook page still
    show typeset formulas (raw TeX otherwise)."""
    count, refused = _typeset_offline(browser, f"{site_server}/{path}", minimum)
    assert count >= minimum, f"{path}: {count} typeset formulas with the network blocked (refused: {refused[:5]})"
    assert not [u for u in refused if "mathjax" in u.lower()], f"{path} asked the network for MathJax: {refused}"
    print(f"{path}: {count} formulas typeset offline; {len(refused)} outside request(s) refused")
