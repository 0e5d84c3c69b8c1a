"""The agent role of a participant: its executions (M3), refusal keys and saved turns.

What lives here: every execution this agent still owes something for (live ones and
completed-but-unACKed ones, each an `agent_execution` value), the **refusal keys** (per
rollout, the highest attempt that is acked or tombstoned, with its receipt if it was
acked, so a repeated ACK batch is answered again), and the continuations installed by a
restore and not yet claimed. What it does not know: the fence (the participant passes
`fence_idle`), the wire (it returns reply fields; refusals are raised as typed `Refusal`s
before anything changes), or time. Its `agent_execution` table comes from the
`ParticipantRules` every stepping method takes.

An execution leaves the map as soon as it is acked or tombstoned: its refusal key is all
that remains, so memory stays bounded by the live work plus one key per rollout.

Both collections are tuples kept sorted by key, so the role stays one canonical, hashable
value; lookups bisect (O(log n)) and an update replaces one slot of the tuple (one C-level
copy, no re-sort), and a fence event rebuilds the tuple in a single pass.
"""

from __future__ import annotations

import hashlib
import json
from bisect import bisect_left
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any

from quiesce.fsm import Value
from quiesce.protocol._errors import (
    AdmissionClosed,
    DuplicateExecution,
    Refusal,
    StaleAttempt,
    UnknownExecution,
)
from quiesce.protocol._messages import Continuation, Receipt
from quiesce.protocol.machines import (
    Admission,
    AgentInput,
    Completion,
    ExecAnswer,
    ExecState,
    ExecutionData,
)
from quiesce.protocol.participant._rules import ParticipantRules

__all__ = ["AgentRole", "Readiness", "SavedTurn", "receipt_for"]

Key = tuple[str, int]
Execution = Value[ExecState, ExecutionData]
RefusalKey = tuple[str, int, str]  # (rollout_id, highest acked/tombstoned attempt, receipt)


@dataclass(frozen=True, slots=True)
class Readiness:
    """Whether a role may commit now, and if not, what blocks it (prepare's answer)."""

    ready: bool
    blockers: tuple[str, ...] = ()
    parked: int = 0
    frozen: int = 0
    completed_unacknowledged: int = 0


@dataclass(frozen=True, slots=True)
class SavedTurn:
    """A continuation: execution `(rollout_id, attempt)` saved at the boundary of `turn`."""

    rollout_id: str
    attempt: int
    group_id: str
    turn: int
    turns: int
    restart_only_dependency: bool = False

    def to_wire(self) -> Continuation:
        """The wire form listed in commit and restore replies."""
        return Continuation(
            rollout_id=self.rollout_id,
            attempt=self.attempt,
            group_id=self.group_id,
            turn=self.turn,
            turns=max(self.turns, 1),
            restart_only_dependency=self.restart_only_dependency,
        )

    @classmethod
    def from_wire(cls, c: Continuation) -> SavedTurn:
        """The saved turn a wire `Continuation` describes."""
        return cls(c.rollout_id, c.attempt, c.group_id, c.turn, c.turns, c.restart_only_dependency)


def receipt_for(rollout_id: str, attempt: int, result_json: str) -> str:
    """The exact receipt of a completed execution: deterministic in key and result.

    >>> receipt_for("r1", 0, "{}")  # doctest: +SKIP
    'r1#0:44136fa355b3678a'
    """
    digest = hashlib.sha256(f"{rollout_id}#{attempt}\n{result_json}".encode()).hexdigest()
    return f"{rollout_id}#{attempt}:{digest[:16]}"


