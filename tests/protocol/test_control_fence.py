"""M2 control fence: every row and every refusal, driven by input types only (h11 style)."""

from __future__ import annotations

from typing import Any

import pytest

from quiesce.check import arg_examples
from quiesce.fsm import Value
from quiesce.protocol._errors import CheckpointConflict, InvalidPhase, StaleCheckpoint
from quiesce.protocol._ids import OpId
from quiesce.protocol.machines import (
    CONTROL_FENCE,
    FenceCall,
    FenceData,
    FenceInput,
    FenceJoin,
    FenceLateOutcome,
    FenceOp,
    FenceRefusal,
    FenceReplay,
    FenceRetire,
    FenceStart,
    FenceState,
)
from quiesce.protocol.machines import CONTROL_FENCE as FENCE

ARG_EXAMPLES = arg_examples(CONTROL_FENCE)

I, S, Op = FenceInput, FenceState, FenceOp  # noqa: E741
X, Y, OLD = OpId(1, 5, 10), OpId(1, 6, 11), OpId(1, 4, 9)
R = OpId(2, 1, 10, "rs")

# The op each input names (a call's op is the record's key together with its id).
OP_OF = {
    I.RECV_PREPARE: Op.PREPARE,
    I.PREPARE_READY: Op.PREPARE,
    I.PREPARE_NOT_READY: Op.PREPARE,
    I.RECV_COMMIT: Op.COMMIT,
    I.COMMIT_DONE: Op.COMMIT,
    I.COMMIT_FAILED: Op.COMMIT,
    I.RECV_RESUME: Op.RESUME,
    I.RECV_RESTORE: Op.RESTORE,
    I.RESTORE_DONE: Op.RESTORE,
    I.RESTORE_FAILED: Op.RESTORE,
    I.RECV_DISCARD: Op.DISCARD,
    I.RECV_STATUS: Op.STATUS,
}


def fire(value: Value[Any, Any], input: FenceInput, op_id: OpId | None, result: Any = None) -> Any:
    return FENCE.step(value, input, FenceCall(OP_OF[input], op_id, result))


def run(*steps: tuple[FenceInput, OpId | None, Any]) -> Value[FenceState, FenceData]:
    value = FENCE.start()
    for input, op_id, result in steps:
        value, _ = fire(value, input, op_id, result)
    return value


def preparing(op_id: OpId = X) -> Value[FenceState, FenceData]:
    return run((I.RECV_PREPARE, op_id, None))


def prepared(op_id: OpId = X) -> Value[FenceState, FenceData]:
    return run((I.RECV_PREPARE, op_id, None), (I.PREPARE_READY, op_id, "ready"))


def committed(op_id: OpId = X) -> Value[FenceState, FenceData]:
    value = prepared(op_id)
    for input, result in ((I.RECV_COMMIT, None), (I.COMMIT_DONE, "artifact")):
        value, _ = fire(value, input, op_id, result)
    return value


def retired(op_id: OpId = X) -> Value[FenceState, FenceData]:
    value, _ = fire(committed(op_id), I.RECV_RESUME, op_id, "resumed")
    return value


def restoring(op_id: OpId = R) -> Value[FenceState, FenceData]:
    return run((I.RECV_RESTORE, op_id, None))


def restored(op_id: OpId = R) -> Value[FenceState, FenceData]:
    return run((I.RECV_RESTORE, op_id, None), (I.RESTORE_DONE, op_id, "installed"))


def restore_failed(op_id: OpId = R) -> Value[FenceState, FenceData]:
    return run((I.RECV_RESTORE, op_id, None), (I.RESTORE_FAILED, op_id, "bad digest"))


def only(effects: tuple[Any, ...], kind: type) -> Any:
    assert len(effects) == 1 and isinstance(effects[0], kind), effects
    return effects[0]


# ------------------------------------------------------------------------ prepare


def test_prepare_from_idle_starts_and_activates_the_id() -> None:
    value, effects = fire(FENCE.start(), I.RECV_PREPARE, X)
    assert value.state is S.PREPARING and value.data.active == X
    assert only(effects, FenceStart) == FenceStart(Op.PREPARE, X)


