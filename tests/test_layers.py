"""The package's layers (core < lab < training < integrations < course) as a contract the suite enforces.

Every import of every module counts, the ones inside functions too: a lazy import upward is still a dependency
upward.  Checked here: each module imports only from its own layer or the ones below; the graph of the package's
modules has no cycle; the core layer needs nothing outside torch, numpy and the standard library; and
``import grpo_lessons`` loads none of the heavy libraries.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "grpo_lessons"
LAYERS = ("core", "lab", "training", "integrations", "course")
#: What each layer may import from outside the package (besides the standard library).
THIRD_PARTY = {
    "core": {"torch", "numpy"},
    "lab": {"torch", "numpy"},
    "training": {"torch", "numpy", "transformers", "tokenizers", "accelerate", "peft", "datasets", "gguf", "tqdm",
                 "safetensors", "matplotlib", "IPython"},
    "integrations": {"torch", "numpy", "transformers", "trl", "datasets", "accelerate", "peft"},
    "course": {"torch", "numpy", "matplotlib", "ipywidgets", "IPython", "transformers"},
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Absolute names of every module ``path`` imports, at the top or inside a function."""
    mod = _module_name(path)
    pkg = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            out.add(target)
            if target.startswith("grpo_lessons"):  # `from pkg import submodule`
                out.update(f"{target}.{a.name}" for a in node.names)
    return out


MODULES = {_module_name(p): p for p in sorted(PKG.rglob("*.py"))}


def _internal(names: set[str]) -> set[str]:
    return {n for n in names if n in MODULES}


def _layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else None


def test_every_module_lives_in_a_layer():
    loose = [m for m in MODULES if m != "grpo_lessons" and _layer(m) is None]
    assert loose == [], f"modules outside the layers: {loose}"


def _upward(module: str, path: Path, known: set[str]) -> list[str]:
    mine = LAYERS.index(_layer(module))
    return sorted(n for n in _imports(path) if n in known and _layer(n) and LAYERS.index(_layer(n)) > mine)


@pytest.mark.parametrize("module", [m for m in MODULES if _layer(m)])
def test_imports_only_from_its_own_layer_or_below(module):
    upward = _upward(module, MODULES[module], set(MODULES))
    assert upward == [], f"{module} ({_layer(module)}) imports from a higher layer: {upward}"


@pytest.mark.parametrize("module", [m for m in MODULES if _layer(m)])
def test_third_party_imports_belong_to_the_layers_extra(module):
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    outside = {n.split(".")[0] for n in _imports(MODULES[module]) if not n.startswith("grpo_lessons")}
    extra = sorted(outside - stdlib - THIRD_PARTY[_layer(module)])
    assert extra == [], f"{module} imports {extra}, which the {_layer(module)} layer does not depend on"


def test_the_top_level_package_imports_the_core_only():
    top = _internal(_imports(MODULES["grpo_lessons"]))
    assert top and all(_layer(n) == "core" for n in top), top


def test_no_import_cycle_between_modules():
    graph = {m: {n for n in _internal(_imports(p)) if n != m and not m.startswith(n + ".")} for m, p in MODULES.items()}
    # a package's __init__ importing its own submodules is not a cycle of logic: drop submodule -> parent edges
    for m in graph:
        graph[m] = {n for n in graph[m] if not (m.startswith(n + ".") or n == m.rsplit(".", 1)[0])}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                cycle = stack[stack.index(n):] + [n]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if n not in state:
                visit(n)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)


def test_the_checker_sees_a_planted_upward_import(tmp_path, monkeypatch):
    """The contract test itself can fail: a lazy import of the trainer inside a core module is caught."""
    bad = tmp_path / "grpo_lessons" / "core" / "bad.py"
    bad.parent.mkdir(parents=True)
    bad.write_text("def f():\n    from ..training.trainer import Trainer\n    return Trainer\n")
    monkeypatch.setattr(sys.modules[__name__], "PKG", tmp_path / "grpo_lessons")
    assert _upward("grpo_lessons.core.bad", bad, set(MODULES)) == ["grpo_lessons.training.trainer"]


def test_import_grpo_lessons_loads_no_heavy_library():
    code = ("import sys, time; t = time.perf_counter(); import grpo_lessons; dt = time.perf_counter() - t; "
            "heavy = sorted({m.split('.')[0] for m in sys.modules} & "
            "{'transformers', 'trl', 'matplotlib', 'ipywidgets', 'datasets', 'accelerate', 'peft', 'IPython'}); "
            "print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]", f"import grpo_lessons loaded {out}"


def test_import_grpo_lessons_lab_loads_no_heavy_library():
    """The lab runs with torch alone: importing it (claims and all) loads none of the training or course libraries."""
    code = ("import sys; import grpo_lessons.lab, grpo_lessons.lab.claims, grpo_lessons.lab.cli; "
            "heavy = sorted({m.split('.')[0] for m in sys.modules} & "
            "{'transformers', 'trl', 'matplotlib', 'ipywidgets', 'datasets', 'accelerate', 'peft', 'IPython', "
            "'tokenizers', 'gguf'}); print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]", f"import grpo_lessons.lab loaded {out}"
