"""M1 controller checkpoint lifecycle (`checkpoint`): where is the snapshot attempt?

What lives here: the thirteen states of one checkpoint attempt, every legal move between
them, and the data those moves decide on: the attempt in flight (its id, the cause that
ends it, whether it was published) and the consecutive failure and skip counters that
decide `stopped`. What it does not know: participants, roles, calls, timers or the store.
Each row *names* the work its transition starts (`write_intent`, `call_prepare`,
`publish`, ...); the coordinator's named work (`controller/_checkpoint_work.py`) turns each
name into concrete effects and feeds the outcome back as the next input. So this table is
the protocol's spine: drop an effect name from a row and the coordinator really stops
doing that work (the mutants of `quiesce.models` rely on it).

    idle -TRIGGER-> closing_admission -INTENT_WRITTEN-> flushing_acks -ACKS_FLUSHED->
    preparing -ROLES_DONE-> committing -ROLES_DONE-> capturing -CUT_CAPTURED-> validating
    -VALIDATED-> publishing -PUBLISHED-> releasing -ROLES_DONE-> idle

      closing_admission, flushing_acks --FAILED--> idle        (nobody was touched)
      preparing .. validating --FAILED--> aborting -ROLES_DONE-> idle
      publishing --PUBLISH_FAILED (holds, inspect)--> INSPECTED_VERIFIED -> releasing
                                                      INSPECTED_UNVERIFIABLE -> aborting
                                                      INSPECTED_ABSENT -> aborting
      aborting --FAILED--> abort_pending --RETRY_DUE | TRIGGER--> aborting   (same id)
      releasing --FAILED--> release_pending --RETRY_DUE | TRIGGER--> releasing (same id)
      preparing --RESTARTED [in_turn] (holds, prepare it again, same id)
      preparing .. validating --RESTARTED [touched]--> aborting   (S19: never retried)
      any attempt state --FAILED [fatal]--> stopped
      closing_admission, flushing_acks --FAILED [exhausted]--> stopped
      aborting --ROLES_DONE | FAILED [over_budget]--> stopped
      idle --RECOVERED--> publishing (inspect: the ambiguous-publish rule at restart, §6)

Rules encoded in the rows:
- publish-or-abort: once participants may hold id X, every path ends in `releasing` (X
  published) or `aborting` (X not published), each retried with the same X; nothing mints a
  new id while `abort_pending` or `release_pending` holds (a TRIGGER there retries X);
- a fatal cause stops at once, keeping the intent record for the next start (§6);
- a participant restart (S19) matters only if the attempt touched that participant. While
  its role is being prepared, it kept its fence (§6) and lost only running work, none of
  it committed: it is prepared again with the same id. Otherwise (a later role was called
  since, or it may have committed) it may have lost what the attempt counts on: the
  attempt fails (never retried inside it, §4). One the attempt never called holds nothing,
  and the attempt goes on;
- every attempt that fails retryably counts once, with its first cause (a failing abort
  or release is retried by its timer and counts nothing more); `exhausted` = more than
  `failure_budget` (= `max_consecutive_failures`) in a row: `stopped`, or, once
  participants were touched, after the abort (`over_budget`; a failing abort of that
  attempt stops at once). Skips count separately, never stop;
- a release that succeeds resets both counters (`completed`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

from quiesce.fsm import Table, Value, each, on
from quiesce.protocol._causes import Cause, Classification, Disposition, classify
from quiesce.protocol._ids import OpId
from quiesce.protocol.machines._call import CallState
from quiesce.protocol.machines._phases import CallKey, Phase, PhaseCalls

__all__ = [
    "ARG_EXAMPLES",
    "ATTEMPT_STATES",
    "CHECKPOINT",
    "Attempt",
    "CheckpointData",
    "CheckpointInput",
    "CheckpointState",
    "Restart",
    "Trigger",
    "stops_the_run",
]


class CheckpointState(Enum):
    IDLE = "idle"
    CLOSING_ADMISSION = "closing_admission"
    FLUSHING_ACKS = "flushing_acks"
    PREPARING = "preparing"
    COMMITTING = "committing"
    CAPTURING = "capturing"
    VALIDATING = "validating"
    PUBLISHING = "publishing"
    RELEASING = "releasing"
    ABORTING = "aborting"
    ABORT_PENDING = "abort_pending"
    RELEASE_PENDING = "release_pending"
    STOPPED = "stopped"


class CheckpointInput(Enum):
    TRIGGER = "trigger"  # a period elapsed or a trainer boundary (arg: Trigger)
    RECOVERED = "recovered"  # restart found an intent record (arg: Attempt of that id)
    INTENT_WRITTEN = "intent_written"  # the store fsynced the intent
    ACKS_FLUSHED = "acks_flushed"  # the ACK outbox batch was accepted
    ROLES_DONE = "roles_done"  # every role of the phase answered, in phase order
    CUT_CAPTURED = "cut_captured"  # the controller's cut is in staging
    VALIDATED = "validated"  # staging matches the manifests and the topology
    PUBLISHED = "published"  # staging renamed to published
    PUBLISH_FAILED = "publish_failed"  # the rename's outcome is unknown
    INSPECTED_VERIFIED = "inspected_verified"  # published path present and verified
    INSPECTED_UNVERIFIABLE = "inspected_unverifiable"  # present but not verifiable
    INSPECTED_ABSENT = "inspected_absent"  # not there
    FAILED = "failed"  # a step failed or was skipped (arg: Classification)
    RETRY_DUE = "retry_due"  # the retry timer of a pending abort or release fired
    RESTARTED = "restarted"  # a reply showed a participant's new incarnation (arg: Restart)


@dataclass(frozen=True, slots=True)
class Attempt:
    """The checkpoint id in flight and everything the coordinator tracks about it.

    The table reads `op_id`, `cause` and `published`; the rest is the coordinator's
    bookkeeping of calls (kept here so the attempt is one value, not a side dictionary).
    `calls` is the remote phase in progress (None before the first); `waiting`,
    `not_ready` and `backing_off` read it.
    """

    op_id: OpId
    trainer_step: int
    started_at: float
    phase_started_at: float
    cause: Classification | None = None  # why the attempt aborts (None: not aborting)
    published: bool = False
    # Participants whose fence may hold op_id: marked *before* the call is sent (S6).
    attempted: frozenset[str] = frozenset()
    # `(participant, active id)` reported by checkpoint_conflict: aborted too (S5).
    conflicts: frozenset[tuple[str, OpId]] = frozenset()
    calls: PhaseCalls | None = None
    # Whose failed call stops the run (`stops_the_run`): the stop names it, maybe only once
    # the attempt's abort ended. Kept for that failure only, so the state stays small.
    failed_by: str | None = None
    acking: frozenset[str] = frozenset()  # agents whose ACK batch is in flight
    reflushed: bool = False  # the capture re-flushed the outbox once (S7)
    prepare_deadline_at: float = 0.0
    deadline_at: float = 0.0  # the latest deadline any call of this attempt got
    digests: tuple[tuple[str, str], ...] = ()
    parked: int = 0
    frozen: int = 0
    # Seconds spent per M1 state, by state label (bounded: one entry per state).
    phase_seconds: tuple[tuple[str, float], ...] = ()

    @property
    def phase(self) -> Phase | None:
        """The remote phase in progress (or last run), if any."""
        return None if self.calls is None else self.calls.phase

    @property
    def waiting(self) -> frozenset[CallKey]:
        """The calls of the phase not settled yet: out, not ready, or backing off."""
        if self.calls is None:
            return frozenset()
        return self.calls.keys(CallState.WAITING, CallState.NOT_READY, CallState.BACKING_OFF)

    @property
    def not_ready(self) -> frozenset[str]:
        """The participants whose prepare answered not_ready, to be asked again (S10)."""
        if self.calls is None:
            return frozenset()
        return frozenset(name for name, _ in self.calls.keys(CallState.NOT_READY))

    @property
    def backing_off(self) -> frozenset[CallKey]:
        """The calls that failed transiently and wait for their backoff to end (§4)."""
        if self.calls is None:
            return frozenset()
        return self.calls.keys(CallState.BACKING_OFF)


@dataclass(frozen=True, slots=True)
class CheckpointData:
    """M1's data: the attempt in flight (None in `idle`) and the consecutive counters."""

    attempt: Attempt | None = None
    failures: int = 0
    skips: int = 0
    failure_budget: int = 3  # max_consecutive_failures


