"""M8: `rollout_attempt` and `prompt_group` row by row, and the `Ledger` value (I1, I2)."""

import itertools

import pytest

from quiesce.fsm import GuardRejected, TransitionNotAllowed, Value
from quiesce.protocol import Ledger
from quiesce.protocol.controller.lowlevel import (
    DuplicateGroup,
    OwedAck,
    UnknownAttempt,
    UnknownGroup,
)
from quiesce.protocol.machines import (
    PROMPT_GROUP,
    ROLLOUT_ATTEMPT,
    AttemptData,
    AttemptInput,
    AttemptState,
    GroupData,
    GroupInput,
    GroupState,
)

A, AI = AttemptState, AttemptInput
G, GI = GroupState, GroupInput


def attempt(state: AttemptState, **data: object) -> Value[AttemptState, AttemptData]:
    return Value(state, AttemptData(**data))  # type: ignore[arg-type]


def group(state: GroupState, size: int = 2, sealed: set[int] | None = None, **kw: bool) -> Value:
    return Value(state, GroupData(size, frozenset(sealed or ()), **kw))


# ------------------------------------------------------------------ rollout_attempt rows


def test_dispatch_only_from_reserved() -> None:
    value, _ = ROLLOUT_ATTEMPT.step(ROLLOUT_ATTEMPT.start(), AI.DISPATCH)
    assert value.state is A.DISPATCHED
    for state in (A.DISPATCHED, A.SEALED, A.FAILED, A.ABANDONED):
        with pytest.raises(TransitionNotAllowed):
            ROLLOUT_ATTEMPT.step(attempt(state), AI.DISPATCH)


def test_seal_records_the_ack_obligation_in_the_same_step() -> None:
    value, effects = ROLLOUT_ATTEMPT.step(attempt(A.DISPATCHED), AI.ROLLOUT_COMPLETED, "r1")
    assert value == attempt(A.SEALED, receipt="r1", ack_owed=True)
    assert [e.name for e in effects] == ["owe_ack"]
    assert ROLLOUT_ATTEMPT.check_invariants(value) == []


def test_dispatched_fails_and_live_attempts_abandon() -> None:
    assert ROLLOUT_ATTEMPT.step(attempt(A.DISPATCHED), AI.ATTEMPT_FAILED)[0].state is A.FAILED
    for state in (A.RESERVED, A.DISPATCHED):
        assert ROLLOUT_ATTEMPT.step(attempt(state), AI.ABANDON)[0].state is A.ABANDONED
    with pytest.raises(TransitionNotAllowed):
        ROLLOUT_ATTEMPT.step(attempt(A.RESERVED), AI.ATTEMPT_FAILED)
    for state in (A.SEALED, A.FAILED, A.ABANDONED):
        with pytest.raises(TransitionNotAllowed):
            ROLLOUT_ATTEMPT.step(attempt(state), AI.ABANDON)


def test_duplicate_completion_changes_nothing_and_a_different_one_is_refused() -> None:
    sealed = attempt(A.SEALED, receipt="r1", ack_owed=True)
    assert ROLLOUT_ATTEMPT.step(sealed, AI.ROLLOUT_COMPLETED, "r1") == (sealed, ())
    with pytest.raises(GuardRejected):
        ROLLOUT_ATTEMPT.step(sealed, AI.ROLLOUT_COMPLETED, "r2")


@pytest.mark.parametrize("state", [A.FAILED, A.ABANDONED])
def test_late_completion_of_a_retired_attempt_is_acked_and_dropped(state: AttemptState) -> None:
    value, effects = ROLLOUT_ATTEMPT.step(attempt(state), AI.ROLLOUT_COMPLETED, "late")
    assert value == attempt(state, receipt="late", ack_owed=True)
    assert [e.name for e in effects] == ["drop_late_completion"]


@pytest.mark.parametrize("state", [A.FAILED, A.ABANDONED])
def test_supersede_once_only(state: AttemptState) -> None:
    value, _ = ROLLOUT_ATTEMPT.step(attempt(state), AI.SUPERSEDE)
    assert value.data.superseded
    with pytest.raises(GuardRejected):
        ROLLOUT_ATTEMPT.step(value, AI.SUPERSEDE)