def test_ready_records_the_result_and_a_repeat_is_replayed() -> None:
    value, effects = fire(preparing(), I.PREPARE_READY, X, "ready")
    assert value.state is S.PREPARED
    assert only(effects, FenceReplay).result == "ready"
    assert value.data.result(X, Op.PREPARE) == "ready"
    again, effects = fire(value, I.RECV_PREPARE, X)
    assert again == value
    assert only(effects, FenceReplay) == FenceReplay(Op.PREPARE, X, "ready")


@pytest.mark.parametrize(
    "make",
    [
        committed,
        lambda: run(
            (I.RECV_PREPARE, X, None), (I.PREPARE_READY, X, "ready"), (I.RECV_COMMIT, X, None)
        ),
    ],
)
def test_a_recorded_prepare_is_replayed_later_in_the_same_checkpoint(make: Any) -> None:
    value = make()
    after, effects = fire(value, I.RECV_PREPARE, X)
    assert after == value and only(effects, FenceReplay).result == "ready"


def test_not_ready_holds_preparing_records_nothing_and_the_retry_runs_again() -> None:
    value, effects = fire(preparing(), I.PREPARE_NOT_READY, X, "blocked")
    assert value.state is S.PREPARING
    assert only(effects, FenceReplay).result == "blocked"  # answered...
    assert value.data.recorded == ()  # ...but never recorded
    again, effects = fire(value, I.RECV_PREPARE, X)
    assert again.state is S.PREPARING
    assert only(effects, FenceStart) == FenceStart(Op.PREPARE, X)


def test_prepare_in_a_restore_state_with_the_same_id_is_invalid_phase() -> None:
    for value in (restoring(X), restored(X), restore_failed(X)):
        after, effects = fire(value, I.RECV_PREPARE, X)
        refusal = only(effects, FenceRefusal)
        assert after == value and refusal.code == "invalid_phase"
        assert isinstance(refusal.error(), InvalidPhase)


# ------------------------------------------------------------------------ refusals


@pytest.mark.parametrize(
    "input", [I.RECV_PREPARE, I.RECV_COMMIT, I.RECV_RESUME, I.RECV_RESTORE, I.RECV_DISCARD]
)
@pytest.mark.parametrize(
    "make", [preparing, prepared, committed, restoring, restored, restore_failed]
)
def test_another_id_while_one_is_active_conflicts_carrying_the_active_id(
    input: FenceInput, make: Any
) -> None:
    value = make()
    other = OpId(9, 9, 99)
    after, effects = fire(value, input, other)
    refusal = only(effects, FenceRefusal)
    assert after == value
    assert refusal.code == "checkpoint_conflict" and refusal.active_id == value.data.active
    error = refusal.error()
    assert isinstance(error, CheckpointConflict)
    assert error.active_id == str(value.data.active) and error.requested_id == str(other)


@pytest.mark.parametrize("input", [I.RECV_PREPARE, I.RECV_COMMIT, I.RECV_RESTORE, I.RECV_DISCARD])
@pytest.mark.parametrize("op_id", [X, OLD])
def test_an_id_at_or_below_the_watermark_is_stale(input: FenceInput, op_id: OpId) -> None:
    value = retired(X)
    after, effects = fire(value, input, op_id)
    refusal = only(effects, FenceRefusal)
    assert after == value and refusal.code == "stale_checkpoint"
    error = refusal.error()
    assert isinstance(error, StaleCheckpoint) and error.high_watermark == str(X)


def test_stale_wins_over_conflict_while_a_newer_id_is_active() -> None:
    value, _ = fire(retired(X), I.RECV_PREPARE, Y)
    _, effects = fire(value, I.RECV_PREPARE, X)
    assert only(effects, FenceRefusal).code == "stale_checkpoint"


def test_s15_delayed_prepare_after_its_resume_is_stale_and_admission_stays_open() -> None:
    value, _ = fire(FENCE.start(), I.RECV_RESUME, X, "resumed")  # resume overtook prepare
    assert value.state is S.IDLE and value.data.high_watermark == X
    after, effects = fire(value, I.RECV_PREPARE, X)
    assert after.state is S.IDLE  # admission is not closed again
    assert only(effects, FenceRefusal).code == "stale_checkpoint"


