"""M9 through the coordinator: the restore at controller start, driven by the `restore`
table's rows (selection, restore under a fresh `rs-` id in phase order, digest and ownership
verification, same-id retries, fallback, discards, resume, redispatch, metrics)."""

from __future__ import annotations

from itertools import pairwise
from typing import Any

import pytest

from quiesce.models import System, SystemState
from quiesce.protocol import Cause, Coordinator, new_participant
from quiesce.protocol._config import QuiesceConfig
from quiesce.protocol._ids import OpId
from quiesce.protocol._messages import (
    Capabilities,
    Continuation,
    ErrorReply,
    RestoreReply,
    ResumeReply,
)
from quiesce.protocol.controller import (
    GroupOpened,
    Ledger,
    Outcome,
    PeriodElapsed,
    Stopped,
    TrainerBoundary,
)
from quiesce.protocol.controller.lowlevel import (
    Call,
    CallFailed,
    ClearIntent,
    Discovered,
    Dispatch,
    InspectPublished,
    LoadSnapshot,
    Log,
    Metric,
    Op,
    PublishInspected,
    Recovered,
    Reply,
    RestoreCut,
    RestoreOutcome,
    RestoreTarget,
    RewindToAnchor,
    SnapshotCandidate,
    SnapshotCondition,
    SnapshotLoaded,
    SnapshotLoadFailed,
    SnapshotsListed,
    SourceUnreadable,
    TimerDue,
    TrainerAnchor,
    Validate,
    prepare_retry_timer,
    restore_retry_timer,
)
from quiesce.protocol.machines import CheckpointState, PublishedState, RestoreState

ROLES = {"pol": "policy", "ag": "agent", "res": "resources"}
ANCHOR = TrainerAnchor(0, "v0", dataloader_position=7)


def of(effects: list[Any], kind: type) -> list[Any]:
    return [e for e in effects if isinstance(e, kind)]


class Harness:
    """A freshly started coordinator (epoch 2), discovered, answered by hand."""

    def __init__(self, **config: Any) -> None:
        self.c = Coordinator(QuiesceConfig.load(config))
        self.s = self.c.initial(epoch=2)
        self.now = 0.0
        caps = tuple(
            Capabilities(participant=n, incarnation="i1", role=r, recovery_mode="stateless")  # type: ignore[arg-type]
            for n, r in ROLES.items()
        )
        self.step(Discovered(caps))
        assert self.s.fleet is not None
        self.fingerprint = self.s.fleet.fingerprint

    def step(self, event: Any, dt: float = 0.0) -> list[Any]:
        self.now += dt
        self.s, effects = self.c.step(self.s, self.now, event)
        return list(effects)

    def candidate(self, seq: int, **fields: Any) -> SnapshotCandidate:
        values: dict[str, Any] = {
            "trainer_step": 0,
            "trainer_version": "v0",
            "fingerprint": self.fingerprint,
        }
        values.update(fields)
        return SnapshotCandidate(OpId(1, seq, values["trainer_step"]), **values)

    @property
    def rs(self) -> OpId:
        assert self.s.restoring is not None and self.s.restoring.op_id is not None
        return self.s.restoring.op_id

    def restored(self, name: str, digest: str, *continuations: Continuation) -> list[Any]:
        reply = RestoreReply(
            participant=name,
            incarnation="i1",
            op_id=self.rs,
            status="restored",
            digest=digest,
            continuations=continuations,
        )
        return self.step(Reply(name, Op.RESTORE, self.rs, reply), 1.0)

    def resumed(self, name: str) -> list[Any]:
        reply = ResumeReply(participant=name, incarnation="i1", op_id=self.rs, retired=self.rs)
        return self.step(Reply(name, Op.RESUME, self.rs, reply), 1.0)


DIGESTS = (("ag", "d-ag"), ("pol", "d-pol"), ("res", "d-res"))


def restore_all(h: Harness, *continuations: Continuation) -> list[Any]:
    """Answer a restore in progress: every restore, then every resume, in phase order."""
    effects: list[Any] = []
    for name in ("pol", "ag", "res"):
        effects += h.restored(name, f"d-{name}", *(continuations if name == "ag" else ()))
    for name in ("res", "pol", "ag"):
        effects += h.resumed(name)
    return effects