@pytest.mark.parametrize("state", [A.RESERVED, A.DISPATCHED, A.SEALED])
def test_sealed_or_live_attempts_cannot_be_superseded(state: AttemptState) -> None:
    with pytest.raises(TransitionNotAllowed):
        ROLLOUT_ATTEMPT.step(
            attempt(state, receipt="r" if state is A.SEALED else None), AI.SUPERSEDE
        )


def test_ack_flushed_needs_the_exact_owed_receipt() -> None:
    owed = attempt(A.SEALED, receipt="r1", ack_owed=True)
    assert ROLLOUT_ATTEMPT.step(owed, AI.ACK_FLUSHED, "r1")[0].data.ack_owed is False
    with pytest.raises(GuardRejected):
        ROLLOUT_ATTEMPT.step(owed, AI.ACK_FLUSHED, "other")
    flushed = attempt(A.SEALED, receipt="r1")
    with pytest.raises(GuardRejected):
        ROLLOUT_ATTEMPT.step(flushed, AI.ACK_FLUSHED, "r1")


def test_every_unmapped_attempt_pair_is_refused_and_changes_nothing() -> None:
    refused = 0
    for state, event in itertools.product(AttemptState, AttemptInput):
        if ROLLOUT_ATTEMPT.disposition(state, event) != "forbidden":
            continue
        value = attempt(state)
        with pytest.raises(TransitionNotAllowed):
            ROLLOUT_ATTEMPT.step(value, event, "r1")
        refused += 1
    assert refused == 17  # 5 states x 6 inputs = 30 pairs, 13 mapped


# ------------------------------------------------------------------ prompt_group rows


def test_siblings_seal_until_the_group_is_ready() -> None:
    value, effects = PROMPT_GROUP.step(group(G.GENERATING), GI.SIBLING_SEALED, 1)
    assert value == group(G.GENERATING, sealed={1}) and effects == ()
    value, effects = PROMPT_GROUP.step(value, GI.SIBLING_SEALED, 0)
    assert value == group(G.READY_TO_FINALIZE, sealed={0, 1})
    assert [e.name for e in effects] == ["group_ready"]


@pytest.mark.parametrize("sibling", [1, 2, -1])
def test_a_sibling_sealed_twice_or_out_of_range_is_refused(sibling: int) -> None:
    with pytest.raises(GuardRejected):
        PROMPT_GROUP.step(group(G.GENERATING, sealed={1}), GI.SIBLING_SEALED, sibling)


def test_finalize_path() -> None:
    ready = group(G.READY_TO_FINALIZE, sealed={0, 1})
    finalizing, _ = PROMPT_GROUP.step(ready, GI.FINALIZE_BEGIN)
    assert finalizing.state is G.FINALIZING
    assert PROMPT_GROUP.step(finalizing, GI.TRAINER_ACCEPTED)[0].state is G.FINALIZED


def test_finalization_unknown_resolves_both_ways() -> None:
    unknown, _ = PROMPT_GROUP.step(group(G.FINALIZING, sealed={0, 1}), GI.CONTROLLER_RESTARTED)
    assert unknown.state is G.FINALIZATION_UNKNOWN
    assert PROMPT_GROUP.step(unknown, GI.TRAINER_HAS_GROUP)[0].state is G.FINALIZED
    back, _ = PROMPT_GROUP.step(unknown, GI.TRAINER_LACKS_GROUP)
    assert back == group(G.GENERATING, sealed={0, 1}, reopened=True)
    assert PROMPT_GROUP.check_invariants(back) == []


@pytest.mark.parametrize(
    "state", [G.GENERATING, G.READY_TO_FINALIZE, G.FINALIZATION_UNKNOWN, G.FINALIZED, G.ABANDONED]
)
def test_a_restart_changes_only_finalizing_groups(state: GroupState) -> None:
    value = group(state, sealed={0, 1} if state is not G.GENERATING else set())
    assert PROMPT_GROUP.step(value, GI.CONTROLLER_RESTARTED) == (value, ())


def test_rerun_whole_only_from_generating() -> None:
    value, effects = PROMPT_GROUP.step(group(G.GENERATING, sealed={0}), GI.RERUN_WHOLE)
    assert value.state is G.ABANDONED
    assert [e.name for e in effects] == ["discard_sealed_siblings"]
    for state in (G.READY_TO_FINALIZE, G.FINALIZING, G.FINALIZED):
        with pytest.raises(TransitionNotAllowed):
            PROMPT_GROUP.step(group(state, sealed={0, 1}), GI.RERUN_WHOLE)


