"""The controller's state: one frozen value the coordinator steps.

What lives here: `ControllerState` (every table value the controller composes, the ledger
and its bookkeeping), the fleet discovery established (`Fleet`, `Member`) and the restore
in progress (`RestoreRun`). What does not: any decision; `Coordinator.step` and the restore
flow compute the next state.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from quiesce.fsm import Value
from quiesce.protocol._ids import OpId
from quiesce.protocol._levels import RecoveryLevel
from quiesce.protocol._messages import Continuation, RestoreReply, Role
from quiesce.protocol.controller._effects import Op
from quiesce.protocol.controller._ledger import Ledger, OwedAck
from quiesce.protocol.controller._recovery_levels import EffectiveLevel
from quiesce.protocol.controller._restore_plan import (
    DiscardContinuation,
    NewGroup,
    RestoreMetrics,
    Selection,
    SnapshotCandidate,
    SourceUnreadable,
    TrainerAnchor,
)
from quiesce.protocol.machines import (
    Attempt,
    CallData,
    CallState,
    CheckpointData,
    CheckpointState,
    Deadlines,
    GateState,
    Holders,
    IntentDecision,
    PhaseCalls,
    RegistryState,
    RestoreData,
    RestoreState,
)

__all__ = [
    "ControllerState",
    "Fleet",
    "Member",
    "RestoreRun",
    "restore_active",
    "restore_failed",
]


@dataclass(frozen=True, slots=True)
class Member:
    """One fenced participant: its name, role, and the incarnation last seen."""

    name: str
    role: Role
    incarnation: str


@dataclass(frozen=True, slots=True)
class Fleet:
    """What discovery established: fenced participants (by name), the topology
    fingerprint, and every environment's effective recovery levels."""

    members: tuple[Member, ...]
    fingerprint: str
    levels: tuple[EffectiveLevel, ...] = ()
    group_scored: frozenset[str] = frozenset()  # environments whose scorer waits for all G

    @property
    def names(self) -> frozenset[str]:
        """Every fenced participant."""
        return frozenset(m.name for m in self.members)

    def role_of(self, name: str) -> Role | None:
        """The role of `name`, or None if it is not a fenced participant."""
        for member in self.members:
            if member.name == name:
                return member.role
        return None

    def incarnation(self, name: str) -> str | None:
        """The incarnation last seen from `name`."""
        for member in self.members:
            if member.name == name:
                return member.incarnation
        return None

    def with_incarnation(self, name: str, incarnation: str) -> Fleet:
        """The fleet after `name` was seen with `incarnation`."""
        members = tuple(
            replace(m, incarnation=incarnation) if m.name == name else m for m in self.members
        )
        return replace(self, members=members)

    def live_level(self, environment: str, default: RecoveryLevel) -> RecoveryLevel:
        """The live level of `environment` (M8), or `default` if discovery did not list it."""
        for level in self.levels:
            if level.environment == environment:
                return level.live_level
        return default


BackgroundKey = tuple[str, Op, str]
"""An ACK batch or a retire: the agent called, the op, and what it is about ("" for the
agent's background batch, the attempt's id for its strict flush, `rollout#attempt` for a
retire)."""


@dataclass(frozen=True, slots=True)
class BackgroundCall:
    """One ACK batch or retire: its `call` table value, what it carries (the batch's
    `OwedAck`s, or the retired attempt's key) and, for M1's strict flush, the attempt's id
    (None: a background call)."""

    value: Value[CallState, CallData]
    payload: Any
    op_id: OpId | None = None


