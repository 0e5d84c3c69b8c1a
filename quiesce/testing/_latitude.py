"""Where the protocol leaves a server a choice: the answers the kit accepts besides the
reference participant's own.

What lives here: the refusals of `begin` that apply to one request. docs/wire.md lists
`admission_closed`, `stale_attempt`, `duplicate_execution` and `unknown_execution` as
`begin`'s refusals, and neither it nor PROTOCOL.md says which wins when several apply (a
live key begun again while the fence is closed is both a duplicate and closed admission).
The reference participant picks one; a server that picks another applicable one conforms.
What it does not know: how a reply is compared (`_machine` asks, and judges the rest of the
reply as usual).
"""

from __future__ import annotations

from typing import Any

from quiesce.protocol.machines import FenceState
from quiesce.protocol.participant import AgentRole, ParticipantState

__all__ = ["BEGIN_REFUSALS", "begin_refusals"]

BEGIN_REFUSALS = frozenset(
    {"admission_closed", "stale_attempt", "duplicate_execution", "unknown_execution"}
)
"""The refusal codes of `begin` (docs/wire.md), among which the spec fixes no order."""


def begin_refusals(state: ParticipantState, body: Any) -> frozenset[str]:
    """Every refusal of `BEGIN_REFUSALS` whose condition holds for `begin(body)` on `state`
    (empty for a body that is not a well-formed begin, or a role that is not an agent)."""
    role = state.role
    if not isinstance(role, AgentRole) or not isinstance(body, dict):
        return frozenset()
    rollout_id, attempt = body.get("rollout_id"), body.get("attempt")
    resume_from_turn = body.get("resume_from_turn", 0)
    if not (isinstance(rollout_id, str) and isinstance(attempt, int)):
        return frozenset()
    live = role.find((rollout_id, attempt)) is not None
    codes = set()
    if state.fence.state is not FenceState.IDLE:
        codes.add("admission_closed")
    if live:
        codes.add("duplicate_execution")
    elif attempt <= role.highest_retired(rollout_id):
        codes.add("stale_attempt")
    if isinstance(resume_from_turn, int) and resume_from_turn > 0:
        previous = (rollout_id, attempt - 1)
        saved = [t for t in role.restored if (t.rollout_id, t.attempt) == previous]
        if not saved or saved[0].turn != resume_from_turn:
            codes.add("unknown_execution")
    return frozenset(codes)
