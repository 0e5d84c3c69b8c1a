"""Failure causes and the ONE table that classifies them (PROTOCOL.md §4).

A *cause* is what happened (a call timed out, its request was lost, its reply was lost: three
causes); a *reason* is how the attempt's outcome reports it (`timeout` for all three). The
coordinator classifies by cause, never by exception class: an adapter that catches an
exception translates it into a `Cause` once, at the boundary, and everything after that
reads `CAUSES`.

Three dispositions:
- `retryable`: the attempt fails, participants touched are aborted with the same id, the
  failure counts toward `max_consecutive_failures`;
- `skipped`: a precondition did not hold; nothing is wrong, the attempt is skipped (and
  aborted if participants were touched); counts toward `max_consecutive_skips` only;
- `fatal`: the controller cannot trust its own view any more (`invariant_error`): `stopped`.

>>> kind = classify(Cause.REPLY_LOST)
>>> kind.reason, kind.disposition.value
('timeout', 'retryable')
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from types import MappingProxyType

__all__ = ["CAUSES", "Cause", "Classification", "Disposition", "cause_of_refusal", "classify"]


class Cause(Enum):
    """What happened. Values are the names logs and tests use."""

    # A control call did not come back in time, or one of its two messages was lost.
    TIMEOUT = "timeout"
    REQUEST_LOST = "request_lost"
    REPLY_LOST = "reply_lost"
    # The transport failed (connection refused, reset, local store I/O).
    IO_ERROR = "io_error"
    # The participant answered with a server error (HTTP 5xx), or a retryable bad reply.
    PARTICIPANT_ERROR = "participant_error"
    # A participant's fence holds another id; the controller aborts that id first (S5).
    CHECKPOINT_CONFLICT = "checkpoint_conflict"
    # A participant answered `failed` to commit (it is back in `prepared`).
    COMMIT_FAILED = "commit_failed"
    # A staged artifact's digest differs from the participant's manifest.
    ARTIFACT_MISMATCH = "artifact_mismatch"
    # The participant's incarnation changed in the middle of the attempt (S19).
    PARTICIPANT_RESTARTED = "participant_restarted"
    # Prepare answered `not_ready` until the prepare deadline (S10).
    NOT_READY_UNTIL_DEADLINE = "not_ready_until_deadline"
    # Skip preconditions: nothing is broken, this is just not the moment.
    NOT_DISCOVERED = "not_discovered"
    NO_TRAINER_ANCHOR = "no_trainer_anchor"
    OPTIMIZER_COMMIT_IN_PROGRESS = "optimizer_commit_in_progress"
    TRAINER_STATE_CHANGED = "trainer_state_changed"
    NOTHING_MUTATED = "nothing_mutated"
    ACKS_PENDING = "acks_pending"
    # The controller's view is broken: stop.
    WRONG_ID = "wrong_id"
    STALE_ID = "stale_id"
    INVALID_PHASE = "invalid_phase"
    TOPOLOGY_MISMATCH = "topology_mismatch"
    INVARIANT_BROKEN = "invariant_broken"
    MALFORMED_REPLY = "malformed_reply"


class Disposition(Enum):
    """What a cause does to the attempt."""

    RETRYABLE = "retryable"
    SKIPPED = "skipped"
    FATAL = "fatal"


@dataclass(frozen=True, slots=True)
class Classification:
    """A cause with the reason its outcome reports and its disposition."""

    cause: Cause
    reason: str
    disposition: Disposition

    @property
    def retryable(self) -> bool:
        """Is this a failure the next attempt may fix (the outcome's `retryable`)?"""
        return self.disposition is not Disposition.FATAL


_R, _S, _F = Disposition.RETRYABLE, Disposition.SKIPPED, Disposition.FATAL

# The table of PROTOCOL.md §4, one line per cause: cause -> (reason, disposition).
_TABLE: dict[Cause, tuple[str, Disposition]] = {
    Cause.TIMEOUT: ("timeout", _R),
    Cause.REQUEST_LOST: ("timeout", _R),
    Cause.REPLY_LOST: ("timeout", _R),
    Cause.NOT_READY_UNTIL_DEADLINE: ("timeout", _R),
    Cause.IO_ERROR: ("io_error", _R),
    Cause.PARTICIPANT_ERROR: ("participant_error", _R),
    Cause.CHECKPOINT_CONFLICT: ("participant_error", _R),
    Cause.COMMIT_FAILED: ("participant_error", _R),
    Cause.ARTIFACT_MISMATCH: ("artifact_mismatch", _R),
    Cause.PARTICIPANT_RESTARTED: ("participant_restarted", _R),
    Cause.NOT_DISCOVERED: ("not_discovered", _S),
    Cause.NO_TRAINER_ANCHOR: ("no_trainer_anchor", _S),
    Cause.OPTIMIZER_COMMIT_IN_PROGRESS: ("optimizer_commit_in_progress", _S),
    Cause.TRAINER_STATE_CHANGED: ("trainer_state_changed", _S),
    Cause.NOTHING_MUTATED: ("nothing_mutated", _S),
    Cause.ACKS_PENDING: ("acks_pending", _S),
    Cause.WRONG_ID: ("invariant_error", _F),
    Cause.STALE_ID: ("invariant_error", _F),
    Cause.INVALID_PHASE: ("invariant_error", _F),
    Cause.TOPOLOGY_MISMATCH: ("invariant_error", _F),
    Cause.INVARIANT_BROKEN: ("invariant_error", _F),
    # A reply that does not parse: `parse_reply` already decided whether it is retryable
    # and the adapter reports PARTICIPANT_ERROR for those; what reaches here is not.
    Cause.MALFORMED_REPLY: ("invariant_error", _F),
}

CAUSES: Mapping[Cause, Classification] = MappingProxyType(
    {
        cause: Classification(cause, reason, disposition)
        for cause, (reason, disposition) in _TABLE.items()
    }
)
"""Every cause with its classification; `tests/protocol/test_coordinator.py` checks it covers
every member of `Cause`."""


def classify(cause: Cause) -> Classification:
    """The classification of `cause` (a total function over `Cause`)."""
    return CAUSES[cause]


# A participant's typed refusal (`ErrorReply.code`) to a call the controller is waiting on.
_REFUSALS: dict[str, Cause] = {
    "checkpoint_conflict": Cause.CHECKPOINT_CONFLICT,
    # The controller's ids are fresh and ordered: a refusal as stale means they are not.
    "stale_checkpoint": Cause.STALE_ID,
    # The controller only sends what its phase allows: a refusal means the views diverged.
    "invalid_phase": Cause.INVALID_PHASE,
}


def cause_of_refusal(code: str) -> Cause:
    """The cause of a refusal `code` answered to a control call (any other code is a
    participant error, retryable)."""
    return _REFUSALS.get(code, Cause.PARTICIPANT_ERROR)
