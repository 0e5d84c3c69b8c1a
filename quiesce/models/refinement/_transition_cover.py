"""The transition cover: every design transition replayed on the pure `System` (`quiesce cover`).

What lives here: `design_cover` (for every distinct step label of the design model, a
shortest design trace that ends by taking it, found by one breadth-first exhaustion),
`replay` (one such trace followed by the pure world simulator, `System`, as the protocol
model drives it), and `transition_cover`, which does both at one configuration and
returns a `CoverReport`. What it does not know: the projection itself (`_refinement`: the
fences' view) or how the System steps (`_protocol_model`, `_system`).

How a design trace is replayed (SandTable-style: the design's behaviour is conformance-
checked on the implementation one transition at a time). The System is driven through the
protocol model's actions: its inputs (triggers, turns, deliveries, timers) and its faults
(lost and duplicated messages, crashes, wrong digests) within the same fault budget. Both
levels are compared through refinement's projection, each participant's fence, with ids
renamed by rank in the view (the design's ranks and the System's `OpId`s then read alike).
The replay keeps the set of *every* System state whose projection equals the design
state's, not one guessed state: a design step may be matched by several System paths,
and a greedy choice could strand a replay a later step needs. For each design step
`d -> d'` the System may take any number of steps while every fence shows its value in
`d` or in `d'` (the design calls atomically and moves several fences in one step only
where the System moves them one at a time; it runs the controller's local steps inside a
call where the System rests between them, which the projection leaves out), and the step
is reproduced by every System state so reached whose projection is `d'`'s. A step that
leaves the set empty is the transition that could not be reproduced: the report names it,
the design's projections on both sides, and the projections the System did reach instead.

What a replay proves: every fence move the design makes, in the order this trace makes
them, is a run of the real controller and participants (an implementation that records a
resume wrongly, or refuses a call the design serves, fails the step that needs it). What
it cannot prove: that the controllers agree between fence moves (the projection leaves
them out, as refinement does; the invariants judge them).

Transitions the System cannot produce by construction are `ABSTRACTED`, each with the
reason (`ABSTRACTIONS`), never silently skipped; so would be a label every design run
reaches only through such a transition (measured: none at fault budget 1 or 2). Every
other step label must replay: its trace is the shortest that takes no abstracted step
before its last.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, NamedTuple

from quiesce.models.design import DesignModel, Reached
from quiesce.models.implementation import Hooks, ProtocolModel, ProtocolParams, PState
from quiesce.models.refinement._refinement import (
    Fence,
    View,
    by_rank,
    design_params,
    design_view,
    implementation_view,
)
from quiesce.models.scenarios import small_params

__all__ = [
    "ABSTRACTIONS",
    "COVER_PARAMS",
    "CoverReport",
    "DesignCover",
    "DesignTrace",
    "ReplayOutcome",
    "TransitionReplay",
    "abstraction",
    "design_cover",
    "replay",
    "transition_cover",
]

COVER_PARAMS = ProtocolParams(**small_params(faults=1, crashes=True))
"""The configuration `quiesce cover` replays by default: the smallest that crashes every
process (measured: 654 design states, 82 step labels, all replayed; 15,900 System states
stepped, about 10 s CPU)."""

ABSTRACTIONS: Mapping[str, str] = {
    "[restore_failure]": (
        "the design's participant may fail a restore on its own side; the System's "
        "participant fails one only on an artifact it cannot decode or whose digest differs, "
        "and the System's store hands back every artifact as stored (its one restore fault "
        "corrupts the digest of the reply, `[wrong_digest]`)"
    ),
}
"""Design step labels the System cannot produce by construction: a fault tag a label
carries -> why the System has no counterpart."""

Projection = tuple[Fence, ...]
"""A view's fences with the ids renamed 1, 2, ... by rank within the view."""


class ReplayOutcome(Enum):
    """What replaying one design step label on the System came to."""

    REPLAYED = "replayed"  # every step of its trace reproduced
    ABSTRACTED = "abstracted"  # the System cannot take it by construction (`ABSTRACTIONS`)
    MISMATCH = "mismatch"  # a step of its trace could not be reproduced