# ------------------------------------------------------------------------ commit


def test_commit_runs_from_prepared_and_done_records_it() -> None:
    value, effects = fire(prepared(), I.RECV_COMMIT, X)
    assert value.state is S.COMMITTING
    assert only(effects, FenceStart) == FenceStart(Op.COMMIT, X)
    value, effects = fire(value, I.COMMIT_DONE, X, "artifact")
    assert value.state is S.COMMITTED_PAUSED
    assert value.data.result(X, Op.COMMIT) == "artifact"
    again, effects = fire(value, I.RECV_COMMIT, X)
    assert again == value and only(effects, FenceReplay).result == "artifact"


def test_failed_commit_returns_to_prepared_records_nothing_and_runs_again() -> None:
    value, _ = fire(prepared(), I.RECV_COMMIT, X)
    value, effects = fire(value, I.COMMIT_FAILED, X, "disk full")
    assert value.state is S.PREPARED
    assert value.data.result(X, Op.COMMIT) is None
    assert only(effects, FenceReplay).result == "disk full"
    value, effects = fire(value, I.RECV_COMMIT, X)
    assert value.state is S.COMMITTING and only(effects, FenceStart).op is Op.COMMIT


def test_a_concurrent_duplicate_commit_joins_the_first() -> None:
    value, _ = fire(prepared(), I.RECV_COMMIT, X)
    after, effects = fire(value, I.RECV_COMMIT, X)
    assert after == value and only(effects, FenceJoin) == FenceJoin(Op.COMMIT, X)


@pytest.mark.parametrize("make", [FENCE.start, preparing, restoring, restored, restore_failed])
def test_commit_outside_prepared_is_invalid_phase(make: Any) -> None:
    value = make()
    op_id = value.data.active or X
    after, effects = fire(value, I.RECV_COMMIT, op_id)
    assert after == value and only(effects, FenceRefusal).code == "invalid_phase"


# ------------------------------------------------------------------------ resume


@pytest.mark.parametrize(
    "make", [preparing, prepared, committed, restoring, restored, restore_failed]
)
def test_resume_of_the_active_id_goes_idle_at_once_and_retires_it(make: Any) -> None:
    value = make()
    active = value.data.active
    after, effects = fire(value, I.RECV_RESUME, active, "resumed")
    assert after.state is S.IDLE and after.data.active is None
    assert after.data.high_watermark == active
    assert after.data.recorded == ((active, Op.RESUME, "resumed"),)
    assert only(effects, FenceRetire) == FenceRetire(active, "resumed")


def test_resume_of_an_unknown_id_above_the_watermark_retires_it() -> None:
    value, effects = fire(retired(X), I.RECV_RESUME, Y, "resumed")
    assert value.state is S.IDLE and value.data.high_watermark == Y
    assert isinstance(only(effects, FenceRetire), FenceRetire)


def test_the_final_resume_of_the_watermark_is_replayed_and_older_ones_are_stale() -> None:
    value = retired(X)
    after, effects = fire(value, I.RECV_RESUME, X)
    assert after == value and only(effects, FenceReplay) == FenceReplay(Op.RESUME, X, "resumed")
    _, effects = fire(value, I.RECV_RESUME, OLD)
    assert only(effects, FenceRefusal).code == "stale_checkpoint"


def test_a_new_id_forgets_every_record_but_the_watermarks_resume() -> None:
    value, _ = fire(retired(X), I.RECV_PREPARE, Y)
    assert value.data.recorded == ((X, Op.RESUME, "resumed"),)
    value, _ = fire(value, I.PREPARE_READY, Y, "ready-y")
    value, _ = fire(value, I.RECV_RESUME, Y, "resumed-y")
    assert value.data.recorded == ((Y, Op.RESUME, "resumed-y"),)


def test_an_outcome_overtaken_by_a_resume_is_dropped() -> None:
    value, _ = fire(prepared(), I.RECV_COMMIT, X)
    value, _ = fire(value, I.RECV_RESUME, X, "aborted")
    for input in (I.COMMIT_DONE, I.COMMIT_FAILED, I.PREPARE_READY, I.RESTORE_DONE):
        after, effects = fire(value, input, X, "late")
        assert after == value
        assert only(effects, FenceLateOutcome) == FenceLateOutcome(OP_OF[input], X)


