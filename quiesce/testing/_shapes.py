"""The races the conformance kit starts, generated from the protocol's tables rather than
listed by hand.

What lives here: `race_shapes(role, executions)`, every race the kit may start on a
participant of that role, each a `RaceShape`: requests that can be pending on the role, the
requests that can overtake them and the events that can release them, in every send order.
Read from the tables:

- **pending** (`PENDING`): an operation whose start row of M2 (`control_fence`) leads to a
  state its outcome rows leave (`preparing`, `committing`, `restoring`): a server may hold
  the request there, and a prepare that is not ready holds `preparing` (a long poll);
- **overtakers**: the other requests M2 accepts (no refusal, no replay) in that state or in
  a state its outcome leads to: a resume of the same id overtakes any of them, a commit
  follows a prepare, a discard a restore;
- **releasers** of a prepare on an agent: the wire events M3 (`agent_execution`) accepts
  from a state that keeps the agent from being ready (`park_requested` after the prepare
  starts, or `completed`): a boundary, a finish, a retire or the ACK of that execution;
  and, for every role, the next checkpoint's prepare.

A shape is a pending request alone with one overtaker, with one releaser, or with both, in
every order of sending. Targets, resolved by the kit (`_machine`): `next` a fresh id, `same`
the pending request's id, `active` the fence's, `running` and `completed` an execution the
kit begins (and finishes) first: a prepare at one is a fresh id the execution blocks. What
it does not know: how requests are sent or judged (`_machine`, `_race`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from functools import cache
from itertools import permutations

from quiesce.fsm import Row
from quiesce.protocol.machines import (
    AGENT_EXECUTION,
    CONTROL_FENCE,
    AgentInput,
    ExecState,
)
from quiesce.protocol.wire import Role

__all__ = [
    "EXECUTION_TARGETS",
    "PENDING",
    "RaceShape",
    "race_bases",
    "race_shapes",
    "released_shape",
    "released_shapes",
    "shape_of",
]

Request = tuple[str, str]
"""A raced request: `(operation, target)`."""

EXECUTION_TARGETS = frozenset({"running", "completed"})
"""Targets naming the execution the kit begins (and, for `completed`, finishes) before the
race; a control request at one is a fresh id, sent while that execution blocks it."""

_WIRE_EVENTS = {
    AgentInput.TURN_BOUNDARY: "boundary",
    AgentInput.RUN_FINISHED: "finish",
    AgentInput.RECV_ACK: "ack",
    AgentInput.RETIRE: "retire",
}
"""The M3 inputs a request of docs/wire.md fires (the others arrive on the data plane or
from the fence)."""

_BLOCKING = {"running": ExecState.PARK_REQUESTED, "completed": ExecState.COMPLETED}
"""The state of the kit's execution, by target, while a prepare waits on it (a running one
is asked to park when the prepare starts)."""


def _wire_op(input: Enum) -> str | None:
    """The request a fence input is (`recv_prepare` -> `prepare`), None for an outcome."""
    name = input.value
    return name.removeprefix("recv_") if name.startswith("recv_") else None


def _accepts(row: Row) -> bool:
    """A row that runs or moves something (no refusal, no replay, no join, no late drop)."""
    passive = ("refuse", "replay", "join_in_flight", "drop_late")
    return not any(effect.startswith(passive) for effect in row.effects)


def _pending() -> dict[str, Enum]:
    """Each operation whose start leads to an in-flight state, with that state."""
    outcome_sources = {
        source
        for row in CONTROL_FENCE.rows
        if _wire_op(row.input) is None and "answer" in row.effects
        for source in row.sources
    }
    found: dict[str, Enum] = {}
    for row in CONTROL_FENCE.rows:
        op = _wire_op(row.input)
        if op and "start" in row.effects and row.target in outcome_sources:
            found.setdefault(op, row.target)
    return found


PENDING = _pending()
"""`{operation: the in-flight state it can be pending in}`, read from M2."""


def _after(state: Enum) -> set[Enum]:
    """`state` and the states its outcome rows lead to."""
    reached = {state}
    for row in CONTROL_FENCE.rows:
        if state in row.sources and _wire_op(row.input) is None and "answer" in row.effects:
            reached.add(row.target or state)
    return reached


def _overtakers(op: str) -> tuple[Request, ...]:
    """The requests M2 accepts of the same id while `op` is pending or once it ended."""
    states = _after(PENDING[op])
    found: dict[str, None] = {}
    for row in CONTROL_FENCE.rows:
        other = _wire_op(row.input)
        if other and other != op and _accepts(row) and states & set(row.sources):
            found[other] = None
    return tuple((other, "same") for other in found if other != "status")


def _releasers(target: str) -> tuple[Request, ...]:
    """The wire events M3 accepts from the state that blocks a prepare at `target`."""
    blocking = _BLOCKING[target]
    events = {
        _WIRE_EVENTS[row.input]: None
        for row in AGENT_EXECUTION.rows
        if row.input in _WIRE_EVENTS and blocking in row.sources and _accepts(row)
    }
    return tuple((event, target) for event in events)


@dataclass(frozen=True, slots=True)
class RaceShape:
    """A race: `requests` with the pending one first (as the kit builds their bodies: `same`
    names the first's id), sent in the order `order` (indexes into `requests`), each while
    the earlier ones are in flight."""

    requests: tuple[Request, ...]
    order: tuple[int, ...]

    @property
    def sent(self) -> tuple[Request, ...]:
        """The requests in the order they are sent."""
        return tuple(self.requests[i] for i in self.order)

    def __str__(self) -> str:
        return " | ".join(f"{op}@{at}" for op, at in self.sent)


@cache
def race_bases(role: Role, executions: bool) -> tuple[tuple[Request, ...], ...]:
    """Each pending request with one overtaker, one releaser, or one of each, pending
    first (`executions`: the kit drives an agent's executions, so a prepare can wait on one)."""
    next_prepare: Request = ("prepare", "next")
    pendings: list[tuple[Request, tuple[Request, ...]]] = []
    if role is Role.AGENT and executions:
        pendings += [(("prepare", at), (*_releasers(at), next_prepare)) for at in _BLOCKING]
    else:
        pendings.append((("prepare", "next"), (next_prepare,)))
    pendings += [(("commit", "active"), (next_prepare,)), (("restore", "next"), (next_prepare,))]
    bases: list[tuple[Request, ...]] = []
    for pending, releasers in pendings:
        overtakers = _overtakers(pending[0])
        bases += [(pending, other) for other in (*overtakers, *releasers)]
        bases += [(pending, o, r) for o in overtakers for r in releasers]
    return tuple(bases)


@cache
def _weighted(role: Role, executions: bool) -> tuple[int, ...]:
    """The indexes of `race_bases`, a base of three requests three times: a pending request
    overtaken and then released is where a stale long poll bites, and it is one order of
    six."""
    bases = race_bases(role, executions)
    return tuple(i for i, base in enumerate(bases) for _ in range(1 if len(base) < 3 else 3))


def shape_of(role: Role, executions: bool, base: int, order: int) -> RaceShape:
    """Base number `base` of `race_bases` (modulo their number, three-request bases counted
    three times), sent in its `order`-th order of sending (modulo their number; 0: the
    pending request first, as built)."""
    weighted = _weighted(role, executions)
    requests = race_bases(role, executions)[weighted[base % len(weighted)]]
    orders = list(permutations(range(len(requests))))
    return RaceShape(requests, orders[order % len(orders)])


def race_shapes(role: Role, executions: bool) -> tuple[RaceShape, ...]:
    """Every race the kit starts on a `role` participant (`executions`: the kit drives an
    agent's executions), each base in every send order, the pending-first order first."""
    return tuple(
        RaceShape(base, order)
        for base in race_bases(role, executions)
        for order in permutations(range(len(base)))
    )


@cache
def released_shapes(role: Role, executions: bool) -> tuple[RaceShape, ...]:
    """The three-request bases of `race_bases` (a pending request, one that overtakes it,
    one that releases it), each sent in that order: where a long poll that decides only
    once released acts on a fence that moved on. The kit runs each once after its search
    (`_kit`), whatever the seed drew."""
    bases = [b for b in race_bases(role, executions) if len(b) == 3]
    return tuple(RaceShape(base, (0, 1, 2)) for base in bases)


def released_shape(role: Role, executions: bool, base: int) -> RaceShape:
    """Number `base` (modulo their number) of `released_shapes`."""
    shapes = released_shapes(role, executions)
    return shapes[base % len(shapes)]
