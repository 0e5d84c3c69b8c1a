"""The known bugs, each named and derived once: the scenario mutants of both model levels
(`_catalog` runs them through the protocol model, `_design` through the design model) are
built from `KNOWN_BUGS`, so a bug has one name, one scenario and one description, and, where
it lives in a table, one derived table, whichever level runs it.

What lives here: `KnownBug` and `KNOWN_BUGS`; one function per bug that lives in a table,
returning the machine's table with that bug (derived with `without_row`, `retarget`,
`without_guard`, `with_row`: the machines' own tables are untouched). What it does not
know: how a level runs a table (`Hooks` for the protocol model, `DesignTables` for the
design model), which check kills a bug at each level, or how a bug that lives outside the
tables is built (the controller's policy functions, the participant's journal recovery:
`_catalog` builds those).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from quiesce.fsm import Table, on
from quiesce.mutants._names import row_index
from quiesce.protocol.machines import (
    AGENT_EXECUTION,
    CALL,
    CHECKPOINT,
    CONTROL_FENCE,
    DEADLINE_REGISTRY,
    RESTORE,
    AgentInput,
    CallInput,
    CallState,
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

__all__ = ["KNOWN_BUGS", "Kill", "KnownBug", "known"]


@dataclass(frozen=True)
class Kill:
    """How one model level kills a bug: `check`, a property (`I1`..`I9`, `no_stall`) or
    `scenario:<name>` for a scripted run, at `params`: the parameters that differ from the
    level's small configuration (`small_params` for the protocol model, `small` for the
    design model)."""

    check: str
    params: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class KnownBug:
    """One known bug: its mutant `name` at every model level that carries it, the §7
    `scenario` it re-introduces (or the § of the rule it breaks), what goes wrong (`doc`)
    the check that kills it on each model level that carries it (`protocol`, `design`)
    and, when it lives in a table, `table`: the derivation of the table that carries it. A
    level that does not run that table builds the bug its own way (the protocol model plans
    a restore's discards in the coordinator's policy, so its S12 swaps that function); a bug
    outside the tables is built by the protocol model's catalog (`_catalog`), and the design
    model, which composes tables, carries only bugs that live in one."""

    name: str
    scenario: str
    doc: str
    table: Callable[[], Table[Any, Any]] | None = None
    protocol: Kill | None = None
    design: Kill | None = None


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


def flush_not_strict() -> Table[Any, Any]:
    """S8 (M1): the strict flush trusts the background drain: nothing is flushed, prepare
    starts."""
    index = row_index(CHECKPOINT, CheckpointState.CLOSING_ADMISSION, CheckpointInput.INTENT_WRITTEN)
    not_strict = on(
        CheckpointState.CLOSING_ADMISSION,
        CheckpointInput.INTENT_WRITTEN,
        CheckpointState.PREPARING,
        effects=("arm_prepare_deadline", "call_prepare"),
    )
    return CHECKPOINT.with_row(index, not_strict, "flush_not_strict")


def not_ready_fails_at_once() -> Table[Any, Any]:
    """S10 (call): a not-ready prepare fails the attempt at once instead of being asked
    again."""
    index = row_index(CALL, CallState.WAITING, CallInput.RECV_NOT_READY)
    failing = replace(CALL.rows[index], target=CallState.FAILED, effects=("fail_call",))
    return CALL.with_row(index, failing, "not_ready_fails_at_once")


def restart_only_resumed() -> Table[Any, Any]:
    """S12 (M9): restored continuations on a restart_only resource are not discarded before
    the resume."""
    index = row_index(
        RESTORE, RestoreState.RESTORED_PAUSED, RestoreInput.DISCARD_BEGIN, "has_discards"
    )
    return RESTORE.without_row(index)


def stale_prepare_accepted() -> Table[Any, Any]:
    """S15 (M2): no high-watermark check for prepare: a delayed prepare(X) after resume(X)
    is accepted."""
    index = row_index(
        CONTROL_FENCE, tuple(CONTROL_FENCE.states), FenceInput.RECV_PREPARE, "stale_id"
    )
    return CONTROL_FENCE.without_row(index)


def commit_not_replayed() -> Table[Any, Any]:
    """§4 (M2): the same commit(X) after a lost reply is not answered from the record."""
    index = row_index(CONTROL_FENCE, FenceState.COMMITTED_PAUSED, FenceInput.RECV_COMMIT, "same_id")
    return CONTROL_FENCE.without_row(index)


def final_resume_not_replayed() -> Table[Any, Any]:
    """S4 (M2): a repeated resume(X) of the newest retired id is refused as stale, not
    replayed."""
    index = row_index(CONTROL_FENCE, FenceState.IDLE, FenceInput.RECV_RESUME, "watermark_id")
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


_BUGS = (
    KnownBug(
        "S1_deadline_runs_while_parked",
        "S1",
        "the checkpoint's hold does not suspend the deadline clocks",
        table=deadline_runs_while_parked,
        protocol=Kill("I4"),
        design=Kill("I4"),
    ),
    KnownBug(
        "S2_boolean_suspend",
        "S2",
        "a boolean instead of a holder set: the train switch's end restarts the clocks",
        table=boolean_suspend,
        protocol=Kill("I4", {"train_switch": 1}),
        design=Kill("I4", {"train_switch": 1}),
    ),
    KnownBug(
        "S3_classified_by_exception_type",
        "S3",
        "a 5xx or timeout is typed as a generic (fatal) error: the run stops",
        protocol=Kill("no_stall", {"faults": 1}),
    ),
    KnownBug(
        "retry_with_new_id",
        "S3",
        "a call retried inside the attempt (a 5xx, a timeout) carries a new op id",
        protocol=Kill("I6", {"faults": 1, "call_retries": 1}),
    ),
    KnownBug(
        "S4_release_failure_reraised",
        "S4",
        "a release that fails after its retries stops the run, not release_pending",
        table=release_failure_stops,
        protocol=Kill("no_stall", {"faults": 1}),
        design=Kill("I7", {"faults": 1, "call_retries": 0}),
    ),
    KnownBug(
        "S5_abort_with_new_id",
        "S5",
        "a pending abort of X is dropped at the next trigger; the next attempt uses a new id",
        table=abort_with_new_id,
        protocol=Kill("I3", {"triggers": 2, "faults": 1}),
        design=Kill("I3", {"faults": 1, "call_retries": 0, "triggers": 2}),
    ),
    KnownBug(
        "S6_attempted_after_the_call",
        "S6",
        "a participant is marked attempted when it answers, not before the call",
        protocol=Kill("I3", {"faults": 1}),
    ),
    KnownBug(
        "S7_no_reflush_at_capture",
        "S7",
        "pending ACKs at capture are neither re-flushed nor skipped",
        protocol=Kill("I8"),
    ),
    KnownBug(
        "S8_flush_not_strict",
        "S8",
        "flushing_acks trusts the background drain and sends nothing",
        table=flush_not_strict,
        protocol=Kill("scenario:test_s8_background_ack_failure_is_caught_by_the_strict_flush"),
    ),
    KnownBug(
        "S9_optimizer_step_unnoticed",
        "S9",
        "an optimizer step between commit and capture is not a skip",
        protocol=Kill("I8", {"optimizer_steps": 1}),
    ),
    KnownBug(
        "S10_not_ready_fails_at_once",
        "S10",
        "a not-ready prepare fails the attempt instead of being retried until ready",
        table=not_ready_fails_at_once,
        protocol=Kill(
            "scenario:test_s10_completion_after_the_flush_is_acked_and_prepare_retried_until_ready"
        ),
    ),
    KnownBug(
        "S11_group_scored_sibling_alone",
        "S11",
        "a group-scored environment's sibling is retried alone (live level ignored)",
        protocol=Kill("I2", {"siblings": 2, "attempts": 2, "triggers": 0, "group_scored": True}),
    ),
    KnownBug(
        "S11_overrides_refine",
        "S11",
        "an override finer than the target level is accepted",
        protocol=Kill("scenario:test_recovery_levels (override refines)"),
    ),
    KnownBug(
        "S12_restart_only_resumed",
        "S12",
        "a restored continuation depending on a restart_only resource is resumed, not discarded",
        table=restart_only_resumed,
        protocol=Kill("scenario:test_s12_restart_only_continuations_are_discarded_before_resume"),
        design=Kill("I8", {"turns": 2, "attempts": 2, "faults": 1, "crashes": True}),
    ),
    KnownBug(
        "S13_unknown_recovery_mode_accepted",
        "S13",
        "an unknown recovery mode is accepted at setup",
        protocol=Kill(
            "scenario:test_s13_unknown_recovery_mode_is_refused_at_setup_naming_the_server"
        ),
    ),
    KnownBug(
        "S14_unmanaged_accepted",
        "S14",
        "an unmanaged multi-worker server is accepted at setup",
        protocol=Kill("scenario:test_s14_unmanaged_multi_worker_server_is_refused_at_setup"),
    ),
    KnownBug(
        "S15_stale_prepare_accepted",
        "S15",
        "a delayed prepare(X) after resume(X) is accepted (no high-watermark check)",
        table=stale_prepare_accepted,
        protocol=Kill("I3", {"faults": 1}),
        design=Kill("I3", {"faults": 1}),
    ),
    KnownBug(
        "S16_restore_digests_unchecked",
        "S16",
        "restore replies are accepted whatever digest they report",
        protocol=Kill("scenario:test_s16_restore_digest_mismatch_rejects_the_snapshot"),
    ),
    KnownBug(
        "S17_retire_releases_completed",
        "S17",
        "retire tombstones a completed, un-ACKed execution",
        table=retire_releases_completed,
        protocol=Kill("I1", {"attempts": 2, "triggers": 0}),
        design=Kill("I1", {"attempts": 2, "triggers": 0, "faults": 1}),
    ),
    KnownBug(
        "S18_intent_ignored_at_restart",
        "S18",
        "a restarted controller ignores the intent record of the id in flight",
        table=intent_ignored,
        # M9 waits in `finishing_intent` for an intent M1 never finishes: the controller is
        # never idle again, so I3 (due once it is) never judges it; I7 does.
        protocol=Kill("no_stall", {"faults": 1, "crashes": True}),
        design=Kill("I6", {"faults": 1, "crashes": True}),
    ),
    KnownBug(
        "S19_journal_not_durable",
        "S19",
        "a restarted participant comes back without its fence and results",
        protocol=Kill("I1", {"triggers": 0, "faults": 1, "crashes": True}),
    ),
    KnownBug(
        "M2_commit_not_replayed",
        "§4",
        "a retried commit(X) whose first reply was lost is not answered from the record",
        table=commit_not_replayed,
        design=Kill("I7", {"faults": 1}),
    ),
    KnownBug(
        "M2_final_resume_not_replayed",
        "S4",
        "a repeated resume(X) of the newest retired id is refused as stale",
        table=final_resume_not_replayed,
        design=Kill("I7", {"faults": 1}),
    ),
)

KNOWN_BUGS: Mapping[str, KnownBug] = {bug.name: bug for bug in _BUGS}
"""Every known bug by its mutant name, in §7 order."""
if len(KNOWN_BUGS) != len(_BUGS):
    raise ValueError("a known bug is named twice in quiesce.mutants._bugs")


def known(name: str) -> KnownBug:
    """The known bug `name` (`KeyError` naming the known ones if there is none)."""
    try:
        return KNOWN_BUGS[name]
    except KeyError:
        raise KeyError(f"no known bug {name!r}; known: {', '.join(KNOWN_BUGS)}") from None
