"""PROTOCOL.md §7 as scripts: every failure scenario S1-S19, asserting the fixed behaviour.

What lives here: `SCENARIOS`, each scenario script by name (`s8_background_ack_...`); a
script is a function of the composed `System` it drives by hand (`quiesce.models.implementation`:
the real coordinator and the real participants) that returns when the protocol behaves as
§7 says and raises `ScenarioFailed`, naming what it saw, when not; and `scenario_system`,
the system they run on. One set of scripts serves twice: `tests/protocol/test_scenarios.py`
runs every one on the protocol, and the mutant catalog runs one on a mutant's system as
that mutant's killing check (`scenario:<name>`), since `scenario_system(hooks)` is the
protocol model's own composed system, so a mutant's tables reach it exactly as they reach
the explorer. Most scripts go through the system's actions; S12 and S16 also ask the
system's coordinator for its restore planning (`plan_discards`, `judge_restore`) directly,
so a mutant that swaps that decision of its policy is judged by it.

What it does not know: which mutant it runs on, or the explorer. Checks raise
`ScenarioFailed` rather than `assert`, so they hold under `python -O` too.

>>> SCENARIOS["s6_prepare_applied_reply_lost_is_still_aborted"](scenario_system())
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeAlias

from quiesce.fsm import QuiesceError, Value
from quiesce.models.implementation import Hooks, ProtocolModel, ProtocolParams, System, SystemState
from quiesce.protocol import (
    Cause,
    DiscoveryRefused,
    OpId,
    UnknownRecoveryMode,
    UnmanagedMultiProcess,
    new_participant,
)
from quiesce.protocol.controller import (
    GroupOpened,
    OptimizerStepEnd,
    Outcome,
    PeriodElapsed,
    Stopped,
    TrainSwitchBegin,
    TrainSwitchEnd,
)
from quiesce.protocol.controller.lowlevel import (
    Call,
    Op,
    Redispatch,
    RestoreOutcome,
    TimerDue,
    VerdictAction,
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
from quiesce.protocol.participant import AgentRole, handle
from quiesce.protocol.wire import (
    BoundaryRequest,
    Continuation,
    ControlRequest,
    ErrorReply,
    FinishRequest,
    RestoreReply,
    RetireReply,
    RetireRequest,
)

__all__ = ["SCENARIOS", "SCENARIO_PARAMS", "Scenario", "ScenarioFailed", "scenario_system"]

Scenario: TypeAlias = Callable[[System], None]
"""A scenario script: drives the given composed system; raises `ScenarioFailed` if §7 fails."""

SCENARIO_PARAMS = ProtocolParams(max_consecutive_failures=5)
"""The sizes of the scenarios' system: two turns per rollout, and room for five consecutive
failures, so no scenario's deliberate faults stop the run."""

S = CheckpointState


class ScenarioFailed(QuiesceError, AssertionError):
    """A scenario script saw the protocol misbehave: the message says what, and what §7
    expects instead."""


def scenario_system(hooks: Hooks | None = None) -> System:
    """The composed system the scenarios run on: the protocol model's own at
    `SCENARIO_PARAMS`, with `hooks` (a mutant's tables) if given."""
    return ProtocolModel(SCENARIO_PARAMS, hooks=hooks).system


# ============================================================================ checks


def _check(holds: bool, what: str) -> None:
    if not holds:
        raise ScenarioFailed(what)


def _same(actual: Any, expected: Any, what: str) -> None:
    if actual != expected:
        raise ScenarioFailed(f"{what}: got {actual!r}, expected {expected!r}")


def _refused(reply: Any, code: str, what: str) -> None:
    got = reply.code if isinstance(reply, ErrorReply) else reply
    _same(got, code, what)


# ============================================================================ building blocks


def _start(system: System, *, group: int = 0, trigger: bool = False, **agent: Any) -> SystemState:
    """One policy, one agent (configured by `agent`) and one stateless resources server;
    then a group `g0` of `group` siblings opened, and the periodic trigger at t=1, if asked."""
    participants = [
        new_participant({"name": "policy", "role": "policy"}, "p1"),
        new_participant({"name": "agent", "role": "agent", **agent}, "a1"),
        new_participant(
            {"name": "resources", "role": "resources", "recovery_mode": "stateless"}, "r1"
        ),
    ]
    state, _ = system.start(participants)
    if group:
        state, _ = system.input(state, GroupOpened("g0", group, "agent"))
    if trigger:
        state, _ = system.input(state, PeriodElapsed(), now=1.0)
    return state


