"""The values of the `protocol` model: its sizes, its states, who takes part.

What lives here: `ProtocolParams` (the sizes, PROTOCOL.md §8's reference size by default),
`Env` (the environment's budgets and its independent ledger), `PState` (one model state:
the composed system plus `Env`, hashed once), `Cast` (the participants at given sizes) and
`GROUP`, the model's one prompt group. The model, its properties, traces and symmetry all
build on these and on nothing of each other's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from quiesce.fsm import label
from quiesce.models.implementation._system import SystemState
from quiesce.protocol import OpId
from quiesce.protocol.controller.lowlevel import Op
from quiesce.protocol.participant import ParticipantState

__all__ = [
    "CONTROL_OPS",
    "GROUP",
    "Cast",
    "Env",
    "PState",
    "ProtocolParams",
    "executions",
]

GROUP = "g0"
"""The prompt group of the model (one group at the reference size)."""

CONTROL_OPS = frozenset({Op.PREPARE, Op.COMMIT, Op.RESUME, Op.RESTORE, Op.DISCARD})
"""The fenced operations: a call of one of them in flight means a checkpoint or restore
is still under way."""


@dataclass(frozen=True)
class ProtocolParams:
    """The sizes of the model (`--set key=value`); the defaults are PROTOCOL.md §8's
    reference size.

    >>> ProtocolParams().siblings
    2
    """

    siblings: int = 2
    turns: int = 2
    attempts: int = 2
    triggers: int = 2
    optimizer_steps: int = 1
    weight_sync: int = 1
    train_switch: int = 1
    prepare_retries: int = 2
    faults: int = 1
    agents: int = 1
    max_consecutive_failures: int = 3
    call_retries: int = 0  # §4 retries inside an attempt (the pinned sizes run without)
    group_scored: bool = False
    recovery_mode: str = "restart_only"
    crashes: bool = True
    digest_faults: int = 0
    """A budget of wrong digests at restore (S16) of its own, beside `faults` (which may
    spend itself on one too): a configuration with one controller crash and one wrong
    digest stays small, where two faults of every kind would not."""

    def describe(self) -> dict[str, Any]:
        """The parameters as a JSON-ready mapping (`digest_faults` only when set: the
        configurations that never use it describe themselves as they always did)."""
        described = asdict(self)
        if not self.digest_faults:
            del described["digest_faults"]
        return described


# Without slots: a step copies its Env with a change or two, and the copier copies a
# `__dict__` in one merge where slots would cost a call per field (24 of them).
@dataclass(frozen=True)
class Env:
    """The environment's own state and its independent ledger (all small, all hashable).

    Budgets: `triggers`, `faults`, `digest_faults` (wrong digests at restore only),
    `optimizer` (0 not begun, 1 busy, 2 done),
    `weight_sync`/`train_switch` (same encoding), `retries` (prepare retries left for the
    attempt `retry_for`). Ledger: `completed` (attempt keys the agent completed, with
    whether the controller kept it and the rerun count then), `trained`, `rolled_back`,
    `dispatched` (every begin the controller sent), `committed` (ids any participant
    committed), `reported` (ids the controller reported `completed`), `failures`
    (consecutive attempts the controller reported failed retryably, each once it ended),
    `conflicts` (`(participant, X)`: a conflict naming X reported and X not aborted there
    yet), `bad` (violations seen on a transition: property name -> why), `delayed` (a
    request held back in the network).
    """

    triggers: int
    faults: int
    digest_faults: int = 0
    optimizer: int = 0
    weight_sync: int = 0
    train_switch: int = 0
    trainer_step: int = 0
    announced: int = 0
    retries: int = 0
    retry_for: OpId | None = None
    epoch: int = 1
    crashed: tuple[tuple[str, int], ...] = ()
    completed: frozenset[tuple[str, int, bool, int]] = frozenset()
    trained: frozenset[tuple[str, int]] = frozenset()
    rolled_back: frozenset[tuple[str, int]] = frozenset()
    dispatched: frozenset[tuple[str, int]] = frozenset()
    committed: frozenset[OpId] = frozenset()
    commit_steps: frozenset[tuple[OpId, int]] = frozenset()
    reported: frozenset[OpId] = frozenset()
    failures: int = 0
    stops: tuple[str, ...] = ()
    conflicts: frozenset[tuple[str, OpId]] = frozenset()
    bad: tuple[tuple[str, str], ...] = ()
    delayed: tuple[str, Op, Any] | None = None
    raised: str | None = None


class PState:
    """One model state: the composed system and the environment, hashed once.

    Equality is that of `system` and `env` (the model keeps one object per distinct
    system, so comparing two systems is mostly an identity check); `digest` is the hash,
    which the model computes from hashes cached on the interned parts
    (`_protocol_memo.Interner`) instead of re-hashing them.
    """

    __slots__ = ("_hash", "env", "system")

    def __init__(self, system: SystemState, env: Env, digest: int) -> None:
        self.system = system
        self.env = env
        self._hash = digest

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, PState):
            return NotImplemented
        return self._hash == other._hash and self.system == other.system and self.env == other.env

    def __repr__(self) -> str:
        return f"PState(phase={label(self.system.controller.phase)}, env={self.env!r})"


@dataclass(frozen=True)
class Cast:
    """Who takes part at `params`: the agents, every participant's name (policy, agents,
    resources, in that order) and each one's role.

    >>> Cast.of(ProtocolParams()).names
    ('policy', 'agent', 'resources')
    """

    params: ProtocolParams
    agents: tuple[str, ...]
    names: tuple[str, ...]
    roles: Mapping[str, str]

    @classmethod
    def of(cls, params: ProtocolParams) -> Cast:
        """The cast of the model at `params` (`agent`, or `agent0`.. for several)."""
        agents = tuple("agent" if params.agents == 1 else f"agent{i}" for i in range(params.agents))
        roles = {"policy": "policy", "resources": "resources"}
        roles.update({a: "agent" for a in agents})
        return cls(params, agents, ("policy", *agents, "resources"), roles)


def executions(participant: ParticipantState) -> tuple[Any, ...]:
    """The agent executions `participant` holds (none for a policy or resources server)."""
    return getattr(participant.role, "executions", ())
