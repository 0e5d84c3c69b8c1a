"""How a generated mutant is judged: row coverage first, then the stages that reach it.

What lives here: `Site` (the one row a generated mutant changes, and how), `Stage` and
`STAGES` (the checks a generated mutant must survive, cheapest first), the unmutated run of
each stage (`stage_memo`: its steps and row coverage, computed once per process), and
`judge`, which turns a site into a `Judgement`:

- `equivalent`: the change provably cannot be observed (`EQUIVALENT_EFFECTS`: a refusal
  row whose next state the participant throws away), whatever any stage does;
- `dead_by_design`: no stage fires the row (or finds its guard false), so every stage
  steps the mutant exactly as the protocol and none can kill it; the reason names the
  input the model never produces there (`UNREACHED_INPUTS`), or the pair;
- `killed` by the first reaching stage that finds a violation, else `survived`.

Only the stages that reach the row are run: one that does not would explore the unmutated
state space again and find nothing (exact for an exhaustive search and for seeded walks
alike). A protocol-model stage re-uses every step of the unmutated run in which the row
took no part (`_memo` explains why the verdict is the same).

Three kinds of stage. A `ProtocolStage` runs the implementation model (the real coordinator
and participants) with the mutant's hooks. A `DesignStage` runs the design model (the
M1-M9 tables composed atomically) with the mutated table: it produces inputs the
implementation model never does (a duplicated request, a participant-side restore failure,
a crash between any two calls), so it reaches rows no protocol-model stage fires; its
graphs are a few thousand states, cheaper to search again than to memoise. A
`ParticipantStage` (`_participant_stage`) replays recorded conformance-kit programs on the
real participant runtime and kills by the kit's judge (`kit:<rule>`), not by a property.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any, Literal

from quiesce.check import CheckResult, Model, Violation, check, walk
from quiesce.fsm import Table, label
from quiesce.models.coverage import RowCoverage, recording_design_tables
from quiesce.models.design import DesignModel, DesignParams, DesignTables
from quiesce.models.implementation import UNREACHED_INPUTS, Hooks, ProtocolParams, PState
from quiesce.models.scenarios import small_params
from quiesce.mutants._design import design_tables
from quiesce.mutants._design import small as small_design
from quiesce.mutants._kit_programs import KIT_PROGRAMS
from quiesce.mutants._memo import RecordingModel, SharingModel, StepMemo
from quiesce.mutants._names import Operator, row_key
from quiesce.mutants._participant_stage import ParticipantStage, StageBroken

if TYPE_CHECKING:
    from quiesce.testing import Replayed

__all__ = [
    "EQUIVALENT_EFFECTS",
    "STAGES",
    "DesignStage",
    "Judgement",
    "ParticipantStage",
    "ProtocolStage",
    "Site",
    "Stage",
    "StageBroken",
    "StageRaised",
    "describe_violation",
    "judge",
    "stage_memo",
]

Status = Literal["killed", "survived", "equivalent", "dead_by_design"]


@dataclass(frozen=True)
class Site:
    """The one change a generated mutant makes: `operator` on row `row` of `table`
    (`retarget` to `state`, or `drop_guard`)."""

    table: Table[Any, Any]
    row: int
    operator: Operator
    state: Enum | None = None

    def reached(self, coverage: RowCoverage) -> bool:
        """Would a run with `coverage` step the mutant differently from the protocol?

        A retarget differs once the row fires from a source other than the new state when
        the row holds its state (holding in that state is what the retarget does too); a
        dropped guard differs once the guard is found false."""
        name = self.table.name
        if self.operator == "drop_guard":
            return coverage.refuses(name, self.row)
        holds = self.table.rows[self.row].target is None
        return coverage.fires(name, self.row, other_than=self.state if holds else None)

    def mutated(self) -> Table[Any, Any]:
        """The mutant's table: the site's row retargeted, or its guard dropped."""
        if self.operator == "drop_guard":
            return self.table.without_guard(self.row)
        return self.table.retarget(self.row, self.state)


Search = Callable[[Model[Any]], CheckResult[Any]]


@dataclass(frozen=True)
class ProtocolStage:
    """One check a generated mutant must survive: the protocol model at `params` with the
    mutant's hooks, searched by `search` (stopping at the first violation)."""

    name: str
    params: Mapping[str, Any]
    search: Search
    doc: str

    def coverage(self) -> RowCoverage:
        """The rows the unmutated run of this stage fires and refuses."""
        return stage_memo(self).coverage

    def model(self, site: Site, hooks: Hooks, name: str) -> SharingModel:
        """The model of this stage for the mutant at `site` built by `hooks`: it takes
        from the unmutated run every step in which the site's row took no part."""
        params = ProtocolParams(**self.params)
        return SharingModel(params, hooks, name, stage_memo(self), site.reached)

    def run(
        self, site: Site, hooks: Hooks, name: str, prepare: Callable[[Model[Any]], None]
    ) -> CheckResult[Any]:
        """Search the mutant's model (armed by `prepare`) to its first violation."""
        model = self.model(site, hooks, f"protocol[{name}]")
        prepare(model)
        return self.search(model)


