"""The transition cover: a shortest trace of every design step label, replayed on the pure
System; every one replays on the real code, and a planted participant bug fails the replay
at the step that needs the behaviour it broke."""

from __future__ import annotations

import dataclasses
import json

import pytest
from click.testing import CliRunner

from quiesce.cli import main
from quiesce.models import (
    COVER_PARAMS,
    CoverReport,
    DesignModel,
    Hooks,
    ProtocolModel,
    ProtocolParams,
    ReplayOutcome,
    transition_cover,
)
from quiesce.models.refinement._refinement import design_params
from quiesce.models.refinement._transition_cover import (
    DesignTrace,
    abstraction,
    design_cover,
    replay,
)
from quiesce.protocol.machines import CONTROL_FENCE, FenceCall, FenceData
from quiesce.protocol.participant import ParticipantRules
from tests import pins

# COVER_PARAMS without crashes: about 4 s CPU.
NO_CRASHES = dataclasses.replace(COVER_PARAMS, crashes=False)


def _forgets_resume() -> Hooks:
    """A participant that retires an id without recording the resume's result (so a
    duplicated resume could no longer be answered with it)."""

    def retire(data: FenceData, call: FenceCall) -> FenceData:
        return FenceData(None, call.op_id, ())

    fence = CONTROL_FENCE.derive("forgets_resume", updates={"retire": retire})
    return Hooks(participant=ParticipantRules(fence=fence))


def test_every_design_step_replays_on_the_system() -> None:
    report = transition_cover(NO_CRASHES)
    assert report.ok, "\n".join(m.explain() for m in report.mismatches)
    assert (report.design_states, len(report.replays)) == pins.COVER_REPLAYS
    assert report.count(ReplayOutcome.REPLAYED) == len(report.replays)
    assert report.system_states > 0


@pytest.mark.slow
def test_every_design_step_replays_with_crashes() -> None:
    report = transition_cover(COVER_PARAMS)
    assert report.ok, "\n".join(m.explain() for m in report.mismatches)
    assert (
        report.design_states,
        report.count(ReplayOutcome.REPLAYED),
    ) == pins.COVER_REPLAYS_WITH_CRASHES


def test_a_participant_that_misrecords_a_resume_fails_the_replay_naming_the_step() -> None:
    report = transition_cover(NO_CRASHES, hooks=_forgets_resume())
    assert not report.ok
    # Every label whose trace resumes a participant stops at its first resume.
    for mismatch in report.mismatches:
        assert mismatch.step is not None
        assert mismatch.failed == mismatch.trace[mismatch.step]
        assert "resume" in mismatch.failed
        pairs = zip(mismatch.before, mismatch.after, strict=True)
        moved = [i for i, (was, now) in enumerate(pairs) if was != now]
        assert [mismatch.after[i][3] for i in moved] == [((1, "resume"),)] * len(moved)
        # The nearest projection the System reached is the resume with nothing recorded.
        assert [mismatch.reached[0][i][3] for i in moved] == [()] * len(moved)
    assert "resume(1) -> agent" in {m.label for m in report.mismatches}
    assert report.count(ReplayOutcome.REPLAYED) + len(report.mismatches) == len(report.replays)


def test_each_cover_trace_is_a_design_run_ending_in_its_label() -> None:
    model = DesignModel(design_params(NO_CRASHES))
    cover = design_cover(model)
    assert len({t.label for t in cover.traces}) == len(cover.traces) == 71
    for trace in cover.traces:
        assert trace.labels()[-1] == trace.label
        state = trace.initial
        for label, reached in trace.steps:
            assert (label, reached) in {(a.label, s) for a, s in model.successors(state)}
            state = reached
    # Shortest: the trigger is taken first, from the initial state.
    trigger = next(t for t in cover.traces if t.label == "checkpoint trigger")
    assert trigger.labels() == ("checkpoint trigger",)


def test_a_step_the_system_cannot_take_by_construction_is_listed_with_its_reason() -> None:
    model = DesignModel(design_params(NO_CRASHES))
    some = design_cover(model).traces[0]
    label = "restore(2) -> agent [restore_failure]"
    abstracted = replay(DesignTrace(label, some.initial, some.steps), ProtocolModel(NO_CRASHES))
    assert abstracted.outcome is ReplayOutcome.ABSTRACTED
    assert "restore" in abstracted.reason and abstracted.step is None
    assert abstracted.describe()["reason"] == abstracted.reason


def test_the_cli_reports_json_and_exits_zero_when_every_step_replays() -> None:
    result = CliRunner().invoke(main, ["cover", "--set", "crashes=false", "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    assert document["ok"] is True
    assert (document["covered"], document["replayed"], document["mismatch"]) == (71, 71, 0)
    assert document["params"]["crashes"] is False


def test_the_cli_exits_one_naming_the_step_on_a_mismatch(monkeypatch: pytest.MonkeyPatch) -> None:
    def planted(params: ProtocolParams) -> CoverReport:
        return transition_cover(params, hooks=_forgets_resume())

    monkeypatch.setattr("quiesce.cli._cover.transition_cover", planted)
    result = CliRunner().invoke(main, ["cover", "--set", "crashes=false"])
    assert result.exit_code == 1
    assert result.output.startswith("MISMATCH: ")
    assert "resume(1) -> agent: step " in result.output


def test_the_cli_refuses_a_configuration_the_design_has_no_counterpart_of() -> None:
    result = CliRunner().invoke(main, ["cover", "--set", "agents=2"])
    assert result.exit_code == 2
    assert "agents=2" in result.output


def test_no_trace_takes_an_abstracted_step_before_its_last() -> None:
    # At fault budget 2 a participant may fail its restore (an abstraction), and a second
    # restore follows: the cover reaches it without the failure, or lists it as beyond.
    two_faults = dataclasses.replace(COVER_PARAMS, faults=2)
    cover = design_cover(DesignModel(design_params(two_faults)))
    failing = [t for t in cover.traces if abstraction(t.label) is not None]
    assert {t.label for t in failing} >= {"restore(2) -> agent [restore_failure]"}
    for trace in cover.traces:
        assert all(abstraction(label) is None for label in trace.labels()[:-1]), trace.label
    assert not set(cover.beyond) & {t.label for t in cover.traces}
    assert cover.states == pins.TWO_FAULT_COVER_STATES


@pytest.mark.slow
def test_a_restore_after_two_controller_crashes_replays() -> None:
    # The design: crash, restore(2) -> policy, crash, restore(3) -> policy refused (policy
    # is fenced to 2), resume(2) -> policy, restore(3) -> policy again (about 35 s CPU).
    two_faults = dataclasses.replace(COVER_PARAMS, faults=2)
    cover = design_cover(DesignModel(design_params(two_faults)))
    trace = next(t for t in cover.traces if t.label == "restore(3) -> agent")
    assert trace.labels()[-4:] == (
        "restore(3) -> policy",
        "resume(2) -> policy",
        "restore(3) -> policy",
        "restore(3) -> agent",
    )
    outcome = replay(trace, ProtocolModel(two_faults))
    assert outcome.outcome is ReplayOutcome.REPLAYED, outcome.explain()
