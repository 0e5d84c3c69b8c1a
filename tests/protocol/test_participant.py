"""The pure participant: `handle` for each role through a checkpoint, refusals, restore,
S17 (retire of a completed result), S19 (crash: journal and incarnation), journaling."""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import replace
from typing import Any

import pytest

from quiesce.fsm import Value
from quiesce.mutants import KNOWN_BUGS
from quiesce.protocol import ParticipantState, from_journal, handle, journal_of, new_participant
from quiesce.protocol._errors import LocalProtocolError, UnsupportedOperation
from quiesce.protocol._messages import (
    AckReply,
    CommitReply,
    ErrorReply,
    ExecutionReply,
    PrepareReply,
    Receipt,
    RestoreReply,
    ResumeReply,
    RetireReply,
    StatusReply,
)
from quiesce.protocol.machines import (
    CONTROL_FENCE,
    FenceInput,
    FenceState,
)
from quiesce.protocol.participant import (
    PARTICIPANT_RULES,
    CancelExecution,
    JournalWrite,
    ParticipantRules,
    ReleaseWaiters,
    WakeExecutions,
    agent_policy_call_held,
    agent_policy_call_resumed,
    artifact_digest,
    may_start_outbound_call,
    mutation_finished,
    mutation_started,
    policy_call_finished,
    policy_call_started,
)

X, Y = "ck-1-5-step10", "ck-1-6-step11"
R = "rs-2-1-step10"


def agent(name: str = "agent-0", incarnation: str = "inc-1") -> ParticipantState:
    return new_participant({"name": name, "role": "agent"}, incarnation)


def call(state: ParticipantState, op: str, **request: Any) -> tuple[ParticipantState, Any, Any]:
    return handle(state, op, request or None, now=0.0)


def control(state: ParticipantState, op: str, op_id: str) -> tuple[ParticipantState, Any, Any]:
    return call(state, op, op_id=op_id, deadline_at=100.0)


def begin(state: ParticipantState, rollout: str = "r1", attempt: int = 0, **extra: Any) -> Any:
    request = {"rollout_id": rollout, "attempt": attempt, "group_id": "g1", "turns": 3, **extra}
    return call(state, "begin", **request)


def journaled(effects: tuple[Any, ...]) -> bool:
    return any(isinstance(e, JournalWrite) for e in effects)


def refused(reply: Any, code: str) -> ErrorReply:
    assert isinstance(reply, ErrorReply) and reply.code == code, reply
    return reply


# ------------------------------------------------------------------ agent checkpoint


def test_agent_checkpoint_not_ready_then_ready_commit_resume() -> None:
    state, reply, _ = begin(agent())
    assert isinstance(reply, ExecutionReply) and reply.state == "running"
    assert may_start_outbound_call(state)

    state, reply, effects = control(state, "prepare", X)
    assert isinstance(reply, PrepareReply) and reply.status == "not_ready"
    assert reply.blockers == ("park_requested:r1#0",)
    assert journaled(effects)  # the fence left idle: durable
    assert not may_start_outbound_call(state)

    state, reply, _ = call(state, "boundary", rollout_id="r1", attempt=0, turn=1)
    assert reply.state == "parked" and reply.turn == 1
    state, reply, effects = control(state, "prepare", X)
    assert reply.status == "ready" and reply.parked == 1 and reply.blockers == ()
    assert journaled(effects)  # prepared, with the recorded result

    state, reply, _ = control(state, "commit", X)
    assert isinstance(reply, CommitReply) and reply.status == "committed"
    artifact = base64.b64decode(reply.artifact)
    assert reply.digest == hashlib.sha256(artifact).hexdigest()
    document = json.loads(artifact)
    assert (document["participant"], document["role"], document["snapshot_id"]) == (
        "agent-0",
        "agent",
        X,
    )
    [saved] = reply.continuations
    assert (saved.rollout_id, saved.attempt, saved.turn, saved.turns) == ("r1", 0, 1, 3)
    assert not saved.restart_only_dependency

    state, reply, effects = control(state, "resume", X)
    assert isinstance(reply, ResumeReply) and str(reply.retired) == X
    assert WakeExecutions((("r1", 0),)) in effects
    state, status, _ = call(state, "status")
    assert isinstance(status, StatusReply)
    assert (status.fence, str(status.high_watermark), status.live_executions) == ("idle", X, 1)


