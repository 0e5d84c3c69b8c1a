"""Generated mutants are judged by row coverage first: a recording table steps exactly as
the table it wraps, an unreached row is dead by design, a refusal row's retarget is
equivalent, only the stages that reach a row run, and a stage re-using the unmutated
run's steps searches exactly the mutant's own graph."""

from __future__ import annotations

import pytest

from quiesce.check import check
from quiesce.models import PORTFOLIO, ProtocolModel, ProtocolParams
from quiesce.models.coverage import recording_hooks
from quiesce.models.design import DesignModel, DesignParams
from quiesce.models.implementation import Hooks, PState
from quiesce.mutants import MUTANTS, small, verify, verify_many
from quiesce.mutants._names import row_index
from quiesce.mutants._stages import (
    STAGES,
    DesignStage,
    ParticipantStage,
    ProtocolStage,
    Site,
    StageRaised,
    stage_memo,
)
from quiesce.protocol.machines import (
    AGENT_EXECUTION,
    CHECKPOINT,
    CONTROL_FENCE,
    AgentInput,
    CheckpointState,
    ExecState,
)
from quiesce.testing import ENDINGS, kit_rules
from tests import pins


def _stage(name: str) -> ProtocolStage:
    found = next(stage for stage in STAGES if stage.name == name)
    assert isinstance(found, ProtocolStage)
    return found


FAULT_FREE = _stage("fault-free")
ONE_FAULT = _stage("one fault")
TWO_TRIGGERS = _stage("two triggers")


def test_recording_tables_step_as_the_protocol_and_record_its_rows() -> None:
    hooks, recorder = recording_hooks(Hooks())
    recorded = check(ProtocolModel(ProtocolParams(**FAULT_FREE.params), hooks=hooks))
    assert recorded.distinct_states == 1655 and recorded.ok
    coverage = recorder.coverage()
    # The first trigger starts an attempt: checkpoint row 1 (idle -> closing_admission).
    assert coverage.fires("checkpoint", 1)
    # The snapshot store never fails to publish in the model.
    assert not coverage.rows("checkpoint") >= {11, 12, 13}
    assert coverage == stage_memo(FAULT_FREE).coverage


def test_a_retarget_to_the_source_of_a_holding_row_is_not_a_reach() -> None:
    site = Site(CHECKPOINT, 1, "retarget", CheckpointState.IDLE)
    coverage = stage_memo(FAULT_FREE).coverage
    assert site.reached(coverage)  # row 1 moves idle on: staying idle differs
    holding = next(i for i, row in enumerate(CONTROL_FENCE.rows) if row.target is None)
    source = CONTROL_FENCE.rows[holding].sources[0]
    only_there = Site(CONTROL_FENCE, holding, "retarget", source)
    fired = {s for t, r, s in coverage.fired if t == "control_fence" and r == holding}
    assert only_there.reached(coverage) == bool(fired - {source.name})


def test_a_refusal_retarget_is_equivalent_with_its_reason() -> None:
    verdict = verify(MUTANTS["control_fence:any:recv_prepare:stale_id.retarget=idle"])
    assert verdict.status == "equivalent" and not verdict.killed
    assert "keeps its fence" in verdict.detail and verdict.states == 0


def test_an_unreached_row_is_dead_by_design_with_its_reason() -> None:
    verdict = verify(MUTANTS["checkpoint:publishing:publish_failed.retarget=idle"])
    assert verdict.status == "dead_by_design" and verdict.states == 0
    assert "never fails to publish" in verdict.detail


def test_a_reached_mutant_runs_only_the_stages_that_reach_it() -> None:
    # Row 1 of the checkpoint table (a trigger starts an attempt) fires in every stage:
    # the first one kills it.
    verdict = verify(MUTANTS["checkpoint:idle:trigger.retarget=stopped"])
    assert verdict.killed and verdict.stage == "fault-free"
    assert verdict.detail.startswith("fault-free: ")


