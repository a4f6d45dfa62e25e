"""The API reference is complete: every public module of the package is on its layer's page, every public name a
module exports has a docstring, and every name the top level exports is documented somewhere on those pages."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import pytest

import grpo_lessons

ROOT = Path(__file__).resolve().parents[1]
PAGES = {p.stem: p.read_text() for p in (ROOT / "docs" / "reference").glob("*.md")}
LISTED = set(re.findall(r"^::: (\S+)", "\n".join(PAGES.values()), re.M))
#: Modules that hold data only (each entry registers things) and say so on the page of their package.
DATA_ONLY = {"grpo_lessons.lab.claim_list"}


def _public_modules() -> list[str]:
    out = []
    for m in pkgutil.walk_packages(grpo_lessons.__path__, "grpo_lessons."):
        if ".exercise_bank" in m.name or any(part.startswith("_") for part in m.name.split(".")):
            continue
        if not m.ispkg:
            out.append(m.name)
    return sorted(out)


MODULES = _public_modules()


@pytest.mark.parametrize("name", MODULES)
def test_every_public_module_is_on_its_layers_page(name):
    if name in DATA_ONLY:
        return
    layer = name.split(".")[1]
    assert name in LISTED, f"{name} is on no API page (add '::: {name}' to docs/reference/{layer}.md)"
    assert f"::: {name}" in PAGES[layer], f"{name} is listed, but not on the {layer} page"


@pytest.mark.parametrize("name", MODULES)
def test_every_exported_function_and_class_has_a_docstring(name):
    mod = importlib.import_module(name)
    bare = [n for n in getattr(mod, "__all__", []) if (inspect.isfunction(getattr(mod, n)) or
                                                       inspect.isclass(getattr(mod, n)))
            and not (getattr(mod, n).__doc__ or "").strip()]
    assert bare == [], f"{name} exports names without a docstring: {bare}"


def test_every_top_level_name_is_documented():
    for n in grpo_lessons.__all__:
        if n == "__version__":
            continue
        obj = getattr(grpo_lessons, n)
        home = getattr(obj, "__module__", None) or type(obj).__module__
        if not (inspect.isfunction(obj) or inspect.isclass(obj)):  # a registry instance: documented by its module
            home = next(m for m in MODULES if getattr(importlib.import_module(m), n, None) is obj
                        and n in getattr(importlib.import_module(m), "__all__", []))
        assert home in LISTED, f"grpo_lessons.{n} lives in {home}, which no API page lists"
        assert (obj.__doc__ or "").strip(), f"grpo_lessons.{n} has no docstring"
