"""Deliberately broken participant servers: what the conformance kit catches, by example.

Each class is a `ParticipantHost` whose `handle` bends one rule of PROTOCOL.md the way a
hand-written server gets it wrong; serve one with `LocalServer.start(config, token=...,
host_class=StalePrepareHost)` and `quiesce conform` (or `check_conformance`) prints the
shortest request sequence that shows the bug. They are public so users can see what the kit
is for; the kit's own tests prove it catches each one (tests/testing/test_conformance.py).

- `StalePrepareHost` (S15): forgets the high-watermark when a prepare arrives, so a delayed
  `prepare(X)` after `resume(X)` fences the participant again;
- `ReleaseOnRetireHost` (S17): `retire` of a completed, un-ACKed execution releases its
  result (answers `tombstoned`) instead of holding it until an ACK;
- `StuckCommitHost` (M2): a failed commit leaves the fence `committing` instead of
  returning it to `prepared`;
- `BusyDuplicateHost` (M2): a prepare, commit, resume or restore whose `(op, op_id)` is
  already in flight is refused `invalid_phase` ("busy") instead of waiting for the first's
  reply; alone, every request is answered right, so only the kit's concurrent duplicate
  check sees it;
- `ReplayAfterPhaseMovedHost` (M2): the replay of a recorded `prepare(X)` or `commit(X)`
  after the fence moved on (`prepare(X) -> commit(X) -> prepare(X)`) is refused
  `invalid_phase` instead of answered from the record;
- `WholeBatchAckHost` (M3, docs/wire.md): an ACK batch with one receipt naming a running
  execution is refused whole (`invalid_phase`) instead of listing that receipt in `unknown`
  and releasing the rest;
- `StuckAfterOvertakenPrepareHost` (M2, a race): a prepare long-polls; when a resume
  overtakes it, the stale prepare's success is still applied, leaving the fence `preparing`
  with no active id while admission is open;
- `StalePrepareClobbersNextHost` (M2, a race): a not-ready prepare long-polls; when it
  ends after a resume and the next checkpoint's prepare, it clears the active id, which is
  now the next checkpoint's;
- `ReleasedPrepareActsOnMovedFenceHost` (M2, a race): a not-ready prepare long-polls until
  an execution event releases it, then acts on the fence it arrived on: overtaken by a
  resume, it wedges the fence; by the next checkpoint's prepare, it clobbers its active id;
- `ReplyBeforeFsyncHost` (§6): answers before its journal write is durable (the write is
  flushed by the next request), so a crash right after a reply loses what it reported;
- `FlakyCommitHost` is NOT broken: it fails the first commit of every id and returns to
  `prepared`, as M2 allows; the kit accepts it (its `allowed_failures` counts them);
- `RefusalOrderHost` is NOT broken: where several of `begin`'s refusals apply it answers
  another one than the reference (`admission_closed` last); the spec fixes no order among
  them, and the kit accepts any that applies.

The bent state is set on the host directly (the host's journal is not rewritten): these
servers exist to be caught, not to survive a crash.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import anyio

from quiesce.adapters import ClockEvent, ParticipantHost, dedupe_key
from quiesce.fsm import Value
from quiesce.protocol import OpId
from quiesce.protocol.machines import ExecState, FenceOp, FenceState
from quiesce.protocol.participant import (
    AgentRole,
    Journal,
    JournalWrite,
    ParticipantEffect,
    ParticipantOp,
    ParticipantState,
    stamp,
)
from quiesce.protocol.participant import handle as decide
from quiesce.protocol.wire import (
    AckRequest,
    CommitReply,
    ControlRequest,
    ErrorReply,
    Message,
    Receipt,
    RetireReply,
    RetireRequest,
)
from quiesce.testing._latitude import begin_refusals

__all__ = [
    "BROKEN_HOSTS",
    "BusyDuplicateHost",
    "FlakyCommitHost",
    "RefusalOrderHost",
    "ReleaseOnRetireHost",
    "ReleasedPrepareActsOnMovedFenceHost",
    "ReplayAfterPhaseMovedHost",
    "ReplyBeforeFsyncHost",
    "StalePrepareClobbersNextHost",
    "StalePrepareHost",
    "StuckAfterOvertakenPrepareHost",
    "StuckCommitHost",
    "WholeBatchAckHost",
]


def _name(op: ParticipantOp | str) -> str:
    return op.value if isinstance(op, ParticipantOp) else str(op)


def _invalid_phase(state: ParticipantState, message: str) -> ErrorReply:
    return ErrorReply(
        **stamp(state),
        code="invalid_phase",
        message=message,
        high_watermark=state.fence.data.high_watermark,
    )


def _op_id(request: Any) -> OpId | None:
    try:
        return ControlRequest.model_validate(request).op_id
    except ValueError:
        return None


class StalePrepareHost(ParticipantHost):
    """BROKEN (S15): a prepare is judged as if nothing had ever been retired."""

    async def handle(self, op: ParticipantOp | str, request: Any = None) -> Message:
        """Answer `op`; a prepare first forgets the high-watermark (the bug)."""
        fence = self.state.fence
        if _name(op) != "prepare" or fence.data.high_watermark is None:
            return await super().handle(op, request)
        mark = fence.data.high_watermark
        self._state = replace(
            self.state, fence=Value(fence.state, replace(fence.data, high_watermark=None))
        )
        try:
            return await super().handle(op, request)
        finally:
            after = self.state.fence
            self._state = replace(
                self.state, fence=Value(after.state, replace(after.data, high_watermark=mark))
            )


class ReleaseOnRetireHost(ParticipantHost):
    """BROKEN (S17): retire releases a completed result nobody ACKed."""

    async def handle(self, op: ParticipantOp | str, request: Any = None) -> Message:
        """Answer `op`; a retire of a completed execution ACKs it itself (the bug)."""
        role = self.state.role
        if _name(op) != "retire" or not isinstance(role, AgentRole):
            return await super().handle(op, request)
        retire = RetireRequest.model_validate(request)
        execution = role.find((retire.rollout_id, retire.attempt))
        if execution is None or execution.state is not ExecState.COMPLETED:
            return await super().handle(op, request)
        receipt = Receipt(
            rollout_id=retire.rollout_id, attempt=retire.attempt, receipt=execution.data.receipt
        )
        await super().handle(ParticipantOp.ACK, AckRequest(receipts=(receipt,)))
        return RetireReply(**stamp(self.state), outcome="tombstoned")


class StuckCommitHost(ParticipantHost):
    """BROKEN (M2): every commit fails, and the fence is left `committing` (where a retry of
    the commit, or a concurrent duplicate of it, fails again)."""

    async def handle(self, op: ParticipantOp | str, request: Any = None) -> Message:
        """Answer `op`; a legal commit fails and leaves the fence stuck (the bug)."""
        fence = self.state.fence
        stuck = fence.state in (FenceState.PREPARED, FenceState.COMMITTING)
        if _name(op) != "commit" or not stuck:
            return await super().handle(op, request)
        commit = ControlRequest.model_validate(request)
        if commit.op_id != fence.data.active:
            return await super().handle(op, request)
        self._state = replace(self.state, fence=Value(FenceState.COMMITTING, fence.data))
        reason = "injected: the artifact could not be written"
        return CommitReply(**stamp(self.state), op_id=commit.op_id, status="failed", reason=reason)


class BusyDuplicateHost(ParticipantHost):
    """BROKEN (M2): a duplicate of an in-flight control request is refused, not answered.

    Each prepare, commit, resume or restore takes `work_s` (a slow journal write), and a
    second request with the same `(op, op_id)` arriving meanwhile is refused
    `invalid_phase`, where M2 has it wait for the first and get the same reply."""

    work_s: float = 0.05

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.busy: set[tuple[str, str]] = set()

    async def handle(self, op: ParticipantOp | str, request: Any = None) -> Message:
        """Answer `op`; a concurrent duplicate of a control request is refused (the bug)."""
        key = dedupe_key(ParticipantOp.named(_name(op)), request)
        if key is None:
            return await super().handle(op, request)
        if key in self.busy:
            return _invalid_phase(self.state, f"{key[0]}({key[1]}) is already in progress")
        self.busy.add(key)
        try:
            await self.clock.sleep(self.work_s)
            return await super().handle(op, request)
        finally:
            self.busy.discard(key)


class StuckAfterOvertakenPrepareHost(ParticipantHost):
    """BROKEN (M2, a race): a prepare that finds the fence idle long-polls `poll_s` before it
    is decided; if a resume of its id overtook it meanwhile, it is decided on the state it
    arrived in, and a ready one still moves the (now idle) fence, to `preparing` with no
    active id."""

    poll_s: float = 0.2

    async def handle(self, op: ParticipantOp | str, request: Any = None) -> Message:
        """Answer `op`; a prepare overtaken while it long-polls sticks the fence (the bug)."""
        arrived = self.state
        if _name(op) != "prepare" or arrived.fence.state is not FenceState.IDLE:
            return await super().handle(op, request)
        await self.clock.sleep(self.poll_s)
        now = self.state.fence
        if now.data.high_watermark is None or now.data.high_watermark != _op_id(request):
            return await super().handle(op, request)  # not overtaken: decided correctly
        _, reply, _ = decide(arrived, op, request)
        if getattr(reply, "status", None) == "ready":
            self._state = replace(self.state, fence=Value(FenceState.PREPARING, now.data))
        return reply


class StalePrepareClobbersNextHost(ParticipantHost):
    """BROKEN (M2, a race): a not-ready prepare long-polls `poll_s`, then asks again if its
    id is still active; if it is not (a resume overtook it, and the next checkpoint's
    prepare came in), it ends not ready and clears the fence's active id, the next's."""

    poll_s: float = 0.2

    async def handle(self, op: ParticipantOp | str, request: Any = None) -> Message:
        """Answer `op`; a stale not-ready prepare clears the next one's active id (the bug)."""
        reply = await super().handle(op, request)
        if _name(op) != "prepare" or getattr(reply, "status", None) != "not_ready":
            return reply
        op_id = _op_id(request)
        await self.clock.sleep(self.poll_s)
        fence = self.state.fence
        if fence.data.active == op_id:
            return await super().handle(op, request)
        self._state = replace(
            self.state, fence=Value(fence.state, replace(fence.data, active=None))
        )
        return reply


