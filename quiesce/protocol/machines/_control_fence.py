"""M2 control fence (`control_fence`, one per participant): which operation may run now?

What lives here: the fence's eight states and its data (the active op id, the
**high-watermark** = the newest retired id, and the recorded successful results). Every
rule of M2's op table is a row below, including every refusal. What it does not know: the
participant's role, what "ready" means for it, how an artifact is built, or time. The
participant (`_participant.py`) fires a `RECV_*` input when a request arrives, does the
role's work when the fence emits `FenceStart`, and reports the outcome back as an input.

    idle --RECV_PREPARE--> preparing --PREPARE_READY--> prepared --RECV_COMMIT--> committing
     ^  ^                   |  ^ PREPARE_NOT_READY (holds)   ^          COMMIT_FAILED |
     |  |                   +--+                             +------------------------+
     |  |                                                  COMMIT_DONE --> committed_paused
     |  +-- RECV_RESUME(X): from any state whose active id is X, or idle with X > watermark
     +--RECV_RESTORE--> restoring --RESTORE_DONE--> restored_paused (RECV_DISCARD holds)
                         |  ^ RECV_RESTORE(same R)
                         +--RESTORE_FAILED--> restore_failed_paused

Refusals are rows, not exceptions. A refusal must be *answered* on the wire with data the
engine's `GuardRejected` cannot carry (the active id of a conflict, the watermark of a
stale id), and a reader must see in the table why each pair is refused. So every request
input has rows in this priority order, each holding the state and emitting one typed
effect: `[same_id]` replay of a recorded result · `[stale_id]` refuse_stale ·
`[other_id_active]` refuse_conflict · the legal start rows · an unguarded refuse_invalid_phase
fallback. `GuardRejected`/`TransitionNotAllowed` therefore never escape for a request; the
participant turns a `FenceRefusal` effect into a typed `Refusal` and an `ErrorReply`.

Recording: a successful outcome (ready, committed, restored, retired) stores its result
under `(op_id, op)`; `not_ready` and failures store nothing, so the same op id runs again.
Only the active id's results and the watermark's resume are kept: anything older is stale
anyway, so the record stays O(1) (no bounded list to evict).

Outcome inputs that arrive after the fence moved on (a resume overtook a commit in flight)
are dropped by a visible row (`drop_late_outcome`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

from quiesce.fsm import Table, Value, on
from quiesce.protocol._errors import CheckpointConflict, InvalidPhase, Refusal, StaleCheckpoint
from quiesce.protocol._ids import OpId

__all__ = [
    "ARG_EXAMPLES",
    "CONTROL_FENCE",
    "FenceCall",
    "FenceData",
    "FenceInput",
    "FenceJoin",
    "FenceLateOutcome",
    "FenceOp",
    "FenceRefusal",
    "FenceReplay",
    "FenceRetire",
    "FenceStart",
    "FenceState",
]


class FenceState(Enum):
    IDLE = "idle"
    PREPARING = "preparing"
    PREPARED = "prepared"
    COMMITTING = "committing"
    COMMITTED_PAUSED = "committed_paused"
    RESTORING = "restoring"
    RESTORE_FAILED_PAUSED = "restore_failed_paused"
    RESTORED_PAUSED = "restored_paused"


class FenceInput(Enum):
    RECV_PREPARE = "recv_prepare"  # controller: prepare(X)
    PREPARE_READY = "prepare_ready"  # role: parked/paused/frozen, ready to commit
    PREPARE_NOT_READY = "prepare_not_ready"  # role: still blocked (answered, never recorded)
    RECV_COMMIT = "recv_commit"  # controller: commit(X)
    COMMIT_DONE = "commit_done"  # role: artifact written
    COMMIT_FAILED = "commit_failed"  # role: artifact not written (nothing recorded)
    RECV_RESUME = "recv_resume"  # controller: resume(X) = abort = release
    RECV_RESTORE = "recv_restore"  # controller: restore(R, snapshot)
    RESTORE_DONE = "restore_done"  # role: artifact verified and installed
    RESTORE_FAILED = "restore_failed"  # role: artifact refused (nothing recorded)
    RECV_DISCARD = "recv_discard"  # controller: discard_restored_continuation(R, rollout)
    RECV_STATUS = "recv_status"  # anyone: status probe


class FenceOp(Enum):
    """The operation named by a call: the key of the record together with its op id."""

    PREPARE = "prepare"
    COMMIT = "commit"
    RESUME = "resume"
    RESTORE = "restore"
    DISCARD = "discard"
    STATUS = "status"


@dataclass(frozen=True, slots=True)
class FenceCall:
    """The argument of every fence input: the operation as it arrived, `(op, op_id)`, and
    for an outcome (or a resume, which completes at once) the `result` to record.

    `result` is whatever the participant answers (a reply model); the fence only stores it.
    """

    op: FenceOp
    op_id: OpId | None = None
    result: Any = None


@dataclass(frozen=True, slots=True)
class FenceData:
    """`active`: the op id in progress (None iff idle); `high_watermark`: the newest retired
    id; `recorded`: `((op_id, op, result), ...)` for the active id and the watermark's resume.
    """

    active: OpId | None = None
    high_watermark: OpId | None = None
    recorded: tuple[tuple[OpId, FenceOp, Any], ...] = ()

    def result(self, op_id: OpId | None, op: FenceOp) -> Any:
        """The recorded result of `(op_id, op)`, or None."""
        for recorded_id, recorded_op, result in self.recorded:
            if recorded_id == op_id and recorded_op is op:
                return result
        return None


# ----------------------------------------------------------------------------- the rows

S = FenceState
I = FenceInput  # noqa: E741  (h2's StreamInputs)
ALL = tuple(FenceState)
BUSY = tuple(s for s in FenceState if s is not S.IDLE)  # states with an active id
IN_PREPARE = (S.PREPARING, S.PREPARED, S.COMMITTING, S.COMMITTED_PAUSED)
READY_SEEN = (S.PREPARED, S.COMMITTING, S.COMMITTED_PAUSED)  # prepare(X) ready is recorded
STALE, CONFLICT, INVALID = "refuse_stale", "refuse_conflict", "refuse_invalid_phase"

# fmt: off
# ruff: disable[E501] one row per line: the table reads across
_ROWS = (
    # prepare(X): from idle, or again from preparing with the same X.
    on(READY_SEEN, I.RECV_PREPARE, None, guard="same_id", effects="replay"),
    on(ALL, I.RECV_PREPARE, None, guard="stale_id", effects=STALE),
    on(BUSY, I.RECV_PREPARE, None, guard="other_id_active", effects=CONFLICT),
    on(S.IDLE, I.RECV_PREPARE, S.PREPARING, update="activate", effects="start"),
    on(S.PREPARING, I.RECV_PREPARE, S.PREPARING, guard="same_id", effects="start"),
    on(BUSY, I.RECV_PREPARE, None, effects=INVALID),
    # Each op's outcomes: a success records its result, a failure records nothing, and an
    # outcome for an op no longer in progress is dropped.
    on(S.PREPARING, I.PREPARE_READY, S.PREPARED, guard="same_id", update="record", effects="answer"),
    on(ALL, I.PREPARE_READY, None, effects="drop_late_outcome"),
    on(S.PREPARING, I.PREPARE_NOT_READY, None, guard="same_id", effects="answer"),
    on(ALL, I.PREPARE_NOT_READY, None, effects="drop_late_outcome"),
    # commit(X): from prepared with the same X; a failure returns to prepared.
    on(S.COMMITTED_PAUSED, I.RECV_COMMIT, None, guard="same_id", effects="replay"),
    on(ALL, I.RECV_COMMIT, None, guard="stale_id", effects=STALE),
    on(BUSY, I.RECV_COMMIT, None, guard="other_id_active", effects=CONFLICT),
    on(S.PREPARED, I.RECV_COMMIT, S.COMMITTING, guard="same_id", effects="start"),
    on(S.COMMITTING, I.RECV_COMMIT, None, guard="same_id", effects="join_in_flight"),
    on(ALL, I.RECV_COMMIT, None, effects=INVALID),
    on(S.COMMITTING, I.COMMIT_DONE, S.COMMITTED_PAUSED, guard="same_id", update="record", effects="answer"),
    on(ALL, I.COMMIT_DONE, None, effects="drop_late_outcome"),
    on(S.COMMITTING, I.COMMIT_FAILED, S.PREPARED, guard="same_id", effects="answer"),
    on(ALL, I.COMMIT_FAILED, None, effects="drop_late_outcome"),
    # resume(X) = abort = release: from any state whose active id is X, or from idle with
    # an id above the watermark (an unknown id is retired, so its delayed prepare is stale).
    on(S.IDLE, I.RECV_RESUME, None, guard="watermark_id", effects="replay"),
    on(ALL, I.RECV_RESUME, None, guard="stale_id", effects=STALE),
    on(BUSY, I.RECV_RESUME, None, guard="other_id_active", effects=CONFLICT),
    on(ALL, I.RECV_RESUME, S.IDLE, update="retire", effects="retire"),
    # restore(R, snapshot): under its own op id; a failed restore may be retried with R.
    on(S.RESTORED_PAUSED, I.RECV_RESTORE, None, guard="same_id", effects="replay"),
    on(ALL, I.RECV_RESTORE, None, guard="stale_id", effects=STALE),
    on(BUSY, I.RECV_RESTORE, None, guard="other_id_active", effects=CONFLICT),
    on(S.IDLE, I.RECV_RESTORE, S.RESTORING, update="activate", effects="start"),
    on(S.RESTORE_FAILED_PAUSED, I.RECV_RESTORE, S.RESTORING, guard="same_id", effects="start"),
    on(S.RESTORING, I.RECV_RESTORE, None, guard="same_id", effects="join_in_flight"),
    on(IN_PREPARE, I.RECV_RESTORE, None, effects=INVALID),
    on(S.RESTORING, I.RESTORE_DONE, S.RESTORED_PAUSED, guard="same_id", update="record", effects="answer"),
    on(ALL, I.RESTORE_DONE, None, effects="drop_late_outcome"),
    on(S.RESTORING, I.RESTORE_FAILED, S.RESTORE_FAILED_PAUSED, guard="same_id", effects="answer"),
    on(ALL, I.RESTORE_FAILED, None, effects="drop_late_outcome"),
    # discard_restored_continuation(R, rollout): only in restored_paused under R.
    on(ALL, I.RECV_DISCARD, None, guard="stale_id", effects=STALE),
    on(BUSY, I.RECV_DISCARD, None, guard="other_id_active", effects=CONFLICT),
    on(S.RESTORED_PAUSED, I.RECV_DISCARD, None, guard="same_id", effects="start"),
    on(ALL, I.RECV_DISCARD, None, effects=INVALID),
    on(ALL, I.RECV_STATUS, None, effects="report_status"),
)
# ruff: enable[E501]
# fmt: on


# ----------------------------------------------------------------------------- effects


@dataclass(frozen=True, slots=True)
class FenceStart:
    """Do the role's work for `op` under `op_id` (then report the outcome as an input)."""

    op: FenceOp
    op_id: OpId | None