@dataclass(frozen=True)
class DesignStage:
    """One check a generated mutant must survive: the design model at `params` (over
    `_design_mutants.small`) with the mutant's table in place of the protocol's, searched
    exhaustively to its first violation."""

    name: str
    params: Mapping[str, Any]
    doc: str

    def coverage(self) -> RowCoverage:
        """The rows the unmutated design model fires and refuses at `params` (computed
        once per process; workers forked afterwards inherit it)."""
        found = _DESIGN_COVERAGE.get(self.name)
        if found is None:
            tables, recorder = recording_design_tables(DesignTables())
            _exhaustive(DesignModel(self._params(), tables=tables))
            found = _DESIGN_COVERAGE[self.name] = recorder.coverage()
        return found

    def model(self, site: Site, name: str) -> DesignModel:
        """The design model carrying the mutant at `site`."""
        tables = design_tables(name, site.mutated())
        return DesignModel(self._params(), tables=tables, name=f"design[{name}]")

    def run(
        self, site: Site, hooks: Hooks, name: str, prepare: Callable[[Model[Any]], None]
    ) -> CheckResult[Any]:
        """Search the mutant's design model to its first violation (`hooks` and `prepare`
        are the protocol model's: the design model steps the mutated table itself).

        Raises `StageRaised` when the mutated table raises: a row whose guard was dropped
        runs its update on an argument the guard kept from it (the controller would crash
        there; the protocol model reports the same as a stall)."""
        try:
            return _exhaustive(self.model(site, name))
        except Exception as error:
            raise StageRaised(f"{type(error).__name__}: {error}".rstrip(": ")) from error

    def _params(self) -> DesignParams:
        return DesignParams(**small_design(**self.params))


Stage = ProtocolStage | DesignStage | ParticipantStage


class StageRaised(Exception):
    """A stage's search of a mutant stopped on an exception the mutated table raised."""


STAGE_BOUND = 20_000
"""A mutated table can grow a configuration's graph: past this many states, stop."""

WALKS = 300
"""Random walks at the reference size (measured: 1,500 walks kill no more than 300 on a
seeded sample of 40 generated mutants)."""


DESIGN_PARAMS: Mapping[str, Any] = {
    "faults": 1,
    "crashes": True,
    "attempts": 2,
    "turns": 2,
}
"""The design stage's configuration over `_design_mutants.small`: it reaches rows the
protocol-model stages never fire (3,405 states unmutated, 0.4 CPU-s). Measured over the
736 non-equivalent generated mutants: on its own it reaches 396 and kills 311; in `STAGES`
(after the fault-free stage) it is the first to kill 123, 43 of them on rows no
protocol-model stage fires. With `call_retries` 0 it kills 2 more for half again the time;
larger ones (two triggers, weight sync and train switch: 20,000-94,000 states) reach at most
8 more mutants for five to thirty times the time."""


def _exhaustive(model: Model[Any]) -> CheckResult[Any]:
    return check(model, max_states=STAGE_BOUND, stop_on_violation=True)


def _walks(model: Model[Any]) -> CheckResult[Any]:
    return walk(model, walks=WALKS, seed=0)


