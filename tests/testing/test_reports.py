"""Truthful reports (issue 25, part 3): a wrong reply type is named as such, a sequential
difference reached inside a race keeps its own rule, a failure names the row the reference
fired, and raced requests are printed in send order with their overlap."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from quiesce.adapters import ParticipantHost
from quiesce.protocol.participant import ParticipantOp
from quiesce.protocol.wire import Message, PrepareReply, Role
from quiesce.testing import (
    LocalServer,
    ReleaseOnRetireHost,
    StuckAfterOvertakenPrepareHost,
    check_participant,
)
from quiesce.testing._machine import ConformanceMachine
from quiesce.testing._results import ConformanceViolation
from quiesce.testing._session import KitRun, reset_hook
from quiesce.testing._shapes import RaceShape

from .test_in_process import HostParticipant

TOKEN = "reports-tok-81c2"


class CommitAnsweredAsPrepare(HostParticipant):
    """BROKEN: a commit is answered with the prepare's reply type."""

    async def send(self, op: ParticipantOp, request: Any, deadline_at: float | None) -> Message:
        reply = await super().send(op, request, deadline_at)
        if op is ParticipantOp.COMMIT and getattr(reply, "status", None) == "committed":
            stamp = {"participant": reply.participant, "incarnation": reply.incarnation}
            return PrepareReply(**stamp, op_id=request.op_id, status="ready")
        return reply


def test_a_wrong_reply_type_is_named_not_reported_as_a_5xx() -> None:
    result = check_participant(
        lambda: CommitAnsweredAsPrepare("policy"), "policy", examples=30, seed=1
    )
    assert not result.ok and result.violation is not None
    violation = result.violation
    assert violation.rule_id == "reply_model", result.report()
    assert "5xx" not in violation.rule and "503" not in result.report()
    assert any(
        "commit answered PrepareReply, expected CommitReply" in d for d in violation.differences
    ), result.report()
    last = violation.steps[-1]
    assert last.exchange.path.endswith("/commit") and last.exchange.status == 200


@contextmanager
def _machine(host_class: type[ParticipantHost], role: str) -> Iterator[ConformanceMachine]:
    """One example of the kit on a fresh `host_class` server, to call its rules by hand."""
    config = {"name": f"{role}-r", "role": role}
    with LocalServer.start(config, token=TOKEN, host_class=host_class) as server:
        run = KitRun(server.url, TOKEN, Role(role), role == "agent", 10.0)
        run.reset = reset_hook(server.reset, TOKEN, 10.0)
        run.connect(server.url)
        machine = type("ConformanceMachine", (ConformanceMachine,), {"run": run})()
        try:
            yield machine
        finally:
            machine.teardown()
            run.disconnect()


def test_a_sequential_difference_inside_a_race_keeps_its_own_rule() -> None:
    # The retire answers `tombstoned` in every order of the race: S17, not linearizability.
    with (
        _machine(ReleaseOnRetireHost, "agent") as example,
        pytest.raises(ConformanceViolation) as caught,
    ):
        example._race(RaceShape((("prepare", "completed"), ("retire", "completed")), (0, 1)))
    violation = caught.value
    assert violation.rule_id == "retire_completed", violation
    assert "S17" in violation.rule and "linearizability" not in violation.rule
    assert violation.shape == "prepare|retire"
    assert any("every order of the race expects this" in d for d in violation.differences)
    assert any(
        row.startswith("M3 agent_execution #") and " completed + retire" in row
        for row in violation.rows
    ), violation.rows
    raced = [s for s in violation.steps if s.note.startswith("raced")]
    assert [s.exchange.path.rsplit("/", 1)[1] for s in raced] == ["prepare", "retire"]
    assert raced[0].note.startswith("raced: request 1 of 2 in send order, sent at +0 ms")
    # the reference answers at once, so the report says these two did not overlap
    assert all(", overlapping " in s.note and "answered at +" in s.note for s in raced)


def test_a_real_race_is_still_reported_as_linearizability() -> None:
    with (
        _machine(StuckAfterOvertakenPrepareHost, "policy") as example,
        pytest.raises(ConformanceViolation) as caught,
    ):
        example._race(RaceShape((("prepare", "next"), ("resume", "same")), (0, 1)))
    violation = caught.value
    assert violation.rule_id == "linearizability", violation
    assert "fence: expected 'idle', got 'preparing'" in violation.differences
    assert violation.rows and violation.rows[0].startswith("M2 control_fence #")


def test_a_retire_of_a_running_execution_is_not_labelled_s17() -> None:
    from quiesce.testing._rules import hint

    running = hint("retire", {"http": 200, "outcome": "tombstoned"}, {"http": 409}, "begin")
    held = hint("retire", {"http": 200, "outcome": "completed_unacknowledged"}, {}, "finish")
    assert running.id == "retire" and "S17" not in running.text
    assert held.id == "retire_completed" and "S17" in held.text
