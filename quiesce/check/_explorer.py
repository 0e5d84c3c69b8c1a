"""An explicit-state breadth-first model checker, in the manner of stateright.

What lives here: the `Model` interface (initial states, enabled actions, a pure next state,
named `always` properties and the no-stall liveness property of PROTOCOL.md I7), the
exploration loop, the strongly-connected-component pass that finds stalls, and the
shortest counterexample traces. What it does not know: any particular protocol. Models
(two-phase commit, the composed protocol) live in their own modules and compose tables.

How it works. States are discovered in BFS order and numbered by discovery, so the list of
states *is* the queue and a parent pointer (an int) per state gives the shortest path back
to an initial state. The visited set maps each state (`exact`) or its 64-bit fingerprint
(`hash()`, the default of a model with `fingerprints = True`) to its number; with
fingerprints a state is dropped once expanded, and a counterexample's states are rebuilt by
re-running the recorded actions from the initial state (see `_fingerprints` for the
collision odds). Every `always` property is checked once per distinct state. For the
liveness property the fault-free edges are stored as a compact adjacency array (CSR: one
offset per expanded state into one flat array of successor numbers); a deadlock is caught
while expanding, cycles that avoid the goal states by an iterative Tarjan pass at the end.

>>> result = check(MyModel())  # doctest: +SKIP
>>> result.ok, result.distinct_states  # doctest: +SKIP
(True, 288)
"""

from __future__ import annotations

import gc
import itertools
import sys
import time
from abc import ABC, abstractmethod
from array import array
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Generic, Literal, TypeVar

from quiesce.check._fingerprints import FingerprintTable
from quiesce.fsm import QuiesceError, Table, Value, label

__all__ = [
    "NO_STALL",
    "Action",
    "Always",
    "CheckResult",
    "Kind",
    "Model",
    "Progress",
    "Step",
    "TableStepper",
    "Trace",
    "UnknownProjection",
    "Violation",
    "always",
    "check",
    "mermaid_sequence",
    "paused_gc",
]

St = TypeVar("St", bound=Hashable)
Kind = Literal["always", "deadlock", "cycle"]
"""How a property failed: in a bad state, at a deadlock, or around a stall cycle."""

NO_STALL = "no_stall"
"""The name of the liveness property (PROTOCOL.md I7) in results and trace file names."""


@dataclass(frozen=True, slots=True)
class Action:
    """One labelled move a model can make; `fault` marks an injected fault.

    Fault edges are explored like any other but left out of the no-stall graph: I7 speaks of
    what happens *with no further faults*. `payload` carries whatever `next_state` needs.
    Models build their actions once and reuse them, so an action costs no allocation.

    >>> Action("RMPrepare(rm1)", payload=("prepare", 0))
    Action(label='RMPrepare(rm1)', fault=False, payload=('prepare', 0))
    """

    label: str
    fault: bool = False
    payload: Any = None


@dataclass(frozen=True, slots=True)
class Always:
    """A named safety property: `holds(state)` must be true in every reachable state.

    `reads` names the fields of `Model.describe_state` the property depends on (a dotted
    path or its prefix: `env.violations`, `executions`), so a counterexample can show the
    property's values at its last step.
    """

    name: str
    holds: Callable[[Any], bool]
    doc: str = ""
    reads: tuple[str, ...] = ()


def always(
    name: str, holds: Callable[[Any], bool], doc: str = "", reads: Sequence[str] = ()
) -> Always:
    """Declare a safety property, as stateright's `Property::always`.

    >>> always("consistent", lambda s: not ("committed" in s and "aborted" in s)).name
    'consistent'
    """
    return Always(name, holds, doc, tuple(reads))


class UnknownProjection(QuiesceError):
    """A trace was projected onto a table the model does not have; `known` lists them."""

    def __init__(self, model: str, table: str, known: Sequence[str]) -> None:
        self.model = model
        self.table = table
        self.known = tuple(known)
        super().__init__(
            f"model {model!r} has no table {table!r} to project onto; "
            f"known: {', '.join(self.known) or '(none)'}"
        )