@dataclass(frozen=True, slots=True)
class Trigger:
    """The argument of TRIGGER: the attempt to start, or why it is skipped."""

    attempt: Attempt
    skip: Classification | None = None


@dataclass(frozen=True, slots=True)
class Restart:
    """The argument of RESTARTED: who restarted, whether the attempt `touched` it (called it
    with its id, S6), whether the phase is calling its role now (`in_turn`), and how §4
    classifies a restart."""

    participant: str
    touched: bool
    cause: Classification
    in_turn: bool = False


# ----------------------------------------------------------------------------- the rows

_S = CheckpointState
_I = CheckpointInput

ATTEMPT_STATES = tuple(s for s in _S if s not in (_S.IDLE, _S.STOPPED))
"""Every state with an attempt in flight."""
_BEFORE_PARTICIPANTS = (_S.CLOSING_ADMISSION, _S.FLUSHING_ACKS)
_PARTICIPANTS_TOUCHED = (_S.PREPARING, _S.COMMITTING, _S.CAPTURING, _S.VALIDATING)
_AFTER_PREPARE = (_S.COMMITTING, _S.CAPTURING, _S.VALIDATING)
_PENDING = (_S.ABORT_PENDING, _S.RELEASE_PENDING)
_BUSY = tuple(s for s in ATTEMPT_STATES if s not in _PENDING)

