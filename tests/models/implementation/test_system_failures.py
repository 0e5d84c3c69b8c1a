"""The pure `System` feeds a failed call back to the controller as the driver does."""

from __future__ import annotations

from typing import Any

from quiesce.models import ProtocolModel, ProtocolParams, scenario_system
from quiesce.protocol import Cause, new_participant
from quiesce.protocol.controller import GroupOpened
from quiesce.protocol.controller.lowlevel import Op, TimerDue, TimerKind
from quiesce.protocol.machines import CallState, deadline_timer


def _failed_retire(system: Any) -> Any:
    """A fleet of one participant per role whose group's deadline retires its attempt, and
    that retire answered 5xx: the system's state after it."""
    state, _ = system.start(
        [
            new_participant({"name": "policy", "role": "policy"}, "p1"),
            new_participant({"name": "agent", "role": "agent"}, "a1"),
            new_participant(
                {"name": "resources", "role": "resources", "recovery_mode": "stateless"}, "r1"
            ),
        ]
    )
    state, _ = system.input(state, GroupOpened("g0", 1, "agent"))
    state, _ = system.input(state, TimerDue(deadline_timer("g0")), now=10_000.0)
    [retire] = state.requests(Op.RETIRE)
    state, _ = system.fail(state, retire, Cause.PARTICIPANT_ERROR)
    return state


def test_a_retire_failed_with_a_5xx_keeps_its_key() -> None:
    # A failed retire is resent from the attempt key its call carried (`CallFailed.payload`);
    # the System once dropped the payload and the controller raised a TypeError. The
    # scenarios' system has no retries inside an attempt (call_retries=0): the failed retire
    # is kept, with its key, to go again when the agent next answers.
    state = _failed_retire(scenario_system())
    [(key, call)] = state.controller.background
    assert key == ("agent", Op.RETIRE, "g0/0#0") and call.payload == ("g0/0", 0)
    assert call.value.state is CallState.FAILED


def test_a_retire_failed_with_a_5xx_goes_again_on_its_backoff_with_retries_on() -> None:
    system = ProtocolModel(ProtocolParams(max_consecutive_failures=5, call_retries=1)).system
    state = _failed_retire(system)
    [timer] = [name for name, _ in state.timers if name.kind is TimerKind.BACKGROUND_RETRY]
    state, _ = system.fire_timer(state, timer)
    assert len(state.requests(Op.RETIRE)) == 1, "the retire was not sent again"
