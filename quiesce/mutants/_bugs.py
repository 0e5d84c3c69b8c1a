"""The known bugs, each named and derived once: the scenario mutants of both model levels
(`_catalog` runs them through the protocol model, `_design` through the design model) are
built from `KNOWN_BUGS`, so a bug has one name, one scenario and one description, and, where
it lives in a table, one derived table, whichever level runs it.

What lives here: `KnownBug` and `KNOWN_BUGS`; for each bug that lives in a table, how the
machine's table with that bug is derived (`without_row`, `retarget`, `without_guard`,
`with_row`: the machines' own tables are untouched). What it does not
know: how a level runs a table (`Hooks` for the protocol model, `DesignTables` for the
design model), which check kills a bug at each level, or how a bug that lives outside the
tables is built (the controller's policy functions, the participant's journal recovery:
`_catalog` builds those).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any

from quiesce.fsm import Table
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

__all__ = ["KNOWN_BUGS", "Kill", "KnownBug"]


Derive = Callable[[], Table[Any, Any]]
"""A known bug's table: the machine's own table with the bug, derived when called."""


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
    table: Derive | None = None
    protocol: Kill | None = None
    design: Kill | None = None


def _dropped(table: Table[Any, Any], sources: Any, input: Enum, guard: str | None) -> Derive:
    """`table` without the row `input` fires from `sources` when `guard` holds."""
    return lambda: table.without_row(row_index(table, sources, input, guard))


def _unguarded(table: Table[Any, Any], source: Enum, input: Enum, guard: str) -> Derive:
    """`table` with that row firing whether its `guard` holds or not."""
    return lambda: table.without_guard(row_index(table, source, input, guard))


def _retargeted(table: Table[Any, Any], source: Enum, input: Enum, target: Enum) -> Derive:
    """`table` with the unguarded row `input` fires from `source` sent to `target`."""
    return lambda: table.retarget(row_index(table, source, input), target)


def _rewritten(
    variant: str, table: Table[Any, Any], source: Enum, input: Enum, **changes: Any
) -> Derive:
    """`table` (as `variant`) with `changes` (target, update, effects) to the unguarded row
    `input` fires from `source`."""

    def derive() -> Table[Any, Any]:
        index = row_index(table, source, input)
        return table.with_row(index, replace(table.rows[index], **changes), variant)

    return derive


def _deadline_runs_while_parked() -> Table[Any, Any]:
    # S1 (M7): the checkpoint's hold is recorded, but the clocks keep running.
    index = row_index(DEADLINE_REGISTRY, RegistryState.RUNNING, RegistryInput.SUSPEND)
    return DEADLINE_REGISTRY.retarget(index, None).without_effect(index, "cancel_all")


_BUGS = (
    KnownBug(
        "S1_deadline_runs_while_parked",
        "S1",
        "the checkpoint's hold does not suspend the deadline clocks",
        table=_deadline_runs_while_parked,
        protocol=Kill("I4"),
        design=Kill("I4"),
    ),
    KnownBug(
        "S2_boolean_suspend",
        "S2",
        "a boolean instead of a holder set: the train switch's end restarts the clocks",
        table=_unguarded(
            DEADLINE_REGISTRY, RegistryState.SUSPENDED, RegistryInput.RESUME, "last_holder"
        ),
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
        table=_retargeted(
            CHECKPOINT, CheckpointState.RELEASING, CheckpointInput.FAILED, CheckpointState.STOPPED
        ),
        protocol=Kill("no_stall", {"faults": 1}),
        design=Kill("I7", {"faults": 1, "call_retries": 0}),
    ),
    KnownBug(
        "S5_abort_with_new_id",
        "S5",
        "a pending abort of X is dropped at the next trigger; the next attempt uses a new id",
        table=_rewritten(
            "abort_with_new_id",
            CHECKPOINT,
            CheckpointState.ABORT_PENDING,
            CheckpointInput.TRIGGER,
            target=CheckpointState.IDLE,
            update="finished",
            effects=("cancel_retry", "clear_intent", "drop_holds"),
        ),
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
        table=_rewritten(
            "flush_not_strict",
            CHECKPOINT,
            CheckpointState.CLOSING_ADMISSION,
            CheckpointInput.INTENT_WRITTEN,
            target=CheckpointState.PREPARING,
            update=None,
            effects=("arm_prepare_deadline", "call_prepare"),
        ),
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
        table=_rewritten(
            "not_ready_fails_at_once",
            CALL,
            CallState.WAITING,
            CallInput.RECV_NOT_READY,
            target=CallState.FAILED,
            effects=("fail_call",),
        ),
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
        table=_dropped(
            RESTORE, RestoreState.RESTORED_PAUSED, RestoreInput.DISCARD_BEGIN, "has_discards"
        ),
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
        table=_dropped(
            CONTROL_FENCE, tuple(CONTROL_FENCE.states), FenceInput.RECV_PREPARE, "stale_id"
        ),
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
        table=_rewritten(
            "retire_releases_completed",
            AGENT_EXECUTION,
            ExecState.COMPLETED,
            AgentInput.RETIRE,
            target=ExecState.TOMBSTONED,
            update=None,
            effects=("tombstone",),
        ),
        protocol=Kill("I1", {"attempts": 2, "triggers": 0}),
        design=Kill("I1", {"attempts": 2, "triggers": 0, "faults": 1}),
    ),
    KnownBug(
        "S18_intent_ignored_at_restart",
        "S18",
        "a restarted controller ignores the intent record of the id in flight",
        table=_rewritten(
            "intent_ignored",
            CHECKPOINT,
            CheckpointState.IDLE,
            CheckpointInput.RECOVERED,
            target=None,
            update=None,
            effects=(),
        ),
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
        table=_dropped(
            CONTROL_FENCE, FenceState.COMMITTED_PAUSED, FenceInput.RECV_COMMIT, "same_id"
        ),
        design=Kill("I7", {"faults": 1}),
    ),
    KnownBug(
        "M2_final_resume_not_replayed",
        "S4",
        "a repeated resume(X) of the newest retired id is refused as stale",
        table=_dropped(CONTROL_FENCE, FenceState.IDLE, FenceInput.RECV_RESUME, "watermark_id"),
        design=Kill("I7", {"faults": 1}),
    ),
)

KNOWN_BUGS: Mapping[str, KnownBug] = {bug.name: bug for bug in _BUGS}
"""Every known bug by its mutant name, in §7 order."""
if len(KNOWN_BUGS) != len(_BUGS):
    raise ValueError("a known bug is named twice in quiesce.mutants._bugs")