class Model(ABC, Generic[St]):
    """A finite transition system the explorer can check exhaustively.

    Subclasses set `name` and `params` and implement `init_states`, `actions` and
    `next_state`; everything else has a default. States must be hashable, compact, and
    immutable (tuples, frozensets, strings, small ints): they are the keys of the visited set.

    - `properties()`: the `always` invariants, checked in every distinct state.
    - `liveness = True` turns on `no_stall` (PROTOCOL.md I7) as a *must*: in the fault-free
      subgraph no state outside `is_goal` lacks a successor, and no cycle avoids the goals.
      `stutter_stalls = False` treats self-loops as TLA+ stuttering steps (never a stall by
      themselves; a state whose only fault-free moves are self-loops is then a deadlock).
      `liveness_goals()` names the goal predicates checked that way (default: `no_stall` with
      `is_goal`); a model with several liveness properties returns one pair per property.
    - `canonical(state)`: the representative used as the visited-set key under
      `symmetry=True` (identity by default). It must map symmetric states to one key and
      every property must be symmetric.
    - `successors(state)`: `(action, next)` pairs; the default filters `actions` through
      `next_state`. Override it for speed, keeping it equal to that default.
    - `fingerprints = True` makes `check` keep 64-bit fingerprints of the visited states
      instead of the states (unless asked for `exact`): for a model whose states are big
      and whose `next_state` is deterministic, so a trace can be rebuilt by re-running it.
    - Traces: `tables()` / `project(trace, table)` give the engine's `--trace FILE` steps
      for one table instance; `message()` and `participants()` feed the Mermaid
      `sequenceDiagram`; `describe_state()` makes a state JSON-ready.
    """

    name: str = "model"
    params: Mapping[str, Any] = {}
    liveness: bool = False
    stutter_stalls: bool = True
    fingerprints: bool = False

    @abstractmethod
    def init_states(self) -> Iterable[St]:
        """The initial states."""

    @abstractmethod
    def actions(self, state: St) -> Iterable[Action]:
        """The actions that may be enabled in `state` (`next_state` may still refuse one)."""

    @abstractmethod
    def next_state(self, state: St, action: Action) -> St | None:
        """The state after `action`, or `None` when the action is not enabled. Pure."""

    def successors(self, state: St) -> Iterable[tuple[Action, St]]:
        """Every enabled `(action, next_state)` pair of `state`."""
        for action in self.actions(state):
            following = self.next_state(state, action)
            if following is not None:
                yield action, following

    def properties(self) -> Sequence[Always]:
        """The named `always` properties."""
        return ()

    def is_goal(self, state: St) -> bool:
        """Is `state` a goal of the no-stall property (where the system may rest)?"""
        return False

    def liveness_goals(self) -> Sequence[tuple[str, Callable[[St], bool]]]:
        """The liveness properties, `(name, is_goal)` each (only with `liveness`): every
        fault-free path must reach a goal state of each. Default: `no_stall` / `is_goal`."""
        return ((NO_STALL, self.is_goal),) if self.liveness else ()

    def canonical(self, state: St) -> Hashable:
        """The symmetry representative of `state` (used only with `symmetry=True`)."""
        return state

    def describe_state(self, state: St) -> Any:
        """`state` as a JSON-ready value, for traces."""
        return repr(state)

    def tables(self) -> Sequence[str]:
        """The table instances a trace can be projected onto."""
        return ()

    def table_of(self, instance: str) -> Table[Any, Any] | None:
        """The engine table that table instance `instance` (one of `tables()`) steps, so a
        projected trace can be drawn on it; None when no engine table does."""
        return None

    def project(self, trace: Trace[St], table: str) -> list[dict[str, str]]:
        """`trace` seen by one table instance, in the engine's `--trace FILE` format.

        Each step that fires the table gives `{"state", "input", "target"}` (spec names).
        """
        raise UnknownProjection(self.name, table, self.tables())

    def message(self, before: St, action: Action, after: St) -> tuple[str, str, str] | None:
        """The `(sender, receiver, message)` a step delivers, if any (`sender == receiver`:
        a local step, drawn as a note)."""
        return None

    def participants(self) -> Sequence[str]:
        """The actors of the sequence diagram, in drawing order."""
        return ()


@dataclass(frozen=True, slots=True)
class Step(Generic[St]):
    """One step of a trace: the action taken and the state it led to."""

    action: Action
    state: St

    @property
    def label(self) -> str:
        """The action's label."""
        return self.action.label

    @property
    def fault(self) -> bool:
        """Was this step an injected fault?"""
        return self.action.fault