def outcome(effects: list[Any]) -> RestoreOutcome:
    [result] = of(effects, RestoreOutcome)
    return result


# ----------------------------------------------------------------------------- the pure flow


def test_restore_calls_in_phase_order_under_a_fresh_rs_id_and_triggers_wait() -> None:
    h = Harness()
    effects = h.step(Recovered(None, 0))
    assert of(effects, Log) == [] or all(e.event != "trigger_during_restore" for e in effects)
    assert h.s.restore is not None and h.s.restore.state is RestoreState.SELECTING
    effects = h.step(SnapshotsListed(ANCHOR, (h.candidate(3),)))
    assert effects == [LoadSnapshot(OpId(1, 3, 0))]
    # A checkpoint trigger while restoring waits: no attempt, no id minted.
    effects = h.step(PeriodElapsed())
    assert not of(effects, Outcome) and h.s.attempt is None
    assert [e.event for e in of(effects, Log)] == ["trigger_during_restore"]
    effects = h.step(SnapshotLoaded(OpId(1, 3, 0), DIGESTS, Ledger()))
    rs = h.rs
    assert rs.kind == "rs" and (rs.epoch, rs.seq) == (2, 1)
    assert [(c.participant, c.op, c.payload) for c in of(effects, Call)] == [
        ("pol", Op.RESTORE, RestoreTarget(OpId(1, 3, 0), "d-pol"))
    ]
    order = []
    for name in ("pol", "ag", "res"):
        order += [c.participant for c in of(h.restored(name, f"d-{name}"), Call)]
    assert order == ["ag", "res", "res"]  # agents after policy; then resume starts: resources
    effects = h.resumed("res") + h.resumed("pol")
    assert [c.participant for c in of(effects, Call)] == ["pol", "ag"]
    assert all(c.op is Op.RESUME and c.op_id == rs for c in of(effects, Call))
    effects = h.resumed("ag")
    result = outcome(effects)
    assert (result.result, result.snapshot_id, result.op_id) == ("snapshot", OpId(1, 3, 0), rs)
    assert RestoreCut(OpId(1, 3, 0)) in effects
    assert h.s.restore is not None and h.s.restore.state is RestoreState.IDLE
    assert h.s.gate.data == frozenset() and h.s.restoring is None
    # Afterwards checkpoints take fresh, later ids.
    h.step(PeriodElapsed())
    assert h.s.attempt is not None and h.s.attempt.op_id > rs


def test_redispatch_claims_the_continuation_once_retires_n_everywhere_and_counts() -> None:
    h = Harness()
    ledger, _ = Ledger().open_group("g0", 3, environment="ag")
    ledger = ledger.dispatch(("g0/0", 0)).dispatch(("g0/1", 0)).dispatch(("g0/2", 0))
    ledger = ledger.seal(("g0/0", 0), "r0").ack_flushed([_Receipt("g0/0", 0, "r0")])
    h.step(Recovered(None, 0))
    h.step(SnapshotsListed(ANCHOR, (h.candidate(3),)))
    h.step(SnapshotLoaded(OpId(1, 3, 0), DIGESTS, ledger))
    saved = Continuation(rollout_id="g0/1", attempt=0, group_id="g0", turn=2, turns=3)
    h.step(GroupOpened("g1", 1, "ag"))  # new work while restoring: after every unfinished group
    effects = restore_all(h, saved)
    retired = [(c.participant, c.payload) for c in of(effects, Call) if c.op is Op.RETIRE]
    assert retired == [("ag", ("g0/1", 0)), ("ag", ("g0/2", 0))]
    dispatched = [(d.rollout_id, d.attempt, d.resume_from_turn) for d in of(effects, Dispatch)]
    # N+1 claims N's continuation; the other unfinished sibling reruns; sealed g0/0 is kept.
    assert dispatched == [("g0/1", 1, 2), ("g0/2", 1, 0), ("g1/0", 0, 0)]
    metrics = dict(outcome(effects).metrics)
    assert metrics["siblings_resumed_from_turn"] == 1
    assert metrics["siblings_rerun_from_scratch"] == 1
    assert metrics["sealed_siblings_discarded"] == 0
    assert Metric("restore.siblings_resumed_from_turn", 1.0, (("result", "snapshot"),)) in effects
    assert h.s.ledger.attempt(("g0/0", 0)).state.value == "sealed"
    with pytest.raises(Exception, match="not_superseded"):
        h.s.ledger.claim_continuation(("g0/1", 0), 2)  # claimed once