# ------------------------------------------------------------------------ restore


def test_restore_runs_under_its_own_id_and_done_records_it() -> None:
    value, effects = fire(FENCE.start(), I.RECV_RESTORE, R)
    assert value.state is S.RESTORING and value.data.active == R
    assert only(effects, FenceStart) == FenceStart(Op.RESTORE, R)
    value, _ = fire(value, I.RESTORE_DONE, R, "installed")
    assert value.state is S.RESTORED_PAUSED
    again, effects = fire(value, I.RECV_RESTORE, R)
    assert again == value and only(effects, FenceReplay).result == "installed"


def test_failed_restore_pauses_and_the_same_id_runs_again() -> None:
    value = restore_failed()
    assert value.state is S.RESTORE_FAILED_PAUSED and value.data.recorded == ()
    value, effects = fire(value, I.RECV_RESTORE, R)
    assert value.state is S.RESTORING and only(effects, FenceStart).op is Op.RESTORE


def test_a_concurrent_duplicate_restore_joins_the_first() -> None:
    after, effects = fire(restoring(), I.RECV_RESTORE, R)
    assert after.state is S.RESTORING and only(effects, FenceJoin).op is Op.RESTORE


@pytest.mark.parametrize("make", [preparing, prepared, committed])
def test_restore_with_the_active_checkpoint_id_is_invalid_phase(make: Any) -> None:
    value = make()
    _, effects = fire(value, I.RECV_RESTORE, X)
    assert only(effects, FenceRefusal).code == "invalid_phase"


# ------------------------------------------------------------------------ discard, status


def test_discard_holds_restored_paused_under_the_same_id_only() -> None:
    value = restored()
    after, effects = fire(value, I.RECV_DISCARD, R)
    assert after == value and only(effects, FenceStart) == FenceStart(Op.DISCARD, R)
    for other in (FENCE.start(), restoring(), restore_failed(), prepared(R)):
        _, effects = fire(other, I.RECV_DISCARD, R)
        assert only(effects, FenceRefusal).code == "invalid_phase", other


def test_status_holds_every_state() -> None:
    for make in (FENCE.start, preparing, prepared, committed, restoring, restored, restore_failed):
        value = make()
        after, effects = FENCE.step(value, I.RECV_STATUS, FenceCall(Op.STATUS))
        assert after == value and only(effects, FenceStart).op is Op.STATUS


# ------------------------------------------------------------------------ the table itself


def test_every_request_pair_is_mapped_so_no_refusal_escapes_as_an_exception() -> None:
    for state in FenceState:
        for input in FenceInput:
            assert FENCE.disposition(state, input) == "mapped", (state, input)


def test_invariants_hold_along_a_full_checkpoint_and_restore() -> None:
    value = FENCE.start()
    steps = [
        (I.RECV_PREPARE, X, None),
        (I.PREPARE_NOT_READY, X, "blocked"),
        (I.RECV_PREPARE, X, None),
        (I.PREPARE_READY, X, "ready"),
        (I.RECV_COMMIT, X, None),
        (I.COMMIT_DONE, X, "artifact"),
        (I.RECV_RESUME, X, "resumed"),
        (I.RECV_RESTORE, R, None),
        (I.RESTORE_FAILED, R, "bad"),
        (I.RECV_RESTORE, R, None),
        (I.RESTORE_DONE, R, "installed"),
        (I.RECV_DISCARD, R, None),
        (I.RECV_RESUME, R, "resumed"),
    ]
    for input, op_id, result in steps:
        value, _ = fire(value, input, op_id, result)
        assert FENCE.check_invariants(value) == [], (input, value)
    assert value.state is S.IDLE and value.data.high_watermark == R


def test_arg_examples_name_every_input_with_its_own_op() -> None:
    assert set(ARG_EXAMPLES) == set(FenceInput)
    assert all(call.op is OP_OF[input] for input, calls in ARG_EXAMPLES.items() for call in calls)
