"""M5 resources (`resources`): may a per-rollout state change start on this server?

What lives here: the resources server's states, the mutations in flight and waiting, and
each rollout's **revision** (how many mutations of its state have finished), plus the
server's declared `RecoveryMode`. What it does not know: the fence (the participant fires
`FENCE_PREPARE` / `FENCE_RESUME`), what a mutation does, or how state is exported.

    accepting --FENCE_PREPARE [nothing_in_flight]--> frozen
    accepting --FENCE_PREPARE--> draining --MUTATION_FINISHED [last_mutation]--> frozen
    draining, frozen --FENCE_RESUME / release_waiters--> accepting
    frozen --IMPORT (restore: install revisions)--> frozen

Added state: `draining` (the spec's "waits for in-flight mutations" made visible, as in
M4): once prepare starts no mutation may start, so the wait ends. While `frozen` every
rollout's revision is fixed: that is what commit exports.

Recovery modes: `stateless` (nothing to save), `export_restore` (revisions exported at
commit, imported at restore), `restart_only` (the safe default: cannot be restored, so a
saved turn that depends on it is discarded and that rollout restarts from scratch).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

from quiesce.fsm import Table, on

__all__ = [
    "ARG_EXAMPLES",
    "RESOURCES",
    "Mutation",
    "RecoveryMode",
    "ResourcesData",
    "ResourcesInput",
    "ResourcesState",
]


class RecoveryMode(Enum):
    """How a resources server recovers (§2): the default is the safe `restart_only`."""

    STATELESS = "stateless"
    EXPORT_RESTORE = "export_restore"
    RESTART_ONLY = "restart_only"


class ResourcesState(Enum):
    ACCEPTING = "accepting"
    DRAINING = "draining"
    FROZEN = "frozen"


class ResourcesInput(Enum):
    MUTATION_STARTED = "mutation_started"  # an agent's call wants to change a rollout's state
    MUTATION_FINISHED = "mutation_finished"  # an admitted mutation is done
    FENCE_PREPARE = "fence_prepare"  # the fence started a prepare (or a restore)
    FENCE_RESUME = "fence_resume"  # the fence retired the op (resume = abort = release)
    IMPORT = "import"  # restore: install the revisions of a verified artifact


@dataclass(frozen=True, slots=True)
class Mutation:
    """The argument of mutation inputs: which call, on which rollout's state."""

    mutation_id: str
    rollout_id: str


Revisions = tuple[tuple[str, int], ...]  # sorted ((rollout_id, revision), ...)


@dataclass(frozen=True, slots=True)
class ResourcesData:
    """`in_flight`: admitted mutations; `waiters`: mutation ids held; `revisions`: sorted
    `((rollout_id, revision), ...)`."""

    in_flight: int = 0
    waiters: tuple[str, ...] = ()
    revisions: Revisions = ()

    def revision(self, rollout_id: str) -> int:
        """The revision of one rollout's state (0 if it was never mutated)."""
        return dict(self.revisions).get(rollout_id, 0)


# ----------------------------------------------------------------------------- the rows

S = ResourcesState
I = ResourcesInput  # noqa: E741  (h2's StreamInputs)
CLOSED = (S.DRAINING, S.FROZEN)

# fmt: off
_ROWS = (
    on(S.ACCEPTING, I.MUTATION_STARTED, None, update="admit", effects="admit_mutation"),
    on(CLOSED, I.MUTATION_STARTED, None, update="wait", effects="hold_as_waiter"),
    on(S.ACCEPTING, I.MUTATION_FINISHED, None, guard="in_flight", update="finish"),
    on(S.DRAINING, I.MUTATION_FINISHED, S.FROZEN, guard="last_mutation", update="finish"),
    on(S.DRAINING, I.MUTATION_FINISHED, None, guard="in_flight", update="finish"),
    on(S.ACCEPTING, I.FENCE_PREPARE, S.FROZEN, guard="nothing_in_flight"),
    on(S.ACCEPTING, I.FENCE_PREPARE, S.DRAINING),
    on(CLOSED, I.FENCE_PREPARE, None),  # a retried prepare: nothing new
    on(CLOSED, I.FENCE_RESUME, S.ACCEPTING, update="admit_waiters", effects="release_waiters"),
    on(S.ACCEPTING, I.FENCE_RESUME, None),  # resume of an op that never closed it
    on(S.FROZEN, I.IMPORT, None, update="import"),
)
# fmt: on


# ----------------------------------------------------------------------------- updates


def _admit(data: ResourcesData, m: Mutation) -> ResourcesData:
    return replace(data, in_flight=data.in_flight + 1)


def _wait(data: ResourcesData, m: Mutation) -> ResourcesData:
    return replace(data, waiters=(*data.waiters, m.mutation_id))


def _finish(data: ResourcesData, m: Mutation) -> ResourcesData:
    bumped = dict(data.revisions)
    bumped[m.rollout_id] = bumped.get(m.rollout_id, 0) + 1
    return replace(data, in_flight=data.in_flight - 1, revisions=tuple(sorted(bumped.items())))


def _admit_waiters(data: ResourcesData, _: Any) -> ResourcesData:
    return replace(data, in_flight=data.in_flight + len(data.waiters), waiters=())


def _import(data: ResourcesData, revisions: Revisions) -> ResourcesData:
    return replace(data, revisions=tuple(sorted(revisions)))


# ----------------------------------------------------------------------------- the table

RESOURCES: Table[ResourcesState, ResourcesInput] = Table(
    "resources",
    doc="M5: resources freeze every rollout's revision on prepare, after mutations drain.",
    states=ResourcesState,
    inputs=ResourcesInput,
    initial=S.ACCEPTING,
    initial_data=ResourcesData(),
    unmapped="forbidden",
    rows=_ROWS,
    guards={
        "in_flight": lambda v, _: v.data.in_flight > 0,
        "last_mutation": lambda v, _: v.data.in_flight == 1,
        "nothing_in_flight": lambda v, _: v.data.in_flight == 0,
    },
    updates={
        "admit": _admit,
        "wait": _wait,
        "finish": _finish,
        "admit_waiters": _admit_waiters,
        "import": _import,
    },
    invariants={
        "frozen_means_no_mutation": lambda v: v.state is not S.FROZEN or v.data.in_flight == 0,
        "waiters_only_while_closed": lambda v: v.state is not S.ACCEPTING or not v.data.waiters,
    },
)

_MUTATIONS = tuple(Mutation(m, r) for m in ("m-1", "m-2") for r in ("r0", "r1"))
ARG_EXAMPLES: Mapping[ResourcesInput, tuple[object, ...]] = {
    I.MUTATION_STARTED: _MUTATIONS,
    I.MUTATION_FINISHED: _MUTATIONS,
    # Revisions to install: none, one rollout, two, and a rollout named twice.
    I.IMPORT: ((), (("r0", 2),), (("r0", 0), ("r1", 3)), (("r1", 1), ("r1", 2))),
}
"""Example arguments by input, for the sweeps (`quiesce.check.arg_examples`): a `Mutation`
for mutation inputs, revisions for `IMPORT`; fence inputs take none."""