def test_commit_is_deterministic_and_replayed_from_the_record() -> None:
    state, _, _ = begin(agent())
    state, _, _ = control(state, "prepare", X)
    state, _, _ = call(state, "boundary", rollout_id="r1", attempt=0, turn=2)
    state, _, _ = control(state, "prepare", X)
    first, reply, _ = control(state, "commit", X)
    _, same, _ = control(state, "commit", X)
    assert (reply.artifact, reply.digest) == (same.artifact, same.digest)
    again, replayed, effects = control(first, "commit", X)
    assert again == first and replayed == reply and not journaled(effects)


def test_a_restart_only_dependency_is_listed_with_the_continuation() -> None:
    state, _, _ = begin(agent())
    state, _, _ = control(state, "prepare", X)
    state, _, _ = call(
        state, "boundary", rollout_id="r1", attempt=0, turn=1, restart_only_dependency=True
    )
    state, _, _ = control(state, "prepare", X)
    _, reply, _ = control(state, "commit", X)
    assert reply.continuations[0].restart_only_dependency


def test_frozen_executions_count_as_ready_and_a_policy_resume_parks_them_again() -> None:
    state, _, _ = begin(agent())
    state, reply, _ = agent_policy_call_held(state, "r1", 0)
    assert reply.state == "frozen"
    state, reply, _ = control(state, "prepare", X)
    assert reply.status == "ready" and reply.frozen == 1
    state, reply, _ = agent_policy_call_resumed(state, "r1", 0)
    assert reply.state == "park_requested"  # its own fence is still closed
    _, reply, _ = control(state, "commit", X)
    assert reply.status == "failed" and "park_requested:r1#0" in reply.reason


def test_begin_is_refused_while_the_fence_is_not_idle() -> None:
    state, _, _ = control(agent(), "prepare", X)
    after, reply, effects = begin(state)
    refused(reply, "admission_closed")
    assert after == state and effects == ()


def test_begin_refuses_a_live_key_and_a_retired_key() -> None:
    state, _, _ = begin(agent())
    refused(begin(state)[1], "duplicate_execution")
    state, reply, effects = call(state, "retire", rollout_id="r1", attempt=0)
    assert reply.outcome == "tombstoned" and CancelExecution("r1", 0) in effects
    refused(begin(state)[1], "stale_attempt")
    state, reply, _ = begin(state, attempt=1)
    assert reply.state == "running"


def test_a_late_finish_of_a_tombstoned_execution_is_dropped() -> None:
    state, _, _ = begin(agent())
    state, _, _ = call(state, "retire", rollout_id="r1", attempt=0)
    after, reply, effects = call(state, "finish", rollout_id="r1", attempt=0, result={"r": 1})
    assert reply.state == "tombstoned" and reply.receipt is None
    assert after == state and effects == ()


def test_a_retire_that_overtakes_begin_tombstones_the_key() -> None:
    state, reply, effects = call(agent(), "retire", rollout_id="r1", attempt=0)
    assert reply.outcome == "tombstoned" and journaled(effects)
    assert not any(isinstance(e, CancelExecution) for e in effects)
    refused(begin(state)[1], "stale_attempt")
    assert call(state, "retire", rollout_id="r1", attempt=0)[1].outcome == "already_retired"


# ------------------------------------------------------------------ S17 and ACKs


def finished(state: ParticipantState, rollout: str = "r1") -> tuple[ParticipantState, Any]:
    state, _, _ = begin(state, rollout)
    state, reply, effects = call(state, "finish", rollout_id=rollout, attempt=0, result={"r": 1})
    assert reply.state == "completed" and journaled(effects)
    return state, reply.receipt


