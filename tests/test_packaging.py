"""The package as someone else installs it: each layer's third-party imports are what its extra brings, the version
has one source, and the built wheel works in a venv that has nothing but torch and numpy.

The slow test builds the sdist and, from it, the wheel (``python -m build``), checks both with
``twine check --strict``, checks what each carries, then installs the wheel with ``--no-deps`` into a plain venv
holding only torch (from the same place ``make setup`` takes it) and numpy, and there imports ``grpo_lessons``
(nothing heavy comes with it) and computes GRPO's group advantages and clipped loss on cases worked by hand.
"""

from __future__ import annotations

import ast
import email
import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from test_environment import _pyproject, constraints, extra_requirements
from test_layers import LAYERS, MODULES, PKG, THIRD_PARTY, _imports, _layer

ROOT = Path(__file__).resolve().parents[1]

#: The extra that brings each layer's dependencies (None: the package's own requirements).
LAYER_EXTRA = {"core": None, "lab": None, "training": "train", "integrations": "trl", "course": "course"}
#: Import name -> distribution name, where they differ.
DISTRIBUTION = {"IPython": "ipython", "yaml": "pyyaml"}
#: Imports a layer may make without its extra bringing them: each must sit in a ``try`` that catches ImportError.
OPTIONAL = {"training": {"IPython"}}  # plots.LivePlot: redraws in a notebook when IPython is there, prints otherwise
#: Distributions an extra brings that its layer never imports, and why they are there.
RUNTIME_ONLY = {
    "train": {"accelerate": "transformers' device placement and TRL's launcher",
              "safetensors": "the trainable SmolLM2 copy is written and read as safetensors",
              "gguf": "transformers reads SmolLM2-135M from its GGUF file"},
    "trl": {},
    "course": {"jupyterlab": "the notebooks' interface (`make lab`)", "ipykernel": "the notebooks' kernel"},
}
HEAVY = ("transformers", "trl", "matplotlib", "ipywidgets", "IPython", "datasets", "accelerate", "peft", "tokenizers")


def _dist(module: str) -> str:
    return canonicalize_name(DISTRIBUTION.get(module, module))


def _dists(extra: str | None) -> set[str]:
    return {canonicalize_name(r.name) for r in extra_requirements(extra)}


@pytest.mark.parametrize("layer", LAYERS)
def test_each_layer_may_import_only_what_its_extra_brings(layer):
    allowed = {_dist(m) for m in THIRD_PARTY[layer] - OPTIONAL.get(layer, set())}
    missing = sorted(allowed - _dists(LAYER_EXTRA[layer]))
    extra = LAYER_EXTRA[layer] or "the core's requirements"
    assert missing == [], f"the {layer} layer may import {missing}, which [{extra}] does not install"


@pytest.mark.parametrize("extra", ["train", "trl", "course"])
def test_each_extra_brings_only_what_its_layer_uses(extra):
    layer = next(k for k, v in LAYER_EXTRA.items() if v == extra)
    own = {canonicalize_name(Requirement(r).name) for r in _pyproject()["project"]["optional-dependencies"][extra]}
    own -= {"grpo-lessons"}
    used = {_dist(m) for m in THIRD_PARTY[layer]} | set(RUNTIME_ONLY[extra])
    assert sorted(own - used) == [], f"[{extra}] installs {sorted(own - used)}, which the {layer} layer never uses"


def _guarded_by_import_error(tree: ast.AST, module: str) -> bool:
    """Every import of ``module`` in ``tree`` sits in the body of a ``try`` with an ``except ImportError``."""
    guarded, seen = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and any(
                h.type is not None and any(isinstance(n, ast.Name) and n.id in ("ImportError", "ModuleNotFoundError")
                                           for n in ast.walk(h.type)) for h in node.handlers):
            for stmt in node.body:
                guarded.update(id(n) for n in ast.walk(stmt))
    for node in ast.walk(tree):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                 else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
        if any(n.split(".")[0] == module for n in names):
            seen.add(id(node))
    return bool(seen) and seen <= guarded


@pytest.mark.parametrize("layer,module", [(la, m) for la, ms in OPTIONAL.items() for m in sorted(ms)])
def test_optional_imports_fall_back_when_missing(layer, module):
    users = [p for name, p in MODULES.items()
             if _layer(name) == layer and module in {n.split(".")[0] for n in _imports(p)}]
    assert users, f"{module} is listed optional for {layer}, which no longer imports it: drop it from OPTIONAL"
    for path in users:
        assert _guarded_by_import_error(ast.parse(path.read_text()), module), (
            f"{path.relative_to(ROOT)} imports {module} outside a try/except ImportError, but [{LAYER_EXTRA[layer]}] "
            f"does not install it")


def test_the_guard_check_sees_an_unguarded_import():
    good = "try:\n    from IPython import display\nexcept ImportError:\n    display = None\n"
    bad = good + "import IPython\n"
    assert _guarded_by_import_error(ast.parse(good), "IPython")
    assert not _guarded_by_import_error(ast.parse(bad), "IPython")


