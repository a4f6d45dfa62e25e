"""The pins and the ranges: pyproject.toml declares ranges (what the package needs), constraints.txt pins the course's
one environment (what CI tests), and the Makefile, environment.yml and CI all install through that file.  Checked
here: every pin satisfies every range that names it (ours and upstream's), the GPU stack is one consistent set, the
three installers use the constraints file, and the environment installed here is exactly the pinned one.

The upstream constraints below were read off the packages' own metadata:

* trl 1.16.0 — ``trl/import_utils.py`` (``is_vllm_available`` accepts 0.22.0 <= vllm <= 0.31.0) and its
  wheel METADATA (``Requires-Dist: vllm<=0.31.0,>=0.22.0; extra == "vllm"``, ``transformers>=4.56.2``,
  ``accelerate>=1.10.1``, ``datasets>=4.7.0``, ``numpy>=1.26.0``).  Checked live below while trl is installed.
* vllm 0.31.0 — its wheel METADATA (``Requires-Dist: torch==2.13.0``, ``transformers<5.18.0,>=5.10.4``,
  ``tokenizers>=0.21.1``, ``safetensors>=0.6.2``, ``lark==1.2.2``, ``Requires-Python: <3.15,>=3.10``), and
  through ``mistral_common`` (every release vllm 0.31.0 accepts) ``numpy<2.4`` on Python <= 3.12: read on
  2026-12-03 with ``pip install --dry-run --ignore-installed --report r.json -c constraints.txt ".[gpu,course,dev,docs]"``,
  which resolves with these pins.  vllm is not installed on CPU machines, so these are kept as data; where vllm is
  installed they are checked live too.
"""

from __future__ import annotations

import importlib.metadata as md
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
CONSTRAINTS_FILE = ROOT / "constraints.txt"
SELF = "grpo-lessons"

# (package, specifier the pins must satisfy, where it comes from)
UPSTREAM = [
    ("vllm", ">=0.22.0,<=0.31.0", "trl 1.16.0: trl/import_utils.py is_vllm_available; METADATA extra 'vllm'"),
    ("transformers", ">=4.56.2", "trl 1.16.0 METADATA Requires-Dist"),
    ("accelerate", ">=1.10.1", "trl 1.16.0 METADATA Requires-Dist"),
    ("datasets", ">=4.7.0", "trl 1.16.0 METADATA Requires-Dist"),
    ("numpy", ">=1.26.0", "trl 1.16.0 METADATA Requires-Dist"),
    ("torch", "==2.13.0", "vllm 0.31.0 METADATA Requires-Dist"),
    ("transformers", ">=5.10.4,<5.18.0", "vllm 0.31.0 METADATA Requires-Dist"),
    ("tokenizers", ">=0.21.1", "vllm 0.31.0 METADATA Requires-Dist"),
    ("safetensors", ">=0.6.2", "vllm 0.31.0 METADATA Requires-Dist"),
    ("lark", "==1.2.2", "vllm 0.31.0 METADATA Requires-Dist"),
    ("numpy", "<2.4", "vllm 0.31.0 -> mistral_common (all accepted releases) on Python <= 3.12"),
]
PYTHON_CONSTRAINTS = [(">=3.10,<3.15", "vllm 0.31.0 Requires-Python")]
# The set the GPU stack is built from: exact pins.
STACK = {"trl": "1.16.0", "vllm": "0.31.0", "torch": "2.13.0", "transformers": "5.17.0"}
# Pinned but not installed by `make setup` on a CPU machine: the GPU extra.
GPU_ONLY = {"vllm"}
# Installed but never pinned: the installers themselves.
UNPINNED = {"pip"}


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def constraints(text: str | None = None) -> dict[str, Version]:
    """constraints.txt as {canonical name: pinned version}; every line is a comment or ``name==version``."""
    text = CONSTRAINTS_FILE.read_text() if text is None else text
    pins: dict[str, Version] = {}
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        req = Requirement(line)
        specs = list(req.specifier)
        assert len(specs) == 1 and specs[0].operator == "==" and not req.extras and req.marker is None, (
            f"constraints.txt line {n}: {line!r} is not an exact pin name==version")
        name = canonicalize_name(req.name)
        assert name not in pins, f"constraints.txt pins {req.name} twice"
        pins[name] = Version(specs[0].version)
    return pins


