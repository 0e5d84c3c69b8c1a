"""Random walks: deep, cheap, incomplete checking of a model too big to explore.

What lives here: `walk`, the simulation mode of TLC (`-simulate`) and stateright
(`spawn_simulation`): from an initial state, take one enabled action at random, again and
again, checking every `always` property in every state visited, until the walk rests (no
move left), reaches `max_depth`, or breaks a property. What it does not know: any model;
it uses the same `Model` interface as the exhaustive `check`.

What a walk can find, and how it is reported (a `CheckResult`, as `check`):
- an `always` property false in a visited state: the walk up to it is the trace (not the
  shortest one; `check` finds that when the model is small enough);
- a deadlock (PROTOCOL.md I7): a state outside the goals with no fault-free move;
- a stall cycle: the walk comes back to a state it visited, through fault-free steps
  only and no goal state on the way; the trace is a lasso (`Trace.loop_from`).
A walk that finds nothing proves nothing: `complete` is always false. Faults are chosen
with probability `fault_rate` when any is enabled, so a budget of one fault is spent at a
uniformly random point of most walks rather than on the first step.

>>> result = walk(MyModel(), walks=100, max_depth=200, seed=7)  # doctest: +SKIP
>>> result.ok  # doctest: +SKIP
True
"""

from __future__ import annotations

import gc
import random
import time
from collections.abc import Callable, Hashable
from typing import Literal, TypeVar

from quiesce.models._explorer import (
    NO_STALL,
    Action,
    CheckResult,
    Model,
    Progress,
    Step,
    Trace,
    Violation,
)

__all__ = ["walk"]

St = TypeVar("St", bound=Hashable)
_Kind = Literal["always", "deadlock", "cycle"]


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
    collecting = gc.isenabled()
    gc.disable()
    try:
        report = _Reporter(progress, progress_every)
        return _walk(
            model, walks, max_depth, random.Random(seed), fault_rate, stop_on_violation, report
        )
    finally:
        if collecting:
            gc.enable()


def _walk(
    model: Model[St],
    walks: int,
    max_depth: int,
    rng: random.Random,
    fault_rate: float,
    stop_on_violation: bool,
    reporter: _Reporter,
) -> CheckResult[St]:
    started = time.perf_counter()
    checks = tuple((p.name, p.holds) for p in model.properties())
    liveness = model.liveness
    initials = list(model.init_states())
    seen: set[St] = set()
    found: dict[str, Violation[St]] = {}
    steps_taken = 0
    longest = 0

    def report(name: str, kind: _Kind, initial: St, path: list[Step[St]], loop: int | None) -> None:
        if name not in found:
            found[name] = Violation(name, kind, Trace(initial, tuple(path), loop))

    for number in range(walks):
        if stop_on_violation and found:
            break
        reporter(number, walks, len(seen), steps_taken, longest, started)
        initial = rng.choice(initials)
        state = initial
        path: list[Step[St]] = []
        # Where each state of this walk was first seen: coming back to it is a stall cycle
        # unless a goal state or a fault step lies in between (`last_excuse`, the newest
        # index of either).
        where: dict[St, int] = {initial: 0}
        last_excuse = -1
        for depth in range(max_depth + 1):
            seen.add(state)
            for name, holds in checks:
                if not holds(state):
                    report(name, "always", initial, path, None)
            if stop_on_violation and found:
                break
            goal = liveness and model.is_goal(state)
            if goal:
                last_excuse = depth
            if depth == max_depth:
                break
            normal, faults = _enabled(model, state)
            move = _first(model, state, normal, rng)
            if move is None and liveness and not goal:
                report(NO_STALL, "deadlock", initial, path, None)
                break
            if faults and (move is None or rng.random() < fault_rate):
                move = _first(model, state, faults, rng) or move
            if move is None:
                break  # at rest: nothing left to do
            action, following = move
            if action.fault:
                last_excuse = depth + 1
            path.append(Step(action, following))
            steps_taken += 1
            state = following
            earlier = where.get(state)
            if earlier is not None and liveness and last_excuse < earlier:
                report(NO_STALL, "cycle", initial, path, earlier)
                break
            where.setdefault(state, depth + 1)
        longest = max(longest, len(path))

    names = tuple(name for name, _ in checks) + ((NO_STALL,) if liveness else ())
    return CheckResult(
        model=model,
        distinct_states=len(seen),
        generated_states=steps_taken,
        depth=longest,
        seconds=time.perf_counter() - started,
        truncated=True,
        symmetry=False,
        properties=names,
        violations=tuple(found[name] for name in names if name in found),
        complete=False,
    )


class _Reporter:
    """Calls `progress` every `every` walks (nothing when `progress` is None)."""

    __slots__ = ("every", "progress")

    def __init__(self, progress: Callable[[Progress], None] | None, every: int) -> None:
        self.progress = progress
        self.every = max(1, every)

    def __call__(
        self, number: int, walks: int, seen: int, steps: int, longest: int, started: float
    ) -> None:
        if self.progress is not None and number and number % self.every == 0:
            elapsed = time.perf_counter() - started
            self.progress(Progress(seen, steps, walks - number, elapsed, longest))


def _enabled(model: Model[St], state: St) -> tuple[list[Action], list[Action]]:
    """The actions `model` offers in `state`: fault-free ones, then faults."""
    normal: list[Action] = []
    faults: list[Action] = []
    for action in model.actions(state):
        (faults if action.fault else normal).append(action)
    return normal, faults


def _first(
    model: Model[St], state: St, actions: list[Action], rng: random.Random
) -> tuple[Action, St] | None:
    """A random one of `actions` that `next_state` accepts (taken out of the list), or
    None. A stuttering self-loop does not count when the model says self-loops cannot
    stall (`stutter_stalls = False`)."""
    while actions:
        action = actions.pop(rng.randrange(len(actions)))
        following = model.next_state(state, action)
        if following is None:
            continue
        if not action.fault and not model.stutter_stalls and following == state:
            continue
        return action, following
    return None