def test_two_processes_give_the_verdicts_of_one() -> None:
    names = [
        "S1_deadline_runs_while_parked",
        "checkpoint:idle:trigger.retarget=stopped",
        "control_fence:any:recv_prepare:stale_id.retarget=idle",
        "checkpoint:publishing:publish_failed.retarget=idle",
    ]
    chosen = [MUTANTS[name] for name in names]
    alone = [(v.mutant.name, v.status, v.killed_by) for v in verify_many(chosen, 1)]
    pooled = [(v.mutant.name, v.status, v.killed_by) for v in verify_many(chosen, 2)]
    assert pooled == alone
    assert [status for _, status, _ in alone] == [
        "killed",
        "killed",
        "equivalent",
        "dead_by_design",
    ]


def _search(model: ProtocolModel) -> tuple[int, list[str], list[str]]:
    result = check(model, max_states=20_000)
    found = [v.property for v in result.violations]
    trace = [step.action.label for v in result.violations[:1] for step in v.trace.steps]
    return result.distinct_states, found, trace


def test_a_stage_reusing_the_unmutated_steps_searches_the_mutants_own_graph() -> None:
    one_fault = ONE_FAULT
    params = ProtocolParams(**one_fault.params)
    # Killed late (a stall cycle, after the whole graph), and killed early (I4).
    for name in (
        "checkpoint:aborting:failed.retarget=capturing",
        "checkpoint:flushing_acks:acks_flushed.retarget=idle",
    ):
        mutant = MUTANTS[name]
        assert mutant.site is not None
        own = ProtocolModel(params, hooks=mutant.hooks())
        sharing = one_fault.model(mutant.site, mutant.hooks(), name)
        assert _search(sharing) == _search(own)
        assert _search(own)[1], f"{name} is meant to be killed here"


def test_a_step_that_fires_the_mutated_row_is_computed_again() -> None:
    fault_free = FAULT_FREE
    memo = stage_memo(fault_free)
    site = Site(CHECKPOINT, 1, "retarget", CheckpointState.STOPPED)
    mutant = MUTANTS["checkpoint:idle:trigger.retarget=stopped"]
    sharing = fault_free.model(site, mutant.hooks(), mutant.name)
    recorded = [
        (state, moves)
        for state, (moves, touched) in memo.successors.items()
        if site.reached(touched)
    ]
    assert recorded  # row 1 starts every attempt: some step fires it
    state, moves = recorded[0]
    assert isinstance(state, PState)
    assert sharing.successors(state) != moves
    untouched = next(s for s, (_, t) in memo.successors.items() if not site.reached(t))
    assert sharing.successors(untouched) is memo.successors[untouched][0]


def test_the_design_stage_runs_after_the_fault_free_one_and_before_the_one_fault_one() -> None:
    names = [stage.name for stage in STAGES]
    assert names.index("fault-free") < names.index("design") < names.index("one fault")


def test_the_two_trigger_stage_runs_s5s_configuration_after_the_one_fault_one() -> None:
    [s5] = [entry for entry in PORTFOLIO if entry.scenario == "S5"]
    assert TWO_TRIGGERS.params == s5.params
    names = [stage.name for stage in STAGES]
    assert names.index("one fault") < names.index("two triggers") < names.index("walks")


def test_the_stages_that_reach_rows_no_earlier_stage_fires_run_before_the_walks() -> None:
    # The participant stage, judged by conformance rather than by a property, runs last.
    names = [stage.name for stage in STAGES]
    added = ["two triggers", "no failure budget", "two agents", "design, two faults", "walks"]
    assert names[-len(added) - 1 : -1] == added
    assert isinstance(STAGES[-1], ParticipantStage) and names[-1] == "participant kit"


