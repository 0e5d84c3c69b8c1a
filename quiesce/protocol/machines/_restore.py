"""M9 `restore`: the restore lifecycle at controller start, and the ambiguous-publish rule.

What lives here: the `restore` table and `decide_intent` (what to do with a checkpoint the
intent record says was in flight). What it does not know: the store, the ledger, how calls
are sent or in which order (§3: `PHASE_ORDER`); the controller's restore flow fires the
inputs and plans the work (`quiesce.protocol.controller`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

from quiesce.fsm import Table, Value, on
from quiesce.protocol._ids import OpId

__all__ = [
    "ARG_EXAMPLES",
    "RESTORE",
    "IntentAction",
    "IntentDecision",
    "IntentRecord",
    "PublishedState",
    "RestoreData",
    "RestoreInput",
    "RestoreState",
    "decide_intent",
]

# ==================================================================================== restore
#
#  finishing_intent --INTENT_READ [nothing_in_flight] / INTENT_FINISHED--> selecting
#                                                                             |
#     restore_failed <--SOURCE_UNREADABLE-- selecting --FRESH_START-----------|-------+
#                                            |   ^                            |       |
#                          SNAPSHOT_SELECTED |   | RESTORE_REJECTED,          |       |
#                                            v   | CALL_FAILED [no retry left]        |
#                                          restoring  (CALL_FAILED [retries_left] holds)
#                                            | RECV_RESTORED                          |
#                                            v                                        |
#   restored_paused --DISCARD_BEGIN [has_discards]--> discarding                      |
#          +--DISCARD_BEGIN (none)--+                     | RECV_DISCARDED            |
#                                   v                     v                           |
#                                 resuming <--------------+                           |
#                                   | RECV_RESUMED                                    |
#                                   v                                                 |
#                             redispatching <-----------------------------------------+
#                                   | REDISPATCHED
#                                   v
#                                  idle


class RestoreState(Enum):
    FINISHING_INTENT = "finishing_intent"  # added: §6 reads the intent record before anything
    SELECTING = "selecting"
    RESTORING = "restoring"
    RESTORED_PAUSED = "restored_paused"
    DISCARDING = "discarding"
    RESUMING = "resuming"
    REDISPATCHING = "redispatching"
    IDLE = "idle"
    RESTORE_FAILED = "restore_failed"


class RestoreInput(Enum):
    INTENT_READ = "intent_read"  # the intent record was read and decided (arg: IntentDecision)
    INTENT_FINISHED = "intent_finished"  # the in-flight id was released or aborted everywhere
    SOURCE_UNREADABLE = "source_unreadable"  # trainer anchor or snapshot store cannot be read
    SNAPSHOT_SELECTED = "snapshot_selected"  # arg: the chosen snapshot id (str)
    FRESH_START = "fresh_start"  # nothing matches: rollouts start fresh at the trainer anchor
    RECV_RESTORED = "recv_restored"  # every participant restored, digests verified
    RESTORE_REJECTED = "restore_rejected"  # arg: reason (digest_mismatch, unowned_execution …)
    CALL_FAILED = "call_failed"  # a retryable call failure (timeout, io_error, 5xx …)
    DISCARD_BEGIN = "discard_begin"  # arg: how many restart_only continuations to discard
    RECV_DISCARDED = "recv_discarded"  # every discard answered
    RECV_RESUMED = "recv_resumed"  # every participant resumed (resources -> policy -> agents)
    REDISPATCHED = "redispatched"  # ACKs drained and the redispatch plan sent


@dataclass(frozen=True, slots=True)
class RestoreData:
    """The snapshot being restored, retries used on it, and every rejection so far."""

    snapshot: str | None = None
    retries: int = 0
    max_retries: int = 2
    rejected: tuple[tuple[str, str], ...] = ()  # (snapshot id, reason), oldest first


# ----------------------------------------------------------------------------- the rows

_S = RestoreState
_I = RestoreInput
_CALLS_RETRIED = (RestoreState.FINISHING_INTENT, RestoreState.DISCARDING, RestoreState.RESUMING)

# fmt: off
# ruff: disable[E501] one row per line: the table reads across
_ROWS = (
    on(_S.FINISHING_INTENT, _I.INTENT_READ, _S.SELECTING, guard="nothing_in_flight"),
    # A checkpoint was in flight: finish it with the same id before restoring anything.
    on(_S.FINISHING_INTENT, _I.INTENT_READ, None, effects="finish_in_flight"),
    on(_S.FINISHING_INTENT, _I.INTENT_FINISHED, _S.SELECTING, effects="clear_intent"),
    on((_S.FINISHING_INTENT, _S.SELECTING), _I.SOURCE_UNREADABLE, _S.RESTORE_FAILED, effects="report_candidates"),
    on(_S.SELECTING, _I.SNAPSHOT_SELECTED, _S.RESTORING, update="choose", effects="send_restore"),
    on(_S.SELECTING, _I.FRESH_START, _S.REDISPATCHING, effects="start_at_anchor"),
    on(_S.RESTORING, _I.RECV_RESTORED, _S.RESTORED_PAUSED),
    # S16 and friends: resume (= abort) the restore op, then try an older snapshot.
    on(_S.RESTORING, _I.RESTORE_REJECTED, _S.SELECTING, update="reject", effects="abort_restore"),
    on(_S.RESTORING, _I.CALL_FAILED, None, guard="retries_left", update="count_retry", effects="retry_same_op"),
    on(_S.RESTORING, _I.CALL_FAILED, _S.SELECTING, update="exhausted", effects="abort_restore"),
    on(_CALLS_RETRIED, _I.CALL_FAILED, None, effects="retry_same_op"),
    # S12: discards are sent only here, while every participant is restored_paused.
    on(_S.RESTORED_PAUSED, _I.DISCARD_BEGIN, _S.DISCARDING, guard="has_discards", effects="send_discards"),
    on(_S.RESTORED_PAUSED, _I.DISCARD_BEGIN, _S.RESUMING, effects="send_resume"),
    on(_S.DISCARDING, _I.RECV_DISCARDED, _S.RESUMING, effects="send_resume"),
    on(_S.RESUMING, _I.RECV_RESUMED, _S.REDISPATCHING, effects=("drain_acks", "redispatch")),
    on(_S.REDISPATCHING, _I.REDISPATCHED, _S.IDLE),
)
# ruff: enable[E501]
# fmt: on


# ------------------------------------------------------------------ guards and updates


def _nothing_in_flight(_value: Value[Any, RestoreData], decision: IntentDecision) -> bool:
    return decision.action is IntentAction.NONE


def _retries_left(value: Value[Any, RestoreData], _arg: object) -> bool:
    return value.data.retries < value.data.max_retries


def _has_discards(_value: Value[Any, RestoreData], count: int) -> bool:
    return count > 0


def _choose(data: RestoreData, snapshot: str) -> RestoreData:
    return replace(data, snapshot=str(snapshot), retries=0)


def _count_retry(data: RestoreData, _arg: object) -> RestoreData:
    return replace(data, retries=data.retries + 1)


def _reject(data: RestoreData, reason: object) -> RestoreData:
    entry = (data.snapshot or "", str(reason))
    return replace(data, snapshot=None, retries=0, rejected=(*data.rejected, entry))


def _exhausted(data: RestoreData, _arg: object) -> RestoreData:
    return _reject(data, "retries_exhausted")


# ----------------------------------------------------------------------------- the table

RESTORE: Table[RestoreState, RestoreInput] = Table(
    "restore",
    doc="M9: restore at controller start: intent, select, restore, discard, resume, redispatch.",
    states=RestoreState,
    inputs=RestoreInput,
    initial=RestoreState.FINISHING_INTENT,
    initial_data=RestoreData(),
    finals=(RestoreState.IDLE, RestoreState.RESTORE_FAILED),
    rows=_ROWS,
    unmapped="forbidden",
    guards={
        "nothing_in_flight": _nothing_in_flight,
        "retries_left": _retries_left,
        "has_discards": _has_discards,
    },
    updates={
        "choose": _choose,
        "count_retry": _count_retry,
        "reject": _reject,
        "exhausted": _exhausted,
    },
    invariants={
        "retries_bounded": lambda v: v.data.retries <= v.data.max_retries,
        "restoring_names_snapshot": lambda v: (
            v.state is not RestoreState.RESTORING or v.data.snapshot is not None
        ),
    },
)
"""M9 `restore`: selecting -> restoring -> restored_paused -> … -> idle | restore_failed."""


# ============================================================================ (a) intent


class PublishedState(Enum):
    """What the store says about the in-flight checkpoint's published path."""

    VERIFIED = "verified"  # present, manifest and digests check out
    UNVERIFIABLE = "unverifiable"  # present, but cannot be verified (half-written, corrupt)
    ABSENT = "absent"