@dataclass(frozen=True, slots=True)
class FenceReplay:
    """Answer `(op_id, op)` from the record: the same result as the first time."""

    op: FenceOp
    op_id: OpId | None
    result: Any


@dataclass(frozen=True, slots=True)
class FenceRetire:
    """`op_id` is retired (it is the new high-watermark): reopen the role."""

    op_id: OpId | None
    result: Any


@dataclass(frozen=True, slots=True)
class FenceJoin:
    """A concurrent duplicate of the op in progress: answer it with the first one's outcome."""

    op: FenceOp
    op_id: OpId | None


@dataclass(frozen=True, slots=True)
class FenceLateOutcome:
    """An outcome for an op that is no longer in progress (a resume overtook it): dropped."""

    op: FenceOp
    op_id: OpId | None


@dataclass(frozen=True, slots=True)
class FenceRefusal:
    """A typed refusal; the fence's value is unchanged. `error()` gives the `Refusal`."""

    code: str
    op: FenceOp
    op_id: OpId | None
    state: FenceState
    active_id: OpId | None
    high_watermark: OpId | None

    def error(self) -> Refusal:
        """The typed `Refusal` this answer stands for."""
        requested = str(self.op_id) if self.op_id is not None else ""
        if self.code == CheckpointConflict.code:
            return CheckpointConflict(str(self.active_id), requested)
        if self.code == StaleCheckpoint.code:
            return StaleCheckpoint(requested, str(self.high_watermark))
        return InvalidPhase(self.op.value, self.state.value, requested or None)