def _drain(
    system: System, state: SystemState, limit: int = 100
) -> tuple[SystemState, tuple[Any, ...]]:
    """Deliver every message, oldest first, until none is left."""
    effects: list[Any] = []
    for _ in range(limit):
        if not state.messages:
            return state, tuple(effects)
        state, more = system.deliver(state, 0)
        effects.extend(more)
    raise ScenarioFailed(f"messages never settled after {limit} deliveries")


def _outcomes(effects: Iterable[Any]) -> list[tuple[str, str]]:
    return [(e.result, e.reason) for e in effects if isinstance(e, Outcome)]


def _fence(state: SystemState, name: str) -> FenceState:
    return state.participant(name).fence.state


def _fences(state: SystemState) -> set[FenceState]:
    return {_fence(state, name) for name in ("policy", "agent", "resources")}


def _executions(state: SystemState) -> tuple[Any, ...]:
    """The agent's executions (live and completed-but-unACKed)."""
    role = state.participant("agent").role
    if not isinstance(role, AgentRole):
        raise ScenarioFailed(f"the agent runs a {type(role).__name__}, not an AgentRole")
    return role.executions


def _attempt_id(state: SystemState) -> OpId:
    attempt = state.controller.attempt
    if attempt is None:
        raise ScenarioFailed(f"no checkpoint attempt in flight (phase {state.controller.phase})")
    return attempt.op_id


def _parked(system: System) -> SystemState:
    """Open one group of two, trigger, get the agent to park both at a boundary."""
    # The policy is ready, the agent not (both siblings run).
    state, _ = _drain(system, _start(system, group=2, trigger=True))
    for rollout in ("g0/0", "g0/1"):
        state, _, _ = system.turn(state, "agent", rollout, 0, 1)
    state, _ = system.fire_timer(state, prepare_retry_timer(_attempt_id(state)))
    while state.controller.phase is S.PREPARING and state.messages:
        state, _ = system.deliver(state, 0)
    return state


def _restore_outcome(effects: Iterable[Any]) -> RestoreOutcome:
    found = [e for e in effects if isinstance(e, RestoreOutcome)]
    _same(len(found), 1, "restore outcomes reported")
    return found[0]


def _published_with_parked(system: System, restart_only: tuple[str, ...] = ()) -> SystemState:
    """One group of two, both parked at the boundary of turn 1 (`restart_only` siblings'
    turn touched a restart_only resource), snapshot published and released."""
    state, _ = _drain(system, _start(system, group=2, trigger=True))
    for rollout in ("g0/0", "g0/1"):
        request = BoundaryRequest(
            rollout_id=rollout, attempt=0, turn=1, restart_only_dependency=rollout in restart_only
        )
        state, _, _ = system.agent_event(state, "agent", "boundary", request)
    state, _ = system.fire_timer(state, prepare_retry_timer(_attempt_id(state)))
    state, effects = _drain(system, state)
    _same(_outcomes(effects), [("completed", "completed")], "the checkpoint's outcome")
    _same(len(state.store.published), 1, "published snapshots")
    return state


# ============================================================================ S1-S19


def s1_a_deadline_cannot_expire_while_the_checkpoint_holds_the_registry(system: System) -> None:
    state = _parked(system)
    _same(state.controller.phase, S.COMMITTING, "phase once both siblings parked")
    _check(deadline_timer("g0") not in dict(state.timers), "the deadline was not cancelled")
    # Even a timer already on its way expires nothing while suspended.
    state, effects = system.input(state, TimerDue(deadline_timer("g0")), now=10_000.0)
    _check(not any(isinstance(e, Redispatch) for e in effects), "a suspended deadline expired")
    state, _ = _drain(system, state)
    _same(state.controller.phase, S.IDLE, "phase after the checkpoint")
    executions = _executions(state)
    _same({e.state for e in executions}, {ExecState.RUNNING}, "executions (resumed, not retired)")
    _check(deadline_timer("g0") in dict(state.timers), "the deadline clock did not run again")


