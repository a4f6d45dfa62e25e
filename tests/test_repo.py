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
    assert len(block.strip().splitlines()) <= 10, block
    ns = runpy.run_path(f.name)
    assert ns["out"].loss.requires_grad and ns["kl"].shape == (10, 12)
    assert (ns["kl"] >= 0).all()
    grad = ns["logp"].grad  # the gradient reaches the log-probs the example builds
    assert grad is not None and grad.shape == (10, 12) and float(grad.abs().sum()) > 0


def test_readme_marks_every_notebook_with_a_widget():
    """The notebook map says "(widget)" on the row of every notebook that shows one, and only there."""
    rows = {m.group(1): m.group(2) for m in re.finditer(r"^\| `(\d\d_\w+\.ipynb)` \|(.*)$",
                                                        (ROOT / "README.md").read_text(), re.M)}
    for p in NOTEBOOKS:
        code = "".join("".join(c["source"]) for c in json.loads(p.read_text())["cells"] if c["cell_type"] == "code")
        shows = bool(re.search(r"\w_widget\(|ipywidgets", code))
        assert ("(widget)" in rows[p.name]) == shows, f"README row of {p.name}: widget {shows}, {rows[p.name]!r}"


def test_import_time_is_torchs_plus_a_little():
    """The package page: ``import grpo_lessons`` costs torch's import plus less than a tenth of a second of its
    own (0.5 s allowed here: the test may share its machine)."""
    import subprocess
    import sys

    log = subprocess.run([sys.executable, "-X", "importtime", "-c", "import grpo_lessons"], capture_output=True,
                         text=True, check=True).stderr
    # the self time of each of the package's own modules (torch, numpy and the standard library not counted)
    own = sum(int(m.group(1)) for m in re.finditer(r"^import time:\s+(\d+) \|\s+\d+ \|\s*grpo_lessons\b", log, re.M))
    assert re.search(r"\|\s*torch$", log, re.M), "torch was not imported"
    print(f"grpo_lessons' own modules: {own / 1e3:.0f} ms")
    assert 0 < own < 500_000, f"grpo_lessons' own modules took {own / 1e3:.0f} ms to import"


# "pip install grpo-lessons", "pip install -c constraints.txt 'grpo-lessons[gpu]'": an install from a package index
_INDEX_INSTALL = re.compile(r"pip install(?:\s+(?:-c\s+\S+|--?[\w-]+))*\s+[\"']?grpo-lessons(?:\[|[\"'\s`]|$)", re.M)


def test_install_instructions_need_no_package_index():
    """The package is on no package index: nothing tells a reader to install it from one, the install page says how to
    install it from a checkout or a built wheel (torch's CPU build first), and the changelog claims no release there."""
    texts = {p.relative_to(ROOT).as_posix(): p.read_text(encoding="utf-8")
             for p in [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").rglob("*.md")),
                       *sorted((ROOT / "grpo_lessons").rglob("*.py")), *NOTEBOOKS]}
    hits = {name: m.group(0) for name, text in texts.items() for m in _INDEX_INSTALL.finditer(text)}
    assert not hits, hits
    assert _INDEX_INSTALL.search('pip install "grpo-lessons[train]"') and _INDEX_INSTALL.search(
        "pip install -c constraints.txt 'grpo-lessons[gpu]'") and not _INDEX_INSTALL.search("pip install '.[train]'")
    package = texts["docs/install.md"].split("## The package", 1)[1]
    cpu = package.find("--index-url https://download.pytorch.org/whl/cpu")
    assert 0 <= cpu < package.find("pip install .") < package.find("python -m build"), "install page: pip path"
    assert "python -m build" in texts["README.md"] and "pip install ." in texts["README.md"]
    released = re.split(r"^## ", texts["CHANGELOG.md"], flags=re.M)
    for section in released[2:]:  # every version after [Unreleased]
        assert "not published on a package index" in " ".join(section.split()), section[:200]
