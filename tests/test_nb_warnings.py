"""The suite's notebook check fails a cell that shows a warning box, unless the cell says it teaches that warning."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.nb_warnings import EXPECT_WARNING, stray_warnings
from tests.site_build import ROOT


def _scratch() -> Path:
    path = ROOT / ".cache" / "nb-warnings-test"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _cell(source: str) -> dict:
    return {"cell_type": "code", "id": f"c{abs(hash(source)) % 10**8}", "metadata": {}, "execution_count": None,
            "outputs": [], "source": source}


def test_stderr_text_is_a_stray_warning_unless_the_cell_teaches_it():
    outs = [{"output_type": "stream", "name": "stdout", "text": "fine\n"},
            {"output_type": "stream", "name": "stderr", "text": "UserWarning: careful\n"}]
    assert stray_warnings(outs, "x = 1") == ["UserWarning: careful"]
    assert stray_warnings(outs, f"{EXPECT_WARNING}: shown on purpose\nx = 1") == []
    assert stray_warnings(outs[:1], "x = 1") == []
    assert stray_warnings([{"output_type": "stream", "name": "stderr", "text": "  \n"}], "x") == []


def test_a_notebook_cell_that_warns_fails_under_nbval():
    nb = {"cells": [_cell("import warnings\nwarnings.warn('careful')"),
                    _cell(f"{EXPECT_WARNING}: this cell shows the warning on purpose\nimport warnings\n"
                          "warnings.warn('taught')"),
                    _cell("print('quiet')")],
          "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
          "nbformat": 4, "nbformat_minor": 5}
    # inside the checkout (an ignored folder), so that the root conftest loads the check as it does for notebooks/;
    # the console script `pytest`, not `python -m pytest`: the checkout is not on sys.path until that conftest
    with tempfile.TemporaryDirectory(dir=_scratch()) as tmp:
        path = Path(tmp) / "warns.ipynb"
        path.write_text(json.dumps(nb))
        proc = subprocess.run([str(Path(sys.executable).with_name("pytest")), "--nbval-lax", "-p", "no:cacheprovider",
                               "-q", str(path)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert "1 failed, 2 passed" in out, out[-3000:]
    assert "UserWarning: careful" in out and "taught" not in out.split("short test summary")[0].split("FAILURES")[-1]
