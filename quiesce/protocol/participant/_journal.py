"""The durable part of a participant (§6), as a pydantic `Journal`, and crash recovery.

What lives here: what a participant must keep across a crash (fence: active id, phase,
high-watermark, recorded results; completed-but-unACKed results; refusal keys; restored
continuations not yet claimed), the `JournalWrite` effect that carries it, and
`from_journal`, which rebuilds the state under a new incarnation (`Recovery` is its type,
so a model checker can pass a variant). What it does not know: where or how the adapter
stores it (fsync before replying is the adapter's duty).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from quiesce.fsm import Value
from quiesce.protocol._ids import OpIdField
from quiesce.protocol._messages import (
    CommitReply,
    Continuation,
    Message,
    PrepareReply,
    RestoreReply,
    ResumeReply,
)
from quiesce.protocol.machines import ExecState, ExecutionData, FenceData, FenceOp, FenceState
from quiesce.protocol.participant._agent_role import AgentRole, SavedTurn
from quiesce.protocol.participant._rules import PARTICIPANT_RULES, ParticipantRules
from quiesce.protocol.participant._state import ParticipantConfig, ParticipantState, fresh_role

__all__ = [
    "Journal",
    "JournalExecution",
    "JournalWrite",
    "RecordedResult",
    "Recovery",
    "RefusalKey",
    "from_journal",
    "journal_of",
]

# ---------------------------------------------------------------------------- journal

_REPLY_MODELS: dict[str, type[Message]] = {
    "prepare": PrepareReply,
    "commit": CommitReply,
    "resume": ResumeReply,
    "restore": RestoreReply,
}


class RecordedResult(Message):
    """One recorded successful result of the fence: `(op_id, op)` and the reply (JSON)."""

    op_id: OpIdField
    op: Literal["prepare", "commit", "resume", "restore"]
    reply: str


class JournalExecution(Message):
    """A completed-but-unACKed execution: its result waits for an exact-receipt ACK."""

    rollout_id: str
    attempt: int
    group_id: str = ""
    turns: int = 1
    turn: int = 0
    restart_only_dependency: bool = False
    receipt: str
    result: str


class RefusalKey(Message):
    """Per rollout: the highest attempt acked or tombstoned (`receipt` if it was acked)."""

    rollout_id: str
    attempt: int
    receipt: str = ""


class Journal(Message):
    """The durable part of a participant (§6): fence, unACKed results, refusal keys, and
    restored continuations not yet claimed. Running executions are not in it: they die
    with the process."""

    format: Literal[1] = 1
    config: ParticipantConfig
    fence: FenceState
    active_id: OpIdField | None = None
    high_watermark: OpIdField | None = None
    recorded: tuple[RecordedResult, ...] = ()
    completed: tuple[JournalExecution, ...] = ()
    refusal_keys: tuple[RefusalKey, ...] = ()
    restored: tuple[Continuation, ...] = ()


def journal_of(state: ParticipantState) -> Journal:
    """The journal a crash must keep for `state` (what `JournalWrite` carries)."""
    data = state.fence.data
    role = state.role
    agent = role if isinstance(role, AgentRole) else AgentRole()
    return Journal(
        config=state.config,
        fence=state.fence.state,
        active_id=data.active,
        high_watermark=data.high_watermark,
        recorded=tuple(
            RecordedResult(op_id=op_id, op=op.value, reply=result.model_dump_json())
            for op_id, op, result in data.recorded
        ),
        completed=tuple(
            JournalExecution(
                rollout_id=e.data.rollout_id,
                attempt=e.data.attempt,
                group_id=e.data.group_id,
                turns=e.data.turns,
                turn=e.data.turn,
                restart_only_dependency=e.data.restart_only_dependency,
                receipt=e.data.receipt,
                result=e.data.result,
            )
            for e in agent.completed()
        ),
        refusal_keys=tuple(
            RefusalKey(rollout_id=r, attempt=a, receipt=x) for r, a, x in agent.refusal_keys
        ),
        restored=tuple(t.to_wire() for t in agent.restored),
    )


# A crash in the middle of an operation is that operation failing: it recorded nothing.
_AFTER_CRASH = {
    FenceState.COMMITTING: FenceState.PREPARED,
    FenceState.RESTORING: FenceState.RESTORE_FAILED_PAUSED,
}


def from_journal(
    journal: Journal | Mapping[str, Any] | str | bytes,
    incarnation: str,
    rules: ParticipantRules = PARTICIPANT_RULES,
) -> ParticipantState:
    """Rebuild a participant after a crash (§6) under its new `incarnation`.

    Kept: fence (active id, phase, high-watermark, recorded results), completed-but-unACKed
    results, refusal keys, restored continuations. Dropped: running executions, calls and
    mutations in flight (they died with the process). A fence caught `committing` or
    `restoring` comes back `prepared` / `restore_failed_paused` (a failed op); a fenced
    policy or resources role closes again by `rules`."""
    if isinstance(journal, str | bytes):
        journal = Journal.model_validate_json(journal)
    elif not isinstance(journal, Journal):
        journal = Journal.model_validate(journal)
    recorded = tuple(
        (r.op_id, FenceOp(r.op), _REPLY_MODELS[r.op].model_validate_json(r.reply))
        for r in journal.recorded
    )
    fence_state = _AFTER_CRASH.get(journal.fence, journal.fence)
    fence = Value(fence_state, FenceData(journal.active_id, journal.high_watermark, recorded))
    role = fresh_role(journal.config)
    if isinstance(role, AgentRole):
        executions = tuple(
            Value(ExecState.COMPLETED, ExecutionData(**e.model_dump())) for e in journal.completed
        )
        role = AgentRole(
            executions=tuple(sorted(executions, key=lambda e: e.data.key)),
            refusal_keys=tuple(
                sorted((k.rollout_id, k.attempt, k.receipt) for k in journal.refusal_keys)
            ),
            restored=tuple(SavedTurn.from_wire(c) for c in journal.restored),
        )
    elif fence_state is not FenceState.IDLE:
        role = role.close(rules)  # admission is closed whenever the fence is not idle
    return ParticipantState(journal.config, incarnation, fence, role)


Recovery: TypeAlias = Callable[[Journal, str, ParticipantRules], ParticipantState]
"""How a crashed participant comes back from its journal: `from_journal(journal,
incarnation, rules)` (a model checker may pass a variant that loses what §6 keeps)."""


@dataclass(frozen=True, slots=True)
class JournalWrite:
    """Persist `journal` (fsync) before sending the reply: the durable part changed (§6)."""

    journal: Journal