def s2_two_holders_first_resume_keeps_clocks_stopped(system: System) -> None:
    state = _start(system, group=1)
    state, _ = system.input(state, TrainSwitchBegin())
    state, _ = system.input(state, PeriodElapsed(), now=1.0)
    state, effects = system.input(state, TrainSwitchEnd(), now=2.0)
    reopened = [type(e).__name__ for e in effects]
    _check(
        not {"OpenAdmission", "ResumeDeadlines"} & set(reopened),
        f"the train switch's end reopened what the checkpoint holds: {reopened}",
    )
    registry = state.controller.deadlines
    _same(
        (registry.state.value, registry.data.holders),
        ("suspended", {"checkpoint"}),
        "deadline registry",
    )
    _same(state.controller.gate.data, {"checkpoint"}, "admission gate holders")
    _check(deadline_timer("g0") not in dict(state.timers), "the deadline clock runs again")


def s3_5xx_on_commit_is_retryable_and_aborts(system: System) -> None:
    state = _parked(system)
    [commit] = state.requests(Op.COMMIT)
    state, effects = system.fail(state, commit, Cause.PARTICIPANT_ERROR)
    state, more = _drain(system, state)
    _same(_outcomes([*effects, *more]), [("failed", "participant_error")], "outcomes")
    _same(state.controller.phase, S.IDLE, "phase after the abort")
    _same(_fences(state), {FenceState.IDLE}, "fences after the abort")


def s4_failed_resume_leaves_release_pending_and_is_retried_with_the_same_id(
    system: System,
) -> None:
    state = _start(system)
    # Everything goes through until release, whose first call fails.
    state, _ = system.input(state, PeriodElapsed(), now=50.0)
    x = _attempt_id(state)
    waiting: tuple[int, ...] = ()
    for _ in range(20):
        waiting = state.requests(Op.RESUME)
        if waiting or not state.messages:
            break
        state, _ = system.deliver(state, 0)
    _check(bool(waiting), "no resume was sent")
    state, _ = system.fail(state, waiting[0], Cause.TIMEOUT)
    _same(state.controller.phase, S.RELEASE_PENDING, "phase after a failed resume")
    state, _ = system.input(state, PeriodElapsed(), now=60.0)
    _same(state.controller.phase, S.RELEASING, "phase at the next trigger")
    _same(_attempt_id(state), x, "the id released again")
    state, effects = _drain(system, state)
    _same(_outcomes(effects), [("completed", "completed")], "outcomes of the release")
    # Only now is a new id minted (here skipped at once: nothing changed since x).
    state, effects = system.input(state, PeriodElapsed(), now=70.0)
    after = [e for e in effects if isinstance(e, Outcome)]
    _same(len(after), 1, "outcomes of the next trigger")
    _check(after[0].checkpoint_id > x, f"{after[0].checkpoint_id} is not newer than {x}")


def s5_failed_prepare_and_failed_rollback_abort_the_same_id_first(system: System) -> None:
    state = _start(system, trigger=True)
    x = _attempt_id(state)
    state, _ = system.deliver(state, 0)  # policy prepared to x
    state, _ = system.fail(state, 0, Cause.PARTICIPANT_ERROR)  # its reply is a 5xx
    state, _ = system.fail(state, 0, Cause.IO_ERROR)  # the abort fails too
    _same(state.controller.phase, S.ABORT_PENDING, "phase after a failed abort")
    _same(state.participant("policy").fence.data.active, x, "the policy's fenced id")
    state, _ = system.input(state, PeriodElapsed(), now=2.0)  # mints nothing: aborts x
    state, _ = _drain(system, state)
    _same(_fence(state, "policy"), FenceState.IDLE, "the policy's fence after the abort")
    _same(state.participant("policy").fence.data.high_watermark, x, "the high-watermark")
    state, _ = system.input(state, PeriodElapsed(), now=3.0)
    state, effects = _drain(system, state)
    _check(not any(isinstance(e, ErrorReply) for e in effects), "the next attempt was refused")
    _check(state.controller.phase is not S.STOPPED, "the run stopped")


