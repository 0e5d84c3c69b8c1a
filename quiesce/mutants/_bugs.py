"""The known bugs that live in a table, each derived once: the scenario mutants of both
model levels take their tables from here (`_catalog` runs them through the protocol model,
`_design` through the design model).

What lives here: one function per bug, returning the machine's table with that bug (derived
with `without_row`, `retarget`, `without_guard`, `derive`: the machines' own tables are
untouched). What it does not know: how a level runs a table (`Hooks` for the protocol
model, `DesignTables` for the design model), or bugs that live outside the tables (the
controller's policy functions, the participant's journal recovery: `_catalog` only).
"""

from __future__ import annotations

from typing import Any

from quiesce.fsm import Table, on
from quiesce.mutants._names import row_index
from quiesce.protocol.machines import (
    AGENT_EXECUTION,
    CHECKPOINT,
    CONTROL_FENCE,
    DEADLINE_REGISTRY,
    AgentInput,
    CheckpointInput,
    CheckpointState,
    ExecState,
    FenceInput,
    RegistryInput,
    RegistryState,
)

__all__ = [
    "abort_with_new_id",
    "boolean_suspend",
    "deadline_runs_while_parked",
    "intent_ignored",
    "release_failure_stops",
    "retire_releases_completed",
    "stale_prepare_accepted",
]


def deadline_runs_while_parked() -> Table[Any, Any]:
    """S1 (M7): the checkpoint's hold is recorded, but the clocks keep running (no suspend)."""
    index = row_index(DEADLINE_REGISTRY, RegistryState.RUNNING, RegistryInput.SUSPEND)
    return DEADLINE_REGISTRY.retarget(index, None).without_effect(index, "cancel_all")


def boolean_suspend() -> Table[Any, Any]:
    """S2 (M7): a boolean, not a holder set: any holder's resume restarts the clocks."""
    index = row_index(
        DEADLINE_REGISTRY, RegistryState.SUSPENDED, RegistryInput.RESUME, "last_holder"
    )
    return DEADLINE_REGISTRY.without_guard(index)


def release_failure_stops() -> Table[Any, Any]:
    """S4 (M1): a release that fails after its retries stops the run, not release_pending."""
    index = next(
        i
        for i, row in enumerate(CHECKPOINT.rows)
        if row.input is CheckpointInput.FAILED
        and row.sources == (CheckpointState.RELEASING,)
        and row.target is CheckpointState.RELEASE_PENDING
    )
    return CHECKPOINT.retarget(index, CheckpointState.STOPPED)


def abort_with_new_id() -> Table[Any, Any]:
    """S5 (M1): the pending abort of X is given up at the next trigger; the next attempt
    gets a new id."""
    index = row_index(CHECKPOINT, CheckpointState.ABORT_PENDING, CheckpointInput.TRIGGER)
    given_up = on(
        CheckpointState.ABORT_PENDING,
        CheckpointInput.TRIGGER,
        CheckpointState.IDLE,
        update="finished",
        effects=("cancel_retry", "clear_intent", "drop_holds"),
    )
    return CHECKPOINT.with_row(index, given_up, "abort_with_new_id")


def stale_prepare_accepted() -> Table[Any, Any]:
    """S15 (M2): no high-watermark check for prepare: a delayed prepare(X) after resume(X)
    is accepted."""
    index = row_index(
        CONTROL_FENCE, tuple(CONTROL_FENCE.states), FenceInput.RECV_PREPARE, "stale_id"
    )
    return CONTROL_FENCE.without_row(index)


def retire_releases_completed() -> Table[Any, Any]:
    """S17 (M3): retire tombstones a completed, un-ACKed execution: its result is released
    without an ACK."""
    index = row_index(AGENT_EXECUTION, ExecState.COMPLETED, AgentInput.RETIRE)
    released = on(ExecState.COMPLETED, AgentInput.RETIRE, ExecState.TOMBSTONED, effects="tombstone")
    return AGENT_EXECUTION.with_row(index, released, "retire_releases_completed")


def intent_ignored() -> Table[Any, Any]:
    """S18 (M1): a restart ignores the intent record: the id in flight is never finished."""
    index = row_index(CHECKPOINT, CheckpointState.IDLE, CheckpointInput.RECOVERED)
    ignored = on(CheckpointState.IDLE, CheckpointInput.RECOVERED, None)
    return CHECKPOINT.with_row(index, ignored, "intent_ignored")