@dataclass(frozen=True, slots=True)
class DesignTrace:
    """A shortest design run that ends by taking the step `label`: its initial state and
    every step's label and state reached (the last step's label is `label`)."""

    label: str
    initial: Reached
    steps: tuple[tuple[str, Reached], ...]

    def labels(self) -> tuple[str, ...]:
        """The labels of its steps, in order."""
        return tuple(label for label, _ in self.steps)


@dataclass(frozen=True, slots=True)
class TransitionReplay:
    """The replay of the trace covering `label` (`trace`: its steps' labels): its
    `outcome`, and for a mismatch the step it stopped at (`step`, counting from 0, and its
    label `failed`), the design's projections on both sides of it, the projections the
    System reached instead (`reached`, a few) and `reason`; for an abstraction, `reason`."""

    label: str
    trace: tuple[str, ...]
    outcome: ReplayOutcome
    reason: str = ""
    step: int | None = None
    failed: str = ""
    before: Projection = ()
    after: Projection = ()
    reached: tuple[Projection, ...] = ()

    def describe(self) -> dict[str, Any]:
        """The replay as a JSON-ready mapping."""
        described: dict[str, Any] = {
            "label": self.label,
            "outcome": self.outcome.value,
            "trace": list(self.trace),
        }
        if self.outcome is not ReplayOutcome.REPLAYED:
            described["reason"] = self.reason
        if self.outcome is ReplayOutcome.MISMATCH:
            described.update(
                step=self.step,
                failed=self.failed,
                before=_shown(self.before),
                after=_shown(self.after),
                reached=[_shown(p) for p in self.reached],
            )
        return described

    def explain(self) -> str:
        """Lines for a person: what failed, where, and the projections."""
        if self.outcome is not ReplayOutcome.MISMATCH:
            return f"{self.label}: {self.outcome.value} ({self.reason or 'every step'})"
        lines = [
            f"{self.label}: step {self.step} of {len(self.trace)} ({self.failed!r}) could not "
            f"be reproduced: {self.reason}",
            f"  trace:        {' ; '.join(self.trace)}",
            f"  design before: {_shown(self.before)}",
            f"  design after:  {_shown(self.after)}",
        ]
        lines += [f"  System reached: {_shown(p)}" for p in self.reached]
        if not self.reached:
            lines.append("  System reached: no other fence values (no System path moves them)")
        return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class CoverReport:
    """The transition cover at `params` (the design at `design`, `design_states` states):
    one replay per distinct design step label, and how many System states were stepped."""

    params: ProtocolParams
    design: Mapping[str, Any]
    design_states: int
    system_states: int
    replays: tuple[TransitionReplay, ...]

    def count(self, outcome: ReplayOutcome) -> int:
        """How many step labels came to `outcome`."""
        return sum(r.outcome is outcome for r in self.replays)

    @property
    def mismatches(self) -> tuple[TransitionReplay, ...]:
        """The replays that stopped at a step the System could not reproduce."""
        return tuple(r for r in self.replays if r.outcome is ReplayOutcome.MISMATCH)

    @property
    def ok(self) -> bool:
        """Whether every step label replayed or is a listed abstraction."""
        return not self.mismatches

    def describe(self) -> dict[str, Any]:
        """The report as a JSON-ready mapping (`quiesce cover --json`)."""
        return {
            "ok": self.ok,
            "params": self.params.describe(),
            "design": dict(self.design),
            "design_states": self.design_states,
            "system_states": self.system_states,
            "covered": len(self.replays),
            **{o.value: self.count(o) for o in ReplayOutcome},
            "replays": [r.describe() for r in self.replays],
        }


class DesignCover(NamedTuple):
    """A shortest trace per distinct step label (ordered by label) that takes no
    abstracted step before its last; the labels no such trace takes (`beyond`: every run
    taking them takes an abstracted step first); and how many states the design has."""

    traces: tuple[DesignTrace, ...]
    beyond: tuple[str, ...]
    states: int


def abstraction(label: str) -> str | None:
    """Why the System cannot take a design step labelled `label` (None: it can)."""
    return next((why for tag, why in ABSTRACTIONS.items() if tag in label), None)


