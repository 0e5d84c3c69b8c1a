"""The `Participant` client interface: how the driver talks to one participant, anywhere.

What lives here: one abstract class every adapter implements (in-memory, HTTP, Ray), the one
exception a failed call raises (`CallFailedError`, carrying a protocol `Cause`), the reply model of
each operation, and the `CompletionsReply` query. What it does not know: transports, or what
any reply *means* for the checkpoint (the coordinator decides that).

The contract, per call:

- a typed method per operation takes the operation's wire request (`quiesce.protocol`
  `_messages`) and returns its reply model **or an `ErrorReply`**. A refusal
  (`checkpoint_conflict`, `stale_checkpoint`, `invalid_phase`, `admission_closed`, ...) is an
  *answer*, not a failure: it comes back as a value, so the coordinator gets its data
  (`active_id`, `high_watermark`) and feeds it in as a `Reply` input unchanged;
- anything that is not an answer raises `CallFailedError(participant, op, cause)`: no reply in
  time (`Cause.TIMEOUT`), a lost request or reply (`REQUEST_LOST`, `REPLY_LOST`), a transport
  error (`IO_ERROR`), a server error or a reply that does not parse (`PARTICIPANT_ERROR`;
  the `RemoteProtocolError` is kept as `error`). Adapters translate exceptions into a `Cause`
  once, here at the boundary; the coordinator classifies by cause (`_causes.CAUSES`), never by
  exception class. `CallFailedError.as_input(op_id)` is the coordinator's `CALL_FAILED` input;
- every call is bounded by an absolute `deadline_at` in the caller's clock: control requests
  carry it (`ControlRequest.deadline_at`), the other methods take it as a keyword (None: the
  adapter's default timeout).

Adapters implement exactly one method, `send(op, request, deadline_at) -> Message`, which
returns the raw reply (already parsed as a wire model) or raises `CallFailedError`; the typed
methods here check the reply's type once for all adapters.

>>> from quiesce.protocol import ParticipantOp
>>> error = CallFailedError("agent-0", ParticipantOp.PREPARE, Cause.TIMEOUT)
>>> error.cause.value, str(error)
('timeout', "prepare to 'agent-0' failed: timeout")
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TypeVar

from quiesce.fsm import QuiesceError
from quiesce.protocol import Cause, OpId, RemoteProtocolError
from quiesce.protocol.controller.lowlevel import CallFailed as CallFailedInput
from quiesce.protocol.controller.lowlevel import Op
from quiesce.protocol.participant import AgentRole, ParticipantOp, ParticipantState, stamp
from quiesce.protocol.wire import (
    AckReply,
    AckRequest,
    BaseReply,
    BeginRequest,
    BoundaryRequest,
    Capabilities,
    CommitReply,
    ControlRequest,
    DiscardRequest,
    ErrorReply,
    ExecutionReply,
    FinishRequest,
    Message,
    PrepareReply,
    Receipt,
    RestoreReply,
    RestoreRequest,
    ResumeReply,
    RetireReply,
    RetireRequest,
    StatusReply,
)

__all__ = [
    "REPLY_MODELS",
    "CallFailedError",
    "CompletionsReply",
    "Participant",
    "QueryOp",
]

M = TypeVar("M", bound=Message)


class CompletionsReply(BaseReply):
    """The receipts of this agent's completed-but-unACKed executions (a host query, not a
    protocol operation: it changes nothing). Lets a controller in another process learn
    of completions it has not seen (e.g. after it restarted)."""

    receipts: tuple[Receipt, ...] = ()

    @classmethod
    def of(cls, state: ParticipantState) -> CompletionsReply:
        """The reply a participant in `state` gives: its completed-but-unACKed executions
        (none for a policy or resources participant)."""
        role = state.role
        receipts: tuple[Receipt, ...] = ()
        if isinstance(role, AgentRole):
            receipts = tuple(
                Receipt(
                    rollout_id=e.data.rollout_id, attempt=e.data.attempt, receipt=e.data.receipt
                )
                for e in role.completed()
            )
        return cls(**stamp(state), receipts=receipts)


class QueryOp:
    """Names of host queries that are not `ParticipantOp`s (routes, logs)."""

    COMPLETIONS = "completions"


REPLY_MODELS: dict[ParticipantOp, type[Message]] = {
    ParticipantOp.CAPABILITIES: Capabilities,
    ParticipantOp.STATUS: StatusReply,
    ParticipantOp.PREPARE: PrepareReply,
    ParticipantOp.COMMIT: CommitReply,
    ParticipantOp.RESUME: ResumeReply,
    ParticipantOp.RESTORE: RestoreReply,
    ParticipantOp.DISCARD: RestoreReply,
    ParticipantOp.ACK: AckReply,
    ParticipantOp.RETIRE: RetireReply,
    ParticipantOp.BEGIN: ExecutionReply,
    ParticipantOp.BOUNDARY: ExecutionReply,
    ParticipantOp.FINISH: ExecutionReply,
}
"""The success reply model of each operation (any operation may also answer `ErrorReply`)."""


class CallFailedError(QuiesceError):
    """A call to `participant` got no usable answer; `cause` says what happened.

    `error` is the underlying exception when there was one (a `RemoteProtocolError` for a
    reply that does not parse); `detail` is a short human text. Never carries credentials.
    """

    def __init__(
        self,
        participant: str,
        op: ParticipantOp | str,
        cause: Cause,
        detail: str = "",
        *,
        error: BaseException | None = None,
    ) -> None:
        self.participant = participant
        self.op = op if isinstance(op, ParticipantOp) else ParticipantOp(op)
        self.cause = cause
        self.detail = detail
        self.error = error
        suffix = f" ({detail})" if detail else ""
        super().__init__(f"{self.op.value} to {participant!r} failed: {cause.value}{suffix}")

    def as_input(self, op_id: OpId | None) -> CallFailedInput:
        """The coordinator's `CallFailedError` input for this failure of call `(op, op_id)`.

        Raises `ValueError` for operations the coordinator never calls (capabilities,
        begin, boundary, finish): their failures are the driver's own business."""
        return CallFailedInput(self.participant, Op(self.op.value), op_id, self.cause)


