"""Retries inside an attempt (PROTOCOL.md §4, amended): a call that fails transiently is sent
again with the same op id after a jittered backoff, never past its deadline, up to
`call_retries` times; only then does the attempt fail, naming the participant and the
cause. Decided by the `call` table's rows; the driver only runs the timer and the call."""

from __future__ import annotations

from typing import Any

import pytest

from quiesce.check import check
from quiesce.models import ProtocolModel, ProtocolParams
from quiesce.protocol import Cause
from quiesce.protocol._config import QuiesceConfig
from quiesce.protocol._ids import OpId
from quiesce.protocol._messages import ErrorReply
from quiesce.protocol.controller import Outcome, Stopped
from quiesce.protocol.controller.lowlevel import (
    ArmTimer,
    Call,
    CallFailed,
    CancelTimer,
    LocalDone,
    LocalOp,
    Log,
    Metric,
    Op,
    TimerDue,
    backoff_s,
    call_retry_timer,
    prepare_deadline_timer,
)
from quiesce.protocol.machines import TRANSIENT_CAUSES, CheckpointState
from tests import pins
from tests.protocol.test_coordinator import Harness, of, outcome

S = CheckpointState


def committing(**config: Any) -> Harness:
    """A coordinator whose attempt waits on the agent's commit (the first commit role)."""
    h = Harness(**config)
    h.start()
    h.answer_all(Op.PREPARE)
    assert h.s.phase is S.COMMITTING and h.calls() == [("ag", h.x)]
    return h


def deadline_of(h: Harness, name: str) -> float:
    """The deadline the call of `name` in the phase in progress was sent with."""
    assert h.s.attempt is not None and h.s.attempt.calls is not None
    call = h.s.attempt.calls.get((name, h.x))
    assert call is not None
    return call.data.deadline_at


def retries(effects: list[Any]) -> list[Metric]:
    return [m for m in of(effects, Metric) if m.name == "call_retries"]


def test_a_5xx_on_commit_is_retried_with_the_same_id_after_a_backoff_and_completes() -> None:
    h = committing(call_retries=3, call_backoff_s=0.5)
    x = h.x
    deadline = deadline_of(h, "ag")
    effects = h.step(CallFailed("ag", Op.COMMIT, x, Cause.PARTICIPANT_ERROR), 1.0)
    # Not failed: backing off, one timer for this call, logged and counted.
    assert h.s.phase is S.COMMITTING and not of(effects, Outcome) and not of(effects, Call)
    [timer] = of(effects, ArmTimer)
    assert timer.name == call_retry_timer(x, "ag")
    assert h.now <= timer.at < h.now + 0.5
    assert [e.event for e in of(effects, Log)] == ["call_retried"]
    [counted] = retries(effects)
    assert dict(counted.tags) == {"cause": "participant_error", "op": "commit", "participant": "ag"}
    # The backoff ends: the same call, same id, same deadline.
    effects = h.step(TimerDue(timer.name), timer.at - h.now)
    [again] = of(effects, Call)
    assert (again.participant, again.op, again.op_id, again.deadline_at) == (
        "ag",
        Op.COMMIT,
        x,
        deadline,
    )
    # Answered: the attempt goes on as if nothing happened, and completes.
    h.answer_all(Op.COMMIT)
    for done in (LocalOp.CUT, LocalOp.VALIDATE, LocalOp.PUBLISH):
        h.step(LocalDone(done, x))
    _, effects = h.answer_all(Op.RESUME)
    assert (outcome(effects).result, outcome(effects).consecutive_failures) == ("completed", 0)


def test_spent_retries_fail_the_attempt_with_the_cause_and_the_stop_names_the_participant() -> None:
    h = committing(call_retries=2, max_consecutive_failures=0)
    x = h.x
    counted: list[Metric] = []
    for _ in range(2):
        effects = h.step(CallFailed("ag", Op.COMMIT, x, Cause.TIMEOUT), 0.1)
        counted += retries(effects)
        [timer] = of(effects, ArmTimer)
        h.step(TimerDue(timer.name), timer.at - h.now)
    effects = h.step(CallFailed("ag", Op.COMMIT, x, Cause.TIMEOUT), 0.1)
    assert len(counted) == 2 and not retries(effects)
    # Spent: the attempt fails with the cause and aborts the same id.
    assert h.s.phase is S.ABORTING
    assert h.s.attempt is not None and h.s.attempt.cause.cause is Cause.TIMEOUT
    assert {(c.op, c.op_id) for c in of(effects, Call)} == {(Op.RESUME, x)}
    _, effects = h.answer_all(Op.RESUME)
    # One failed attempt, over a budget of zero: stopped, naming whose call and why.
    assert outcome(effects).consecutive_failures == 1
    [stopped] = of(effects, Stopped)
    assert (stopped.reason, stopped.participant, stopped.cause) == (
        "max_consecutive_failures",
        "ag",
        "timeout",
    )


@pytest.mark.parametrize("cause", sorted(Cause, key=lambda c: c.value), ids=lambda c: c.value)
def test_only_a_transient_cause_is_retried(cause: Cause) -> None:
    h = committing(call_retries=3)
    effects = h.step(CallFailed("ag", Op.COMMIT, h.x, cause), 1.0)
    if cause in TRANSIENT_CAUSES:
        assert h.s.phase is S.COMMITTING and len(retries(effects)) == 1
    else:
        assert h.s.phase is not S.COMMITTING and not retries(effects)


