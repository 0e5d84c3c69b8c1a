"""Design mutants: each re-introduces a known design bug by deriving a table, and the design
model must kill it.

What lives here: `DESIGN_MUTANTS`, one entry per bug, each naming its §7 scenario, how its
tables are derived from the machines' own (`without_row`, `retarget`, `without_guard`,
`derive`: the original tables are untouched, nothing is patched), the property that kills
it and the smallest configuration that does; `kill` runs one. What it does not know: the
implementation mutants (`quiesce.mutants._catalog`, for the `protocol` model), or bugs that
live outside the tables (the controller's digest check of S16, the journal of S19, the
"attempted before the call" rule of S6): the design model composes tables, so only a bug
in a table is a design bug it can be asked to find.

>>> result = kill(DESIGN_MUTANTS["S17_retire_releases_completed"])  # doctest: +SKIP
>>> result.violation("I1") is not None  # doctest: +SKIP
True
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from quiesce.check import CheckResult, add_mutants, check, with_faults
from quiesce.fsm import Table, on
from quiesce.models.design import DesignModel, DesignParams, DesignTables
from quiesce.protocol.machines import (
    AGENT_EXECUTION,
    CHECKPOINT,
    CONTROL_FENCE,
    DEADLINE_REGISTRY,
    RESTORE,
    AgentInput,
    CheckpointInput,
    CheckpointState,
    ExecState,
    FenceInput,
    FenceState,
    RegistryInput,
    RegistryState,
    RestoreInput,
    RestoreState,
)

__all__ = ["DESIGN_MUTANTS", "DesignMutant", "kill", "small"]


@dataclass(frozen=True)
class DesignMutant:
    """One design bug: the tables that carry it, the property that must kill it (`I1`..`I9`)
    and the smallest configuration that does (`params`, over `small()`)."""

    name: str
    scenario: str
    doc: str
    tables: Callable[[], DesignTables]
    killed_by: str
    params: Mapping[str, Any] = field(default_factory=dict)

    def model(self) -> DesignModel:
        """The design model carrying this bug, at its killing configuration."""
        return DesignModel(
            DesignParams(**small(**self.params)), tables=self.tables(), name=f"design[{self.name}]"
        )


def small(**overrides: Any) -> dict[str, Any]:
    """A small configuration: one sibling of one turn, one trigger, the optimizer step that
    trains it, nothing else unless asked (the other parameters at their defaults)."""
    base: dict[str, Any] = dict(
        siblings=1,
        turns=1,
        attempts=1,
        triggers=1,
        optimizer_steps=1,  # the trainer consumes the group (I9)
        weight_sync=0,
        train_switch=0,
        faults=0,
        crashes=False,
    )
    base.update(overrides)
    return base


def kill(mutant: DesignMutant, max_states: int | None = None) -> CheckResult[Any]:
    """Explore the mutant's model until the first violation (or exhaustion)."""
    return check(mutant.model(), max_states=max_states)


def _row(table: Table[Any, Any], source: Enum, input: Enum, *, guard: str | None = None) -> int:
    """The index of the first row of `table` for `source` + `input` with `guard`."""
    for index, row in enumerate(table.rows):
        if row.input is input and source in row.sources and row.guard == guard:
            return index
    raise LookupError(f"{table.name} has no row {source} + {input} [{guard}]")


_BASE = DesignTables()


def _stale_prepare_accepted() -> DesignTables:
    # S15: no high-watermark check on prepare: a delayed prepare(X) after resume(X) fences.
    index = _row(CONTROL_FENCE, FenceState.IDLE, FenceInput.RECV_PREPARE, guard="stale_id")
    return _BASE.derive("S15", fence=CONTROL_FENCE.without_row(index))


def _retire_releases_completed() -> DesignTables:
    # S17: retire tombstones a completed, un-ACKed execution (its result is released).
    index = _row(AGENT_EXECUTION, ExecState.COMPLETED, AgentInput.RETIRE)
    rows = list(AGENT_EXECUTION.rows)
    rows[index] = on(
        ExecState.COMPLETED, AgentInput.RETIRE, ExecState.TOMBSTONED, effects="tombstone"
    )
    return _BASE.derive("S17", execution=AGENT_EXECUTION.derive("S17", rows=rows))


def _deadline_runs_while_parked() -> DesignTables:
    # S1: the checkpoint's hold is recorded but the clocks keep running (no suspend).
    index = _row(DEADLINE_REGISTRY, RegistryState.RUNNING, RegistryInput.SUSPEND)
    registry = DEADLINE_REGISTRY.retarget(index, None).without_effect(index, "cancel_all")
    return _BASE.derive("S1", deadlines=registry)


def _boolean_suspend() -> DesignTables:
    # S2: a boolean, not a holder set: any holder's resume restarts the clocks.
    index = _row(
        DEADLINE_REGISTRY, RegistryState.SUSPENDED, RegistryInput.RESUME, guard="last_holder"
    )
    return _BASE.derive("S2", deadlines=DEADLINE_REGISTRY.without_guard(index))


def _release_failure_stops() -> DesignTables:
    # S4: a failed release stops the run instead of release_pending.
    index = next(
        i
        for i, row in enumerate(CHECKPOINT.rows)
        if row.input is CheckpointInput.FAILED
        and row.sources == (CheckpointState.RELEASING,)
        and row.target is CheckpointState.RELEASE_PENDING
    )
    return _BASE.derive("S4", checkpoint=CHECKPOINT.retarget(index, CheckpointState.STOPPED))


