"""The fence-run operations of a participant: prepare, commit, resume, restore, discard.

What lives here: for each control operation, the fence step that decides whether it runs
(`control_fence` rows: refusals, replays, conflicts, stale ids) and the role's work when
the fence says `FenceStart` (park/drain/freeze, export, reopen, verify and import), then the
outcome input that records a success. Start and outcome run in one call: this core never
leaves the fence `committing` or `restoring` between two requests. The fence and role
tables are those of the `ParticipantRules` each handler takes.

Artifacts are deterministic bytes: canonical JSON naming participant, role and snapshot
id, or empty when the role saves nothing; the reply carries them base64 with the SHA-256
digest, and a restore installs nothing whose digest or names do not match.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Callable
from dataclasses import replace
from typing import Any, TypeAlias

from pydantic import ValidationError

from quiesce.protocol._errors import (
    LocalProtocolError,
)
from quiesce.protocol._ids import OpId
from quiesce.protocol._messages import (
    CommitReply,
    Continuation,
    ControlRequest,
    DiscardRequest,
    Message,
    PrepareReply,
    RestoreReply,
    RestoreRequest,
    ResumeReply,
)
from quiesce.protocol.machines import (
    FenceCall,
    FenceInput,
    FenceOp,
    FenceRefusal,
    FenceReplay,
    FenceRetire,
    FenceStart,
)
from quiesce.protocol.participant._agent_role import AgentRole, canonical_json
from quiesce.protocol.participant._rules import ParticipantRules
from quiesce.protocol.participant._state import (
    ParticipantConfig,
    ParticipantState,
    ReleaseWaiters,
    Result,
    RoleEffect,
    RoleState,
    WakeExecutions,
    restamp,
    stamp,
)

__all__ = ["CONTROL_HANDLERS", "artifact_digest"]


def artifact_digest(artifact: bytes) -> str:
    """The SHA-256 hex digest a commit reports and a restore verifies."""
    return hashlib.sha256(artifact).hexdigest()


# ---------------------------------------------------------------------- fence-run ops

Work: TypeAlias = Callable[[ParticipantState, OpId], Result]
ControlHandler: TypeAlias = Callable[[ParticipantRules, ParticipantState, Any], Result]


def _control(
    rules: ParticipantRules, state: ParticipantState, input: FenceInput, call: FenceCall, work: Work
) -> Result:
    """Step the fence; answer a refusal or replay, or run the role's `work` on a start."""
    fence, effects = rules.fence.step(state.fence, input, call)
    effect = effects[0]
    if isinstance(effect, FenceRefusal):
        raise effect.error()
    if isinstance(effect, FenceReplay):
        return replace(state, fence=fence), restamp(state, effect.result), ()
    if isinstance(effect, FenceStart | FenceRetire) and call.op_id is not None:
        return work(replace(state, fence=fence), call.op_id)
    # FenceJoin: this core runs start and outcome in one call, so only a state built by
    # hand (or a bug) can be found mid-operation.
    raise LocalProtocolError(
        f"{call.op.value}({call.op_id}) met {effect!r} in {state.fence.state.value}"
    )


def _outcome(
    rules: ParticipantRules,
    state: ParticipantState,
    input: FenceInput,
    op: FenceOp,
    op_id: OpId,
    reply: Message,
) -> ParticipantState:
    fence, _ = rules.fence.step(state.fence, input, FenceCall(op, op_id, reply))
    return replace(state, fence=fence)


def _prepare(rules: ParticipantRules, state: ParticipantState, req: ControlRequest) -> Result:
    def work(state: ParticipantState, op_id: OpId) -> Result:
        role = state.role.close(rules)
        ready = role.readiness()
        reply = PrepareReply(
            **stamp(state),
            op_id=op_id,
            status="ready" if ready.ready else "not_ready",
            blockers=ready.blockers,
            parked=ready.parked,
            frozen=ready.frozen,
            completed_unacknowledged=ready.completed_unacknowledged,
        )
        outcome = FenceInput.PREPARE_READY if ready.ready else FenceInput.PREPARE_NOT_READY
        prepared = replace(state, role=role)
        return _outcome(rules, prepared, outcome, FenceOp.PREPARE, op_id, reply), reply, ()

    call = FenceCall(FenceOp.PREPARE, req.op_id)
    return _control(rules, state, FenceInput.RECV_PREPARE, call, work)


def _commit(rules: ParticipantRules, state: ParticipantState, req: ControlRequest) -> Result:
    def work(state: ParticipantState, op_id: OpId) -> Result:
        ready = state.role.readiness()
        if not ready.ready:  # e.g. a policy resumed early let a frozen turn run on
            reason = "not quiescent: " + ", ".join(ready.blockers)
            failed = CommitReply(**stamp(state), op_id=op_id, status="failed", reason=reason)
            return (
                _outcome(rules, state, FenceInput.COMMIT_FAILED, FenceOp.COMMIT, op_id, failed),
                failed,
                (),
            )
        artifact = _artifact(state.config, op_id, state.role.export())
        saved = state.role.continuations() if isinstance(state.role, AgentRole) else ()
        reply = CommitReply(
            **stamp(state),
            op_id=op_id,
            status="committed",
            digest=artifact_digest(artifact),
            artifact=base64.b64encode(artifact).decode("ascii"),
            continuations=tuple(t.to_wire() for t in saved),
        )
        committed = _outcome(rules, state, FenceInput.COMMIT_DONE, FenceOp.COMMIT, op_id, reply)
        return committed, reply, ()

    call = FenceCall(FenceOp.COMMIT, req.op_id)
    return _control(rules, state, FenceInput.RECV_COMMIT, call, work)


