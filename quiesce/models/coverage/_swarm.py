"""A bitstate swarm: many coverage-directed walkers, each on its own, their results merged.

What lives here: `swarm`, which runs `SwarmSettings.walkers` independent walkers (each
seeded differently) over the model a `SwarmRequest` names and merges what they found into
a `SwarmResult`: the table rows fired, the first counterexample of each property (the
shortest any walker found, replayed here step by step), and an estimate of the distinct
states of the whole swarm. `run_walker` is one walker (a pure function of its request and
its `WalkerPlan`, so it runs anywhere: here, by `run_in_process`, or as a Ray task,
`_swarm_ray`). What it does not know: where the walkers run (a `Runner` decides).

One walker takes `walks` random walks (`Walks`, the loop of `walk`), but at each step it
generates every successor, checks each one its bitstate (`Bitstate`) has not seen, and
moves, uniformly at random among the best ranked:
1. a successor whose step fired a table row from a source no walker had fired it from
   before (the row coverage of `_row_coverage`: the coverage the mutants are judged by);
2. else a successor the walker's bitstate has not seen;
3. else any; a fault is taken instead with probability `fault_rate`, or when it is the only
   move, or when it alone fires a new row.
The rows "fired before" are those of the waves before: walkers start in waves of
`SwarmSettings.wave`, each wave knowing the merged coverage of the earlier ones, so the
result depends on the seed alone, not on which walker finished first.

Why it is sound to merge. Walkers share nothing while they run: coverage merges by union,
counterexamples by picking one per property, bitstates by OR (`Merged`). What the
swarm finds is real (every trace replays); what it misses proves nothing: `complete` is
always false.

>>> result = swarm(SwarmRequest("design"), SwarmSettings(walkers=8, walks=2))  # doctest: +SKIP
>>> result.rows.fired <= result.rows.tracked  # doctest: +SKIP
True
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from quiesce.check import (
    Action,
    Bitstate,
    CheckResult,
    Kind,
    Merged,
    Model,
    Move,
    Progress,
    Step,
    Trace,
    Violation,
    Walks,
    build_model,
    paused_gc,
    property_names,
)
from quiesce.fsm import QuiesceError, RowEvent, Table, label
from quiesce.models.coverage._row_coverage import (
    RowCoverage,
    RowRecorder,
    recording_design_tables,
    recording_hooks,
)
from quiesce.models.design import DesignModel
from quiesce.models.implementation import UNREACHED_INPUTS, ProtocolModel

__all__ = [
    "DEFAULT_BITSTATE_BITS",
    "FoundViolation",
    "ReplayFailed",
    "RowReport",
    "Runner",
    "SwarmRequest",
    "SwarmResult",
    "SwarmSettings",
    "WalkerPlan",
    "WalkerResult",
    "run_in_process",
    "run_walker",
    "swarm",
]

St = TypeVar("St", bound=Hashable)

DEFAULT_BITSTATE_BITS = 25
"""log2 of the bits of every walker's bitstate (4 MiB): the merged estimate stays within a
few percent up to about 10^7 distinct states; past that, raise `--bitstate-bits`."""

SATURATED_FILL = 0.5
"""Past this fraction of bits set, the merged estimate is unreliable (the result says so)."""


@dataclass(frozen=True)
class SwarmRequest:
    """The model every walker builds for itself, as `quiesce check` names it: a registered
    model, its `--set` settings, the fault budget and the mutant. Plain data, so it
    travels to a Ray worker."""

    model: str
    settings: tuple[tuple[str, str], ...] = ()
    faults: int | None = None
    mutant: str | None = None

    def build(self) -> Model[Any]:
        """The model (raises what `build_model` raises for a bad request)."""
        return build_model(self.model, dict(self.settings), faults=self.faults, mutant=self.mutant)


@dataclass(frozen=True)
class SwarmSettings:
    """How big the swarm is: `walkers` walkers of `walks` walks of at most `max_depth`
    steps; `seed` seeds them all (walker i from `seed` and i); `wave` walkers start
    together (see the module doc); `log2_bits` sizes every bitstate."""

    walkers: int
    walks: int = 10
    max_depth: int = 500
    seed: int = 0
    fault_rate: float = 0.05
    log2_bits: int = DEFAULT_BITSTATE_BITS
    wave: int = 10
    stop_on_violation: bool = True

    def __post_init__(self) -> None:
        for name in ("walkers", "walks", "max_depth", "wave"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} ({getattr(self, name)}) must be at least 1")
        if not 0.0 <= self.fault_rate <= 1.0:
            raise ValueError(f"fault_rate {self.fault_rate} must lie in [0, 1]")
        if not 10 <= self.log2_bits <= 36:
            raise ValueError(f"log2_bits {self.log2_bits} must lie in [10, 36]")


@dataclass(frozen=True)
class WalkerPlan:
    """What one walker does: its `index`, its `seed` (a string: `random.Random` hashes
    strings the same in every process), the swarm's settings, and the table-row events
    already `known` (fired by the waves before it)."""

    index: int
    seed: str
    settings: SwarmSettings
    known: frozenset[RowEvent] = frozenset()


@dataclass(frozen=True)
class FoundViolation:
    """A counterexample as a walker ships it: the property, the kind, which initial state,
    the labels of the steps taken, and the lasso's loop start (`Trace.loop_from`). Labels,
    not states: the states are rebuilt by replaying the labels (`replay`), so nothing
    hashed in another process is ever compared here."""

    property: str
    kind: Kind
    initial: int
    labels: tuple[str, ...]
    loop_from: int | None = None


@dataclass(frozen=True)
class WalkerResult:
    """What one walker found: `generated` successors checked, the `longest` walk, the CPU
    seconds it took, the rows it fired (None: the model's rows are not recorded), its
    bitstate (`Bitstate.packed`) and its counterexamples."""

    index: int
    walks: int
    generated: int
    longest: int
    cpu_seconds: float
    coverage: RowCoverage | None
    bitstate: bytes
    violations: tuple[FoundViolation, ...]


Runner = Callable[[SwarmRequest, Sequence[WalkerPlan]], Iterable[WalkerResult]]
"""Runs the walkers of one wave, yielding each result as it is ready (in any order)."""


def run_in_process(request: SwarmRequest, plans: Sequence[WalkerPlan]) -> Iterator[WalkerResult]:
    """The walkers one after the other, in this process."""
    for plan in plans:
        yield run_walker(request, plan)


# ------------------------------------------------------------------ one walker


def run_walker(request: SwarmRequest, plan: WalkerPlan) -> WalkerResult:
    """One walker (see the module doc): builds its own model, records its own rows."""
    started = time.process_time()
    model, log = _recording(request.build())
    settings = plan.settings
    seen = Bitstate(settings.log2_bits)
    with paused_gc():
        walks = Walks(
            model, max_depth=settings.max_depth, stop_on_violation=settings.stop_on_violation
        )
        chooser = _Directed(walks, seen, log, set(plan.known), settings.fault_rate)
        rng = random.Random(plan.seed)
        taken = 0
        while taken < settings.walks and not walks.done:
            walks.walk(rng, chooser)
            taken += 1
    found = tuple(
        FoundViolation(
            v.property,
            v.kind,
            walks.initials.index(v.trace.initial),
            tuple(step.label for step in v.trace.steps),
            v.trace.loop_from,
        )
        for v in walks.found.values()
    )
    return WalkerResult(
        index=plan.index,
        walks=taken,
        generated=chooser.generated,
        longest=walks.longest,
        cpu_seconds=time.process_time() - started,
        coverage=None if log is None else log.coverage(),
        bitstate=seen.packed(),
        violations=found,
    )


# How a walker ranks a successor (the module doc's order, best last).
_ANY, _NEW_STATE, _NEW_ROW = 0, 1, 2


class _Directed(Generic[St]):
    """The chooser of a swarm walker (the ranking of the module doc).

    Every successor is generated and put in the bitstate; those new to it are checked.
    `log` is the recorder of row events (None: the model records none): the growth of
    `log.fired` during one `next_state` says the step fired an event this walker had not
    fired; `known` tells whether any walker had. A memoised step (the design model's
    tables) fires no event twice, so the first step to fire an event is always seen
    firing it: an event never fired cannot come from a memo.
    """

    def __init__(
        self,
        walks: Walks[St],
        seen: Bitstate,
        log: RowRecorder | None,
        known: set[RowEvent],
        fault_rate: float,
    ) -> None:
        self.walks = walks
        self.model = walks.model
        self.seen = seen
        self.log = log
        self.known = known
        self.fault_rate = fault_rate
        self.generated = 0
        self._faults: list[tuple[int, Move[St]]] = []
        self._rank = _ANY

    def visit(self, state: St) -> None:
        # The initial state; every later one was checked when it was generated.
        if not self.walks.path:
            self.generated += 1
            if self.seen.add(hash(state)):
                self.walks.check(state)

    def fault_free(self, state: St, rng: random.Random) -> Move[St] | None:
        model, log = self.model, self.log
        normal: list[tuple[int, Move[St]]] = []
        faults: list[tuple[int, Move[St]]] = []
        self._faults = faults
        for action in model.actions(state):
            before = 0 if log is None else len(log.fired)
            following = model.next_state(state, action)
            if following is None:
                continue
            self.generated += 1
            rank = _ANY
            if self.seen.add(hash(following)):
                rank = _NEW_STATE
                self.walks.check(following, Step(action, following))
            if log is not None and len(log.fired) > before and self._learned(log):
                rank = _NEW_ROW
            if not action.fault and not model.stutter_stalls and following == state:
                continue
            (faults if action.fault else normal).append((rank, (action, following)))
        self._rank, move = _best(normal, rng)
        return move

    def with_fault(self, state: St, rng: random.Random, move: Move[St] | None) -> Move[St] | None:
        if not self._faults:
            return move
        rank = max(r for r, _ in self._faults)
        new_row_by_fault_only = rank == _NEW_ROW and self._rank < _NEW_ROW
        if move is None or new_row_by_fault_only or rng.random() < self.fault_rate:
            return _best(self._faults, rng)[1]
        return move

    def _learned(self, log: RowRecorder) -> bool:
        """Did the last step fire an event no walker had fired? (Learn the new ones.)"""
        new = log.fired - self.known
        self.known |= new
        return bool(new)


def _best(moves: list[tuple[int, Move[St]]], rng: random.Random) -> tuple[int, Move[St] | None]:
    """A random one of the best-ranked `moves`, and its rank (None if there is none)."""
    if not moves:
        return 0, None
    top = max(rank for rank, _ in moves)
    return top, rng.choice([move for rank, move in moves if rank == top])


def _recording(model: Model[Any]) -> tuple[Model[Any], RowRecorder | None]:
    """`model` rebuilt with the tables of `_tracked_tables` recording the rows they fire,
    and the recorder (the model itself and None when its rows are not recorded)."""
    if isinstance(model, ProtocolModel):
        hooks, recorder = recording_hooks(model.hooks)
        return ProtocolModel(model.p, hooks=hooks, name=model.name), recorder
    if isinstance(model, DesignModel):
        machines, recorder = recording_design_tables(model.machines)
        return DesignModel(model.p, tables=machines, name=model.name), recorder
    return model, None


def _tracked_tables(model: Model[Any]) -> tuple[Table[Any, Any], ...]:
    """The tables whose rows `_recording` records: for the protocol model those
    `recording_hooks` wraps (the ones the generated mutants mutate), for the design model
    all ten."""
    if isinstance(model, ProtocolModel):
        h = model.hooks
        return (h.checkpoint, h.gate, h.deadlines, h.participant.fence, h.participant.agent)
    if isinstance(model, DesignModel):
        m = model.machines
        return (m.checkpoint, m.fence, m.execution, m.policy, m.resources,
                m.gate, m.deadlines, m.attempt, m.group, m.restore)  # fmt: skip
    return ()


# ------------------------------------------------------------------ merging


class ReplayFailed(QuiesceError):
    """A walker's counterexample does not replay on the model here: the model is not
    deterministic in its labels (a bug of the model, not of the protocol)."""

    def __init__(self, model: str, found: FoundViolation, step: int, why: str) -> None:
        self.found = found
        super().__init__(
            f"the {found.property} counterexample of model {model!r} does not replay at step"
            f" {step} ({why}): every label must name one move of its state"
        )


@dataclass(frozen=True)
class RowReport:
    """The rows of the recorded tables: `tracked` `(table, row)` pairs, those `fired`, and
    for each row never fired why it cannot be (`dead_by_design`) or that nobody knows
    (`not_fired`), as `table[row] sources input` texts."""

    tracked: frozenset[tuple[str, int]] = frozenset()
    fired: frozenset[tuple[str, int]] = frozenset()
    dead_by_design: tuple[tuple[str, str], ...] = ()
    not_fired: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """`{"tracked", "fired", "dead_by_design": [{"row", "reason"}], "not_fired"}`."""
        return {
            "tracked": len(self.tracked),
            "fired": len(self.fired),
            "dead_by_design": [{"row": r, "reason": why} for r, why in self.dead_by_design],
            "not_fired": list(self.not_fired),
        }


@dataclass(frozen=True)
class SwarmResult:
    """The merged result of a swarm (see the module doc); `walkers` keeps every walker's
    own result, `bitstate` the union of their bitstates (`Merged`)."""

    model: Model[Any]
    settings: SwarmSettings
    walkers: tuple[WalkerResult, ...]
    properties: tuple[str, ...]
    violations: tuple[Violation[Any], ...]
    coverage: RowCoverage | None
    rows: RowReport
    bitstate: Merged
    seconds: float
    stopped_early: bool = field(default=False)

    @property
    def generated_states(self) -> int:
        """Successors generated and checked, by every walker."""
        return sum(w.generated for w in self.walkers)

    @property
    def distinct_estimate(self) -> float:
        """The estimated distinct states of the whole swarm (the merged bitstate), at most
        the states generated (a full bitstate estimates infinity)."""
        return min(self.bitstate.estimate(), self.generated_states)

    @property
    def saturated(self) -> bool:
        """Is the merged bitstate too full for its estimate to mean much?"""
        return self.bitstate.fill() > SATURATED_FILL

    @property
    def cpu_seconds(self) -> float:
        """CPU seconds of every walker together."""
        return sum(w.cpu_seconds for w in self.walkers)

    @property
    def states_per_s_per_walker(self) -> float:
        """Successors checked per CPU second of one walker (the rate a core delivers)."""
        cpu = self.cpu_seconds
        return self.generated_states / cpu if cpu > 0 else 0.0

    def check_result(self) -> CheckResult[Any]:
        """The result as `check` reports one (never complete)."""
        return CheckResult(
            model=self.model,
            distinct_states=round(self.distinct_estimate),
            generated_states=self.generated_states,
            depth=max((w.longest for w in self.walkers), default=0),
            seconds=self.seconds,
            truncated=True,
            symmetry=False,
            properties=self.properties,
            violations=self.violations,
            complete=False,
        )

    def to_json(self) -> dict[str, Any]:
        """`CheckResult.to_json` plus a `swarm` section: the settings, the estimate and how
        full the bitstate is, the rows, the rate, and each walker's numbers."""
        document = self.check_result().to_json()
        s = self.settings
        document["swarm"] = {
            "walkers": s.walkers,
            "walkers_run": len(self.walkers),
            "walks_per_walker": s.walks,
            "max_depth": s.max_depth,
            "seed": s.seed,
            "wave": s.wave,
            "bitstate_bits": s.log2_bits,
            "bitstate_fill": round(self.bitstate.fill(), 6),
            "distinct_estimate": round(self.distinct_estimate, 1),
            "saturated": self.saturated,
            "stopped_early": self.stopped_early,
            "cpu_seconds": round(self.cpu_seconds, 3),
            "states_per_s_per_walker": round(self.states_per_s_per_walker, 1),
            "rows": self.rows.to_json(),
            "per_walker": [_walker_json(w) for w in self.walkers],
        }
        return document


def _walker_json(walker: WalkerResult) -> dict[str, Any]:
    coverage = walker.coverage
    return {
        "walker": walker.index,
        "walks": walker.walks,
        "generated": walker.generated,
        "cpu_seconds": round(walker.cpu_seconds, 3),
        "rows_fired": None if coverage is None else len(_rows(coverage)),
    }


def swarm(
    request: SwarmRequest,
    settings: SwarmSettings,
    *,
    runner: Runner = run_in_process,
    progress: Callable[[Progress], None] | None = None,
) -> SwarmResult:
    """Run the swarm's walkers wave by wave through `runner` and merge their results.

    With `settings.stop_on_violation` no wave starts after one that found a violation.
    `progress` gets a report after each walker (`frontier`: the walkers not yet done,
    `distinct_states`: the merged estimate so far).
    """
    started = time.perf_counter()
    model = request.build()
    tables = _tracked_tables(model)
    merged = Merged(settings.log2_bits)
    results: list[WalkerResult] = []
    known: frozenset[RowEvent] = frozenset()
    refused: frozenset[RowEvent] = frozenset()
    for first in range(0, settings.walkers, settings.wave):
        last = min(first + settings.wave, settings.walkers)
        plans = [
            WalkerPlan(i, f"swarm:{settings.seed}:{i}", settings, known) for i in range(first, last)
        ]
        for result in runner(request, plans):
            results.append(result)
            merged.add(result.bitstate)
            if progress is not None:
                elapsed = time.perf_counter() - started
                generated = sum(r.generated for r in results)
                longest = max(r.longest for r in results)
                distinct = round(min(merged.estimate(), generated))
                left = settings.walkers - len(results)
                progress(Progress(distinct, generated, left, elapsed, longest))
        wave_coverage = [r.coverage for r in results[first:] if r.coverage is not None]
        known = known.union(*(c.fired for c in wave_coverage))
        refused = refused.union(*(c.refused for c in wave_coverage))
        if settings.stop_on_violation and any(r.violations for r in results):
            break
    results.sort(key=lambda r: r.index)
    coverage = RowCoverage(known, refused) if tables else None
    names = property_names(model)
    return SwarmResult(
        model=model,
        settings=settings,
        walkers=tuple(results),
        properties=names,
        violations=_first_violations(model, names, results),
        coverage=coverage,
        rows=_row_report(model, tables, coverage),
        bitstate=merged,
        seconds=time.perf_counter() - started,
        stopped_early=len(results) < settings.walkers,
    )


def _rows(coverage: RowCoverage) -> frozenset[tuple[str, int]]:
    return frozenset((table, row) for table, row, _ in coverage.fired)


def _row_report(
    model: Model[Any], tables: Sequence[Table[Any, Any]], coverage: RowCoverage | None
) -> RowReport:
    if coverage is None:
        return RowReport()
    tracked = frozenset((t.name, i) for t in tables for i in range(len(t.rows)))
    fired = _rows(coverage) & tracked
    # What the implementation model never produces, on file for the mutants' judgement.
    reasons: Mapping[tuple[str, str], str] = (
        UNREACHED_INPUTS if isinstance(model, ProtocolModel) else {}
    )
    dead: list[tuple[str, str]] = []
    missing: list[str] = []
    for table in tables:
        for index, row in enumerate(table.rows):
            if (table.name, index) in fired:
                continue
            sources = "/".join(label(s) for s in row.sources)
            text = f"{table.name}[{index}] {sources} {label(row.input)}"
            why = reasons.get((table.name, label(row.input)))
            if why is None:
                missing.append(text)
            else:
                dead.append((text, why))
    return RowReport(tracked, fired, tuple(dead), tuple(missing))


def _first_violations(
    model: Model[Any], names: Sequence[str], results: Sequence[WalkerResult]
) -> tuple[Violation[Any], ...]:
    """Per property, the shortest counterexample any walker found (the lowest walker on a
    tie), replayed on `model`."""
    chosen: dict[str, FoundViolation] = {}
    for result in results:  # sorted by walker
        for found in result.violations:
            best = chosen.get(found.property)
            if best is None or len(found.labels) < len(best.labels):
                chosen[found.property] = found
    return tuple(replay(model, chosen[name]) for name in names if name in chosen)


def replay(model: Model[St], found: FoundViolation) -> Violation[St]:
    """The violation `found` describes, its states rebuilt by taking its labelled steps on
    `model`; raises `ReplayFailed` if a label names no move or the end is not bad."""
    initials = list(model.init_states())
    state = initial = initials[found.initial]
    steps: list[Step[St]] = []
    for number, text in enumerate(found.labels, 1):
        move = _labelled(model, state, text)
        if move is None:
            raise ReplayFailed(model.name, found, number, f"no move labelled {text!r}")
        steps.append(Step(*move))
        state = move[1]
    trace = Trace(initial, tuple(steps), found.loop_from)
    why = _not_bad(model, found, trace)
    if why:
        raise ReplayFailed(model.name, found, len(steps), why)
    return Violation(found.property, found.kind, trace)


def _labelled(model: Model[St], state: St, text: str) -> tuple[Action, St] | None:
    for action in model.actions(state):
        if action.label == text:
            following = model.next_state(state, action)
            if following is not None:
                return action, following
    return None


def _not_bad(model: Model[St], found: FoundViolation, trace: Trace[St]) -> str:
    """Why the replayed `trace` does not show `found` ("" when it does)."""
    states = trace.states()
    last = states[-1]
    if found.kind == "always":
        holds = {p.name: p.holds for p in model.properties()}[found.property]
        return "the property holds in the last state" if holds(last) else ""
    if found.kind == "cycle":
        loop = found.loop_from
        return "" if loop is not None and states[loop] == last else "the lasso does not close"
    for action, following in model.successors(last):
        if not action.fault and (model.stutter_stalls or following != last):
            return "the last state has a fault-free move"
    return ""
