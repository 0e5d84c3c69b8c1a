"""The participant's pure state: one `control_fence` (M2) plus its role's machine(s).

What lives here: the participant side of the protocol as pure functions over a frozen
`ParticipantState` (config, incarnation, fence value, role value). One entry point answers
every wire request, `handle(state, op, request, now) -> (state, reply, effects)`; a few
more report the role's own progress (a policy call starts or ends, a resources mutation
starts or ends, an agent's call is held by a paused policy). What it does not know: the
transport (HTTP, in-memory and Ray adapters call `handle`), the disk (the durable part of
§6 leaves as a `JournalWrite` effect, emitted exactly when it changes; `from_journal`
rebuilds the state after a crash), time, or randomness (the caller picks the incarnation).
Which tables it fires is a parameter: every entry point takes `rules` (`ParticipantRules`,
default `PARTICIPANT_RULES`, the protocol's own), so a model checker runs a derived table
through this very code.

Rules:
- the fence decides *whether* an operation runs (refusals, replays, conflicts, stale ids:
  all rows of `control_fence`); the role decides *what* it does (park, drain, freeze,
  export, import). Admission of the role is closed whenever the fence is not idle;
- a refusal is an `ErrorReply` carrying a typed `Refusal`'s code; nothing changes. A
  malformed request is refused `malformed_request`, never half-applied;
- commit's artifact is deterministic bytes (canonical JSON naming participant, role and
  snapshot id; empty when the role saves nothing), sent base64 with its SHA-256 digest.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from enum import Enum
from typing import Any, TypeAlias, TypeVar

from pydantic import ValidationError

from quiesce.fsm import TransitionNotAllowed, Value
from quiesce.protocol._errors import (
    CheckpointConflict,
    InvalidPhase,
    MalformedRequest,
    Refusal,
    StaleCheckpoint,
    UnsupportedOperation,
)
from quiesce.protocol._messages import (
    AckReply,
    AckRequest,
    BeginRequest,
    BoundaryRequest,
    ControlRequest,
    DiscardRequest,
    ErrorReply,
    ExecutionReply,
    FinishRequest,
    Message,
    Receipt,
    RestoreRequest,
    RetireReply,
    RetireRequest,
    Role,
    StatusReply,
)
from quiesce.protocol.machines import ExecAnswer, ExecState, ExecutionData, FenceState
from quiesce.protocol.participant._agent_role import AgentRole
from quiesce.protocol.participant._control_ops import CONTROL_HANDLERS, artifact_digest
from quiesce.protocol.participant._journal import Journal, JournalWrite, from_journal, journal_of
from quiesce.protocol.participant._rules import PARTICIPANT_RULES, ParticipantRules
from quiesce.protocol.participant._service_roles import PolicyRole, ResourcesRole
from quiesce.protocol.participant._state import (
    CancelExecution,
    ParticipantConfig,
    ParticipantState,
    ReleaseWaiters,
    Result,
    RoleEffect,
    WakeExecutions,
    capabilities,
    new_participant,
    stamp,
)

__all__ = [
    "Answer",
    "CancelExecution",
    "Journal",
    "JournalWrite",
    "ParticipantConfig",
    "ParticipantEffect",
    "ParticipantOp",
    "ParticipantState",
    "ReleaseWaiters",
    "WakeExecutions",
    "agent_policy_call_held",
    "agent_policy_call_resumed",
    "artifact_digest",
    "capabilities",
    "from_journal",
    "handle",
    "journal_of",
    "may_start_outbound_call",
    "mutation_finished",
    "mutation_started",
    "new_participant",
    "policy_call_finished",
    "policy_call_started",
]

ParticipantEffect: TypeAlias = RoleEffect | JournalWrite
"""Every effect `handle` may return."""
Answer: TypeAlias = tuple[ParticipantState, Message, tuple[ParticipantEffect, ...]]
"""What `handle` returns: `(next_state, reply, effects)`."""


class ParticipantOp(Enum):
    """Every request a participant answers (the route of an adapter)."""

    CAPABILITIES = "capabilities"
    STATUS = "status"
    PREPARE = "prepare"
    COMMIT = "commit"
    RESUME = "resume"
    RESTORE = "restore"
    DISCARD = "discard"
    ACK = "ack"
    RETIRE = "retire"
    BEGIN = "begin"
    BOUNDARY = "boundary"
    FINISH = "finish"

    @classmethod
    def named(cls, name: str) -> ParticipantOp | None:
        """The operation whose route is `name`, or None (`"prepare"` -> `PREPARE`)."""
        member = cls._value2member_map_.get(name)
        return member if isinstance(member, ParticipantOp) else None


P = ParticipantOp
_REQUESTS: dict[ParticipantOp, type[Message] | None] = {
    P.CAPABILITIES: None,
    P.STATUS: None,
    P.PREPARE: ControlRequest,
    P.COMMIT: ControlRequest,
    P.RESUME: ControlRequest,
    P.RESTORE: RestoreRequest,
    P.DISCARD: DiscardRequest,
    P.ACK: AckRequest,
    P.RETIRE: RetireRequest,
    P.BEGIN: BeginRequest,
    P.BOUNDARY: BoundaryRequest,
    P.FINISH: FinishRequest,
}
_CONTROL = (P.PREPARE, P.COMMIT, P.RESUME, P.RESTORE, P.DISCARD)
_AGENT_ONLY = (P.ACK, P.RETIRE, P.BEGIN, P.BOUNDARY, P.FINISH)


# ------------------------------------------------------------------------- entry point


def handle(
    state: ParticipantState,
    op: str | Enum,
    request: Any = None,
    now: float = 0.0,
    *,
    rules: ParticipantRules = PARTICIPANT_RULES,
) -> Answer:
    """Answer one wire request: `(next_state, reply, effects)`.

    `op` is a `ParticipantOp` (or any enum or string with the same value, e.g. the
    coordinator's `Op`); `request` is the op's wire model, or a mapping / JSON text that
    validates as it; `rules` names the tables the step fires. A refusal is an `ErrorReply`
    and leaves `state` unchanged; effects end with a `JournalWrite` whenever the durable
    part (§6) changed.

    >>> state = new_participant({"name": "p", "role": "policy"}, "inc-1")
    >>> state, reply, _ = handle(state, "prepare", {"op_id": "ck-1-1-step0", "deadline_at": 9})
    >>> reply.status
    'ready'
    """
    name = op.value if isinstance(op, Enum) else op
    parsed_op = ParticipantOp.named(name)
    if parsed_op is None:
        ops = ", ".join(o.value for o in ParticipantOp)
        return state, _error(state, MalformedRequest(str(name), "op", f"expected one of {ops}")), ()
    try:
        model = _parse(parsed_op, request)
        _check_role(state.config, parsed_op)
        after, reply, effects = _HANDLERS[parsed_op](rules, state, model)
    except Refusal as refusal:
        return state, _error(state, refusal), ()
    except TransitionNotAllowed as refused:
        # A role machine refused the event (e.g. a finish reported for a parked execution).
        return state, _error(state, InvalidPhase(parsed_op.value, refused.state.value)), ()
    return _settle(state, after, reply, effects)


def _parse(op: ParticipantOp, request: Any) -> Any:
    model = _REQUESTS[op]
    if model is None or isinstance(request, model):
        return request
    try:
        if isinstance(request, str | bytes):
            return model.model_validate_json(request)
        return model.model_validate(request)
    except ValidationError as error:
        first = error.errors()[0]
        field = ".".join(str(part) for part in first["loc"]) or "<body>"
        raise MalformedRequest(op.value, field, first["msg"]) from None


def _check_role(config: ParticipantConfig, op: ParticipantOp) -> None:
    if op in _AGENT_ONLY and config.role is not Role.AGENT:
        raise UnsupportedOperation(op.value, config.role)
    if op in _CONTROL and not config.fenced:
        raise UnsupportedOperation(op.value, "auxiliary policy")


def _settle(
    before: ParticipantState,
    after: ParticipantState,
    reply: Message,
    effects: tuple[ParticipantEffect, ...],
) -> Answer:
    # Compare cheap projections; build the pydantic journal only when something changed.
    if _durable(after) != _durable(before):
        effects = (*effects, JournalWrite(journal_of(after)))
    return after, reply, effects


def _durable(state: ParticipantState) -> tuple[Any, ...]:
    return (state.fence.state, state.fence.data, state.role.durable())


def _error(state: ParticipantState, refusal: Refusal) -> ErrorReply:
    active = refusal.active_id if isinstance(refusal, CheckpointConflict) else None
    hwm = refusal.high_watermark if isinstance(refusal, StaleCheckpoint) else None
    return ErrorReply(
        **stamp(state),
        code=refusal.code,
        message=str(refusal),
        active_id=active,  # OpIdField parses the text
        high_watermark=hwm,
    )


def _status(_rules: ParticipantRules, state: ParticipantState, _: None) -> Result:
    fence = state.fence
    role_state, live, completed = state.role.summary(fence.state is FenceState.IDLE)
    reply = StatusReply(
        **stamp(state),
        fence=fence.state.value,
        active_id=fence.data.active,
        high_watermark=fence.data.high_watermark,
        role_state=role_state,
        live_executions=live,
        completed_unacknowledged=completed,
    )
    return state, reply, ()


def _capabilities(_rules: ParticipantRules, state: ParticipantState, _: None) -> Result:
    return state, capabilities(state), ()


# ------------------------------------------------------------------------- agent ops


R = TypeVar("R", AgentRole, PolicyRole, ResourcesRole)


def _role(state: ParticipantState, kind: type[R], op: str) -> R:
    if not isinstance(state.role, kind):
        raise UnsupportedOperation(op, state.config.role)
    return state.role


def _agent(state: ParticipantState, op: str = "agent event") -> AgentRole:
    return _role(state, AgentRole, op)


def _execution_reply(
    state: ParticipantState, execution: Value[ExecState, ExecutionData]
) -> ExecutionReply:
    data = execution.data
    receipt = None
    if execution.state is ExecState.COMPLETED:
        receipt = Receipt(rollout_id=data.rollout_id, attempt=data.attempt, receipt=data.receipt)
    return ExecutionReply(
        **stamp(state),
        rollout_id=data.rollout_id,
        attempt=data.attempt,
        state=execution.state.value,
        turn=data.turn,
        receipt=receipt,
    )


def _begin(rules: ParticipantRules, state: ParticipantState, req: BeginRequest) -> Result:
    key = (req.rollout_id, req.attempt)
    fence_idle = state.fence.state is FenceState.IDLE
    role = _agent(state).begin(
        rules, key, req.group_id, req.turns, req.resume_from_turn, fence_idle=fence_idle
    )
    execution = role.find(key)
    assert execution is not None
    return replace(state, role=role), _execution_reply(state, execution), ()


def _boundary(rules: ParticipantRules, state: ParticipantState, req: BoundaryRequest) -> Result:
    role = _agent(state)
    key = (req.rollout_id, req.attempt)
    after = role.boundary(rules, key, req.turn, req.restart_only_dependency)
    return replace(state, role=role.store(after)), _execution_reply(state, after), ()


def _finish(rules: ParticipantRules, state: ParticipantState, req: FinishRequest) -> Result:
    role = _agent(state)
    after = role.finish(rules, (req.rollout_id, req.attempt), req.result)
    return replace(state, role=role.store(after)), _execution_reply(state, after), ()


def _ack(rules: ParticipantRules, state: ParticipantState, req: AckRequest) -> Result:
    role, acknowledged, unknown = _agent(state).ack(rules, req.receipts)
    reply = AckReply(**stamp(state), acknowledged=tuple(acknowledged), unknown=tuple(unknown))
    return replace(state, role=role), reply, ()


def _retire(rules: ParticipantRules, state: ParticipantState, req: RetireRequest) -> Result:
    key = (req.rollout_id, req.attempt)
    before = _agent(state)
    role, outcome, receipt = before.retire(rules, key)
    reply = RetireReply(**stamp(state), outcome=outcome.value, receipt=receipt)
    live = before.find(key) is not None and outcome is ExecAnswer.TOMBSTONED
    return replace(state, role=role), reply, ((CancelExecution(*key),) if live else ())


_HANDLERS: dict[ParticipantOp, Callable[[ParticipantRules, ParticipantState, Any], Result]] = {
    P.CAPABILITIES: _capabilities,
    P.STATUS: _status,
    P.PREPARE: CONTROL_HANDLERS["prepare"],
    P.COMMIT: CONTROL_HANDLERS["commit"],
    P.RESUME: CONTROL_HANDLERS["resume"],
    P.RESTORE: CONTROL_HANDLERS["restore"],
    P.DISCARD: CONTROL_HANDLERS["discard"],
    P.ACK: _ack,
    P.RETIRE: _retire,
    P.BEGIN: _begin,
    P.BOUNDARY: _boundary,
    P.FINISH: _finish,
}


# ------------------------------------------------------------------- internal events


def may_start_outbound_call(state: ParticipantState) -> bool:
    """May an agent execution start a new policy or resources call now? Only while the
    fence is idle (a call in flight is waited for; a new one waits for resume)."""
    return state.fence.state is FenceState.IDLE


def agent_policy_call_held(
    state: ParticipantState,
    rollout_id: str,
    attempt: int,
    *,
    rules: ParticipantRules = PARTICIPANT_RULES,
) -> Answer:
    """The paused policy holds this execution's call as a waiter: it becomes `frozen`."""
    role = _agent(state, "policy_call_held")
    after = role.policy_call_held(rules, (rollout_id, attempt))
    return _settle(
        state, replace(state, role=role.store(after)), _execution_reply(state, after), ()
    )


def agent_policy_call_resumed(
    state: ParticipantState,
    rollout_id: str,
    attempt: int,
    *,
    rules: ParticipantRules = PARTICIPANT_RULES,
) -> Answer:
    """The held call proceeds: `running`, or `park_requested` while this fence is closed."""
    role = _agent(state, "policy_call_resumed")
    idle = state.fence.state is FenceState.IDLE
    after = role.policy_call_resumed(rules, (rollout_id, attempt), fence_idle=idle)
    return _settle(
        state, replace(state, role=role.store(after)), _execution_reply(state, after), ()
    )


def policy_call_started(
    state: ParticipantState, call_id: str, *, rules: ParticipantRules = PARTICIPANT_RULES
) -> tuple[ParticipantState, bool]:
    """A generation call arrived at a policy: `(state, admitted)`. Not admitted: it waits
    (it is released by the `ReleaseWaiters` effect of the resume)."""
    policy = _role(state, PolicyRole, "policy_call_started")
    role, admitted = policy.call_started(rules, call_id)
    return replace(state, role=role), admitted


def policy_call_finished(
    state: ParticipantState, call_id: str, *, rules: ParticipantRules = PARTICIPANT_RULES
) -> ParticipantState:
    """An admitted generation call returned (the last one of a drain pauses the policy)."""
    role = _role(state, PolicyRole, "policy_call_finished")
    return replace(state, role=role.call_finished(rules, call_id))


def mutation_started(
    state: ParticipantState,
    mutation_id: str,
    rollout_id: str,
    *,
    rules: ParticipantRules = PARTICIPANT_RULES,
) -> tuple[ParticipantState, bool]:
    """A call wants to change `rollout_id`'s state on a resources server: `(state, admitted)`."""
    resources = _role(state, ResourcesRole, "mutation_started")
    role, admitted = resources.mutation_started(rules, mutation_id, rollout_id)
    return replace(state, role=role), admitted


def mutation_finished(
    state: ParticipantState,
    mutation_id: str,
    rollout_id: str,
    *,
    rules: ParticipantRules = PARTICIPANT_RULES,
) -> ParticipantState:
    """An admitted mutation is done (the last one of a drain freezes the server)."""
    role = _role(state, ResourcesRole, "mutation_finished")
    return replace(state, role=role.mutation_finished(rules, mutation_id, rollout_id))