class _Receipt:
    def __init__(self, rollout_id: str, attempt: int, receipt: str) -> None:
        self.rollout_id, self.attempt, self.receipt = rollout_id, attempt, receipt


def test_a_group_scored_group_without_every_continuation_is_rerun_whole_and_counted() -> None:
    h = Harness()
    caps = tuple(
        Capabilities(
            participant=n,
            incarnation="i1",
            role=r,  # type: ignore[arg-type]
            recovery_mode="stateless",
            group_scored=(r == "agent"),
            group_size=2 if r == "agent" else None,
        )
        for n, r in ROLES.items()
    )
    h.step(Discovered(caps))
    assert h.s.fleet is not None and h.s.fleet.group_scored == {"ag"}
    ledger, _ = Ledger().open_group("g0", 2, environment="ag")
    ledger = ledger.dispatch(("g0/0", 0)).dispatch(("g0/1", 0)).seal(("g0/0", 0), "r0")
    ledger = ledger.ack_flushed([_Receipt("g0/0", 0, "r0")])
    h.step(Recovered(None, 0))
    h.step(SnapshotsListed(ANCHOR, (h.candidate(3, fingerprint=h.s.fleet.fingerprint),)))
    h.step(SnapshotLoaded(OpId(1, 3, 0), DIGESTS, ledger))
    effects = restore_all(h)
    metrics = dict(outcome(effects).metrics)
    assert metrics["groups_rerun_group_scored"] == 1 and metrics["sealed_siblings_discarded"] == 1
    assert [(d.rollout_id, d.attempt) for d in of(effects, Dispatch)] == [("g0/0", 1), ("g0/1", 1)]


def test_digest_mismatch_rejects_the_snapshot_aborts_its_id_and_falls_back_to_an_older_one() -> (
    None
):
    h = Harness()
    h.step(Recovered(None, 0))
    h.step(SnapshotsListed(ANCHOR, (h.candidate(3), h.candidate(5))))
    h.step(SnapshotLoaded(OpId(1, 5, 0), DIGESTS, Ledger()))
    first = h.rs
    effects = h.restored("pol", "not-the-committed-one")
    # S16: the touched participant is resumed (= aborted) under the same rs id first.
    assert [(c.participant, c.op, c.op_id) for c in of(effects, Call)] == [
        ("pol", Op.RESUME, first)
    ]
    assert not of(effects, LoadSnapshot)
    effects = h.resumed("pol")
    assert effects == [LoadSnapshot(OpId(1, 3, 0))]
    h.step(SnapshotLoaded(OpId(1, 3, 0), DIGESTS, Ledger()))
    assert h.rs > first  # a fresh id for the older snapshot, never reused
    result = outcome(restore_all(h))
    assert result.snapshot_id == OpId(1, 3, 0)
    assert result.rejected == (("ck-1-5-step0", "digest_mismatch"),)


def test_an_unowned_restored_execution_rejects_the_snapshot() -> None:
    h = Harness()
    h.step(Recovered(None, 0))
    h.step(SnapshotsListed(ANCHOR, (h.candidate(3),)))
    h.step(SnapshotLoaded(OpId(1, 3, 0), DIGESTS, Ledger()))
    h.restored("pol", "d-pol")
    stray = Continuation(rollout_id="gx/0", attempt=4, group_id="gx", turn=1, turns=2)
    effects = h.restored("ag", "d-ag", stray)
    # Abort the touched ones under the same id, in resume order (policy before agents).
    assert [(c.participant, c.op) for c in of(effects, Call)] == [("pol", Op.RESUME)]
    effects = h.resumed("pol")
    assert [(c.participant, c.op) for c in of(effects, Call)] == [("ag", Op.RESUME)]
    result = outcome(h.resumed("ag"))
    assert result.result == "bootstrap"
    assert result.rejected == (("ck-1-3-step0", "unowned_execution"),)


