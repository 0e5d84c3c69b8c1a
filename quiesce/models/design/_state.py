"""The state of the design model: small named tuples of labels, ranks and flags.

What lives here: `DesignParams` and the compact value of every machine the model composes.
What it does not know: how a value moves (`_tables`, `_step`), or which actions exist
(`_model`).

Why compact: the explorer hashes a state on every lookup and CPython does not cache a
tuple's hash, so a state is a tree of tuples of strings, small ints and bools, never a
frozen dataclass (its `__hash__` runs Python code per field). The vocabulary:
- participants are indexes `POLICY, AGENT, RESOURCES` (one server per role);
- ids are **ranks**, 1, 2, ... in order of creation, checkpoint and restore ids alike
  (only `OpId`'s order is ever read); a new id is one more than every id still mentioned;
- a rollout attempt is a `Key` `(sibling, attempt)`, which is also its receipt; attempt
  numbers are never reused (a restart numbers above every one still remembered);
- time is abstract: every timer may fire at any moment, so no clock is kept.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, NamedTuple

from quiesce.models.design._labels import (
    AttemptLabel,
    ExecLabel,
    FenceLabel,
    GateLabel,
    GroupLabel,
    M1Label,
    M9Label,
    PolicyLabel,
    RegistryLabel,
    ResourcesLabel,
    WalkPhase,
)

__all__ = [
    "AGENT",
    "EMPTY_WALK",
    "LIVE_ATTEMPTS",
    "M1",
    "M9",
    "NAMES",
    "POLICY",
    "RESOURCES",
    "Attempt",
    "Controller",
    "DesignParams",
    "DesignState",
    "Execution",
    "Fence",
    "Gate",
    "Group",
    "Key",
    "Ledger",
    "Participants",
    "Policy",
    "Registry",
    "Snapshot",
    "Store",
    "Walk",
    "World",
]

POLICY, AGENT, RESOURCES = 0, 1, 2
NAMES = ("policy", "agent", "resources")
"""Participant names by index (one server per role, PROTOCOL.md §8)."""
Key = tuple[int, int]
"""A rollout attempt: `(sibling, attempt)`."""
LIVE_ATTEMPTS = (AttemptLabel.RESERVED, AttemptLabel.DISPATCHED)
"""The M8 attempt states still to run or running (neither sealed nor ended)."""
Policy = tuple[PolicyLabel, tuple[Key, ...]]
"""M4 `policy_admission`: its label and the calls it holds as waiters (by execution key)."""
Gate = tuple[GateLabel, tuple[str, ...]]
"""M6 `admission_gate`: its label and its holders (sorted)."""
Registry = tuple[RegistryLabel, tuple[str, ...], bool, bool]
"""M7 `deadline_registry`: its label, its holders (sorted), whether the group has a
deadline and whether that deadline's timer is armed."""
M9 = tuple[M9Label, int, int, tuple[int, ...]]
"""M9 `restore`: its label, the snapshot id, the retries and the rejected snapshot ids."""


@dataclass(frozen=True)
class DesignParams:
    """The sizes of the design model (`--set key=value`); the defaults are PROTOCOL.md
    §8's reference size, with the amended in-attempt retries (§4) at one. `symmetry`
    identifies states that differ only by the naming of siblings (`_design_symmetry`).

    >>> DesignParams().siblings, DesignParams().faults
    (2, 1)
    """

    siblings: int = 2
    turns: int = 2
    attempts: int = 2
    triggers: int = 2
    optimizer_steps: int = 1
    weight_sync: int = 1
    train_switch: int = 1
    prepare_retries: int = 2
    call_retries: int = 1
    faults: int = 1
    max_consecutive_failures: int = 3
    recovery_mode: str = "restart_only"
    crashes: bool = True
    symmetry: bool = True

    def describe(self) -> dict[str, Any]:
        """The parameters as a JSON-ready mapping."""
        return asdict(self)


class Fence(NamedTuple):
    """M2 `control_fence` of one participant: state label, active id and high-watermark
    (0: none), recorded results `((id, op label, result), ...)`."""

    state: FenceLabel
    active: int
    hwm: int
    recorded: tuple[tuple[int, str, Any], ...]


class Execution(NamedTuple):
    """M3 `agent_execution` on the agent: its key, state label and last durable turn."""

    sibling: int
    attempt: int
    state: ExecLabel
    turn: int


class Attempt(NamedTuple):
    """M8 `rollout_attempt` in the controller's ledger. `receipt`: a completion was
    recorded; `resume_turn`: a reserved attempt that claims a restored continuation."""

    sibling: int
    attempt: int
    state: AttemptLabel
    receipt: bool
    ack_owed: bool
    superseded: bool
    resume_turn: int


class Group(NamedTuple):
    """M8 `prompt_group`: state label, sealed siblings (a bit each), reopened."""

    state: GroupLabel
    sealed: int
    reopened: bool


class Ledger(NamedTuple):
    """The controller's M8 ledger: the one prompt group and its attempts (sorted)."""

    group: Group
    attempts: tuple[Attempt, ...]


class Snapshot(NamedTuple):
    """A published snapshot: its id, the trainer step of its cut, the digest each
    participant committed (by index) and the ledger of the controller's cut. Once no fault
    is left only its id can still be read (nothing restores it), so the rest is dropped."""

    op_id: int
    trainer_step: int
    digests: tuple[Any, ...]
    cut: Ledger | None


