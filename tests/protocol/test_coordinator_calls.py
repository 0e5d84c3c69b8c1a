"""The coordinator's calls: the per-call table's rows name the work the phase runner does,
a reply is read into one of the table's inputs, and the tables and the policy are the
coordinator's parameters (a variant runs through the same code)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from quiesce.protocol import Cause
from quiesce.protocol._ids import OpId
from quiesce.protocol._messages import (
    AckReply,
    CommitReply,
    ErrorReply,
    PrepareReply,
    RestoreReply,
    ResumeReply,
)
from quiesce.protocol.controller import PeriodElapsed
from quiesce.protocol.controller.lowlevel import (
    CALL_WORK,
    CHECKPOINT_WORK,
    RESTORE_WORK,
    Call,
    CoordinatorPolicy,
    LocalDone,
    LocalOp,
    Log,
    Op,
    Reply,
    read_reply,
)
from quiesce.protocol.machines import (
    CALL,
    CHECKPOINT,
    PHASE_ORDER,
    RESTORE,
    CallInput,
    Phase,
)
from tests.protocol.test_coordinator import Harness, of

X = OpId(1, 4, 0)
STAMP = {"participant": "pol", "incarnation": "i1"}


@pytest.mark.parametrize(
    ("table", "work"),
    [(CALL, CALL_WORK), (CHECKPOINT, CHECKPOINT_WORK), (RESTORE, RESTORE_WORK)],
    ids=["call", "checkpoint", "restore"],
)
def test_every_effect_name_of_a_table_is_work_the_coordinator_does(table: Any, work: Any) -> None:
    named = {name for row in table.rows for name in row.effects}
    assert named == set(work)


@pytest.mark.parametrize(
    ("op", "result", "expected", "cause"),
    [
        (Op.PREPARE, PrepareReply(**STAMP, op_id=X, status="ready"), "recv_answer", None),
        (
            Op.PREPARE,
            PrepareReply(**STAMP, op_id=X, status="not_ready"),
            "recv_not_ready",
            Cause.NOT_READY_UNTIL_DEADLINE,
        ),
        (
            Op.COMMIT,
            CommitReply(**STAMP, op_id=X, status="failed"),
            "recv_invalid",
            Cause.COMMIT_FAILED,
        ),
        (
            Op.RESUME,
            ResumeReply(**STAMP, op_id=OpId(1, 5, 0), retired=X),
            "recv_invalid",
            Cause.WRONG_ID,
        ),
        (Op.RESUME, AckReply(**STAMP), "recv_invalid", Cause.WRONG_ID),
        (
            Op.RESUME,
            PrepareReply(**STAMP, op_id=X, status="ready"),
            "recv_invalid",
            Cause.MALFORMED_REPLY,
        ),
        (Op.DISCARD, RestoreReply(**STAMP, op_id=X, status="restored"), "recv_answer", None),
        (
            Op.PREPARE,
            ErrorReply(**STAMP, code="checkpoint_conflict", message="", active_id=OpId(1, 2, 0)),
            "recv_conflict",
            Cause.CHECKPOINT_CONFLICT,
        ),
        (
            Op.PREPARE,
            ErrorReply(**STAMP, code="checkpoint_conflict", message=""),
            "recv_refusal",
            Cause.CHECKPOINT_CONFLICT,
        ),
        (
            Op.COMMIT,
            ErrorReply(**STAMP, code="stale_checkpoint", message=""),
            "recv_refusal",
            Cause.STALE_ID,
        ),
    ],
)
def test_a_reply_is_read_as_one_input_of_the_call_table(
    op: Op, result: Any, expected: str, cause: Cause | None
) -> None:
    input, event = read_reply(op, X, result)
    assert (input.value, event.cause, event.result) == (expected, cause, result)


@pytest.mark.parametrize(
    ("op", "conflicting", "expected"),
    [
        (Op.RESUME, True, ("recv_answer", None)),  # the other controller's id is retired
        (Op.RESUME, False, ("recv_refusal", Cause.STALE_ID)),  # our own id: not fresh
        (Op.PREPARE, True, ("recv_refusal", Cause.STALE_ID)),  # only a resume retires
    ],
)
def test_a_stale_refusal_answers_only_the_resume_of_a_conflicting_id(
    op: Op, conflicting: bool, expected: tuple[str, Cause | None]
) -> None:
    stale = ErrorReply(**STAMP, code="stale_checkpoint", message="", high_watermark=OpId(1, 5, 0))
    input, event = read_reply(op, X, stale, conflicting=conflicting)
    assert (input.value, event.cause) == expected and event.result == stale


def test_a_late_reply_to_an_answered_call_is_logged_and_changes_nothing() -> None:
    h = Harness()
    h.start()
    h.answer("pol", Op.PREPARE)
    before = h.s
    reply = PrepareReply(participant="pol", incarnation="i1", op_id=h.x, status="ready")
    effects = h.step(Reply("pol", Op.PREPARE, h.x, reply))
    assert h.s == before
    assert [e.event for e in of(effects, Log)] == ["stale_reply"]


def test_the_phase_order_is_the_policys() -> None:
    backwards = {**PHASE_ORDER, Phase.PREPARE: tuple(reversed(PHASE_ORDER[Phase.PREPARE]))}
    h = Harness()
    h.c.policy = CoordinatorPolicy(phase_order=backwards)
    effects = h.start()
    assert [c.participant for c in of(effects, Call)] == ["res"]


def test_the_call_table_is_a_parameter_and_its_rows_name_the_work() -> None:
    # Without `mark_attempted` on SEND, a prepare goes out and nobody is attempted (S6).
    rows = [
        replace(row, effects=("send_call",)) if row.input is CallInput.SEND else row
        for row in CALL.rows
    ]
    h = Harness()
    h.c.call = CALL.derive("attempted_never", rows=rows)
    effects = h.start()
    assert [c.participant for c in of(effects, Call)] == ["pol"]
    assert h.s.attempt is not None and h.s.attempt.attempted == frozenset()


def test_a_derived_table_may_bind_its_own_effect_values() -> None:
    # An effect bound to a value is emitted as is (a probe in a variant's table).
    marker = Log("probe")
    h = Harness()
    h.c.call = CALL.derive("probe", effects={"retry_not_ready": lambda _value, _arg: marker})
    h.start()
    effects = h.answer("pol", Op.PREPARE, status="not_ready")
    assert effects == [marker]


def test_every_call_of_a_role_goes_out_at_once_and_the_next_role_waits() -> None:
    h = Harness()
    effects = h.step(PeriodElapsed(), 1.0)
    assert not of(effects, Call)  # the intent is written first
    effects = h.step(LocalDone(LocalOp.INTENT, h.x))
    assert [(c.participant, c.op) for c in of(effects, Call)] == [("pol", Op.PREPARE)]
    assert h.s.attempt is not None and h.s.attempt.waiting == {("pol", h.x)}
