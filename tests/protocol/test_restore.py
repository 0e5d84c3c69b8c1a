"""M9 restore: the table row by row, and the pure planning (intent, selection, S12, S16,
redispatch)."""

import itertools
from typing import Any

import pytest

from quiesce.fsm import GuardRejected, TransitionNotAllowed, Value
from quiesce.protocol import Ledger, RecoveryLevel
from quiesce.protocol._ids import OpId
from quiesce.protocol._messages import Continuation, RestoreReply
from quiesce.protocol.controller.lowlevel import (
    DiscardContinuation,
    EffectiveLevel,
    LevelPlan,
    NewGroup,
    Rejection,
    RestoreMode,
    Retire,
    SelectionKind,
    SnapshotCandidate,
    SnapshotCondition,
    SourceUnreadable,
    TrainerAnchor,
    UnresolvedFinalization,
    VerdictAction,
    judge_restore,
    plan_discards,
    plan_redispatch,
    select_snapshot,
)
from quiesce.protocol.machines import (
    PHASE_ORDER,
    RESTORE,
    AttemptState,
    GroupState,
    IntentAction,
    IntentDecision,
    IntentRecord,
    Phase,
    PublishedState,
    RestoreData,
    RestoreInput,
    RestoreState,
    decide_intent,
)

S, I = RestoreState, RestoreInput  # noqa: E741  (I for "input", as in the engine)
TURN, SIBLING, GROUP = RecoveryLevel.TURN, RecoveryLevel.SIBLING, RecoveryLevel.PROMPT_GROUP
NONE = IntentDecision(IntentAction.NONE, None, "no_intent_record")
ABORT = IntentDecision(IntentAction.ABORT, OpId(1, 3, 7), "not_published")


def at(state: RestoreState, **data: Any) -> Value[RestoreState, RestoreData]:
    return Value(state, RestoreData(**data))


def names(effects: tuple[Any, ...]) -> list[str]:
    return [e.name for e in effects]


# ------------------------------------------------------------------ table rows


def test_happy_path_through_every_state() -> None:
    value = RESTORE.start()
    trail = [value.state]
    for event, arg in [
        (I.INTENT_READ, NONE),
        (I.SNAPSHOT_SELECTED, "ck-1-3-step7"),
        (I.RECV_RESTORED, None),
        (I.DISCARD_BEGIN, 1),
        (I.RECV_DISCARDED, None),
        (I.RECV_RESUMED, None),
        (I.REDISPATCHED, None),
    ]:
        value, _ = RESTORE.step(value, event, arg)
        trail.append(value.state)
    assert trail == [
        S.FINISHING_INTENT,
        S.SELECTING,
        S.RESTORING,
        S.RESTORED_PAUSED,
        S.DISCARDING,
        S.RESUMING,
        S.REDISPATCHING,
        S.IDLE,
    ]


def test_in_flight_intent_is_finished_before_selecting() -> None:
    value, effects = RESTORE.step(RESTORE.start(), I.INTENT_READ, ABORT)
    assert value.state is S.FINISHING_INTENT and names(effects) == ["finish_in_flight"]
    with pytest.raises(TransitionNotAllowed):
        RESTORE.step(value, I.SNAPSHOT_SELECTED, "ck-1-3-step7")
    value, effects = RESTORE.step(value, I.CALL_FAILED)
    assert value.state is S.FINISHING_INTENT and names(effects) == ["retry_same_op"]
    value, effects = RESTORE.step(value, I.INTENT_FINISHED)
    assert value.state is S.SELECTING and names(effects) == ["clear_intent"]


@pytest.mark.parametrize("state", [S.FINISHING_INTENT, S.SELECTING])
def test_unreadable_source_fails_the_restore(state: RestoreState) -> None:
    value, effects = RESTORE.step(at(state), I.SOURCE_UNREADABLE)
    assert value.state is S.RESTORE_FAILED and names(effects) == ["report_candidates"]


def test_fresh_start_skips_participants_and_redispatches() -> None:
    value, effects = RESTORE.step(at(S.SELECTING), I.FRESH_START)
    assert value.state is S.REDISPATCHING and names(effects) == ["start_at_anchor"]


