"""One design-model step's scratch value, and the participants' side of it.

What lives here: `ParticipantSide`, a `DesignState` unpacked into fields a move may change
and packed back into the next state (reusing every part the move left alone, dropping data
nothing can read again), with the three servers' moves on it. A request is served exactly
as `quiesce.protocol.participant` composes it, over compact values: the fence (M2) decides
(refusal, replay, retire, or start), the role does its work on a start (the policy's
admission M4, the agent's executions M3, the resources M5) and the outcome steps the fence
again. The agent's own moves too: begin, a turn, a finish, an ACK, a retire, a crash that
keeps only the journal (§6). What it does not know: the controller (`_step` reads the
replies).

Replies are tuples the controller reads: `("ready",)`, `("not_ready",)`,
`("committed", digest)`, `("failed",)`, `("resumed",)`, `("restored", digest, held,
continuations)`, `("restore_failed",)`, `("discarded",)`, `("acked", keys)`,
`("refused", code, active id)`, `("error",)` (an outcome the fence did not expect).
"""

from __future__ import annotations

from operator import attrgetter
from typing import Any

from quiesce.models.design._labels import (
    ExecLabel,
    FenceAnswer,
    FenceLabel,
    PolicyLabel,
    ResourcesLabel,
)
from quiesce.models.design._state import (
    AGENT,
    NAMES,
    POLICY,
    RESOURCES,
    Controller,
    DesignParams,
    DesignState,
    Execution,
    Fence,
    Key,
    Participants,
    Snapshot,
    Store,
)
from quiesce.models.design._tables import Steppers
from quiesce.protocol.machines import (
    AgentInput,
    ExecAnswer,
    FenceInput,
    FenceOp,
    PolicyInput,
    ResourcesInput,
)

__all__ = ["ParticipantSide"]

AI, FI, EL = AgentInput, FenceInput, ExecLabel
_LIVE = (EL.RUNNING, EL.PARK_REQUESTED, EL.PARKED, EL.FROZEN)  # can run (and be tombstoned)
_BUSY = (EL.RUNNING, EL.PARK_REQUESTED, EL.COMPLETED)  # the agent is not ready to commit
_SAVED = (EL.PARKED, EL.FROZEN)  # what the agent's commit saves
_DROPPED = (EL.ACKED, EL.TOMBSTONED)  # only the refusal key is left
_AFTER_CRASH = {
    FenceLabel.COMMITTING: FenceLabel.PREPARED,
    FenceLabel.RESTORING: FenceLabel.RESTORE_FAILED_PAUSED,
}
"""A fence's state after its participant restarts, where it differs (§6)."""
_REQUESTS = {
    "prepare": FI.RECV_PREPARE,
    "commit": FI.RECV_COMMIT,
    "resume": FI.RECV_RESUME,
    "restore": FI.RECV_RESTORE,
    "discard": FI.RECV_DISCARD,
}
"""The M2 input a request of each op is."""
_PACK = attrgetter(*Controller._fields)  # the step's fields, in `Controller` order