def test_every_unmapped_group_pair_is_refused() -> None:
    refused = 0
    for state, event in itertools.product(GroupState, GroupInput):
        if PROMPT_GROUP.disposition(state, event) != "forbidden":
            continue
        with pytest.raises(TransitionNotAllowed):
            PROMPT_GROUP.step(group(state), event, 0)
        refused += 1
    assert refused == 6 * 7 - 7 - 5  # 7 mapped pairs, 5 ignored restarts


# ------------------------------------------------------------------ Ledger


def sealed_pair() -> tuple[Ledger, tuple[tuple[str, int], ...]]:
    ledger, keys = Ledger().open_group("g0", 2, prompt="p0", environment="math")
    ledger = ledger.dispatch(keys[0]).dispatch(keys[1]).seal(keys[0], "rc0")
    return ledger, keys


def test_open_group_reserves_one_attempt_per_sibling_and_refuses_a_duplicate() -> None:
    ledger, keys = Ledger().open_group("g0", 3)
    assert keys == (("g0/0", 0), ("g0/1", 0), ("g0/2", 0))
    assert {ledger.attempt(k).state for k in keys} == {A.RESERVED}
    assert ledger.unfinished_groups()[0].group_id == "g0"
    with pytest.raises(DuplicateGroup):
        ledger.open_group("g0", 3)
    with pytest.raises(ValueError, match="at least one sibling"):
        ledger.open_group("g1", 0)


def test_seal_is_atomic_with_outbox_and_group_progress() -> None:
    ledger, keys = sealed_pair()
    assert ledger.pending_acks() == (OwedAck("g0/0", 0, "rc0"),)
    assert ledger.outbox == ledger.pending_acks()
    assert ledger.group("g0").value.data.sealed == {0}
    assert [a.key for a in ledger.sealed_untrained()] == [keys[0]]
    ledger = ledger.seal(keys[1], "rc1")
    assert ledger.group("g0").state is G.READY_TO_FINALIZE
    assert ledger.unfinished_groups() == ()


def test_a_refused_move_leaves_the_ledger_unchanged() -> None:
    ledger, keys = sealed_pair()
    before = ledger
    with pytest.raises(TransitionNotAllowed):
        ledger.dispatch(keys[0])  # sealed: I2 dispatch only from reserved
    assert ledger == before and hash(ledger) == hash(before)
    with pytest.raises(UnknownAttempt):
        ledger.dispatch(("g0/9", 0))
    with pytest.raises(UnknownGroup):
        ledger.begin_finalize("nope")


def test_ack_flushed_clears_only_matching_receipts_idempotently() -> None:
    ledger, keys = sealed_pair()
    wrong = OwedAck("g0/0", 0, "other")
    unknown = OwedAck("zz/0", 0, "rc0")
    assert ledger.ack_flushed([wrong, unknown]) == ledger
    flushed = ledger.ack_flushed([OwedAck("g0/0", 0, "rc0")])
    assert flushed.pending_acks() == ()
    assert flushed.ack_flushed([OwedAck("g0/0", 0, "rc0")]) == flushed
    assert flushed.attempt(keys[0]).state is A.SEALED


def test_fail_group_fails_dispatched_abandons_reserved_and_keeps_sealed() -> None:
    ledger, keys = Ledger().open_group("g0", 3)
    ledger = ledger.dispatch(keys[0]).dispatch(keys[1]).seal(keys[0], "rc0")
    ledger, retired = ledger.fail_group("g0")
    assert retired == (keys[1], keys[2])
    states = [ledger.attempt(k).state for k in keys]
    assert states == [A.SEALED, A.FAILED, A.ABANDONED]
    assert ledger.retire_list() == (keys[1], keys[2])


def test_late_completion_after_deadline_is_acked_dropped_and_counted() -> None:
    ledger, keys = sealed_pair()
    ledger, _ = ledger.fail_group("g0")
    ledger = ledger.seal(keys[1], "late")
    assert ledger.attempt(keys[1]).state is A.FAILED
    assert OwedAck("g0/1", 0, "late") in ledger.pending_acks()
    assert ledger.counters.late_completions_dropped == 1
    assert ledger.group("g0").value.data.sealed == {0}  # a dropped completion seals nothing