STAGES: tuple[Stage, ...] = (
    ProtocolStage(
        "fault-free",
        small_params(),
        _exhaustive,
        "exhaustive: one sibling of one turn, one trigger, no fault (1,655 states)",
    ),
    DesignStage(
        "design",
        DESIGN_PARAMS,
        "the design model, exhaustive: one sibling of two turns, two attempts, one trigger,"
        " one fault (a duplicated request and a restore failure among them) or crash",
    ),
    ProtocolStage(
        "one fault",
        small_params(faults=1),
        _exhaustive,
        "exhaustive: the same with a budget of one fault, no crash (12,402 states)",
    ),
    ProtocolStage(
        "two triggers",
        # S5's portfolio configuration: the only exhaustive stage with a second trigger, so
        # the only one where a trigger meets a pending abort or release (M1 retries it).
        # After the one-fault stage although a little cheaper: it reaches far fewer rows.
        small_params(siblings=0, triggers=2, faults=1),
        _exhaustive,
        "exhaustive: no rollout, two triggers, a budget of one fault, no crash (10,210 states)",
    ),
    ProtocolStage(
        "no failure budget",
        # max_consecutive_failures 0: the first failed attempt is over the budget, so M1's
        # rows that stop the run (a failure while closing admission or flushing ACKs is
        # exhausted; an abort that ends, or fails, over the budget) fire. No other stage
        # fires them: one fault never exceeds the default budget of 3. Measured: it alone
        # reaches those rows' 36 mutants, and kills all 36.
        small_params(faults=1, max_consecutive_failures=0),
        _exhaustive,
        "exhaustive: the one-fault configuration with a failure budget of 0 (12,755 states)",
    ),
    ProtocolStage(
        "two agents",
        # Two agents answer the agent role's calls at once, so a second call of a round
        # can fail after the first sent M1 to abort_pending or release_pending (its
        # `failed` row holds there); two faults for the round's failure and the pending
        # one, and a failure budget of 0 keeps it small (27,432 states with the default).
        # Measured: it alone reaches 12 mutants (that row's), and kills 11.
        small_params(siblings=0, agents=2, faults=2, max_consecutive_failures=0),
        _exhaustive,
        "exhaustive: no rollout, two agents, a budget of two faults and a failure budget of 0"
        " (8,320 states)",
    ),
    DesignStage(
        "design, two faults",
        # Two faults: a participant crash (its restore then runs) and a fault at that
        # restore (a duplicated request, a restore failure), which one fault cannot both
        # be. One attempt keeps it under the bound (20,000+ states with two; one turn
        # instead reaches 7 fewer of the mutants it kills). Measured: it alone reaches 30
        # mutants (fence rows 18, 24, 26, 28, 33) and kills 15; it kills 11 the earlier
        # stages leave alive (M1's rows 23-25 and 27, the fence's 37). At about a second
        # a mutant it is most of what these three stages add to `--all` (2.2 to 4.2
        # minutes on one process): every survivor it reaches runs it too.
        {**DESIGN_PARAMS, "faults": 2, "attempts": 1},
        "the design model, exhaustive: the design stage with one attempt and a budget of two"
        " faults (9,911 states): a restore repeated, or failed and tried again",
    ),
    ProtocolStage(
        "walks",
        {},
        _walks,
        f"{WALKS} seeded random walks at the reference size of PROTOCOL.md §8",
    ),
    ParticipantStage(
        "participant kit",
        # The real participant runtime with the mutant's participant tables, under the
        # conformance kit's programs (`_participant_stage`). Measured: on its own it
        # reaches 214 non-equivalent generated mutants (on the 43 participant rows its
        # programs fire on the host) and kills 212, among them all 140 that the
        # property-judged stages kill there (the other 2: `_notes`). Here, last, it is the
        # first to kill 73: 22 dead by design before (a `boundary` or `finish` of a
        # retired execution; an ACK quoting a wrong receipt, or any receipt) and 51
        # survivors of the stages that reach them. Its unmutated run costs about 3 s once
        # per process, a judged mutant 0.22 s.
        KIT_PROGRAMS,
        f"the {len(KIT_PROGRAMS)} recorded conformance-kit programs replayed on an agent"
        " ParticipantHost running the mutant's participant tables, judged by the kit against"
        " the reference participant (the protocol's own tables)",
    ),
)
"""The stages, cheapest first, but for those that reach few rows no earlier one fires (the
two-trigger, failure-budget, two-agent and two-fault design stages): they run last before
the walks. The participant stage runs after the walks: it judges by conformance rather than
by the models' properties, so it only runs on what every property-judged stage that reaches
the row left alive (and on rows none reaches), and leaves every earlier verdict as it was.
A generated mutant runs those that reach its row."""


_MEMOS: dict[str, StepMemo] = {}
_DESIGN_COVERAGE: dict[str, RowCoverage] = {}


def stage_memo(stage: ProtocolStage) -> StepMemo:
    """The unmutated run of `stage`: its steps, each with the rows it touched, and its row
    coverage (computed once per process; workers forked afterwards inherit it)."""
    found = _MEMOS.get(stage.name)
    if found is None:
        model = RecordingModel(ProtocolParams(**stage.params))
        stage.search(model)
        found = _MEMOS[stage.name] = model.recorded()
    return found


# ------------------------------------------------------------------ equivalence

