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
- `FlakyCommitHost` is NOT broken: it fails the first commit of every id and returns to
  `prepared`, as M2 allows; the kit accepts it (its `allowed_failures` counts them).

The bent state is set on the host directly (the host's journal is not rewritten): these
servers exist to be caught, not to survive a crash.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from quiesce.adapters import ParticipantHost, dedupe_key
from quiesce.fsm import Value
from quiesce.protocol.machines import ExecState, FenceState
from quiesce.protocol.participant import AgentRole, ParticipantOp, stamp
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

__all__ = [
    "BROKEN_HOSTS",
    "BusyDuplicateHost",
    "FlakyCommitHost",
    "ReleaseOnRetireHost",
    "StalePrepareHost",
    "StuckCommitHost",
]


def _name(op: ParticipantOp | str) -> str:
    return op.value if isinstance(op, ParticipantOp) else str(op)


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
            fence = self.state.fence.data
            return ErrorReply(
                **stamp(self.state),
                code="invalid_phase",
                message=f"{key[0]}({key[1]}) is already in progress",
                high_watermark=fence.high_watermark,
            )
        self.busy.add(key)
        try:
            await self.clock.sleep(self.work_s)
            return await super().handle(op, request)
        finally:
            self.busy.discard(key)


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


BROKEN_HOSTS: dict[str, type[ParticipantHost]] = {
    "stale-prepare": StalePrepareHost,
    "release-on-retire": ReleaseOnRetireHost,
    "stuck-commit": StuckCommitHost,
    "busy-duplicate": BusyDuplicateHost,
}
"""The deliberately broken hosts by name (the role each needs: any fenced role for
`stale-prepare`, `stuck-commit` and `busy-duplicate`, agent for `release-on-retire`)."""
