"""The machines M1-M9 of the protocol, each a literal transition table.

One module per machine, its rows right after its enums. `TABLES` holds every machine by
name, in the spec's order; `get_table(name)` looks one up (`UnknownTable` lists the names).
Nothing here knows about the controller or the participants: they step these tables.

>>> from quiesce.protocol.machines import TABLES
>>> list(TABLES)[:3]
['checkpoint', 'control_fence', 'agent_execution']
"""

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from quiesce.fsm import QuiesceError, Table
from quiesce.protocol.machines._admission_gate import ADMISSION_GATE, GateInput, GateState
from quiesce.protocol.machines._agent_execution import (
    AGENT_EXECUTION,
    Admission,
    AgentInput,
    Completion,
    ExecAnswer,
    ExecState,
    ExecutionData,
)
from quiesce.protocol.machines._call import (
    CALL,
    TRANSIENT_CAUSES,
    CallData,
    CallEvent,
    CallInput,
    CallState,
)
from quiesce.protocol.machines._checkpoint import (
    ATTEMPT_STATES,
    CHECKPOINT,
    Attempt,
    CheckpointData,
    CheckpointInput,
    CheckpointState,
    Restart,
    Trigger,
    stops_the_run,
)
from quiesce.protocol.machines._control_fence import (
    CONTROL_FENCE,
    FenceCall,
    FenceData,
    FenceInput,
    FenceJoin,
    FenceLateOutcome,
    FenceOp,
    FenceRefusal,
    FenceReplay,
    FenceRetire,
    FenceStart,
    FenceState,
)
from quiesce.protocol.machines._deadline_registry import (
    DEADLINE_REGISTRY,
    DeadlineArg,
    DeadlineExpired,
    Deadlines,
    RegistryInput,
    RegistryState,
    ResumeDeadlines,
    SuspendDeadlines,
    deadline_timer,
    group_of_timer,
)
from quiesce.protocol.machines._holder_set import (
    Holder,
    Holders,
    HolderSet,
)
from quiesce.protocol.machines._phases import PHASE_ORDER, CallKey, Phase, PhaseCalls, Slot
from quiesce.protocol.machines._policy_admission import (
    POLICY_ADMISSION,
    AdmissionData,
    PolicyInput,
    PolicyState,
)
from quiesce.protocol.machines._prompt_group import (
    PROMPT_GROUP,
    GroupData,
    GroupInput,
    GroupState,
)
from quiesce.protocol.machines._resources import (
    RESOURCES,
    Mutation,
    RecoveryMode,
    ResourcesData,
    ResourcesInput,
    ResourcesState,
)
from quiesce.protocol.machines._restore import (
    RESTORE,
    IntentAction,
    IntentDecision,
    IntentRecord,
    PublishedState,
    RestoreData,
    RestoreInput,
    RestoreState,
    decide_intent,
)
from quiesce.protocol.machines._rollout_attempt import (
    DONE_ATTEMPT_STATES,
    LIVE_ATTEMPT_STATES,
    ROLLOUT_ATTEMPT,
    AttemptData,
    AttemptInput,
    AttemptState,
)


class UnknownTable(QuiesceError):
    """No machine is called `name`; `known` lists the names that are."""

    def __init__(self, name: str, known: list[str]) -> None:
        self.name = name
        self.known = known
        super().__init__(f"no table named {name!r}; known tables: {', '.join(known)}")


TABLES: Mapping[str, Table[Any, Any]] = MappingProxyType(
    {
        table.name: table
        for table in (
            CHECKPOINT,  # M1
            CONTROL_FENCE,  # M2
            AGENT_EXECUTION,  # M3
            POLICY_ADMISSION,  # M4
            RESOURCES,  # M5
            ADMISSION_GATE,  # M6
            DEADLINE_REGISTRY,  # M7
            ROLLOUT_ATTEMPT,  # M8
            PROMPT_GROUP,  # M8
            RESTORE,  # M9
            CALL,  # one control call of a phase (§3, §4)
        )
    }
)
"""Every machine of the protocol by name, in the spec's order (M1-M9), then the per-call
lifecycle the controller's phases share."""


def get_table(name: str) -> Table[Any, Any]:
    """The machine called `name`, or `UnknownTable` listing the known names."""
    if name not in TABLES:
        raise UnknownTable(name, list(TABLES))
    return TABLES[name]


__all__ = [
    "ADMISSION_GATE",
    "AGENT_EXECUTION",
    "ATTEMPT_STATES",
    "CALL",
    "CHECKPOINT",
    "CONTROL_FENCE",
    "DEADLINE_REGISTRY",
    "DONE_ATTEMPT_STATES",
    "LIVE_ATTEMPT_STATES",
    "PHASE_ORDER",
    "POLICY_ADMISSION",
    "PROMPT_GROUP",
    "RESOURCES",
    "RESTORE",
    "ROLLOUT_ATTEMPT",
    "TABLES",
    "TRANSIENT_CAUSES",
    "Admission",
    "AdmissionData",
    "AgentInput",
    "Attempt",
    "AttemptData",
    "AttemptInput",
    "AttemptState",
    "CallData",
    "CallEvent",
    "CallInput",
    "CallKey",
    "CallState",
    "CheckpointData",
    "CheckpointInput",
    "CheckpointState",
    "Completion",
    "DeadlineArg",
    "DeadlineExpired",
    "Deadlines",
    "ExecAnswer",
    "ExecState",
    "ExecutionData",
    "FenceCall",
    "FenceData",
    "FenceInput",
    "FenceJoin",
    "FenceLateOutcome",
    "FenceOp",
    "FenceRefusal",
    "FenceReplay",
    "FenceRetire",
    "FenceStart",
    "FenceState",
    "GateInput",
    "GateState",
    "GroupData",
    "GroupInput",
    "GroupState",
    "Holder",
    "HolderSet",
    "Holders",
    "IntentAction",
    "IntentDecision",
    "IntentRecord",
    "Mutation",
    "Phase",
    "PhaseCalls",
    "PolicyInput",
    "PolicyState",
    "PublishedState",
    "RecoveryMode",
    "RegistryInput",
    "RegistryState",
    "ResourcesData",
    "ResourcesInput",
    "ResourcesState",
    "Restart",
    "RestoreData",
    "RestoreInput",
    "RestoreState",
    "ResumeDeadlines",
    "Slot",
    "SuspendDeadlines",
    "Trigger",
    "UnknownTable",
    "deadline_timer",
    "decide_intent",
    "get_table",
    "group_of_timer",
    "stops_the_run",
]