def test_retryable_failures_retry_same_op_then_fall_back_to_selecting() -> None:
    value, _ = RESTORE.step(at(S.SELECTING, max_retries=2), I.SNAPSHOT_SELECTED, "ck-1-5-step7")
    for retries in (1, 2):
        value, effects = RESTORE.step(value, I.CALL_FAILED)
        assert value.state is S.RESTORING and value.data.retries == retries
        assert names(effects) == ["retry_same_op"]
    value, effects = RESTORE.step(value, I.CALL_FAILED)
    assert value.state is S.SELECTING and names(effects) == ["abort_restore"]
    assert value.data.rejected == (("ck-1-5-step7", "retries_exhausted"),)
    assert RESTORE.check_invariants(value) == []


def test_s16_rejection_aborts_the_restore_and_records_the_reason() -> None:
    restoring = at(S.RESTORING, snapshot="ck-1-5-step7", retries=1)
    value, effects = RESTORE.step(restoring, I.RESTORE_REJECTED, "digest_mismatch")
    assert value == at(S.SELECTING, rejected=(("ck-1-5-step7", "digest_mismatch"),))
    assert names(effects) == ["abort_restore"]


def test_nothing_to_discard_goes_straight_to_resuming() -> None:
    value, effects = RESTORE.step(at(S.RESTORED_PAUSED), I.DISCARD_BEGIN, 0)
    assert value.state is S.RESUMING and names(effects) == ["send_resume"]


@pytest.mark.parametrize("state", [S.DISCARDING, S.RESUMING])
def test_failed_discard_or_resume_calls_are_retried_in_place(state: RestoreState) -> None:
    value, effects = RESTORE.step(at(state), I.CALL_FAILED)
    assert value.state is state and names(effects) == ["retry_same_op"]


def test_resumed_drains_acks_then_redispatches() -> None:
    value, effects = RESTORE.step(at(S.RESUMING), I.RECV_RESUMED)
    assert value.state is S.REDISPATCHING and names(effects) == ["drain_acks", "redispatch"]


def test_every_unmapped_pair_is_refused() -> None:
    refused = 0
    for state, event in itertools.product(RestoreState, RestoreInput):
        if RESTORE.disposition(state, event) != "forbidden":
            continue
        with pytest.raises(TransitionNotAllowed):
            RESTORE.step(at(state), event, NONE)
        refused += 1
    assert refused == 9 * 12 - 16  # 16 mapped pairs
    assert RESTORE.finals == {S.IDLE, S.RESTORE_FAILED}


def test_phase_orders_are_section_3() -> None:
    def roles(phase: Phase) -> list[str]:
        return [slot.role for slot in PHASE_ORDER[phase] if not slot.conflicting]

    assert roles(Phase.PREPARE) == roles(Phase.RESTORE) == ["policy", "agent", "resources"]
    assert roles(Phase.COMMIT) == ["agent", "policy", "resources"]
    assert roles(Phase.RESUME) == roles(Phase.ABORT) == ["resources", "policy", "agent"]
    assert roles(Phase.DISCARD) == ["agent"]
    # An abort resumes the conflicting ids first (S5), in the resume order too.
    conflicting = [slot.role for slot in PHASE_ORDER[Phase.ABORT] if slot.conflicting]
    assert conflicting == ["resources", "policy", "agent"]
    assert all(slot.conflicting for slot in PHASE_ORDER[Phase.ABORT][:3])


# ------------------------------------------------------------------ (a) intent record


def test_intent_decision_three_ways_and_none() -> None:
    intent = IntentRecord(OpId(2, 4, 9), "publishing")
    assert decide_intent(intent, PublishedState.VERIFIED) == IntentDecision(
        IntentAction.RELEASE, OpId(2, 4, 9), "published_and_verified"
    )
    assert decide_intent(intent, PublishedState.UNVERIFIABLE).action is (
        IntentAction.QUARANTINE_AND_ABORT
    )
    assert decide_intent(intent, PublishedState.ABSENT).action is IntentAction.ABORT
    assert decide_intent(None, None).action is IntentAction.NONE
    with pytest.raises(ValueError, match="PublishedState"):
        decide_intent(intent, None)


