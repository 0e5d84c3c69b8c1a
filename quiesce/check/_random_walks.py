"""Random walks: deep, cheap, incomplete checking of a model too big to explore.

What lives here: `walk`, the simulation mode of TLC (`-simulate`) and stateright
(`spawn_simulation`): from an initial state, take one enabled action at random, again and
again, checking every `always` property in every state visited, until the walk rests (no
move left), reaches `max_depth`, or breaks a property. And `Walks`, the loop every walker
shares, with the `Chooser` that picks each move: `walk` picks uniformly (`Uniform`), the
swarm's walkers (`_swarm`) pick toward rows and states not seen yet. What it does not know:
any model; it uses the same `Model` interface as the exhaustive `check`.

What a walk can find, and how it is reported (a `CheckResult`, as `check`):
- an `always` property false in a visited state: the walk up to it is the trace (not the
  shortest one; `check` finds that when the model is small enough);
- a deadlock (PROTOCOL.md I7, and every other goal of `Model.liveness_goals`): a state
  outside a goal with no fault-free move;
- a stall cycle: the walk comes back to a state it visited, through fault-free steps
  only and no state of the goal on the way; the trace is a lasso (`Trace.loop_from`).
A walk that finds nothing proves nothing: `complete` is always false. Faults are chosen
with probability `fault_rate` when any is enabled, so a budget of one fault is spent at a
uniformly random point of most walks rather than on the first step.

>>> result = walk(MyModel(), walks=100, max_depth=200, seed=7)  # doctest: +SKIP
>>> result.ok  # doctest: +SKIP
True
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Hashable
from typing import Any, Generic, Protocol, TypeVar

from quiesce.check._explorer import (
    Action,
    CheckResult,
    Kind,
    Model,
    Progress,
    Step,
    Trace,
    Violation,
    paused_gc,
)

__all__ = ["Chooser", "Move", "Uniform", "Walks", "property_names", "walk"]

St = TypeVar("St", bound=Hashable)
Move = tuple[Action, St]
"""An enabled action and the state it leads to."""


def walk(
    model: Model[St],
    *,
    walks: int,
    max_depth: int = 500,
    seed: int = 0,
    fault_rate: float = 0.05,
    stop_on_violation: bool = True,
    progress: Callable[[Progress], None] | None = None,
    progress_every: int = 1_000,
) -> CheckResult[St]:
    """Take `walks` random walks of at most `max_depth` steps through `model`.

    The walks are reproducible: the same `seed` takes the same steps. `distinct_states` is
    the number of different states visited, `generated_states` the steps taken, `depth`
    the longest walk. With `stop_on_violation` the first violation ends the run; otherwise
    the first one of each property is kept and the walks go on. `progress` is called after
    every `progress_every` walks (`frontier` then counts the walks left).
    """
    if walks < 1 or max_depth < 1:
        raise ValueError(f"walks ({walks}) and max_depth ({max_depth}) must be at least 1")
    if not 0.0 <= fault_rate <= 1.0:
        raise ValueError(f"fault_rate {fault_rate} must lie in [0, 1]")
    with paused_gc():
        started = time.perf_counter()
        runner = Walks(model, max_depth=max_depth, stop_on_violation=stop_on_violation)
        chooser = Uniform(runner, fault_rate)
        every = max(1, progress_every)
        rng = random.Random(seed)
        for number in range(walks):
            if stop_on_violation and runner.found:
                break
            if progress is not None and number and number % every == 0:
                elapsed = time.perf_counter() - started
                seen, steps = len(chooser.seen), runner.steps_taken
                progress(Progress(seen, steps, walks - number, elapsed, runner.longest))
            runner.walk(rng, chooser)
        return runner.result(
            distinct_states=len(chooser.seen), seconds=time.perf_counter() - started
        )


def property_names(model: Model[Any]) -> tuple[str, ...]:
    """Every property a walk of `model` checks: the `always` ones, then the liveness goals."""
    goals = model.liveness_goals() if model.liveness else ()
    return tuple(p.name for p in model.properties()) + tuple(name for name, _ in goals)


class Chooser(Protocol[St]):
    """How a walker picks its moves (and what it does with the states it meets).

    `Walks.walk` calls, in each state of a walk: `visit(state)`, then `fault_free(state,
    rng)` (a fault-free move, or None when there is none: a deadlock outside a goal), then
    `with_fault(state, rng, move)` (the move to take: `move` itself, or a fault instead).
    """

    def visit(self, state: St) -> None:
        """The walk stands in `state` (the initial state, or the one its last move chose)."""

    def fault_free(self, state: St, rng: random.Random) -> Move[St] | None:
        """A fault-free move out of `state`, or None when there is none."""

    def with_fault(self, state: St, rng: random.Random, move: Move[St] | None) -> Move[St] | None:
        """The move to take out of `state`: `move`, or a fault; None ends the walk."""


class Walks(Generic[St]):
    """The walk loop every walker shares, and what its walks found.

    One `walk` call is one walk: from a random initial state, `max_depth` moves at most,
    each picked by a `Chooser`; stalls (deadlocks and cycles avoiding a goal) are judged
    here, `always` properties by `check`, called by the chooser in the states it checks.
    `found` keeps the first violation of each property; `initial` and `path` are the walk
    under way (a chooser reporting a violation one step ahead passes that step to `check`).
    """

    def __init__(self, model: Model[St], *, max_depth: int, stop_on_violation: bool) -> None:
        self.model = model
        self.max_depth = max_depth
        self.stop_on_violation = stop_on_violation
        self.checks = tuple((p.name, p.holds) for p in model.properties())
        self.goals = tuple(model.liveness_goals()) if model.liveness else ()
        self.initials = list(model.init_states())
        self.found: dict[str, Violation[St]] = {}
        self.steps_taken = 0
        self.longest = 0
        self.initial: St = self.initials[0]
        self.path: list[Step[St]] = []

    @property
    def done(self) -> bool:
        """Should the walk under way stop (a violation was found and that ends the run)?"""
        return self.stop_on_violation and bool(self.found)

    def report(self, name: str, kind: Kind, path: list[Step[St]], loop: int | None) -> None:
        """Keep the violation of `name` along `path` from `initial`, unless one is kept."""
        if name not in self.found:
            self.found[name] = Violation(name, kind, Trace(self.initial, tuple(path), loop))

    def check(self, state: St, step: Step[St] | None = None) -> None:
        """Check every `always` property in `state`: the state the walk stands in, or (with
        `step`) the state one step further along `path`."""
        for name, holds in self.checks:
            if not holds(state):
                self.report(name, "always", self.path if step is None else [*self.path, step], None)

    def walk(self, rng: random.Random, chooser: Chooser[St]) -> None:
        """Take one walk, its moves picked by `chooser`."""
        self.initial = state = rng.choice(self.initials)
        path: list[Step[St]] = []
        self.path = path
        # Where each state of this walk was first seen: coming back to it is a stall cycle
        # of a goal unless a state of that goal or a fault step lies in between
        # (`excuses[g]`, the newest index of either).
        where: dict[St, int] = {state: 0}
        excuses = [-1] * len(self.goals)
        for depth in range(self.max_depth + 1):
            chooser.visit(state)
            if self.done:
                break
            missed = []
            for g, (name, reached) in enumerate(self.goals):
                if reached(state):
                    excuses[g] = depth
                else:
                    missed.append(name)
            if depth == self.max_depth:
                break
            move = chooser.fault_free(state, rng)
            if self.done:
                break
            if move is None and missed:
                for name in missed:
                    self.report(name, "deadlock", path, None)
                break
            move = chooser.with_fault(state, rng, move)
            if move is None:
                break  # at rest: nothing left to do
            action, state = move
            if action.fault:
                excuses = [depth + 1] * len(excuses)
            path.append(Step(action, state))
            self.steps_taken += 1
            earlier = where.get(state)
            if earlier is not None:
                stalled = [name for (name, _), e in zip(self.goals, excuses, strict=True)
                           if e < earlier]  # fmt: skip
                for name in stalled:
                    self.report(name, "cycle", path, earlier)
                if stalled:
                    break
            where.setdefault(state, depth + 1)
        self.longest = max(self.longest, len(path))

    def result(self, *, distinct_states: int, seconds: float) -> CheckResult[St]:
        """What the walks so far found, as a `check` result (never complete)."""
        names = property_names(self.model)
        return CheckResult(
            model=self.model,
            distinct_states=distinct_states,
            generated_states=self.steps_taken,
            depth=self.longest,
            seconds=seconds,
            truncated=True,
            symmetry=False,
            properties=names,
            violations=tuple(self.found[name] for name in names if name in self.found),
            complete=False,
        )


class Uniform(Generic[St]):
    """The chooser of `walk`: a uniformly random fault-free move, and a fault instead with
    probability `fault_rate` (or when nothing else is enabled). Every state visited is
    checked and kept, exactly, in `seen`."""

    def __init__(self, walks: Walks[St], fault_rate: float) -> None:
        self.walks = walks
        self.model = walks.model
        self.fault_rate = fault_rate
        self.seen: set[St] = set()
        self._faults: list[Action] = []

    def visit(self, state: St) -> None:
        self.seen.add(state)
        self.walks.check(state)

    def fault_free(self, state: St, rng: random.Random) -> Move[St] | None:
        normal: list[Action] = []
        faults: list[Action] = []
        self._faults = faults
        for action in self.model.actions(state):
            (faults if action.fault else normal).append(action)
        return self._first(state, normal, rng)

    def with_fault(self, state: St, rng: random.Random, move: Move[St] | None) -> Move[St] | None:
        faults = self._faults
        if faults and (move is None or rng.random() < self.fault_rate):
            return self._first(state, faults, rng) or move
        return move

    def _first(self, state: St, actions: list[Action], rng: random.Random) -> Move[St] | None:
        """A random one of `actions` that `next_state` accepts (taken out of the list), or
        None. A stuttering self-loop does not count when the model says self-loops cannot
        stall (`stutter_stalls = False`)."""
        model = self.model
        while actions:
            action = actions.pop(rng.randrange(len(actions)))
            following = model.next_state(state, action)
            if following is None:
                continue
            if not action.fault and not model.stutter_stalls and following == state:
                continue
            return action, following
        return None