def test_s17_retire_of_a_completed_result_keeps_it_until_its_exact_ack() -> None:
    state, receipt = finished(agent())
    after, reply, effects = call(state, "retire", rollout_id="r1", attempt=0)
    assert isinstance(reply, RetireReply) and reply.outcome == "completed_unacknowledged"
    assert reply.receipt == receipt
    assert after == state and effects == ()
    _, prepare, _ = control(after, "prepare", X)
    assert prepare.status == "not_ready" and prepare.completed_unacknowledged == 1
    assert prepare.blockers == ("completed_unacknowledged:r1#0",)

    wrong = receipt.model_copy(update={"receipt": "r1#0:forged"})
    state, reply, effects = call(after, "ack", receipts=[wrong.model_dump()])
    assert isinstance(reply, AckReply) and reply.unknown == (wrong,) and not journaled(effects)
    state, reply, effects = call(state, "ack", receipts=[receipt.model_dump()])
    assert reply.acknowledged == (receipt,) and journaled(effects)
    again, reply, effects = call(state, "ack", receipts=[receipt.model_dump()])
    assert reply.acknowledged == (receipt,) and again == state and not journaled(effects)
    _, prepare, _ = control(state, "prepare", X)
    assert prepare.status == "ready"
    refused(begin(state)[1], "stale_attempt")


def test_an_ack_batch_naming_a_running_execution_lists_it_unknown_and_applies_the_rest() -> None:
    # docs/wire.md: an unknown receipt is listed in `unknown`; the batch is not refused.
    state, receipt = finished(agent())
    state, _, _ = begin(state, "r2")
    running = Receipt(rollout_id="r2", attempt=0, receipt="r2#0:guess")
    after, reply, effects = call(
        state, "ack", receipts=[running.model_dump(), receipt.model_dump()]
    )
    assert isinstance(reply, AckReply), reply
    assert reply.unknown == (running,) and reply.acknowledged == (receipt,)
    assert journaled(effects)
    _, status, _ = call(after, "status")
    assert status.live_executions == 1 and status.completed_unacknowledged == 0


# ------------------------------------------------------------------ refusals


def test_another_id_conflicts_carrying_the_active_id_and_changes_nothing() -> None:
    state, _, _ = control(agent(), "prepare", X)
    after, reply, effects = control(state, "prepare", Y)
    error = refused(reply, "checkpoint_conflict")
    assert str(error.active_id) == X and X in error.message
    assert after == state and effects == ()


def test_s15_a_delayed_prepare_after_its_resume_is_stale() -> None:
    state, reply, effects = control(agent(), "resume", X)  # never prepared: retired anyway
    assert str(reply.retired) == X and journaled(effects)
    after, reply, effects = control(state, "prepare", X)
    error = refused(reply, "stale_checkpoint")
    assert str(error.high_watermark) == X
    assert after == state and after.fence.state is FenceState.IDLE and effects == ()
    _, replay, _ = control(state, "resume", X)
    assert isinstance(replay, ResumeReply)


# ------------------------------------------------------------------ rules: the tables a step fires


def test_a_derived_fence_table_runs_through_handle_and_the_default_is_the_protocols() -> None:
    stale = next(
        i
        for i, row in enumerate(CONTROL_FENCE.rows)
        if row.input is FenceInput.RECV_PREPARE and row.guard == "stale_id"
    )
    rules = ParticipantRules(fence=CONTROL_FENCE.without_row(stale))
    state, _, _ = control(agent(), "resume", X)
    _, reply, _ = handle(state, "prepare", {"op_id": X, "deadline_at": 9.0}, rules=rules)
    assert isinstance(reply, PrepareReply) and reply.status == "ready"  # the stale id passes
    _, reply, _ = handle(state, "prepare", {"op_id": X, "deadline_at": 9.0})
    refused(reply, "stale_checkpoint")
    assert ParticipantRules() == PARTICIPANT_RULES


def test_a_derived_agent_table_runs_through_handle() -> None:
    # The known bug S17: retire tombstones a completed, un-ACKed execution.
    released = KNOWN_BUGS["S17_retire_releases_completed"].table
    assert released is not None
    rules = ParticipantRules(agent=released())
    started = {"rollout_id": "r1", "attempt": 0, "group_id": "g1", "turns": 1}
    state, _, _ = handle(agent(), "begin", started, rules=rules)
    state, _, _ = handle(state, "finish", {"rollout_id": "r1", "attempt": 0}, rules=rules)
    retire = {"rollout_id": "r1", "attempt": 0}
    _, reply, _ = handle(state, "retire", retire, rules=rules)
    assert isinstance(reply, RetireReply) and reply.outcome == "tombstoned"
    _, reply, _ = handle(state, "retire", retire)
    assert isinstance(reply, RetireReply) and reply.outcome == "completed_unacknowledged"


