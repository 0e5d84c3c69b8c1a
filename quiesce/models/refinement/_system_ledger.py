"""The records the system machine keeps: its independent ledger.

What lives here: the call log (`CallLog` of `CallRecord`s, written by `LoggedParticipant`,
the client wrapper every control call goes through), what the world itself did (`World`:
the groups it opened, the switches it began, the faults it injected) and
`SystemViolation`, the invariant these records show broken. `SystemRun`
(`quiesce.models.refinement._system_run`) keeps them and judges PROTOCOL.md §5 against them,
never against the coordinator's own bookkeeping.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from quiesce.adapters import CompletionsReply, FinishedGroup, Participant
from quiesce.fsm import QuiesceError
from quiesce.protocol import OpId
from quiesce.protocol.participant import ParticipantOp
from quiesce.protocol.wire import BeginRequest, ErrorReply, Message

__all__ = ["CallLog", "CallRecord", "LoggedParticipant", "SystemViolation", "World"]


class SystemViolation(QuiesceError, AssertionError):
    """An invariant of PROTOCOL.md §5 failed on the running system: `invariant` names it
    (`I1`..`I8`, or `refinement`: a fence move no design step makes), `detail` says
    what the independent ledger saw."""

    def __init__(self, invariant: str, detail: str) -> None:
        self.invariant = invariant
        self.detail = detail
        super().__init__(f"{invariant}: {detail}")


@dataclass(slots=True)
class CallRecord:
    """One control call as the participant's client saw it: sent by controller number
    `generation` (1 for the first, +1 per restart), `ended` None while in flight;
    `outcome` is `reply`, `refused:<code>` or the failure's class name."""

    generation: int
    participant: str
    role: str
    op: ParticipantOp
    op_id: OpId | None
    started: float
    deadline: float | None
    key: tuple[str, int] | None = None
    ended: float | None = None
    outcome: str = "in_flight"


@dataclass
class CallLog:
    """Every control call the participants' clients carried, in the order they started;
    `generation` numbers the controller sending now, `now` reads the virtual clock."""

    now: Callable[[], float]
    generation: int = 0
    calls: list[CallRecord] = field(default_factory=list)


class LoggedParticipant(Participant):
    """A participant client (of a server of `role`) that records every call it carries
    in `log`."""

    def __init__(self, inner: Participant, role: str, log: CallLog) -> None:
        self.name = inner.name
        self._inner = inner
        self._role = role
        self._log = log

    async def send(
        self, op: ParticipantOp, request: Message | None, deadline_at: float | None
    ) -> Message:
        return await self._inner.call(op, request, deadline_at)

    async def call(
        self, op: ParticipantOp, request: Message | None, deadline_at: float | None = None
    ) -> Message:
        """Carry the call through the wrapped client and record it."""
        op_id = getattr(request, "op_id", None)
        key = (request.rollout_id, request.attempt) if isinstance(request, BeginRequest) else None
        record = CallRecord(
            self._log.generation,
            self.name,
            self._role,
            op,
            op_id if isinstance(op_id, OpId) else None,
            self._log.now(),
            deadline_at,
            key,
        )
        self._log.calls.append(record)
        try:
            reply = await self._inner.call(op, request, deadline_at)
        except BaseException as error:
            record.outcome = type(error).__name__
            raise
        finally:
            record.ended = self._log.now()
        record.outcome = f"refused:{reply.code}" if isinstance(reply, ErrorReply) else "reply"
        return reply

    async def completions(self, *, deadline_at: float | None = None) -> CompletionsReply:
        """The wrapped client's completed-but-unACKed receipts."""
        completions = getattr(self._inner, "completions")  # noqa: B009 - not on the ABC
        reply: CompletionsReply = await completions(deadline_at=deadline_at)
        return reply


@dataclass
class World:
    """What the environment itself did (the independent ledger's inputs)."""

    sizes: dict[int, int] = field(default_factory=dict)
    pushed: set[int] = field(default_factory=set)
    budget: int = 0
    training: tuple[FinishedGroup, ...] | None = None
    train_switch: bool = False
    weight_sync: bool = False
    switch_on: bool = False
    sync_on: bool = False
    faults: int = 0
    crashes: int = 0
    restarts: int = 0
    violations: list[SystemViolation] = field(default_factory=list)