def _abort_with_new_id() -> DesignTables:
    # S5: a pending abort of X is given up at the next trigger; the next attempt is new.
    index = _row(CHECKPOINT, CheckpointState.ABORT_PENDING, CheckpointInput.TRIGGER)
    rows = list(CHECKPOINT.rows)
    rows[index] = on(
        CheckpointState.ABORT_PENDING,
        CheckpointInput.TRIGGER,
        CheckpointState.IDLE,
        update="finished",
        effects=("cancel_retry", "clear_intent", "drop_holds"),
    )
    return _BASE.derive("S5", checkpoint=CHECKPOINT.derive("S5", rows=rows))


def _intent_ignored() -> DesignTables:
    # S18: a restart ignores the intent record: the id in flight is never finished.
    index = _row(CHECKPOINT, CheckpointState.IDLE, CheckpointInput.RECOVERED)
    rows = list(CHECKPOINT.rows)
    rows[index] = on(CheckpointState.IDLE, CheckpointInput.RECOVERED, None)
    return _BASE.derive("S18", checkpoint=CHECKPOINT.derive("S18", rows=rows))


def _restart_only_resumed() -> DesignTables:
    # S12: restored continuations on a restart_only resource are not discarded first.
    index = _row(
        RESTORE, RestoreState.RESTORED_PAUSED, RestoreInput.DISCARD_BEGIN, guard="has_discards"
    )
    return _BASE.derive("S12", restore=RESTORE.without_row(index))


def _commit_not_replayed() -> DesignTables:
    # M2: the same commit(X) after a lost reply is not answered from the record.
    index = _row(
        CONTROL_FENCE, FenceState.COMMITTED_PAUSED, FenceInput.RECV_COMMIT, guard="same_id"
    )
    return _BASE.derive("M2-commit", fence=CONTROL_FENCE.without_row(index))


def _final_resume_not_replayed() -> DesignTables:
    # M2: a repeated resume(X) of the newest retired id is refused as stale, not replayed.
    index = _row(CONTROL_FENCE, FenceState.IDLE, FenceInput.RECV_RESUME, guard="watermark_id")
    return _BASE.derive("M2-resume", fence=CONTROL_FENCE.without_row(index))


DESIGN_MUTANTS: Mapping[str, DesignMutant] = {
    m.name: m
    for m in (
        DesignMutant(
            "S1_deadline_runs_while_parked",
            "S1",
            "the checkpoint's hold does not suspend the deadline clocks",
            _deadline_runs_while_parked,
            "I4",
        ),
        DesignMutant(
            "S2_boolean_suspend",
            "S2",
            "a boolean, not a holder set: the train switch's end restarts the clocks",
            _boolean_suspend,
            "I4",
            {"train_switch": 1},
        ),
        DesignMutant(
            "S4_release_failure_stops",
            "S4",
            "a release that fails after its retries stops the run, not release_pending",
            _release_failure_stops,
            "I7",
            {"faults": 1, "call_retries": 0},
        ),
        DesignMutant(
            "S5_abort_with_new_id",
            "S5",
            "a pending abort of X is dropped at the next trigger; the next attempt is new",
            _abort_with_new_id,
            "I3",
            {"faults": 1, "call_retries": 0, "triggers": 2},
        ),
        DesignMutant(
            "S12_restart_only_resumed",
            "S12",
            "a restored continuation on a restart_only resource is resumed, not discarded",
            _restart_only_resumed,
            "I8",
            {"turns": 2, "attempts": 2, "faults": 1, "crashes": True},
        ),
        DesignMutant(
            "S15_stale_prepare_accepted",
            "S15",
            "a delayed prepare(X) after resume(X) is accepted (no high-watermark check)",
            _stale_prepare_accepted,
            "I3",
            {"faults": 1},
        ),
        DesignMutant(
            "S17_retire_releases_completed",
            "S17",
            "retire tombstones a completed, un-ACKed execution",
            _retire_releases_completed,
            "I1",
            {"attempts": 2, "triggers": 0, "faults": 1},
        ),
        DesignMutant(
            "S18_intent_ignored_at_restart",
            "S18",
            "a restarted controller ignores the intent record of the id in flight",
            _intent_ignored,
            "I6",
            {"faults": 1, "crashes": True},
        ),
        DesignMutant(
            "M2_commit_not_replayed",
            "§4",
            "a retried commit(X) whose first reply was lost is not answered from the record",
            _commit_not_replayed,
            "I7",
            {"faults": 1},
        ),
        DesignMutant(
            "M2_final_resume_not_replayed",
            "S4",
            "a repeated resume(X) of the newest retired id is refused as stale",
            _final_resume_not_replayed,
            "I7",
            {"faults": 1},
        ),
    )
}
"""Every design mutant by name (`quiesce check design --mutant NAME`)."""


def _build(params: Mapping[str, Any], faults: int | None, mutant: str | None) -> DesignModel:
    assert mutant is not None  # the registry calls it for these mutants only
    chosen = DesignParams(**with_faults(params, faults))
    return DesignModel(chosen, tables=DESIGN_MUTANTS[mutant].tables(), name=f"design[{mutant}]")


add_mutants("design", {name: m.doc for name, m in DESIGN_MUTANTS.items()}, _build)
