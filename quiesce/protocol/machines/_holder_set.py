"""The holder-set rule shared by M6 (`admission_gate`) and M7 (`deadline_registry`).

A resource is held while *any* holder holds it. `hold(h)` adds `h` (a repeated hold by the
same holder is a no-op: sets dedupe); `release(h)` removes only `h`, so one holder never
reopens what another still holds; releasing a hold one does not have changes nothing.

What lives here: the guard, the two updates and the invariant of that rule, written once
over any machine data that *contains* a holder set. What does not: the rows. Each machine
keeps its own literal table (so a reader sees every move in one screen) and names these
functions in it; M6's data is the set itself, M7's data carries the set next to its clocks.

>>> rule = HolderSet(holders=lambda data: data, replace=lambda data, held: held)
>>> rule.add(frozenset(), "checkpoint")
frozenset({'checkpoint'})
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from quiesce.fsm import Value

__all__ = ["HolderSet", "Holders"]

D = TypeVar("D")

Holders = frozenset[str]
"""The names holding a resource (`checkpoint`, `train_switch`, `weight_sync`)."""


def _same(arg: Any) -> str:
    return str(arg)


@dataclass(frozen=True)
class HolderSet(Generic[D]):
    """The holder-set rule over machine data `D`.

    `holders(data)` reads the set, `replace(data, holders)` returns data with a new set, and
    `holder(arg)` names the holder an input's argument speaks for (the argument itself by
    default). Every method is pure and fits the engine's guard/update signatures.
    """

    holders: Callable[[D], Holders]
    replace: Callable[[D, Holders], D]
    holder: Callable[[Any], str] = _same

    def is_last(self, value: Value[Any, D], arg: Any) -> bool:
        """Guard: `arg`'s holder is the only one left, so releasing it frees the resource."""
        return self.holders(value.data) == frozenset({self.holder(arg)})

    def add(self, data: D, arg: Any) -> D:
        """Update: `arg`'s holder holds (a no-op if it already does)."""
        return self.replace(data, self.holders(data) | {self.holder(arg)})

    def remove(self, data: D, arg: Any) -> D:
        """Update: `arg`'s holder lets go of its own hold, never of another's."""
        return self.replace(data, self.holders(data) - {self.holder(arg)})

    def held(self, data: D) -> bool:
        """Is the resource held by anybody?"""
        return bool(self.holders(data))
