"""The participant's room: the control fence, the roles, the journal.

`handle(state, op, request, now) -> (state, reply, effects)` is one participant's pure
step: its fence (M2) and its role's machine (M3, M4 or M5), whose tables the
`ParticipantRules` passed as `rules` name (`PARTICIPANT_RULES`, the protocol's own, by
default). `journal_of` / `from_journal` keep what §6 says must survive a crash. Nothing here
knows the controller: it sees only wire requests.
"""

from quiesce.protocol.participant._agent_role import (
    AgentRole,
    Readiness,
    RefusalKey,
    SavedTurn,
    canonical_json,
    receipt_for,
)
from quiesce.protocol.participant._control_ops import (
    CONTROL_HANDLERS,
    artifact_digest,
)
from quiesce.protocol.participant._journal import (
    Journal,
    JournalExecution,
    JournalWrite,
    RecordedResult,
    Recovery,
    from_journal,
    journal_of,
)
from quiesce.protocol.participant._participant import (
    Answer,
    ParticipantEffect,
    ParticipantOp,
    agent_policy_call_held,
    agent_policy_call_resumed,
    handle,
    may_start_outbound_call,
    mutation_finished,
    mutation_started,
    policy_call_finished,
    policy_call_started,
)
from quiesce.protocol.participant._rules import PARTICIPANT_RULES, ParticipantRules
from quiesce.protocol.participant._service_roles import (
    PolicyRole,
    ResourcesRole,
)
from quiesce.protocol.participant._state import (
    CancelExecution,
    ParticipantConfig,
    ParticipantState,
    ReleaseWaiters,
    Result,
    RoleEffect,
    RoleState,
    WakeExecutions,
    capabilities,
    fresh_role,
    new_participant,
    restamp,
    stamp,
)

__all__ = [
    "CONTROL_HANDLERS",
    "PARTICIPANT_RULES",
    "AgentRole",
    "Answer",
    "CancelExecution",
    "Journal",
    "JournalExecution",
    "JournalWrite",
    "ParticipantConfig",
    "ParticipantEffect",
    "ParticipantOp",
    "ParticipantRules",
    "ParticipantState",
    "PolicyRole",
    "Readiness",
    "RecordedResult",
    "Recovery",
    "RefusalKey",
    "ReleaseWaiters",
    "ResourcesRole",
    "Result",
    "RoleEffect",
    "RoleState",
    "SavedTurn",
    "WakeExecutions",
    "agent_policy_call_held",
    "agent_policy_call_resumed",
    "artifact_digest",
    "canonical_json",
    "capabilities",
    "fresh_role",
    "from_journal",
    "handle",
    "journal_of",
    "may_start_outbound_call",
    "mutation_finished",
    "mutation_started",
    "new_participant",
    "policy_call_finished",
    "policy_call_started",
    "receipt_for",
    "restamp",
    "stamp",
]