def test_the_store_decides_not_the_recorded_phase() -> None:
    # A crash between the rename and the intent update: the phase still says preparing.
    intent = IntentRecord(OpId(2, 4, 9), "preparing")
    assert decide_intent(intent, PublishedState.VERIFIED).action is IntentAction.RELEASE


# ------------------------------------------------------------------ (b) selection

FP = "fp-a"
ANCHOR = TrainerAnchor(step=3, version="v3", dataloader_position=48)


def cand(seq: int, **kw: Any) -> SnapshotCandidate:
    fields: dict[str, Any] = {"trainer_step": 3, "trainer_version": "v3", "fingerprint": FP}
    fields.update(kw)
    return SnapshotCandidate(OpId(1, seq, fields["trainer_step"]), **fields)


def reasons(selection: Any) -> dict[int, str]:
    return {r.snapshot_id.seq: r.reason for r in selection.rejected}


def test_latest_takes_the_newest_match_and_lists_every_other_candidate() -> None:
    candidates = [
        cand(1),
        cand(2, trainer_boundary=True),
        cand(3, condition=SnapshotCondition.CORRUPT),
        cand(4, condition=SnapshotCondition.HALF_WRITTEN),
        cand(5, condition=SnapshotCondition.QUARANTINED),
        cand(6, fingerprint="fp-b"),
        cand(7, trainer_step=4),
        cand(8, trainer_version="v4"),
        cand(0),
    ]
    selection = select_snapshot(ANCHOR, candidates, mode="latest", fingerprint=FP)
    assert selection.kind is SelectionKind.SNAPSHOT
    assert selection.snapshot is not None and selection.snapshot.snapshot_id.seq == 2
    assert selection.input is I.SNAPSHOT_SELECTED
    assert reasons(selection) == {
        8: "trainer_version_mismatch",
        7: "trainer_step_mismatch",
        6: "fingerprint_mismatch",
        5: "quarantined",
        4: "half_written",
        3: "corrupt",
        1: "older_than_selected",
        0: "older_than_selected",
    }


def test_trainer_checkpoint_mode_takes_only_the_one_at_the_anchor() -> None:
    candidates = [cand(1, trainer_boundary=True), cand(2)]
    selection = select_snapshot(
        ANCHOR, candidates, mode=RestoreMode.TRAINER_CHECKPOINT, fingerprint=FP
    )
    assert selection.snapshot is not None and selection.snapshot.snapshot_id.seq == 1
    assert reasons(selection) == {2: "not_at_trainer_anchor"}
    none_at_anchor = select_snapshot(ANCHOR, [cand(2)], mode="trainer_checkpoint", fingerprint=FP)
    assert none_at_anchor.kind is SelectionKind.FRESH_START


def test_corrupt_is_never_selected_even_when_alone() -> None:
    for condition in (SnapshotCondition.CORRUPT, SnapshotCondition.HALF_WRITTEN):
        selection = select_snapshot(
            ANCHOR, [cand(9, condition=condition)], mode="latest", fingerprint=FP
        )
        assert selection.snapshot is None and reasons(selection) == {9: condition.value}


def test_no_match_starts_fresh_at_the_anchor_listing_why() -> None:
    selection = select_snapshot(ANCHOR, [cand(1, fingerprint="old")], mode="latest", fingerprint=FP)
    assert selection.kind is SelectionKind.FRESH_START
    assert selection.anchor == ANCHOR and selection.input is I.FRESH_START
    assert selection.rejected == (Rejection(OpId(1, 1, 3), "fingerprint_mismatch"),)


def test_bootstrap_only_at_step_zero() -> None:
    zero = TrainerAnchor(step=0, version="v0")
    assert select_snapshot(zero, [], mode="latest", fingerprint=FP).kind is SelectionKind.BOOTSTRAP
    assert select_snapshot(None, [cand(1)], mode="latest", fingerprint=FP).kind is (
        SelectionKind.BOOTSTRAP
    )
    assert reasons(select_snapshot(None, [cand(1)], mode="latest", fingerprint=FP)) == {
        1: "no_trainer_anchor"
    }
    assert select_snapshot(ANCHOR, [], mode="latest", fingerprint=FP).kind is (
        SelectionKind.FRESH_START
    )
    at_zero = select_snapshot(
        zero, [cand(1, trainer_step=0, trainer_version="v0")], mode="latest", fingerprint=FP
    )
    assert at_zero.kind is SelectionKind.SNAPSHOT  # a match at step 0 is restored, not bootstrapped