@dataclass(frozen=True, slots=True)
class Trace(Generic[St]):
    """A path through a model: an initial state and the steps taken from it.

    `loop_from` (a state index: 0 is `initial`, `k` the state after step `k`) marks a lasso:
    the last state is the state at `loop_from` again (or, under symmetry, one symmetric to
    it), so the steps after it repeat forever.
    """

    initial: St
    steps: tuple[Step[St], ...] = ()
    loop_from: int | None = None

    def __len__(self) -> int:
        return len(self.steps)

    def states(self) -> list[St]:
        """Every state of the trace, the initial one first."""
        return [self.initial, *(step.state for step in self.steps)]

    def transitions(self) -> Iterator[tuple[St, Action, St]]:
        """`(before, action, after)` for every step."""
        before = self.initial
        for step in self.steps:
            yield before, step.action, step.state
            before = step.state

    def to_json(self, model: Model[St]) -> list[dict[str, Any]]:
        """Numbered steps, step 0 being the initial state (`action` null)."""
        actions: list[Action | None] = [None, *(step.action for step in self.steps)]
        return [
            {
                "step": number,
                "action": None if action is None else action.label,
                "fault": action is not None and action.fault,
                "state": model.describe_state(state),
            }
            for number, (action, state) in enumerate(zip(actions, self.states(), strict=True))
        ]


@dataclass(frozen=True, slots=True)
class Violation(Generic[St]):
    """A property that failed, with its shortest counterexample.

    `kind` is `always` (the trace ends in a bad state), `deadlock` (the trace ends in a
    non-goal state with no fault-free move) or `cycle` (the trace is a lasso: see
    `Trace.loop_from`).
    """

    property: str
    kind: Kind
    trace: Trace[St]

    def to_json(self, model: Model[St]) -> dict[str, Any]:
        """`{"property", "kind", "trace", "loop_from"}`."""
        return {
            "property": self.property,
            "kind": self.kind,
            "trace": self.trace.to_json(model),
            "loop_from": self.trace.loop_from,
        }


@dataclass(frozen=True, slots=True)
class Progress:
    """A progress report during a long exploration."""

    distinct_states: int
    generated_states: int
    frontier: int
    seconds: float
    depth: int = 0
    """The deepest state reached so far (BFS level, or the longest walk)."""


@dataclass(frozen=True)
class CheckResult(Generic[St]):
    """The outcome of `check`: the counts, the time, and the violations found."""

    model: Model[St]
    distinct_states: int
    generated_states: int
    depth: int
    seconds: float
    truncated: bool
    symmetry: bool
    properties: tuple[str, ...]
    violations: tuple[Violation[St], ...] = field(default=())
    complete: bool = True
    """Was every reachable state explored (no truncation, no stop at a violation)?"""
    exact: bool = True
    """Did the visited set hold whole states (False: 64-bit fingerprints)?"""
    stored_bytes: int = 0
    """What the explorer kept for the states it found, in bytes: the visited set, the
    numbering, the parent pointers and the no-stall graph (not the states themselves, which
    an exact search keeps too, nor the model's own caches)."""

    @property
    def bytes_per_state(self) -> float:
        """`stored_bytes` per distinct state."""
        return self.stored_bytes / self.distinct_states if self.distinct_states else 0.0

    @property
    def ok(self) -> bool:
        """No property was violated (a truncated run proves nothing beyond what it saw)."""
        return not self.violations

    @property
    def states_per_s(self) -> float:
        """Distinct states per second."""
        return self.distinct_states / self.seconds if self.seconds > 0 else 0.0

    def violation(self, property: str) -> Violation[St] | None:
        """The violation of `property`, if one was found."""
        return next((v for v in self.violations if v.property == property), None)

    def to_json(self) -> dict[str, Any]:
        """The `quiesce check --json` document."""
        return {
            "model": self.model.name,
            "params": dict(self.model.params),
            "distinct_states": self.distinct_states,
            "generated_states": self.generated_states,
            "depth": self.depth,
            "seconds": round(self.seconds, 6),
            "states_per_s": round(self.states_per_s, 1),
            "truncated": self.truncated,
            "complete": self.complete,
            "symmetry": self.symmetry,
            "exact": self.exact,
            "bytes_per_state": round(self.bytes_per_state, 1),
            "properties": list(self.properties),
            "violations": [v.to_json(self.model) for v in self.violations],
        }