def test_a_snapshot_that_cannot_be_loaded_is_rejected_without_touching_anyone() -> None:
    h = Harness()
    h.step(Recovered(None, 0))
    h.step(SnapshotsListed(ANCHOR, (h.candidate(3), h.candidate(5))))
    effects = h.step(SnapshotLoadFailed(OpId(1, 5, 0), "corrupt"))
    assert effects == [LoadSnapshot(OpId(1, 3, 0))]


def test_a_retryable_restore_failure_is_retried_with_the_same_rs_id_then_falls_back() -> None:
    h = Harness(prepare_retry_interval_s=2)
    h.step(Recovered(None, 0))
    h.step(SnapshotsListed(ANCHOR, (h.candidate(3), h.candidate(5))))
    h.step(SnapshotLoaded(OpId(1, 5, 0), DIGESTS, Ledger()))
    rs = h.rs
    for retry in (1, 2):
        effects = h.step(CallFailed("pol", Op.RESTORE, rs, Cause.TIMEOUT), 1.0)
        timer = restore_retry_timer(rs)
        assert [(e.name, e.at) for e in effects if type(e).__name__ == "ArmTimer"] == [
            (timer, h.now + 2)
        ]
        effects = h.step(TimerDue(timer), 2.0)
        assert [(c.participant, c.op, c.op_id) for c in of(effects, Call)] == [
            ("pol", Op.RESTORE, rs)
        ]
        assert h.s.restore is not None and h.s.restore.data.retries == retry
    # Out of retries: resume (= abort) the id everywhere it may hold, then the older one.
    effects = h.step(CallFailed("pol", Op.RESTORE, rs, Cause.IO_ERROR))
    assert [(c.op, c.op_id) for c in of(effects, Call)] == [(Op.RESUME, rs)]
    effects = h.resumed("pol")
    assert effects[-1] == LoadSnapshot(OpId(1, 3, 0))
    h.step(SnapshotLoaded(OpId(1, 3, 0), DIGESTS, Ledger()))
    result = outcome(restore_all(h))
    assert result.rejected == (("ck-1-5-step0", "retries_exhausted"),)


def test_a_refused_restore_is_not_aborted_where_it_changed_nothing() -> None:
    h = Harness()
    h.step(Recovered(None, 0))
    h.step(SnapshotsListed(ANCHOR, (h.candidate(3),)))
    h.step(SnapshotLoaded(OpId(1, 3, 0), DIGESTS, Ledger()))
    refusal = ErrorReply(participant="pol", incarnation="i1", code="invalid_phase", message="no")
    effects = h.step(Reply("pol", Op.RESTORE, h.rs, refusal))
    assert not of(effects, Call)  # invalid_phase is fatal for this snapshot: nothing to abort
    assert outcome(effects).rejected == (("ck-1-3-step0", "restore_failed:pol"),)


def test_a_restore_conflicting_with_a_dead_controllers_restore_resumes_that_id_first() -> None:
    # Two controller crashes: the first one's restore left `pol` restored_paused under its
    # rs id; §4 (and M9, classified as in §4): abort (resume) the reported active id first,
    # then restore again with the same id. Retried as is, the restore would be refused until
    # the snapshot is rejected (`retries_exhausted`), `pol` still fenced, admission closed.
    h = Harness(prepare_retry_interval_s=2)
    h.step(Recovered(None, 0))
    h.step(SnapshotsListed(ANCHOR, (h.candidate(3),)))
    h.step(SnapshotLoaded(OpId(1, 3, 0), DIGESTS, Ledger()))
    dead = OpId(1, 4, 0, "rs")  # the crashed controller's restore id
    effects = h.step(Reply("pol", Op.RESTORE, h.rs, conflict("pol", dead)), 1.0)
    effects += h.step(TimerDue(restore_retry_timer(h.rs)), 2.0)
    assert [(c.participant, c.op, c.op_id) for c in of(effects, Call)][:1] == [
        ("pol", Op.RESUME, dead)
    ]
    rs = h.rs
    effects = resumed(h, "pol", dead)
    assert [(c.participant, c.op, c.op_id) for c in of(effects, Call)] == [("pol", Op.RESTORE, rs)]
    effects = h.restored("pol", "d-pol")
    assert [(c.participant, c.op) for c in of(effects, Call)] == [("ag", Op.RESTORE)]
    h.restored("ag", "d-ag")
    h.restored("res", "d-res")
    assert h.s.restore is not None and h.s.restore.state is RestoreState.RESUMING
    assert h.s.restore.data.rejected == ()


