"""The state labels of the design model: one `StrEnum` per machine whose state it keeps.

What lives here: `M1Label`, `FenceLabel`, `ExecLabel`, `PolicyLabel`, `ResourcesLabel`,
`GateLabel`, `RegistryLabel`, `AttemptLabel`, `GroupLabel` and `M9Label`, each mirroring
its machine's state enum in `quiesce.protocol.machines` (`X = ProtocolEnum.X.value`: a
renamed protocol member breaks the import, a state added or dropped there raises
`LabelMismatch` at import). What it does not know: how a label moves (`_tables`).

Why `StrEnum`, not the protocol's enums: the explorer hashes every state on every lookup.
A `StrEnum` member hashes and compares with `str`'s C code and equals its value, so state
counts, fingerprints, sort orders, JSON and traces are those of the plain strings; a plain
`Enum`'s `__hash__` is Python code. Its `repr` is the string's too. On Python 3.11 reading
`Label.MEMBER` is slow (`EnumType.__getattr__`), so tuples of members read on every state
are module constants.
"""

from __future__ import annotations

from enum import Enum, StrEnum

from quiesce.fsm import QuiesceError
from quiesce.protocol.machines import (
    AttemptState,
    CheckpointState,
    ExecState,
    FenceState,
    GateState,
    GroupState,
    PolicyState,
    RegistryState,
    ResourcesState,
    RestoreState,
)

__all__ = [
    "AttemptLabel",
    "ExecLabel",
    "FenceLabel",
    "GateLabel",
    "GroupLabel",
    "LabelMismatch",
    "M1Label",
    "M9Label",
    "PolicyLabel",
    "RegistryLabel",
    "ResourcesLabel",
]


class _Label(StrEnum):
    """A state label: a `str` in all but its type (its `repr` included)."""

    __repr__ = str.__repr__


class M1Label(_Label):
    """M1 `checkpoint` (`CheckpointState`)."""

    IDLE = CheckpointState.IDLE.value
    CLOSING_ADMISSION = CheckpointState.CLOSING_ADMISSION.value
    FLUSHING_ACKS = CheckpointState.FLUSHING_ACKS.value
    PREPARING = CheckpointState.PREPARING.value
    COMMITTING = CheckpointState.COMMITTING.value
    CAPTURING = CheckpointState.CAPTURING.value
    VALIDATING = CheckpointState.VALIDATING.value
    PUBLISHING = CheckpointState.PUBLISHING.value
    RELEASING = CheckpointState.RELEASING.value
    ABORTING = CheckpointState.ABORTING.value
    ABORT_PENDING = CheckpointState.ABORT_PENDING.value
    RELEASE_PENDING = CheckpointState.RELEASE_PENDING.value
    STOPPED = CheckpointState.STOPPED.value


class FenceLabel(_Label):
    """M2 `control_fence` (`FenceState`)."""

    IDLE = FenceState.IDLE.value
    PREPARING = FenceState.PREPARING.value
    PREPARED = FenceState.PREPARED.value
    COMMITTING = FenceState.COMMITTING.value
    COMMITTED_PAUSED = FenceState.COMMITTED_PAUSED.value
    RESTORING = FenceState.RESTORING.value
    RESTORE_FAILED_PAUSED = FenceState.RESTORE_FAILED_PAUSED.value
    RESTORED_PAUSED = FenceState.RESTORED_PAUSED.value


class ExecLabel(_Label):
    """M3 `agent_execution` (`ExecState`)."""

    NEW = ExecState.NEW.value
    RUNNING = ExecState.RUNNING.value
    PARK_REQUESTED = ExecState.PARK_REQUESTED.value
    PARKED = ExecState.PARKED.value
    FROZEN = ExecState.FROZEN.value
    COMPLETED = ExecState.COMPLETED.value
    ACKED = ExecState.ACKED.value
    TOMBSTONED = ExecState.TOMBSTONED.value


class PolicyLabel(_Label):
    """M4 `policy_admission` (`PolicyState`)."""

    ACCEPTING = PolicyState.ACCEPTING.value
    DRAINING = PolicyState.DRAINING.value
    PAUSED = PolicyState.PAUSED.value


class ResourcesLabel(_Label):
    """M5 `resources` (`ResourcesState`)."""

    ACCEPTING = ResourcesState.ACCEPTING.value
    DRAINING = ResourcesState.DRAINING.value
    FROZEN = ResourcesState.FROZEN.value


class GateLabel(_Label):
    """M6 `admission_gate` (`GateState`)."""

    OPEN = GateState.OPEN.value
    CLOSED = GateState.CLOSED.value


class RegistryLabel(_Label):
    """M7 `deadline_registry` (`RegistryState`)."""

    RUNNING = RegistryState.RUNNING.value
    SUSPENDED = RegistryState.SUSPENDED.value


class AttemptLabel(_Label):
    """M8 `rollout_attempt` (`AttemptState`)."""

    RESERVED = AttemptState.RESERVED.value
    DISPATCHED = AttemptState.DISPATCHED.value
    SEALED = AttemptState.SEALED.value
    FAILED = AttemptState.FAILED.value
    ABANDONED = AttemptState.ABANDONED.value


class GroupLabel(_Label):
    """M8 `prompt_group` (`GroupState`)."""

    GENERATING = GroupState.GENERATING.value
    READY_TO_FINALIZE = GroupState.READY_TO_FINALIZE.value
    FINALIZING = GroupState.FINALIZING.value
    FINALIZATION_UNKNOWN = GroupState.FINALIZATION_UNKNOWN.value
    FINALIZED = GroupState.FINALIZED.value
    ABANDONED = GroupState.ABANDONED.value


class M9Label(_Label):
    """M9 `restore` (`RestoreState`)."""

    FINISHING_INTENT = RestoreState.FINISHING_INTENT.value
    SELECTING = RestoreState.SELECTING.value
    RESTORING = RestoreState.RESTORING.value
    RESTORED_PAUSED = RestoreState.RESTORED_PAUSED.value
    DISCARDING = RestoreState.DISCARDING.value
    RESUMING = RestoreState.RESUMING.value
    REDISPATCHING = RestoreState.REDISPATCHING.value
    IDLE = RestoreState.IDLE.value
    RESTORE_FAILED = RestoreState.RESTORE_FAILED.value


class LabelMismatch(QuiesceError):
    """The labels `labels` do not mirror the protocol's states `states`: `missing` are
    protocol values with no label, `extra` labels with no protocol state."""

    def __init__(self, labels: str, states: str, missing: list[str], extra: list[str]) -> None:
        self.labels = labels
        self.states = states
        self.missing = missing
        self.extra = extra
        super().__init__(
            f"{labels} does not mirror {states}: missing {missing or 'none'}, "
            f"extra {extra or 'none'}"
        )


def _check_mirrors(*pairs: tuple[type[StrEnum], type[Enum]]) -> None:
    """Raise `LabelMismatch` unless each pair's labels have exactly its states' values."""
    for labels, states in pairs:
        ours = {label.value for label in labels}
        theirs = {state.value for state in states}
        if ours != theirs:
            raise LabelMismatch(
                labels.__name__, states.__name__, sorted(theirs - ours), sorted(ours - theirs)
            )


_check_mirrors(
    (M1Label, CheckpointState),
    (FenceLabel, FenceState),
    (ExecLabel, ExecState),
    (PolicyLabel, PolicyState),
    (ResourcesLabel, ResourcesState),
    (GateLabel, GateState),
    (RegistryLabel, RegistryState),
    (AttemptLabel, AttemptState),
    (GroupLabel, GroupState),
    (M9Label, RestoreState),
)