EQUIVALENT_EFFECTS: Mapping[str, Mapping[str, str]] = {
    "control_fence": {
        **{
            effect: "the participant raises the refusal and keeps its fence as it was"
            " (`_control_ops._control`); a stale or conflict refusal reads only the fence's"
            " data, which the row leaves alone, so its target state is never seen"
            for effect in ("refuse_stale", "refuse_conflict")
        },
        "refuse_invalid_phase": "the participant raises the refusal and keeps its fence as"
        " it was (`_control_ops._control`); the target state only reaches the refusal's"
        " message text, and nothing decides on that text (the controller reads its code)",
        "report_status": "nothing steps this row: a participant answers status from its"
        " state without stepping the fence (`_participant._status`)",
    },
    "agent_execution": {
        **{
            effect: "`AgentRole.begin` raises the refusal, built from the key alone, and"
            " keeps the role as it was: the row's next value is never stored"
            for effect in (
                "refuse_admission_closed",
                "refuse_stale_attempt",
                "refuse_duplicate_execution",
            )
        },
        "answer_completed_unacknowledged": "`AgentRole.retire` answers"
        " completed_unacknowledged and returns the role unchanged: the row's next value"
        " is never stored",
    },
}
"""Per table, the effects of rows whose next value the participant throws away (or that
nothing steps), and why: any retarget of such a row is equivalent to the protocol."""


def _equivalent(site: Site) -> str | None:
    if site.operator != "retarget":
        return None
    discarded = EQUIVALENT_EFFECTS.get(site.table.name, {})
    for effect in site.table.rows[site.row].effects:
        if effect in discarded:
            return discarded[effect]
    return None


# ------------------------------------------------------------------ unreached rows


def _unreached(site: Site) -> str:
    row = site.table.rows[site.row]
    where = row_key(site.table, site.row)
    known = UNREACHED_INPUTS.get((site.table.name, label(row.input)))
    what = "finds its guard false" if site.operator == "drop_guard" else "fires it"
    stages = ", ".join(stage.name for stage in STAGES)
    because = f" (in the implementation model, {known})" if known else ""
    return f"{where}: none of the stages ({stages}) {what}{because}"


# ------------------------------------------------------------------ judging


def describe_violation(violation: Violation[Any]) -> str:
    """Why the last state of `violation`'s trace is bad, in one line (the protocol model
    says why; the design model's states only say which property failed, and where)."""
    last = violation.trace.states()[-1]
    steps = f"{violation.property} fails after {len(violation.trace)} steps"
    if isinstance(last, PState):
        return "; ".join(f"{p}: {why}" for p, why in last.env.bad) or last.env.raised or steps
    moves = violation.trace.steps
    return f"{steps}, the last: {moves[-1].action.label}" if moves else steps


def _describe_kit(replayed: Replayed) -> str:
    """Where the participant stage's replay broke which rule, in one line."""
    violation = replayed.violation
    assert violation is not None and replayed.program is not None
    where = f"kit program {replayed.program + 1}, request {len(violation.steps)}"
    differences = "; ".join(violation.differences[:2])
    return f"{violation.rule_id} broken at {where} ({violation.shape}): {differences}"


@dataclass(frozen=True)
class Judgement:
    """What `judge` found about one site: the status, the property that killed it and the
    stage (if any), the states explored, the seconds taken and why."""

    status: Status
    killed_by: str | None = None
    stage: str | None = None
    states: int = 0
    seconds: float = 0.0
    detail: str = ""


def judge(site: Site, hooks: Hooks, name: str, prepare: Callable[[Model[Any]], None]) -> Judgement:
    """Judge the mutant at `site` built by `hooks`: equivalent, dead by design, or run
    through every stage that reaches it until one kills it. `prepare` arms a model before
    its search (the hang watchdog)."""
    started = time.perf_counter()
    why = _equivalent(site)
    if why is not None:
        return Judgement("equivalent", detail=why)
    reaching = [stage for stage in STAGES if site.reached(stage.coverage())]
    if not reaching:
        return Judgement("dead_by_design", detail=_unreached(site))
    states = 0
    for stage in reaching:
        try:
            result = stage.run(site, hooks, name, prepare)
        except StageRaised as error:
            seconds = time.perf_counter() - started
            detail = f"{stage.name}: the mutated table raised {error}"
            return Judgement("killed", "raised", stage.name, states, seconds, detail)
        if not isinstance(result, CheckResult):  # the participant stage: the kit's verdict
            if result.violation is not None:
                seconds = time.perf_counter() - started
                killed_by = f"kit:{result.violation.rule_id}"
                detail = f"{stage.name}: {_describe_kit(result)}"
                return Judgement("killed", killed_by, stage.name, states, seconds, detail)
            continue
        states += result.distinct_states
        if result.violations:
            violation = result.violations[0]
            seconds = time.perf_counter() - started
            detail = f"{stage.name}: {describe_violation(violation)}"
            return Judgement("killed", violation.property, stage.name, states, seconds, detail)
    ran = tuple(s.name for s in reaching)
    detail = f"no violation in the stages that reach it ({', '.join(ran)})"
    return Judgement("survived", None, None, states, time.perf_counter() - started, detail)