def conflict(name: str, active: OpId) -> ErrorReply:
    """`name`'s refusal: it is fenced to `active`, another id."""
    return ErrorReply(
        participant=name,
        incarnation="i1",
        code="checkpoint_conflict",
        message="busy",
        active_id=active,
    )


def resumed(h: Harness, name: str, op_id: OpId) -> list[Any]:
    """`name` retired `op_id` (a conflicting id, not the restore's)."""
    reply = ResumeReply(participant=name, incarnation="i1", op_id=op_id, retired=op_id)
    return h.step(Reply(name, Op.RESUME, op_id, reply), 1.0)


def sent(effects: list[Any]) -> list[tuple[str, Op, OpId | None]]:
    return [(c.participant, c.op, c.op_id) for c in of(effects, Call)]


def stale_replies(effects: list[Any]) -> list[Any]:
    return [e for e in of(effects, Log) if e.event.startswith("stale")]


# Ids that controllers which died before this one left on `pol` (lower epochs, ordered).
X, Z, W = OpId(1, 4, 0, "rs"), OpId(1, 6, 0, "rs"), OpId(1, 8, 0, "rs")


def restoring(h: Harness, *older: int) -> OpId:
    """Start the restore of snapshot 9 (and `older` ones to fall back to); its rs id."""
    h.step(Recovered(None, 0))
    h.step(SnapshotsListed(ANCHOR, tuple(h.candidate(seq) for seq in (*older, 9))))
    h.step(SnapshotLoaded(OpId(1, 9, 0), DIGESTS, Ledger()))
    return h.rs


def test_a_resent_restore_refused_naming_a_new_id_resumes_that_id_then_restores() -> None:
    # `pol` is fenced to X; once X is resumed, a delayed restore(Z) of another dead
    # controller fences it again before our restore is sent again: the same as the first
    # conflict, Z is resumed and the restore sent again, under the same rs id.
    h = Harness(prepare_retry_interval_s=2)
    rs = restoring(h)
    effects = h.step(Reply("pol", Op.RESTORE, rs, conflict("pol", X)), 1.0)
    effects += h.step(TimerDue(restore_retry_timer(rs)), 2.0)
    assert sent(effects) == [("pol", Op.RESUME, X)]
    effects = resumed(h, "pol", X)
    assert sent(effects) == [("pol", Op.RESTORE, rs)]
    effects = h.step(Reply("pol", Op.RESTORE, rs, conflict("pol", Z)), 1.0)
    effects += h.step(TimerDue(restore_retry_timer(rs)), 2.0)
    assert sent(effects) == [("pol", Op.RESUME, Z)]  # Z only: X is retired
    effects += resumed(h, "pol", Z)
    assert sent(effects)[1:] == [("pol", Op.RESTORE, rs)]
    effects += restore_all(h)
    assert not stale_replies(effects)
    assert (outcome(effects).op_id, outcome(effects).rejected) == (rs, ())
    assert h.s.restore is not None and h.s.restore.state is RestoreState.IDLE