def s6_prepare_applied_reply_lost_is_still_aborted(system: System) -> None:
    state = _start(system, trigger=True)
    state, _ = system.deliver(state, 0)
    state, _ = system.drop(state, 0)  # the ready reply is lost
    state, _ = _drain(system, state)
    _same(_fence(state, "policy"), FenceState.IDLE, "the policy's fence")
    _same(state.controller.phase, S.IDLE, "phase after the abort")


def s7_pending_acks_at_capture_are_reflushed_inside_the_cut(system: System) -> None:
    state = _start(system, group=1, trigger=True)
    state, _ = _drain(system, state)  # agent not ready: g0/0 running
    state, _, _ = system.finish(state, "agent", "g0/0", 0)
    [ack] = state.requests(Op.ACK)
    state, _ = system.deliver(state, ack)  # accepted by the agent, reply still in flight
    ack_reply = state.replies()[0]
    state, _ = system.fire_timer(state, prepare_retry_timer(_attempt_id(state)))
    for _ in range(10):  # prepare and commit everything but the ACK reply
        pending = [i for i in range(len(state.messages)) if i != ack_reply]
        if not pending or state.controller.phase is S.CAPTURING:
            break
        state, _ = system.deliver(state, pending[0])
    _same(state.controller.phase, S.CAPTURING, "phase with the ACK reply held back")
    _check(bool(state.controller.ledger.pending_acks()), "the ledger saw the ACK too early")
    state, effects = _drain(system, state)
    _same(_outcomes(effects), [("completed", "completed")], "outcomes")
    _check(not state.controller.ledger.pending_acks(), "ACKs still pending after the cut")


def s8_background_ack_failure_is_caught_by_the_strict_flush(system: System) -> None:
    state = _start(system, group=1)
    state, _, _ = system.finish(state, "agent", "g0/0", 0)
    [ack] = state.requests(Op.ACK)
    state, _ = system.fail(state, ack, Cause.IO_ERROR)  # the drain dies
    state, _ = system.input(state, PeriodElapsed(), now=1.0)
    _same(state.controller.phase, S.FLUSHING_ACKS, "phase after the trigger")
    state, effects = _drain(system, state)
    _same(_outcomes(effects), [("completed", "completed")], "outcomes")


def s8_a_background_ack_failure_landing_during_the_strict_flush_does_not_fail_it(
    system: System,
) -> None:
    state = _start(system, group=1)
    state, _, _ = system.finish(state, "agent", "g0/0", 0)
    [background] = state.requests(Op.ACK)
    state, _ = system.input(state, PeriodElapsed(), now=1.0)
    _same(state.controller.phase, S.FLUSHING_ACKS, "phase (the strict flush is in flight)")
    state, effects = system.fail(state, background, Cause.IO_ERROR)  # the drain dies now
    _same(state.controller.phase, S.FLUSHING_ACKS, "phase after the background failure")
    state, more = _drain(system, state)
    _same(_outcomes([*effects, *more]), [("completed", "completed")], "outcomes")


def s9_optimizer_step_between_commit_and_capture_skips_and_aborts_same_id(
    system: System,
) -> None:
    state = _parked(system)
    x = _attempt_id(state)
    state, _ = system.input(state, OptimizerStepEnd(1))
    state, effects = _drain(system, state)
    _same(_outcomes(effects), [("skipped", "trainer_state_changed")], "outcomes")
    _same(state.participant("agent").fence.data.high_watermark, x, "the agent's high-watermark")
    _check(x not in state.store.published, f"{x} was published")


def s10_completion_after_the_flush_is_acked_and_prepare_retried_until_ready(
    system: System,
) -> None:
    state, early = _drain(system, _start(system, group=1, trigger=True))
    attempt = state.controller.attempt
    if attempt is None:
        raise ScenarioFailed(f"the attempt ended before its retry: {_outcomes(early)}")
    _same(attempt.not_ready, {"agent"}, "participants not ready")
    state, _, _ = system.finish(state, "agent", "g0/0", 0)  # sealed, ACK sent
    state, _ = _drain(system, state)
    state, _ = system.fire_timer(state, prepare_retry_timer(_attempt_id(state)))
    state, effects = _drain(system, state)
    _same(_outcomes(effects), [("completed", "completed")], "outcomes of the retried prepare")