class ParticipantSide:
    """A state being turned into the next one, and the participants' moves (see the
    module doc)."""

    def __init__(self, params: DesignParams, steppers: Steppers, state: DesignState) -> None:
        self.p = params
        self.t = steppers
        c, parts, store, w = state
        self.load(c)
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

    def load(self, c: Controller) -> None:
        """The controller's fields become `c`'s."""
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

    def result(self) -> DesignState:
        """The state this step reached."""
        if self.stale_delay():
            # Refused as stale wherever it lands: the same as already delivered.
            self.w = self.w._replace(delayed=None)
        w = self.w
        if self.bad:
            w = w._replace(bad=tuple(sorted({*w.bad, *self.bad})))
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
        controller = Controller._make(_PACK(self))
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

    def tries(self, fault: str) -> tuple[str, int]:
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
        return self.t.fence(self.fences[p], _REQUESTS[op], FenceOp(op), op_id, result)

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

    def serve(self, p: int, op: str, op_id: int, extra: Any, fault: str) -> tuple[Any, ...]:
        """Participant `p` handles one request; its reply, as the controller would read it."""
        if op == "ack":
            return self.serve_ack(extra)
        fence_op = FenceOp(op)
        stepped = self.request(p, op, op_id)
        if stepped is None:
            return ("refused", "invalid_phase", 0)
        self.fences[p], effects = stepped
        effect: tuple[Any, ...] = effects[0] if effects else (None,)
        kind = effect[0]
        if kind is FenceAnswer.REFUSE:
            return ("refused", effect[1], effect[2])
        if kind is FenceAnswer.REPLAY:
            return self._replayed(p, op, effect[1])
        if kind is FenceAnswer.RETIRE:
            self.reopen(p)
            return ("resumed",)
        if kind is not FenceAnswer.START:
            return ("error",)
        if op == "prepare":
            self.close(p)
            ready = self.ready(p)
            outcome = FI.PREPARE_READY if ready else FI.PREPARE_NOT_READY
            self._outcome(p, outcome, fence_op, op_id, "ready" if ready else None)
            return ("ready",) if ready else ("not_ready",)
        if op == "commit":
            if not self.ready(p):
                self._outcome(p, FI.COMMIT_FAILED, fence_op, op_id, None)
                return ("failed",)
            digest = self.digest(p, op_id)
            self._outcome(p, FI.COMMIT_DONE, fence_op, op_id, digest)
            self.w = self.w._replace(unresolved=self.w.unresolved | {op_id})
            return ("committed", digest)
        if op == "restore":
            return self.serve_restore(p, op_id, extra, fault)
        self.restored = tuple(c for c in self.restored if c != extra)
        return ("discarded",)

    def _replayed(self, p: int, op: str, result: Any) -> tuple[Any, ...]:
        if op == "prepare":
            return ("ready",)
        if op == "commit":
            return ("committed", result)
        if op == "restore":
            return ("restored", result, self._held(), self.restored)
        return ("resumed",)

    def _outcome(self, p: int, input: FenceInput, op: FenceOp, op_id: int, result: Any) -> None:
        stepped = self.t.fence(self.fences[p], input, op, op_id, result)
        if stepped is not None:
            self.fences[p] = stepped[0]

    def serve_restore(self, p: int, op_id: int, snapshot_id: int, fault: str) -> tuple[Any, ...]:
        """`restore(R, snapshot)` at `p`: close the role, install the artifact, answer the
        digest it computed (or fail on the participant's side)."""
        self.close(p)
        if fault == "restore_failure":
            self._outcome(p, FI.RESTORE_FAILED, FenceOp.RESTORE, op_id, None)
            return ("restore_failed",)
        snapshot = next(s for s in self.published if s.op_id == snapshot_id)
        # Contents are dropped only once no restore can run again (`result`).
        assert snapshot.digests, f"restore of {snapshot_id} after its contents were dropped"
        if p == AGENT:
            # The agent's executions are replaced by the snapshot's continuations: the live
            # ones belong to the interval the restore rolls back (M3 `retire`, "replaced on
            # restore"); a completed result stays until its ACK (listed in the reply).
            for key, (state, _) in list(self.executions.items()):
                if state in _LIVE:
                    self.execution_input(key, AI.RETIRE)
            self.restored = snapshot.digests[AGENT][2]
        elif p == RESOURCES:
            self.resources_input(ResourcesInput.IMPORT)
        digest = snapshot.digests[p] if fault != "wrong_digest" else ("corrupt", NAMES[p])
        self._outcome(p, FI.RESTORE_DONE, FenceOp.RESTORE, op_id, digest)
        return ("restored", digest, self._held(), self.restored)

    def _held(self) -> tuple[Key, ...]:
        """The agent's completed, un-ACKed results (its restore reply lists them)."""
        return tuple(k for k, (st, _) in sorted(self.executions.items()) if st == EL.COMPLETED)

    def digest(self, p: int, op_id: int) -> tuple[Any, ...]:
        """What `p` commits for `op_id`: the agent saves its parked and frozen executions at
        their last boundary; policy and resources name the snapshot only (restart_only and
        a policy save nothing of their own)."""
        saved: tuple[tuple[int, int, int], ...] = ()
        if p == AGENT:
            saved = tuple(
                (s, a, t) for (s, a), (st, t) in sorted(self.executions.items()) if st in _SAVED
            )
        return (NAMES[p], op_id, saved)

    def close(self, p: int) -> None:
        """The fence started a prepare or restore: the role stops admitting work."""
        if p == POLICY:
            stepped = self.t.policy(self.policy, PolicyInput.FENCE_PREPARE, None)
            if stepped is not None:
                self.policy = stepped[0]
        elif p == RESOURCES:
            self.resources_input(ResourcesInput.FENCE_PREPARE)
        else:
            for key in list(self.executions):
                self.execution_input(key, AI.FENCE_PREPARE)

    def reopen(self, p: int) -> None:
        """The fence retired its op: the role admits work again (waiters proceed)."""
        if p == POLICY:
            waiting = self.policy[1]
            stepped = self.t.policy(self.policy, PolicyInput.FENCE_RESUME, None)
            if stepped is None:
                return
            self.policy = stepped[0]
            agent_idle = self.fences[AGENT].state == FenceLabel.IDLE
            for key in waiting:
                if key not in self.policy[1]:
                    self.execution_input(key, AI.POLICY_RESUMED, agent_idle)
        elif p == RESOURCES:
            self.resources_input(ResourcesInput.FENCE_RESUME)
        else:
            for key in list(self.executions):
                self.execution_input(key, AI.FENCE_RESUME)

    def ready(self, p: int) -> bool:
        """May `p` commit now (prepare's answer)?"""
        if p == POLICY:
            return self.policy[0] == PolicyLabel.PAUSED
        if p == RESOURCES:
            return self.resources == ResourcesLabel.FROZEN
        return not any(st in _BUSY for st, _ in self.executions.values())

    def resources_input(self, input: ResourcesInput) -> bool:
        """Fire M5; False if it refused, or held a turn's resource call as a waiter."""
        stepped = self.t.resources(self.resources, input)
        if stepped is None:
            return False
        if input is ResourcesInput.MUTATION_STARTED and "admit_mutation" not in stepped[1]:
            return False  # held as a waiter: the turn's resource call waits
        self.resources = stepped[0]
        return True

    def execution_input(
        self, key: Key, input: AgentInput, arg: Any = None
    ) -> tuple[ExecAnswer, ...]:
        """Fire M3 on the agent's execution `key`; acked or tombstoned ones leave only their
        refusal key. Returns its answers (none if refused or absent)."""
        found = self.executions.get(key)
        if found is None:
            return ()
        stepped = self.t.execution(found[0], key, found[1], input, arg)
        if stepped is None:
            return ()
        state, turn, answers = stepped
        self._executions_changed = True
        if state in _DROPPED:
            del self.executions[key]
            self.retire_key(key, acked=state == EL.ACKED)
        else:
            self.executions[key] = (state, turn)
        return answers

    def retire_key(self, key: Key, acked: bool) -> None:
        """The agent's refusal key for the rollout grows to `key` (it never shrinks)."""
        sibling, attempt = key
        highest, was_acked = self.refusals[sibling]
        if attempt > highest or (attempt == highest and acked and not was_acked):
            self.refusals[sibling] = (attempt, acked)

    def serve_ack(self, keys: tuple[Key, ...]) -> tuple[Any, ...]:
        """The agent releases every exactly-quoted result; acknowledged and unknown
        receipts are both answered (the ledger clears both)."""
        for key in keys:
            self.execution_input(key, AI.RECV_ACK)
        return ("acked", keys)

    def serve_retire(self, key: Key) -> ExecAnswer:
        """`retire(key)` at the agent: `TOMBSTONED`, `COMPLETED_UNACKNOWLEDGED` (only an ACK
        releases a result, S17) or `ALREADY_RETIRED`."""
        if key not in self.executions:
            if key[1] <= self.refusals[key[0]][0]:
                return ExecAnswer.ALREADY_RETIRED
            stepped = self.t.execution(EL.NEW, key, 0, AI.RETIRE, None)  # retire overtook begin
            if stepped is not None and stepped[0] == EL.TOMBSTONED:
                self.retire_key(key, acked=False)
            return ExecAnswer.TOMBSTONED
        if ExecAnswer.COMPLETED_UNACKNOWLEDGED in self.execution_input(key, AI.RETIRE):
            return ExecAnswer.COMPLETED_UNACKNOWLEDGED
        return ExecAnswer.TOMBSTONED

    def begin(self, key: Key, resume_turn: int) -> None:
        """Dispatch `key` to the agent (M3 `begin`); a refused begin stays dispatched in
        the ledger and its deadline recovers it."""
        sibling = key[0]
        if key in self.executions:
            return  # duplicate_execution
        admission = (
            self.fences[AGENT].state == FenceLabel.IDLE,
            key[1] <= self.refusals[sibling][0],
        )
        stepped = self.t.execution(EL.NEW, key, resume_turn, AI.BEGIN, admission)
        if stepped is None or ExecAnswer.STARTED not in stepped[2]:
            return
        if resume_turn:
            claimed = next(
                (c for c in self.restored if c[0] == sibling and c[2] == resume_turn), None
            )
            if claimed is None:
                return  # unknown_execution: nothing to claim
            self.restored = tuple(c for c in self.restored if c != claimed)
            self.retire_key((sibling, claimed[1]), acked=False)
            if self.p.recovery_mode == "restart_only":
                self.flag("I8", f"s{sibling}#{key[1]} resumed against lost restart_only state")
        self.executions[key] = (stepped[0], stepped[1])
        self._executions_changed = True
        self.policy_call(key)

    def policy_call(self, key: Key) -> None:
        """`key` starts a turn with a policy call; a paused policy holds it (frozen)."""
        stepped = self.t.policy(self.policy, PolicyInput.CALL_STARTED, key)
        if stepped is None:
            return
        self.policy, names = stepped
        if "hold_as_waiter" in names:
            self.execution_input(key, AI.POLICY_CALL_HELD)

    def turn(self, key: Key) -> bool:
        """`key` ends a turn (its resource call admitted); False if the turn must wait."""
        if not self.resources_input(ResourcesInput.MUTATION_STARTED):
            return False
        _, turn = self.executions[key]
        self.execution_input(key, AI.TURN_BOUNDARY, turn + 1)
        if self.executions.get(key, ("",))[0] == EL.RUNNING:
            self.policy_call(key)
        return True

    def run_finished(self, key: Key) -> bool:
        """`key`'s last turn ends (its resource call admitted) and `/run` returns: the agent
        holds the result until its ACK (I1 watches it from now). False if the turn waits."""
        if not self.resources_input(ResourcesInput.MUTATION_STARTED):
            return False
        if ExecAnswer.RESULT_HELD not in self.execution_input(key, AI.RUN_FINISHED):
            return False
        self.w = self.w._replace(unaccounted=self.w.unaccounted | {key})
        return True

    def crash_participant(self, p: int) -> None:
        """`p` restarts with its journal (§6): fence, completed results, refusal keys,
        restored continuations; running executions die; the role reopens unless fenced."""
        fence = self.fences[p]
        self.fences[p] = fence._replace(state=_AFTER_CRASH.get(fence.state, fence.state))
        fenced = self.fences[p].state != FenceLabel.IDLE
        if p == POLICY:
            # A fenced policy comes back paused; the calls it held are made again by their
            # agents, so they wait again (an unfenced policy holds none).
            waiters = self.policy[1] if fenced else ()
            self.policy = (PolicyLabel.ACCEPTING, ())
            if fenced:
                stepped = self.t.policy(self.policy, PolicyInput.FENCE_PREPARE, None)
                if stepped is not None:
                    self.policy = (stepped[0][0], waiters)
        elif p == RESOURCES:
            self.resources = ResourcesLabel.ACCEPTING
            if fenced:
                self.resources_input(ResourcesInput.FENCE_PREPARE)
        else:
            self.executions = {k: v for k, v in self.executions.items() if v[0] == EL.COMPLETED}
            self._executions_changed = True

    def serve_status(self) -> tuple[tuple[Key, ...], tuple[Key, ...]] | None:
        """`status` at the agent (M2: answered in any state): the keys it still runs, and
        the completed results it holds; None if the fence refuses the probe."""
        stepped = self.t.fence(self.fences[AGENT], FI.RECV_STATUS, FenceOp.STATUS, 0, None)
        if stepped is None:
            return None
        items = sorted(self.executions.items())
        live = tuple(key for key, (state, _) in items if state in _LIVE)
        held = tuple(key for key, (state, _) in items if state == EL.COMPLETED)
        return live, held