def test_a_clearing_resume_refused_naming_another_id_resumes_that_one_then_restores() -> None:
    # `pol` reported X, but by the time our resume(X) arrives it is fenced to Z: resume Z
    # (not X again: `pol` does not hold it), then restore with the same rs id.
    h = Harness(prepare_retry_interval_s=2)
    rs = restoring(h)
    h.step(Reply("pol", Op.RESTORE, rs, conflict("pol", X)), 1.0)
    effects = h.step(TimerDue(restore_retry_timer(rs)), 2.0)
    assert sent(effects) == [("pol", Op.RESUME, X)]
    effects = h.step(Reply("pol", Op.RESUME, X, conflict("pol", Z)), 1.0)
    assert not sent(effects)  # the next round waits for the restore's retry timer
    effects += h.step(TimerDue(restore_retry_timer(rs)), 2.0)
    assert sent(effects) == [("pol", Op.RESUME, Z)]
    effects += resumed(h, "pol", Z)
    assert sent(effects)[1:] == [("pol", Op.RESTORE, rs)]
    effects += restore_all(h)
    assert not stale_replies(effects)
    assert (outcome(effects).op_id, outcome(effects).rejected) == (rs, ())


def test_a_clearing_resume_refused_as_stale_finds_the_id_retired_and_goes_on() -> None:
    # `pol` retired X meanwhile (and moved on to Z): X is at or below its watermark, so the
    # resume is refused as stale. That is what the resume was for: the restore is sent
    # again at once, and the conflict it meets (Z) is cleared the same way.
    h = Harness(prepare_retry_interval_s=2)
    rs = restoring(h)
    h.step(Reply("pol", Op.RESTORE, rs, conflict("pol", X)), 1.0)
    h.step(TimerDue(restore_retry_timer(rs)), 2.0)
    stale = ErrorReply(
        participant="pol",
        incarnation="i1",
        code="stale_checkpoint",
        message="retired",
        high_watermark=Z,
    )
    effects = h.step(Reply("pol", Op.RESUME, X, stale), 1.0)
    assert sent(effects) == [("pol", Op.RESTORE, rs)]
    effects = h.step(Reply("pol", Op.RESTORE, rs, conflict("pol", Z)), 1.0)
    effects += h.step(TimerDue(restore_retry_timer(rs)), 2.0)
    assert sent(effects) == [("pol", Op.RESUME, Z)]
    effects += resumed(h, "pol", Z)
    effects += restore_all(h)
    assert not of(effects, Stopped) and outcome(effects).rejected == ()


@pytest.mark.parametrize("refused", ["restore", "resume"])
def test_a_conflict_chain_longer_than_the_retries_rejects_the_snapshot_then_falls_back(
    refused: str,
) -> None:
    # Every round meets a new id (on the restore sent again, or on the resume clearing the
    # last one): each round spends one of the snapshot's retries (M9 `max_retries`, 2), so
    # the chain is bounded. Once they are spent the snapshot is rejected as for any failed
    # restore call: the id `pol` holds now is resumed, then an older snapshot is restored.
    h = Harness(prepare_retry_interval_s=2)
    rs = restoring(h, 3)
    h.step(Reply("pol", Op.RESTORE, rs, conflict("pol", X)), 1.0)
    for held, new in pairwise((X, Z, W)):
        assert h.s.restore is not None and h.s.restore.state is RestoreState.RESTORING
        effects = h.step(TimerDue(restore_retry_timer(rs)), 2.0)
        assert sent(effects) == [("pol", Op.RESUME, held)]
        if refused == "resume":
            effects = h.step(Reply("pol", Op.RESUME, held, conflict("pol", new)), 1.0)
        else:
            assert sent(resumed(h, "pol", held)) == [("pol", Op.RESTORE, rs)]
            effects = h.step(Reply("pol", Op.RESTORE, rs, conflict("pol", new)), 1.0)
    # Out of retries: resume W (`pol` never took the restore: rs is not resumed there),
    # then load the older snapshot.
    assert sent(effects) == [("pol", Op.RESUME, W)]
    assert h.s.restore is not None and h.s.restore.data.rejected == (
        ("ck-1-9-step0", "retries_exhausted"),
    )
    effects = resumed(h, "pol", W)
    assert effects[-1] == LoadSnapshot(OpId(1, 3, 0))
    h.step(SnapshotLoaded(OpId(1, 3, 0), DIGESTS, Ledger()))
    assert h.rs > rs
    result = outcome(restore_all(h))
    assert result.snapshot_id == OpId(1, 3, 0)


