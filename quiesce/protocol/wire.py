"""The wire vocabulary: every request and reply, the typed refusals, and operation ids.

What a participant and a controller exchange, in-process, over Ray or over HTTP
(docs/wire.md): pydantic models that refuse bad input with the field named, the refusals a
fence answers (`CheckpointConflict`, `StaleCheckpoint`, `InvalidPhase`, ...), and `OpId`,
the ordered checkpoint / restore id that travels as `ck-{epoch}-{seq}-step{N}`.

>>> from quiesce.protocol.wire import OpId
>>> str(OpId(1, 2, 7))
'ck-1-2-step7'
"""

from quiesce.protocol._errors import (
    AdmissionClosed,
    CheckpointConflict,
    DuplicateExecution,
    InvalidPhase,
    LocalProtocolError,
    MalformedRequest,
    ProtocolError,
    Refusal,
    RemoteProtocolError,
    StaleAttempt,
    StaleCheckpoint,
    UnknownExecution,
    UnsupportedOperation,
)
from quiesce.protocol._ids import (
    InvalidOpId,
    OpId,
    OpIdField,
    OpKind,
)
from quiesce.protocol._messages import (
    AckReply,
    AckRequest,
    BaseReply,
    BeginRequest,
    BoundaryRequest,
    Capabilities,
    CommitReply,
    Continuation,
    ControlRequest,
    DiscardRequest,
    ErrorReply,
    ExecutionReply,
    FinishRequest,
    Message,
    PrepareReply,
    Receipt,
    RestoreReply,
    RestoreRequest,
    ResumeReply,
    RetireReply,
    RetireRequest,
    Role,
    StatusReply,
    parse_reply,
)

__all__ = [
    "AckReply",
    "AckRequest",
    "AdmissionClosed",
    "BaseReply",
    "BeginRequest",
    "BoundaryRequest",
    "Capabilities",
    "CheckpointConflict",
    "CommitReply",
    "Continuation",
    "ControlRequest",
    "DiscardRequest",
    "DuplicateExecution",
    "ErrorReply",
    "ExecutionReply",
    "FinishRequest",
    "InvalidOpId",
    "InvalidPhase",
    "LocalProtocolError",
    "MalformedRequest",
    "Message",
    "OpId",
    "OpIdField",
    "OpKind",
    "PrepareReply",
    "ProtocolError",
    "Receipt",
    "Refusal",
    "RemoteProtocolError",
    "RestoreReply",
    "RestoreRequest",
    "ResumeReply",
    "RetireReply",
    "RetireRequest",
    "Role",
    "StaleAttempt",
    "StaleCheckpoint",
    "StatusReply",
    "UnknownExecution",
    "UnsupportedOperation",
    "parse_reply",
]