# ------------------------------------------------------------------ guards and updates


def _same_id(value: Value[FenceState, FenceData], call: FenceCall) -> bool:
    return value.data.active is not None and value.data.active == call.op_id


def _other_id_active(value: Value[FenceState, FenceData], call: FenceCall) -> bool:
    return value.data.active is not None and value.data.active != call.op_id


def _stale_id(value: Value[FenceState, FenceData], call: FenceCall) -> bool:
    # Ordered ids: one comparison replaces a list of every id ever retired.
    hwm = value.data.high_watermark
    return hwm is not None and (call.op_id is None or call.op_id <= hwm)


def _watermark_id(value: Value[FenceState, FenceData], call: FenceCall) -> bool:
    # The final resume of the newest retired id is the one stale request still answered.
    hwm = value.data.high_watermark
    return hwm is not None and call.op_id == hwm


def _activate(data: FenceData, call: FenceCall) -> FenceData:
    # A new id starts: everything recorded belongs to retired ids, only the watermark's
    # resume stays replayable.
    kept = tuple(r for r in data.recorded if r[0] == data.high_watermark)
    return FenceData(call.op_id, data.high_watermark, kept)


def _record(data: FenceData, call: FenceCall) -> FenceData:
    assert call.op_id is not None  # guarded by same_id
    return replace(data, recorded=(*data.recorded, (call.op_id, call.op, call.result)))


