"""The explorer on tiny hand-made models whose answers are known by heart."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import pytest

from quiesce.check import (
    NO_STALL,
    Action,
    Always,
    Model,
    Trace,
    UnknownProjection,
    always,
    check,
    mermaid_sequence,
)

Edge = tuple[str, bool, Any]  # (label, fault, next state)


class Graph(Model[Any]):
    """A model given as an explicit graph: `state -> [(label, fault, next)]`."""

    liveness = True

    def __init__(
        self,
        edges: Mapping[Any, Sequence[Edge]],
        *,
        init: Sequence[Any] = (0,),
        goals: Iterable[Any] = (),
        props: Sequence[Always] = (),
        stutter_stalls: bool = True,
    ) -> None:
        self.name = "graph"
        self.params = {}
        self.edges = edges
        self.init = tuple(init)
        self.goals = frozenset(goals)
        self.props = tuple(props)
        self.stutter_stalls = stutter_stalls
        self._actions = {
            (state, label, fault, target): Action(label, fault, target)
            for state, out in edges.items()
            for label, fault, target in out
        }

    def init_states(self) -> Iterable[Any]:
        return self.init

    def actions(self, state: Any) -> Iterable[Action]:
        return [self._actions[(state, *edge)] for edge in self.edges.get(state, ())]

    def next_state(self, state: Any, action: Action) -> Any:
        return action.payload

    def properties(self) -> Sequence[Always]:
        return self.props

    def is_goal(self, state: Any) -> bool:
        return state in self.goals


class Counter(Model[int]):
    """0, 1, 2, ... up to `top`, stepping by +1 or +2; no liveness."""

    def __init__(self, top: int, bad: int | None = None) -> None:
        self.name = "counter"
        self.params = {"top": top}
        self.top = top
        self.bad = bad
        self._moves = (Action("inc1", payload=1), Action("inc2", payload=2))

    def init_states(self) -> Iterable[int]:
        return (0,)

    def actions(self, state: int) -> Iterable[Action]:
        return self._moves

    def next_state(self, state: int, action: Action) -> int | None:
        following = state + action.payload
        return following if following <= self.top else None

    def properties(self) -> Sequence[Always]:
        return (always("not_bad", lambda s: s != self.bad),)


class Tokens(Model[tuple[int, ...]]):
    """`n` interchangeable tokens, each moving 0 -> 1 -> 2; the goal is every token at 2."""

    liveness = True

    def __init__(self, n: int, *, loop: bool = False) -> None:
        self.name = "tokens"
        self.params = {"n": n}
        self.n = n
        self.loop = loop
        self._moves = tuple(Action(f"advance(t{i})", payload=i) for i in range(n))
        self._back = tuple(Action(f"back(t{i})", payload=i) for i in range(n))

    def init_states(self) -> Iterable[tuple[int, ...]]:
        return ((0,) * self.n,)

    def actions(self, state: tuple[int, ...]) -> Iterable[Action]:
        return self._moves + (self._back if self.loop else ())

    def next_state(self, state: tuple[int, ...], action: Action) -> tuple[int, ...] | None:
        i = action.payload
        if action in self._back:
            # A token at 1 may fall back to 0, but only while no token has finished.
            if state[i] != 1 or 2 in state:
                return None
            return (*state[:i], 0, *state[i + 1 :])
        if state[i] == 2:
            return None
        return (*state[:i], state[i] + 1, *state[i + 1 :])

    def properties(self) -> Sequence[Always]:
        return (always("not_all_done", lambda s: any(t != 2 for t in s)),)

    def is_goal(self, state: tuple[int, ...]) -> bool:
        return all(t == 2 for t in state)

    def canonical(self, state: tuple[int, ...]) -> Any:
        return tuple(sorted(state))

    def participants(self) -> Sequence[str]:
        return tuple(f"t{i}" for i in range(self.n))

    def message(
        self, before: tuple[int, ...], action: Action, after: tuple[int, ...]
    ) -> tuple[str, str, str] | None:
        i = action.payload
        return (f"t{i}", f"t{(i + 1) % self.n}", action.label)


def _replays(model: Model[Any], trace: Trace[Any]) -> bool:
    """Every step of `trace` is a real move of `model`."""
    return all(model.next_state(b, a) == s for b, a, s in trace.transitions())


# ---------------------------------------------------------------------- safety


def test_invariant_violation_has_the_shortest_trace() -> None:
    result = check(Counter(top=20, bad=7))
    violation = result.violation("not_bad")
    assert violation is not None and violation.kind == "always"
    # 7 = 2 + 2 + 2 + 1: four steps, and no shorter path exists.
    assert len(violation.trace) == 4
    assert violation.trace.states()[-1] == 7
    assert _replays(result.model, violation.trace)
    assert not result.ok and not result.complete


def test_clean_model_counts_states_edges_and_depth() -> None:
    result = check(Counter(top=10))
    assert result.ok and result.complete and not result.truncated
    assert result.distinct_states == 11
    # 1 initial + two moves from each of 0..8, one from 9.
    assert result.generated_states == 1 + 2 * 9 + 1
    assert result.depth == 5  # 10 = 2 * 5
    assert result.properties == ("not_bad",)


def test_stop_on_violation_false_collects_one_violation_per_property() -> None:
    props = (always("not_two", lambda s: s != 2), always("not_three", lambda s: s != 3))
    graph = Graph(
        {0: [("a", False, 1)], 1: [("b", False, 2)], 2: [("c", False, 3)]}, goals={3}, props=props
    )
    stopped = check(graph)
    assert [v.property for v in stopped.violations] == ["not_two"]
    every = check(graph, stop_on_violation=False)
    assert [v.property for v in every.violations] == ["not_two", "not_three"]
    assert [len(v.trace) for v in every.violations] == [2, 3]


# ---------------------------------------------------------------------- no stall


def test_deadlock_outside_the_goal_is_a_stall() -> None:
    graph = Graph({0: [("a", False, 1), ("b", False, 9)], 1: [("c", False, 2)], 9: []}, goals={9})
    violation = check(graph).violation(NO_STALL)
    assert violation is not None and violation.kind == "deadlock"
    assert [s.label for s in violation.trace.steps] == ["a", "c"]


def test_cycle_avoiding_the_goal_is_a_stall_with_its_loop() -> None:
    graph = Graph(
        {
            0: [("go", False, 1)],
            1: [("ping", False, 2)],
            2: [("pong", False, 1), ("done", False, 3)],
            3: [],
        },
        goals={3},
    )
    violation = check(graph).violation(NO_STALL)
    assert violation is not None and violation.kind == "cycle"
    trace = violation.trace
    assert [s.label for s in trace.steps] == ["go", "ping", "pong"]
    assert trace.loop_from == 1 and trace.states() == [0, 1, 2, 1]


def test_the_nearest_cycle_is_reported() -> None:
    # A far cycle 10 <-> 11 (three steps away) and a near one 1 <-> 2.
    graph = Graph(
        {
            0: [("far", False, 5), ("near", False, 1)],
            5: [("f1", False, 6)],
            6: [("f2", False, 10)],
            10: [("x", False, 11)],
            11: [("y", False, 10)],
            1: [("p", False, 2), ("out", False, 99)],
            2: [("q", False, 1)],
            99: [],
        },
        goals={99},
    )
    violation = check(graph).violation(NO_STALL)
    assert violation is not None
    assert [s.label for s in violation.trace.steps] == ["near", "p", "q"]


def test_cycles_through_a_goal_are_allowed() -> None:
    graph = Graph(
        {0: [("a", False, 1)], 1: [("b", False, 0), ("c", False, 2)], 2: []}, goals={0, 2}
    )
    assert check(graph).ok


def test_faults_are_left_out_of_the_liveness_graph() -> None:
    # The only cycle 0 -> 1 -> 0 closes through a fault: not a stall.
    cyclic = Graph(
        {0: [("work", False, 1)], 1: [("crash", True, 0), ("finish", False, 2)]}, goals={2}
    )
    assert check(cyclic).ok
    # A state whose only way out is a fault is deadlocked without faults.
    stuck = Graph({0: [("work", False, 1)], 1: [("crash", True, 2)]}, goals={2})
    violation = check(stuck).violation(NO_STALL)
    assert violation is not None and violation.kind == "deadlock"
    assert violation.trace.states() == [0, 1]


def test_self_loops_stall_unless_they_are_stuttering() -> None:
    edges: dict[Any, list[Edge]] = {
        0: [("spin", False, 0), ("go", False, 1)],
        1: [("idle", False, 1)],
    }
    strict = check(Graph(edges, goals={2})).violation(NO_STALL)
    assert strict is not None and strict.kind == "cycle"
    assert strict.trace.states() == [0, 0] and strict.trace.loop_from == 0
    stuttering = check(Graph(edges, goals={2}, stutter_stalls=False)).violation(NO_STALL)
    # As TLA+ stuttering, 0 still moves on to 1; 1 can only stutter: a deadlock.
    assert stuttering is not None and stuttering.kind == "deadlock"
    assert [s.label for s in stuttering.trace.steps] == ["go"]


# ---------------------------------------------------------------------- bounds


def test_max_states_truncates_without_false_stalls() -> None:
    graph = Graph({i: [("next", False, i + 1)] for i in range(100)}, goals={100})
    result = check(graph, max_states=10)
    assert result.truncated and not result.complete
    assert result.distinct_states == 10
    assert result.ok  # unexpanded states are neither deadlocks nor cycles
    assert check(graph).distinct_states == 101


def test_progress_is_reported() -> None:
    seen: list[int] = []
    check(Counter(top=50), progress=lambda p: seen.append(p.distinct_states), progress_every=10)
    assert seen and all(b > a for a, b in itertools.pairwise(seen))


# ---------------------------------------------------------------------- symmetry


@pytest.mark.parametrize("loop", [False, True])
def test_symmetry_reduces_states_and_preserves_verdicts(loop: bool) -> None:
    plain = check(Tokens(4, loop=loop), stop_on_violation=False)
    reduced = check(Tokens(4, loop=loop), symmetry=True, stop_on_violation=False)
    assert plain.distinct_states == 3**4
    assert reduced.distinct_states == 15  # multisets of 4 tokens over 3 positions
    assert [(v.property, v.kind) for v in plain.violations] == [
        (v.property, v.kind) for v in reduced.violations
    ]
    # The loop (a token falling back) is a fault-free cycle avoiding the goal.
    assert (reduced.violation(NO_STALL) is not None) is loop
    done = reduced.violation("not_all_done")
    assert done is not None and len(done.trace) == 8
    # Under symmetry the trace is still a real execution of the model.
    assert _replays(reduced.model, done.trace)


# ---------------------------------------------------------------------- output


def test_json_and_mermaid_render_a_violation() -> None:
    result = check(Tokens(2))
    document = result.to_json()
    assert document["model"] == "tokens" and document["params"] == {"n": 2}
    assert document["distinct_states"] == result.distinct_states
    [violation] = document["violations"]
    assert violation["property"] == "not_all_done"
    assert violation["trace"][0] == {"step": 0, "action": None, "fault": False, "state": "(0, 0)"}
    assert len(violation["trace"]) == 5
    trace = result.violations[0].trace
    diagram = mermaid_sequence(result.model, trace, title="not_all_done")
    assert diagram.startswith("sequenceDiagram\n    title not_all_done\n")
    assert diagram.count("->>") == 4


def test_projection_onto_an_unknown_table_names_the_known_ones() -> None:
    result = check(Tokens(2))
    with pytest.raises(UnknownProjection) as caught:
        result.model.project(result.violations[0].trace, "fence")
    assert caught.value.table == "fence" and caught.value.known == ()


def test_models_must_implement_the_core() -> None:
    incomplete: Callable[..., Any] = Model  # abstract: cannot be instantiated
    with pytest.raises(TypeError):
        incomplete()