def s11_a_group_scored_sibling_is_never_retried_alone(system: System) -> None:
    state = _start(system, group=2, group_scored=True, group_size=2)
    state, _, _ = system.finish(state, "agent", "g0/0", 0)
    state, effects = system.fire_timer(state, deadline_timer("g0"))
    _check(Redispatch("g0", "prompt_group") in effects, f"no whole-group rerun in {effects}")
    ledger = state.controller.ledger
    counters = ledger.counters
    _same((counters.group_reruns, counters.discarded_siblings), (1, 1), "reruns, discards")
    _same([a.attempt for a in ledger.siblings("g0")], [1, 1], "the siblings' attempts")


def s12_restart_only_continuations_are_discarded_before_resume(system: System) -> None:
    # The coordinator's restore planning, asked directly (the composed run is the next S12
    # script).
    plan_discards = system.coordinator.policy.plan_discards
    paused = Value(RestoreState.RESTORED_PAUSED, RESTORE.start().data)
    op = OpId(2, 1, 0, "rs")
    discards = plan_discards(paused, op, _S12_RESTORED)
    planned = [(d.rollout_id, d.attempt) for d in discards]
    _same(planned, [("g0/0", 1)], "continuations discarded")
    try:
        plan_discards(Value(RestoreState.RESUMING, paused.data), op, _S12_RESTORED)
    except QuiesceError as error:
        _check("restored_paused" in str(error), f"the refusal does not name the phase: {error}")
    else:
        raise ScenarioFailed("discards were planned outside restored_paused")


_S12_SAVED: dict[str, Any] = {"attempt": 1, "group_id": "g0", "turn": 1, "turns": 2}
_S12_RESTORED = (
    ("agent", Continuation(rollout_id="g0/0", restart_only_dependency=True, **_S12_SAVED)),
    ("agent", Continuation(rollout_id="g0/1", **_S12_SAVED)),
)


def _refused_at_setup(
    system: System, config: dict[str, str], refusal: type[DiscoveryRefused], what: str
) -> DiscoveryRefused:
    """Starting the one server `config` describes raises `refusal`, naming that server."""
    try:
        system.start([new_participant(config, "x")])
    except refusal as error:
        _same(error.server, config["name"], "the server the refusal names")
        return error
    raise ScenarioFailed(f"{what} was accepted at setup")


def s13_unknown_recovery_mode_is_refused_at_setup_naming_the_server(system: System) -> None:
    odd = {"name": "res-7", "role": "resources", "recovery_mode": "snapshotty"}
    error = _refused_at_setup(system, odd, UnknownRecoveryMode, "an unknown recovery mode")
    _check("res-7" in str(error), f"the message does not name the server: {error}")


def s14_unmanaged_multi_worker_server_is_refused_at_setup(system: System) -> None:
    many = {"name": "pol-3", "role": "policy", "multi_process": "unmanaged"}
    _refused_at_setup(system, many, UnmanagedMultiProcess, "an unmanaged multi-process server")


def s15_a_delayed_prepare_after_its_resume_is_stale(system: System) -> None:
    state = _start(system, trigger=True)
    state, delayed = system.delay(state, 0)  # prepare(x) to the policy, held in the network
    state, _ = system.input(state, TimerDue(prepare_deadline_timer(_attempt_id(state))))
    state, _ = _drain(system, state)  # the attempt times out and resume(x) retires x
    _same(_fence(state, "policy"), FenceState.IDLE, "the policy's fence after the timeout")
    state, reply = system.redeliver(state, "policy", Op.PREPARE, delayed)
    _refused(reply, "stale_checkpoint", "the delayed prepare's answer")
    _same(_fence(state, "policy"), FenceState.IDLE, "the policy's fence after the stale prepare")


