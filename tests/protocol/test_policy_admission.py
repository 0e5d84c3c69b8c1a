"""M4 policy admission: drain on prepare, pause at zero, waiters released on resume."""

from __future__ import annotations

import pytest

from quiesce.check import arg_examples
from quiesce.fsm import Effect, GuardRejected, TransitionNotAllowed
from quiesce.protocol.machines import POLICY_ADMISSION, AdmissionData, PolicyInput, PolicyState
from quiesce.protocol.machines import POLICY_ADMISSION as POLICY

ARG_EXAMPLES = arg_examples(POLICY_ADMISSION)

I, S = PolicyInput, PolicyState  # noqa: E741


def test_accepting_admits_and_counts_calls() -> None:
    value, effects = POLICY.step(POLICY.start(), I.CALL_STARTED, "c1")
    assert value.state is S.ACCEPTING and value.data == AdmissionData(1)
    assert [e.name for e in effects] == ["admit_call"]
    value, _ = POLICY.step(value, I.CALL_FINISHED, "c1")
    assert value.data.in_flight == 0


def test_prepare_with_nothing_in_flight_pauses_at_once() -> None:
    value, _ = POLICY.step(POLICY.start(), I.FENCE_PREPARE)
    assert value.state is S.PAUSED


def test_prepare_drains_and_the_last_call_pauses() -> None:
    value = POLICY.start()
    for call in ("c1", "c2"):
        value, _ = POLICY.step(value, I.CALL_STARTED, call)
    value, _ = POLICY.step(value, I.FENCE_PREPARE)
    assert value.state is S.DRAINING
    value, _ = POLICY.step(value, I.CALL_FINISHED, "c1")
    assert value.state is S.DRAINING and value.data.in_flight == 1
    value, _ = POLICY.step(value, I.CALL_FINISHED, "c2")
    assert value.state is S.PAUSED and value.data.in_flight == 0


@pytest.mark.parametrize("prepare_with_call", [True, False])
def test_new_calls_wait_while_not_accepting_and_resume_admits_them(
    prepare_with_call: bool,
) -> None:
    value = POLICY.start()
    if prepare_with_call:
        value, _ = POLICY.step(value, I.CALL_STARTED, "c0")
    value, _ = POLICY.step(value, I.FENCE_PREPARE)
    value, effects = POLICY.step(value, I.CALL_STARTED, "c1")
    assert value.data.waiters == ("c1",) and [e.name for e in effects] == ["hold_as_waiter"]
    waiting = value.data.in_flight
    value, effects = POLICY.step(value, I.FENCE_RESUME)
    assert value.state is S.ACCEPTING and value.data == AdmissionData(waiting + 1)
    assert [e.name for e in effects] == ["release_waiters"]
    assert all(isinstance(e, Effect) for e in effects)


@pytest.mark.parametrize("state_steps", [(), (I.FENCE_PREPARE,)])
def test_repeated_prepare_and_stray_resume_change_nothing(
    state_steps: tuple[PolicyInput, ...],
) -> None:
    value = POLICY.start()
    for input in state_steps:
        value, _ = POLICY.step(value, input)
    again = POLICY.step(value, I.FENCE_PREPARE if state_steps else I.FENCE_RESUME)
    assert again == (value, ())


def test_a_finish_without_a_call_is_refused() -> None:
    with pytest.raises(GuardRejected):
        POLICY.step(POLICY.start(), I.CALL_FINISHED, "c1")
    paused, _ = POLICY.step(POLICY.start(), I.FENCE_PREPARE)
    with pytest.raises(TransitionNotAllowed):
        POLICY.step(paused, I.CALL_FINISHED, "c1")


def test_invariants_and_examples() -> None:
    value = POLICY.start()
    for input, arg in [(i, a) for i in PolicyInput for a in ARG_EXAMPLES.get(i, (None,))]:
        if POLICY.enabled(value, input, arg):
            value, _ = POLICY.step(value, input, arg)
            assert POLICY.check_invariants(value) == []
    assert set(ARG_EXAMPLES) == {I.CALL_STARTED, I.CALL_FINISHED}  # fence inputs take none
