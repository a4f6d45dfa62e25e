"""Repository hygiene: notebooks stored without outputs, README's two commands, CI runs the README's command."""

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_stored_without_outputs(path):
    nb = json.loads(path.read_text())
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] == "code":
            assert cell.get("outputs") == [], f"{path.name} cell {i} has stored outputs"
            assert cell.get("execution_count") is None, f"{path.name} cell {i} has an execution count"
    assert nb["metadata"]["kernelspec"]["name"] == "python3"


def test_notebooks_are_numbered_in_order():
    names = [p.name for p in NOTEBOOKS]
    assert names, "no notebooks"
    for n in names:
        assert re.match(r"^\d\d_[a-z0-9_]+\.ipynb$", n), n
    assert len({n[:2] for n in names}) == len(names), "two notebooks share a number"


def test_readme_gives_the_two_commands_and_ci_runs_the_test_one():
    readme = (ROOT / "README.md").read_text()
    assert "make lab" in readme and "make test" in readme
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^\s*(time\s+)?make test\b", ci, re.M)
    makefile = (ROOT / "Makefile").read_text()
    # torch first (the CPU wheel on a CPU machine), before the package pulls torch; its pin is constraints.txt's
    assert 0 <= makefile.find("torch_install.sh") < makefile.find('-e ".[')


def test_readme_lists_every_notebook():
    readme = (ROOT / "README.md").read_text()
    for p in NOTEBOOKS:
        assert p.name in readme, f"README notebook map misses {p.name}"


def test_package_never_evals_model_output():
    offenders = []
    for f in (ROOT / "grpo_lessons").rglob("*.py"):
        for n, line in enumerate(f.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            if re.search(r"(?<![\w.])(eval|exec)\(", code):
                offenders.append(f"{f.relative_to(ROOT)}:{n}")
    assert not offenders, offenders


def test_ten_line_example_runs():
    page = (ROOT / "docs" / "package" / "index.md").read_text()  # the course site's package page
    block = page.split("## The API in ten lines", 1)[1].split("```python", 1)[1].split("```", 1)[0]
    import runpy
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(block)
    ns = runpy.run_path(f.name)
    assert ns["out"].loss.requires_grad and ns["kl"].shape == (10, 12)
    assert (ns["kl"] >= 0).all()