def test_a_checkpoint_conflict_is_not_retried_but_aborts_the_active_id_first() -> None:
    h = Harness(call_retries=3)
    h.start()
    other = OpId(0, 9, 0)
    refusal = ErrorReply(
        participant="pol", incarnation="i1", code="checkpoint_conflict", message="", active_id=other
    )
    effects = h.reply("pol", Op.PREPARE, refusal)
    assert h.s.phase is S.ABORTING and not retries(effects) and not of(effects, ArmTimer)
    assert [(c.participant, c.op_id) for c in of(effects, Call)] == [("pol", other)]


def test_a_release_is_retried_inside_the_attempt_before_its_own_timer() -> None:
    # A lost resume of a published id is sent again (same id) after a backoff, with
    # admission still closed, instead of waiting `snapshot_attempt_interval_s` in
    # release_pending and counting a failure.
    h = Harness(call_retries=1)
    h.to_publishing()
    x = h.x
    h.step(LocalDone(LocalOp.PUBLISH, x))
    effects = h.step(CallFailed("res", Op.RESUME, x, Cause.PARTICIPANT_ERROR), 1.0)
    assert h.s.phase is S.RELEASING and len(retries(effects)) == 1
    [timer] = of(effects, ArmTimer)
    effects = h.step(TimerDue(timer.name), timer.at - h.now)
    assert [(c.participant, c.op, c.op_id) for c in of(effects, Call)] == [("res", Op.RESUME, x)]
    _, effects = h.answer_all(Op.RESUME)
    assert (outcome(effects).result, outcome(effects).consecutive_failures) == ("completed", 0)


def test_abort_and_release_keep_their_own_timer_once_the_retries_are_spent() -> None:
    h = Harness(call_retries=0)
    h.to_publishing()
    h.step(LocalDone(LocalOp.PUBLISH, h.x))
    effects = h.step(CallFailed("res", Op.RESUME, h.x, Cause.PARTICIPANT_ERROR), 1.0)
    assert h.s.phase is S.RELEASE_PENDING and not retries(effects)


def test_the_backoff_never_passes_the_deadline() -> None:
    config = {"call_retries": 3, "call_backoff_s": 4.0, "call_backoff_max_s": 4.0}
    h = committing(control_timeout_s=10.0, **config)
    x = h.x
    commit_deadline = deadline_of(h, "ag")
    delay = backoff_s(QuiesceConfig(**config), x, "ag", 1)
    assert 0.0 < delay < 4.0
    # Failing so late that the backoff would end after the deadline: no retry, failed.
    h.now = commit_deadline - delay / 2
    effects = h.step(CallFailed("ag", Op.COMMIT, x, Cause.REPLY_LOST))
    assert h.s.phase is S.ABORTING and not retries(effects)
    # Failing earlier: retried, and the retry is armed before the deadline.
    early = committing(control_timeout_s=10.0, **config)
    effects = early.step(CallFailed("ag", Op.COMMIT, early.x, Cause.REPLY_LOST), 1.0)
    [timer] = of(effects, ArmTimer)
    assert timer.at < deadline_of(early, "ag")


def test_a_failed_attempt_forgets_the_backoff_of_its_other_calls() -> None:
    h = Harness(call_retries=3, prepare_timeout_s=50)
    h.start()
    x = h.x
    h.step(CallFailed("pol", Op.PREPARE, x, Cause.IO_ERROR), 1.0)
    assert h.s.attempt is not None and h.s.attempt.backing_off == {("pol", x)}
    effects = h.step(TimerDue(prepare_deadline_timer(x)), 50.0)
    assert h.s.phase is S.ABORTING
    assert CancelTimer(call_retry_timer(x, "pol")) in effects
    # A timer already on its way changes nothing.
    before = h.s
    effects = h.step(TimerDue(call_retry_timer(x, "pol")))
    assert h.s == before and [e.event for e in of(effects, Log)] == ["stale_timer"]


def test_the_jitter_is_deterministic_full_and_capped() -> None:
    config = QuiesceConfig(call_backoff_s=0.5, call_backoff_max_s=3.0)
    x = OpId(1, 7, 2)
    assert backoff_s(config, x, "ag", 1) == backoff_s(config, x, "ag", 1)
    assert backoff_s(config, x, "ag", 1) != backoff_s(config, x, "pol", 1)
    # Full jitter: uniform over [0, min(max, base * 2**(n-1))), spread over the whole range.
    for retry, cap in ((1, 0.5), (2, 1.0), (3, 2.0), (4, 3.0), (9, 3.0)):
        waits = [backoff_s(config, OpId(1, seq, 0), "ag", retry) for seq in range(400)]
        assert all(0.0 <= w < cap for w in waits)
        assert min(waits) < 0.05 * cap and max(waits) > 0.95 * cap


# Every fault of §8 (crashes included) on one rollout, with one retry per call: the
# explorer exhausts it and no property fails (the retries-off sizes are pinned in
# tests/models/implementation/test_protocol_model.py).
EVERY_FAULT_WITH_RETRIES: dict[str, Any] = dict(
    siblings=1,
    turns=1,
    attempts=1,
    triggers=1,
    optimizer_steps=0,
    weight_sync=0,
    train_switch=0,
    prepare_retries=2,
    faults=1,
    crashes=True,
    call_retries=1,
)


def test_the_model_with_retries_on_is_exhausted_without_violation() -> None:
    result = check(
        ProtocolModel(ProtocolParams(**EVERY_FAULT_WITH_RETRIES)), stop_on_violation=False
    )
    assert result.complete and not result.truncated
    assert result.violations == ()
    assert result.distinct_states == pins.PROTOCOL_RETRIES_ON_STATES