@dataclass(frozen=True, slots=True)
class ControllerState:
    """Everything the controller knows; frozen, hashable, compact.

    `checkpoint` (M1), `gate` (M6) and `deadlines` (M7) are table values; `ledger` is M8;
    `fleet` is None until discovery; `seq` is the last id sequence number used in `epoch`
    (checkpoint and restore ids alike); `trainer_step`, `anchor_step` and `optimizer_busy`
    are the trainer's position, `anchor_checkpoint` the attempt the anchor's boundary
    triggered; `mutated` says whether anything changed since the last published snapshot.
    `restore` is the M9 table value (None until `Recovered`) and `restoring` the
    bookkeeping of the restore in progress (None when none runs).
    `unowned_acks` is the second part of the ACK outbox: `(agent, receipt)` of completions
    the ledger does not own (work of an interval a restore rolled back), owed an ACK so
    their agent can be ready again, never trained; `unowned_dropped` counts them.
    `background` are the background calls (`_background`): each agent's ACK batch and the
    retires, keyed by `(agent, op, subject)`, each a value of the `call` table with what it
    carries; one in flight (waiting, or backing off) stops a second of the same key, so
    batches never pile up, and a failed one stays until its agent answers again.
    `refused_groups` are the groups whose dispatch failed (a refused or failed `begin`) and
    were redispatched at once: a second failure before their deadline expires waits for
    that deadline, so an agent that refuses every `begin` is retried once per
    `rollout_timeout_s`, never in a hot loop.
    """

    epoch: int
    checkpoint: Value[CheckpointState, CheckpointData]
    gate: Value[GateState, Holders]
    deadlines: Value[RegistryState, Deadlines]
    ledger: Ledger = field(default_factory=Ledger)
    fleet: Fleet | None = None
    seq: int = 0
    trainer_step: int = 0
    anchor_step: int | None = None
    optimizer_busy: bool = False
    mutated: bool = True
    anchor_checkpoint: OpId | None = None
    restore: Value[RestoreState, RestoreData] | None = None
    restoring: RestoreRun | None = None
    unowned_acks: tuple[tuple[str, OwedAck], ...] = ()
    unowned_dropped: int = 0
    background: tuple[tuple[BackgroundKey, BackgroundCall], ...] = ()
    refused_groups: frozenset[str] = frozenset()

    @property
    def phase(self) -> CheckpointState:
        """The M1 state."""
        return self.checkpoint.state

    @property
    def attempt(self) -> Attempt | None:
        """The checkpoint attempt in flight (or kept by `stopped` for the next start)."""
        return self.checkpoint.data.attempt


@dataclass(frozen=True, slots=True)
class RestoreRun:
    """What the coordinator tracks about the restore in progress (M9's own data, the
    snapshot and the retries used on it, is the `restore` table value's `RestoreData`).

    `calls` is the remote phase in progress on `op_id` (restore, discard, resume, or the
    abort of a rejected restore or of the conflicting ids; None: none); `touched` the
    participants a restore call was sent to (aborted if the snapshot is rejected);
    `replies` and `failures` what the restore calls answered so far (judged role by role,
    S16); `conflicts` the participants that refused a restore call as fenced to another
    id, and that id (resumed first, S5).
    """

    intent: OpId | None = None
    decision: IntentDecision | None = None
    started_at: float = 0.0
    anchor: TrainerAnchor | SourceUnreadable | None = None
    candidates: tuple[SnapshotCandidate, ...] | SourceUnreadable | None = None  # None: unlisted
    selection: Selection | None = None
    loaded: bool = False
    digests: tuple[tuple[str, str], ...] = ()
    ledger: Ledger | None = None
    op_id: OpId | None = None
    calls: PhaseCalls | None = None
    touched: frozenset[str] = frozenset()
    replies: tuple[tuple[str, RestoreReply], ...] = ()
    failures: tuple[tuple[str, bool], ...] = ()  # participant -> retryable
    conflicts: frozenset[tuple[str, OpId]] = frozenset()
    restored: tuple[tuple[str, Continuation], ...] = ()
    discards: tuple[DiscardContinuation, ...] = ()
    pending_discards: tuple[DiscardContinuation, ...] = ()
    new_work: tuple[NewGroup, ...] = ()
    metrics: RestoreMetrics | None = None

    @property
    def snapshot(self) -> SnapshotCandidate | None:
        """The snapshot selected last (None: none yet, or a fresh start)."""
        return None if self.selection is None else self.selection.snapshot


_ENDED = (RestoreState.IDLE, RestoreState.RESTORE_FAILED)
_ACTIVE = frozenset(s for s in RestoreState if s not in _ENDED)


def restore_active(state: ControllerState) -> bool:
    """Is a restore running (started and neither idle nor restore_failed)?"""
    return state.restore is not None and state.restore.state in _ACTIVE


def restore_failed(state: ControllerState) -> bool:
    """Did the restore end in `restore_failed` (the controller does nothing more)?"""
    return state.restore is not None and state.restore.state is RestoreState.RESTORE_FAILED