class ReleasedPrepareActsOnMovedFenceHost(ParticipantHost):
    """BROKEN (M2, a race): a prepare that is not ready long-polls until an execution event
    (a boundary, a finish, a retire, an ACK) releases it, or its deadline passes (at most
    `poll_s`: then it answers not ready, harmlessly). Released, it asks again, but on the
    fence it arrived on (`preparing` its own id), whatever the fence did meanwhile: overtaken
    by a resume of its id, it wedges the fence in `preparing` (or `prepared`) under that
    retired id; overtaken by the next checkpoint's prepare, it clobbers that one's active id.
    No earlier race shape of the kit sends an event after the overtaking request, so the
    stale prepare always timed out harmlessly."""

    poll_s: float = 0.2
    _RELEASING = frozenset({"boundary", "finish", "retire", "ack"})

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.waiting: list[ClockEvent] = []

    async def handle(self, op: ParticipantOp | str, request: Any = None) -> Message:
        """Answer `op`; a released long-polling prepare acts on the fence it arrived on."""
        reply = await super().handle(op, request)
        if _name(op) in self._RELEASING:
            for released in self.waiting:
                released.set()
            self.waiting.clear()
            return reply
        if _name(op) != "prepare" or getattr(reply, "status", None) != "not_ready":
            return reply
        arrived = self.state.fence  # preparing, its own id active
        released = self.clock.event()
        self.waiting.append(released)
        wait_s = min(self.poll_s, ControlRequest.model_validate(request).deadline_at - time.time())
        with anyio.move_on_after(max(wait_s, 0.0)):
            await released.wait()
        if released not in self.waiting and _op_id(request) is not None:
            self._state, reply, _ = decide(replace(self.state, fence=arrived), op, request)
        else:
            self.waiting.remove(released)
        return reply