def test_invalid_phase_is_typed() -> None:
    state, reply, _ = control(agent(), "commit", X)
    refused(reply, "invalid_phase")
    state, _, _ = begin(agent())
    state, _, _ = control(state, "prepare", X)
    state, _, _ = call(state, "boundary", rollout_id="r1", attempt=0, turn=1)
    after, reply, _ = call(state, "finish", rollout_id="r1", attempt=0, result={})
    assert refused(reply, "invalid_phase").message.startswith("finish")
    assert after == state


@pytest.mark.parametrize(
    ("op", "request_", "field"),
    [
        ("prepare", {"deadline_at": 1.0}, "op_id"),
        ("prepare", {"op_id": "checkpoint-7", "deadline_at": 1.0}, "op_id"),
        ("prepare", {"op_id": X, "deadline_at": 1.0, "extra": 1}, "extra"),
        ("begin", {"rollout_id": "r1", "attempt": -1, "group_id": "g", "turns": 1}, "attempt"),
        ("ack", "{not json", "<body>"),
        ("teleport", {}, "op"),
    ],
)
def test_a_malformed_request_is_refused_typed_and_changes_nothing(
    op: str, request_: Any, field: str
) -> None:
    state, _, _ = begin(agent())
    after, reply, effects = handle(state, op, request_)
    error = refused(reply, "malformed_request")
    assert repr(field) in error.message or field == "<body>"
    assert after == state and effects == ()


def test_requests_may_be_json_text() -> None:
    _, reply, _ = handle(agent(), "prepare", json.dumps({"op_id": X, "deadline_at": 1.0}))
    assert reply.status == "ready"


def test_role_operations_are_refused_on_other_roles_and_auxiliary_policies_are_unfenced() -> None:
    policy = new_participant({"name": "p", "role": "policy"}, "inc")
    refused(begin(policy)[1], "unsupported_operation")
    aux = new_participant({"name": "judge", "role": "policy", "instance_role": "auxiliary"}, "i")
    refused(control(aux, "prepare", X)[1], "unsupported_operation")
    assert call(aux, "capabilities")[1].instance_role == "auxiliary"
    aux, admitted = policy_call_started(aux, "c1")
    assert admitted
    with pytest.raises(UnsupportedOperation):  # typed, not an assert
        policy_call_started(agent(), "c1")


def test_a_state_found_mid_operation_is_a_local_protocol_error() -> None:
    state, _, _ = control(agent(), "prepare", X)
    fence = Value(FenceState.COMMITTING, state.fence.data)
    with pytest.raises(LocalProtocolError):
        control(replace(state, fence=fence), "commit", X)


# ------------------------------------------------------------------ policy, resources


def test_policy_drains_then_pauses_and_resume_releases_waiters() -> None:
    state = new_participant({"name": "policy-0", "role": "policy"}, "inc-1")
    state, admitted = policy_call_started(state, "c1")
    assert admitted
    state, reply, _ = control(state, "prepare", X)
    assert reply.status == "not_ready" and reply.blockers == ("in_flight_calls:1",)
    state, admitted = policy_call_started(state, "c2")
    assert not admitted  # waits: the agent's execution is frozen
    state = policy_call_finished(state, "c1")
    state, reply, _ = control(state, "prepare", X)
    assert reply.status == "ready"
    state, reply, _ = control(state, "commit", X)
    assert reply.artifact == "" and reply.digest == artifact_digest(b"")
    state, _, effects = control(state, "resume", X)
    assert ReleaseWaiters(("c2",)) in effects
    assert call(state, "status")[1].role_state == "accepting"


def resources(mode: str = "export_restore", incarnation: str = "inc-1") -> ParticipantState:
    config = {"name": "res-0", "role": "resources", "recovery_mode": mode}
    return new_participant(config, incarnation)