def s16_restore_digest_mismatch_rejects_the_snapshot(system: System) -> None:
    # The coordinator's restore verdict, asked directly (the composed run is the next S16
    # script).
    reply = RestoreReply(
        participant="policy",
        incarnation="p1",
        op_id=OpId(2, 1, 0, "rs"),
        status="restored",
        digest="not-the-committed-one",
    )
    judge = system.coordinator.policy.judge_restore
    verdict = judge({"policy": "committed"}, {"policy": reply}, {}, None)
    _same(verdict.action, VerdictAction.REJECT, "the verdict on a digest mismatch")
    _same(
        verdict.mismatches,
        (("policy", "committed", "not-the-committed-one"),),
        "the mismatches reported",
    )


def s17_retire_of_a_completed_unacked_execution_keeps_it_until_the_ack(system: System) -> None:
    state = _start(system, group=1)
    # The agent completes, but the report to the controller is lost.
    finish = FinishRequest(rollout_id="g0/0", attempt=0)
    agent, _, _ = handle(state.participant("agent"), "finish", finish, rules=system.rules)
    state = state.with_participant(agent)
    retire = RetireRequest(rollout_id="g0/0", attempt=0)
    _, direct, _ = handle(agent, "retire", retire, rules=system.rules)
    # Only an ACK releases a result.
    outcome = direct.outcome if isinstance(direct, RetireReply) else direct
    _same(outcome, "completed_unacknowledged", "retire's answer")
    state, _ = system.fire_timer(state, deadline_timer("g0"))  # expiry retires it
    state, _ = _drain(system, state)
    counters = state.controller.ledger.counters
    _same(counters.late_completions_dropped, 1, "late completions dropped")
    _check(not state.controller.ledger.pending_acks(), "the completion was never ACKed")


def s18_controller_crash_mid_checkpoint_aborts_that_id_on_restart(system: System) -> None:
    state = _start(system, trigger=True)
    x = _attempt_id(state)
    state, _ = system.deliver(state, 0)  # the policy is fenced to x
    state, restart = system.crash_controller(state, epoch=2)
    _check(
        any(type(e).__name__ == "InspectPublished" for e in restart),
        "the restart did not look up the intent's publish first (§6)",
    )
    state, _ = _drain(system, state)
    _same(_fence(state, "policy"), FenceState.IDLE, "the policy's fence after the restart")
    for name in ("policy", "agent", "resources"):
        _same(state.participant(name).fence.data.high_watermark, x, f"{name}'s high-watermark")
    _check(state.store.intent is None, f"the intent record remains: {state.store.intent}")
    _same(state.controller.phase, S.IDLE, "phase after the restart")
    state, _ = system.input(state, PeriodElapsed(), now=5.0)
    _same(_attempt_id(state).epoch, 2, "the epoch of the next id")


def s19_a_participant_restart_mid_checkpoint_keeps_its_fence_and_aborts(system: System) -> None:
    state = _start(system, trigger=True)
    x = _attempt_id(state)
    state, _ = system.deliver(state, 0)
    state, _ = system.deliver(state, 0)  # the policy is prepared; the agent's call is out
    state, _ = system.crash_participant(state, "policy", "p2")
    _same(state.participant("policy").fence.data.active, x, "the policy's id after its restart")
    state, effects = _drain(system, state)
    _check(
        ("failed", "participant_restarted") in _outcomes(effects)
        or state.controller.phase is S.IDLE,
        f"the attempt neither failed nor settled: {_outcomes(effects)}",
    )
    _same(_fence(state, "policy"), FenceState.IDLE, "the policy's fence after the abort")
    state, reply = system.redeliver(
        state, "policy", Op.PREPARE, ControlRequest(op_id=x, deadline_at=9.0)
    )
    _refused(reply, "stale_checkpoint", "a late prepare of the aborted id")
    _check(not any(isinstance(e, Stopped) for e in effects), "the run stopped")


# ------------------------------------------------------------------ S12, S16, S18, S19 at a
# controller restart, through the coordinator's restore (M9)