def _retire(data: FenceData, call: FenceCall) -> FenceData:
    assert call.op_id is not None  # guarded: not stale, so above the watermark
    return FenceData(None, call.op_id, ((call.op_id, FenceOp.RESUME, call.result),))


def _start(v: Value[FenceState, FenceData], call: FenceCall) -> FenceStart:
    return FenceStart(call.op, call.op_id)


def _replay(v: Value[FenceState, FenceData], call: FenceCall) -> FenceReplay:
    return FenceReplay(call.op, call.op_id, v.data.result(call.op_id, call.op))


def _refusal(code: str) -> Any:
    def effect(v: Value[FenceState, FenceData], call: FenceCall) -> FenceRefusal:
        return FenceRefusal(
            code, call.op, call.op_id, v.state, v.data.active, v.data.high_watermark
        )

    return effect


# ----------------------------------------------------------------------------- the table

CONTROL_FENCE: Table[FenceState, FenceInput] = Table(
    "control_fence",
    doc="M2: one operation at a time per participant; ordered ids refuse stale requests.",
    states=FenceState,
    inputs=FenceInput,
    initial=S.IDLE,
    initial_data=FenceData(),
    rows=_ROWS,
    guards={
        "same_id": _same_id,
        "other_id_active": _other_id_active,
        "stale_id": _stale_id,
        "watermark_id": _watermark_id,
    },
    updates={"activate": _activate, "record": _record, "retire": _retire},
    effects={
        "start": _start,
        "report_status": _start,
        "replay": _replay,
        "answer": lambda v, call: FenceReplay(call.op, call.op_id, call.result),
        "retire": lambda v, call: FenceRetire(call.op_id, call.result),
        "join_in_flight": lambda v, call: FenceJoin(call.op, call.op_id),
        "drop_late_outcome": lambda v, call: FenceLateOutcome(call.op, call.op_id),
        STALE: _refusal(StaleCheckpoint.code),
        CONFLICT: _refusal(CheckpointConflict.code),
        INVALID: _refusal(InvalidPhase.code),
    },
    invariants={
        "active_iff_not_idle": lambda v: (v.state is S.IDLE) == (v.data.active is None),
        "active_above_watermark": lambda v: (
            v.data.active is None
            or v.data.high_watermark is None
            or v.data.active > v.data.high_watermark
        ),
        "record_holds_only_active_or_watermark": lambda v: all(
            r[0] in (v.data.active, v.data.high_watermark) for r in v.data.recorded
        ),
    },
)

# Three ordered ids: one below, one at and one above any watermark the walk reaches.
_IDS = (OpId(1, 1, 0), OpId(1, 2, 0), OpId(1, 3, 0))
ARG_EXAMPLES: Mapping[FenceInput, tuple[object, ...]] = {
    i: tuple(FenceCall(op, op_id, result) for op_id in _IDS for result in (None, "result"))
    for i, op in (
        (I.RECV_PREPARE, FenceOp.PREPARE),
        (I.PREPARE_READY, FenceOp.PREPARE),
        (I.PREPARE_NOT_READY, FenceOp.PREPARE),
        (I.RECV_COMMIT, FenceOp.COMMIT),
        (I.COMMIT_DONE, FenceOp.COMMIT),
        (I.COMMIT_FAILED, FenceOp.COMMIT),
        (I.RECV_RESUME, FenceOp.RESUME),
        (I.RECV_RESTORE, FenceOp.RESTORE),
        (I.RESTORE_DONE, FenceOp.RESTORE),
        (I.RESTORE_FAILED, FenceOp.RESTORE),
        (I.RECV_DISCARD, FenceOp.DISCARD),
        (I.RECV_STATUS, FenceOp.STATUS),
    )
}
"""Example arguments by input, for the sweeps (`quiesce.check.arg_examples`): every input
with its own op, three ordered ids, with and without a result."""
