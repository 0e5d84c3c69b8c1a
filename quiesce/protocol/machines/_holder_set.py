"""The holder-set rule shared by M6 (`admission_gate`) and M7 (`deadline_registry`).

A resource is held while *any* holder holds it. `hold(h)` adds `h` (a repeated hold by the
same holder is a no-op: sets dedupe); `release(h)` removes only `h`, so one holder never
reopens what another still holds; releasing a hold one does not have changes nothing.

What lives here: who may hold (`Holder`), and the guard, the two updates and the invariant
of that rule, written once over any machine data that *contains* a holder set. What does
not: the rows. Each machine keeps its own literal table (so a reader sees every move in one
screen) and names these functions in it; M6's data is the set itself, M7's data carries the
set next to its clocks.

>>> rule = HolderSet(holders=lambda data: data, replace=lambda data, held: held)
>>> rule.add(frozenset(), Holder.CHECKPOINT) == {Holder.CHECKPOINT}
True
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Generic, TypeVar

from quiesce.fsm import Value

__all__ = ["Holder", "HolderSet", "Holders"]

D = TypeVar("D")


class Holder(StrEnum):
    """Who holds admission closed (M6) or the deadline clocks stopped (M7).

    A `StrEnum`: a holder is its spec name wherever it is printed, logged or compared.
    """

    CHECKPOINT = "checkpoint"  # an attempt, from closing_admission until it ends (M1)
    TRAIN_SWITCH = "train_switch"  # the colocated train switch (both M6 and M7)
    WEIGHT_SYNC = "weight_sync"  # a weight sync (M6 only)
    RESTORE = "restore"  # the restore at controller start (M9, M6 only)


Holders = frozenset[Holder]
"""The holders holding a resource."""


def _same(arg: Any) -> Holder:
    return Holder(arg)


@dataclass(frozen=True)
class HolderSet(Generic[D]):
    """The holder-set rule over machine data `D`.

    `holders(data)` reads the set, `replace(data, holders)` returns data with a new set, and
    `holder(arg)` names the holder an input's argument speaks for (the argument itself by
    default). Every method is pure and fits the engine's guard/update signatures.
    """

    holders: Callable[[D], Holders]
    replace: Callable[[D, Holders], D]
    holder: Callable[[Any], Holder] = _same

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