def test_retry_sibling_once_from_failed_never_from_sealed() -> None:
    ledger, keys = sealed_pair()
    ledger = ledger.fail(keys[1])
    ledger, new_key = ledger.retry_sibling("g0", 1)
    assert new_key == ("g0/1", 1)
    assert ledger.attempt(new_key).state is A.RESERVED
    with pytest.raises(TransitionNotAllowed):  # the new attempt is live, not failed
        ledger.retry_sibling("g0", 1)
    with pytest.raises(TransitionNotAllowed):  # I2: sealed work is not redispatched
        ledger.retry_sibling("g0", 0)


def test_continuation_is_claimed_once_by_the_next_attempt() -> None:
    ledger, keys = sealed_pair()
    claimed, new_key = ledger.claim_continuation(keys[1], turn=1)
    assert new_key == ("g0/1", 1)
    assert claimed.attempt(new_key).resume_from_turn == 1
    assert claimed.attempt(keys[1]).state is A.ABANDONED
    assert claimed.counters.continuations_claimed == 1
    with pytest.raises(GuardRejected):
        claimed.claim_continuation(keys[1], turn=1)
    with pytest.raises(TransitionNotAllowed):
        ledger.claim_continuation(keys[0], turn=1)  # sealed: never continued


def test_whole_group_rerun_discards_sealed_siblings_counted() -> None:
    ledger, keys = sealed_pair()
    ledger, fresh = ledger.rerun_group("g0")
    assert fresh == (("g0/0", 1), ("g0/1", 1))
    assert ledger.attempt(keys[1]).state is A.ABANDONED
    assert ledger.attempt(keys[0]).state is A.SEALED  # history kept, no longer awaiting training
    assert ledger.sealed_untrained() == ()
    assert ledger.counters.discarded_siblings == 1
    assert ledger.counters.group_reruns == 1
    assert ledger.group("g0").generation == 1
    assert ledger.group("g0").state is G.GENERATING
    # The abandoned generation takes no new attempts: only the current one does.
    with pytest.raises(TransitionNotAllowed):
        ledger.claim_continuation(keys[1], turn=1)


def test_rerun_is_refused_once_the_group_is_ready() -> None:
    ledger, keys = sealed_pair()
    ready = ledger.seal(keys[1], "rc1")
    with pytest.raises(TransitionNotAllowed):
        ready.rerun_group("g0")


def test_finalization_unknown_after_restart_resolved_both_ways() -> None:
    ledger, keys = sealed_pair()
    ledger = ledger.seal(keys[1], "rc1").begin_finalize("g0").controller_restarted()
    assert [g.group_id for g in ledger.finalization_unknown_groups()] == ["g0"]
    done = ledger.resolve_finalization("g0", trainer_has=True)
    assert done.group("g0").state is G.FINALIZED and done.sealed_untrained() == ()
    lost = ledger.resolve_finalization("g0", trainer_has=False)
    assert lost.group("g0").state is G.GENERATING and lost.group("g0").value.data.reopened
    assert [g.group_id for g in lost.unfinished_groups()] == ["g0"]
    rerun, _ = lost.rerun_group("g0")
    assert rerun.counters.discarded_siblings == 2


def test_finalize_then_compact_drops_finished_groups_only() -> None:
    ledger, keys = sealed_pair()
    ledger = ledger.seal(keys[1], "rc1").begin_finalize("g0").finalized("g0")
    ledger, _ = ledger.open_group("g1", 1)
    assert ledger.compact() == ledger  # g0 still owes its ACKs
    acked = ledger.ack_flushed(ledger.pending_acks()).compact()
    assert [g.group_id for g in acked.groups] == ["g1"]
    assert all(a.group_id == "g1" for a in acked.attempts)


def test_unknown_sibling_or_group_is_named() -> None:
    ledger, _ = Ledger().open_group("g0", 2)
    with pytest.raises(UnknownAttempt, match="g0/5"):
        ledger.latest("g0", 5)
    with pytest.raises(UnknownGroup, match="'g9'"):
        ledger.latest("g9", 0)