# fmt: off
# ruff: disable[E501] one row per line: the table reads across
_ROWS = (
    # --- start: skip preconditions first; a new id only from idle.
    on(_S.IDLE, _I.TRIGGER, None, guard="skip", update="skipped", effects="outcome"),
    on(_S.IDLE, _I.TRIGGER, _S.CLOSING_ADMISSION, update="begin", effects=("write_intent", "hold")),
    on(_S.IDLE, _I.RECOVERED, _S.PUBLISHING, update="adopt", effects=("hold", "inspect_published")),
    # --- the happy path.
    on(_S.CLOSING_ADMISSION, _I.INTENT_WRITTEN, _S.FLUSHING_ACKS, effects="flush_acks"),
    on(_S.FLUSHING_ACKS, _I.ACKS_FLUSHED, _S.PREPARING, effects=("arm_prepare_deadline", "call_prepare")),
    on(_S.PREPARING, _I.ROLES_DONE, _S.COMMITTING, effects=("cancel_prepare_timers", "call_commit")),
    on(_S.COMMITTING, _I.ROLES_DONE, _S.CAPTURING, effects="capture_cut"),
    on(_S.CAPTURING, _I.CUT_CAPTURED, _S.VALIDATING, effects="validate"),
    on(_S.VALIDATING, _I.VALIDATED, _S.PUBLISHING, effects="publish"),
    on(_S.PUBLISHING, _I.PUBLISHED, _S.RELEASING, update="published", effects=("update_intent", "call_release")),
    on(_S.RELEASING, _I.ROLES_DONE, _S.IDLE, update="completed", effects=("clear_intent", "drop_holds", "outcome")),
    # --- the ambiguous-publish rule (after a failed rename, and at restart).
    on(_S.PUBLISHING, _I.PUBLISH_FAILED, None, effects="inspect_published"),
    on(_S.PUBLISHING, _I.INSPECTED_VERIFIED, _S.RELEASING, update="published", effects=("update_intent", "call_release")),
    on(_S.PUBLISHING, _I.INSPECTED_UNVERIFIABLE, _S.ABORTING, update="unverifiable", effects=("quarantine", "call_abort")),
    on(_S.PUBLISHING, _I.INSPECTED_ABSENT, _S.ABORTING, update="unverifiable", effects="call_abort"),
    # --- failures. A fatal cause stops at once, keeping the intent for the next start.
    on(ATTEMPT_STATES, _I.FAILED, _S.STOPPED, guard="fatal", effects=("outcome", "stop")),
    # A late failure of the release or abort round that already failed (another participant
    # of the same role): nothing new, the retry timer calls every one of them again.
    on(_PENDING, _I.FAILED, None),
    on(_BEFORE_PARTICIPANTS, _I.FAILED, _S.STOPPED, guard="exhausted", update="note_cause", effects=("clear_intent", "outcome", "stop")),
    on(_BEFORE_PARTICIPANTS, _I.FAILED, _S.IDLE, update="abandon", effects=("clear_intent", "drop_holds", "outcome")),
    on(_PARTICIPANTS_TOUCHED, _I.FAILED, _S.ABORTING, update="note_cause", effects=("cancel_prepare_timers", "call_abort")),
    on(_S.ABORTING, _I.ROLES_DONE, _S.STOPPED, guard="over_budget", update="finished", effects=("discard_staging", "clear_intent", "outcome", "stop")),
    on(_S.ABORTING, _I.ROLES_DONE, _S.IDLE, update="finished", effects=("discard_staging", "clear_intent", "drop_holds", "outcome")),
    on(_S.ABORTING, _I.FAILED, _S.STOPPED, guard="over_budget", update="note_cause", effects=("outcome", "stop")),
    on(_S.ABORTING, _I.FAILED, _S.ABORT_PENDING, update="note_cause", effects=("outcome", "arm_retry")),
    on(_S.RELEASING, _I.FAILED, _S.RELEASE_PENDING, update="note_cause", effects=("outcome", "arm_retry")),
    # --- pending work comes before anything else, with the same id.
    on(_S.ABORT_PENDING, _I.RETRY_DUE, _S.ABORTING, effects="call_abort"),
    on(_S.ABORT_PENDING, _I.TRIGGER, _S.ABORTING, effects=("cancel_retry", "call_abort")),
    on(_S.RELEASE_PENDING, _I.RETRY_DUE, _S.RELEASING, effects="call_release"),
    on(_S.RELEASE_PENDING, _I.TRIGGER, _S.RELEASING, effects=("cancel_retry", "call_release")),
    # --- a participant restarted (S19). One the attempt never called holds nothing: the
    # attempt goes on. One of the role being prepared kept its fence (§6 journal) and lost
    # only what was running, which nothing committed yet: it is prepared again, same id.
    # Any other may have lost what the attempt counted on (a later role was called since,
    # or it may have committed): the attempt fails, never retried inside it (§4).
    # (Last, so the rows above keep their indices: mutant notes are keyed by them.)
    on(_S.PREPARING, _I.RESTARTED, None, guard="in_turn", effects="call_prepare_again"),
    on(_PARTICIPANTS_TOUCHED, _I.RESTARTED, _S.ABORTING, guard="touched", update="note_restart", effects=("cancel_prepare_timers", "call_abort")),
    on(_PARTICIPANTS_TOUCHED, _I.RESTARTED, None),
)
# ruff: enable[E501]
# fmt: on

