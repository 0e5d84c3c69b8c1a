"""PROTOCOL.md §3, in one place: the remote phases, the order their roles are called in, and
a phase in progress.

What lives here: `Phase`, `PHASE_ORDER` (the one table of §3 that the checkpoint, M1, and
the restore at start, M9, both walk) and `PhaseCalls`, the progress of one phase: which
role is being called and every call of the phase as a `call` table value. What it does not
know: who has a role, what a call carries, or what its reply means.

    phase               order (within one role, every call at once)
    prepare             policy -> agent -> resources
    commit              agent -> policy -> resources   (policy needs the agents' continuations)
    restore             policy -> agent -> resources
    resume / abort      resources -> policy -> agent   (abort: the conflicting ids first, S5)
    discard             agent                           (only agents hold continuations, S12)

>>> [str(slot.role) for slot in PHASE_ORDER[Phase.COMMIT]]
['agent', 'policy', 'resources']
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import Enum
from types import MappingProxyType

from quiesce.fsm import Value
from quiesce.protocol._ids import OpId
from quiesce.protocol._messages import Role
from quiesce.protocol.machines._call import CallData, CallState

__all__ = ["PHASE_ORDER", "CallKey", "Phase", "PhaseCalls", "Slot"]


class Phase(Enum):
    """A remote phase: one op sent to every participant that has a part in it, role by role."""

    PREPARE = "prepare"
    COMMIT = "commit"
    RESTORE = "restore"
    DISCARD = "discard"
    RESUME = "resume"  # the release of a published checkpoint, the resume of a restore
    ABORT = "abort"  # the resume of an id that is not published (or a rejected restore)


@dataclass(frozen=True, slots=True)
class Slot:
    """One step of a phase's order: a role, and whether it calls the *conflicting* ids that
    participants reported (`checkpoint_conflict`, S5) instead of the phase's own id."""

    role: Role
    conflicting: bool = False


def _roles(*roles: Role, conflicting: bool = False) -> tuple[Slot, ...]:
    return tuple(Slot(role, conflicting) for role in roles)


_RESUME = (Role.RESOURCES, Role.POLICY, Role.AGENT)

PHASE_ORDER: Mapping[Phase, tuple[Slot, ...]] = MappingProxyType(
    {
        Phase.PREPARE: _roles(Role.POLICY, Role.AGENT, Role.RESOURCES),
        Phase.COMMIT: _roles(Role.AGENT, Role.POLICY, Role.RESOURCES),
        Phase.RESTORE: _roles(Role.POLICY, Role.AGENT, Role.RESOURCES),
        Phase.DISCARD: _roles(Role.AGENT),
        Phase.RESUME: _roles(*_RESUME),
        # A participant fenced to another id refuses resume(X) until that id is resumed.
        Phase.ABORT: _roles(*_RESUME, conflicting=True) + _roles(*_RESUME),
    }
)
"""§3: every phase's slots, called in this order."""


CallKey = tuple[str, OpId]
"""A call of a phase: the participant called and the op id the call carries."""


@dataclass(frozen=True, slots=True)
class PhaseCalls:
    """A phase in progress: `phase`, the index of the slot being called (`role`), and every
    call of the phase so far, sorted by key, each a value of the `call` table."""

    phase: Phase
    role: int = 0
    calls: tuple[tuple[CallKey, Value[CallState, CallData]], ...] = ()

    def get(self, key: CallKey) -> Value[CallState, CallData] | None:
        """The call `key`, or None if the phase never made it."""
        for known, value in self.calls:
            if known == key:
                return value
        return None

    def with_call(self, key: CallKey, value: Value[CallState, CallData]) -> PhaseCalls:
        """The phase with call `key` set to `value` (added, or replaced)."""
        kept = [(k, v) for k, v in self.calls if k != key]
        return replace(self, calls=tuple(sorted((*kept, (key, value)), key=_by_key)))

    def keys(self, *states: CallState) -> frozenset[CallKey]:
        """The calls in any of `states`."""
        return frozenset(k for k, v in self.calls if v.state in states)

    def restarted(self) -> PhaseCalls:
        """The phase called again from its first slot, keeping only the calls answered (a
        retried abort or release skips whoever already answered)."""
        answered = tuple((k, v) for k, v in self.calls if v.state is CallState.ANSWERED)
        return PhaseCalls(self.phase, 0, answered)


def _by_key(item: tuple[CallKey, Value[CallState, CallData]]) -> CallKey:
    return item[0]