def check(
    model: Model[St],
    *,
    max_states: int | None = None,
    symmetry: bool = False,
    stop_on_violation: bool = True,
    progress: Callable[[Progress], None] | None = None,
    progress_every: int = 100_000,
    exact: bool | None = None,
) -> CheckResult[St]:
    """Explore every reachable state of `model` breadth-first and check its properties.

    `max_states` stops the search once that many distinct states are known (the result
    says `truncated`). `symmetry` identifies states with one `canonical` key. With
    `stop_on_violation` (the default) the search ends at the first violation; otherwise
    it records the first (shortest) violation of each property and goes on. `progress` is
    called about every `progress_every` distinct states. `exact` keeps whole states in
    the visited set; `False` keeps 64-bit fingerprints (about n**2 / 2**65 odds that two
    of n states collide and one goes unexplored); `None`: the model's `fingerprints` choice.
    """
    exact = not model.fingerprints if exact is None else exact
    with paused_gc():
        return _explore(
            model, max_states, symmetry, stop_on_violation, progress, progress_every, exact
        )


@contextmanager
def paused_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector for a search: states are immutable and acyclic,
    so a collection finds nothing, yet every pass rescans all the live states."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


def _explore(
    model: Model[St],
    max_states: int | None,
    symmetry: bool,
    stop_on_violation: bool,
    progress: Callable[[Progress], None] | None,
    progress_every: int,
    exact: bool,
) -> CheckResult[St]:
    started = time.perf_counter()
    props = tuple(model.properties())
    goals = tuple(model.liveness_goals()) if model.liveness else ()
    liveness = bool(goals)
    stutter_stalls = model.stutter_stalls
    canon = model.canonical if symmetry else None
    successors = model.successors
    limit = max_states if max_states is not None else -1
    # Per state, a bit per goal it reaches; a state that reaches every goal stores no edges.
    every_goal = (1 << len(goals)) - 1
    if len(goals) == 1:
        is_goal: Callable[[St], int] = goals[0][1]
    else:

        def is_goal(state: St) -> int:
            return sum(1 << bit for bit, (_, reached) in enumerate(goals) if reached(state))

    # The visited set: state (or canonical key) -> number if `exact`, else fingerprint ->
    # number (`file(fingerprint, number)`: the known number, or -1 after filing `number`).
    index: dict[Hashable, int] = {}
    fingerprints = FingerprintTable()
    file = fingerprints.number
    # By number: the state. Without `exact`, only until it is expanded (then None), but for
    # the initial states, where a rebuilt trace starts.
    states: list[St | None] = []
    parent = array("q")
    via: list[Action | None] = []
    goal = bytearray()
    # CSR adjacency of the fault-free graph: edges[offsets[i]:offsets[i + 1]] are the
    # successors of state i (only for states already expanded).
    offsets = array("q")
    edges = array("q")
    found: dict[str, Violation[St]] = {}
    generated = 0
    truncated = False
    stop = False

    def state_at(number: int) -> St:
        return _state_at(model, states, via, parent, number)

    def bad(name: str, kind: Kind, at: int) -> None:
        nonlocal stop
        if name not in found:
            path = _path_to(at, parent)
            found[name] = Violation(name, kind, _replay(model, canon, state_at, via, parent, path))
            stop = stop_on_violation

    for initial in model.init_states():
        generated += 1
        key = initial if canon is None else canon(initial)
        if (key in index) if exact else file(hash(key), len(states)) >= 0:
            continue
        if len(states) == limit:
            truncated = True
            break
        if exact:
            index[key] = len(states)
        states.append(initial)
        parent.append(-1)
        via.append(None)
        if liveness:
            goal.append(is_goal(initial))
        for prop in props:
            if not prop.holds(initial):
                bad(prop.name, "always", len(states) - 1)

    get = index.get
    append_state = states.append
    append_parent = parent.append
    append_via = via.append
    append_goal = goal.append
    append_edge = edges.append
    next_report = progress_every
    current = 0
    checks = tuple((prop.name, prop.holds) for prop in props)
    count = len(states)
    while current < count and not stop and not truncated:
        moves = successors(states[current])  # type: ignore[arg-type]  # not expanded yet
        if not isinstance(moves, list):
            moves = list(moves)
        # Every successor computed counts as generated, as in TLC and stateright.
        generated += len(moves)
        if liveness:
            first_edge = len(edges)
            offsets.append(first_edge)
        # A goal state's edges cannot stall anything: cycles through goals are allowed.
        store = liveness and goal[current] != every_goal
        for action, following in moves:
            key = following if canon is None else canon(following)
            number = get(key, -1) if exact else file(hash(key), count)
            if number < 0:
                if count == limit:
                    truncated = True
                    break
                number = count
                count += 1
                if exact:
                    index[key] = number
                append_state(following)
                append_parent(current)
                append_via(action)
                if liveness:
                    append_goal(is_goal(following))
                for name, holds in checks:
                    if not holds(following):
                        bad(name, "always", number)
                if stop:
                    break
            # Stuttering self-loops are not stored when they cannot stall.
            if store and not action.fault and (stutter_stalls or number != current):
                append_edge(number)
        else:
            if store and len(edges) == first_edge:
                for bit, (name, _) in enumerate(goals):
                    if not goal[current] >> bit & 1:
                        bad(name, "deadlock", current)
            if not exact and parent[current] >= 0:
                states[current] = None  # its successors are known: rebuilt if a trace needs it
            current += 1
        if progress is not None and count >= next_report:
            next_report += progress_every
            elapsed = time.perf_counter() - started
            deepest = len(_path_to(count - 1, parent)) - 1  # BFS: the newest state is deepest
            progress(Progress(count, generated, count - current, elapsed, deepest))

    if liveness and not stop:
        # A state cut short by truncation or a stop has partial edges: it ends the graph.
        expanded = current
        if len(offsets) > expanded:
            del offsets[expanded + 1 :]
        else:
            offsets.append(len(edges))
        for bit, (name, _) in enumerate(goals):
            if name in found:
                continue
            reached = goal if len(goals) == 1 else bytearray(m >> bit & 1 for m in goal)
            entry = _stall_cycle(offsets, edges, reached, expanded, stutter_stalls)
            if entry is not None:
                start, loop = entry
                path = _path_to(start, parent)
                lasso = path + loop[1:]
                trace = _replay(model, canon, state_at, via, parent, lasso, len(path) - 1)
                found[name] = Violation(name, "cycle", trace)

    seconds = time.perf_counter() - started
    depth = len(_path_to(len(states) - 1, parent)) - 1 if states else 0
    names = tuple(p.name for p in props) + tuple(name for name, _ in goals)
    ordered = tuple(found[name] for name in names if name in found)
    stored = sum(sys.getsizeof(kept) for kept in (states, via, parent, goal, offsets, edges)) + (
        sys.getsizeof(index) if exact else fingerprints.nbytes
    )
    return CheckResult(
        model=model,
        distinct_states=len(states),
        generated_states=generated,
        depth=depth,
        seconds=seconds,
        truncated=truncated,
        symmetry=symmetry,
        properties=names,
        violations=ordered,
        complete=not (stop or truncated),
        exact=exact,
        stored_bytes=stored,
    )


