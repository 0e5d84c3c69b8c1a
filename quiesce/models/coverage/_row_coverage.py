"""Row coverage: which rows of the protocol's tables a run of the model actually fires.

What lives here: `RowCoverage` (the rows fired, each with the state it fired from, and the
guards found false) and `recording_hooks`, the model's `Hooks` with every table the
generated mutants mutate wrapped by `quiesce.fsm.recording`, which notes each step. What it
does not know: which run to make (`_mutant_stages` runs each stage once, unmutated).

Why it decides mutants. A generated mutant changes one row: a retarget changes what the row
does once it fires, a dropped guard what happens when that guard is evaluated false. A
stage of the model (an exhaustive configuration, or seeded random walks) that never fires
the row, or never finds the guard false, steps the mutant exactly as the unmutated
protocol, state for state and walk for walk: it cannot kill the mutant, and running it is
wasted. So each stage's coverage is computed once and a mutant runs only the stages that
reach its row.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from enum import Enum

from quiesce.fsm import RowEvent, RowLog, recording
from quiesce.models.design import DesignTables
from quiesce.models.implementation import Hooks

__all__ = ["RowCoverage", "RowRecorder", "recording_design_tables", "recording_hooks"]


@dataclass(frozen=True)
class RowCoverage:
    """What one unmutated run did with the rows: `fired` (the row stepped the machine from
    that source) and `refused` (the row's guard was evaluated false in that source, by a
    step or an `enabled` probe). Names, not enum members, so it pickles across processes.
    """

    fired: frozenset[RowEvent] = frozenset()
    refused: frozenset[RowEvent] = frozenset()

    def fires(self, table: str, row: int, *, other_than: Enum | None = None) -> bool:
        """Did `row` of `table` fire, from some source other than `other_than`?"""
        skip = None if other_than is None else other_than.name
        return any(t == table and r == row and s != skip for t, r, s in self.fired)

    def refuses(self, table: str, row: int) -> bool:
        """Was the guard of `row` of `table` ever evaluated false?"""
        return any(t == table and r == row for t, r, _ in self.refused)

    def rows(self, table: str) -> frozenset[int]:
        """The indices of the rows of `table` that fired."""
        return frozenset(r for t, r, _ in self.fired if t == table)


class RowRecorder(RowLog):
    """The log a recording run fills (one per run, never shared between runs): `fired` and
    `refused` since the last `take`, and every event before it."""

    def __init__(self) -> None:
        super().__init__()
        self._fired_before: set[RowEvent] = set()
        self._refused_before: set[RowEvent] = set()

    def take(self) -> RowCoverage:
        """The events since the last `take` (those of one step), then start afresh."""
        taken = RowCoverage(frozenset(self.fired), frozenset(self.refused))
        self._fired_before |= self.fired
        self._refused_before |= self.refused
        self.fired.clear()
        self.refused.clear()
        return taken

    def coverage(self) -> RowCoverage:
        """Every event of the run."""
        return RowCoverage(
            frozenset(self._fired_before | self.fired),
            frozenset(self._refused_before | self.refused),
        )


def recording_hooks(hooks: Hooks) -> tuple[Hooks, RowRecorder]:
    """`hooks` with every table the generated mutants mutate (the controller's checkpoint,
    admission gate and deadline registry, the participant's fence and agent executions)
    recording into one fresh recorder."""
    recorder = RowRecorder()
    rules = hooks.participant
    participant = replace(
        rules, fence=recording(rules.fence, recorder), agent=recording(rules.agent, recorder)
    )
    recorded = replace(
        hooks,
        checkpoint=recording(hooks.checkpoint, recorder),
        gate=recording(hooks.gate, recorder),
        deadlines=recording(hooks.deadlines, recorder),
        participant=participant,
    )
    return recorded, recorder


def recording_design_tables(tables: DesignTables) -> tuple[DesignTables, RowRecorder]:
    """`tables` (the design model's ten machines) with every one recording into one fresh
    recorder."""
    recorder = RowRecorder()
    wrapped = {
        f.name: recording(getattr(tables, f.name), recorder)
        for f in fields(tables)
        if f.name != "variant"
    }
    return tables.derive(tables.variant, **wrapped), recorder