def test_restore_failed_only_when_anchor_or_store_unreadable() -> None:
    store = SourceUnreadable("snapshot_store", "EIO")
    anchor = SourceUnreadable("trainer_anchor", "missing bucket")
    failed = select_snapshot(ANCHOR, store, mode="latest", fingerprint=FP)
    assert failed.kind is SelectionKind.RESTORE_FAILED and failed.failure == store
    assert failed.input is I.SOURCE_UNREADABLE
    failed = select_snapshot(anchor, [cand(1)], mode="latest", fingerprint=FP)
    assert failed.kind is SelectionKind.RESTORE_FAILED and failed.failure == anchor
    # Nothing else fails: every candidate bad still starts fresh.
    bad = [cand(1, condition=SnapshotCondition.CORRUPT), cand(2, fingerprint="x")]
    assert select_snapshot(ANCHOR, bad, mode="latest", fingerprint=FP).kind is (
        SelectionKind.FRESH_START
    )


def test_s16_earlier_rejection_falls_back_to_an_older_snapshot() -> None:
    candidates = [cand(1), cand(2)]
    first = select_snapshot(ANCHOR, candidates, mode="latest", fingerprint=FP)
    assert first.snapshot is not None
    value, _ = RESTORE.step(at(S.SELECTING), I.SNAPSHOT_SELECTED, str(first.snapshot.snapshot_id))
    value, _ = RESTORE.step(value, I.RESTORE_REJECTED, "digest_mismatch")
    second = select_snapshot(
        ANCHOR, candidates, mode="latest", fingerprint=FP, rejected=value.data.rejected
    )
    assert second.snapshot is not None and second.snapshot.snapshot_id.seq == 1
    assert reasons(second) == {2: "digest_mismatch"}


# ------------------------------------------------------------------ (c) verification

OP = OpId(2, 1, 3, "rs")


def reply(
    name: str, digest: str, status: str = "restored", conts: tuple[Continuation, ...] = ()
) -> RestoreReply:
    return RestoreReply(
        participant=name,
        incarnation="i",
        op_id=OP,
        status=status,
        digest=digest,
        continuations=conts,  # type: ignore[arg-type]
    )


EXPECTED = {"policy-0": "d-p", "agent-0": "d-a"}


def test_matching_digests_are_done() -> None:
    verdict = judge_restore(
        EXPECTED, {"policy-0": reply("policy-0", "d-p"), "agent-0": reply("agent-0", "d-a")}, {}
    )
    assert verdict.action is VerdictAction.DONE and verdict.input is I.RECV_RESTORED


def test_s16_digest_mismatch_rejects_even_with_other_failures() -> None:
    replies = {"policy-0": reply("policy-0", "d-p"), "agent-0": reply("agent-0", "WRONG")}
    verdict = judge_restore(EXPECTED, replies, {"resources-0": True})
    assert verdict.action is VerdictAction.REJECT and verdict.reason == "digest_mismatch"
    assert verdict.mismatches == (("agent-0", "d-a", "WRONG"),)
    assert verdict.input is I.RESTORE_REJECTED


def test_retryable_failures_retry_same_op_and_fatal_ones_reject() -> None:
    verdict = judge_restore(EXPECTED, {"policy-0": reply("policy-0", "d-p")}, {"agent-0": True})
    assert verdict.action is VerdictAction.RETRY and verdict.retry == ("agent-0",)
    assert verdict.input is I.CALL_FAILED
    failed_reply = judge_restore(EXPECTED, {"policy-0": reply("policy-0", "", "failed")}, {})
    assert failed_reply.action is VerdictAction.RETRY and failed_reply.retry == ("policy-0",)
    fatal = judge_restore(EXPECTED, {}, {"agent-0": False, "policy-0": True})
    assert fatal.action is VerdictAction.REJECT and fatal.reason == "restore_failed:agent-0"


