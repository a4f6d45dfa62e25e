"""The pins: environment.yml (with its commented GPU section) agrees with pyproject.toml, the pins form one consistent
GPU stack, and the versions installed here are the pinned ones (what CI tests is what GPU users install).

The constraints below were read off the packages' own metadata:

* trl 1.16.0 — ``trl/import_utils.py`` (``is_vllm_available`` accepts 0.22.0 <= vllm <= 0.31.0) and its
  wheel METADATA (``Requires-Dist: vllm<=0.31.0,>=0.22.0; extra == "vllm"``, ``transformers>=4.56.2``,
  ``accelerate>=1.10.1``, ``datasets>=4.7.0``, ``numpy>=1.26.0``).  Checked live below while trl is installed.
* vllm 0.31.0 — its wheel METADATA (``Requires-Dist: torch==2.13.0``, ``transformers<5.18.0,>=5.10.4``,
  ``tokenizers>=0.21.1``, ``safetensors>=0.6.2``, ``Requires-Python: <3.15,>=3.10``), read on 2026-12-02 with
  ``pip install --dry-run --no-deps --ignore-installed --report r.json vllm==0.31.0``.  vllm is not installed
  on CPU machines, so these are kept as data; where vllm is installed they are checked live too.
"""

from __future__ import annotations

import importlib.metadata as md
import re
import tomllib
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]

# (package, specifier the pins must satisfy, where it comes from)
CONSTRAINTS = [
    ("vllm", ">=0.22.0,<=0.31.0", "trl 1.16.0: trl/import_utils.py is_vllm_available; METADATA extra 'vllm'"),
    ("transformers", ">=4.56.2", "trl 1.16.0 METADATA Requires-Dist"),
    ("accelerate", ">=1.10.1", "trl 1.16.0 METADATA Requires-Dist"),
    ("datasets", ">=4.7.0", "trl 1.16.0 METADATA Requires-Dist"),
    ("numpy", ">=1.26.0", "trl 1.16.0 METADATA Requires-Dist"),
    ("torch", "==2.13.0", "vllm 0.31.0 METADATA Requires-Dist"),
    ("transformers", ">=5.10.4,<5.18.0", "vllm 0.31.0 METADATA Requires-Dist"),
    ("tokenizers", ">=0.21.1", "vllm 0.31.0 METADATA Requires-Dist"),
    ("safetensors", ">=0.6.2", "vllm 0.31.0 METADATA Requires-Dist"),
]
PYTHON_CONSTRAINTS = [(">=3.10,<3.15", "vllm 0.31.0 Requires-Python")]
# The set the GPU stack is built from: exact pins.
STACK = {"trl": "1.16.0", "vllm": "0.31.0", "torch": "2.13.0", "transformers": "5.17.0"}


def _pyproject():
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _reqs(lines) -> dict[str, Requirement]:
    out = {}
    for line in lines:
        r = Requirement(line)
        assert r.name.lower() not in out, f"{r.name} listed twice"
        out[r.name.lower()] = r
    return out


