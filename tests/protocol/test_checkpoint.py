"""M1 checkpoint lifecycle at table level: every row fires as declared, every refusal."""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import Any

import pytest

from quiesce.fsm import Effect, TransitionNotAllowed, Value
from quiesce.protocol import Cause, classify
from quiesce.protocol._ids import OpId
from quiesce.protocol.machines import (
    CHECKPOINT,
    Attempt,
    CheckpointData,
    CheckpointInput,
    CheckpointState,
    Restart,
    Trigger,
)

S, I = CheckpointState, CheckpointInput  # noqa: E741  (h2's StreamInputs)
X = OpId(1, 1, 0)
ATTEMPT = Attempt(op_id=X, trainer_step=0, started_at=0.0, phase_started_at=0.0)
RETRYABLE = classify(Cause.TIMEOUT)
SKIP = classify(Cause.TRAINER_STATE_CHANGED)
FATAL = classify(Cause.WRONG_ID)
TOUCHED = Restart("agent-0", True, classify(Cause.PARTICIPANT_RESTARTED))
IN_TURN = Restart("agent-0", True, classify(Cause.PARTICIPANT_RESTARTED), in_turn=True)
UNTOUCHED = Restart("agent-0", False, classify(Cause.PARTICIPANT_RESTARTED))


def at(state: S, *, failures: int = 0, budget: int = 3, attempt: Attempt | None = ATTEMPT) -> Value:
    if state is S.IDLE:
        attempt = None
    return Value(state, CheckpointData(attempt=attempt, failures=failures, failure_budget=budget))


def names(effects: tuple[Any, ...]) -> list[str]:
    return [e.name for e in effects if isinstance(e, Effect)]


# (source, input, arg, data overrides) -> (target, effect names); one case per row and source.
CASES = [
    (
        S.IDLE,
        I.TRIGGER,
        Trigger(ATTEMPT, classify(Cause.NO_TRAINER_ANCHOR)),
        {},
        S.IDLE,
        ["outcome"],
    ),
    (S.IDLE, I.TRIGGER, Trigger(ATTEMPT), {}, S.CLOSING_ADMISSION, ["write_intent", "hold"]),
    (S.IDLE, I.RECOVERED, ATTEMPT, {}, S.PUBLISHING, ["hold", "inspect_published"]),
    (S.CLOSING_ADMISSION, I.INTENT_WRITTEN, None, {}, S.FLUSHING_ACKS, ["flush_acks"]),
    (
        S.FLUSHING_ACKS,
        I.ACKS_FLUSHED,
        None,
        {},
        S.PREPARING,
        ["arm_prepare_deadline", "call_prepare"],
    ),
    (S.PREPARING, I.ROLES_DONE, None, {}, S.COMMITTING, ["cancel_prepare_timers", "call_commit"]),
    (S.COMMITTING, I.ROLES_DONE, None, {}, S.CAPTURING, ["capture_cut"]),
    (S.CAPTURING, I.CUT_CAPTURED, None, {}, S.VALIDATING, ["validate"]),
    (S.VALIDATING, I.VALIDATED, None, {}, S.PUBLISHING, ["publish"]),
    (S.PUBLISHING, I.PUBLISHED, None, {}, S.RELEASING, ["update_intent", "call_release"]),
    (S.RELEASING, I.ROLES_DONE, None, {}, S.IDLE, ["clear_intent", "drop_holds", "outcome"]),
    (S.PUBLISHING, I.PUBLISH_FAILED, None, {}, S.PUBLISHING, ["inspect_published"]),
    (S.PUBLISHING, I.INSPECTED_VERIFIED, None, {}, S.RELEASING, ["update_intent", "call_release"]),
    (S.PUBLISHING, I.INSPECTED_UNVERIFIABLE, None, {}, S.ABORTING, ["quarantine", "call_abort"]),
    (S.PUBLISHING, I.INSPECTED_ABSENT, None, {}, S.ABORTING, ["call_abort"]),
    *[
        (s, I.FAILED, FATAL, {}, S.STOPPED, ["outcome", "stop"])
        for s in CheckpointState
        if s not in (S.IDLE, S.STOPPED)
    ],
    *[
        (s, I.FAILED, RETRYABLE, {"failures": 3}, S.STOPPED, ["clear_intent", "outcome", "stop"])
        for s in (S.CLOSING_ADMISSION, S.FLUSHING_ACKS)
    ],
    *[
        (s, I.FAILED, RETRYABLE, {}, S.IDLE, ["clear_intent", "drop_holds", "outcome"])
        for s in (S.CLOSING_ADMISSION, S.FLUSHING_ACKS)
    ],
    *[
        (s, I.FAILED, RETRYABLE, {}, S.ABORTING, ["cancel_prepare_timers", "call_abort"])
        for s in (S.PREPARING, S.COMMITTING, S.CAPTURING, S.VALIDATING)
    ],
    # S19: a restart matters only if the attempt touched that participant: while its role
    # is prepared it is prepared again; otherwise the attempt fails.
    (S.PREPARING, I.RESTARTED, IN_TURN, {}, S.PREPARING, ["call_prepare_again"]),
    *[
        (s, I.RESTARTED, TOUCHED, {}, S.ABORTING, ["cancel_prepare_timers", "call_abort"])
        for s in (S.PREPARING, S.COMMITTING, S.CAPTURING, S.VALIDATING)
    ],
    *[
        (s, I.RESTARTED, UNTOUCHED, {}, s, [])
        for s in (S.PREPARING, S.COMMITTING, S.CAPTURING, S.VALIDATING)
    ],
    (
        S.ABORTING,
        I.ROLES_DONE,
        None,
        {"failures": 4},
        S.STOPPED,
        ["discard_staging", "clear_intent", "outcome", "stop"],
    ),
    (
        S.ABORTING,
        I.ROLES_DONE,
        None,
        {},
        S.IDLE,
        ["discard_staging", "clear_intent", "drop_holds", "outcome"],
    ),
    (S.ABORTING, I.FAILED, RETRYABLE, {"failures": 4}, S.STOPPED, ["outcome", "stop"]),
    (S.ABORTING, I.FAILED, RETRYABLE, {}, S.ABORT_PENDING, ["outcome", "arm_retry"]),
    (S.RELEASING, I.FAILED, RETRYABLE, {}, S.RELEASE_PENDING, ["outcome", "arm_retry"]),
    (S.ABORT_PENDING, I.RETRY_DUE, None, {}, S.ABORTING, ["call_abort"]),
    (S.ABORT_PENDING, I.TRIGGER, Trigger(ATTEMPT), {}, S.ABORTING, ["cancel_retry", "call_abort"]),
    (S.RELEASE_PENDING, I.RETRY_DUE, None, {}, S.RELEASING, ["call_release"]),
    (
        S.RELEASE_PENDING,
        I.TRIGGER,
        Trigger(ATTEMPT),
        {},
        S.RELEASING,
        ["cancel_retry", "call_release"],
    ),
]