def test_missing_replies_are_pending() -> None:
    verdict = judge_restore(EXPECTED, {"policy-0": reply("policy-0", "d-p")}, {})
    assert verdict.action is VerdictAction.PENDING and verdict.input is None


def test_restored_executions_must_be_owned_by_the_ledger() -> None:
    ledger, _ = Ledger().open_group("g0", 1)
    owned = Continuation(rollout_id="g0/0", attempt=0, group_id="g0", turn=1, turns=2)
    stray = Continuation(rollout_id="g9/0", attempt=3, group_id="g9", turn=1, turns=2)
    ok = judge_restore(
        {"agent-0": "d"}, {"agent-0": reply("agent-0", "d", conts=(owned,))}, {}, ledger
    )
    assert ok.action is VerdictAction.DONE
    bad = judge_restore(
        {"agent-0": "d"}, {"agent-0": reply("agent-0", "d", conts=(owned, stray))}, {}, ledger
    )
    assert bad.action is VerdictAction.REJECT and bad.unowned == (("agent-0", "g9/0", 3),)


# ------------------------------------------------------------------ (d) discard and redispatch


def cont(rollout: str, attempt: int = 0, turn: int = 1, restart_only: bool = False) -> Continuation:
    return Continuation(
        rollout_id=rollout,
        attempt=attempt,
        group_id=rollout.split("/")[0],
        turn=turn,
        turns=2,
        restart_only_dependency=restart_only,
    )


def test_s12_discards_only_restart_only_continuations_in_restored_paused() -> None:
    restored = [("agent-0", cont("g0/0")), ("agent-0", cont("g0/1", restart_only=True))]
    assert plan_discards(at(S.RESTORED_PAUSED), OP, restored) == (
        DiscardContinuation("agent-0", OP, "g0/1", 0),
    )
    for state in (S.RESTORING, S.RESUMING, S.REDISPATCHING, S.IDLE):
        with pytest.raises(TransitionNotAllowed):
            plan_discards(at(state), OP, restored)


def levels(*pairs: tuple[str, RecoveryLevel, RecoveryLevel]) -> LevelPlan:
    return LevelPlan(tuple(EffectiveLevel(*p) for p in pairs), ())


def restored_ledger(env: str = "math", size: int = 3) -> tuple[Ledger, tuple[tuple[str, int], ...]]:
    """A snapshot's ledger: sibling 0 sealed, the others dispatched (parked at the cut)."""
    ledger, keys = Ledger().open_group("g0", size, environment=env)
    for key in keys:
        ledger = ledger.dispatch(key)
    return ledger.seal(keys[0], "rc0"), keys


def test_turn_level_claims_continuations_once_and_reruns_the_rest() -> None:
    ledger, keys = restored_ledger()
    plan = plan_redispatch(ledger, [cont("g0/1", turn=1)], levels(("math", TURN, TURN)))
    assert plan.retire == (Retire("g0/1", 0), Retire("g0/2", 0))
    assert [(d.rollout_id, d.attempt, d.resume_from_turn) for d in plan.dispatch] == [
        ("g0/1", 1, 1),
        ("g0/2", 1, 0),
    ]
    assert plan.metrics.siblings_resumed_from_turn == 1
    assert plan.metrics.siblings_rerun_from_scratch == 1
    assert plan.ledger.counters.continuations_claimed == 1
    assert plan.ledger.attempt(keys[0]).state is AttemptState.SEALED  # sealed kept, not rerun
    assert all(d.key != keys[0] and d.rollout_id != "g0/0" for d in plan.dispatch)
    # Claimed once: planning again on the result claims nothing twice.
    with pytest.raises(TransitionNotAllowed):
        plan.ledger.claim_continuation(keys[1], 1)


def test_sibling_level_reruns_unfinished_from_scratch_ignoring_continuations() -> None:
    ledger, _ = restored_ledger()
    plan = plan_redispatch(ledger, [cont("g0/1")], levels(("math", SIBLING, SIBLING)))
    assert [d.resume_from_turn for d in plan.dispatch] == [0, 0]
    assert plan.metrics.siblings_rerun_from_scratch == 2
    assert plan.ledger.counters.continuations_claimed == 0