def test_a_trigger_meeting_a_pending_abort_is_reached_only_with_two_triggers() -> None:
    # M1's abort_pending -TRIGGER-> row sent to committing: the retried abort's resumes
    # carry the checkpoint on (tests/mutants/test_pending_abort_trigger.py). Only a second
    # trigger meets a pending abort: of the exhaustive stages, only this one has one.
    mutant = MUTANTS["checkpoint:abort_pending:trigger.retarget=committing"]
    assert mutant.site is not None
    exhaustive = [s for s in STAGES if isinstance(s, ProtocolStage) and s.name != "walks"]
    assert [s.name for s in exhaustive if mutant.site.reached(s.coverage())] == ["two triggers"]
    verdict = verify(mutant)
    assert verdict.killed and verdict.stage == "two triggers" and verdict.killed_by == "no_stall"


def test_the_unmutated_design_stage_finds_no_violation() -> None:
    design = next(stage for stage in STAGES if isinstance(stage, DesignStage))
    result = check(DesignModel(DesignParams(**small(**design.params))))
    assert result.ok and result.distinct_states == pins.DESIGN_STAGE_STATES


def test_a_row_only_the_design_model_fires_is_killed_there() -> None:
    # A repeated commit(X) to a participant already committed to X (a duplicated request,
    # a reply lost and answered again from the record): no protocol-model stage makes one.
    # Leaving the fence idle there breaks the phase order (I5).
    site = MUTANTS["control_fence:committed_paused:recv_commit:same_id.retarget=idle"].site
    assert site is not None
    assert not any(site.reached(s.coverage()) for s in STAGES if isinstance(s, ProtocolStage))
    verdict = verify(MUTANTS["control_fence:committed_paused:recv_commit:same_id.retarget=idle"])
    assert verdict.killed and verdict.stage == "design" and verdict.killed_by == "I5"
    assert verdict.detail.startswith("design: I5 fails after ")


def test_a_mutated_table_that_raises_in_the_design_model_is_a_kill() -> None:
    # Row 0 of the checkpoint table (a trigger skipped) reads the skip its guard checks for.
    site = MUTANTS["checkpoint:idle:trigger:skip.drop_guard"].site
    assert site is not None
    design = next(stage for stage in STAGES if isinstance(stage, DesignStage))
    with pytest.raises(StageRaised, match="AssertionError"):
        design.run(site, Hooks(), "checkpoint:idle:trigger:skip.drop_guard", lambda _: None)


@pytest.mark.parametrize(
    ("name", "stage", "killed_by"),
    [
        # closing_admission -FAILED [exhausted]-> idle instead of stopped: only a failure
        # over max_consecutive_failures takes the row, so only a failure budget of 0 does.
        (
            "checkpoint:closing_admission+flushing_acks:failed:exhausted.retarget=idle",
            "no failure budget",
            "I4",
        ),
        # release_pending -FAILED-> idle: a second call of the round failing after the
        # first sent M1 pending, which only two agents of one role make.
        ("checkpoint:abort_pending+release_pending:failed.retarget=idle", "two agents", "I3"),
        # restored_paused -RECV_RESTORE [same_id]-> idle: a restore repeated after the
        # participant restored (a crash, then a duplicated request: two faults).
        (
            "control_fence:restored_paused:recv_restore:same_id.retarget=idle",
            "design, two faults",
            "I5",
        ),
    ],
)
def test_a_row_only_one_stage_fires_is_killed_there(name: str, stage: str, killed_by: str) -> None:
    site = MUTANTS[name].site
    assert site is not None
    assert [s.name for s in STAGES if site.reached(s.coverage())] == [stage]
    verdict = verify(MUTANTS[name])
    assert verdict.killed and verdict.stage == stage and verdict.killed_by == killed_by


def test_the_unmutated_two_fault_design_stage_finds_no_violation() -> None:
    [stage] = [s for s in STAGES if s.name == "design, two faults"]
    assert isinstance(stage, DesignStage)
    result = check(DesignModel(DesignParams(**small(**stage.params))))
    assert result.ok and result.distinct_states == pins.TWO_FAULT_DESIGN_STAGE_STATES