def design_cover(model: DesignModel) -> DesignCover:
    """For every distinct step label of `model`, a shortest trace ending by taking it and
    taking no abstracted step before (`ABSTRACTIONS`: such a trace could not be replayed
    past that step, whatever its last step is).

    Breadth-first: the first time a label is taken, it is taken from a state at the least
    depth any state taking it has, so the parent links to that state give a shortest trace.
    An abstracted step is noted as taken but not followed.
    """
    initial = list(model.init_states())
    parent: dict[Reached, tuple[Reached, str] | None] = dict.fromkeys(initial)
    first: dict[str, tuple[Reached, Reached]] = {}
    frontier = deque(initial)
    while frontier:
        state = frontier.popleft()
        for action, following in model.successors(state):
            first.setdefault(action.label, (state, following))
            if following not in parent and abstraction(action.label) is None:
                parent[following] = (state, action.label)
                frontier.append(following)
    traces = []
    for label in sorted(first):
        state, following = first[label]
        steps = [(label, following)]
        link = parent[state]
        while link is not None:
            steps.append((link[1], state))
            state = link[0]
            link = parent[state]
        traces.append(DesignTrace(label, state, tuple(reversed(steps))))
    labels, states = _every_label(model)
    return DesignCover(tuple(traces), tuple(sorted(labels - first.keys())), states)


def _every_label(model: DesignModel) -> tuple[set[str], int]:
    """Every step label `model` takes, abstracted steps followed, and its state count."""
    seen = set(model.init_states())
    frontier = list(seen)
    labels = set()
    while frontier:
        for action, following in model.successors(frontier.pop()):
            labels.add(action.label)
            if following not in seen:
                seen.add(following)
                frontier.append(following)
    return labels, len(seen)


class _System:
    """The System as the protocol model drives it, every state's successors and projection
    computed once (the traces share their prefixes, so most steps are asked again), and the
    System states the last replayed trace reached after each of its steps (`trail`): a trace
    sharing a prefix with it starts after that prefix instead of following it again."""

    def __init__(self, model: ProtocolModel) -> None:
        self.model = model
        self._next: dict[PState, list[tuple[PState, Projection]]] = {}
        self._trail_from: Reached | None = None
        self._trail: list[tuple[tuple[str, Reached], set[PState]]] = []

    def initial(self) -> list[tuple[PState, Projection]]:
        return _projected(self.model.init_states())

    def successors(self, state: PState) -> list[tuple[PState, Projection]]:
        found = self._next.get(state)
        if found is None:
            found = self._next[state] = _projected(s for _, s in self.model.successors(state))
        return found

    @property
    def stepped(self) -> int:
        return len(self._next)

    def known(self, trace: DesignTrace) -> list[set[PState]]:
        """The System states after each step of the longest prefix `trace` shares with the
        last trace replayed (the same design states, by identity: the cover's traces are
        paths of one tree), forgetting the rest of that trace."""
        shared = 0
        if self._trail_from is trace.initial:
            for (label, state), ((was_label, was_state), _) in zip(
                trace.steps, self._trail, strict=False
            ):
                if label != was_label or state is not was_state:
                    break
                shared += 1
        else:
            self._trail_from = trace.initial
        del self._trail[shared:]
        return [states for _, states in self._trail]

    def remember(self, step: tuple[str, Reached], states: set[PState]) -> None:
        """The System states reached after `step`, the next step of the trace being replayed."""
        self._trail.append((step, states))


def _projected(states: Iterable[PState]) -> list[tuple[PState, Projection]]:
    return [(s, by_rank(implementation_view(s).fences)) for s in states]