def test_prompt_group_level_reruns_whole_counting_discarded_sealed() -> None:
    ledger, _ = restored_ledger()
    plan = plan_redispatch(ledger, [cont("g0/1")], levels(("math", GROUP, GROUP)))
    assert [(d.rollout_id, d.attempt) for d in plan.dispatch] == [
        ("g0/0", 1),
        ("g0/1", 1),
        ("g0/2", 1),
    ]
    assert plan.metrics.groups_rerun_whole == 1 and plan.metrics.groups_rerun_group_scored == 0
    assert plan.metrics.sealed_siblings_discarded == 1
    assert plan.ledger.counters.discarded_siblings == 1 and plan.ledger.counters.group_reruns == 1


def test_group_scored_missing_continuation_reruns_whole_and_counts_it() -> None:
    ledger, _ = restored_ledger()
    plan = plan_redispatch(
        ledger, [cont("g0/1")], levels(("math", GROUP, TURN)), group_scored={"math"}, discarded=1
    )
    assert plan.metrics.groups_rerun_group_scored == 1
    assert plan.metrics.continuations_discarded_restart_only == 1
    assert len(plan.dispatch) == 3 and {d.resume_from_turn for d in plan.dispatch} == {0}
    everyone = plan_redispatch(
        ledger,
        [cont("g0/1"), cont("g0/2", turn=0)],
        levels(("math", GROUP, TURN)),
        group_scored={"math"},
    )
    assert everyone.metrics.siblings_resumed_from_turn == 2  # all siblings resume together
    assert everyone.metrics.groups_rerun_group_scored == 0


def test_unfinished_groups_go_out_before_new_work() -> None:
    ledger, _ = restored_ledger()
    plan = plan_redispatch(
        ledger,
        [],
        levels(("math", SIBLING, SIBLING)),
        new_work=[NewGroup("g1", 2, prompt="p1", environment="math")],
    )
    assert [d.group_id for d in plan.dispatch] == ["g0", "g0", "g1", "g1"]
    assert [d.level for d in plan.dispatch] == [SIBLING, SIBLING, None, None]
    assert plan.ledger.group("g1").state is GroupState.GENERATING


def test_reopened_group_is_rerun_whole_and_unresolved_ones_refused() -> None:
    ledger, keys = restored_ledger(size=2)
    ledger = ledger.seal(keys[1], "rc1").begin_finalize("g0").controller_restarted()
    with pytest.raises(UnresolvedFinalization, match="g0"):
        plan_redispatch(ledger, [], levels(("math", TURN, TURN)))
    lost = ledger.resolve_finalization("g0", trainer_has=False)
    plan = plan_redispatch(lost, [], levels(("math", TURN, TURN)))
    assert plan.metrics.sealed_siblings_discarded == 2 and len(plan.dispatch) == 2
    kept = plan_redispatch(ledger.resolve_finalization("g0", trainer_has=True), [], levels())
    assert kept.dispatch == () and kept.retire == ()


def test_metrics_as_dict_names_every_figure() -> None:
    ledger, _ = restored_ledger()
    plan = plan_redispatch(ledger, [cont("g0/1")], levels(("math", TURN, TURN)))
    figures = plan.metrics.as_dict()
    assert figures["siblings_resumed_from_turn"] == 1
    assert set(figures) >= {"groups_rerun_group_scored", "sealed_siblings_discarded"}


def test_discard_begin_without_its_fallback_row_rejects_a_zero_count() -> None:
    fallback = next(
        i for i, r in enumerate(RESTORE.rows) if r.input is I.DISCARD_BEGIN and r.guard is None
    )
    mutant = RESTORE.without_row(fallback)
    assert mutant.step(at(S.RESTORED_PAUSED), I.DISCARD_BEGIN, 2)[0].state is S.DISCARDING
    with pytest.raises(GuardRejected):
        mutant.step(at(S.RESTORED_PAUSED), I.DISCARD_BEGIN, 0)
