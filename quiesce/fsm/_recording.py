"""Row recording: which rows of a table a run actually fires.

What lives here: `RowLog`, the mutable log of one run (the rows fired, each with the state
it fired from, and the guards found false), and `recording`, a table that steps exactly as
the one it wraps and notes every step in a `RowLog`. What it does not know: what the log is
for (the models' mutant stages skip the stages that never reach a mutated row; the
conformance kit reports which rows a run fired).
"""

from __future__ import annotations

from enum import Enum
from typing import Any, TypeVar

from quiesce.fsm._table import Table, Value

__all__ = ["RowEvent", "RowLog", "recording"]

S = TypeVar("S", bound=Enum)
I = TypeVar("I", bound=Enum)  # noqa: E741  (I for "input", as in `_table`)

RowEvent = tuple[str, int, str]
"""`(table, row index, source state name)`: one row firing, or one guard found false."""


class RowLog:
    """What a recording run did with the rows: `fired` (the row stepped the machine from
    that source) and `refused` (the row's guard was evaluated false in that source, by a
    step or an `enabled` probe). One log per run; several tables may share it."""

    def __init__(self) -> None:
        self.fired: set[RowEvent] = set()
        self.refused: set[RowEvent] = set()

    def rows(self, table: str) -> frozenset[int]:
        """The indices of the rows of `table` that fired."""
        return frozenset(r for t, r, _ in self.fired if t == table)


def recording(table: Table[S, I], log: RowLog) -> Table[S, I]:
    """A table that steps exactly as `table` (same name, rows and bindings) and notes in
    `log` the row each step fires and the guards it finds false on the way."""
    return _RecordingTable(table, log)


class _RecordingTable(Table[Any, Any]):
    """It re-selects the row the engine will fire (declared order, first guard that holds):
    guards are pure, so evaluating them twice changes nothing. Built by copying the
    compiled table rather than compiling it again: the same rows, bindings and index.
    """

    def __init__(self, table: Table[Any, Any], log: RowLog) -> None:
        # No super().__init__: the compiled table is copied as it is, not rebuilt.
        self.__dict__.update(table.__dict__)
        self._log = log
        self._by_pair: dict[tuple[Enum, Enum], tuple[int, ...]] = {}
        for index, row in enumerate(table.rows):
            for source in row.sources:
                pair = (source, row.input)
                self._by_pair[pair] = (*self._by_pair.get(pair, ()), index)

    def _note(self, value: Value[Any, Any], input: Any, arg: Any, *, firing: bool) -> None:
        state = value.state
        for index in self._by_pair.get((state, input), ()):
            guard = self.rows[index].guard
            if guard is None or self.guards[guard](value, arg):
                if firing:
                    self._log.fired.add((self.name, index, state.name))
                return
            self._log.refused.add((self.name, index, state.name))

    def step(
        self, value: Value[Any, Any], input: Any, arg: Any = None
    ) -> tuple[Value[Any, Any], tuple[Any, ...]]:
        self._note(value, input, arg, firing=True)
        return super().step(value, input, arg)

    def enabled(self, value: Value[Any, Any], input: Any, arg: Any = None) -> bool:
        self._note(value, input, arg, firing=False)
        return super().enabled(value, input, arg)
