"""Build the course site once per test run, for the tests that need it (the strict build test, the browser test).

``mkdocs build --strict`` runs in a subprocess into a folder next to pytest's per-run temp dirs (shared by the
xdist workers of one run, pruned by pytest like its other temp dirs); a file lock makes the second test that asks
wait for the first build and reuse it.  The notebooks' executed copies are cached by the build itself (keyed by
each notebook and everything it reads), so a rerun with nothing changed only renders.
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
            t0 = time.monotonic()
            proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
                                   str(ROOT / "mkdocs.yml"), "--site-dir", str(out / "site")],
                                  cwd=ROOT, env=env, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
            record.write_text(json.dumps({"returncode": proc.returncode, "log": proc.stdout + proc.stderr,
                                          "seconds": round(time.monotonic() - t0, 1)}))
        result = json.loads(record.read_text())
    result["site"] = out / "site"
    return result
