"""Protocol errors, h11-style: refusals a participant answers, and errors at the boundary.

- A `Refusal` is a typed answer a participant gives instead of doing an operation (M2, M3):
  its `code` is the wire error code, its data is in attributes. Refusals never change state.
- `RemoteProtocolError`: the peer sent something that breaks the protocol (a malformed
  reply, a reply naming the wrong id). It names the participant and the field, and says
  explicitly whether it is `retryable`.
- `LocalProtocolError`: this process tried something the protocol forbids.
"""

from __future__ import annotations

from typing import ClassVar

from quiesce.fsm import QuiesceError

__all__ = [
    "AdmissionClosed",
    "CheckpointConflict",
    "DuplicateExecution",
    "InvalidPhase",
    "LocalProtocolError",
    "MalformedRequest",
    "ProtocolError",
    "Refusal",
    "RemoteProtocolError",
    "StaleAttempt",
    "StaleCheckpoint",
    "UnknownExecution",
    "UnsupportedOperation",
]


class ProtocolError(QuiesceError):
    """Base of every protocol error."""


class LocalProtocolError(ProtocolError):
    """This side broke the protocol (a bug here, never the peer's fault)."""


class RemoteProtocolError(ProtocolError):
    """`participant` broke the protocol in `field`; `retryable` says how to classify it."""

    def __init__(self, participant: str, field: str, detail: str, *, retryable: bool) -> None:
        self.participant = participant
        self.field = field
        self.detail = detail
        self.retryable = retryable
        super().__init__(f"participant {participant!r} sent a bad {field!r}: {detail}")


class Refusal(ProtocolError):
    """A participant refused an operation; nothing changed. `code` is the wire code."""

    code: ClassVar[str] = "refused"


class CheckpointConflict(Refusal):
    """Another op id is active on the fence; the controller must finish `active_id` first."""

    code = "checkpoint_conflict"

    def __init__(self, active_id: str, requested_id: str) -> None:
        self.active_id = active_id
        self.requested_id = requested_id
        super().__init__(
            f"{requested_id} conflicts with active {active_id}: resume {active_id} first"
        )


class StaleCheckpoint(Refusal):
    """`requested_id` is at or below the high-watermark: a delayed or replayed request."""

    code = "stale_checkpoint"

    def __init__(self, requested_id: str, high_watermark: str) -> None:
        self.requested_id = requested_id
        self.high_watermark = high_watermark
        super().__init__(f"{requested_id} is stale: ids up to {high_watermark} are retired")


class InvalidPhase(Refusal):
    """`op` is not legal in fence state `state` (M2's op table)."""

    code = "invalid_phase"

    def __init__(self, op: str, state: str, op_id: str | None = None) -> None:
        self.op = op
        self.state = state
        self.op_id = op_id
        super().__init__(f"{op}({op_id or ''}) is not legal in fence state {state}")


class AdmissionClosed(Refusal):
    """M3 `begin` while the fence is not idle: no new execution starts during a checkpoint."""

    code = "admission_closed"

    def __init__(self, rollout_id: str, attempt: int) -> None:
        self.rollout_id = rollout_id
        self.attempt = attempt
        super().__init__(f"begin({rollout_id}#{attempt}) refused: admission is closed")


class StaleAttempt(Refusal):
    """M3 `begin` for a key that is already acked or tombstoned."""

    code = "stale_attempt"

    def __init__(self, rollout_id: str, attempt: int) -> None:
        self.rollout_id = rollout_id
        self.attempt = attempt
        super().__init__(f"{rollout_id}#{attempt} is acked or tombstoned; use a newer attempt")


class DuplicateExecution(Refusal):
    """M3 `begin` for a key that is already live."""

    code = "duplicate_execution"

    def __init__(self, rollout_id: str, attempt: int) -> None:
        self.rollout_id = rollout_id
        self.attempt = attempt
        super().__init__(f"{rollout_id}#{attempt} is already running")


class UnknownExecution(Refusal):
    """An operation names an execution this agent does not have."""

    code = "unknown_execution"

    def __init__(self, rollout_id: str, attempt: int) -> None:
        self.rollout_id = rollout_id
        self.attempt = attempt
        super().__init__(f"no execution {rollout_id}#{attempt} on this agent")


class MalformedRequest(Refusal):
    """A request to a participant did not parse: `field` names the first bad field."""

    code = "malformed_request"

    def __init__(self, op: str, field: str, detail: str) -> None:
        self.op = op
        self.field = field
        self.detail = detail
        super().__init__(f"malformed {op} request: {field!r}: {detail}")


class UnsupportedOperation(Refusal):
    """`op` is not an operation of this participant's `role` (e.g. `begin` on a policy, or
    any control operation on an auxiliary policy, which is never fenced)."""

    code = "unsupported_operation"

    def __init__(self, op: str, role: str) -> None:
        self.op = op
        self.role = role
        super().__init__(f"{op!r} is not an operation of a {role} participant")
