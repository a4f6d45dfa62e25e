"""Plug-ins: reward functions and registry entries from the user's own modules, named on the command line.

* ``MODULE:FUNCTION[=WEIGHT]`` names a reward function (``grpo-lessons train --reward my_rewards:length_bonus=0.5``):
  :func:`parse_reward_spec` checks the text, :func:`load_reward` imports the module and returns the function and
  its weight.  The function is called the way TRL calls reward functions (``completions=``, ``prompts=``,
  ``completion_ids=`` and the dataset's columns as keywords), so it must accept ``completions`` and ``**kwargs``.
* ``MODULE`` names a plug-in module (``grpo-lessons train --plugin my_pkg.variants``): :func:`import_plugins` imports
  it, and whatever it registers through the public registry API (``grpo_lessons.core.variants.register``,
  ``register_objective``, ...) is then a name the trainer, ``--variant`` and ``grpo-lessons variants`` know.

Both are text from a command line: the names are checked against Python's dotted-name syntax before anything is
imported (no ``eval``, no attribute names with double underscores), and every failure is a ``ValueError`` that
says which name, what went wrong and what was expected.  Importing a module runs its code: name only modules you
trust, as with ``python -m``.  Modules are found on ``sys.path`` and in the current directory.
Introduced in ``docs/guides/cpu-training.md`` (plug-ins).
"""

from __future__ import annotations

import importlib
import inspect
import math
import os
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType

__all__ = ["RewardSpec", "parse_reward_spec", "load_reward", "load_rewards", "import_plugin", "import_plugins"]

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_DOTTED = re.compile(rf"{_NAME}(?:\.{_NAME})*")
_FORMAT = "MODULE:FUNCTION or MODULE:FUNCTION=WEIGHT (e.g. my_rewards:length_bonus=0.5)"


@dataclass(frozen=True)
class RewardSpec:
    """A parsed ``MODULE:FUNCTION[=WEIGHT]``; ``weight`` is ``None`` when the text gives none (then 1)."""

    module: str
    function: str
    weight: float | None = None

    @property
    def target(self) -> str:
        """``MODULE:FUNCTION`` without the weight."""
        return f"{self.module}:{self.function}"


def _check_dotted(name: str, what: str, spec: str) -> None:
    if not _DOTTED.fullmatch(name):
        raise ValueError(f"{what} {name!r} in {spec!r} is not a dotted Python name; expected {_FORMAT}")
    dunder = [part for part in name.split(".") if part.startswith("__") and part.endswith("__")]
    if dunder:
        raise ValueError(f"{what} {name!r} in {spec!r} names a special attribute ({dunder[0]}); expected {_FORMAT}")


def parse_reward_spec(spec: str) -> RewardSpec:
    """``"pkg.mod:func=0.5"`` -> ``RewardSpec("pkg.mod", "func", 0.5)``; ``ValueError`` for anything else.

    The weight is any finite number (a negative weight makes the function a penalty).  Nothing is imported here.
    """
    if not isinstance(spec, str):
        raise ValueError(f"a reward is given as text, {_FORMAT}; got {type(spec).__name__}")
    text = spec.strip()
    target, eq, weight_text = text.partition("=")
    weight = None
    if eq:
        try:
            weight = float(weight_text)
        except ValueError:
            raise ValueError(f"reward weight {weight_text!r} in {spec!r} is not a number; expected {_FORMAT}") from None
        if not math.isfinite(weight):
            raise ValueError(f"reward weight in {spec!r} must be a finite number, got {weight_text!r}")
    module, colon, function = target.strip().partition(":")
    if not colon or not module or not function:
        raise ValueError(f"reward {spec!r} names no function; expected {_FORMAT}")
    _check_dotted(module, "module", spec)
    _check_dotted(function, "function", spec)
    return RewardSpec(module, function, weight)


def _import(module: str, what: str) -> ModuleType:
    """``importlib.import_module`` with the current directory on the path and one-line errors."""
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.append(cwd)  # after the installed packages: a local file never shadows one of them
    importlib.invalidate_caches()  # a file written since the last import (in a notebook, say) is found
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        missing = e.name or ""
        if missing == module or module.startswith(missing + "."):
            raise ValueError(f"{what}: no module named {missing!r} (looked in the current directory and on sys.path; "
                             "check the spelling, or install the package that has it)") from None
        raise ValueError(f"{what}: importing {module!r} failed: it needs {missing!r}, which is not installed") from None
    except Exception as e:  # noqa: BLE001 - the module's own code failed: one clear line, not a traceback
        raise ValueError(f"{what}: importing {module!r} failed: {type(e).__name__}: {e}") from None


def _accepts_reward_call(fn: Callable) -> bool:
    """Whether ``fn`` takes ``**kwargs``, as a reward function must: it is called with ``completions=`` and every
    column of the dataset as keywords, and the columns differ from task to task."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return True  # no signature to read (some callables written in C): let the first call tell
    return any(p.kind is p.VAR_KEYWORD for p in params)


def load_reward(spec: str | RewardSpec) -> tuple[Callable, float]:
    """The reward function ``spec`` names and its weight (1 when the text gives none).

    ``ValueError`` when the module cannot be imported, has no such attribute, the attribute is not callable, or it
    cannot take the keywords a reward function is called with (``completions`` and ``**kwargs``).
    """
    s = spec if isinstance(spec, RewardSpec) else parse_reward_spec(spec)
    what = f"reward {s.target}"
    obj = _import(s.module, what)
    path = s.module
    for part in s.function.split("."):
        if not hasattr(obj, part):
            public = sorted(n for n, v in vars(obj).items() if callable(v) and not n.startswith("_")) \
                if isinstance(obj, ModuleType) else []
            known = f"; its functions: {', '.join(public[:12])}" if public else ""
            raise ValueError(f"{what}: {path!r} has no attribute {part!r}{known}")
        obj = getattr(obj, part)
        path = f"{path}.{part}"
    if not callable(obj):
        raise ValueError(f"{what}: {path!r} is a {type(obj).__name__}, not a function")
    if not _accepts_reward_call(obj):
        raise ValueError(f"{what}: a reward function is called with keywords, as TRL calls it "
                         "(completions=, prompts=, completion_ids= and the dataset's columns): give it the signature "
                         "(completions, **kwargs)")
    return obj, (1.0 if s.weight is None else s.weight)


def load_rewards(specs: Sequence[str]) -> tuple[list[Callable], list[float]]:
    """:func:`load_reward` of each spec: ``(functions, weights)``, in order."""
    if isinstance(specs, str):
        specs = [specs]
    loaded = [load_reward(s) for s in specs]
    if not loaded:
        raise ValueError("no reward functions given")
    return [f for f, _ in loaded], [w for _, w in loaded]


def import_plugin(module: str) -> list[str]:
    """Import the plug-in ``module``; returns the names of the variants it registered (``[]`` when it registered
    none, or was imported before).  ``ValueError`` for a bad name or a module that cannot be imported."""
    from grpo_lessons.core.variants import VARIANTS

    if not isinstance(module, str) or not _DOTTED.fullmatch(module.strip()):
        raise ValueError(f"plug-in {module!r} is not a dotted Python module name (e.g. my_pkg.variants)")
    before = set(VARIANTS)
    _import(module.strip(), f"plug-in {module.strip()}")
    return [name for name in VARIANTS if name not in before]


def import_plugins(modules: Sequence[str]) -> dict[str, list[str]]:
    """:func:`import_plugin` of each module, in order: ``{module: variants it registered}``."""
    if isinstance(modules, str):
        modules = [modules]
    return {m: import_plugin(m) for m in modules}