class ReplyBeforeFsyncHost(ParticipantHost):
    """BROKEN (§6): a journal write is queued and flushed when the next operation that can
    change state arrives (reads do not flush), after the reply that reported it went out; a
    crash in between loses it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.unflushed: Journal | None = None

    async def handle(self, op: ParticipantOp | str, request: Any = None) -> Message:
        """Flush the previous request's journal write, then answer `op` (the bug: late)."""
        if self.unflushed is not None and _name(op) not in ("status", "capabilities"):
            await self.journal.write(self.unflushed)
            self.unflushed = None
        return await super().handle(op, request)

    async def _persist(self, effects: tuple[ParticipantEffect, ...]) -> None:
        for effect in effects:
            if isinstance(effect, JournalWrite):
                self.unflushed = effect.journal


class FlakyCommitHost(ParticipantHost):
    """CONFORMING: the first commit of each id fails and the fence returns to `prepared`
    (a failure records nothing, so the retry runs again and succeeds)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.failed_once: set[str] = set()

    async def handle(self, op: ParticipantOp | str, request: Any = None) -> Message:
        """Answer `op`; the first legal commit of an id fails without changing state."""
        fence = self.state.fence
        if _name(op) != "commit" or fence.state is not FenceState.PREPARED:
            return await super().handle(op, request)
        commit = ControlRequest.model_validate(request)
        if commit.op_id != fence.data.active or str(commit.op_id) in self.failed_once:
            return await super().handle(op, request)
        self.failed_once.add(str(commit.op_id))
        reason = "injected: transient storage error"
        return CommitReply(**stamp(self.state), op_id=commit.op_id, status="failed", reason=reason)


class ReplayAfterPhaseMovedHost(ParticipantHost):
    """BROKEN (M2): a recorded prepare or commit is replayed only while the fence is still
    where that operation left it; once a later phase ran, the replay is refused."""

    _LEFT_IN = {"prepare": FenceState.PREPARED, "commit": FenceState.COMMITTED_PAUSED}

    async def handle(self, op: ParticipantOp | str, request: Any = None) -> Message:
        """Answer `op`; a replay after the phase moved on is refused (the bug)."""
        name = _name(op)
        fence = self.state.fence
        if name not in self._LEFT_IN or fence.state is self._LEFT_IN[name]:
            return await super().handle(op, request)
        op_id = _op_id(request)
        if op_id is None or fence.data.result(op_id, FenceOp(name)) is None:
            return await super().handle(op, request)
        return _invalid_phase(self.state, f"{name} is not legal in {fence.state.value}")


class WholeBatchAckHost(ParticipantHost):
    """BROKEN (M3): an ACK batch naming a running execution is refused as a whole."""

    async def handle(self, op: ParticipantOp | str, request: Any = None) -> Message:
        """Answer `op`; an ACK quoting an execution without a result refuses all (the bug)."""
        role = self.state.role
        if _name(op) != "ack" or not isinstance(role, AgentRole):
            return await super().handle(op, request)
        for receipt in AckRequest.model_validate(request).receipts:
            execution = role.find((receipt.rollout_id, receipt.attempt))
            if execution is not None and execution.state is not ExecState.COMPLETED:
                message = f"{receipt.rollout_id}#{receipt.attempt} is {execution.state.value}"
                return _invalid_phase(self.state, message)
        return await super().handle(op, request)


class RefusalOrderHost(ParticipantHost):
    """CONFORMING: where several refusals of `begin` apply, `admission_closed` is answered
    only if no other one does (the reference answers it first); `reordered` counts them."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.reordered = 0

    async def handle(self, op: ParticipantOp | str, request: Any = None) -> Message:
        """Answer `op`; a begin with admission closed answers another applicable refusal."""
        reply = await super().handle(op, request)
        if _name(op) != "begin" or getattr(reply, "code", None) != "admission_closed":
            return reply
        others = sorted(begin_refusals(self.state, request) - {"admission_closed"})
        if not others:
            return reply
        self.reordered += 1
        return reply.model_copy(update={"code": others[0], "message": f"begin: {others[0]}"})


BROKEN_HOSTS: dict[str, type[ParticipantHost]] = {
    "stale-prepare": StalePrepareHost,
    "release-on-retire": ReleaseOnRetireHost,
    "stuck-commit": StuckCommitHost,
    "busy-duplicate": BusyDuplicateHost,
    "replay-after-phase-moved": ReplayAfterPhaseMovedHost,
    "whole-batch-ack": WholeBatchAckHost,
    "resume-overtakes-prepare-stuck": StuckAfterOvertakenPrepareHost,
    "stale-prepare-clobbers-next": StalePrepareClobbersNextHost,
    "reply-before-fsync": ReplyBeforeFsyncHost,
    "released-prepare-acts-on-moved-fence": ReleasedPrepareActsOnMovedFenceHost,
}
"""The deliberately broken hosts by name. The role each needs: any fenced role for
`stale-prepare`, `stuck-commit`, `busy-duplicate`, `replay-after-phase-moved`,
`resume-overtakes-prepare-stuck` and `reply-before-fsync` (which needs a restart hook);
agent for `release-on-retire`, `whole-batch-ack`, `stale-prepare-clobbers-next` and
`released-prepare-acts-on-moved-fence` (whose prepare must be not ready to long-poll)."""