@pytest.mark.parametrize(
    ("source", "event", "arg", "data", "target", "effects"),
    CASES,
    ids=[f"{c[0].value}-{c[1].value}-{c[4].value}-{i}" for i, c in enumerate(CASES)],
)
def test_every_row(source, event, arg, data, target, effects) -> None:
    value = at(source, **data)
    after, produced = CHECKPOINT.step(value, event, arg)
    assert after.state is target
    assert names(produced) == effects
    assert CHECKPOINT.check_invariants(after) == []


def test_every_row_and_source_is_covered_by_a_case() -> None:
    covered = {(c[0], c[1]) for c in CASES}
    declared = {(s, r.input) for r in CHECKPOINT.rows for s in r.sources}
    assert declared == covered


def test_every_pair_is_mapped_ignored_or_refused_and_refusals_change_nothing() -> None:
    for state, event in itertools.product(CheckpointState, CheckpointInput):
        value = at(state)
        disposition = CHECKPOINT.disposition(state, event)
        if disposition == "forbidden":
            with pytest.raises(TransitionNotAllowed):
                CHECKPOINT.step(value, event, RETRYABLE)
        elif disposition == "ignored":
            assert CHECKPOINT.step(value, event, Trigger(ATTEMPT)) == (value, ())


def test_no_new_id_while_pending_a_trigger_retries_the_same_attempt() -> None:
    for pending in (S.ABORT_PENDING, S.RELEASE_PENDING):
        value = at(pending)
        fresh = replace(ATTEMPT, op_id=OpId(1, 2, 0))
        after, _ = CHECKPOINT.step(value, I.TRIGGER, Trigger(fresh))
        assert after.data.attempt is not None and after.data.attempt.op_id == X


def test_a_busy_attempt_coalesces_triggers() -> None:
    value = at(S.COMMITTING)
    assert CHECKPOINT.step(value, I.TRIGGER, Trigger(ATTEMPT)) == (value, ())


def test_stopped_is_final_and_refuses_progress() -> None:
    value = at(S.STOPPED)
    assert S.STOPPED in CHECKPOINT.finals
    with pytest.raises(TransitionNotAllowed):
        CHECKPOINT.step(value, I.ROLES_DONE)


