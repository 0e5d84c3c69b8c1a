"""The rules a participant runs by: the tables its pure step fires.

What lives here: `ParticipantRules`, one frozen value naming every machine a participant
steps (its fence, M2, and its role's: M3 agent execution, M4 policy admission, M5
resources), and `PARTICIPANT_RULES`, the protocol's own. Every function of this room that
steps a machine takes the rules as a parameter: the public entry points (`handle`, the
internal events, `from_journal`) default to `PARTICIPANT_RULES`, so an adapter never
passes them; the roles' methods require them, so no step can silently fall back to the
protocol's tables while a variant runs. A model checker passes derived tables
(`Table.retarget`, `without_guard`, ...) to run a variant of the participant through the
very same code, with no module attribute swapped.

What it does not know: how the tables are used. A derived table keeps its original's
initial state and data, so a fresh participant (`new_participant`) is the same under any
rules.

>>> PARTICIPANT_RULES.fence.name
'control_fence'
"""

from __future__ import annotations

from dataclasses import dataclass

from quiesce.fsm import Table
from quiesce.protocol.machines import (
    AGENT_EXECUTION,
    CONTROL_FENCE,
    POLICY_ADMISSION,
    RESOURCES,
    AgentInput,
    ExecState,
    FenceInput,
    FenceState,
    PolicyInput,
    PolicyState,
    ResourcesInput,
    ResourcesState,
)

__all__ = ["PARTICIPANT_RULES", "ParticipantRules"]


@dataclass(frozen=True, slots=True)
class ParticipantRules:
    """The machines one participant steps; each defaults to the protocol's own table.

    `fence`: `control_fence` (M2); `agent`: `agent_execution` (M3, one value per
    execution); `policy`: `policy_admission` (M4); `resources`: `resources` (M5).
    """

    fence: Table[FenceState, FenceInput] = CONTROL_FENCE
    agent: Table[ExecState, AgentInput] = AGENT_EXECUTION
    policy: Table[PolicyState, PolicyInput] = POLICY_ADMISSION
    resources: Table[ResourcesState, ResourcesInput] = RESOURCES


PARTICIPANT_RULES = ParticipantRules()
"""The protocol's participant: every table as PROTOCOL.md declares it."""