class M1(NamedTuple):
    """M1 `checkpoint`: state label, the attempt's id (0: none), the trainer step it
    started at, whether it was published, the disposition of the cause the table noted
    for it (`""`: none; the table counts an attempt's failure once, when it notes its first
    cause), and M1's own count of consecutive failures (I7 is judged by the world's)."""

    state: M1Label
    attempt: int
    step: int
    published: bool
    noted: str
    failures: int


class Walk(NamedTuple):
    """The controller's walk through one remote phase (§3 order), one atomic call a step.

    `phase`: a `WalkPhase` (`WalkPhase.NONE`, `""`: no walk; the others named in
    `_labels`). `done`: the participants (a bit each) that answered; `not_ready`: the next
    call answered not ready and waits for the prepare retry timer; `nr_retries`: those
    retries used.
    """

    phase: WalkPhase
    done: int
    not_ready: bool
    nr_retries: int


EMPTY_WALK = Walk(WalkPhase.NONE, 0, False, 0)


class Controller(NamedTuple):
    """Everything the controller process holds (lost when it crashes); the defaults are
    what a process starts with.

    `deadline`/`retry`: the attempt id the prepare-deadline / abort-release retry timer is
    armed for (0: none). `attempted`: participants marked attempted (bits). `conflicts`:
    `(participant, id)` a refusal reported as active, aborted first (S5). `staged`: the
    digest each participant committed in this attempt (None: not yet). `gate`: M6
    `(label, holders)`; `registry`: M7 `(label, holders, group has a deadline, its timer
    armed)`. `m9`: M9 `(label, snapshot id, retries, rejected ids)` while a restore runs,
    else None; `rs`: the restore op id. `ledger`: None from a crash until the restore
    installs one. `outbox`: completions the ledger does not own, to ACK (I1: counted).
    `retires`: keys to tombstone at the agent, pending until answered. `stale`: the
    participants whose new incarnation the controller has not seen yet (bits). `stopped`:
    why the controller stopped (`budget`, `fatal`, `stopped` for a row that stops without
    its `stop` work, `restore_failed`, or `refused` when a table refused an input the
    composition fired). `continuations`: those the agent's restore reply listed
    `(sibling, attempt, turn)`, the restore's plan for discards and redispatch.
    """

    m1: M1 = M1(M1Label.IDLE, 0, 0, False, "", 0)
    walk: Walk = EMPTY_WALK
    deadline: int = 0
    retry: int = 0
    attempted: int = 0
    conflicts: tuple[tuple[int, int], ...] = ()
    staged: tuple[Any, ...] = (None, None, None)
    gate: Gate = (GateLabel.OPEN, ())
    registry: Registry = (RegistryLabel.RUNNING, (), False, False)
    m9: M9 | None = None
    rs: int = 0
    ledger: Ledger | None = None
    outbox: tuple[Key, ...] = ()
    retires: tuple[Key, ...] = ()
    stale: int = 0
    stopped: str = ""
    continuations: tuple[tuple[int, int, int], ...] = ()


class Participants(NamedTuple):
    """The three servers. `fences` by index; `policy`: M4 `(label, waiters)` (the calls it
    holds, by execution key); `resources`: M5 label; the agent's M3 `executions` (sorted),
    `refusals` per sibling `(highest retired attempt or -1, acked)` and `restored`
    continuations `(sibling, attempt, turn)` installed by a restore."""

    fences: tuple[Fence, Fence, Fence]
    policy: Policy
    resources: ResourcesLabel
    executions: tuple[Execution, ...]
    refusals: tuple[tuple[int, bool], ...]
    restored: tuple[tuple[int, int, int], ...]


class Store(NamedTuple):
    """The snapshot store (durable): the intent record's id (0: none) and the published
    snapshots, oldest first."""

    intent: int
    published: tuple[Snapshot, ...]


class World(NamedTuple):
    """The environment: its budgets, the trainer, the network's delayed request, and the
    independent ledger the properties are judged against (the defaults: untouched).

    `optimizer`, `weight_sync`, `train_switch`: 0 not begun, 1 in progress, 2 done.
    `delayed`: `(participant, op, id, snapshot id)` of a request the network held back.
    `unaccounted`: attempt keys that completed on the agent and are not yet accounted for
    (trained, or counted: dropped late or unowned, discarded with their group, rolled back
    by a restart); I1 asks each to be held by the agent or sealed in the ledger.
    `unresolved`: checkpoint ids some participant committed whose release (published) or
    abort (not published) has not completed yet (I3). `failed_attempts`: the controller
    process's consecutive attempts that failed with a retryable cause, counted from the
    attempts' outcomes (§4), never read from M1's counter, which I7 judges; `failing`: the
    attempt in progress has failed already (it counts once). `bad`: violations only a
    transition can show, `(property, why)`.
    """

    triggers: int
    faults: int
    optimizer: int = 0
    trainer_step: int = 0
    weight_sync: int = 0
    train_switch: int = 0
    delayed: tuple[int, str, int, int] | None = None
    unaccounted: frozenset[Key] = frozenset()
    unresolved: frozenset[int] = frozenset()
    failed_attempts: int = 0
    failing: bool = False
    bad: tuple[tuple[str, str], ...] = ()


class DesignState(NamedTuple):
    """One state of the design model."""

    controller: Controller
    parts: Participants
    store: Store
    world: World