def extra_requirements(extra: str | None, seen: frozenset = frozenset()) -> list[Requirement]:
    """What ``grpo-lessons[extra]`` (``None``: plain ``grpo-lessons``) asks for, self-references expanded."""
    project = _pyproject()["project"]
    out = [Requirement(r) for r in project["dependencies"]]
    if extra is None:
        return out
    for line in project["optional-dependencies"][extra]:
        req = Requirement(line)
        if canonicalize_name(req.name) == SELF:
            for e in sorted(req.extras - seen):
                out += extra_requirements(e, seen | {extra})
        else:
            out.append(req)
    return out


def all_requirements() -> list[Requirement]:
    return [r for e in [None, *_pyproject()["project"]["optional-dependencies"]] for r in extra_requirements(e)]


def test_constraints_file_is_exact_pins_only():
    pins = constraints()
    assert len(pins) > 50 and SELF not in pins
    with pytest.raises(AssertionError, match="not an exact pin"):
        constraints("torch>=2.0\n")
    with pytest.raises(AssertionError, match="twice"):
        constraints("Torch==2.13.0\ntorch==2.13.0\n")


def test_the_core_needs_torch_and_numpy_only_as_ranges():
    """Installing the package must never pin a project's torch: the core's requirements are lower bounds."""
    core = {canonicalize_name(r.name): r for r in extra_requirements(None)}
    assert set(core) == {"torch", "numpy"}
    for name, req in core.items():
        assert all(s.operator == ">=" for s in req.specifier), f"{name}{req.specifier}: the core takes ranges"


def test_no_extra_pins_an_exact_version():
    """Exact versions belong in constraints.txt; an `==` in pyproject would downgrade someone's stack."""
    exact = [str(r) for r in all_requirements() if any(s.operator in ("==", "===") for s in r.specifier)]
    assert exact == []


@pytest.mark.parametrize("extra", [None, "train", "trl", "course", "gpu", "docs", "dev"])
def test_every_requirement_is_pinned_and_the_pin_is_inside_its_range(extra):
    """Every range the package declares has a pin in constraints.txt, and the pin satisfies it."""
    pins = constraints()
    for req in extra_requirements(extra):
        name = canonicalize_name(req.name)
        assert name in pins, f"{req} ({extra or 'core'}) has no pin in constraints.txt"
        assert req.specifier.contains(pins[name], prereleases=True), (
            f"constraints.txt pins {name}=={pins[name]}, outside {req} ({extra or 'core'})")


def test_the_range_check_catches_a_pin_outside_a_range():
    req = Requirement("numpy>=1.26")
    assert not req.specifier.contains(constraints("numpy==1.25.2\n")["numpy"])


@pytest.mark.parametrize("package,spec,source", UPSTREAM, ids=[f"{u[0]}{u[1]}" for u in UPSTREAM])
def test_pins_satisfy_the_upstream_constraints(package, spec, source):
    pin = constraints()[package]
    assert pin in SpecifierSet(spec), f"{package}=={pin} violates {spec} ({source})"


def test_the_stack_is_pinned_exactly():
    pins = constraints()
    for name, version in STACK.items():
        assert pins[name] == Version(version), f"{name}: pinned {pins[name]}, the stack needs =={version}"


def test_gpu_extra_is_trls_vllm_range():
    gpu = {canonicalize_name(r.name): r for r in extra_requirements("gpu")}
    assert gpu["vllm"].specifier == SpecifierSet(">=0.22.0,<=0.31.0")
    assert "trl" in gpu, "the gpu extra is for TRL's vLLM generation: it brings the trl extra"


def test_python_version_is_inside_every_range():
    requires_python = SpecifierSet(_pyproject()["project"]["requires-python"])
    for spec, source in PYTHON_CONSTRAINTS:
        assert Version("3.11") in SpecifierSet(spec), source
    assert Version("3.11") in requires_python


# ------------------------------------------------------------------ the three installers use constraints.txt


def _env_pip() -> tuple[list[str], dict]:
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    return pip, env


def test_environment_yml_installs_the_course_extra_through_the_constraints_file():
    """conda writes the pip section to a requirements file next to environment.yml, so the relative path holds."""
    pip, env = _env_pip()
    assert pip == ["-c constraints.txt", "-e .[course]"]
    assert "python=3.11" in env["dependencies"]


def test_environment_yml_carries_the_gpu_extra_as_its_commented_line():
    text = (ROOT / "environment.yml").read_text()
    commented = re.findall(r"^\s*#\s*-\s*(-e\s+\S+)\s*$", text, re.M)
    assert commented == ["-e .[course,gpu]"]
    extras = _pyproject()["project"]["optional-dependencies"]
    assert {"course", "gpu"} <= set(extras)