def canonical_json(value: Any) -> str:
    """One byte-exact JSON text per value: sorted keys, no spaces."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


# The refusal each refusing answer of `begin` raises (its code is the answer's value).
_REFUSALS: dict[ExecAnswer, Callable[[str, int], Refusal]] = {
    ExecAnswer.ADMISSION_CLOSED: AdmissionClosed,
    ExecAnswer.STALE_ATTEMPT: StaleAttempt,
    ExecAnswer.DUPLICATE_EXECUTION: DuplicateExecution,
}


def _execution_key(execution: Execution) -> Key:
    return execution.data.key


def _refusal_rollout(refusal: RefusalKey) -> str:
    return refusal[0]


_GONE = (ExecState.ACKED, ExecState.TOMBSTONED)  # states that leave only a refusal key


@dataclass(frozen=True, slots=True)
class AgentRole:
    """The agent's part of a participant state (frozen; sorted tuples, so it hashes)."""

    executions: tuple[Execution, ...] = ()
    refusal_keys: tuple[RefusalKey, ...] = ()
    restored: tuple[SavedTurn, ...] = ()

    # ------------------------------------------------------------------ lookups

    def find(self, key: Key) -> Execution | None:
        """The execution `(rollout_id, attempt)`, if this agent still holds it."""
        executions = self.executions
        index = bisect_left(executions, key, key=_execution_key)
        if index < len(executions) and executions[index].data.key == key:
            return executions[index]
        return None

    def highest_retired(self, rollout_id: str) -> int:
        """The rollout's refusal key: highest acked or tombstoned attempt (-1: none)."""
        keys = self.refusal_keys
        index = bisect_left(keys, rollout_id, key=_refusal_rollout)
        if index < len(keys) and keys[index][0] == rollout_id:
            return keys[index][1]
        return -1

    def completed(self) -> tuple[Execution, ...]:
        """Completed executions whose result is not yet ACKed."""
        return tuple(e for e in self.executions if e.state is ExecState.COMPLETED)

    def durable(self) -> tuple[Any, ...]:
        """What the journal keeps (§6): completed results, refusal keys, restored turns."""
        return (tuple(e.data for e in self.completed()), self.refusal_keys, self.restored)

    # ------------------------------------------------------------------ internals

    def _with(self, execution: Execution) -> AgentRole:
        """Store `execution`; an acked or tombstoned one leaves only its refusal key."""
        key = execution.data.key
        executions = self.executions
        index = bisect_left(executions, key, key=_execution_key)
        end = index + 1 if index < len(executions) and executions[index].data.key == key else index
        if execution.state in _GONE:
            role = replace(self, executions=executions[:index] + executions[end:])
            return role._retire(execution)
        return replace(self, executions=(*executions[:index], execution, *executions[end:]))

    def _retire(self, execution: Execution) -> AgentRole:
        receipt = execution.data.receipt if execution.state is ExecState.ACKED else ""
        return self._retire_key(execution.data.key, receipt)

    def _retire_key(self, key: Key, receipt: str) -> AgentRole:
        rollout_id, attempt = key
        keys = self.refusal_keys
        # One key per rollout, so the tuple sorted by rollout id is sorted as a whole.
        index = bisect_left(keys, rollout_id, key=_refusal_rollout)
        present = index < len(keys) and keys[index][0] == rollout_id
        highest = keys[index][1] if present else -1
        if attempt < highest:
            return self  # refusal keys only grow
        if attempt == highest and not receipt:
            return self
        end = index + 1 if present else index
        return replace(
            self, refusal_keys=(*keys[:index], (rollout_id, attempt, receipt), *keys[end:])
        )

    def _each(
        self, rules: ParticipantRules, input: AgentInput, arg: Any = None
    ) -> tuple[AgentRole, list[Key]]:
        """Fire `input` on every execution that maps it; report the keys that moved."""
        # One pass: keys do not change, so the kept executions stay in key order.
        machine = rules.agent
        kept: list[Execution] = []
        gone: list[Execution] = []
        moved: list[Key] = []
        for execution in self.executions:
            if machine.enabled(execution, input, arg):
                after, effects = machine.step(execution, input, arg)
                if after.state is not execution.state or effects:
                    moved.append(execution.data.key)
                (gone if after.state in _GONE else kept).append(after)
            else:
                kept.append(execution)
        role = replace(self, executions=tuple(kept))
        for execution in gone:
            role = role._retire(execution)
        return role, moved

    def _live(self, key: Key) -> Execution:
        execution = self.find(key)
        if execution is None:
            raise UnknownExecution(*key)
        return execution

    # ------------------------------------------------------------------ M3 events

    def begin(
        self,
        rules: ParticipantRules,
        key: Key,
        group_id: str,
        turns: int,
        resume_from_turn: int,
        *,
        fence_idle: bool,
    ) -> AgentRole:
        """Start execution `key`, or raise its refusal (`admission_closed`, `stale_attempt`,
        `duplicate_execution`; `unknown_execution` for a continuation nobody saved).

        `resume_from_turn > 0` claims the restored continuation of attempt `key[1] - 1`
        (claimed once: it leaves `restored`, and that attempt is tombstoned)."""
        existing = self.find(key)
        execution = existing or rules.agent.start(
            ExecutionData(key[0], key[1], group_id, turns, min(resume_from_turn, turns))
        )
        retired = key[1] <= self.highest_retired(key[0])
        admission = Admission(fence_idle, retired)
        after, answers = rules.agent.step(execution, AgentInput.BEGIN, admission)
        for answer in answers:
            refusal = _REFUSALS.get(answer)
            if refusal is not None:
                raise refusal(*key)
        role = self
        if resume_from_turn > 0:
            previous = (key[0], key[1] - 1)
            claimed = [t for t in self.restored if (t.rollout_id, t.attempt) == previous]
            if not claimed or claimed[0].turn != resume_from_turn:
                raise UnknownExecution(*previous)
            role = replace(self, restored=tuple(t for t in self.restored if t != claimed[0]))
            role = role._retire_key(previous, "")
            after = replace(
                after,
                data=replace(
                    after.data, restart_only_dependency=claimed[0].restart_only_dependency
                ),
            )
        return role._with(after)

    def boundary(
        self, rules: ParticipantRules, key: Key, turn: int, restart_only_dependency: bool
    ) -> Execution:
        """Execution `key` ended `turn`; returns it as stored (a retired key: tombstoned)."""
        execution = self._find_or_tombstone(key)
        if restart_only_dependency and execution.state is not ExecState.TOMBSTONED:
            execution = replace(
                execution, data=replace(execution.data, restart_only_dependency=True)
            )
        after, _ = rules.agent.step(execution, AgentInput.TURN_BOUNDARY, turn)
        return after

    def finish(self, rules: ParticipantRules, key: Key, result: dict[str, Any]) -> Execution:
        """Execution `key`'s `/run` returned; a tombstoned one drops the result."""
        execution = self._find_or_tombstone(key)
        result_json = canonical_json(result)
        done = Completion(receipt_for(key[0], key[1], result_json), result_json)
        after, _ = rules.agent.step(execution, AgentInput.RUN_FINISHED, done)
        return after

    def _find_or_tombstone(self, key: Key) -> Execution:
        execution = self.find(key)
        if execution is not None:
            return execution
        if key[1] <= self.highest_retired(key[0]):
            # A late event of a retired attempt: answered as tombstoned, then dropped.
            return Value(ExecState.TOMBSTONED, ExecutionData(*key))
        raise UnknownExecution(*key)

    def store(self, execution: Execution) -> AgentRole:
        """Put back an execution returned by `boundary`/`finish`/`policy_call_*`."""
        if execution.state is ExecState.TOMBSTONED and self.find(execution.data.key) is None:
            return self
        return self._with(execution)

    def policy_call_held(self, rules: ParticipantRules, key: Key) -> Execution:
        """The paused policy holds `key`'s call as a waiter: it freezes at its boundary."""
        execution = self._find_or_tombstone(key)
        return rules.agent.step(execution, AgentInput.POLICY_CALL_HELD)[0]

    def policy_call_resumed(
        self, rules: ParticipantRules, key: Key, *, fence_idle: bool
    ) -> Execution:
        """`key`'s held call proceeds (it parks at its next boundary if the fence is closed)."""
        execution = self._find_or_tombstone(key)
        after, _ = rules.agent.step(execution, AgentInput.POLICY_RESUMED, fence_idle)
        return after

    def ack(
        self, rules: ParticipantRules, receipts: Iterable[Receipt]
    ) -> tuple[AgentRole, list[Receipt], list[Receipt]]:
        """Release every exactly-quoted result: `(role, acknowledged, unknown)`. Idempotent:
        the receipt of a rollout's newest acked attempt is acknowledged again. A receipt
        that releases nothing (wrong text, no such execution, one still running) is listed
        in `unknown`; it never refuses the batch."""
        role = self
        acknowledged: list[Receipt] = []
        unknown: list[Receipt] = []
        for receipt in receipts:
            key = (receipt.rollout_id, receipt.attempt)
            execution = role.find(key)
            if execution is None:
                known = (receipt.rollout_id, receipt.attempt, receipt.receipt)
                (acknowledged if known in role.refusal_keys else unknown).append(receipt)
                continue
            if not rules.agent.enabled(execution, AgentInput.RECV_ACK, receipt.receipt):
                # A receipt naming an execution that has no result yet (running, parked):
                # docs/wire.md lists it in `unknown` and applies the rest of the batch.
                unknown.append(receipt)
                continue
            after, answers = rules.agent.step(execution, AgentInput.RECV_ACK, receipt.receipt)
            released = ExecAnswer.UNKNOWN_RECEIPT not in answers
            (acknowledged if released else unknown).append(receipt)
            role = role._with(after)
        return role, acknowledged, unknown

    def retire(
        self, rules: ParticipantRules, key: Key
    ) -> tuple[AgentRole, ExecAnswer, Receipt | None]:
        """Retire `key`: `(role, outcome, receipt)`; outcome is `TOMBSTONED`,
        `COMPLETED_UNACKNOWLEDGED` (only an ACK releases a result) or `ALREADY_RETIRED`
        (its value is the wire's `RetireReply.outcome`)."""
        execution = self.find(key)
        if execution is None:
            if key[1] <= self.highest_retired(key[0]):
                return self, ExecAnswer.ALREADY_RETIRED, None
            execution = rules.agent.start(ExecutionData(*key))  # retire overtook begin
        after, answers = rules.agent.step(execution, AgentInput.RETIRE)
        if ExecAnswer.COMPLETED_UNACKNOWLEDGED in answers:
            data = execution.data
            receipt = Receipt(rollout_id=key[0], attempt=key[1], receipt=data.receipt)
            return self, ExecAnswer.COMPLETED_UNACKNOWLEDGED, receipt
        return self._with(after), ExecAnswer.TOMBSTONED, None

    # ------------------------------------------------------------------ fence-driven

    def close(self, rules: ParticipantRules) -> AgentRole:
        """The fence started a prepare or restore: every running execution parks."""
        return self._each(rules, AgentInput.FENCE_PREPARE)[0]

    def reopen(self, rules: ParticipantRules) -> tuple[AgentRole, list[Key]]:
        """The fence retired its op: parked executions run again (their keys are woken)."""
        return self._each(rules, AgentInput.FENCE_RESUME)

    def readiness(self) -> Readiness:
        """Ready iff nothing is running or park_requested and nothing completed is unACKed."""
        blockers = [
            f"{e.state.value}:{e.data.rollout_id}#{e.data.attempt}"
            for e in self.executions
            if e.state in (ExecState.RUNNING, ExecState.PARK_REQUESTED)
        ]
        completed = self.completed()
        blockers += [
            f"completed_unacknowledged:{e.data.rollout_id}#{e.data.attempt}" for e in completed
        ]
        states = [e.state for e in self.executions]
        return Readiness(
            not blockers,
            tuple(blockers),
            states.count(ExecState.PARKED),
            states.count(ExecState.FROZEN),
            len(completed),
        )

    def continuations(self) -> tuple[SavedTurn, ...]:
        """Parked and frozen executions, each saved at its last durable boundary."""
        return tuple(
            SavedTurn(
                e.data.rollout_id,
                e.data.attempt,
                e.data.group_id,
                e.data.turn,
                e.data.turns,
                e.data.restart_only_dependency,
            )
            for e in self.executions
            if e.state in (ExecState.PARKED, ExecState.FROZEN)
        )

    def export(self) -> dict[str, Any]:
        """The artifact payload of a commit: the continuations."""
        return {"continuations": [t.to_wire().model_dump() for t in self.continuations()]}

    def install(self, rules: ParticipantRules, payload: dict[str, Any] | None) -> AgentRole:
        """Install a verified artifact: its continuations wait to be claimed (or discarded)."""
        if payload is None:
            raise ValueError("an agent artifact is never empty")
        turns = tuple(
            SavedTurn.from_wire(Continuation.model_validate(c)) for c in payload["continuations"]
        )
        return replace(self.close(rules), restored=turns)

    def discard(self, key: Key) -> AgentRole:
        """Drop the restored continuation of `key` (idempotent: an absent one is a no-op)."""
        kept = tuple(t for t in self.restored if (t.rollout_id, t.attempt) != key)
        return replace(self, restored=kept)

    def summary(self, fence_idle: bool) -> tuple[str, int, int]:
        """`(role_state, live executions, completed_unacknowledged)` for status."""
        completed = len(self.completed())
        return ("open" if fence_idle else "closed", len(self.executions) - completed, completed)