def test_resources_freeze_export_and_restore_with_digest_check() -> None:
    state, admitted = mutation_started(resources(), "m1", "r0")
    assert admitted
    state, reply, _ = control(state, "prepare", X)
    assert reply.blockers == ("in_flight_mutations:1",)
    state = mutation_finished(state, "m1", "r0")
    state, reply, _ = control(state, "prepare", X)
    assert reply.status == "ready"
    state, commit, _ = control(state, "commit", X)
    assert json.loads(base64.b64decode(commit.artifact))["state"] == {"revisions": [["r0", 1]]}

    fresh = resources(incarnation="inc-2")
    restore = {"op_id": R, "deadline_at": 1.0, "snapshot_id": X, "artifact": commit.artifact}
    bad, reply, _ = call(fresh, "restore", **restore, expected_digest="0" * 64)
    assert isinstance(reply, RestoreReply) and reply.status == "failed"
    assert reply.digest == commit.digest and "expected" in reply.reason
    assert bad.fence.state is FenceState.RESTORE_FAILED_PAUSED and bad.fence.data.recorded == ()
    good, reply, _ = call(bad, "restore", **restore, expected_digest=commit.digest)
    assert reply.status == "restored" and reply.digest == commit.digest
    assert good.fence.state is FenceState.RESTORED_PAUSED
    good, admitted = mutation_started(good, "m2", "r0")
    assert not admitted  # frozen until resume
    good, _, effects = control(good, "resume", R)
    assert ReleaseWaiters(("m2",)) in effects


def test_restore_refuses_an_artifact_of_another_snapshot_or_participant() -> None:
    state = resources()
    state, _, _ = control(state, "prepare", X)
    _, commit, _ = control(state, "commit", X)
    wrong_snapshot = {"snapshot_id": Y, "artifact": commit.artifact}
    _, reply, _ = call(
        resources(),
        "restore",
        op_id=R,
        deadline_at=1.0,
        expected_digest=commit.digest,
        **wrong_snapshot,
    )
    assert reply.status == "failed" and "snapshot_id" in reply.reason
    not_base64 = {"snapshot_id": X, "artifact": "!!", "expected_digest": commit.digest}
    _, reply, _ = call(resources(), "restore", op_id=R, deadline_at=1.0, **not_base64)
    assert reply.status == "failed" and "base64" in reply.reason


def test_restart_only_resources_export_nothing() -> None:
    state, _, _ = control(resources("restart_only"), "prepare", X)
    _, commit, _ = control(state, "commit", X)
    assert commit.artifact == "" and commit.digest == artifact_digest(b"")


# ------------------------------------------------------------------ agent restore


def committed_agent() -> CommitReply:
    state, _, _ = begin(agent())
    state, _, _ = control(state, "prepare", X)
    state, _, _ = call(state, "boundary", rollout_id="r1", attempt=0, turn=2)
    state, _, _ = control(state, "prepare", X)
    reply: CommitReply = control(state, "commit", X)[1]
    return reply


def test_agent_restore_discard_and_claim_once() -> None:
    commit = committed_agent()
    restore = {
        "op_id": R,
        "deadline_at": 1.0,
        "snapshot_id": X,
        "artifact": commit.artifact,
        "expected_digest": commit.digest,
    }
    state, reply, effects = call(agent(incarnation="inc-2"), "restore", **restore)
    assert reply.status == "restored" and len(reply.continuations) == 1 and journaled(effects)
    refused(call(state, "discard", op_id=Y, rollout_id="r1", attempt=0)[1], "checkpoint_conflict")
    state, _, _ = control(state, "resume", R)
    refused(begin(state, attempt=1, resume_from_turn=1)[1], "unknown_execution")  # wrong turn
    state, reply, _ = begin(state, attempt=1, resume_from_turn=2)
    assert reply.state == "running" and reply.turn == 2
    refused(begin(state, "r1", 2, resume_from_turn=2)[1], "unknown_execution")  # claimed once
    refused(begin(state, "r1", 0)[1], "stale_attempt")  # attempt 0 is tombstoned


def test_discard_only_in_restored_paused_with_the_same_id() -> None:
    commit = committed_agent()
    restore = {
        "op_id": R,
        "deadline_at": 1.0,
        "snapshot_id": X,
        "artifact": commit.artifact,
        "expected_digest": commit.digest,
    }
    refused(call(agent(), "discard", op_id=R, rollout_id="r1", attempt=0)[1], "invalid_phase")
    state, _, _ = call(agent(), "restore", **restore)
    state, reply, effects = call(state, "discard", op_id=R, rollout_id="r1", attempt=0)
    assert reply.continuations == () and reply.digest == commit.digest and journaled(effects)
    again, reply, effects = call(state, "discard", op_id=R, rollout_id="r1", attempt=0)
    assert again == state and effects == ()  # idempotent


