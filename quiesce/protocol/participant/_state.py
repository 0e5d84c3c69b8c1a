"""The participant's state value, its configuration and the role effects it emits.

What lives here: `ParticipantConfig` (what the participant is, §2), `ParticipantState`
(config, incarnation, fence value, role value: frozen and hashable, so the explorer can
store millions of them) and the effects a role emits on resume or retire. Behaviour lives
in `_participant.py` (requests), `_control_ops.py` (fence-run operations) and
`_journal.py` (the durable part, §6).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias

from quiesce.fsm import Value
from quiesce.protocol._messages import (
    Capabilities,
    InstanceRole,
    Message,
    Role,
)
from quiesce.protocol.machines import CONTROL_FENCE, FenceData, FenceState, RecoveryMode
from quiesce.protocol.participant._agent_role import AgentRole
from quiesce.protocol.participant._service_roles import PolicyRole, ResourcesRole

__all__ = [
    "CancelExecution",
    "ParticipantConfig",
    "ParticipantState",
    "ReleaseWaiters",
    "Result",
    "RoleEffect",
    "RoleState",
    "WakeExecutions",
    "capabilities",
    "fresh_role",
    "new_participant",
    "restamp",
    "stamp",
]


class ParticipantConfig(Message):
    """What a participant is (§2 discovery): fixed for its lifetime, kept in its journal."""

    name: str
    role: Role
    instance_role: InstanceRole = InstanceRole.PRIMARY
    recovery_mode: str = "restart_only"
    group_scored: bool = False
    group_size: int | None = None
    multi_process: str = "single_worker"
    features: tuple[str, ...] = ()

    @property
    def fenced(self) -> bool:
        """Auxiliary policy servers are never fenced: they answer discovery only."""
        return not (self.role is Role.POLICY and self.instance_role is InstanceRole.AUXILIARY)


RoleState: TypeAlias = AgentRole | PolicyRole | ResourcesRole


@dataclass(frozen=True, slots=True)
class ParticipantState:
    """A participant's whole state: a frozen, hashable value (the explorer stores it)."""

    config: ParticipantConfig
    incarnation: str
    fence: Value[FenceState, FenceData]
    role: RoleState


# ----------------------------------------------------------------------------- effects


@dataclass(frozen=True, slots=True)
class ReleaseWaiters:
    """Resume: the policy calls or resources mutations held as waiters proceed now."""

    ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class WakeExecutions:
    """Resume: these parked agent executions run again from their boundary."""

    keys: tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class CancelExecution:
    """A live execution was tombstoned: stop its `/run` (a late finish is dropped anyway)."""

    rollout_id: str
    attempt: int


RoleEffect: TypeAlias = ReleaseWaiters | WakeExecutions | CancelExecution
Result: TypeAlias = tuple[ParticipantState, Message, tuple[RoleEffect, ...]]
"""What every request handler returns: `(next_state, reply, effects)`."""


# ------------------------------------------------------------------------ construction


def new_participant(
    config: ParticipantConfig | Mapping[str, Any], incarnation: str
) -> ParticipantState:
    """A fresh participant: fence idle, role open. `incarnation` is the caller's random token.

    >>> state = new_participant({"name": "agent-0", "role": "agent"}, "inc-1")
    >>> state.fence.state.value
    'idle'
    """
    cfg = (
        config
        if isinstance(config, ParticipantConfig)
        else ParticipantConfig.model_validate(config)
    )
    return ParticipantState(cfg, incarnation, CONTROL_FENCE.start(), fresh_role(cfg))


def fresh_role(config: ParticipantConfig) -> RoleState:
    if config.role is Role.AGENT:
        return AgentRole()
    if config.role is Role.POLICY:
        return PolicyRole(fenced=config.fenced)
    mode = config.recovery_mode
    known = mode in {m.value for m in RecoveryMode}
    # An unknown mode is refused at setup by the controller (S13); here it gets the safe one.
    return ResourcesRole(mode=RecoveryMode(mode) if known else RecoveryMode.RESTART_ONLY)


def capabilities(state: ParticipantState) -> Capabilities:
    """The discovery answer (§2) of this participant."""
    c = state.config
    return Capabilities(
        participant=c.name,
        incarnation=state.incarnation,
        role=c.role,
        instance_role=c.instance_role,
        recovery_mode=c.recovery_mode,
        group_scored=c.group_scored,
        group_size=c.group_size,
        multi_process=c.multi_process,
        features=c.features,
    )


def stamp(state: ParticipantState) -> dict[str, str]:
    """The fields every reply carries: who answered, and which incarnation of it."""
    return {"participant": state.config.name, "incarnation": state.incarnation}


def restamp(state: ParticipantState, reply: Message) -> Message:
    """A recorded reply answered again, under the *current* incarnation: a replay after a
    restart must still show the controller the restart (§4 participant_restarted)."""
    return reply.model_copy(update={"incarnation": state.incarnation})