def test_fresh_start_at_the_anchor_when_nothing_matches_lists_every_candidate() -> None:
    h = Harness()
    h.step(Recovered(None, 4))
    anchor = TrainerAnchor(4, "v4", dataloader_position=40)
    candidates = (
        h.candidate(9, trainer_step=4, trainer_version="v4", fingerprint="other"),
        h.candidate(8, trainer_step=3, trainer_version="v3"),
        h.candidate(7, trainer_step=4, trainer_version="v4", condition=SnapshotCondition.CORRUPT),
        h.candidate(
            6, trainer_step=4, trainer_version="v4", condition=SnapshotCondition.QUARANTINED
        ),
    )
    h.step(GroupOpened("g1", 1, "ag"))  # queued: opened in the fresh ledger
    effects = h.step(SnapshotsListed(anchor, candidates))
    assert RewindToAnchor(4, 40) in effects and not of(effects, Stopped)
    result = outcome(effects)
    assert result.result == "fresh_start" and result.snapshot_id is None
    assert dict(result.rejected) == {
        "ck-1-9-step4": "fingerprint_mismatch",
        "ck-1-8-step3": "trainer_step_mismatch",
        "ck-1-7-step4": "corrupt",
        "ck-1-6-step4": "quarantined",
    }
    assert [d.rollout_id for d in of(effects, Dispatch)] == ["g1/0"]
    assert h.s.gate.data == frozenset()


@pytest.mark.parametrize(
    ("anchor", "kind"),
    [
        (None, "bootstrap"),
        (TrainerAnchor(0, "v0"), "bootstrap"),
        (TrainerAnchor(3, "v3"), "fresh_start"),
    ],
)
def test_bootstrap_only_at_step_0(anchor: TrainerAnchor | None, kind: str) -> None:
    h = Harness()
    h.step(Recovered(None, None if anchor is None else anchor.step))
    effects = h.step(SnapshotsListed(anchor, ()))
    assert outcome(effects).result == kind


@pytest.mark.parametrize(
    ("anchor", "candidates", "source"),
    [
        (SourceUnreadable("trainer_anchor", "disk"), (), "trainer_anchor"),
        (ANCHOR, SourceUnreadable("snapshot_store", "eio"), "snapshot_store"),
    ],
)
def test_restore_failed_only_when_the_anchor_or_the_store_cannot_be_read(
    anchor: Any, candidates: Any, source: str
) -> None:
    h = Harness()
    h.step(Recovered(None, 0))
    effects = h.step(SnapshotsListed(anchor, candidates))
    result = outcome(effects)
    assert result.result == "restore_failed" and result.failure.startswith(source)
    assert Stopped("restore_failed", None) in effects
    assert h.s.restore is not None and h.s.restore.state is RestoreState.RESTORE_FAILED
    effects = h.step(PeriodElapsed())  # the controller does nothing more
    assert [e.event for e in of(effects, Log)] == ["ignored_while_stopped"]


def test_every_candidate_corrupt_is_a_fresh_start_not_a_failure() -> None:
    h = Harness()
    h.step(Recovered(None, 0))
    bad = (h.candidate(2, condition=SnapshotCondition.HALF_WRITTEN),)
    result = outcome(h.step(SnapshotsListed(ANCHOR, bad)))
    assert result.result == "bootstrap" and result.rejected == (("ck-1-2-step0", "half_written"),)


@pytest.mark.parametrize(("mode", "chosen"), [("latest", 5), ("trainer_checkpoint", 3)])
def test_restore_mode_latest_or_trainer_checkpoint(mode: str, chosen: int) -> None:
    h = Harness(restore_mode=mode)
    h.step(Recovered(None, 0))
    candidates = (h.candidate(3, trainer_boundary=True), h.candidate(5))
    effects = h.step(SnapshotsListed(ANCHOR, candidates))
    assert effects == [LoadSnapshot(OpId(1, chosen, 0))]