def _resume(rules: ParticipantRules, state: ParticipantState, req: ControlRequest) -> Result:
    def work(state: ParticipantState, op_id: OpId) -> Result:
        effects: tuple[RoleEffect, ...] = ()
        if isinstance(state.role, AgentRole):
            role, woken = state.role.reopen(rules)
            effects = (WakeExecutions(tuple(woken)),) if woken else ()
            return replace(state, role=role), reply, effects
        service, released = state.role.reopen(rules)
        effects = (ReleaseWaiters(released),) if released else ()
        return replace(state, role=service), reply, effects

    reply = ResumeReply(**stamp(state), op_id=req.op_id, retired=req.op_id)
    call = FenceCall(FenceOp.RESUME, req.op_id, reply)
    return _control(rules, state, FenceInput.RECV_RESUME, call, work)


def _restore(rules: ParticipantRules, state: ParticipantState, req: RestoreRequest) -> Result:
    def work(state: ParticipantState, op_id: OpId) -> Result:
        closed = replace(state, role=state.role.close(rules))
        try:
            artifact = base64.b64decode(req.artifact, validate=True)
        except (binascii.Error, ValueError):
            return _restore_failed(rules, closed, op_id, "", "artifact is not base64")
        digest = artifact_digest(artifact)
        if digest != req.expected_digest:
            why = f"digest {digest} != expected {req.expected_digest}"
            return _restore_failed(rules, closed, op_id, digest, why)
        try:
            role = closed.role.install(rules, _unpack(state.config, req.snapshot_id, artifact))
        except (ValueError, KeyError, TypeError, ValidationError) as error:
            return _restore_failed(rules, closed, op_id, digest, f"artifact refused: {error}")
        installed = replace(closed, role=role)
        reply = RestoreReply(
            **stamp(state),
            op_id=op_id,
            status="restored",
            digest=digest,
            continuations=_restored(role),
        )
        return (
            _outcome(rules, installed, FenceInput.RESTORE_DONE, FenceOp.RESTORE, op_id, reply),
            reply,
            (),
        )

    call = FenceCall(FenceOp.RESTORE, req.op_id)
    return _control(rules, state, FenceInput.RECV_RESTORE, call, work)


def _restore_failed(
    rules: ParticipantRules, state: ParticipantState, op_id: OpId, digest: str, reason: str
) -> Result:
    reply = RestoreReply(**stamp(state), op_id=op_id, status="failed", digest=digest, reason=reason)
    failed = _outcome(rules, state, FenceInput.RESTORE_FAILED, FenceOp.RESTORE, op_id, reply)
    return failed, reply, ()


def _restored(role: RoleState) -> tuple[Continuation, ...]:
    return tuple(t.to_wire() for t in role.restored) if isinstance(role, AgentRole) else ()


def _discard(rules: ParticipantRules, state: ParticipantState, req: DiscardRequest) -> Result:
    def work(state: ParticipantState, op_id: OpId) -> Result:
        role = state.role
        if isinstance(role, AgentRole):
            role = role.discard((req.rollout_id, req.attempt))
        restored = state.fence.data.result(op_id, FenceOp.RESTORE)
        digest = restored.digest if isinstance(restored, RestoreReply) else ""
        reply = RestoreReply(
            **stamp(state),
            op_id=op_id,
            status="restored",
            digest=digest,
            continuations=_restored(role),
        )
        return replace(state, role=role), reply, ()

    call = FenceCall(FenceOp.DISCARD, req.op_id)
    return _control(rules, state, FenceInput.RECV_DISCARD, call, work)


# ------------------------------------------------------------------------- artifacts


def _artifact(config: ParticipantConfig, op_id: OpId, payload: dict[str, Any] | None) -> bytes:
    """Deterministic bytes: the same state always gives the same digest."""
    if payload is None:
        return b""  # the role saves nothing
    document = {
        "format": 1,
        "participant": config.name,
        "role": config.role,
        "snapshot_id": str(op_id),
        "state": payload,
    }
    return canonical_json(document).encode()


def _unpack(config: ParticipantConfig, snapshot_id: OpId, artifact: bytes) -> dict[str, Any] | None:
    """Check an artifact belongs to this participant and snapshot; return its payload."""
    if not artifact:
        return None
    document = json.loads(artifact)
    expected = {"participant": config.name, "role": config.role, "snapshot_id": str(snapshot_id)}
    for field, value in expected.items():
        if document.get(field) != value:
            raise ValueError(f"{field} is {document.get(field)!r}, expected {value!r}")
    payload: dict[str, Any] = document["state"]
    return payload


CONTROL_HANDLERS: dict[str, ControlHandler] = {
    "prepare": _prepare,
    "commit": _commit,
    "resume": _resume,
    "restore": _restore,
    "discard": _discard,
}
"""Handlers of the fence-run operations, by op name (`_participant.handle` dispatches)."""
