"""PROTOCOL.md §7: one test per failure scenario S1-S19, each asserting the fixed behaviour,
through the coordinator and the participant states composed by `_system.System`."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Any

import pytest

from quiesce.fsm import Value
from quiesce.models import System, SystemState
from quiesce.protocol import UnknownRecoveryMode, UnmanagedMultiProcess, new_participant
from quiesce.protocol._causes import Cause
from quiesce.protocol._config import QuiesceConfig
from quiesce.protocol._ids import OpId
from quiesce.protocol._messages import (
    BoundaryRequest,
    Continuation,
    ControlRequest,
    ErrorReply,
    FinishRequest,
    RestoreReply,
    RetireRequest,
)
from quiesce.protocol.controller import (
    Call,
    Coordinator,
    GroupOpened,
    Op,
    OptimizerStepEnd,
    Outcome,
    PeriodElapsed,
    Redispatch,
    RestoreOutcome,
    Stopped,
    TimerDue,
    TrainSwitchBegin,
    TrainSwitchEnd,
    VerdictAction,
    judge_restore,
    plan_discards,
    prepare_deadline_timer,
    prepare_retry_timer,
    restore_retry_timer,
)
from quiesce.protocol.machines import (
    RESTORE,
    CheckpointState,
    ExecState,
    FenceState,
    RestoreState,
    deadline_timer,
)
from quiesce.protocol.participant import handle

S = CheckpointState


def make(**agent: Any) -> tuple[System, SystemState]:
    # Each scenario injects one failure and watches the attempt handle it: no retries inside
    # the attempt (§4), which `test_coordinator_retries.py` covers.
    config = QuiesceConfig(max_consecutive_failures=5, call_retries=0)
    system = System(Coordinator(config))
    participants = [
        new_participant({"name": "policy", "role": "policy"}, "p1"),
        new_participant({"name": "agent", "role": "agent", **agent}, "a1"),
        new_participant(
            {"name": "resources", "role": "resources", "recovery_mode": "stateless"}, "r1"
        ),
    ]
    state, _ = system.start(participants)
    return system, state


def drain(system: System, state: SystemState, limit: int = 100) -> tuple[SystemState, list[Any]]:
    """Deliver every message, oldest first, until none is left."""
    effects: list[Any] = []
    for _ in range(limit):
        if not state.messages:
            return state, effects
        state, more = system.deliver(state, 0)
        effects.extend(more)
    raise AssertionError("messages never settled")


def outcomes(effects: list[Any]) -> list[tuple[str, str]]:
    return [(e.result, e.reason) for e in effects if isinstance(e, Outcome)]


def fence(state: SystemState, name: str) -> FenceState:
    return state.participant(name).fence.state


def park_all(system: System, state: SystemState, keys: list[str]) -> SystemState:
    for rollout in keys:
        state, _, _ = system.turn(state, "agent", rollout, 0, 1)
    return state


def checkpoint_with_parked(system: System, state: SystemState) -> SystemState:
    """Open one group of two, trigger, get the agent to park both at a boundary."""
    state, _ = system.input(state, GroupOpened("g0", 2, "agent"))
    state, _ = system.input(state, PeriodElapsed(), now=1.0)
    state, _ = drain(system, state)  # policy ready, agent not ready (both running)
    state = park_all(system, state, ["g0/0", "g0/1"])
    state, _ = system.fire_timer(state, prepare_retry_timer(state.controller.attempt.op_id))
    while state.controller.phase is S.PREPARING:
        state, _ = system.deliver(state, 0)
    return state


def test_s1_a_deadline_cannot_expire_while_the_checkpoint_holds_the_registry() -> None:
    system, state = make()
    state = checkpoint_with_parked(system, state)
    assert state.controller.phase is S.COMMITTING
    assert deadline_timer("g0") not in dict(state.timers)  # cancelled at suspend
    # Even a timer already on its way expires nothing while suspended.
    state, effects = system.input(state, TimerDue(deadline_timer("g0")), now=10_000.0)
    assert not any(isinstance(e, Redispatch) for e in effects)
    state, _ = drain(system, state)
    assert state.controller.phase is S.IDLE
    executions = state.participant("agent").role.executions
    assert {e.state for e in executions} == {ExecState.RUNNING}  # resumed, not retired
    assert deadline_timer("g0") in dict(state.timers)  # the clock runs again


def test_s2_two_holders_first_resume_keeps_clocks_stopped() -> None:
    system, state = make()
    state, _ = system.input(state, GroupOpened("g0", 1, "agent"))
    state, _ = system.input(state, TrainSwitchBegin())
    state, _ = system.input(state, PeriodElapsed(), now=1.0)
    state, effects = system.input(state, TrainSwitchEnd(), now=2.0)
    assert not any(type(e).__name__ in ("OpenAdmission", "ResumeDeadlines") for e in effects)
    registry = state.controller.deadlines
    assert registry.state.value == "suspended" and registry.data.holders == {"checkpoint"}
    assert state.controller.gate.data == {"checkpoint"}
    assert deadline_timer("g0") not in dict(state.timers)


def test_s3_5xx_on_commit_is_retryable_and_aborts() -> None:
    system, state = make()
    state = checkpoint_with_parked(system, state)
    [commit] = state.requests(Op.COMMIT)
    state, effects = system.fail(state, commit, Cause.PARTICIPANT_ERROR)
    state, more = drain(system, state)
    assert outcomes([*effects, *more]) == [("failed", "participant_error")]
    assert state.controller.phase is S.IDLE
    assert {fence(state, n) for n in ("policy", "agent", "resources")} == {FenceState.IDLE}


def test_s4_failed_resume_leaves_release_pending_and_is_retried_with_the_same_id() -> None:
    system, state = make()
    # Everything goes through until release, whose first call fails.
    state, _ = system.input(state, PeriodElapsed(), now=50.0)
    x = state.controller.attempt.op_id
    for _ in range(20):
        waiting = state.requests(Op.RESUME)
        if waiting:
            break
        state, _ = system.deliver(state, 0)
    state, _ = system.fail(state, waiting[0], Cause.TIMEOUT)
    assert state.controller.phase is S.RELEASE_PENDING
    state, _ = system.input(state, PeriodElapsed(), now=60.0)
    assert state.controller.phase is S.RELEASING and state.controller.attempt.op_id == x
    state, effects = drain(system, state)
    assert outcomes(effects) == [("completed", "completed")]
    # Only now is a new id minted (here skipped at once: nothing changed since x).
    state, effects = system.input(state, PeriodElapsed(), now=70.0)
    [after] = [e for e in effects if isinstance(e, Outcome)]
    assert after.checkpoint_id > x


def test_s5_failed_prepare_and_failed_rollback_abort_the_same_id_first() -> None:
    system, state = make()
    state, _ = system.input(state, PeriodElapsed(), now=1.0)
    x = state.controller.attempt.op_id
    state, _ = system.deliver(state, 0)  # policy prepared to x
    state, _ = system.fail(state, 0, Cause.PARTICIPANT_ERROR)  # its reply is a 5xx
    state, _ = system.fail(state, 0, Cause.IO_ERROR)  # the abort fails too
    assert state.controller.phase is S.ABORT_PENDING
    assert state.participant("policy").fence.data.active == x
    state, _ = system.input(state, PeriodElapsed(), now=2.0)  # mints nothing: aborts x
    state, _ = drain(system, state)
    assert fence(state, "policy") is FenceState.IDLE
    assert state.participant("policy").fence.data.high_watermark == x
    state, _ = system.input(state, PeriodElapsed(), now=3.0)
    state, effects = drain(system, state)
    assert not any(isinstance(e, ErrorReply) for e in effects)
    assert state.controller.phase is not S.STOPPED


def test_s6_prepare_applied_reply_lost_is_still_aborted() -> None:
    system, state = make()
    state, _ = system.input(state, PeriodElapsed(), now=1.0)
    state, _ = system.deliver(state, 0)
    state, _ = system.drop(state, 0)  # the ready reply is lost
    state, _ = drain(system, state)
    assert fence(state, "policy") is FenceState.IDLE
    assert state.controller.phase is S.IDLE


def test_s7_pending_acks_at_capture_are_reflushed_inside_the_cut() -> None:
    system, state = make()
    state, _ = system.input(state, GroupOpened("g0", 1, "agent"))
    state, _ = system.input(state, PeriodElapsed(), now=1.0)
    state, _ = drain(system, state)  # agent not ready: g0/0 running
    state, _, _ = system.finish(state, "agent", "g0/0", 0)
    [ack] = state.requests(Op.ACK)
    state, _ = system.deliver(state, ack)  # accepted by the agent, reply still in flight
    ack_reply = state.replies()[0]
    state, _ = system.fire_timer(state, prepare_retry_timer(state.controller.attempt.op_id))
    for _ in range(10):  # prepare and commit everything but the ACK reply
        pending = [i for i in range(len(state.messages)) if i != ack_reply]
        if not pending or state.controller.phase is S.CAPTURING:
            break
        state, _ = system.deliver(state, pending[0])
    assert state.controller.phase is S.CAPTURING
    assert state.controller.ledger.pending_acks()  # the ledger has not seen the ACK yet
    state, effects = drain(system, state)
    assert outcomes(effects) == [("completed", "completed")]
    assert not state.controller.ledger.pending_acks()


def test_s8_background_ack_failure_is_caught_by_the_strict_flush() -> None:
    system, state = make()
    state, _ = system.input(state, GroupOpened("g0", 1, "agent"))
    state, _, _ = system.finish(state, "agent", "g0/0", 0)
    [ack] = state.requests(Op.ACK)
    state, _ = system.fail(state, ack, Cause.IO_ERROR)  # the drain dies
    state, _ = system.input(state, PeriodElapsed(), now=1.0)
    assert state.controller.phase is S.FLUSHING_ACKS
    state, effects = drain(system, state)
    assert outcomes(effects) == [("completed", "completed")]


def test_s8_a_background_ack_failure_landing_during_the_strict_flush_does_not_fail_it() -> None:
    system, state = make()
    state, _ = system.input(state, GroupOpened("g0", 1, "agent"))
    state, _, _ = system.finish(state, "agent", "g0/0", 0)
    [background] = state.requests(Op.ACK)
    state, _ = system.input(state, PeriodElapsed(), now=1.0)
    assert state.controller.phase is S.FLUSHING_ACKS  # the strict flush is in flight too
    state, effects = system.fail(state, background, Cause.IO_ERROR)  # the drain dies now
    assert state.controller.phase is S.FLUSHING_ACKS
    state, more = drain(system, state)
    assert outcomes([*effects, *more]) == [("completed", "completed")]


def test_s9_optimizer_step_between_commit_and_capture_skips_and_aborts_same_id() -> None:
    system, state = make()
    state = checkpoint_with_parked(system, state)
    x = state.controller.attempt.op_id
    state, _ = system.input(state, OptimizerStepEnd(1))
    state, effects = drain(system, state)
    assert outcomes(effects) == [("skipped", "trainer_state_changed")]
    assert state.participant("agent").fence.data.high_watermark == x
    assert x not in state.store.published


def test_s10_completion_after_the_flush_is_acked_and_prepare_retried_until_ready() -> None:
    system, state = make()
    state, _ = system.input(state, GroupOpened("g0", 1, "agent"))
    state, _ = system.input(state, PeriodElapsed(), now=1.0)
    state, _ = drain(system, state)
    assert state.controller.attempt.not_ready == {"agent"}
    state, _, _ = system.finish(state, "agent", "g0/0", 0)  # sealed, ACK sent
    state, _ = drain(system, state)
    state, _ = system.fire_timer(state, prepare_retry_timer(state.controller.attempt.op_id))
    state, effects = drain(system, state)
    assert outcomes(effects) == [("completed", "completed")]


def test_s11_a_group_scored_sibling_is_never_retried_alone() -> None:
    system, state = make(group_scored=True, group_size=2)
    state, _ = system.input(state, GroupOpened("g0", 2, "agent"))
    state, _, _ = system.finish(state, "agent", "g0/0", 0)
    state, effects = system.fire_timer(state, deadline_timer("g0"))
    assert Redispatch("g0", "prompt_group") in effects
    ledger = state.controller.ledger
    assert ledger.counters.group_reruns == 1 and ledger.counters.discarded_siblings == 1
    assert [a.attempt for a in ledger.siblings("g0")] == [1, 1]


def test_s12_restart_only_continuations_are_discarded_before_resume() -> None:
    paused = Value(RestoreState.RESTORED_PAUSED, RESTORE.start().data)
    restored = [
        (
            "agent",
            Continuation(
                rollout_id="g0/0",
                attempt=1,
                group_id="g0",
                turn=1,
                turns=2,
                restart_only_dependency=True,
            ),
        ),
        ("agent", Continuation(rollout_id="g0/1", attempt=1, group_id="g0", turn=1, turns=2)),
    ]
    op = OpId(2, 1, 0, "rs")
    [discard] = plan_discards(paused, op, restored)
    assert (discard.rollout_id, discard.attempt) == ("g0/0", 1)
    with pytest.raises(Exception, match="restored_paused"):
        plan_discards(Value(RestoreState.RESUMING, paused.data), op, restored)


def test_s13_unknown_recovery_mode_is_refused_at_setup_naming_the_server() -> None:
    system = System(Coordinator(QuiesceConfig()))
    odd = new_participant(
        {"name": "res-7", "role": "resources", "recovery_mode": "snapshotty"}, "r"
    )
    with pytest.raises(UnknownRecoveryMode) as error:
        system.start([odd])
    assert error.value.server == "res-7" and "res-7" in str(error.value)


def test_s14_unmanaged_multi_worker_server_is_refused_at_setup() -> None:
    system = System(Coordinator(QuiesceConfig()))
    many = new_participant({"name": "pol-3", "role": "policy", "multi_process": "unmanaged"}, "p")
    with pytest.raises(UnmanagedMultiProcess) as error:
        system.start([many])
    assert error.value.server == "pol-3"


def test_s15_a_delayed_prepare_after_its_resume_is_stale() -> None:
    system, state = make()
    state, _ = system.input(state, PeriodElapsed(), now=1.0)
    state, delayed = system.delay(state, 0)  # prepare(x) to the policy, held in the network
    state, _ = system.input(state, TimerDue(prepare_deadline_timer(state.controller.attempt.op_id)))
    state, _ = drain(system, state)  # the attempt times out and resume(x) retires x
    assert fence(state, "policy") is FenceState.IDLE
    state, reply = system.redeliver(state, "policy", Op.PREPARE, delayed)
    assert isinstance(reply, ErrorReply) and reply.code == "stale_checkpoint"
    assert fence(state, "policy") is FenceState.IDLE


def test_s16_restore_digest_mismatch_rejects_the_snapshot() -> None:
    op = OpId(2, 1, 0, "rs")
    reply = RestoreReply(
        participant="policy",
        incarnation="p1",
        op_id=op,
        status="restored",
        digest="not-the-committed-one",
    )
    verdict = judge_restore({"policy": "committed"}, {"policy": reply}, {})
    assert verdict.action is VerdictAction.REJECT
    assert verdict.mismatches == (("policy", "committed", "not-the-committed-one"),)


def test_s17_retire_of_a_completed_unacked_execution_keeps_it_until_the_ack() -> None:
    system, state = make()
    state, _ = system.input(state, GroupOpened("g0", 1, "agent"))
    # The agent completes, but the report to the controller is lost.
    agent, _, _ = handle(
        state.participant("agent"), "finish", FinishRequest(rollout_id="g0/0", attempt=0)
    )
    participants = tuple(agent if p.config.name == "agent" else p for p in state.participants)
    state = replace(state, participants=participants)
    _, direct, _ = handle(agent, "retire", RetireRequest(rollout_id="g0/0", attempt=0))
    assert direct.outcome == "completed_unacknowledged"  # only an ACK releases a result
    state, _ = system.fire_timer(state, deadline_timer("g0"))  # expiry retires it
    state, _ = drain(system, state)
    assert state.controller.ledger.counters.late_completions_dropped == 1
    assert not state.controller.ledger.pending_acks()  # ACKed after the retire


def test_s18_controller_crash_mid_checkpoint_aborts_that_id_on_restart() -> None:
    system, state = make()
    state, _ = system.input(state, PeriodElapsed(), now=1.0)
    x = state.controller.attempt.op_id
    state, _ = system.deliver(state, 0)  # the policy is fenced to x
    state, restart = system.crash_controller(state, epoch=2)
    assert any(type(e).__name__ == "InspectPublished" for e in restart)  # §6 before anything
    state, _ = drain(system, state)
    assert fence(state, "policy") is FenceState.IDLE
    assert all(
        state.participant(n).fence.data.high_watermark == x
        for n in ("policy", "agent", "resources")
    )
    assert state.store.intent is None and state.controller.phase is S.IDLE
    state, _ = system.input(state, PeriodElapsed(), now=5.0)
    assert state.controller.attempt.op_id.epoch == 2


def test_s19_a_participant_restart_mid_checkpoint_keeps_its_fence_and_aborts() -> None:
    system, state = make()
    state, _ = system.input(state, PeriodElapsed(), now=1.0)
    x = state.controller.attempt.op_id
    state, _ = system.deliver(state, 0)
    state, _ = system.deliver(state, 0)  # the policy is prepared; the agent's call is out
    state, _ = system.crash_participant(state, "policy", "p2")
    assert state.participant("policy").fence.data.active == x  # the journal kept it
    state, effects = drain(system, state)
    assert ("failed", "participant_restarted") in outcomes(
        effects
    ) or state.controller.phase is S.IDLE
    assert fence(state, "policy") is FenceState.IDLE
    state, reply = system.redeliver(
        state, "policy", Op.PREPARE, ControlRequest(op_id=x, deadline_at=9.0)
    )
    assert isinstance(reply, ErrorReply) and reply.code == "stale_checkpoint"
    assert not any(isinstance(e, Stopped) for e in effects)


# --------------------------------------------------------------------------------------------
# S12, S16, S18, S19 through the coordinator's restore (M9) at a controller restart.


def restore_outcome(effects: Iterable[Any]) -> RestoreOutcome:
    [result] = [e for e in effects if isinstance(e, RestoreOutcome)]
    return result


def publish_with_parked(
    system: System, state: SystemState, restart_only: tuple[str, ...] = ()
) -> tuple[SystemState, OpId]:
    """One group of two, both parked at the boundary of turn 1 (`restart_only` siblings'
    turn touched a restart_only resource), snapshot published and released."""
    state, _ = system.input(state, GroupOpened("g0", 2, "agent"))
    state, _ = system.input(state, PeriodElapsed(), now=1.0)
    state, _ = drain(system, state)
    for rollout in ("g0/0", "g0/1"):
        request = BoundaryRequest(
            rollout_id=rollout, attempt=0, turn=1, restart_only_dependency=rollout in restart_only
        )
        state, _, _ = system.agent_event(state, "agent", "boundary", request)
    state, _ = system.fire_timer(state, prepare_retry_timer(state.controller.attempt.op_id))
    state, effects = drain(system, state)
    assert outcomes(effects) == [("completed", "completed")]
    [snapshot] = state.store.published
    return state, snapshot


def test_s12_composed_restart_only_continuation_is_discarded_in_restored_paused() -> None:
    system, state = make()
    state, _ = publish_with_parked(system, state, restart_only=("g0/0",))
    state, effects = system.crash_controller(state, epoch=2)
    effects = list(effects)
    seen_discard = False
    for _ in range(100):
        if not state.messages:
            break
        message = state.messages[0]
        if message.reply is None and message.call.op is Op.DISCARD:
            seen_discard = True
            # Only while every participant is restored_paused: no resume has gone out yet.
            assert fence(state, "agent") is FenceState.RESTORED_PAUSED
            assert not state.requests(Op.RESUME)
            assert message.call.payload == ("g0/0", 0)
        state, more = system.deliver(state, 0)
        effects.extend(more)
    assert seen_discard
    metrics = dict(restore_outcome(effects).metrics)
    assert metrics["continuations_discarded_restart_only"] == 1
    assert metrics["siblings_resumed_from_turn"] == 1
    assert metrics["siblings_rerun_from_scratch"] == 1
    begun = {
        (e.data.rollout_id, e.data.attempt): e.data.turn
        for e in state.participant("agent").role.executions
    }
    assert begun == {("g0/0", 1): 0, ("g0/1", 1): 1}  # g0/0 restarts from scratch


def test_s16_composed_restore_digest_mismatch_falls_back_to_the_older_snapshot() -> None:
    system, state = make()
    state, _ = system.input(state, PeriodElapsed(), now=1.0)
    state, _ = drain(system, state)
    [older] = state.store.published
    state, _ = system.input(state, GroupOpened("g0", 1, "agent"), now=2.0)
    state, _, _ = system.finish(state, "agent", "g0/0", 0)
    state, _ = drain(system, state)
    state, _ = system.input(state, PeriodElapsed(), now=3.0)
    state, _ = drain(system, state)
    newer = max(state.store.published)
    assert newer > older
    state, effects = system.crash_controller(state, epoch=2)
    effects = list(effects)
    state, _ = system.deliver(state, 0)  # the policy restores the newer snapshot...
    [bad] = system.restore_replies(state)
    state = system.wrong_digest_at_restore(state, bad)  # ...and reports another digest
    assert not system.restore_replies(state)
    state, more = drain(system, state)
    effects += more
    result = restore_outcome(effects)
    assert result.snapshot_id == older
    assert (str(newer), "digest_mismatch") in result.rejected
    assert fence(state, "policy") is FenceState.IDLE
    assert state.controller.phase is S.IDLE


def test_s18_composed_restart_aborts_the_in_flight_id_then_restores() -> None:
    system, state = make()
    state, _ = system.input(state, PeriodElapsed(), now=1.0)
    x = state.controller.attempt.op_id
    state, _ = system.deliver(state, 0)  # the policy is fenced to x
    state, restart = system.crash_controller(state, epoch=2)
    state, effects = drain(system, state)
    result = restore_outcome([*restart, *effects])
    assert (result.intent, result.intent_action, result.result) == (x, "abort", "bootstrap")
    assert x not in state.store.published and state.store.intent is None
    assert state.controller.gate.data == frozenset()  # admission open again


def test_s18_composed_restart_after_publish_releases_and_restores_that_snapshot() -> None:
    system, state = make()
    state, _ = system.input(state, PeriodElapsed(), now=1.0)
    x = state.controller.attempt.op_id
    while not state.requests(Op.RESUME):
        state, _ = system.deliver(state, 0)
    assert state.store.intent == (x, "published")
    state, restart = system.crash_controller(state, epoch=2)
    state, effects = drain(system, state)
    result = restore_outcome([*restart, *effects])
    assert (result.intent_action, result.snapshot_id) == ("release", x)
    assert all(
        state.participant(n).fence.data.high_watermark.kind == "rs"
        for n in ("policy", "agent", "resources")
    )
    assert state.store.intent is None and state.controller.phase is S.IDLE


def test_s19_composed_a_participant_restart_mid_restore_keeps_its_restored_state() -> None:
    system, state = make()
    state, _ = publish_with_parked(system, state)
    state, effects = system.crash_controller(state, epoch=2)
    effects = list(effects)
    while not [
        i for i in state.requests(Op.RESUME) if state.messages[i].call.participant == "agent"
    ]:
        state, more = system.deliver(state, 0)
        effects.extend(more)
    assert fence(state, "agent") is FenceState.RESTORED_PAUSED
    state, more = system.crash_participant(state, "agent", "a2")  # the resume is lost
    effects.extend(more)
    assert fence(state, "agent") is FenceState.RESTORED_PAUSED  # the journal kept it (§6)
    rs = state.controller.restoring.op_id
    state, more = system.fire_timer(state, restore_retry_timer(rs))
    assert [(c.participant, c.op, c.op_id) for c in more if isinstance(c, Call)] == [
        ("agent", Op.RESUME, rs)
    ]
    state, more = drain(system, state)
    effects.extend(more)
    assert restore_outcome(effects).result == "snapshot"
    executions = state.participant("agent").role.executions
    assert {(e.data.rollout_id, e.data.attempt, e.data.turn) for e in executions} == {
        ("g0/0", 1, 1),
        ("g0/1", 1, 1),
    }