def test_an_intent_record_is_finished_first_then_the_restore_selects() -> None:
    h = Harness()
    left = OpId(1, 4, 0)
    effects = h.step(Recovered(left, 0))
    assert effects[-1] == InspectPublished(left)
    effects = h.step(PublishInspected(left, PublishedState.VERIFIED))
    assert h.s.phase is CheckpointState.RELEASING
    assert {(c.op, c.op_id) for c in of(effects, Call)} == {(Op.RESUME, left)}
    effects = []
    while h.s.attempt is not None and h.s.attempt.waiting:
        for name, op_id in sorted(h.s.attempt.waiting):
            reply = ResumeReply(participant=name, incarnation="i1", op_id=op_id, retired=op_id)
            effects += h.step(Reply(name, Op.RESUME, op_id, reply))
    assert ClearIntent(left) in effects and effects[-1].__class__.__name__ == "ListSnapshots"
    assert h.s.phase is CheckpointState.IDLE
    effects = h.step(SnapshotsListed(ANCHOR, (h.candidate(4),)))
    assert effects == [LoadSnapshot(left)]  # the released snapshot is the newest
    h.step(SnapshotLoaded(left, DIGESTS, Ledger()))
    result = outcome(restore_all(h))
    assert (result.intent, result.intent_action) == (left, "release")


def test_validate_records_whether_the_snapshot_was_taken_at_the_trainer_anchor() -> None:
    system, state = _system()
    state, _ = system.input(state, TrainerBoundary(1), now=1.0)  # save_period 1: an anchor
    state, effects = _drain(system, state)
    [validate] = of(effects, Validate)
    assert validate.at_trainer_anchor and validate.trainer_step == 1
    [snapshot] = state.store.snapshots
    assert snapshot.at_trainer_anchor and snapshot.trainer_step == 1


# ----------------------------------------------------------------------------- composed


def _system(**agent: Any) -> tuple[System, SystemState]:
    system = System(Coordinator(QuiesceConfig(max_consecutive_failures=5)))
    participants = [
        new_participant({"name": "policy", "role": "policy"}, "p1"),
        new_participant({"name": "agent", "role": "agent", **agent}, "a1"),
        new_participant(
            {"name": "resources", "role": "resources", "recovery_mode": "stateless"}, "r1"
        ),
    ]
    state, _ = system.start(participants)
    return system, state


def _drain(system: System, state: SystemState) -> tuple[SystemState, list[Any]]:
    effects: list[Any] = []
    for _ in range(200):
        if not state.messages:
            return state, effects
        state, more = system.deliver(state, 0)
        effects.extend(more)
    raise AssertionError("messages never settled")


def test_composed_crash_restart_restores_the_snapshot_and_resumes_the_parked_rollout() -> None:
    system, state = _system()
    state, _ = system.input(state, GroupOpened("g0", 2, "agent"))
    state, _, _ = system.finish(state, "agent", "g0/0", 0)
    state, _ = system.input(state, PeriodElapsed(), now=1.0)
    state, _ = _drain(system, state)  # g0/1 is still running: the agent is not ready
    state, _, _ = system.turn(state, "agent", "g0/1", 0, 1)  # parks at its boundary
    state, _ = system.fire_timer(state, prepare_retry_timer(state.controller.attempt.op_id))
    state, _ = _drain(system, state)
    [snapshot] = state.store.published
    state, _, _ = system.turn(state, "agent", "g0/1", 0, 2)  # work after the snapshot...
    state, restart = system.crash_controller(state, epoch=2)  # ...is lost with the controller
    effects = list(restart)
    calls = [(c.participant, c.op) for c in of(effects, Call)]
    assert calls == [("policy", Op.RESTORE)]
    state, more = _drain(system, state)
    effects += more
    result = outcome(effects)
    assert (result.result, result.snapshot_id) == ("snapshot", snapshot)
    agent = state.participant("agent").role
    executions = {(e.data.rollout_id, e.data.attempt): e for e in agent.executions}
    assert executions[("g0/1", 1)].data.turn == 1  # N+1 resumed from the saved turn
    assert ("g0/1", 0) not in executions  # N tombstoned
    assert agent.highest_retired("g0/1") == 0 and agent.restored == ()
    assert state.controller.phase is CheckpointState.IDLE
    assert state.controller.gate.data == frozenset()