def _make_setup_commands() -> list[str]:
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    out = subprocess.run(["make", "-n", "-B", "setup", "VENV=/nonexistent-venv"], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout
    return [line for line in out.splitlines() if line.strip()]


def test_make_setup_installs_everything_through_the_constraints_file():
    cmds = _make_setup_commands()
    pip_installs = [c for c in cmds if "pip install" in c and "--upgrade pip" not in c]
    assert any('-e ".[' in c for c in pip_installs), pip_installs
    for c in pip_installs:
        assert "-c constraints.txt" in c, f"installs without the constraints file: {c}"
    torch = [c for c in cmds if "torch_install.sh" in c]
    assert len(torch) == 1 and torch[0].endswith(" constraints.txt"), torch
    assert f'"torch=={constraints()["torch"]}"' in torch[0], "make setup's torch is the pinned one"
    extras = re.search(r'-e "\.\[([^\]]+)\]"', " ".join(pip_installs)).group(1).split(",")
    assert set(extras) <= set(_pyproject()["project"]["optional-dependencies"]), extras


def test_ci_runs_make_test():
    run = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^\s*(time\s+)?make test\s*$", run, re.M)


# ------------------------------------------------------------------ what is installed here is what is pinned


def _installed() -> dict[str, Version]:
    out = {}
    for dist in md.distributions():
        name = canonicalize_name(dist.metadata["Name"])
        out[name] = Version(Version(dist.version).public)  # 2.13.0+cpu is release 2.13.0 (the CPU build)
    return out


@pytest.mark.parametrize("package", sorted(STACK))
def test_installed_stack_is_the_pins(package):
    got = _installed().get(package)
    if package in GPU_ONLY and got is None:
        pytest.skip(f"{package} is the GPU extra; not installed on this CPU machine")
    assert got == Version(STACK[package]), f"{package}: installed {got}, pinned {STACK[package]}"


def test_every_installed_package_is_the_pinned_version():
    pins, installed = constraints(), _installed()
    wrong = {n: (str(v), str(pins[n])) for n, v in installed.items() if n in pins and v != pins[n]}
    assert wrong == {}, f"installed (got, pinned): {wrong}"
    missing = sorted(set(pins) - set(installed) - GPU_ONLY)
    assert missing == [], f"pinned but not installed (run `make clean-venv setup`): {missing}"


def test_nothing_is_installed_unpinned():
    """A new transitive dependency (after a pin moves) must be pinned too, or CI's environment drifts."""
    installed = _installed()
    if "vllm" in installed:
        pytest.skip("a GPU environment: vllm's own dependencies are not pinned here")
    unpinned = sorted(set(installed) - set(constraints()) - UNPINNED - {SELF})
    assert unpinned == [], f"installed but not in constraints.txt: {unpinned}"


def test_trls_own_metadata_still_says_what_the_constraints_say():
    """Read the installed TRL: if it moves, the encoded constraints must be revisited."""
    assert md.version("trl") == STACK["trl"]
    requires = md.requires("trl") or []
    vllm = [Requirement(r) for r in requires if r.startswith("vllm")]
    assert vllm and vllm[0].specifier == SpecifierSet(">=0.22.0,<=0.31.0"), vllm
    import importlib.util

    src = Path(importlib.util.find_spec("trl").origin).with_name("import_utils.py").read_text()
    assert re.search(r'Version\("0\.22\.0"\)\s*<=\s*_vllm_base_version\s*<=\s*Version\("0\.31\.0"\)', src)
    for package, spec, source in UPSTREAM:
        if source.startswith("trl") and package != "vllm":
            found = [Requirement(r) for r in requires if Requirement(r).name == package and "extra" not in r]
            assert found and found[0].specifier == SpecifierSet(spec), (package, found)


def test_vllm_metadata_when_installed():
    if "vllm" not in _installed():
        pytest.skip("vllm not installed (CPU machine): its constraints are checked as data above")
    requires = [Requirement(r) for r in (md.requires("vllm") or []) if "extra ==" not in r]
    by_name = {canonicalize_name(r.name): r for r in requires}
    assert by_name["torch"].specifier == SpecifierSet("==2.13.0")
    assert by_name["transformers"].specifier == SpecifierSet(">=5.10.4,<5.18.0")
    assert by_name["lark"].specifier == SpecifierSet("==1.2.2")
