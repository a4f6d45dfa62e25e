"""One registry per family of pieces: a read-only ``name -> entry`` mapping that ``register_*`` functions fill.

Every family the loss is assembled from is one of these: advantage scales
(:data:`~grpo_lessons.core.advantages.ADVANTAGE_SCALES`), ratio levels (:data:`~grpo_lessons.core.ratios.RATIO_LEVELS`),
objectives (:data:`~grpo_lessons.core.objectives.OBJECTIVES`), aggregations
(:data:`~grpo_lessons.core.aggregation.AGGREGATIONS`), rollout corrections
(:data:`~grpo_lessons.core.correction.CORRECTION_MODES`) and the variants built from them
(:data:`~grpo_lessons.core.variants.VARIANTS`).  A new piece is one ``register_*`` call; everything downstream
(``policy_loss``, the trainers, the command line, the TRL bridge, the tests) reads the registry instead of
switching on names.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Generic, TypeVar

__all__ = ["Registry"]

E = TypeVar("E")


class Registry(Mapping[str, E], Generic[E]):
    """A read-only mapping ``name -> entry`` for one family of pieces, in registration order.

    It supports what a dict does for reading (``in``, ``[name]``, iteration, ``len``, ``items()``); entries are
    added by the family's ``register_*`` function (which checks them) and never by item assignment.
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind  # what one entry is called in error messages, e.g. "advantage scale"
        self._entries: dict[str, E] = {}
        self._checks: list[Callable[[E], None]] = []

    def __getitem__(self, name: str) -> E:
        return self._entries[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"<{self.kind} registry: {', '.join(self._entries)}>"

    def lookup(self, name: str, what: str | None = None) -> E:
        """The entry called ``name``; ``ValueError`` naming every known entry otherwise."""
        try:
            return self._entries[name]
        except (KeyError, TypeError):
            raise ValueError(f"unknown {what or self.kind} {name!r}; known: {', '.join(sorted(self._entries))}") from None

    def add(self, name: str, entry: E, *, replace: bool = False) -> E:
        """Store ``entry`` under ``name`` (the ``register_*`` functions call this after checking the entry)."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"a {self.kind} needs a non-empty string name, got {name!r}")
        if name in self._entries and not replace:
            raise ValueError(f"{self.kind} {name!r} is already registered (pass replace=True to overwrite it)")
        for check in self._checks:
            check(entry)
        self._entries[name] = entry
        return entry

    def add_check(self, check: Callable[[E], None]) -> None:
        """Run ``check(entry)`` on every entry now and on every one added later; it raises to refuse an entry.

        For what only a higher layer can verify: the TRL bridge checks that the ``GRPOConfig`` fields an entry names
        exist (the core does not import TRL).  An entry already registered that fails raises here.
        """
        for entry in self._entries.values():
            check(entry)
        self._checks.append(check)

    def unregister(self, name: str) -> E:
        """Remove and return the entry called ``name`` (for experiments and tests that register throwaway pieces)."""
        self.lookup(name)  # a clear error for an unknown name
        return self._entries.pop(name)