def test_counters_failures_count_skips_count_separately_completion_resets() -> None:
    value = at(S.COMMITTING, failures=1)
    after, _ = CHECKPOINT.step(value, I.FAILED, RETRYABLE)
    assert after.data.failures == 2 and after.data.attempt.cause == RETRYABLE
    skipped, _ = CHECKPOINT.step(at(S.CAPTURING, failures=2), I.FAILED, SKIP)
    assert skipped.data.failures == 2 and skipped.data.skips == 1
    done, _ = CHECKPOINT.step(replace(at(S.RELEASING), data=replace(after.data)), I.ROLES_DONE)
    assert done.data.failures == 0 and done.data.skips == 0 and done.data.attempt is None


def test_the_first_cause_is_kept_when_the_abort_fails_too() -> None:
    aborting, _ = CHECKPOINT.step(at(S.COMMITTING), I.FAILED, classify(Cause.COMMIT_FAILED))
    pending, _ = CHECKPOINT.step(aborting, I.FAILED, RETRYABLE)
    assert pending.state is S.ABORT_PENDING
    assert pending.data.attempt.cause.cause is Cause.COMMIT_FAILED
    assert pending.data.failures == 1


def test_an_attempt_counts_once_however_often_its_abort_fails() -> None:
    # §4: max_consecutive_failures counts attempts; the abort's retry timer is its own.
    aborting, _ = CHECKPOINT.step(at(S.COMMITTING, failures=2), I.FAILED, RETRYABLE)
    assert aborting.data.failures == 3  # the budget, not past it
    for _ in range(3):
        pending, _ = CHECKPOINT.step(aborting, I.FAILED, RETRYABLE)
        assert pending.state is S.ABORT_PENDING and pending.data.failures == 3
        aborting, _ = CHECKPOINT.step(pending, I.RETRY_DUE)
    done, _ = CHECKPOINT.step(aborting, I.ROLES_DONE)
    assert done.state is S.IDLE and done.data.failures == 3


def test_the_attempt_past_the_budget_stops_when_its_abort_fails() -> None:
    aborting, _ = CHECKPOINT.step(at(S.COMMITTING, failures=3), I.FAILED, RETRYABLE)
    stopped, _ = CHECKPOINT.step(aborting, I.FAILED, RETRYABLE)
    assert stopped.state is S.STOPPED and stopped.data.failures == 4


def test_a_failing_release_counts_nothing_a_published_attempt_has_not_failed() -> None:
    published = replace(ATTEMPT, published=True)
    releasing = at(S.RELEASING, failures=3, attempt=published)
    pending, _ = CHECKPOINT.step(releasing, I.FAILED, RETRYABLE)
    assert pending.state is S.RELEASE_PENDING and pending.data.failures == 3
    assert pending.data.attempt.cause == RETRYABLE  # the outcome's reason


def test_fatal_keeps_the_attempt_for_the_intent_record() -> None:
    stopped, _ = CHECKPOINT.step(at(S.PREPARING), I.FAILED, FATAL)
    assert stopped.state is S.STOPPED and stopped.data.attempt.op_id == X


def test_dropping_an_effect_name_is_a_mutant_that_keeps_the_rest() -> None:
    index = next(i for i, r in enumerate(CHECKPOINT.rows) if "write_intent" in r.effects)
    mutant = CHECKPOINT.without_effect(index, "write_intent")
    _, effects = mutant.step(at(S.IDLE), I.TRIGGER, Trigger(ATTEMPT))
    assert names(effects) == ["hold"]


def test_a_restart_that_fails_the_attempt_counts_once_and_a_stop_names_the_participant() -> None:
    # One failure more than the budget allows: the attempt aborts, then stops, and the stop
    # names who restarted (§4: the reason names the participant of the last failure).
    # (Once a commit may have begun, a restart in turn fails the attempt all the same.)
    after, _ = CHECKPOINT.step(at(S.COMMITTING, failures=3), I.RESTARTED, IN_TURN)
    assert after.state is S.ABORTING and after.data.failures == 4
    assert after.data.attempt is not None and after.data.attempt.failed_by == "agent-0"
    # Within the budget, nobody is named.
    after, _ = CHECKPOINT.step(at(S.COMMITTING), I.RESTARTED, TOUCHED)
    assert after.data.failures == 1 and after.data.attempt.failed_by is None
    # A restart the attempt did not touch changes nothing.
    value = at(S.COMMITTING)
    assert CHECKPOINT.step(value, I.RESTARTED, UNTOUCHED) == (value, ())
