"""The scratch value of one design-model step: a state unpacked into mutable fields.

What lives here: `Scratch`, the base of `Step` (`_design_step`): it unpacks a
`DesignState` into fields a move may change, packs them back into the next state (reusing
every part the move left alone, dropping data nothing can read again), and holds the few
queries every side of a step needs (a fresh id, the fence's answer to a request, the
snapshot a restore installs, a fault's cost).
What it does not know: any move (`_design_participants`, `_design_ledger`, `_design_step`).
"""

from __future__ import annotations

from typing import Any

from quiesce.models.design._labels import ExecLabel, FenceAnswer
from quiesce.models.design._state import (
    Controller,
    DesignParams,
    DesignState,
    Execution,
    Fence,
    Participants,
    Snapshot,
    Store,
)
from quiesce.models.design._tables import Steppers
from quiesce.protocol.machines import FenceInput, FenceOp

__all__ = ["LIVE", "REQUESTS", "Scratch"]

LIVE = (ExecLabel.RUNNING, ExecLabel.PARK_REQUESTED, ExecLabel.PARKED, ExecLabel.FROZEN)
"""Execution states that can still run (and be tombstoned)."""

REQUESTS = {
    "prepare": FenceInput.RECV_PREPARE,
    "commit": FenceInput.RECV_COMMIT,
    "resume": FenceInput.RECV_RESUME,
    "restore": FenceInput.RECV_RESTORE,
    "discard": FenceInput.RECV_DISCARD,
}
"""The M2 input a request of each op is."""


class Scratch:
    """A state being turned into the next one (see the module doc)."""

    def __init__(self, params: DesignParams, steppers: Steppers, state: DesignState) -> None:
        self.p = params
        self.t = steppers
        c, parts, store, w = state
        (
            self.m1,
            self.walk,
            self.deadline,
            self.retry,
            self.attempted,
            self.conflicts,
            self.staged,
            self.gate,
            self.registry,
            self.m9,
            self.rs,
            self.ledger,
            self.outbox,
            self.retires,
            self.stale,
            self.stopped,
            self.continuations,
        ) = c
        self._parts = parts  # as found: unchanged parts are reused
        self._executions_changed = False
        self.fences = list(parts.fences)
        self.policy = parts.policy
        self.resources = parts.resources
        self.executions = {(e.sibling, e.attempt): (e.state, e.turn) for e in parts.executions}
        self.refusals = list(parts.refusals)
        self.restored = parts.restored
        self.intent, self.published = store
        self.w = w
        self.bad: list[tuple[str, str]] = []

    def result(self) -> DesignState:
        """The state this step reached."""
        if self.stale_delay():
            # Refused as stale wherever it lands: the same as already delivered.
            self.w = self.w._replace(delayed=None)
        w = self.w
        if self.bad:
            w = w._replace(bad=tuple(sorted({*w.bad, *self.bad})))
        controller = Controller(
            self.m1,
            self.walk,
            self.deadline,
            self.retry,
            self.attempted,
            self.conflicts,
            self.staged,
            self.gate,
            self.registry,
            self.m9,
            self.rs,
            self.ledger,
            self.outbox,
            self.retires,
            self.stale,
            self.stopped,
            self.continuations,
        )
        parts, before = self._parts, self._parts
        executions, refusals = before.executions, tuple(self.refusals)
        if self._executions_changed:
            executions = tuple(Execution(*k, *v) for k, v in sorted(self.executions.items()))
        if refusals == before.refusals:
            refusals = before.refusals
        fences = (self.fences[0], self.fences[1], self.fences[2])
        if (
            executions is not before.executions
            or refusals is not before.refusals
            or fences != before.fences
            or self.policy is not before.policy
            or self.resources != before.resources
            or self.restored is not before.restored
        ):
            parts = Participants(
                fences, self.policy, self.resources, executions, refusals, self.restored
            )
        published = self.published
        if not w.faults and self.m9 is None and published and published[-1].cut is not None:
            # No crash is left, so nothing restores a snapshot or reads the intent again (the
            # older snapshots lost their contents when the last fault was spent).
            published = tuple(Snapshot(s.op_id, 0, (), None) for s in published)
        return DesignState(controller, parts, Store(self.intent, published), w)

    def flag(self, prop: str, why: str) -> None:
        """Record a violation of `prop` that only this transition shows."""
        self.bad.append((prop, why))

    def spend_fault(self, count: int = 1) -> None:
        """Charge `count` faults to the budget."""
        if count:
            self.w = self.w._replace(faults=self.w.faults - count)

    def cost(self, fault: str) -> int:
        """How many faults `fault` spends: every try of a call failing costs one each."""
        if not fault:
            return 0
        return self.p.call_retries + 1 if fault.endswith("*") else 1

    def _tries(self, fault: str) -> tuple[str, int]:
        """A background fault's kind and how many tries reach the agent."""
        kind = fault.rstrip("*")
        if kind != "reply_lost":
            return kind, 1
        return kind, self.p.call_retries + 1 if fault.endswith("*") else 2

    def mint(self) -> int:
        """A fresh id: one more than any id this step still mentions (ids are ranks)."""
        found = [self.m1.attempt, self.rs, self.deadline, self.retry, self.intent]
        found += [other for _, other in self.conflicts]
        if self.m9 is not None:
            found += (self.m9[1], *self.m9[3])
        for fence in self.fences:
            found += (fence.active, fence.hwm, *(r[0] for r in fence.recorded))
        found += (s.op_id for s in self.published)
        w = self.w
        if w.delayed is not None:
            found += (w.delayed[2], w.delayed[3])
        found += w.unresolved
        return max(found) + 1

    def request(self, p: int, op: str, op_id: int) -> tuple[Fence, tuple[Any, ...]] | None:
        """`p`'s fence receiving the request `op(op_id)` (M2), or None if refused outright."""
        result = "retired" if op == "resume" else None
        return self.t.fence(self.fences[p], REQUESTS[op], FenceOp(op), op_id, result)

    def stale_delay(self) -> bool:
        """Would the network's delayed request be refused as stale, now and forever (the
        watermark only grows)? Then where it arrives no longer matters."""
        if self.w.delayed is None:
            return False
        who, op, op_id, _ = self.w.delayed
        stepped = self.request(who, op, op_id)
        return stepped is not None and any(
            e[0] is FenceAnswer.REFUSE and e[1] == "stale_checkpoint" for e in stepped[1]
        )

    def snapshot(self) -> Snapshot:
        """The snapshot the running restore installs."""
        assert self.m9 is not None
        return next(s for s in self.published if s.op_id == self.m9[1])
