"""The state labels of the design model: one `StrEnum` per machine whose state it keeps,
the kinds of M2's answers (`FenceAnswer`) and the phases of the controller's walk
(`WalkPhase`).

What lives here: `M1Label`, `FenceLabel`, `ExecLabel`, `PolicyLabel`, `ResourcesLabel`,
`GateLabel`, `RegistryLabel`, `AttemptLabel`, `GroupLabel` and `M9Label`, each generated
from its machine's state enum in `quiesce.protocol.machines` (same member names, same
values), so a state added, dropped or renamed there is one here too; `WalkPhase`, the walk
`_state.Walk` is in (the design's own: no protocol enum has the capture's re-flush or the
restore's walks). What it does not know: how a label moves (`_tables`), or what a walk
calls (`_state.next_call`).

Why `StrEnum`, not the protocol's enums: the explorer hashes every state on every lookup.
A `StrEnum` member hashes and compares with `str`'s C code and equals its value, so state
counts, fingerprints, sort orders, JSON and traces are those of the plain strings; a plain
`Enum`'s `__hash__` is Python code. Its `repr` is the string's too. On Python 3.11 reading
`Label.MEMBER` is slow (`EnumType.__getattr__`), so tuples of members read on every state
are module constants.

To the type checker each label *is* its protocol enum (the labels are generated at run
time, which it cannot follow): a member it does not know, `M1Label.IDEL`, fails `mypy`
exactly as `CheckpointState.IDEL` would.
"""

from __future__ import annotations

from enum import Enum, StrEnum
from typing import TYPE_CHECKING

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
    "FenceAnswer",
    "FenceLabel",
    "GateLabel",
    "GroupLabel",
    "M1Label",
    "M9Label",
    "PolicyLabel",
    "RegistryLabel",
    "ResourcesLabel",
    "WalkPhase",
    "labels_of",
]


class _Label(StrEnum):
    """A state label: a `str` in all but its type (its `repr` included)."""

    __repr__ = str.__repr__


def labels_of(name: str, states: type[Enum]) -> type[StrEnum]:
    """The labels of `states`, a `StrEnum` called `name` (this module's attribute of that
    name, so a label pickles): one member per state, of the state's name and value."""
    members = [(s.name, s.value) for s in states]
    return _Label(name, members, module=__name__)  # type: ignore[call-arg,return-value]


class FenceAnswer(StrEnum):
    """What M2 answers a request with, in the design's compact effects (`Steppers.fence`):
    one per kind of the table's bound answer (`FenceStart`, `FenceReplay`, ...)."""

    START = "start"
    REPLAY = "replay"
    RETIRE = "retire"
    REFUSE = "refuse"
    JOIN = "join"
    LATE = "late"


class WalkPhase(_Label):
    """The controller's walk (`_state.Walk.phase`): which remote phase it calls the
    participants for, in its §3 order (`_state.ORDERS`), one call a step.

    `NONE` (`""`, false): no walk. Of a checkpoint (M1, `_state.M1_PHASE`): `FLUSH` the
    ACK outbox, `PREPARE`, `COMMIT`, `REFLUSH` (the capture's re-flush, S7), `RELEASE`,
    `ABORT`. Of a restore (M9, `_state.M9_PHASE`): `RESTORE`, `DISCARD` (S12),
    `RESUME_RS` (resume after a restore), `ABORT_RS` (abort a rejected restore). A phase
    is not an op: the ops a walk sends (`_state.next_call`) are plain strings, though a
    phase named like one (`prepare`, `commit`, `restore`, `discard`) equals it.
    """

    NONE = ""
    FLUSH = "flush"
    PREPARE = "prepare"
    COMMIT = "commit"
    REFLUSH = "reflush"
    RELEASE = "release"
    ABORT = "abort"
    RESTORE = "restore"
    DISCARD = "discard"
    RESUME_RS = "resume_rs"
    ABORT_RS = "abort_rs"


if TYPE_CHECKING:
    M1Label = CheckpointState
    FenceLabel = FenceState
    ExecLabel = ExecState
    PolicyLabel = PolicyState
    ResourcesLabel = ResourcesState
    GateLabel = GateState
    RegistryLabel = RegistryState
    AttemptLabel = AttemptState
    GroupLabel = GroupState
    M9Label = RestoreState
else:
    M1Label = labels_of("M1Label", CheckpointState)
    """M1 `checkpoint` (`CheckpointState`)."""
    FenceLabel = labels_of("FenceLabel", FenceState)
    """M2 `control_fence` (`FenceState`)."""
    ExecLabel = labels_of("ExecLabel", ExecState)
    """M3 `agent_execution` (`ExecState`)."""
    PolicyLabel = labels_of("PolicyLabel", PolicyState)
    """M4 `policy_admission` (`PolicyState`)."""
    ResourcesLabel = labels_of("ResourcesLabel", ResourcesState)
    """M5 `resources` (`ResourcesState`)."""
    GateLabel = labels_of("GateLabel", GateState)
    """M6 `admission_gate` (`GateState`)."""
    RegistryLabel = labels_of("RegistryLabel", RegistryState)
    """M7 `deadline_registry` (`RegistryState`)."""
    AttemptLabel = labels_of("AttemptLabel", AttemptState)
    """M8 `rollout_attempt` (`AttemptState`)."""
    GroupLabel = labels_of("GroupLabel", GroupState)
    """M8 `prompt_group` (`GroupState`)."""
    M9Label = labels_of("M9Label", RestoreState)
    """M9 `restore` (`RestoreState`)."""