def _source_version() -> str:
    tree = ast.parse((PKG / "__init__.py").read_text())
    return next(n.value.value for n in tree.body if isinstance(n, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == "__version__" for t in n.targets))


def test_the_version_has_one_source():
    project = _pyproject()
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "grpo_lessons.__version__"}
    import importlib.metadata as md

    import grpo_lessons

    assert md.version("grpo-lessons") == grpo_lessons.__version__ == _source_version()


def test_changelog_has_an_unreleased_section_and_the_current_version():
    text = (ROOT / "CHANGELOG.md").read_text()
    assert "## [Unreleased]" in text and f"## [{_source_version()}]" in text


# ------------------------------------------------------------------ the built wheel, in a venv with torch and numpy

_IGNORE = shutil.ignore_patterns(".venv", ".git", "build", "dist", "*.egg-info", "__pycache__", ".hypothesis",
                                 ".pytest_cache", "runs", ".cache", ".ipynb_checkpoints")
_COURSE_DIRS = {"tests", "notebooks", "benchmarks", "data", "docs", "configs", ".ci"}

# Run inside the clean venv: import the wheel and compute the hand-worked cases; prints JSON.
_PROBE = r"""
import importlib, importlib.metadata as md, json, math, sys
import torch
import grpo_lessons
from grpo_lessons import group_advantages, policy_loss

heavy = sorted(m for m in sys.argv[1].split(",") if m in {k.split(".")[0] for k in sys.modules})
missing = []
for name in ("transformers", "trl", "matplotlib"):
    try:
        importlib.import_module(name)
    except ModuleNotFoundError:
        missing.append(name)
adv = group_advantages(torch.tensor([1., 0., 0., 1., 3., 3., 3., 3.]), group_size=4)
logp = torch.log(torch.tensor([[1.5, 0.9], [0.5, 1.1]])).requires_grad_()
losses = {}
for variant in ("grpo", "dapo"):
    logp.grad = None
    out = policy_loss(logp, torch.zeros(2, 2), torch.tensor([1., -1.]), torch.ones(2, 2), variant=variant)
    out.loss.backward()
    losses[variant] = {"loss": out.loss.item(), "grad": logp.grad.tolist()}
print(json.dumps({"file": grpo_lessons.__file__, "version": grpo_lessons.__version__,
                  "dist_version": md.version("grpo-lessons"), "heavy": heavy, "missing": missing,
                  "adv": adv.tolist(), "losses": losses}))
"""


