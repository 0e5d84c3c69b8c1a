"""The page's data: frames of a path, hand steps, properties, control states, coverage."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest

from quiesce.check import NO_STALL, Step, Trace, Violation, build_model
from quiesce.explore import BadStep, Session
from quiesce.explore._session import changes
from tests.explore.conftest import MUTANT


def session(violation: Violation[Any]) -> Session[Any]:
    return Session(build_model("two-phase", mutant=MUTANT), violation, mutant=MUTANT)


def test_the_document_holds_a_frame_per_state_of_the_counterexample(
    two_phase_violation: Violation[Any],
) -> None:
    document = session(two_phase_violation).document(served=False)
    json.dumps(document)  # the page embeds it as it is
    frames = document["frames"]
    assert [f["action"] for f in frames] == [None, "RMChooseToAbort(rm1)", "RMRcvCommitMsg(rm2)"]
    assert document["violation"] == {
        "property": "TCConsistent",
        "kind": "always",
        "step": 2,
        "loop_from": None,
    }
    assert document["title"] == f"two-phase [{MUTANT}]" and not document["served"]
    assert [p["name"] for p in document["properties"]] == ["TypeOK", "TCConsistent", NO_STALL]
    # The violated property fails exactly at the last step.
    assert [f["holds"]["TCConsistent"] for f in frames] == [True, True, False]
    assert [f["controls"]["rm2"] for f in frames] == ["working", "working", "committed"]
    assert frames[2]["controls"] == {
        "tm": "init",
        "rm1": "aborted",
        "rm2": "committed",
        "rm3": "working",
    }


def test_each_frame_names_its_step_among_the_previous_actions_and_its_diff(
    two_phase_violation: Violation[Any],
) -> None:
    frames = session(two_phase_violation).document(served=False)["frames"]
    for before, after in itertools.pairwise(frames):
        assert before["actions"][after["via"]]["label"] == after["action"]
    assert frames[2]["changes"] == [
        {"field": "rmState.rm2", "before": "working", "after": "committed"}
    ]
    # The rows fired: rm1's choose_to_abort, then rm2's recv_commit (guard removed).
    rm = build_model("two-phase").rm_table  # type: ignore[attr-defined]
    assert [rm.rows[r].input.value for r in frames[1]["fired"]["rm1"]] == ["choose_to_abort"]
    assert [rm.rows[r].input.value for r in frames[2]["fired"]["rm2"]] == ["recv_commit"]
    assert frames[2]["fired"].keys() == {"rm2"}


def test_a_hand_step_leaves_the_path_and_numbers_new_states(
    two_phase_violation: Violation[Any],
) -> None:
    explored = session(two_phase_violation)
    frames = explored.document(served=True)["frames"]
    tm_abort = [a["label"] for a in frames[2]["actions"]].index("TMAbort")
    frame = explored.step(frames[2]["id"], tm_abort)
    assert frame["action"] == "TMAbort" and frame["via"] == tm_abort
    assert frame["id"] == 3 and frame["controls"]["tm"] == "aborted"
    assert frame["changes"] == [
        {"field": "tmState", "before": "init", "after": "aborted"},
        {"field": "msgs", "before": [], "after": ["Abort"]},
    ]
    # Stepping back onto a known state gives it its number again.
    first = [a["label"] for a in frames[0]["actions"]].index("RMChooseToAbort(rm1)")
    assert explored.step(frames[0]["id"], first)["id"] == frames[1]["id"]


@pytest.mark.parametrize(
    ("state", "action", "message"),
    [
        (99, 0, "no state 99: there are 3"),
        (-1, 0, "no state -1: there are 3"),
        (0, 99, "no action of state 0 99: there are 10"),
    ],
)
def test_a_step_from_an_unknown_state_or_action_is_refused(
    two_phase_violation: Violation[Any], state: int, action: int, message: str
) -> None:
    explored = session(two_phase_violation)
    explored.document(served=True)
    with pytest.raises(BadStep, match=message):
        explored.step(state, action)


def test_no_stall_status_tells_goal_moving_and_deadlock() -> None:
    model = build_model("two-phase", {"rms": "1"})
    explored = Session(model)
    start = explored.document(served=True)["frames"][0]
    assert start["stall"] == "moving"
    labels = [a["label"] for a in start["actions"]]
    aborted = explored.step(start["id"], labels.index("TMAbort"))
    rm_abort = [a["label"] for a in aborted["actions"]].index("RMRcvAbortMsg(rm1)")
    assert explored.step(aborted["id"], rm_abort)["stall"] == "goal"


def test_without_a_path_the_session_opens_on_the_initial_state() -> None:
    document = Session(build_model("two-phase")).document(served=False)
    assert len(document["frames"]) == 1 and document["violation"] is None
    assert document["title"] == "two-phase" and document["frames"][0]["changes"] == []


def test_protocol_control_states_come_from_the_model_not_the_tables_initial_states() -> None:
    # The protocol model starts with its group opened: both executions already running,
    # the deadline registry running; attempts #1 and #2 do not exist yet.
    model = build_model("protocol", {"siblings": "2", "attempts": "2"})
    controls = Session(model).document(served=False)["frames"][0]["controls"]
    assert controls["agent_execution[g0-0#0]"] == "running"
    assert controls["agent_execution[g0-1#1]"] is None
    assert controls["deadline_registry"] == "running"
    assert controls["checkpoint"] == "idle" and controls["admission_gate"] == "open"
    assert controls["control_fence[policy]"] == "idle"


def protocol_frames(labels: list[str]) -> list[dict[str, Any]]:
    """The frames of the path taking `labels` in a one-rollout protocol model."""
    model = build_model("protocol", {"siblings": "1", "turns": "1", "attempts": "1"})
    initial = state = next(iter(model.init_states()))
    steps: list[Step[Any]] = []
    for label in labels:
        steps.append(next(Step(a, s) for a, s in model.successors(state) if a.label == label))
        state = steps[-1].state
    frames: list[dict[str, Any]]
    frames = Session(model, Trace(initial, tuple(steps))).document(served=False)["frames"]
    return frames


def test_a_retired_execution_stays_retired_and_a_crashed_one_is_gone() -> None:
    retired = protocol_frames(["finish g0/0#0", "deliver ack(1) -> agent", "agent crashes"])
    execution = [f["controls"]["agent_execution[g0-0#0]"] for f in retired]
    # The crash loses the agent's executions, not what it retired.
    assert execution == ["running", "completed", "acked", "acked"]
    crashed = protocol_frames(["agent crashes"])
    assert [f["controls"]["agent_execution[g0-0#0]"] for f in crashed] == ["running", None]


def test_changes_compares_nested_fields_and_whole_lists() -> None:
    before = {"a": {"b": 1, "c": [1, 2]}, "gone": 1}
    after = {"a": {"b": 2, "c": [2]}, "new": {"x": None}}
    # `new.x` is None, as an absent field reads: not a change.
    assert changes(before, after) == [
        {"field": "a.b", "before": 1, "after": 2},
        {"field": "a.c", "before": [1, 2], "after": [2]},
        {"field": "gone", "before": 1, "after": None},
    ]
    assert changes("x", "y") == [{"field": "(state)", "before": "x", "after": "y"}]
