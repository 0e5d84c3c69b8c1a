"""The state labels of the design model: one `StrEnum` per machine whose state it keeps,
generated from the machine's state enum in `quiesce.protocol.machines` (same member names
and values, so a state added or renamed there is one here too), the kinds of M2's answers
(`FenceAnswer`) and the phases of the controller's walk (`WalkPhase`). What it does not
know: how a label moves (`_tables`), or what a walk calls (`_step.next_call`).

Why `StrEnum`, not the protocol's enums: the explorer hashes every state on every lookup,
and a `StrEnum` member hashes and compares with `str`'s C code and equals its value, so
state counts, fingerprints, sort orders, JSON and traces are those of the plain strings (a
plain `Enum`'s `__hash__` is Python code). On Python 3.11 reading `Label.MEMBER` is slow,
so tuples of members read on every state are module constants. To the type checker each
label *is* its protocol enum, so a member it does not know fails `mypy` as it would there.
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
    participants for, one call a step. `NONE` (`""`, false): no walk; `REFLUSH` is the
    capture's re-flush (S7), `RESUME_RS`/`ABORT_RS` resume after / abort a restore. A phase
    is not an op, though one named like an op equals it.
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
    FenceLabel = labels_of("FenceLabel", FenceState)
    ExecLabel = labels_of("ExecLabel", ExecState)
    PolicyLabel = labels_of("PolicyLabel", PolicyState)
    ResourcesLabel = labels_of("ResourcesLabel", ResourcesState)
    GateLabel = labels_of("GateLabel", GateState)
    RegistryLabel = labels_of("RegistryLabel", RegistryState)
    AttemptLabel = labels_of("AttemptLabel", AttemptState)
    GroupLabel = labels_of("GroupLabel", GroupState)
    M9Label = labels_of("M9Label", RestoreState)