# A trigger during an attempt is coalesced into it; a retry timer outside a pending state is
# stale (the retry already ran); a stopped controller does nothing more. Every other pair no
# row maps is refused (`unmapped="forbidden"` below).
_IGNORED = (
    *each(_BUSY, _I.TRIGGER),
    # A restart outside preparing .. validating: nobody may hold the id, or its abort or
    # release is retried with the same id anyway.
    *each(tuple(s for s in _S if s not in _PARTICIPANTS_TOUCHED), _I.RESTARTED),
    *each((_S.IDLE, *_BUSY), _I.RETRY_DUE),
    *each(_S.STOPPED, (_I.TRIGGER, _I.RETRY_DUE)),
)


# ----------------------------------------------------------------------------- guards


def _skip(_value: Value[Any, CheckpointData], arg: Trigger) -> bool:
    return arg.skip is not None


def _fatal(_value: Value[Any, CheckpointData], cause: Classification) -> bool:
    return cause.disposition is Disposition.FATAL


def _exhausted(value: Value[Any, CheckpointData], cause: Classification) -> bool:
    # This failure would be one more than the budget allows.
    return (
        cause.disposition is Disposition.RETRYABLE
        and value.data.failures + 1 > value.data.failure_budget
    )


def stops_the_run(data: CheckpointData, cause: Classification) -> bool:
    """Does failing the attempt with `cause` stop the run: a fatal cause, or one retryable
    failure more than `failure_budget` (the `fatal` and `exhausted` guards)?"""
    value = Value(CheckpointState.IDLE, data)
    return _fatal(value, cause) or _exhausted(value, cause)


def _touched(_value: Value[Any, CheckpointData], arg: Restart) -> bool:
    return arg.touched


def _in_turn(_value: Value[Any, CheckpointData], arg: Restart) -> bool:
    return arg.touched and arg.in_turn


def _over_budget(value: Value[Any, CheckpointData], _arg: object) -> bool:
    return value.data.failures > value.data.failure_budget


# ----------------------------------------------------------------------------- updates


def _count(data: CheckpointData, cause: Classification) -> CheckpointData:
    if cause.disposition is Disposition.SKIPPED:
        return replace(data, skips=data.skips + 1)
    if cause.disposition is Disposition.RETRYABLE:
        # A failure breaks a run of skips; skips never break a run of failures.
        return replace(data, failures=data.failures + 1, skips=0)
    return data


def _begin(data: CheckpointData, arg: Trigger) -> CheckpointData:
    return replace(data, attempt=arg.attempt)


def _skipped(data: CheckpointData, arg: Trigger) -> CheckpointData:
    assert arg.skip is not None
    return _count(replace(data, attempt=None), arg.skip)


def _adopt(data: CheckpointData, attempt: Attempt) -> CheckpointData:
    return replace(data, attempt=attempt)


