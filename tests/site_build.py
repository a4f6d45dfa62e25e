"""Build the course site once per test run, for the tests that need it (the strict build test, the browser test).

``mkdocs build --strict`` runs in a subprocess into a folder next to pytest's per-run temp dirs (shared by the
xdist workers of one run, pruned by pytest like its other temp dirs); a file lock makes the second test that asks
wait for the first build and reuse it.  The notebooks' executed copies are cached by the build itself (keyed by
each notebook and everything it reads), so a rerun with nothing changed only renders.

The suite runs every notebook under nbval already, so its build executes only the notebooks in ``EXECUTED`` (those
whose rendered pages the tests look at); the others are pages of their source unless an executed copy is cached.
``GRPO_LESSONS_SITE_FULL=1`` executes them all, as ``make docs`` does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUILD_TIMEOUT_S = 1200
# the notebooks this build executes: figures from plain cells and a widget's snapshot (03), formulas (06)
EXECUTED = ("03_*", "06_*")


def executes_all() -> bool:
    return os.environ.get("GRPO_LESSONS_SITE_FULL", "") not in ("", "0")


@contextmanager
def _locked(path: Path):
    try:
        import fcntl
    except ImportError:  # not POSIX: no lock, each test may build on its own
        yield
        return
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def build_site(tmp_path_factory) -> dict:
    """``{"returncode", "log", "seconds", "site"}`` of this run's strict build of the site."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # shared by the workers of this run
    out = base / "course-site"
    with _locked(base / "course-site.lock"):
        record = out / "build.json"
        if not record.exists():
            out.mkdir(parents=True, exist_ok=True)
            env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
            if not executes_all():
                env["GRPO_LESSONS_DOCS_EXECUTE"] = ",".join(EXECUTED)
            t0 = time.monotonic()
            proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
                                   str(ROOT / "mkdocs.yml"), "--site-dir", str(out / "site")],
                                  cwd=ROOT, env=env, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
            record.write_text(json.dumps({"returncode": proc.returncode, "log": proc.stdout + proc.stderr,
                                          "seconds": round(time.monotonic() - t0, 1)}))
        result = json.loads(record.read_text())
    result["site"] = out / "site"
    return result