def _path_to(number: int, parent: array[int]) -> list[int]:
    """State numbers from an initial state to `number`, following parent pointers."""
    path = [number]
    while parent[path[-1]] >= 0:
        path.append(parent[path[-1]])
    path.reverse()
    return path


def _state_at(
    model: Model[St],
    states: list[St | None],
    via: list[Action | None],
    parent: array[int],
    number: int,
) -> St:
    """State `number`: kept, or rebuilt by re-running the recorded actions from its
    nearest kept ancestor (an initial state at worst). `next_state` is deterministic, so
    the rebuilt state is the one that was found."""
    chain: list[int] = []
    while (kept := states[number]) is None:
        chain.append(number)
        number = parent[number]
    state = kept
    for step in reversed(chain):
        action = via[step]
        following = None if action is None else model.next_state(state, action)
        if following is None:  # pragma: no cover - a model whose next_state is not pure
            raise RuntimeError(f"{model.name}: cannot rebuild state {step} by re-running")
        state = following
    return state


def _replay(
    model: Model[St],
    canon: Callable[[St], Hashable] | None,
    state_at: Callable[[int], St],
    via: list[Action | None],
    parent: array[int],
    path: list[int],
    loop_from: int | None = None,
) -> Trace[St]:
    """Turn a path of state numbers into a trace of real steps.

    Without symmetry each recorded action leads exactly to the next stored state. Under
    symmetry a stored state is only *equivalent* to where the trace really is, so each
    step is replayed from the actual state: the recorded action if it reaches the right
    class, else any fault-free (then any) action that does.
    """
    key: Callable[[St], Hashable] = (lambda s: s) if canon is None else canon
    current = state_at(path[0])
    initial = current
    steps: list[Step[St]] = []
    for previous, number in itertools.pairwise(path):
        wanted = key(state_at(number))
        # The recorded action belongs to the parent edge; loop edges have none recorded.
        recorded = via[number] if parent[number] == previous else None
        chosen: tuple[Action, St] | None = None
        if recorded is not None:
            following = model.next_state(current, recorded)
            if following is not None and key(following) == wanted:
                chosen = (recorded, following)
        if chosen is None:
            candidates = [(a, t) for a, t in model.successors(current) if key(t) == wanted]
            candidates.sort(key=lambda pair: pair[0].fault)
            chosen = candidates[0]
        steps.append(Step(chosen[0], chosen[1]))
        current = chosen[1]
    return Trace(initial, tuple(steps), loop_from)