def s12_composed_restart_only_continuation_is_discarded_in_restored_paused(
    system: System,
) -> None:
    state = _published_with_parked(system, restart_only=("g0/0",))
    state, restart = system.crash_controller(state, epoch=2)
    effects = list(restart)
    seen_discard = False
    for _ in range(100):
        if not state.messages:
            break
        message = state.messages[0]
        if message.reply is None and message.call.op is Op.DISCARD:
            seen_discard = True
            # Only while every participant is restored_paused: no resume has gone out yet.
            _same(_fence(state, "agent"), FenceState.RESTORED_PAUSED, "the agent at discard")
            _check(not state.requests(Op.RESUME), "a resume went out before the discard")
            _same(message.call.payload, ("g0/0", 0), "the discarded continuation")
        state, more = system.deliver(state, 0)
        effects.extend(more)
    _check(seen_discard, "no restart_only continuation was discarded")
    metrics = dict(_restore_outcome(effects).metrics)
    _same(
        (
            metrics["continuations_discarded_restart_only"],
            metrics["siblings_resumed_from_turn"],
            metrics["siblings_rerun_from_scratch"],
        ),
        (1, 1, 1),
        "discarded, resumed, rerun",
    )
    begun = {(e.data.rollout_id, e.data.attempt): e.data.turn for e in _executions(state)}
    # g0/0 restarts from scratch, g0/1 from its saved turn.
    _same(begun, {("g0/0", 1): 0, ("g0/1", 1): 1}, "executions begun after the restore")


def s16_composed_restore_digest_mismatch_falls_back_to_the_older_snapshot(
    system: System,
) -> None:
    state, _ = _drain(system, _start(system, trigger=True))
    [older] = state.store.published
    state, _ = system.input(state, GroupOpened("g0", 1, "agent"), now=2.0)
    state, _, _ = system.finish(state, "agent", "g0/0", 0)
    state, _ = _drain(system, state)
    state, _ = system.input(state, PeriodElapsed(), now=3.0)
    state, _ = _drain(system, state)
    newer = max(state.store.published)
    _check(newer > older, f"no newer snapshot than {older}: {sorted(state.store.published)}")
    state, restart = system.crash_controller(state, epoch=2)
    effects = list(restart)
    state, _ = system.deliver(state, 0)  # the policy restores the newer snapshot...
    corruptible = system.restore_replies(state)
    _same(len(corruptible), 1, "restore replies in flight")
    state = system.wrong_digest_at_restore(state, corruptible[0])  # ...reports another digest
    _same(system.restore_replies(state), (), "corruptible replies after the fault")
    state, more = _drain(system, state)
    result = _restore_outcome([*effects, *more])
    _same(result.snapshot_id, older, "the snapshot restored")
    _check(
        (str(newer), "digest_mismatch") in result.rejected,
        f"{newer} not rejected for its digest: {result.rejected}",
    )
    _same(_fence(state, "policy"), FenceState.IDLE, "the policy's fence after the restore")
    _same(state.controller.phase, S.IDLE, "phase after the restore")


def s18_composed_restart_aborts_the_in_flight_id_then_restores(system: System) -> None:
    state = _start(system, trigger=True)
    x = _attempt_id(state)
    state, _ = system.deliver(state, 0)  # the policy is fenced to x
    state, restart = system.crash_controller(state, epoch=2)
    state, effects = _drain(system, state)
    result = _restore_outcome([*restart, *effects])
    _same(
        (result.intent, result.intent_action, result.result),
        (x, "abort", "bootstrap"),
        "intent, its action, the restore's result",
    )
    _check(x not in state.store.published, f"{x} was published")
    _check(state.store.intent is None, f"the intent record remains: {state.store.intent}")
    _same(state.controller.gate.data, frozenset(), "admission holders after the restore")


def s18_composed_restart_after_publish_releases_and_restores_that_snapshot(
    system: System,
) -> None:
    state = _start(system, trigger=True)
    x = _attempt_id(state)
    while not state.requests(Op.RESUME) and state.messages:
        state, _ = system.deliver(state, 0)
    _same(state.store.intent, (x, "published"), "the intent record before the crash")
    state, restart = system.crash_controller(state, epoch=2)
    state, effects = _drain(system, state)
    result = _restore_outcome([*restart, *effects])
    _same((result.intent_action, result.snapshot_id), ("release", x), "intent action, snapshot")
    for name in ("policy", "agent", "resources"):
        watermark = state.participant(name).fence.data.high_watermark
        kind = None if watermark is None else watermark.kind
        _same(kind, "rs", f"{name}'s high-watermark kind (a restore's id)")
    _check(state.store.intent is None, f"the intent record remains: {state.store.intent}")
    _same(state.controller.phase, S.IDLE, "phase after the restore")