def _deadline(request: ControlRequest) -> float:
    return request.deadline_at


class Participant(ABC):
    """A client for one participant: one async method per operation (PROTOCOL.md M2-M5).

    Every method returns the operation's reply model or an `ErrorReply` (a typed refusal),
    and raises `CallFailedError` when there is no usable answer. See the module docstring.

    >>> issubclass(Participant, ABC)
    True
    """

    name: str
    """The participant's name (its `ParticipantConfig.name`)."""

    @abstractmethod
    async def send(
        self, op: ParticipantOp, request: Message | None, deadline_at: float | None
    ) -> Message:
        """Send one operation; return the parsed reply (any wire model) or raise
        `CallFailedError`. Implemented by each adapter; callers use the typed methods."""

    async def aclose(self) -> None:  # noqa: B027 -- optional hook, most clients hold nothing
        """Release the client's resources (connections); the default holds none."""

    async def call(
        self, op: ParticipantOp, request: Message | None, deadline_at: float | None = None
    ) -> Message:
        """Send `op` and check the reply is `op`'s reply model or an `ErrorReply`.

        A reply of another type is a `RemoteProtocolError`, raised as `CallFailedError` with
        cause `PARTICIPANT_ERROR` (retryable: a next attempt may meet a healthy server)."""
        reply = await self.send(op, request, deadline_at)
        expected = REPLY_MODELS[op]
        if isinstance(reply, expected | ErrorReply):
            return reply
        error = RemoteProtocolError(
            self.name,
            "<body>",
            f"{op.value} answered {type(reply).__name__}, expected {expected.__name__}",
            retryable=True,
        )
        raise CallFailedError(self.name, op, Cause.PARTICIPANT_ERROR, str(error), error=error)

    async def _typed(
        self,
        model: type[M],
        op: ParticipantOp,
        request: Message | None,
        deadline_at: float | None,
    ) -> M | ErrorReply:
        reply = await self.call(op, request, deadline_at)
        assert isinstance(reply, model | ErrorReply)
        return reply

    # ------------------------------------------------------------------ discovery

    async def capabilities(self, *, deadline_at: float | None = None) -> Capabilities | ErrorReply:
        """Discovery (§2): role, name, recovery mode, incarnation, ..."""
        return await self._typed(Capabilities, ParticipantOp.CAPABILITIES, None, deadline_at)

    async def status(self, *, deadline_at: float | None = None) -> StatusReply | ErrorReply:
        """The fence and role state (changes nothing)."""
        return await self._typed(StatusReply, ParticipantOp.STATUS, None, deadline_at)

    # ------------------------------------------------------------------ control fence

    async def prepare(self, request: ControlRequest) -> PrepareReply | ErrorReply:
        """prepare(X): `ready`, or `not_ready` with blockers."""
        op = ParticipantOp.PREPARE
        return await self._typed(PrepareReply, op, request, _deadline(request))

    async def commit(self, request: ControlRequest) -> CommitReply | ErrorReply:
        """commit(X): the artifact (base64) and its digest, or `failed`."""
        op = ParticipantOp.COMMIT
        return await self._typed(CommitReply, op, request, _deadline(request))

    async def resume(self, request: ControlRequest) -> ResumeReply | ErrorReply:
        """resume(X) = abort = release: retires X."""
        op = ParticipantOp.RESUME
        return await self._typed(ResumeReply, op, request, _deadline(request))

    abort = resume
    release = resume

    async def restore(self, request: RestoreRequest) -> RestoreReply | ErrorReply:
        """restore(R, snapshot): install the participant's artifact of `snapshot_id`."""
        op = ParticipantOp.RESTORE
        return await self._typed(RestoreReply, op, request, _deadline(request))

    async def discard_restored_continuation(
        self, request: DiscardRequest, *, deadline_at: float | None = None
    ) -> RestoreReply | ErrorReply:
        """Drop one restored continuation (legal only in `restored_paused` under R)."""
        op = ParticipantOp.DISCARD
        return await self._typed(RestoreReply, op, request, deadline_at)

    # ------------------------------------------------------------------ agent results

    async def acknowledge_completed(
        self, request: AckRequest, *, deadline_at: float | None = None
    ) -> AckReply | ErrorReply:
        """ACK a batch of exact receipts (idempotent): only this releases a result."""
        return await self._typed(AckReply, ParticipantOp.ACK, request, deadline_at)

    async def retire(
        self, request: RetireRequest, *, deadline_at: float | None = None
    ) -> RetireReply | ErrorReply:
        """Retire an execution (deadline expired, or replaced on restore)."""
        return await self._typed(RetireReply, ParticipantOp.RETIRE, request, deadline_at)

    async def begin(
        self, request: BeginRequest, *, deadline_at: float | None = None
    ) -> ExecutionReply | ErrorReply:
        """Start an agent execution (refused while the fence is not idle)."""
        return await self._typed(ExecutionReply, ParticipantOp.BEGIN, request, deadline_at)

    async def boundary(
        self, request: BoundaryRequest, *, deadline_at: float | None = None
    ) -> ExecutionReply | ErrorReply:
        """Report that an execution ended a turn (for agent runtimes outside the host)."""
        return await self._typed(ExecutionReply, ParticipantOp.BOUNDARY, request, deadline_at)

    async def finish(
        self, request: FinishRequest, *, deadline_at: float | None = None
    ) -> ExecutionReply | ErrorReply:
        """Report that an execution's `/run` finished (for runtimes outside the host)."""
        return await self._typed(ExecutionReply, ParticipantOp.FINISH, request, deadline_at)

    # ------------------------------------------------------------------ host queries

    @abstractmethod
    async def completions(self, *, deadline_at: float | None = None) -> CompletionsReply:
        """Receipts of the agent's completed-but-unACKed executions (other roles answer an
        empty tuple). A host query outside `ParticipantOp`; raises `CallFailedError` like every
        call."""