class IntentAction(Enum):
    NONE = "none"  # no checkpoint was in flight
    RELEASE = "release"  # resume every participant with the same id
    ABORT = "abort"  # resume (= abort) every participant with the same id
    QUARANTINE_AND_ABORT = "quarantine_and_abort"  # rename the path aside first; never selected


@dataclass(frozen=True, slots=True)
class IntentRecord:
    """The durable intent record of §6: the in-flight checkpoint id and its phase."""

    checkpoint_id: OpId
    phase: str


@dataclass(frozen=True, slots=True)
class IntentDecision:
    """What to do with the in-flight checkpoint, and why."""

    action: IntentAction
    checkpoint_id: OpId | None
    reason: str


def decide_intent(intent: IntentRecord | None, published: PublishedState | None) -> IntentDecision:
    """The ambiguous-publish rule (M1), applied at restart (§6, M9).

    The store's inspection decides, never the recorded phase: a crash can land between the
    rename and the intent update.

    >>> decide_intent(None, None).action
    <IntentAction.NONE: 'none'>
    """
    if intent is None:
        return IntentDecision(IntentAction.NONE, None, "no_intent_record")
    if published is None:
        raise ValueError(
            f"intent record names {intent.checkpoint_id}: inspect its published path and pass "
            "a PublishedState before deciding"
        )
    if published is PublishedState.VERIFIED:
        return IntentDecision(IntentAction.RELEASE, intent.checkpoint_id, "published_and_verified")
    if published is PublishedState.UNVERIFIABLE:
        return IntentDecision(
            IntentAction.QUARANTINE_AND_ABORT, intent.checkpoint_id, "published_but_unverifiable"
        )
    return IntentDecision(IntentAction.ABORT, intent.checkpoint_id, "not_published")


_IN_FLIGHT = OpId(1, 3, 7)
ARG_EXAMPLES: Mapping[RestoreInput, tuple[object, ...]] = {
    # Every action `decide_intent` can return, each with its reason.
    RestoreInput.INTENT_READ: (
        IntentDecision(IntentAction.NONE, None, "no_intent_record"),
        IntentDecision(IntentAction.RELEASE, _IN_FLIGHT, "published_and_verified"),
        IntentDecision(IntentAction.ABORT, _IN_FLIGHT, "not_published"),
        IntentDecision(IntentAction.QUARANTINE_AND_ABORT, _IN_FLIGHT, "published_but_unverifiable"),
    ),
    RestoreInput.SNAPSHOT_SELECTED: ("ck-1-3-step7", "ck-1-2-step4"),
    RestoreInput.RESTORE_REJECTED: ("digest_mismatch", "unowned_execution"),
    RestoreInput.DISCARD_BEGIN: (0, 1, 2, 3),
}
"""Example arguments by input, for the sweeps (`quiesce.check.arg_examples`); the inputs
not named take none."""
