"""Refinement: every step of an implementation run is a step of the design, or stutters.

What lives here: the *view* both levels of model are projected onto (PROTOCOL.md §8, "Two
levels of model"), `DesignSteps` (the views' transitions the design model takes, collected
by exhausting it at the implementation's size) and its `check` of one implementation step
(`check_move`: of one participant's fence). What it does not know: how a run is produced
(`_refined_model` wraps the protocol model's steps for the explorer and the random walks;
`_log_validation` reads a recorded fence log).

The view is what both levels hold alike and move at the same grain: each participant's
fence (M2: its state, active id, high-watermark and which results it recorded). Ids are
compared by their order only, so a pair of fences is renamed jointly: the ids the two
mention become 1, 2, ... in order (the design's ranks and the implementation's `OpId`s
then read alike).

Why fences, one at a time. A design call is atomic (request and reply are one step) while
the implementation delivers them apart: a fence moves when the request arrives, in both
models one request at a time, but the controller's machines move when the reply does, and
the design runs the controller's local steps (intent, cut, publish, the next walk) inside
that same step where the implementation may rest between them (measured: an implementation
rests in `flushing_acks`, which the design passes through when nothing is owed). So the
controller's states are not in the view, and a step is judged one fence at a time: every
fence it changes must move the way some design step moves that participant's fence, and a
step that changes none stutters. What this catches: a fence move the composed design never
makes (a watermark lowered, an id activated over another, a state entered from the wrong
one, a result it must replay left unrecorded), whatever the invariants say. What it cannot
catch: the controller's own moves (the invariants judge those), or two fences each moving
as the design allows but never in that combination.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import fields
from typing import Any, NamedTuple

from quiesce.fsm import QuiesceError
from quiesce.models.design import NAMES, DesignModel, DesignParams, DesignState
from quiesce.models.implementation import ProtocolParams, PState
from quiesce.protocol import OpId
from quiesce.protocol.machines import FenceOp, FenceState

__all__ = [
    "DesignSteps",
    "RefinementUnsupported",
    "View",
    "by_rank",
    "design_params",
    "design_view",
    "fence_view",
    "implementation_view",
]

Fence = tuple[str, Any, Any, tuple[tuple[Any, str], ...]]
"""A fence's view: its state, its active id, its high-watermark (None: none) and the
`(id, op)` of the results it recorded (the results themselves differ between the levels:
the design's digests are symbols)."""


class View(NamedTuple):
    """What both levels hold alike (see the module doc): the fences, by participant."""

    fences: tuple[Fence, ...]


class RefinementUnsupported(QuiesceError):
    """The implementation model's configuration has no design counterpart."""

    def __init__(self, what: str) -> None:
        self.what = what
        super().__init__(
            f"refinement needs a configuration the design model has: {what}; "
            "set agents=1 and group_scored=false"
        )


def design_params(p: ProtocolParams) -> DesignParams:
    """The design model's size matching the implementation model's `p`.

    The fault budget is at least 1: the implementation's timers may fire at any moment, so
    a prepare deadline may outrun a request still in flight without any fault, where the
    design, whose calls are atomic, charges that request's timeout as one (measured: a
    fault-free implementation run resumes a participant the prepare never reached).
    """
    if p.agents != 1:
        raise RefinementUnsupported(f"agents={p.agents} (the design has one agent)")
    if p.group_scored:
        raise RefinementUnsupported("group_scored=true (the design's group is not scored)")
    # Every size and knob the two levels share, as the implementation sets it.
    shared = {f.name: getattr(p, f.name) for f in fields(DesignParams) if hasattr(p, f.name)}
    return DesignParams(**{**shared, "faults": max(1, p.faults)})


def design_view(state: DesignState) -> View:
    """The view of a design state (ranks 0 stand for no id)."""
    return View(
        tuple(
            (
                f.state.value,
                f.active or None,
                f.hwm or None,
                tuple(sorted((r, o) for r, o, _ in f.recorded)),
            )
            for f in state.parts.fences
        )
    )


def fence_view(
    state: FenceState,
    active: OpId | None,
    high_watermark: OpId | None,
    recorded: Iterable[tuple[OpId, FenceOp]],
) -> Fence:
    """The view of one implementation fence (a model's participant or a logged one)."""
    return (state.value, active, high_watermark, tuple(sorted((r, o.value) for r, o in recorded)))


def implementation_view(state: PState) -> View:
    """The view of an implementation-model state."""
    fences = (state.system.participant(name).fence for name in NAMES)
    return View(
        tuple(
            fence_view(
                f.state, f.data.active, f.data.high_watermark, (r[:2] for r in f.data.recorded)
            )
            for f in fences
        )
    )


Change = tuple[str, Hashable, Hashable]
"""One component's move: its name and its view before and after, ids renamed jointly."""


def changes(before: View, after: View) -> Iterable[Change]:
    """The moves of the components a step changed (none: the step stutters)."""
    for index, (was, now) in enumerate(zip(before.fences, after.fences, strict=True)):
        if was != now:
            yield _change(NAMES[index], was, now)


def _change(participant: str, was: Fence, now: Fence) -> Change:
    renamed_was, renamed_now = by_rank((was, now))
    return (f"fence of {participant}", renamed_was, renamed_now)


def by_rank(fences: tuple[Fence, ...]) -> tuple[Fence, ...]:
    """`fences` with the ids they mention renamed 1, 2, ... in order, jointly (None stays)."""
    mentioned = (i for f in fences for i in (f[1], f[2], *(r for r, _ in f[3])))
    rank = {i: n for n, i in enumerate(sorted({i for i in mentioned if i is not None}), 1)}
    return tuple(
        (state, rank.get(active), rank.get(hwm), tuple((rank[r], op) for r, op in recorded))
        for state, active, hwm, recorded in fences
    )


class DesignSteps:
    """The views' moves the design model takes at `params`, found by exhausting it."""

    def __init__(self, params: DesignParams) -> None:
        self.params = params
        model = DesignModel(params)
        initial = list(model.init_states())
        self.initial = frozenset(design_view(r.state) for r in initial)
        moves: set[Change] = set()
        seen = set(initial)
        frontier = initial
        while frontier:
            state = frontier.pop()
            before = design_view(state.state)
            for _, following in model.successors(state):
                moves.update(changes(before, design_view(following.state)))
                if following not in seen:
                    seen.add(following)
                    frontier.append(following)
        self.moves = frozenset(moves)
        self.fence_moves = frozenset((was, now) for _, was, now in moves)
        """The moves the design makes of any participant's fence (ids renamed)."""
        self.design_states = len(seen)

    def check_initial(self, view: View) -> str:
        """Why an implementation run's first state is no initial design state ("" if it is)."""
        if view in self.initial:
            return ""
        return f"the initial fences ({_show(view)}) are no initial fences of the design"

    def check(self, before: View, after: View) -> str:
        """Why an implementation step from `before` to `after` maps to no design step, or ""
        when it maps to one (or stutters)."""
        for change in changes(before, after):
            if change not in self.moves:
                return _unmapped(change)
        return ""

    def initial_fences(self) -> frozenset[Fence]:
        """The fences the design's participants start with."""
        return frozenset(fence for view in self.initial for fence in view.fences)

    def check_fence_move(self, was: Fence, now: Fence) -> str:
        """Why a fence moving from `was` to `now` is no move the design makes of any
        participant's fence, or "" when it is one (or the fence did not move).

        Any participant's, unlike `check`: a real policy or resources server is busy when
        a prepare arrives (generation calls and mutations take time) and answers
        `not_ready`, while the design's never is (a turn, its policy call and its
        mutations are one atomic step), so only the design's agent fence ever holds
        `preparing`. M2 is one table for every role; which outcome comes when is the
        role's, and that is what the design abstracts."""
        if was == now:
            return ""
        change = _change("a participant", was, now)
        return "" if change[1:] in self.fence_moves else _unmapped(change)


def _unmapped(change: Change) -> str:
    name, was, now = change
    return f"{name} moves {was} -> {now}, which no step of the design does"


def _show(view: View) -> str:
    return ", ".join(f"{n} {f}" for n, f in zip(NAMES, view.fences, strict=True))