PARTICIPANT_KIT = STAGES[-1]


def test_the_unmutated_participant_stage_passes_and_fires_what_the_pure_core_can() -> None:
    # Its coverage is the host's: late events of a retired execution fire (a `boundary` or
    # `finish` after a retire), and an ACK quoting a wrong receipt; an outcome after the
    # fence moved on, or a request joining one in flight, never does (the core runs start
    # and outcome in one call), nor the data plane (a held policy call).
    assert isinstance(PARTICIPANT_KIT, ParticipantStage)
    coverage = PARTICIPANT_KIT.coverage()
    agent = coverage.rows("agent_execution")
    late = {ExecState.TOMBSTONED: (AgentInput.TURN_BOUNDARY, AgentInput.RUN_FINISHED)}
    assert {row_index(AGENT_EXECUTION, s, i) for s, inputs in late.items() for i in inputs} <= agent
    assert row_index(AGENT_EXECUTION, ExecState.COMPLETED, AgentInput.RECV_ACK) in agent
    held = (AgentInput.POLICY_CALL_HELD, AgentInput.POLICY_RESUMED)
    assert not {i for i, row in enumerate(AGENT_EXECUTION.rows) if row.input in held} & agent
    apart = {"drop_late_outcome", "join_in_flight"}
    never = {i for i, row in enumerate(CONTROL_FENCE.rows) if apart & set(row.effects)}
    assert len(never) == 8 and not never & coverage.rows("control_fence")
    assert not coverage.rows("checkpoint")  # only the participant's tables are stepped


def test_the_participant_stages_written_program_ends_an_execution_every_way() -> None:
    assert isinstance(PARTICIPANT_KIT, ParticipantStage)
    written = PARTICIPANT_KIT.programs[-1]
    assert {rule for rule, _ in written} == {"scenario"}
    assert [arguments["variant"] for _, arguments in written] == list(range(len(ENDINGS)))


def test_the_participant_stage_kills_a_late_finish_no_model_stage_reaches() -> None:
    # M3: a `finish` reported for a retired (tombstoned) execution is dropped, the
    # execution stays tombstoned. Sent back to `new`, the late finish revives it: dead by
    # design before this stage (no model reports a finish after a retire); the kit's
    # `retire_then_finish` ending does, and the reference participant answers `tombstoned`.
    name = "agent_execution:tombstoned:run_finished.retarget=new"
    site = MUTANTS[name].site
    assert site is not None
    assert [s.name for s in STAGES if site.reached(s.coverage())] == ["participant kit"]
    verdict = verify(MUTANTS[name])
    assert verdict.killed and verdict.stage == "participant kit"
    assert verdict.killed_by == "kit:finish"
    assert "state: expected 'tombstoned', got 'new'" in verdict.detail


def test_the_participant_stage_judges_by_the_protocols_tables_not_the_mutants() -> None:
    # The kit's oracle steps recordings of the protocol's own tables; the mutant's rules go
    # to the host under test only. So the unmutated rules pass, and the mutant is told apart.
    oracle, _ = kit_rules()
    assert oracle.fence.rows == CONTROL_FENCE.rows and oracle.agent.rows == AGENT_EXECUTION.rows
    mutant = MUTANTS["agent_execution:tombstoned:run_finished.retarget=new"]
    assert mutant.site is not None
    assert mutant.hooks().participant.agent.rows != AGENT_EXECUTION.rows
    assert isinstance(PARTICIPANT_KIT, ParticipantStage)
    killed = PARTICIPANT_KIT.run(mutant.site, mutant.hooks(), mutant.name, lambda _: None)
    assert killed.violation is not None and killed.violation.rule_id == "finish"
    unmutated = PARTICIPANT_KIT.run(mutant.site, Hooks(), mutant.name, lambda _: None)
    assert unmutated.violation is None and unmutated.programs == len(PARTICIPANT_KIT.programs)
