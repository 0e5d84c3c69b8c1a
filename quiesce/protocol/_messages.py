"""Wire messages: every request and reply of the control protocol, as pydantic models.

These are boundary values (`frozen=True, extra="forbid"`): a reply that does not parse is
refused with the field named (`parse_reply` turns it into a `RemoteProtocolError`). The
same models are the HTTP bodies (docs/wire.md) and the in-memory and Ray payloads, so every
adapter speaks exactly one protocol.

Every reply carries the participant's `incarnation`, so the controller sees a restart.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from quiesce.protocol._errors import RemoteProtocolError
from quiesce.protocol._ids import OpIdField

__all__ = [
    "AckReply",
    "AckRequest",
    "BaseReply",
    "BeginRequest",
    "BoundaryRequest",
    "Capabilities",
    "CommitReply",
    "Continuation",
    "ControlRequest",
    "DiscardRequest",
    "ErrorReply",
    "ExecutionReply",
    "FinishRequest",
    "InstanceRole",
    "Message",
    "PrepareReply",
    "Receipt",
    "RestoreReply",
    "RestoreRequest",
    "ResumeReply",
    "RetireReply",
    "RetireRequest",
    "Role",
    "StatusReply",
    "parse_reply",
]


class Role(StrEnum):
    """What a participant is (§2). A `StrEnum`: on the wire, in logs and in the journal a
    role is its plain name (`"agent"`), and a name parses back to the member."""

    POLICY = "policy"
    AGENT = "agent"
    RESOURCES = "resources"


class InstanceRole(StrEnum):
    """Whether a server is a fenced primary or an auxiliary (a policy that answers
    discovery only and is never fenced, §2)."""

    PRIMARY = "primary"
    AUXILIARY = "auxiliary"


# Kept as open strings on the wire: an unknown value must reach discovery, which refuses it
# at setup naming the server (S13, S14), instead of failing as an anonymous parse error.
RecoveryMode = str
MultiProcessMode = str

KNOWN_RECOVERY_MODES = ("stateless", "export_restore", "restart_only")
KNOWN_MULTI_PROCESS_MODES = ("single_worker", "coordinator")


class Message(BaseModel):
    """Base of every wire message: frozen, unknown fields refused."""

    model_config = ConfigDict(frozen=True, extra="forbid")


# ----------------------------------------------------------------------------- requests


class ControlRequest(Message):
    """prepare / commit / resume: the op id and the absolute deadline of the call."""

    op_id: OpIdField
    deadline_at: float


class RestoreRequest(ControlRequest):
    """restore(R, snapshot): `op_id` is the restore's own id; `artifact` is this
    participant's committed state from the snapshot (base64 text; empty if stateless)."""

    snapshot_id: OpIdField
    artifact: str = ""
    expected_digest: str


class DiscardRequest(Message):
    """discard_restored_continuation(R, rollout): legal only in `restored_paused` under R."""

    op_id: OpIdField
    rollout_id: str
    attempt: int = Field(ge=0)


class Receipt(Message):
    """The exact receipt of one completed execution; an ACK must quote it."""

    rollout_id: str
    attempt: int = Field(ge=0)
    receipt: str


class AckRequest(Message):
    """Acknowledge completed executions (one idempotent batch)."""

    receipts: tuple[Receipt, ...]


class RetireRequest(Message):
    """Retire an execution: its deadline expired, or a restore replaced it."""

    rollout_id: str
    attempt: int = Field(ge=0)


class BeginRequest(Message):
    """Start an agent execution for `(rollout_id, attempt)`; `resume_from_turn` continues a
    restored continuation."""

    rollout_id: str
    attempt: int = Field(ge=0)
    group_id: str
    turns: int = Field(ge=1)
    resume_from_turn: int = Field(default=0, ge=0)


class BoundaryRequest(Message):
    """An agent execution reached the end of turn `turn` (its last turn is durable)."""

    rollout_id: str
    attempt: int = Field(ge=0)
    turn: int = Field(ge=0)
    # The turn changed state on a `restart_only` resource, so a continuation saved from it
    # cannot resume at `turn` after a restore (M8, S12).
    restart_only_dependency: bool = False


class FinishRequest(Message):
    """An agent execution's `/run` finished with `result`."""

    rollout_id: str
    attempt: int = Field(ge=0)
    result: dict[str, Any] = Field(default_factory=dict)


# ------------------------------------------------------------------------------- replies


class BaseReply(Message):
    """Base of replies: who answered, and which incarnation of it."""

    participant: str
    incarnation: str


