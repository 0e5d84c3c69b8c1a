"""The protocol, pure: the machines M1-M9 as tables, the controller and the participant.

Nothing here awaits, sleeps, reads a clock or touches a socket: time comes in as `now`,
outcomes come in as inputs, and work goes out as effects. Three rooms over a small shared
vocabulary (ids, wire messages, causes, errors, config):

- `quiesce.protocol.machines`: every machine as a literal table (`TABLES` by name);
- `quiesce.protocol.controller`: the coordinator (`Coordinator.step`), its state, and the
  inputs and effects an embedder submits and reads; `.controller.lowlevel` has the rest
  (every effect a driver carries out, the restore flow, the ledger's records, the levels,
  the policy the mutants swap);
- `quiesce.protocol.participant`: one participant's pure step (`handle`), its fence, roles
  and journal;
- `quiesce.protocol.wire`: the requests, replies and typed refusals, and `OpId`.

The controller and the participant never import each other: they meet on the wire.
This face re-exports what an embedder needs most; everything else is one level down.

>>> from quiesce.protocol import QuiesceConfig, Coordinator
>>> Coordinator(QuiesceConfig()).initial(epoch=1).checkpoint.state.value
'idle'
"""

from quiesce.protocol import controller, machines, participant, wire
from quiesce.protocol._causes import CAUSES, Cause, Classification, Disposition, classify
from quiesce.protocol._config import ConfigError, QuiesceConfig, RolloutRecoveryConfig
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
from quiesce.protocol._ids import InvalidOpId, OpId, group_of, rollout_id
from quiesce.protocol._levels import OverrideRefines, RecoveryLevel
from quiesce.protocol.controller import (
    ControllerEffect,
    ControllerInput,
    ControllerState,
    Coordinator,
    DiscoveryRefused,
    DuplicateParticipant,
    Fleet,
    Ledger,
    Member,
    Topology,
    UnknownRecoveryMode,
    UnknownRole,
    UnmanagedMultiProcess,
    validate_discovery,
)
from quiesce.protocol.machines import TABLES, RecoveryMode, UnknownTable, get_table
from quiesce.protocol.participant import (
    Answer,
    Journal,
    ParticipantConfig,
    ParticipantEffect,
    ParticipantOp,
    ParticipantState,
    capabilities,
    from_journal,
    handle,
    journal_of,
    new_participant,
)

__all__ = [
    "CAUSES",
    "TABLES",
    "AdmissionClosed",
    "Answer",
    "Cause",
    "CheckpointConflict",
    "Classification",
    "ConfigError",
    "ControllerEffect",
    "ControllerInput",
    "ControllerState",
    "Coordinator",
    "DiscoveryRefused",
    "Disposition",
    "DuplicateExecution",
    "DuplicateParticipant",
    "Fleet",
    "InvalidOpId",
    "InvalidPhase",
    "Journal",
    "Ledger",
    "LocalProtocolError",
    "MalformedRequest",
    "Member",
    "OpId",
    "OverrideRefines",
    "ParticipantConfig",
    "ParticipantEffect",
    "ParticipantOp",
    "ParticipantState",
    "ProtocolError",
    "QuiesceConfig",
    "RecoveryLevel",
    "RecoveryMode",
    "Refusal",
    "RemoteProtocolError",
    "RolloutRecoveryConfig",
    "StaleAttempt",
    "StaleCheckpoint",
    "Topology",
    "UnknownExecution",
    "UnknownRecoveryMode",
    "UnknownRole",
    "UnknownTable",
    "UnmanagedMultiProcess",
    "UnsupportedOperation",
    "capabilities",
    "classify",
    "controller",
    "from_journal",
    "get_table",
    "group_of",
    "handle",
    "journal_of",
    "machines",
    "new_participant",
    "participant",
    "rollout_id",
    "validate_discovery",
    "wire",
]
