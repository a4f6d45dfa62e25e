"""A pytest plugin (loaded for every run by the root conftest.py): notebooks without stray warnings.

A notebook cell run by nbval passes when it raises nothing; a warning box from the course's own code (the package's
warning about a missing argument, a library's warning about a tokenizer) would still show in JupyterLab and on the
site.  So a cell whose output holds text on stderr fails too, unless the cell teaches that warning: its source then
carries the comment ``# expect-warning`` (and says why).  tqdm progress bars are widgets in a kernel, not stderr.
"""

from __future__ import annotations

import pytest

EXPECT_WARNING = "# expect-warning"


def stray_warnings(outputs, source: str) -> list[str]:
    """The stderr texts among a cell's outputs, unless the cell says it teaches a warning."""
    if EXPECT_WARNING in source:
        return []
    found = []
    for out in outputs or ():
        if out.get("output_type") == "stream" and out.get("name") == "stderr" and out.get("text", "").strip():
            found.append(out["text"].strip())
    return found


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if call.when != "call" or not report.passed or type(item).__name__ != "IPyNbCell":
        return
    found = stray_warnings(getattr(item, "test_outputs", None), getattr(item.cell, "source", ""))
    if found:
        report.outcome = "failed"
        report.longrepr = (f"{item.name} wrote to stderr (a warning box in the notebook); fix the cause, or mark the "
                           f"cell '{EXPECT_WARNING}' if it teaches that warning:\n" + "\n---\n".join(found)[:3000])