def _run(cmd, **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """sdist and wheel built from a copy of the working tree (the build writes egg-info and build/ beside it)."""
    tmp = tmp_path_factory.mktemp("pkg")
    src = tmp / "src"
    shutil.copytree(ROOT, src, ignore=_IGNORE)
    _run([sys.executable, "-m", "build", "--no-isolation", "--outdir", tmp / "dist", src])
    (sdist,), (wheel,) = sorted((tmp / "dist").glob("*.tar.gz")), sorted((tmp / "dist").glob("*.whl"))
    return tmp, sdist, wheel


@pytest.mark.slow
def test_twine_accepts_the_sdist_and_the_wheel(built):
    _, sdist, wheel = built
    out = _run([sys.executable, "-m", "twine", "check", "--strict", sdist, wheel]).stdout
    assert out.count("PASSED") == 2, out


@pytest.mark.slow
def test_the_wheel_carries_the_package_its_types_and_its_licence(built):
    _, _, wheel = built
    version = _source_version()
    assert wheel.name == f"grpo_lessons-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        meta = email.message_from_bytes(z.read(f"grpo_lessons-{version}.dist-info/METADATA"))
        entry_points = z.read(f"grpo_lessons-{version}.dist-info/entry_points.txt").decode()
    assert {n.split("/")[0] for n in names} == {"grpo_lessons", f"grpo_lessons-{version}.dist-info"}
    assert "grpo_lessons/py.typed" in names
    assert f"grpo_lessons-{version}.dist-info/licenses/LICENSE" in names
    modules = {p.relative_to(ROOT).as_posix() for p in PKG.rglob("*.py")}
    assert modules <= names, sorted(modules - names)
    assert meta["Version"] == version and meta["License-Expression"] == "Apache-2.0"
    assert meta["Description-Content-Type"] == "text/markdown"
    plain = sorted(r for r in meta.get_all("Requires-Dist") if "extra ==" not in r)
    assert plain == sorted(_pyproject()["project"]["dependencies"]), plain
    assert "grpo-lessons = grpo_lessons.training.cli:main" in entry_points


@pytest.mark.slow
def test_the_sdist_is_the_package_not_the_course(built):
    _, sdist, _ = built
    with tarfile.open(sdist) as t:
        names = {n.split("/", 1)[1] for n in t.getnames() if "/" in n}
    top = {n.split("/")[0] for n in names}
    assert top & _COURSE_DIRS == set(), f"the sdist carries {sorted(top & _COURSE_DIRS)}"
    assert {"LICENSE", "README.md", "CHANGELOG.md", "pyproject.toml", "grpo_lessons/py.typed"} <= names
    modules = {p.relative_to(ROOT).as_posix() for p in PKG.rglob("*.py")}
    assert modules <= names, sorted(modules - names)


def _torch_index() -> str:
    """Where `make setup` takes torch from (the Makefile exports it); run outside make: the CPU index for a CPU
    build of torch, else pip's default index.  torch_install.sh falls back to pip's index when it is unreachable."""
    if "TORCH_INDEX" in os.environ:
        return os.environ["TORCH_INDEX"]
    import torch

    return "https://download.pytorch.org/whl/cpu" if torch.__version__.endswith("+cpu") else ""


@pytest.mark.slow
def test_the_wheel_works_in_a_venv_with_only_torch_and_numpy(built):
    tmp, _, wheel = built
    venv = tmp / "venv"
    _run([sys.executable, "-m", "venv", venv])  # a plain venv: not --system-site-packages
    py = venv / "bin" / "python"
    pins = constraints()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["TORCH_INDEX"] = _torch_index()
    _run(["sh", ROOT / ".ci" / "torch_install.sh", py, f"torch=={pins['torch']}", ROOT / "constraints.txt"], env=env)
    _run([py, "-m", "pip", "install", "-q", "-c", ROOT / "constraints.txt", "numpy"], env=env)
    _run([py, "-m", "pip", "install", "-q", "--no-deps", wheel], env=env)
    _run([py, "-m", "pip", "check"], env=env)  # the wheel's own requirements (torch, numpy) are met
    # the venv holds torch (and what torch needs), numpy, the wheel, pip: nothing of the course
    listed = {canonicalize_name(p["name"]) for p in json.loads(
        _run([py, "-m", "pip", "list", "--format", "json"], env=env).stdout)}
    assert {"torch", "numpy", "grpo-lessons"} <= listed
    assert listed & {"transformers", "trl", "matplotlib", "ipywidgets", "datasets", "accelerate"} == set(), listed

    out = json.loads(_run([py, "-c", _PROBE, ",".join(HEAVY)], cwd=tmp, env=env).stdout)
    assert Path(out["file"]).is_relative_to(venv), f"imported {out['file']}, not the installed wheel"
    assert out["version"] == out["dist_version"] == _source_version()
    assert out["heavy"] == [], f"import grpo_lessons loaded {out['heavy']}"
    assert out["missing"] == ["transformers", "trl", "matplotlib"]  # the venv really is bare

    # GRPO (arXiv 2402.03300, Sec. 4.1.2): A_i = (r_i - mean) / (std + 1e-4), std with n - 1.
    # Group [1, 0, 0, 1]: mean 0.5, std sqrt(1/3); a group of equal rewards gets exactly 0.
    a = 0.5 / ((1 / 3) ** 0.5 + 1e-4)
    assert out["adv"] == pytest.approx([a, -a, -a, a, 0, 0, 0, 0], abs=1e-6)
    assert out["adv"][4:] == [0.0, 0.0, 0.0, 0.0]
    # Clipped surrogate, per token min(r A, clip(r, 1 - eps_low, 1 + eps_high) A), ratios r = [[1.5, .9], [.5, 1.1]],
    # A = [1, -1].  GRPO (eps 0.2, mean over each sequence then over the batch):
    #   row 0: min(1.5, 1.2) = 1.2, min(.9, .9) = .9       -> -(1.2 + .9) / 2 = -1.05
    #   row 1: min(-.5, -.8) = -.8, min(-1.1, -1.1) = -1.1  -> (.8 + 1.1) / 2 = .95;  loss = (-1.05 + .95) / 2 = -0.05
    # DAPO (arXiv 2503.14476, eps 0.2 / 0.28, mean over all tokens): (-1.28 - .9 + .8 + 1.1) / 4 = -0.07.
    # Gradient w.r.t. log p: 0 where the clip is active, -r A / 4 elsewhere (d r / d log p = r).
    assert out["losses"]["grpo"]["loss"] == pytest.approx(-0.05, abs=1e-6)
    assert out["losses"]["dapo"]["loss"] == pytest.approx(-0.07, abs=1e-6)
    for variant in ("grpo", "dapo"):
        grad = [g for row in out["losses"][variant]["grad"] for g in row]  # (B, T) = (2, 2), row-major
        assert grad == pytest.approx([0.0, -0.9 / 4, 0.0, 1.1 / 4], abs=1e-6)
        assert grad[0] == 0.0 and grad[2] == 0.0  # clipped tokens: exactly no gradient

    # The lab needs torch alone: the installed console script lists the claims and reruns one (its committed table
    # lives in a checkout, not in the wheel, so only the live row is printed).
    script = venv / "bin" / "grpo-lessons"
    listed_claims = _run([script, "lab", "--list"], cwd=tmp, env=env).stdout
    assert "dr_grpo_wrong_length" in listed_claims and "typicality_bias_collapses" in listed_claims
    row = _run([script, "lab", "--claim", "rloo_group_mean_shrinks", "--seeds", "2", "--quiet"], cwd=tmp, env=env)
    assert "-> reproduced" in row.stdout, row.stdout