# ------------------------------------------------------------------ S19 and the journal


def test_s19_a_crash_keeps_exactly_the_journal_and_drops_running_executions() -> None:
    state, receipt = finished(agent())  # completed, unACKed
    state, _, _ = call(state, "retire", rollout_id="r9", attempt=3)  # a refusal key
    state, _, _ = begin(state, "r2")  # running: dies with the process
    state, reply, effects = control(state, "prepare", X)
    assert reply.status == "not_ready"
    journal = [e for e in effects if isinstance(e, JournalWrite)][-1].journal
    assert journal == journal_of(state)

    restarted = from_journal(journal.model_dump_json(), "inc-2")
    assert restarted.incarnation == "inc-2"
    assert restarted.fence.state is FenceState.PREPARING
    assert str(restarted.fence.data.active) == X
    _, status, _ = call(restarted, "status")
    assert (status.live_executions, status.completed_unacknowledged) == (0, 1)
    assert call(restarted, "retire", rollout_id="r9", attempt=3)[1].outcome == "already_retired"
    refused(begin(restarted, "r9", 3)[1], "admission_closed")  # the fence came back closed
    refused(control(restarted, "prepare", Y)[1], "checkpoint_conflict")
    _, reply, _ = call(restarted, "retire", rollout_id="r1", attempt=0)
    assert reply.outcome == "completed_unacknowledged" and reply.receipt == receipt
    restarted, reply, _ = control(restarted, "resume", X)
    again = from_journal(journal_of(restarted), "inc-3")
    assert refused(control(again, "prepare", X)[1], "stale_checkpoint").incarnation == "inc-3"
    refused(begin(again, "r9", 3)[1], "stale_attempt")


def test_replays_after_a_restart_carry_the_new_incarnation() -> None:
    state, _, _ = control(agent(), "prepare", X)
    restarted = from_journal(journal_of(state), "inc-2")
    _, reply, _ = control(restarted, "prepare", X)
    assert reply.status == "ready" and reply.incarnation == "inc-2"


@pytest.mark.parametrize(
    ("caught", "comes_back"),
    [
        (FenceState.COMMITTING, FenceState.PREPARED),
        (FenceState.RESTORING, FenceState.RESTORE_FAILED_PAUSED),
    ],
)
def test_a_crash_mid_operation_comes_back_as_that_operation_failed(
    caught: FenceState, comes_back: FenceState
) -> None:
    state, _, _ = control(resources(), "prepare", X)
    journal = journal_of(state).model_copy(update={"fence": caught})
    restarted = from_journal(journal, "inc-2")
    assert restarted.fence.state is comes_back
    assert call(restarted, "status")[1].role_state == "frozen"  # admission stays closed


def test_journal_writes_exactly_when_the_durable_part_changes() -> None:
    state = agent()
    steps: list[tuple[str, dict[str, Any], bool]] = [
        ("status", {}, False),
        ("begin", {"rollout_id": "r1", "attempt": 0, "group_id": "g", "turns": 2}, False),
        ("boundary", {"rollout_id": "r1", "attempt": 0, "turn": 1}, False),
        ("finish", {"rollout_id": "r1", "attempt": 0, "result": {}}, True),
        ("prepare", {"op_id": X, "deadline_at": 1.0}, True),
        ("prepare", {"op_id": X, "deadline_at": 1.0}, False),  # still not ready: unchanged
        ("prepare", {"op_id": Y, "deadline_at": 1.0}, False),  # refused
        ("retire", {"rollout_id": "r1", "attempt": 0}, False),  # completed: holds
        ("resume", {"op_id": X, "deadline_at": 1.0}, True),
        ("resume", {"op_id": X, "deadline_at": 1.0}, False),  # replayed
        ("retire", {"rollout_id": "r5", "attempt": 0}, True),  # new refusal key
        ("retire", {"rollout_id": "r5", "attempt": 0}, False),
    ]
    for op, request, expected in steps:
        before = journal_of(state)
        state, reply, effects = handle(state, op, request)
        assert journaled(effects) is expected, (op, request, reply)
        assert (journal_of(state) != before) is expected, (op, request)
