"""Work by effect name: what each effect a table's rows name stands for, at one level.

Rules of this module:
- a level (a coordinator, a model of it) does the work an effect name stands for by looking
  the name up in a `work(table, ...)` mapping; every level of one table is built against
  the same names, the ones the table's rows emit (`Table.effect_names`);
- it is *checked when built*: a name a row emits with no work, or work for a name no row
  emits, is a `DefinitionError`; an effect that does nothing at a level says so with an
  explicit entry, never by being left out;
- a lookup of a name it lacks raises `UnknownEffect` (a `KeyError`) naming the effect, the
  table and the level: a derived table (a mutant) may drop or move effects, and is never
  silently turned into a no-op by a lookup.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, TypeVar

from quiesce.fsm._errors import DefinitionError, UnknownEffect
from quiesce.fsm._table import Table

__all__ = ["work"]

W = TypeVar("W")


class _Work(dict[str, Any]):
    """A dict whose missing key raises `UnknownEffect` (a hit stays a C-level lookup)."""

    __slots__ = ("level", "machine")

    def __init__(self, machine: str, level: str, items: Mapping[str, Any]) -> None:
        super().__init__(items)
        self.machine = machine
        self.level = level

    def __missing__(self, name: str) -> Any:
        raise UnknownEffect(self.machine, name, self.level)


def work(table: Table[Any, Any], work: Mapping[str, W], *, level: str) -> Mapping[str, W]:
    """The work of `level` for each effect name of `table`'s rows, checked and read-only.

    >>> from enum import Enum
    >>> from quiesce.fsm import Table, on
    >>> class S(Enum): A = "a"
    >>> class I(Enum): GO = "go"
    >>> table = Table("t", states=S, inputs=I, initial=S.A, finals=[S.A],
    ...               rows=[on(S.A, I.GO, None, effects="log")])
    >>> done = work(table, {"log": print}, level="example")
    >>> done["log"] is print
    True
    >>> done["tick"]
    Traceback (most recent call last):
    ...
    quiesce.fsm._errors.UnknownEffect: "t has no effect 'tick' (example level)"
    """
    emitted = table.effect_names
    problems = [
        ("unknown_name", f"effect {name!r} of a row has no work at the {level} level")
        for name in emitted
        if name not in work
    ]
    problems += [
        ("unknown_name", f"work for {name!r}, which no row emits ({level} level)")
        for name in work
        if name not in emitted
    ]
    if problems:
        raise DefinitionError(table.name, problems)
    return MappingProxyType(_Work(table.name, level, work))