def _stall_cycle(
    offsets: array[int],
    edges: array[int],
    goal: bytearray,
    expanded: int,
    stutter_stalls: bool,
) -> tuple[int, list[int]] | None:
    """Find the cycle of non-goal states nearest to an initial state, if any.

    Iterative Tarjan over the fault-free graph restricted to non-goal expanded states. A
    strongly connected component is a stall when it has two states or more, or one state
    with a self-loop (unless self-loops are stuttering). Returns `(entry, loop)`: the
    component's lowest-numbered state (numbers are BFS order, so it is the one with the
    shortest path) and a shortest loop from it back to itself inside the component.
    """
    if _acyclic(offsets, edges, goal, expanded):
        return None
    unvisited = -1
    order = array("q", [unvisited]) * expanded
    low = array("q", [0]) * expanded
    on_stack = bytearray(expanded)
    stack: list[int] = []
    counter = 0
    best: tuple[int, list[int]] | None = None
    for root in range(expanded):
        if goal[root] or order[root] != unvisited:
            continue
        order[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack[root] = 1
        work = [(root, offsets[root])]
        while work:
            node, position = work[-1]
            end = offsets[node + 1]
            descended = False
            while position < end:
                child = edges[position]
                position += 1
                if child >= expanded or goal[child]:
                    continue
                if order[child] == unvisited:
                    work[-1] = (node, position)
                    order[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack[child] = 1
                    work.append((child, offsets[child]))
                    descended = True
                    break
                if on_stack[child] and order[child] < low[node]:
                    low[node] = order[child]
            if descended:
                continue
            work.pop()
            if work:
                above = work[-1][0]
                if low[node] < low[above]:
                    low[above] = low[node]
            if low[node] != order[node]:
                continue
            component: list[int] = []
            while True:
                member = stack.pop()
                on_stack[member] = 0
                component.append(member)
                if member == node:
                    break
            entry = min(component)
            if best is not None and entry >= best[0]:
                continue
            members = set(component)
            if len(component) == 1 and not (
                stutter_stalls and entry in edges[offsets[entry] : offsets[entry + 1]]
            ):
                continue
            loop = _loop_within(entry, members, offsets, edges)
            if loop is not None:
                best = (entry, loop)
    return best


def _acyclic(offsets: array[int], edges: array[int], goal: bytearray, expanded: int) -> bool:
    """Is the graph of non-goal expanded states free of cycles? (Kahn's peeling.)

    The cheap common case: a correct model has no stall, and this pass (in-degrees counted
    in C, one sweep over the edges) is what proves it. Goal states are never peeled: the
    edges they stored (goals of another property) are not counted.
    """
    targets, starts = edges.tolist(), offsets.tolist()
    indegree = [0] * (len(goal) + 1)
    for node, count in Counter(targets).items():
        indegree[node] = count
    for node in itertools.compress(range(expanded), goal):
        for child in targets[starts[node] : starts[node + 1]]:
            indegree[child] -= 1
    ready = [v for v in range(expanded) if not goal[v] and not indegree[v]]
    pop, push = ready.pop, ready.append
    peeled = 0
    while ready:
        node = pop()
        peeled += 1
        for child in targets[starts[node] : starts[node + 1]]:
            left = indegree[child] - 1
            indegree[child] = left
            if not left and child < expanded and not goal[child]:
                push(child)
    return peeled == expanded - goal.count(1, 0, expanded)


def _loop_within(
    entry: int, members: set[int], offsets: array[int], edges: array[int]
) -> list[int] | None:
    """A shortest path `entry -> ... -> entry` that stays inside `members` (BFS)."""
    came_from: dict[int, int] = {}
    frontier = [entry]
    while frontier:
        following: list[int] = []
        for node in frontier:
            for child in edges[offsets[node] : offsets[node + 1]]:
                if child == entry:
                    chain = [node]
                    while chain[-1] != entry:
                        chain.append(came_from[chain[-1]])
                    chain.reverse()
                    return [*chain, entry]
                if child in members and child not in came_from:
                    came_from[child] = node
                    following.append(child)
        frontier = following
    return None


def mermaid_sequence(model: Model[St], trace: Trace[St], title: str = "") -> str:
    """A Mermaid `sequenceDiagram` of the messages of `trace` (local steps as notes)."""
    lines = ["sequenceDiagram"]
    if title:
        lines.append(f"    title {title}")
    for actor in model.participants():
        lines.append(f"    participant {actor}")
    for number, (before, action, after) in enumerate(trace.transitions(), 1):
        triple = model.message(before, action, after)
        if triple is None:
            continue
        sender, receiver, text = triple
        marker = " (fault)" if action.fault else ""
        if sender == receiver:
            lines.append(f"    Note over {sender}: {number}. {text}{marker}")
        else:
            arrow = "-x" if action.fault else "->>"
            lines.append(f"    {sender}{arrow}{receiver}: {number}. {text}{marker}")
        if trace.loop_from is not None and number == len(trace.steps):
            lines.append(f"    Note over {sender}: back to state {trace.loop_from}")
    return "\n".join(lines) + "\n"


class TableStepper:
    """A table stepped by control-state *labels*, for models with compact states.

    Models keep control states as label strings (hashing an `Enum` member runs Python
    code; a string's hash is cached), and ask the table itself whether an input may fire.
    `step` returns `(target_label, data, effects)` or `None` when the table refuses (a
    forbidden pair or every guard false); `inputs_in(label)` lists the inputs worth trying
    in a control state (mapped or ignored there), straight from the table.

    >>> gate = TableStepper(ADMISSION_GATE)  # doctest: +SKIP
    >>> gate.step("open", frozenset(), GateInput.HOLD, "checkpoint")  # doctest: +SKIP
    ('closed', frozenset({'checkpoint'}), (Effect(...),))
    """

    def __init__(self, table: Table[Any, Any]) -> None:
        self.table = table
        self._members: dict[str, Enum] = {label(s): s for s in table.states}
        self._labels: dict[Enum, str] = {s: label(s) for s in table.states}
        self._inputs: dict[str, tuple[Enum, ...]] = {
            label(s): tuple(i for i in table.inputs if table.disposition(s, i) != "forbidden")
            for s in table.states
        }

    def inputs_in(self, state: str) -> tuple[Enum, ...]:
        """The inputs the table does not forbid in control state `state`."""
        return self._inputs[state]

    def step(
        self, state: str, data: Any, input: Enum, arg: Any = None
    ) -> tuple[str, Any, tuple[Any, ...]] | None:
        """Fire `input` on `(state, data)`; `None` if the table refuses it."""
        return self.steps(state, data, ((input, arg),))[0]

    def steps(
        self, state: str, data: Any, calls: Iterable[tuple[Enum, Any]]
    ) -> list[tuple[str, Any, tuple[Any, ...]] | None]:
        """`step` for each `(input, arg)` of `calls` from the same `(state, data)`."""
        current = Value(self._members[state], data)
        table, labels = self.table, self._labels
        results: list[tuple[str, Any, tuple[Any, ...]] | None] = []
        for input, arg in calls:
            # Asking first is far cheaper than a refusal: the exception builds a message.
            if not table.enabled(current, input, arg):
                results.append(None)
                continue
            value, effects = table.step(current, input, arg)
            results.append((labels[value.state], value.data, effects))
        return results