def s19_composed_a_participant_restart_mid_restore_keeps_its_restored_state(
    system: System,
) -> None:
    state = _published_with_parked(system)
    state, restart = system.crash_controller(state, epoch=2)
    effects = list(restart)

    def resume_to_agent(state: SystemState) -> bool:
        return any(state.messages[i].call.participant == "agent" for i in state.requests(Op.RESUME))

    while not resume_to_agent(state) and state.messages:
        state, more = system.deliver(state, 0)
        effects.extend(more)
    _same(_fence(state, "agent"), FenceState.RESTORED_PAUSED, "the agent before its crash")
    state, more = system.crash_participant(state, "agent", "a2")  # the resume is lost
    effects.extend(more)
    _same(_fence(state, "agent"), FenceState.RESTORED_PAUSED, "the agent after its restart")
    restoring = state.controller.restoring
    rs = None if restoring is None else restoring.op_id
    if rs is None:
        raise ScenarioFailed("the restore ended with the agent's resume lost")
    state, more = system.fire_timer(state, restore_retry_timer(rs))
    calls = [(c.participant, c.op, c.op_id) for c in more if isinstance(c, Call)]
    _same(calls, [("agent", Op.RESUME, rs)], "calls of the restore's retry")
    state, more = _drain(system, state)
    effects.extend(more)
    _same(_restore_outcome(effects).result, "snapshot", "the restore's result")
    executions = _executions(state)
    _same(
        {(e.data.rollout_id, e.data.attempt, e.data.turn) for e in executions},
        {("g0/0", 1, 1), ("g0/1", 1, 1)},
        "executions resumed from their saved turn",
    )


SCENARIOS: Mapping[str, Scenario] = {
    run.__name__: run
    for run in (
        s1_a_deadline_cannot_expire_while_the_checkpoint_holds_the_registry,
        s2_two_holders_first_resume_keeps_clocks_stopped,
        s3_5xx_on_commit_is_retryable_and_aborts,
        s4_failed_resume_leaves_release_pending_and_is_retried_with_the_same_id,
        s5_failed_prepare_and_failed_rollback_abort_the_same_id_first,
        s6_prepare_applied_reply_lost_is_still_aborted,
        s7_pending_acks_at_capture_are_reflushed_inside_the_cut,
        s8_background_ack_failure_is_caught_by_the_strict_flush,
        s8_a_background_ack_failure_landing_during_the_strict_flush_does_not_fail_it,
        s9_optimizer_step_between_commit_and_capture_skips_and_aborts_same_id,
        s10_completion_after_the_flush_is_acked_and_prepare_retried_until_ready,
        s11_a_group_scored_sibling_is_never_retried_alone,
        s12_restart_only_continuations_are_discarded_before_resume,
        s12_composed_restart_only_continuation_is_discarded_in_restored_paused,
        s13_unknown_recovery_mode_is_refused_at_setup_naming_the_server,
        s14_unmanaged_multi_worker_server_is_refused_at_setup,
        s15_a_delayed_prepare_after_its_resume_is_stale,
        s16_restore_digest_mismatch_rejects_the_snapshot,
        s16_composed_restore_digest_mismatch_falls_back_to_the_older_snapshot,
        s17_retire_of_a_completed_unacked_execution_keeps_it_until_the_ack,
        s18_controller_crash_mid_checkpoint_aborts_that_id_on_restart,
        s18_composed_restart_aborts_the_in_flight_id_then_restores,
        s18_composed_restart_after_publish_releases_and_restores_that_snapshot,
        s19_a_participant_restart_mid_checkpoint_keeps_its_fence_and_aborts,
        s19_composed_a_participant_restart_mid_restore_keeps_its_restored_state,
    )
}
"""Every scenario script by name, S1 to S19 (a scenario may have several)."""
