"""The pure coordinator: phase order, the intent record, classification by cause, the
failure budget, same-id retries, the ambiguous-publish rule, ordered ids, metrics."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from quiesce.protocol import CAUSES, Cause, Coordinator, Disposition
from quiesce.protocol._config import QuiesceConfig
from quiesce.protocol._ids import OpId
from quiesce.protocol._messages import (
    AckReply,
    Capabilities,
    CommitReply,
    ErrorReply,
    PrepareReply,
    ResumeReply,
)
from quiesce.protocol.controller import (
    GroupOpened,
    OptimizerStepEnd,
    Outcome,
    PeriodElapsed,
    Stopped,
    TrainerBoundary,
)
from quiesce.protocol.controller.lowlevel import (
    ArmTimer,
    Call,
    CallFailed,
    ClearIntent,
    CloseAdmission,
    Discovered,
    Dispatch,
    InspectPublished,
    LocalDone,
    LocalFailed,
    LocalOp,
    Log,
    Metric,
    Op,
    OpenAdmission,
    PublishInspected,
    Quarantine,
    Recovered,
    Reply,
    RolloutFailed,
    SnapshotsListed,
    TimerDue,
    WriteIntent,
    prepare_deadline_timer,
    prepare_retry_timer,
    retry_timer,
)
from quiesce.protocol.machines import CheckpointState, PublishedState, deadline_timer

S = CheckpointState
ROLES = {"pol": "policy", "ag": "agent", "res": "resources"}
# A failed call fails the attempt at once: no retries inside it (those are the subject of
# `test_coordinator_retries.py`).
NO_RETRIES = {"call_retries": 0}


class Harness:
    """A coordinator with one participant per role, answered by hand."""

    def __init__(self, roles: Mapping[str, str] = ROLES, **config: Any) -> None:
        self.c = Coordinator(QuiesceConfig.load(config))
        self.s = self.c.initial(epoch=1)
        self.now = 0.0
        self.incarnation = dict.fromkeys(roles, "i1")
        caps = tuple(
            Capabilities(participant=n, incarnation="i1", role=r, recovery_mode="stateless")  # type: ignore[arg-type]
            for n, r in roles.items()
        )
        self.step(Discovered(caps))
        self.step(Recovered(None, 0))
        self.step(SnapshotsListed(None, ()))  # M9: an empty store, a bootstrap at step 0

    def step(self, event: Any, dt: float = 0.0) -> list[Any]:
        self.now += dt
        self.s, effects = self.c.step(self.s, self.now, event)
        return list(effects)

    @property
    def x(self) -> OpId:
        assert self.s.attempt is not None
        return self.s.attempt.op_id

    def calls(self) -> list[tuple[str, OpId]]:
        assert self.s.attempt is not None
        return sorted(self.s.attempt.waiting)

    def reply(self, name: str, op: Op, result: Any, op_id: OpId | None = None) -> list[Any]:
        return self.step(Reply(name, op, op_id or self.x, result), 1.0)

    def answer(self, name: str, op: Op, op_id: OpId | None = None, **fields: Any) -> list[Any]:
        x = op_id or self.x
        stamp = {"participant": name, "incarnation": self.incarnation[name], "op_id": x}
        if op is Op.PREPARE:
            result: Any = PrepareReply(**stamp, status=fields.pop("status", "ready"), **fields)
        elif op is Op.COMMIT:
            result = CommitReply(**stamp, status="committed", digest=f"d-{name}", **fields)
        else:
            result = ResumeReply(**stamp, retired=x)
        return self.reply(name, op, result, x)

    def answer_all(self, op: Op) -> list[Any]:
        """Answer every waiting call of the phase, role by role; the calls made, in order."""
        effects: list[Any] = []
        order: list[str] = []
        phase = self.s.attempt.phase if self.s.attempt else None
        while (
            self.s.attempt is not None
            and self.s.attempt.phase == phase
            and self.s.attempt.waiting
            and self.s.phase is not S.STOPPED
        ):
            names = sorted({n for n, _ in self.s.attempt.waiting})
            order.append(",".join(names))
            for name, op_id in sorted(self.s.attempt.waiting):
                effects += self.answer(name, op, op_id)
        return order, effects  # type: ignore[return-value]

    def start(self) -> list[Any]:
        effects = self.step(PeriodElapsed(), 1.0)
        effects += self.step(LocalDone(LocalOp.INTENT, self.x))
        return effects

    def to_publishing(self) -> None:
        self.start()
        self.answer_all(Op.PREPARE)
        self.answer_all(Op.COMMIT)
        self.step(LocalDone(LocalOp.CUT, self.x))
        self.step(LocalDone(LocalOp.VALIDATE, self.x))
        assert self.s.phase is S.PUBLISHING


def of(effects: list[Any], kind: type) -> list[Any]:
    return [e for e in effects if isinstance(e, kind)]


def outcome(effects: list[Any]) -> Outcome:
    [result] = of(effects, Outcome)
    return result


# ----------------------------------------------------------------------------- happy path


def test_happy_path_in_phase_order_with_the_intent_record() -> None:
    h = Harness()
    effects = h.step(PeriodElapsed(), 1.0)
    x = h.x
    assert h.s.phase is S.CLOSING_ADMISSION
    # The intent is written before any prepare is sent, with both holds taken.
    assert effects[0] == WriteIntent(x, "preparing")
    assert CloseAdmission("checkpoint") in effects
    assert not of(effects, Call)
    effects = h.step(LocalDone(LocalOp.INTENT, x))
    assert h.s.phase is S.PREPARING
    prepare_order, _ = h.answer_all(Op.PREPARE)
    assert prepare_order == ["pol", "ag", "res"]
    assert h.s.phase is S.COMMITTING
    commit_order, _ = h.answer_all(Op.COMMIT)
    assert commit_order == ["ag", "pol", "res"]
    assert h.s.phase is S.CAPTURING
    h.step(LocalDone(LocalOp.CUT, x))
    h.step(LocalDone(LocalOp.VALIDATE, x))
    effects = h.step(LocalDone(LocalOp.PUBLISH, x))
    assert h.s.phase is S.RELEASING
    assert effects[0] == WriteIntent(x, "published")
    release_order, effects = h.answer_all(Op.RESUME)
    assert release_order == ["res", "pol", "ag"]
    assert h.s.phase is S.IDLE
    # Cleared only after every participant was released; then admission reopens.
    assert effects.index(ClearIntent(x)) < effects.index(OpenAdmission("checkpoint"))
    result = outcome(effects)
    assert (result.result, result.consecutive_failures) == ("completed", 0)


def test_per_phase_deadlines() -> None:
    h = Harness(prepare_timeout_s=50, control_timeout_s=7, **NO_RETRIES)
    effects = h.start()
    closed_at = h.s.attempt.started_at
    assert ArmTimer(prepare_deadline_timer(h.x), closed_at + 50) in effects
    prepare_calls = of(effects, Call)
    h.now += 20  # later roles still share the same prepare deadline
    prepare_calls += of(h.answer("pol", Op.PREPARE), Call)
    prepare_calls += of(h.answer("ag", Op.PREPARE), Call)
    assert [c.deadline_at for c in prepare_calls] == [closed_at + 50] * 3
    effects = h.answer("res", Op.PREPARE)
    [commit] = of(effects, Call)
    assert commit.op is Op.COMMIT and commit.deadline_at == h.now + 7
    # An abort keeps the later of the remaining deadline and now + control_timeout_s.
    effects = h.step(CallFailed("ag", Op.COMMIT, h.x, Cause.TIMEOUT), 1.0)
    [abort] = of(effects, Call)
    assert abort.deadline_at == max(closed_at + 50, h.now + 7)


def test_metrics_add_up_and_admission_warning() -> None:
    h = Harness(snapshot_attempt_interval_s=2)
    h.to_publishing()
    h.step(LocalDone(LocalOp.PUBLISH, h.x))
    _, effects = h.answer_all(Op.RESUME)
    metrics = {(m.name, m.tags): m.value for m in of(effects, Metric)}
    total = metrics[("checkpoint.total_seconds", ())]
    phases = sum(v for (n, _), v in metrics.items() if n == "checkpoint.phase_seconds")
    assert phases == total > 0
    assert (
        metrics[("checkpoint.participant_seconds", ())]
        + metrics[("checkpoint.controller_seconds", ())]
        == total
    )
    assert metrics[("checkpoint.admission_closed_s", ())] > 2
    assert any(e.event == "admission_closed_too_long" for e in of(effects, Log))


# ----------------------------------------------------------------------------- causes


def test_the_cause_table_covers_every_cause_with_the_reasons_of_section_4() -> None:
    assert set(CAUSES) == set(Cause)
    reasons = {c: CAUSES[c].reason for c in Cause}
    assert {reasons[c] for c in (Cause.TIMEOUT, Cause.REQUEST_LOST, Cause.REPLY_LOST)} == {
        "timeout"
    }
    assert reasons[Cause.NOT_READY_UNTIL_DEADLINE] == "timeout"
    assert reasons[Cause.CHECKPOINT_CONFLICT] == "participant_error"
    for fatal in (Cause.WRONG_ID, Cause.TOPOLOGY_MISMATCH, Cause.INVARIANT_BROKEN):
        assert CAUSES[fatal].disposition is Disposition.FATAL
        assert reasons[fatal] == "invariant_error"


@pytest.mark.parametrize("cause", list(Cause), ids=[c.value for c in Cause])
def test_every_cause_is_classified_by_the_table(cause: Cause) -> None:
    h = Harness(**NO_RETRIES)
    h.start()
    h.answer_all(Op.PREPARE)
    name, op_id = h.calls()[0]
    effects = h.step(CallFailed(name, Op.COMMIT, op_id, cause), 1.0)
    kind = CAUSES[cause]
    if kind.disposition is Disposition.FATAL:
        assert h.s.phase is S.STOPPED
        assert of(effects, Stopped) == [Stopped("invariant_error", h.x, name, cause.value)]
        return
    # Retryable or skipped: never stopped, the same id is aborted on every attempted one.
    assert h.s.phase is S.ABORTING
    assert {c.participant for c in of(effects, Call)} == {"res"}
    assert all(c.op is Op.RESUME and c.op_id == h.x for c in of(effects, Call))
    _, effects = h.answer_all(Op.RESUME)
    result = outcome(effects)
    expected = "skipped" if kind.disposition is Disposition.SKIPPED else "failed"
    assert (result.result, result.reason, result.retryable) == (expected, kind.reason, True)
    counted = (result.consecutive_failures, result.consecutive_skips)
    assert counted == ((0, 1) if expected == "skipped" else (1, 0))


def test_a_refusal_is_classified_by_its_code_and_conflict_aborts_the_active_id_first() -> None:
    h = Harness()
    h.start()
    other = OpId(0, 9, 0)
    refusal = ErrorReply(
        participant="pol", incarnation="i1", code="checkpoint_conflict", message="", active_id=other
    )
    effects = h.reply("pol", Op.PREPARE, refusal)
    assert h.s.phase is S.ABORTING
    # S5: resume the id the participant is fenced to, before our own.
    calls = of(effects, Call)
    assert [(c.participant, c.op_id) for c in calls] == [("pol", other)]
    effects = h.answer("pol", Op.RESUME, other)
    assert [(c.participant, c.op_id) for c in of(effects, Call)] == [("pol", h.x)]


def refusal(code: str, **fields: Any) -> ErrorReply:
    return ErrorReply(participant="pol", incarnation="i1", code=code, message="", **fields)


def test_a_clearing_abort_refused_naming_another_id_resumes_that_one_on_its_retry() -> None:
    # S5 chained: `pol` reported X, but by the time the abort's resume(X) arrives it is
    # fenced to Z (a delayed call of another dead controller). The abort waits in
    # abort_pending; its retry resumes Z, not X again (`pol` does not hold X), then the
    # attempt's own id, and the attempt ends failed once, the run going on.
    h = Harness(**NO_RETRIES)
    h.start()
    x, z = OpId(0, 9, 0), OpId(0, 11, 0)
    h.reply("pol", Op.PREPARE, refusal("checkpoint_conflict", active_id=x))
    effects = h.reply("pol", Op.RESUME, refusal("checkpoint_conflict", active_id=z), x)
    assert h.s.phase is S.ABORT_PENDING and not of(effects, Call)
    effects = h.step(TimerDue(retry_timer(h.x)), 30.0)
    assert [(c.participant, c.op_id) for c in of(effects, Call)] == [("pol", z)]
    effects = h.answer("pol", Op.RESUME, z)
    assert [(c.participant, c.op_id) for c in of(effects, Call)] == [("pol", h.x)]
    _, effects = h.answer_all(Op.RESUME)
    result = outcome(effects)
    assert (result.result, result.reason, result.consecutive_failures) == (
        "failed",
        "participant_error",
        1,
    )
    assert h.s.phase is S.IDLE and h.s.gate.data == frozenset()


def test_a_clearing_abort_refused_as_stale_finds_the_id_retired_and_goes_on() -> None:
    # `pol` retired X meanwhile (its watermark is at or above X): the refusal as stale says
    # the id is retired, which is all the abort wanted of it. Not `invariant_error`: the
    # controller's own ids are not involved, and the run goes on.
    h = Harness(**NO_RETRIES)
    h.start()
    x = OpId(0, 9, 0)
    h.reply("pol", Op.PREPARE, refusal("checkpoint_conflict", active_id=x))
    effects = h.reply("pol", Op.RESUME, refusal("stale_checkpoint", high_watermark=x), x)
    assert [(c.participant, c.op_id) for c in of(effects, Call)] == [("pol", h.x)]
    _, effects = h.answer_all(Op.RESUME)
    assert (outcome(effects).result, outcome(effects).reason) == ("failed", "participant_error")
    assert h.s.phase is S.IDLE


def test_reply_naming_the_wrong_id_stops() -> None:
    h = Harness()
    h.start()
    wrong = PrepareReply(participant="pol", incarnation="i1", op_id=OpId(1, 77, 0), status="ready")
    effects = h.reply("pol", Op.PREPARE, wrong)
    assert h.s.phase is S.STOPPED
    assert outcome(effects).reason == "invariant_error"


def test_a_participant_restarted_in_its_turn_answers_its_prepare_with_its_new_incarnation() -> None:
    # S19 while its role is prepared: its fence is durable (§6), what it lost was running
    # work that nothing committed. Its call was in flight, so the new incarnation's reply
    # is that call's answer: the attempt goes on to the agent.
    h = Harness()
    h.start()
    x = h.x
    h.incarnation["pol"] = "i2"
    effects = h.answer("pol", Op.PREPARE)
    [agent] = of(effects, Call)
    assert (agent.participant, agent.op, agent.op_id) == ("ag", Op.PREPARE, x)
    assert h.s.phase is S.PREPARING and h.s.attempt.cause is None
    assert "participant_restarted" in [e.event for e in of(effects, Log)]


def test_a_participant_of_the_role_being_prepared_that_answered_and_restarted_is_asked_again() -> (
    None
):
    roles = {"pol": "policy", "ag1": "agent", "ag2": "agent", "res": "resources"}
    h = Harness(roles)
    h.start()
    x = h.x
    h.answer("pol", Op.PREPARE)
    h.answer("ag1", Op.PREPARE)  # ag2 still preparing: the agents' role is being called
    h.incarnation["ag1"] = "i2"
    ack = AckReply(participant="ag1", incarnation="i2", acknowledged=(), unknown=())
    effects = h.step(Reply("ag1", Op.ACK, None, ack))
    [again] = of(effects, Call)
    assert (again.participant, again.op, again.op_id) == ("ag1", Op.PREPARE, x)
    assert h.s.phase is S.PREPARING and h.s.attempt.cause is None
    assert h.calls() == [("ag1", x), ("ag2", x)]  # the role waits for both again
    h.answer("ag2", Op.PREPARE)
    h.answer("ag1", Op.PREPARE)
    assert h.calls() == [("res", x)]


def test_incarnation_change_after_commit_began_is_participant_restarted() -> None:
    h = Harness()
    h.start()
    h.answer_all(Op.PREPARE)
    assert h.s.phase is S.COMMITTING
    h.incarnation["ag"] = "i2"
    effects = h.answer("ag", Op.COMMIT)
    assert h.s.phase is S.ABORTING
    assert h.s.attempt.cause.cause is Cause.PARTICIPANT_RESTARTED
    assert any(c.op is Op.RESUME for c in of(effects, Call))


def test_a_restart_seen_before_the_attempt_touched_the_participant_does_not_fail_it() -> None:
    # The agent restarted before this attempt sent it anything (a background ACK's reply
    # says so while the policy is still preparing): it never held the id, so the attempt
    # goes on, and the agent is prepared in its turn.
    h = Harness()
    h.start()
    assert "ag" not in h.s.attempt.attempted
    h.incarnation["ag"] = "i2"
    ack = AckReply(participant="ag", incarnation="i2", acknowledged=(), unknown=())
    effects = h.step(Reply("ag", Op.ACK, None, ack))
    assert h.s.phase is S.PREPARING and h.s.attempt.cause is None
    # Noted (and the ACK, of no batch this controller sent, is stale news).
    assert [e.event for e in of(effects, Log)] == ["participant_restarted", "stale_reply"]
    h.answer_all(Op.PREPARE)
    assert h.s.phase is S.COMMITTING


def test_a_restart_that_stops_the_run_names_the_participant() -> None:
    h = Harness(max_consecutive_failures=0)
    h.start()
    h.answer_all(Op.PREPARE)
    h.answer("ag", Op.COMMIT)  # commit: agents, then the policy
    h.incarnation["pol"] = "i2"
    h.answer("pol", Op.COMMIT)
    _, effects = h.answer_all(Op.RESUME)
    [stopped] = of(effects, Stopped)
    assert (stopped.participant, stopped.cause) == ("pol", "participant_restarted")


def test_not_ready_is_asked_again_until_the_prepare_deadline() -> None:
    h = Harness(prepare_retry_interval_s=2)
    h.start()
    effects = h.answer("pol", Op.PREPARE, status="not_ready")
    assert ArmTimer(prepare_retry_timer(h.x), h.now + 2) in effects
    effects = h.step(TimerDue(prepare_retry_timer(h.x)), 2.0)
    assert [(c.participant, c.op) for c in of(effects, Call)] == [("pol", Op.PREPARE)]
    h.answer("pol", Op.PREPARE, status="not_ready")
    effects = h.step(TimerDue(prepare_deadline_timer(h.x)), 300.0)
    assert h.s.phase is S.ABORTING
    assert h.s.attempt.cause.cause is Cause.NOT_READY_UNTIL_DEADLINE


# ----------------------------------------------------------------------------- budget


def test_more_than_max_consecutive_failures_stops() -> None:
    h = Harness(max_consecutive_failures=2, **NO_RETRIES)
    for attempt in range(3):
        h.start()
        h.step(CallFailed("pol", Op.PREPARE, h.x, Cause.TIMEOUT))
        _, effects = h.answer_all(Op.RESUME)
        if attempt < 2:
            assert h.s.phase is S.IDLE
            assert outcome(effects).consecutive_failures == attempt + 1
    assert h.s.phase is S.STOPPED
    [stopped] = of(effects, Stopped)
    assert stopped.reason == "max_consecutive_failures"
    assert stopped.checkpoint_id is None  # aborted cleanly, nothing left for the next start
    # The last failure, by whom and why (it stopped the run only once its abort ended).
    assert (stopped.participant, stopped.cause) == ("pol", "timeout")


def test_skips_never_stop_and_warn_after_max_consecutive_skips() -> None:
    h = Harness(max_consecutive_failures=0, max_consecutive_skips=2)
    h.step(PeriodElapsed())  # the first is mutated (nothing published yet): run it to the end
    h.step(LocalDone(LocalOp.INTENT, h.x))
    h.answer_all(Op.PREPARE)
    h.answer_all(Op.COMMIT)
    h.step(LocalDone(LocalOp.CUT, h.x))
    h.step(LocalDone(LocalOp.VALIDATE, h.x))
    h.step(LocalDone(LocalOp.PUBLISH, h.x))
    h.answer_all(Op.RESUME)
    warnings = []
    for _ in range(3):
        effects = h.step(PeriodElapsed(), 1.0)
        assert outcome(effects).reason == "nothing_mutated"
        warnings += [e for e in of(effects, Log) if e.event == "consecutive_skips"]
    assert h.s.phase is S.IDLE and len(warnings) == 2


def test_skip_preconditions_before_touching_anything() -> None:
    h = Harness()
    h.s = h.c.step(h.s, 0.0, Recovered(None, None))[0]
    h.s = h.c.step(h.s, 0.0, SnapshotsListed(None, ()))[0]
    effects = h.step(PeriodElapsed())
    assert outcome(effects).reason == "no_trainer_anchor"
    assert not of(effects, WriteIntent)


def test_s9_trainer_step_between_commit_and_capture_skips_and_aborts_same_id() -> None:
    h = Harness()
    h.start()
    h.answer_all(Op.PREPARE)
    h.step(OptimizerStepEnd(1))
    h.answer_all(Op.COMMIT)
    assert h.s.phase is S.ABORTING
    _, effects = h.answer_all(Op.RESUME)
    assert (outcome(effects).result, outcome(effects).reason) == (
        "skipped",
        "trainer_state_changed",
    )


# ----------------------------------------------------------------------------- pending work


def test_pending_abort_is_retried_with_the_same_id_before_a_new_id() -> None:
    h = Harness(snapshot_attempt_interval_s=30, **NO_RETRIES)
    h.start()
    x = h.x
    h.step(CallFailed("pol", Op.PREPARE, x, Cause.IO_ERROR))
    effects = h.step(CallFailed("pol", Op.RESUME, x, Cause.TIMEOUT))
    assert h.s.phase is S.ABORT_PENDING
    assert ArmTimer(retry_timer(x), h.now + 30) in effects
    # A trigger mints nothing: it retries the abort of x.
    effects = h.step(PeriodElapsed(), 1.0)
    assert h.s.phase is S.ABORTING and h.x == x
    assert [(c.op, c.op_id) for c in of(effects, Call)] == [(Op.RESUME, x)]
    _, effects = h.answer_all(Op.RESUME)
    assert h.s.phase is S.IDLE and ClearIntent(x) in effects
    h.start()
    assert h.x > x


def test_pending_release_is_retried_by_the_retry_timer_with_the_same_id() -> None:
    h = Harness(**NO_RETRIES)
    h.to_publishing()
    x = h.x
    h.step(LocalDone(LocalOp.PUBLISH, x))
    effects = h.step(CallFailed("res", Op.RESUME, x, Cause.PARTICIPANT_ERROR))
    assert h.s.phase is S.RELEASE_PENDING
    assert outcome(effects).result == "failed"
    assert not of(effects, ClearIntent)
    effects = h.step(TimerDue(retry_timer(x)), 120.0)
    assert h.s.phase is S.RELEASING
    assert [(c.participant, c.op_id) for c in of(effects, Call)] == [("res", x)]
    _, effects = h.answer_all(Op.RESUME)
    assert outcome(effects).result == "completed" and ClearIntent(x) in effects


# ----------------------------------------------------------------------------- publishing


@pytest.mark.parametrize(
    ("verdict", "phase", "quarantined"),
    [
        ("verified", S.RELEASING, False),
        ("unverifiable", S.ABORTING, True),
        ("absent", S.ABORTING, False),
    ],
)
def test_ambiguous_publish_three_ways(verdict: str, phase: S, quarantined: bool) -> None:
    h = Harness()
    h.to_publishing()
    x = h.x
    effects = h.step(LocalFailed(LocalOp.PUBLISH, x, Cause.IO_ERROR))
    assert effects == [InspectPublished(x)] and h.s.phase is S.PUBLISHING
    effects = h.step(PublishInspected(x, PublishedState(verdict)))
    assert h.s.phase is phase
    assert (Quarantine(x) in effects) is quarantined
    assert all(c.op is Op.RESUME and c.op_id == x for c in of(effects, Call))


def test_restart_with_an_intent_record_finishes_that_id_on_every_participant() -> None:
    h = Harness()
    left = OpId(0, 4, 0)
    effects = h.step(Recovered(left, 0))
    assert effects[-1] == InspectPublished(left)
    effects = h.step(PublishInspected(left, PublishedState.ABSENT))
    calls = of(effects, Call)
    assert [(c.participant, c.op_id) for c in calls] == [("res", left)]
    _, effects = h.answer_all(Op.RESUME)
    assert ClearIntent(left) in effects and h.s.phase is S.IDLE


# ----------------------------------------------------------------------------- ids


def test_op_ids_are_ordered_and_never_reused() -> None:
    h = Harness(**NO_RETRIES)
    seen: list[OpId] = []
    for _ in range(3):
        h.start()
        seen.append(h.x)
        h.step(CallFailed("pol", Op.PREPARE, h.x, Cause.TIMEOUT))
        h.answer_all(Op.RESUME)
    h.step(TrainerBoundary(1))  # a skip also takes a fresh id
    assert seen == sorted(seen) and len(set(seen)) == 3
    restarted = Coordinator(QuiesceConfig()).initial(epoch=2)
    first = restarted.epoch, restarted.seq + 1
    assert OpId(*first, 0) > max(seen)


def test_stale_replies_and_timers_change_nothing() -> None:
    h = Harness()
    h.start()
    before = h.s
    effects = h.step(Reply("res", Op.PREPARE, h.x, None))
    assert h.s == before and [e.event for e in of(effects, Log)] == ["stale_reply"]
    effects = h.step(TimerDue(retry_timer(OpId(1, 99, 0))))
    assert h.s == before and [e.event for e in of(effects, Log)] == ["stale_timer"]


def test_controller_state_is_hashable_and_equal_runs_are_equal() -> None:
    first, second = Harness(), Harness()
    for h in (first, second):
        h.step(GroupOpened("g0", 2, "ag"))
        h.start()
    assert first.s == second.s and hash(first.s) == hash(second.s)


def test_a_refused_begin_is_retried_once_then_waits_for_the_group_deadline() -> None:
    # An agent that refuses every `begin` (a fence stuck closed, a broken server) must not
    # make the controller redispatch in a hot loop: one immediate retry, then the deadline.
    h = Harness()
    opened = h.step(GroupOpened("g", 1, "ag"))
    assert [(d.rollout_id, d.attempt) for d in opened if isinstance(d, Dispatch)] == [("g/0", 0)]
    retried = h.step(RolloutFailed("g/0", 0))
    assert [(d.rollout_id, d.attempt) for d in retried if isinstance(d, Dispatch)] == [("g/0", 1)]
    deferred = h.step(RolloutFailed("g/0", 1))
    assert not [e for e in deferred if isinstance(e, Dispatch)]
    assert any(isinstance(e, Log) and e.event == "redispatch_deferred" for e in deferred)
    expired = h.step(TimerDue(deadline_timer("g")), dt=1_000.0)
    assert [(d.rollout_id, d.attempt) for d in expired if isinstance(d, Dispatch)] == [("g/0", 2)]
    # The deadline gave the group a fresh immediate retry.
    again = h.step(RolloutFailed("g/0", 2))
    assert [(d.rollout_id, d.attempt) for d in again if isinstance(d, Dispatch)] == [("g/0", 3)]


def test_a_value_that_is_not_an_input_is_a_typed_error_naming_it_and_the_inputs() -> None:
    from quiesce.fsm import QuiesceError
    from quiesce.protocol.controller import UnknownInput
    from quiesce.protocol.controller.lowlevel import NewGroup

    coordinator = Coordinator(QuiesceConfig())
    state = coordinator.initial(epoch=1)
    with pytest.raises(UnknownInput) as raised:
        coordinator.step(state, 0.0, NewGroup("g0", 2))  # type: ignore[arg-type]
    error = raised.value
    assert isinstance(error, QuiesceError)
    assert "'NewGroup'" in str(error)
    assert {"GroupOpened", "Reply", "TimerDue"} <= set(error.accepted)
    assert "NewGroup" not in error.accepted


TWO_AGENTS = {"pol": "policy", "ag1": "agent", "ag2": "agent", "res": "resources"}


@pytest.mark.parametrize("pending", [S.ABORT_PENDING, S.RELEASE_PENDING], ids=lambda s: s.value)
def test_a_second_failed_call_of_a_role_in_a_pending_state_is_absorbed(pending: S) -> None:
    # Two agents abort (or release) concurrently: the first failure already moved M1 to the
    # pending state; the second used to be refused there (GuardRejected). It changes nothing
    # now, and the retry timer calls both agents again with the same id.
    h = Harness(TWO_AGENTS, **NO_RETRIES)
    if pending is S.ABORT_PENDING:
        h.start()
        h.answer_all(Op.PREPARE)
        h.step(CallFailed("ag1", Op.COMMIT, h.x, Cause.IO_ERROR), 1.0)
    else:
        h.to_publishing()
        h.step(LocalDone(LocalOp.PUBLISH, h.x))
    x = h.x
    for name, op_id in h.calls():  # resources, then the policy
        h.answer(name, Op.RESUME, op_id)
    for name, op_id in h.calls():
        h.answer(name, Op.RESUME, op_id)
    assert h.calls() == [("ag1", x), ("ag2", x)]
    h.step(CallFailed("ag1", Op.RESUME, x, Cause.IO_ERROR), 0.5)
    assert h.s.phase is pending
    before = h.s
    effects = h.step(CallFailed("ag2", Op.RESUME, x, Cause.IO_ERROR), 0.5)
    assert h.s.phase is pending and not of(effects, Outcome)
    assert h.s.attempt is not None and before.attempt is not None
    assert h.s.attempt.cause == before.attempt.cause
    effects = h.step(TimerDue(retry_timer(x)), 10.0)
    assert sorted((c.participant, c.op_id) for c in of(effects, Call)) == [("ag1", x), ("ag2", x)]


def test_a_failed_retire_is_sent_again_on_its_backoff_until_answered() -> None:
    from quiesce.protocol.controller.lowlevel import TimerKey, TimerKind

    h = Harness(call_retries=2, call_backoff_s=0.5, call_backoff_max_s=4.0)
    key = ("p4/0", 0)
    # No retire in flight yet: its failure is stale news, nothing is armed.
    effects = h.step(CallFailed("ag", Op.RETIRE, None, Cause.PARTICIPANT_ERROR, key), 1.0)
    assert of(effects, ArmTimer) == []
    # A retire in flight (a group's deadline expired): each transient failure backs off,
    # with full jitter, and the same retire goes again; the budget spent, it stops.
    h.step(GroupOpened("p4", 1, "ag"))
    effects = h.step(TimerDue(deadline_timer("p4")), 10_000.0)
    [retire] = [c for c in of(effects, Call) if c.op is Op.RETIRE]
    assert retire.payload == key
    timer_name = TimerKey(TimerKind.BACKGROUND_RETRY, "retire p4/0#0", "ag")
    for retry in (1, 2):
        effects = h.step(CallFailed("ag", Op.RETIRE, None, Cause.TIMEOUT, key), 1.0)
        [timer] = of(effects, ArmTimer)
        assert timer.name == timer_name
        assert h.now <= timer.at < h.now + 0.5 * 2 ** (retry - 1)
        effects = h.step(TimerDue(timer.name), timer.at - h.now)
        [again] = of(effects, Call)
        assert (again.participant, again.op, again.op_id, again.payload) == (
            "ag",
            Op.RETIRE,
            None,
            key,
        )
    effects = h.step(CallFailed("ag", Op.RETIRE, None, Cause.TIMEOUT, key), 1.0)
    assert of(effects, ArmTimer) == [] and of(effects, Call) == []


def test_a_restart_of_an_earlier_role_seen_while_preparing_fails_the_attempt() -> None:
    # The agent answered its prepare, the phase went on to the resources; then a reply
    # shows the agent restarted (a later role was called since: it may have lost what the
    # attempt counts on), so the attempt fails as S19 says, never retried inside it.
    h = Harness()
    h.start()
    h.answer("pol", Op.PREPARE)
    h.answer("ag", Op.PREPARE)
    assert [name for name, _ in h.calls()] == ["res"]
    h.incarnation["ag"] = "i2"
    ack = AckReply(participant="ag", incarnation="i2", acknowledged=(), unknown=())
    h.step(Reply("ag", Op.ACK, None, ack))
    assert h.s.phase is S.ABORTING
    assert h.s.attempt.cause.cause is Cause.PARTICIPANT_RESTARTED
