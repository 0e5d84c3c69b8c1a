"""The protocol model with every step checked against the design (`--refine`).

What lives here: `RefinedModel`, a `Model` that runs the implementation model (`protocol`)
step for step and judges each step by refinement (`_refinement`): a step that maps to no
design step breaks the `refinement` property in the state it reaches, so the explorer and
the random walks report it like any other violation, its trace ending in that step (the
last two states are the states on both sides of it, and the state reached names the move
the design never makes). `refine` builds one. What it does not know: how the mapping is
made (`_refinement`).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any, NamedTuple

from quiesce.check import Action, Always, Model, Step, Trace, always
from quiesce.models.implementation import ProtocolModel, PState
from quiesce.models.refinement._refinement import (
    DesignSteps,
    RefinementUnsupported,
    design_params,
    implementation_view,
)

__all__ = ["REFINEMENT", "Refined", "RefinedModel", "refine"]

REFINEMENT = "refinement"
"""The property a step that maps to no design step breaks."""


class Refined(NamedTuple):
    """An implementation state, and why the step that reached it maps to no design step
    (`""`: it maps to one, or stutters)."""

    state: PState
    unmapped: str


class RefinedModel(Model[Refined]):
    """`inner`, each of its steps checked against `design` (see the module doc)."""

    def __init__(self, inner: ProtocolModel, design: DesignSteps) -> None:
        self.inner = inner
        self.design = design
        self.name = inner.name
        self.params = inner.params
        self.liveness = inner.liveness
        self.stutter_stalls = inner.stutter_stalls

    def init_states(self) -> Iterable[Refined]:
        for state in self.inner.init_states():
            yield Refined(state, self.design.check_initial(implementation_view(state)))

    def actions(self, state: Refined) -> Iterable[Action]:
        return self.inner.actions(state.state)

    def next_state(self, state: Refined, action: Action) -> Refined | None:
        following = self.inner.next_state(state.state, action)
        if following is None:
            return None
        before, after = implementation_view(state.state), implementation_view(following)
        return Refined(following, self.design.check(before, after))

    def properties(self) -> Sequence[Always]:
        inner = tuple(_lifted(p) for p in self.inner.properties())
        mapped = always(
            REFINEMENT,
            lambda r: not r.unmapped,
            "every step maps to a step of the design model, or stutters",
        )
        return (*inner, mapped)

    def is_goal(self, state: Refined) -> bool:
        return self.inner.is_goal(state.state)

    def liveness_goals(self) -> Sequence[tuple[str, Callable[[Refined], bool]]]:
        return tuple(
            (name, lambda r, goal=goal: goal(r.state)) for name, goal in self.inner.liveness_goals()
        )

    def canonical(self, state: Refined) -> Hashable:
        return (self.inner.canonical(state.state), state.unmapped)

    def describe_state(self, state: Refined) -> Any:
        described = self.inner.describe_state(state.state)
        if not state.unmapped:
            return described
        return {"unmapped step": state.unmapped, "state": described}

    def tables(self) -> Sequence[str]:
        return self.inner.tables()

    def project(self, trace: Trace[Refined], table: str) -> list[dict[str, str]]:
        return self.inner.project(_unwrapped(trace), table)

    def message(
        self, before: Refined, action: Action, after: Refined
    ) -> tuple[str, str, str] | None:
        return self.inner.message(before.state, action, after.state)

    def participants(self) -> Sequence[str]:
        return self.inner.participants()


def refine(model: Model[Any]) -> RefinedModel:
    """`model` (the `protocol` model) with every step checked against the design model at
    the matching size; the design is exhausted first (at §8's reference size: under a minute).
    """
    if not isinstance(model, ProtocolModel):
        raise RefinementUnsupported(f"model {model.name!r} (only the protocol model refines)")
    return RefinedModel(model, DesignSteps(design_params(model.p)))


def _lifted(prop: Always) -> Always:
    return always(prop.name, lambda r: prop.holds(r.state), prop.doc)


def _unwrapped(trace: Trace[Refined]) -> Trace[PState]:
    steps = tuple(Step(step.action, step.state.state) for step in trace.steps)
    return Trace(trace.initial.state, steps, trace.loop_from)