def replay(trace: DesignTrace, system: ProtocolModel | _System) -> TransitionReplay:
    """Replay `trace` on the System (see the module doc); a `ProtocolModel` is wrapped."""
    runner = system if isinstance(system, _System) else _System(system)
    why = abstraction(trace.label)
    if why is not None:
        return TransitionReplay(trace.label, trace.labels(), ReplayOutcome.ABSTRACTED, why)
    before = design_view(trace.initial.state)
    start = by_rank(before.fences)
    current = {s for s, p in runner.initial() if p == start}
    if not current:
        reached = tuple(sorted({p for _, p in runner.initial()}))
        return _mismatch(trace, 0, "", start, start, reached, "no initial System state matches")
    known = runner.known(trace)
    for index, (label, reached_state) in enumerate(trace.steps):
        after = design_view(reached_state.state)
        if index < len(known):
            current, before = known[index], after
            continue
        following, elsewhere = _follow(runner, current, before, after)
        if not following:
            why = "no System path moves the fences as this design step does"
            return _mismatch(
                trace, index, label, by_rank(before.fences), by_rank(after.fences), elsewhere, why
            )
        runner.remember((label, reached_state), following)
        current, before = following, after
    return TransitionReplay(trace.label, trace.labels(), ReplayOutcome.REPLAYED)


_SHOWN_REACHED = 3
"""How many of the projections the System reached instead a mismatch lists."""


def _follow(
    runner: _System, current: set[PState], before: View, after: View
) -> tuple[set[PState], tuple[Projection, ...]]:
    """The System states reachable from `current` with every fence at its value in
    `before` or `after` throughout, whose projection is `after`'s; and, for a report, a few
    projections the System left that band for, the nearest to `after`'s first."""
    target = by_rank(after.fences)
    band = _interleavings(before, after)
    seen = set(current)
    stack = list(current)
    following = {s for s in current if target == by_rank(before.fences)}
    elsewhere: set[Projection] = set()
    while stack:
        for state, projection in runner.successors(stack.pop()):
            if projection not in band:
                elsewhere.add(projection)
            elif state not in seen:
                seen.add(state)
                stack.append(state)
                if projection == target:
                    following.add(state)

    def distance(projection: Projection) -> tuple[int, str]:
        # The nearest first: a planted bug shows as the target with one fence wrong.
        return sum(a != b for a, b in zip(projection, target, strict=True)), repr(projection)

    return following, tuple(sorted(elsewhere, key=distance)[:_SHOWN_REACHED])


def _interleavings(before: View, after: View) -> frozenset[Projection]:
    """Every projection with each fence at its value in `before` or in `after`."""
    pairs = zip(before.fences, after.fences, strict=True)
    choices = [(was,) if was == now else (was, now) for was, now in pairs]
    return frozenset(by_rank(fences) for fences in itertools.product(*choices))


_BEYOND = "every design run taking it takes an abstracted step first (see `ABSTRACTIONS`)"


def _mismatch(
    trace: DesignTrace,
    index: int,
    label: str,
    before: Projection,
    after: Projection,
    reached: Iterable[Projection],
    reason: str,
) -> TransitionReplay:
    return TransitionReplay(
        trace.label,
        trace.labels(),
        ReplayOutcome.MISMATCH,
        reason,
        index,
        label,
        before,
        after,
        tuple(reached),
    )


def _shown(projection: Projection) -> list[dict[str, Any]]:
    names = ("state", "active", "high_watermark", "recorded")
    return [dict(zip(names, fence, strict=True)) for fence in projection]


def transition_cover(
    params: ProtocolParams = COVER_PARAMS, *, hooks: Hooks | None = None
) -> CoverReport:
    """Cover every step label of the design model at `params`' size and replay each trace
    on the System (`hooks`: a variant of it, e.g. a planted bug). Raises
    `RefinementUnsupported` for a configuration the design has no counterpart of, and
    `ValueError` for a size the design model refuses (before replaying anything)."""
    design = DesignModel(design_params(params))
    cover = design_cover(design)
    runner = _System(ProtocolModel(params, hooks=hooks))
    beyond = (
        TransitionReplay(label, (), ReplayOutcome.ABSTRACTED, _BEYOND) for label in cover.beyond
    )
    # Replayed in the order of their steps' labels, so that consecutive traces share the
    # longest prefixes (the runner starts each one after the prefix it shares with the last).
    in_order = sorted(cover.traces, key=DesignTrace.labels)
    replays = tuple(
        sorted((*(replay(t, runner) for t in in_order), *beyond), key=lambda r: r.label)
    )
    return CoverReport(
        params=params,
        design=design.p.describe(),
        design_states=cover.states,
        system_states=runner.stepped,
        replays=replays,
    )
