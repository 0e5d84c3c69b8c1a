"""An example as a program: the rule calls it made, recorded so that a failing one can be
replayed on a fresh participant and shortened by deleting whole steps.

Why the kit shortens on top of hypothesis: hypothesis shrinks the choices a sequence was
drawn from, and once an earlier step's choices are deleted the later ones decode to other
steps (the swarm flags that enable rules are decided lazily, rules are filtered by their
preconditions, and fresh ids and keys are counted from what the example did before). Its
shrinker then stops at a local minimum: 35 requests where one 5-request step of them fails
alone. Replaying the recorded calls without a step has no such problem.

What lives here: `recorded_rule` (hypothesis's `rule`, recording each top-level call in
the example's `program`), `replay` and `shorten`. What it does not know: what a rule sends
or how a reply is judged (`_machine`, `_judge`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Protocol, TypeVar, cast

from hypothesis.stateful import RuleBasedStateMachine, rule
from hypothesis.strategies import SearchStrategy

from quiesce.testing._deviations import Tolerated
from quiesce.testing._results import ConformanceViolation

__all__ = ["Program", "Step", "recorded_rule", "replay", "shorten"]

Step = tuple[str, dict[str, Any]]
"""One top-level rule call of an example: the rule's name and its drawn arguments."""

Program = tuple[Step, ...]
"""The rule calls of an example, in order (up to the one that failed, for a failing one)."""

Rule = TypeVar("Rule", bound=Callable[..., None])

_plain_rule: Callable[..., Callable[[Callable[..., None]], Callable[..., None]]] = rule
"""`hypothesis.stateful.rule` without a target bundle (its overloads cannot type `**`)."""


class Recording(Protocol):
    """What `recorded_rule` needs of the example it records into."""

    program: list[Step]
    depth: int
    ended: bool
    """Set once a tolerated difference left the example where the reference cannot follow:
    its remaining rules send nothing."""


def recorded_rule(**strategies: SearchStrategy[Any]) -> Callable[[Rule], Rule]:
    """`hypothesis.stateful.rule(**strategies)`, and each call of the rule that is not made
    by another rule (a scenario's `prepare`) is appended to the example's `program`. A
    `Tolerated` difference ends the top-level call quietly (and, unless the example could
    follow the server, the example: later calls send nothing)."""

    def decorate(function: Rule) -> Rule:
        @functools.wraps(function)
        def recorded(self: Recording, *args: Any, **arguments: Any) -> None:
            if self.depth == 0:
                if self.ended:
                    return
                self.program.append((function.__name__, dict(arguments)))
            self.depth += 1
            try:
                function(self, *args, **arguments)
            except Tolerated as tolerated:  # a declared deviation: the search goes on
                if self.depth > 1:
                    raise
                self.ended = not tolerated.resynced
            finally:
                self.depth -= 1

        return cast(Rule, _plain_rule(**strategies)(recorded))

    return decorate


def replay(
    machine: type[RuleBasedStateMachine], program: Program
) -> tuple[ConformanceViolation, Program] | None:
    """Run `program` on a new example of `machine` (a fresh participant: the machine resets
    or starts one); the violation it raised and the steps run up to it, or None if it
    passed or a step's precondition no longer holds (the program is not a possible
    example). Raises what the example raises otherwise (`Abort` for a broken setup)."""
    rules = {r.function.__name__: r for r in machine.setup_state().rules}
    try:
        example: Any = machine()
    except ConformanceViolation as violation:  # a fresh server that cannot be set up
        return violation, ()
    try:
        for name, arguments in program:
            if not all(holds(example) for holds in rules[name].preconditions):
                return None
            getattr(example, name)(**arguments)
    except ConformanceViolation as violation:
        return violation, tuple(example.program)
    finally:
        example.teardown()
    return None


def shorten(
    machine: type[RuleBasedStateMachine],
    program: Program,
    violation: ConformanceViolation,
    tries: int = 2,
) -> ConformanceViolation:
    """Delete whole steps of the failing `program` while what is left still breaks the same
    rule in no more requests; the violation of the shortest program found. A candidate is
    run up to `tries` times before it is kept out: a race may need a second run to fail."""
    index = 0
    while index < len(program):
        candidate = program[:index] + program[index + 1 :]
        for _ in range(tries):
            found = replay(machine, candidate)
            if found is not None and _no_worse(found[0], violation):
                violation, program = found
                break
        else:
            index += 1
    return violation


def _no_worse(found: ConformanceViolation, best: ConformanceViolation) -> bool:
    return found.rule == best.rule and len(found.sequence) <= len(best.sequence)
