"""M3 agent execution: every row, every refusal and every forbidden event (h11 style)."""

from __future__ import annotations

from typing import Any

import pytest

from quiesce.check import arg_examples
from quiesce.fsm import TransitionNotAllowed, Value
from quiesce.protocol import AdmissionClosed, DuplicateExecution, Refusal, StaleAttempt
from quiesce.protocol.machines import (
    AGENT_EXECUTION,
    Admission,
    AgentInput,
    Completion,
    ExecAnswer,
    ExecState,
    ExecutionData,
)
from quiesce.protocol.machines import AGENT_EXECUTION as EXEC

ARG_EXAMPLES = arg_examples(AGENT_EXECUTION)

I, S, A = AgentInput, ExecState, ExecAnswer  # noqa: E741
DONE = Completion("r1#0:abc", '{"reward":1}')


def new() -> Value[ExecState, ExecutionData]:
    return EXEC.start(ExecutionData("r1", 0, "g1", 3))


def walk(*steps: tuple[AgentInput, Any]) -> Value[ExecState, ExecutionData]:
    value = new()
    for input, arg in steps:
        value, _ = EXEC.step(value, input, arg)
    return value


BEGUN = ((I.BEGIN, Admission()),)
STATES = {
    S.RUNNING: BEGUN,
    S.PARK_REQUESTED: (*BEGUN, (I.FENCE_PREPARE, None)),
    S.PARKED: (*BEGUN, (I.FENCE_PREPARE, None), (I.TURN_BOUNDARY, 1)),
    S.FROZEN: (*BEGUN, (I.POLICY_CALL_HELD, None)),
    S.COMPLETED: (*BEGUN, (I.RUN_FINISHED, DONE)),
    S.ACKED: (*BEGUN, (I.RUN_FINISHED, DONE), (I.RECV_ACK, DONE.receipt)),
    S.TOMBSTONED: (*BEGUN, (I.RETIRE, None)),
}


def at(state: ExecState) -> Value[ExecState, ExecutionData]:
    value = new() if state is S.NEW else walk(*STATES[state])
    assert value.state is state
    return value


def test_begin_starts_a_new_execution_when_admitted() -> None:
    value, effects = EXEC.step(new(), I.BEGIN, Admission(fence_idle=True, retired=False))
    assert value.state is S.RUNNING and effects == (A.STARTED,)


@pytest.mark.parametrize(
    ("admission", "refusal"),
    [
        (Admission(fence_idle=False, retired=False), A.ADMISSION_CLOSED),
        (Admission(fence_idle=False, retired=True), A.ADMISSION_CLOSED),
        (Admission(fence_idle=True, retired=True), A.STALE_ATTEMPT),
    ],
)
def test_begin_refusals_hold_new(admission: Admission, refusal: ExecAnswer) -> None:
    value, effects = EXEC.step(new(), I.BEGIN, admission)
    assert value == new() and effects == (refusal,)


@pytest.mark.parametrize(
    ("state", "refusal"),
    [
        (S.RUNNING, A.DUPLICATE_EXECUTION),
        (S.PARK_REQUESTED, A.DUPLICATE_EXECUTION),
        (S.PARKED, A.DUPLICATE_EXECUTION),
        (S.FROZEN, A.DUPLICATE_EXECUTION),
        (S.COMPLETED, A.DUPLICATE_EXECUTION),
        (S.ACKED, A.STALE_ATTEMPT),
        (S.TOMBSTONED, A.STALE_ATTEMPT),
    ],
)
def test_begin_of_an_existing_key_is_refused(state: ExecState, refusal: ExecAnswer) -> None:
    value = at(state)
    after, effects = EXEC.step(value, I.BEGIN, Admission())
    assert after == value and effects == (refusal,)


def test_prepare_requests_a_park_and_the_boundary_parks() -> None:
    value, _ = EXEC.step(at(S.RUNNING), I.FENCE_PREPARE)
    assert value.state is S.PARK_REQUESTED
    value, effects = EXEC.step(value, I.TURN_BOUNDARY, 2)
    assert value.state is S.PARKED and value.data.turn == 2 and effects == (A.PARKED,)


@pytest.mark.parametrize("state", [S.PARK_REQUESTED, S.PARKED, S.FROZEN, S.COMPLETED])
def test_a_repeated_prepare_changes_nothing(state: ExecState) -> None:
    value = at(state)
    assert EXEC.step(value, I.FENCE_PREPARE) == (value, ())


def test_a_boundary_while_running_records_the_durable_turn_and_keeps_running() -> None:
    value, _ = EXEC.step(at(S.RUNNING), I.TURN_BOUNDARY, 1)
    assert value.state is S.RUNNING and value.data.turn == 1


@pytest.mark.parametrize("state", [S.RUNNING, S.PARK_REQUESTED])
def test_only_a_held_policy_call_freezes(state: ExecState) -> None:
    value, _ = EXEC.step(at(state), I.POLICY_CALL_HELD)
    assert value.state is S.FROZEN


def test_policy_resume_runs_a_frozen_execution_or_parks_it_while_the_fence_is_closed() -> None:
    assert EXEC.step(at(S.FROZEN), I.POLICY_RESUMED, True)[0].state is S.RUNNING
    assert EXEC.step(at(S.FROZEN), I.POLICY_RESUMED, False)[0].state is S.PARK_REQUESTED


@pytest.mark.parametrize("state", [S.PARKED, S.PARK_REQUESTED])
def test_fence_resume_wakes_parked_executions(state: ExecState) -> None:
    value, effects = EXEC.step(at(state), I.FENCE_RESUME)
    assert value.state is S.RUNNING and effects == (A.WOKEN,)