def _env_pip(name: str) -> tuple[dict[str, Requirement], dict]:
    env = yaml.safe_load((ROOT / name).read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    local = [p for p in pip if p.startswith("-e")]
    assert local == ["-e ."], f"{name} must install the package itself with '-e .', found {local}"
    return _reqs(p for p in pip if not p.startswith("-e")), env


def _as_strings(reqs: dict[str, Requirement]) -> dict[str, str]:
    return {k: str(r.specifier) + (f"[{','.join(sorted(r.extras))}]" if r.extras else "") for k, r in reqs.items()}


def pinned_requirements(extras=("notebooks",)) -> dict[str, Requirement]:
    p = _pyproject()["project"]
    lines = list(p["dependencies"])
    for e in extras:
        lines += p["optional-dependencies"][e]
    return _reqs(lines)


def test_environment_yml_names_the_same_dependencies_as_pyproject():
    env, doc = _env_pip("environment.yml")
    assert _as_strings(env) == _as_strings(pinned_requirements(("notebooks",)))
    assert "python=3.11" in doc["dependencies"]


def test_environment_yml_carries_the_gpu_extra_as_its_commented_gpu_section():
    """The GPU pins live in one place: a commented block of environment.yml equal to pyproject's `gpu` extra."""
    commented = re.findall(r"^\s*#\s*-\s*([A-Za-z0-9_.\-\[\]]+\s*[=<>!~].*)$",
                           (ROOT / "environment.yml").read_text(), re.M)
    gpu = _reqs(_pyproject()["project"]["optional-dependencies"]["gpu"])
    assert _as_strings(_reqs(commented)) == _as_strings(gpu)


def test_gpu_extra_pins_vllm_exactly():
    gpu = _reqs(_pyproject()["project"]["optional-dependencies"]["gpu"])
    assert str(gpu["vllm"].specifier) == f"=={STACK['vllm']}"


def _pin(req: Requirement) -> str | None:
    specs = list(req.specifier)
    return specs[0].version if len(specs) == 1 and specs[0].operator == "==" else None


def test_the_stack_is_pinned_exactly():
    reqs = pinned_requirements(("notebooks", "gpu"))
    for name, version in STACK.items():
        assert _pin(reqs[name]) == version, f"{name}: pinned {reqs[name].specifier}, the stack needs =={version}"


@pytest.mark.parametrize("package,spec,source", CONSTRAINTS, ids=[f"{c[0]}{c[1]}" for c in CONSTRAINTS])
def test_pins_satisfy_the_upstream_constraints(package, spec, source):
    req = pinned_requirements(("notebooks", "gpu"))[package]
    constraint = SpecifierSet(spec)
    pin = _pin(req)
    if pin is not None:
        assert Version(pin) in constraint, f"{package}=={pin} violates {spec} ({source})"
    else:  # a range: the version installed here must satisfy both ours and upstream's
        installed = Version(md.version(package))
        assert installed in req.specifier and installed in constraint, (package, str(installed), spec, source)


def test_python_version_is_inside_vllms_range():
    for spec, source in PYTHON_CONSTRAINTS:
        assert Version("3.11") in SpecifierSet(spec), source


def test_trls_own_metadata_still_says_what_the_constraints_say():
    """Read the installed TRL: if it moves, the encoded constraints must be revisited."""
    assert md.version("trl") == STACK["trl"]
    requires = md.requires("trl") or []
    vllm = [Requirement(r) for r in requires if r.startswith("vllm")]
    assert vllm and vllm[0].specifier == SpecifierSet(">=0.22.0,<=0.31.0"), vllm
    import importlib.util

    src = Path(importlib.util.find_spec("trl").origin).with_name("import_utils.py").read_text()
    assert re.search(r'Version\("0\.22\.0"\)\s*<=\s*_vllm_base_version\s*<=\s*Version\("0\.31\.0"\)', src)
    for package, spec, source in CONSTRAINTS:
        if source.startswith("trl") and package != "vllm":
            found = [Requirement(r) for r in requires if Requirement(r).name == package and "extra" not in r]
            assert found and found[0].specifier == SpecifierSet(spec), (package, found)


def _installed(package: str) -> Version | None:
    try:
        return Version(Version(md.version(package)).public.split("+")[0])
    except md.PackageNotFoundError:
        return None


@pytest.mark.parametrize("package", sorted(STACK))
def test_installed_versions_are_the_pins(package):
    """torch 2.13.0+cpu here is the same release as the CUDA 2.13.0 build (the local label is the wheel flavour)."""
    got = _installed(package)
    if package == "vllm" and got is None:
        pytest.skip("vllm is the GPU extra; not installed on this CPU machine")
    assert got == Version(STACK[package]), f"{package}: installed {got}, pinned {STACK[package]}"


def test_every_exact_pin_is_what_is_installed():
    for name, req in pinned_requirements(("notebooks",)).items():
        got = _installed(name)
        assert got is not None, f"{name} is pinned but not installed"
        assert got in req.specifier, f"{name}: installed {got} does not satisfy {req.specifier}"


def test_vllm_metadata_when_installed():
    if _installed("vllm") is None:
        pytest.skip("vllm not installed (CPU machine): its constraints are checked as data above")
    requires = [Requirement(r) for r in (md.requires("vllm") or []) if "extra ==" not in r]
    by_name = {r.name.lower(): r for r in requires}
    assert by_name["torch"].specifier == SpecifierSet("==2.13.0")
    assert by_name["transformers"].specifier == SpecifierSet(">=5.10.4,<5.18.0")