class Capabilities(BaseReply):
    """Discovery (§2): what the participant is and how it recovers."""

    role: Role
    instance_role: InstanceRole = InstanceRole.PRIMARY
    recovery_mode: RecoveryMode = "restart_only"
    group_scored: bool = False
    group_size: int | None = Field(default=None, ge=1)
    multi_process: MultiProcessMode = "single_worker"
    features: tuple[str, ...] = ()

    def fingerprint(self) -> tuple[str, ...]:
        """The topology fingerprint part of this participant (all but features and
        incarnation)."""
        return (
            self.role,
            self.participant,
            self.instance_role,
            self.recovery_mode,
            str(self.group_scored),
            str(self.group_size),
            self.multi_process,
        )


class PrepareReply(BaseReply):
    """prepare(X): `ready`, or `not_ready` with the blockers that keep it from parking."""

    op_id: OpIdField
    status: Literal["ready", "not_ready"]
    blockers: tuple[str, ...] = ()
    parked: int = Field(default=0, ge=0)
    frozen: int = Field(default=0, ge=0)
    completed_unacknowledged: int = Field(default=0, ge=0)


class Continuation(Message):
    """A parked agent execution saved at a turn boundary (agents' commit)."""

    rollout_id: str
    attempt: int = Field(ge=0)
    group_id: str
    turn: int = Field(ge=0)
    turns: int = Field(ge=1)
    restart_only_dependency: bool = False


class CommitReply(BaseReply):
    """commit(X): the participant's artifact (base64 text) and its SHA-256 digest."""

    op_id: OpIdField
    status: Literal["committed", "failed"]
    digest: str = ""
    artifact: str = ""
    continuations: tuple[Continuation, ...] = ()
    reason: str = ""  # why a commit failed (empty when committed)


class RestoreReply(BaseReply):
    """restore(R, snapshot): the digest of what was restored and the restored executions."""

    op_id: OpIdField
    status: Literal["restored", "failed"]
    digest: str = ""
    continuations: tuple[Continuation, ...] = ()
    reason: str = ""  # why a restore failed (empty when restored)


class ResumeReply(BaseReply):
    """resume(X) (= abort, = release): `retired` is the new high-watermark."""

    op_id: OpIdField
    retired: OpIdField


class StatusReply(BaseReply):
    """status: the fence and the role's machine, for probes and conformance tests."""

    fence: str
    active_id: OpIdField | None = None
    high_watermark: OpIdField | None = None
    role_state: str
    live_executions: int = Field(default=0, ge=0)
    completed_unacknowledged: int = Field(default=0, ge=0)


class AckReply(BaseReply):
    """ACK batch result: which receipts were released, which were unknown (idempotent)."""

    acknowledged: tuple[Receipt, ...] = ()
    unknown: tuple[Receipt, ...] = ()


class RetireReply(BaseReply):
    """retire: `tombstoned`, or `completed_unacknowledged` (only an ACK releases a result)."""

    outcome: Literal["tombstoned", "completed_unacknowledged", "already_retired"]
    receipt: Receipt | None = None


class ExecutionReply(BaseReply):
    """begin / boundary / finish of an agent execution: its M3 state after the event.

    `state` tells the agent's runtime what to do: `running` continue, `parked` wait for
    the fence to resume, `tombstoned` stop (a late event was dropped); `completed` carries
    the exact `receipt` an ACK must quote."""

    rollout_id: str
    attempt: int = Field(ge=0)
    state: str
    turn: int = Field(default=0, ge=0)
    receipt: Receipt | None = None


class ErrorReply(BaseReply):
    """A typed refusal (`code` is `Refusal.code`); `active_id` for `checkpoint_conflict`."""

    code: str
    message: str
    active_id: OpIdField | None = None
    high_watermark: OpIdField | None = None


R = TypeVar("R", bound=Message)


def parse_reply(model: type[R], participant: str, payload: Any, *, retryable: bool = True) -> R:
    """Validate `payload` as `model`; a malformed reply is a `RemoteProtocolError` naming the
    participant and the first bad field (classified `retryable` as the caller says)."""
    try:
        if isinstance(payload, str | bytes):
            return model.model_validate_json(payload)
        return model.model_validate(payload)
    except ValidationError as error:
        first = error.errors()[0]
        field = ".".join(str(part) for part in first["loc"]) or "<body>"
        raise RemoteProtocolError(participant, field, first["msg"], retryable=retryable) from None