@pytest.mark.parametrize("state", [S.RUNNING, S.FROZEN, S.COMPLETED])
def test_fence_resume_leaves_the_others(state: ExecState) -> None:
    value = at(state)
    assert EXEC.step(value, I.FENCE_RESUME) == (value, ())


@pytest.mark.parametrize("state", [S.RUNNING, S.PARK_REQUESTED])
def test_finish_completes_with_the_exact_receipt(state: ExecState) -> None:
    value, effects = EXEC.step(at(state), I.RUN_FINISHED, DONE)
    assert value.state is S.COMPLETED and effects == (A.RESULT_HELD,)
    assert (value.data.receipt, value.data.result) == (DONE.receipt, DONE.result)


def test_only_the_exact_receipt_releases_a_result() -> None:
    value, effects = EXEC.step(at(S.COMPLETED), I.RECV_ACK, "r1#0:wrong")
    assert value.state is S.COMPLETED and effects == (A.UNKNOWN_RECEIPT,)
    value, effects = EXEC.step(value, I.RECV_ACK, DONE.receipt)
    assert value.state is S.ACKED and effects == (A.RESULT_RELEASED,)
    again, effects = EXEC.step(value, I.RECV_ACK, DONE.receipt)
    assert again == value and effects == (A.ALREADY_ACKED,)
    _, effects = EXEC.step(value, I.RECV_ACK, "r1#0:wrong")
    assert effects == (A.UNKNOWN_RECEIPT,)


@pytest.mark.parametrize("state", [S.NEW, S.RUNNING, S.PARK_REQUESTED, S.PARKED, S.FROZEN])
def test_retire_tombstones_everything_not_yet_completed(state: ExecState) -> None:
    value, effects = EXEC.step(at(state), I.RETIRE)
    assert value.state is S.TOMBSTONED and effects == (A.TOMBSTONED,)


def test_s17_retire_of_a_completed_result_holds_it_until_an_ack() -> None:
    value = at(S.COMPLETED)
    after, effects = EXEC.step(value, I.RETIRE)
    assert after == value and effects == (A.COMPLETED_UNACKNOWLEDGED,)


@pytest.mark.parametrize("state", [S.ACKED, S.TOMBSTONED])
def test_retire_of_an_ended_execution_says_so(state: ExecState) -> None:
    value = at(state)
    after, effects = EXEC.step(value, I.RETIRE)
    assert after == value and effects == (A.ALREADY_RETIRED,)


@pytest.mark.parametrize(
    ("input", "arg", "effect"),
    [
        (I.RUN_FINISHED, DONE, A.LATE_FINISH_DROPPED),
        (I.TURN_BOUNDARY, 2, A.LATE_EVENT_DROPPED),
        (I.POLICY_CALL_HELD, None, A.LATE_EVENT_DROPPED),
        (I.POLICY_RESUMED, True, A.LATE_EVENT_DROPPED),
    ],
)
def test_late_events_of_a_tombstoned_execution_are_dropped(
    input: AgentInput, arg: Any, effect: ExecAnswer
) -> None:
    value = at(S.TOMBSTONED)
    after, effects = EXEC.step(value, input, arg)
    assert after == value and effects == (effect,)


@pytest.mark.parametrize(
    ("state", "input", "arg"),
    [
        (S.PARKED, I.RUN_FINISHED, DONE),  # a parked execution sits at its boundary
        (S.FROZEN, I.RUN_FINISHED, DONE),  # a frozen one is blocked in its policy call
        (S.COMPLETED, I.RUN_FINISHED, DONE),
        (S.PARKED, I.TURN_BOUNDARY, 2),
        (S.PARKED, I.POLICY_CALL_HELD, None),
        (S.RUNNING, I.POLICY_RESUMED, True),
        (S.NEW, I.FENCE_PREPARE, None),
        (S.RUNNING, I.RECV_ACK, "x"),
    ],
)
def test_unmapped_events_are_refused_and_change_nothing(
    state: ExecState, input: AgentInput, arg: Any
) -> None:
    with pytest.raises(TransitionNotAllowed):
        EXEC.step(at(state), input, arg)


def test_arg_examples_name_the_inputs_that_take_an_argument() -> None:
    # The fence, policy-held and retire inputs take no argument.
    assert set(ARG_EXAMPLES) == {
        I.BEGIN,
        I.TURN_BOUNDARY,
        I.POLICY_RESUMED,
        I.RUN_FINISHED,
        I.RECV_ACK,
    }


def test_every_effect_of_a_row_is_bound_to_its_answer() -> None:
    """M3 answers typed values: no row emits a bare `Effect` name for a reader to match."""
    emitted = {name for row in EXEC.rows for name in row.effects}
    assert emitted <= set(EXEC.effect_fns)
    answers = {EXEC.effect_fns[name](new(), None) for name in emitted}
    assert all(isinstance(answer, ExecAnswer) for answer in answers)


@pytest.mark.parametrize(
    ("answer", "refusal"),
    [
        (A.ADMISSION_CLOSED, AdmissionClosed),
        (A.STALE_ATTEMPT, StaleAttempt),
        (A.DUPLICATE_EXECUTION, DuplicateExecution),
    ],
)
def test_a_refusing_answer_is_the_wire_code_of_its_refusal(
    answer: ExecAnswer, refusal: type[Refusal]
) -> None:
    assert answer.value == refusal.code