def _note_cause(data: CheckpointData, cause: Classification) -> CheckpointData:
    # The first cause is the attempt's reason and its one count (§4 counts attempts that
    # failed, not calls): a failing abort or release keeps both, since its own retry timer
    # retries it, and a published attempt whose release fails has not failed.
    attempt = data.attempt
    if attempt is None:
        return _count(data, cause)
    if attempt.cause is not None:
        return data
    noted = replace(data, attempt=replace(attempt, cause=cause))
    return noted if attempt.published else _count(noted, cause)


def _note_restart(data: CheckpointData, arg: Restart) -> CheckpointData:
    # As any failure; if it stops the run, the stop names the restarted participant (§4).
    noted = _note_cause(data, arg.cause)
    if noted.attempt is not None and stops_the_run(data, arg.cause):
        return replace(noted, attempt=replace(noted.attempt, failed_by=arg.participant))
    return noted


def _abandon(data: CheckpointData, cause: Classification) -> CheckpointData:
    return replace(_note_cause(data, cause), attempt=None)


def _published(data: CheckpointData, _arg: object) -> CheckpointData:
    assert data.attempt is not None
    return replace(data, attempt=replace(data.attempt, published=True))


def _unpublished(cause: Classification) -> Any:
    def update(data: CheckpointData, _arg: object) -> CheckpointData:
        return _note_cause(data, cause)

    return update


def _completed(data: CheckpointData, _arg: object) -> CheckpointData:
    return replace(data, attempt=None, failures=0, skips=0)


def _finished(data: CheckpointData, _arg: object) -> CheckpointData:
    return replace(data, attempt=None)


def _attempt_matches_state(value: Value[CheckpointState, CheckpointData]) -> bool:
    if value.state is CheckpointState.STOPPED:
        return True  # with the id the intent keeps, or none
    return (value.data.attempt is not None) == (value.state is not CheckpointState.IDLE)


# ----------------------------------------------------------------------------- the table

# Publication of an unverifiable snapshot is treated as a failure to publish: io_error.
_UNVERIFIABLE = classify(Cause.IO_ERROR)

CHECKPOINT: Table[CheckpointState, CheckpointInput] = Table(
    "checkpoint",
    doc="M1: one snapshot attempt, publish-or-abort with the same id.",
    states=CheckpointState,
    inputs=CheckpointInput,
    initial=_S.IDLE,
    initial_data=CheckpointData(),
    finals=(_S.STOPPED,),
    rows=_ROWS,
    ignored=_IGNORED,
    unmapped="forbidden",
    guards={
        "skip": _skip,
        "fatal": _fatal,
        "exhausted": _exhausted,
        "over_budget": _over_budget,
        "touched": _touched,
        "in_turn": _in_turn,
    },
    updates={
        "begin": _begin,
        "skipped": _skipped,
        "adopt": _adopt,
        "note_cause": _note_cause,
        "note_restart": _note_restart,
        "abandon": _abandon,
        "published": _published,
        "unverifiable": _unpublished(_UNVERIFIABLE),
        "completed": _completed,
        "finished": _finished,
    },
    invariants={"attempt_iff_busy": _attempt_matches_state},
)
"""M1 `checkpoint`. Effects are named, unbound (`quiesce.fsm.Effect`): the coordinator
interprets each name (see `_checkpoint_work.py`, `CHECKPOINT_WORK`)."""

_ATTEMPTS = tuple(
    Attempt(OpId(1, seq, step), trainer_step=step, started_at=0.0, phase_started_at=0.0)
    for seq, step in ((1, 0), (2, 4), (3, 9))
)
_CLASSIFICATIONS = tuple(classify(cause) for cause in Cause)
ARG_EXAMPLES: Mapping[CheckpointInput, tuple[object, ...]] = {
    # As many starts as skips, one skip of each disposition (only the disposition counts).
    _I.TRIGGER: (
        *(Trigger(attempt) for attempt in _ATTEMPTS),
        *(
            Trigger(_ATTEMPTS[0], skip=classify(cause))
            for cause in (Cause.NOTHING_MUTATED, Cause.TIMEOUT, Cause.INVARIANT_BROKEN)
        ),
    ),
    _I.RECOVERED: _ATTEMPTS,
    _I.FAILED: _CLASSIFICATIONS,
    _I.RESTARTED: tuple(
        Restart("agent-0", touched, classify(Cause.PARTICIPANT_RESTARTED), in_turn)
        for touched, in_turn in ((True, True), (True, False), (False, False))
    ),
}
"""Example arguments by input, for the sweeps (`quiesce.check.arg_examples`): a `Trigger`,
the recovered `Attempt`, every cause's `Classification`; the other inputs take none."""
