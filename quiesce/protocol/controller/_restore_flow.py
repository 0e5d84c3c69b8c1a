"""M9 restore, driven by the coordinator: the `restore` table's rows name the work, this
module does it.

What lives here: the controller's side of the restore at start, as the work behind every
effect name of `RESTORE`'s rows (`finish_in_flight`, `send_restore`, `abort_restore`,
`retry_same_op`, `send_discards`, `send_resume`, `drain_acks`, `redispatch`,
`start_at_anchor`, `clear_intent`, `report_candidates`), and M9's side of its remote phases
(restore, discard, resume, and the abort of a rejected snapshot), which the shared phase
runner walks in §3 order. Every decision is one of the pure planning functions --
`decide_intent`, `select_snapshot`, `judge_restore`, `plan_discards`, `plan_redispatch` --
composed here, never re-implemented (the last three through the coordinator's policy).
What it does not know: how the store is read or how a call is carried (effects go out,
outcomes come back as inputs), or the checkpoint lifecycle (M1 finishes the in-flight id;
this module only tells it which verdict the intent got).

The flow (`RestoreFlow`, one per coordinator step; its state is `ControllerState.restore`,
the M9 table value, and `ControllerState.restoring`, the `RestoreRun` bookkeeping):

    Recovered(intent)      hold admission (`Holder.RESTORE`); intent: M1 inspects, the verdict
                           is decided (`decide_intent`) and M1 releases or aborts the id
    SELECTING              ListSnapshots -> SnapshotsListed; `select_snapshot`
    RESTORING              LoadSnapshot -> SnapshotLoaded; a fresh `rs-` id; restore calls
                           policy -> agents -> resources; `judge_restore` per role: retry
                           with the same id (timer), or reject -> resume (= abort) the rs id
                           on everyone touched, then select an older snapshot (S16); a
                           refusal naming another id (`checkpoint_conflict`, a dead
                           controller's restore): resume that id first, then retry (S5);
                           a new id named on the way (by the restore sent again, or by
                           the resume itself) is resumed the same way, each round one retry
    RESTORED_PAUSED        `plan_discards`: restart_only continuations (S12)
    DISCARDING             one DISCARD call per continuation (one at a time per agent)
    RESUMING               resume the rs id: resources -> policy -> agents
    REDISPATCHING          install the restored ledger, drain its ACKs, `plan_redispatch`:
                           Retire N on every agent, RestoreCut, Dispatch in plan order
                           (unfinished groups first), deadlines started
    idle                   release admission; RestoreOutcome and the per-restore metrics
    FRESH_START            RewindToAnchor, an empty ledger (+ queued new work) -> idle
    restore_failed         RestoreOutcome (every candidate and why) and Stopped

Failed calls are retried with the same op id when `restore_retry_timer(op_id)` fires
(`prepare_retry_interval_s` later): a restore call, and the resume of an id a restore call
conflicted with, while the table allows (`max_retries`: every round of a chain of conflicts
spends one), discards and other resumes until they succeed (M9 calls spend no
`call_retries`: this timer is their retry). A participant that *refused* a restore changed
nothing, so it is not aborted.
Checkpoint triggers wait while a restore runs, and groups the dataloader opens meanwhile
are queued as new work, dispatched after every unfinished group.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from types import MappingProxyType
from typing import Any

from quiesce.fsm import Effect, TransitionNotAllowed, Value, work
from quiesce.protocol._causes import Cause
from quiesce.protocol._errors import LocalProtocolError
from quiesce.protocol._ids import OpId
from quiesce.protocol._messages import Role
from quiesce.protocol._timers import ArmTimer, CancelTimer, TimerKey, TimerKind
from quiesce.protocol.controller._effects import (
    ClearIntent,
    Dispatch,
    ListSnapshots,
    LoadSnapshot,
    Metric,
    Redispatch,
    RestoreCut,
    RestoreOutcome,
    RestoreTarget,
    RewindToAnchor,
    Stopped,
)
from quiesce.protocol.controller._host import StepHost
from quiesce.protocol.controller._inputs import (
    GroupOpened,
    SnapshotLoaded,
    SnapshotLoadFailed,
    SnapshotsListed,
)
from quiesce.protocol.controller._ledger import Ledger
from quiesce.protocol.controller._phase_runner import (
    PhaseRunner,
    conflict_targets,
    with_conflict,
)
from quiesce.protocol.controller._recovery_levels import EffectiveLevel, LevelPlan
from quiesce.protocol.controller._restore_plan import (
    DispatchItem,
    NewGroup,
    RestoreMetrics,
    RestoreVerdict,
    SelectionKind,
    TrainerAnchor,
    VerdictAction,
    plan_redispatch,
    select_snapshot,
)
from quiesce.protocol.controller._run_to_completion import RunToCompletion
from quiesce.protocol.controller._state import RestoreRun, restore_active
from quiesce.protocol.machines import (
    RESTORE,
    CallData,
    CallKey,
    CheckpointInput,
    CheckpointState,
    Holder,
    IntentAction,
    IntentDecision,
    IntentRecord,
    Phase,
    PhaseCalls,
    PublishedState,
    RestoreData,
    RestoreInput,
    RestoreState,
    Slot,
    decide_intent,
)

__all__ = ["RESTORE_WORK", "RestoreFlow", "restore_retry_timer"]


def restore_retry_timer(op_id: OpId) -> TimerKey:
    """The timer that asks again the participants whose restore-flow call `op_id` failed."""
    return TimerKey(TimerKind.RESTORE_RETRY, str(op_id))


# The M1 input that carries out each intent decision (the ambiguous-publish rule).
_M1_VERDICT = {
    IntentAction.RELEASE: CheckpointInput.INSPECTED_VERIFIED,
    IntentAction.QUARANTINE_AND_ABORT: CheckpointInput.INSPECTED_UNVERIFIABLE,
    IntentAction.ABORT: CheckpointInput.INSPECTED_ABSENT,
}

# What M9 is told when every call of a phase answered (the abort of a rejected snapshot
# tells it nothing: M9 is already selecting again).
_DONE: Mapping[Phase, RestoreInput] = MappingProxyType(
    {
        Phase.RESTORE: RestoreInput.RECV_RESTORED,
        Phase.DISCARD: RestoreInput.RECV_DISCARDED,
        Phase.RESUME: RestoreInput.RECV_RESUMED,
    }
)


class RestoreFlow:
    """The restore's work within one coordinator step (scratch: thrown away after it); M9's
    side of its remote phases (a `PhaseOwner` of `phases`)."""

    def __init__(self, host: StepHost) -> None:
        self.h = host
        self.phases = PhaseRunner(host, self)
        self._events = RunToCompletion[RestoreInput](self._fire_one)

    # ------------------------------------------------------------------ plumbing

    @property
    def value(self) -> Value[RestoreState, RestoreData]:
        value = self.h.state.restore
        if value is None:
            raise LocalProtocolError("no restore has started: feed Recovered first")
        return value

    @property
    def run(self) -> RestoreRun:
        run = self.h.state.restoring
        if run is None:
            raise LocalProtocolError(f"no restore in progress ({self.value.state.value})")
        return run

    def update(self, **changes: Any) -> None:
        self.h.state = replace(self.h.state, restoring=replace(self.run, **changes))

    def active(self) -> bool:
        """Is a restore running?"""
        return restore_active(self.h.state)

    def fire(self, event: RestoreInput, arg: Any = None) -> None:
        """Feed M9; its named work runs in row order (queued if fired from inside work)."""
        self._events.fire(event, arg)

    def _fire_one(self, event: RestoreInput, arg: Any) -> None:
        before = self.value
        after, named = self.h.restore_table.step(before, event, arg)
        self.h.state = replace(self.h.state, restore=after)
        for effect in named:
            if isinstance(effect, Effect):
                RESTORE_WORK[effect.name](self, arg)
            else:  # a derived table may bind its own effect values
                self.h.emit(effect)
        if after.state is not before.state:
            self._entered(after.state)

    def _entered(self, state: RestoreState) -> None:
        if state is RestoreState.SELECTING and self.run.calls is None:
            self.select()
        elif state is RestoreState.RESTORED_PAUSED:
            self.discard_plan()
        elif state is RestoreState.IDLE:
            self.finish()

    def members(self, role: Role) -> list[str]:
        fleet = self.h.state.fleet
        return [] if fleet is None else sorted(m.name for m in fleet.members if m.role is role)

    def deadline(self) -> float:
        return self.h.now + self.h.config.control_timeout_s

    # ------------------------------------------------------------------ start and intent

    def begin(self, intent: OpId | None) -> None:
        """Controller start (`Recovered`): a fresh restore; admission stays closed until it
        ends. With an intent record, M1 inspects the published path (the caller fires it)
        and `on_inspected` decides; without one, selection starts at once."""
        self.h.state = replace(
            self.h.state,
            restore=self.h.restore_table.start(),
            restoring=RestoreRun(intent=intent, started_at=self.h.now),
        )
        self.h.hold(Holder.RESTORE, deadlines=False)
        if intent is None:
            decision = decide_intent(None, None)
            self.update(decision=decision)
            self.fire(RestoreInput.INTENT_READ, decision)

    def finishing_intent(self, checkpoint_id: OpId) -> bool:
        """Is `checkpoint_id` the in-flight id this restore is finishing?"""
        return (
            self.active()
            and self.value.state is RestoreState.FINISHING_INTENT
            and self.run.intent == checkpoint_id
        )

    def on_inspected(self, verdict: PublishedState) -> None:
        """The published path of the in-flight id was inspected: decide and finish it."""
        assert self.run.intent is not None
        record = IntentRecord(self.run.intent, "recorded")
        decision = decide_intent(record, verdict)
        self.update(decision=decision)
        self.fire(RestoreInput.INTENT_READ, decision)

    def after_input(self) -> None:
        """Once M1 finished the in-flight id (released or aborted: idle), select."""
        if not self.active() or self.value.state is not RestoreState.FINISHING_INTENT:
            return
        decision = self.run.decision
        if (
            decision is not None
            and decision.action is not IntentAction.NONE
            and self.h.state.phase is CheckpointState.IDLE
        ):
            self.fire(RestoreInput.INTENT_FINISHED)

    # ------------------------------------------------------------------ selection

    def select(self) -> None:
        """List the candidates once, then choose among those not yet rejected."""
        run = self.run
        if run.candidates is None:
            self.h.emit(ListSnapshots())
            return
        fleet = self.h.state.fleet
        selection = select_snapshot(
            run.anchor,
            run.candidates,
            mode=self.h.config.restore_mode,
            fingerprint="" if fleet is None else fleet.fingerprint,
            rejected=self.value.data.rejected,
        )
        self.update(selection=selection, loaded=False, op_id=None, calls=None, touched=frozenset())
        chosen = selection.snapshot
        self.fire(selection.input, None if chosen is None else str(chosen.snapshot_id))

    def on_listed(self, event: SnapshotsListed) -> None:
        if (
            not self.active()
            or self.value.state is not RestoreState.SELECTING
            or self.run.candidates is not None
        ):
            self.h.log("stale_snapshot_list")
            return
        self.update(anchor=event.anchor, candidates=event.candidates)
        if self.run.calls is None:
            self.select()

    def on_loaded(self, event: SnapshotLoaded) -> None:
        if not self._loading(event.snapshot_id):
            return
        fleet = self.h.state.fleet
        digests = dict(event.digests)
        missing = sorted((set() if fleet is None else fleet.names) - digests.keys())
        if missing:
            self.h.log("snapshot_lacks_artifacts", level="warning", missing=missing)
            self.fire(RestoreInput.RESTORE_REJECTED, "missing_artifact")
            return
        try:
            ledger = event.ledger.controller_restarted()
            for group in ledger.finalization_unknown_groups():
                trained = group.group_id in event.trained
                ledger = ledger.resolve_finalization(group.group_id, trained)
        except (ValueError, TransitionNotAllowed) as error:
            self.h.log("snapshot_ledger_unusable", level="warning", error=str(error))
            self.fire(RestoreInput.RESTORE_REJECTED, "corrupt")
            return
        self.update(
            loaded=True,
            digests=tuple(sorted(digests.items())),
            ledger=ledger,
            op_id=self.h.mint_id("rs"),  # a fresh id per snapshot tried, never reused
            replies=(),
            failures=(),
        )
        self.phases.start(Phase.RESTORE)

    def on_load_failed(self, event: SnapshotLoadFailed) -> None:
        if self._loading(event.snapshot_id):
            self.fire(RestoreInput.RESTORE_REJECTED, event.reason)

    def _loading(self, snapshot_id: OpId) -> bool:
        snapshot = self.run.snapshot if self.active() else None
        if (
            snapshot is None
            or self.value.state is not RestoreState.RESTORING
            or self.run.loaded
            or snapshot.snapshot_id != snapshot_id
        ):
            self.h.log("stale_snapshot_load", snapshot=str(snapshot_id))
            return False
        return True

    def queue_group(self, event: GroupOpened) -> None:
        """New dataloader work while restoring: dispatched after every unfinished group."""
        work = NewGroup(event.group_id, event.size, event.prompt, event.environment)
        self.update(new_work=(*self.run.new_work, work))
        self.h.log("group_queued_during_restore", group=event.group_id)

    # ------------------------------------------------------------------ remote phases

    def owns(self, op_id: OpId | None) -> bool:
        """Is a call with `op_id` one of the restore's: an `rs-` id, or an id a restore call
        was refused as conflicting with (the restore resumes it, S5)?"""
        if op_id is None:
            return False
        run = self.h.state.restoring
        conflicting = run is not None and any(op_id == other for _, other in run.conflicts)
        return op_id.kind == "rs" or conflicting

    def progress(self) -> PhaseCalls | None:
        run = self.h.state.restoring
        return None if run is None else run.calls

    def save(self, calls: PhaseCalls | None) -> None:
        self.update(calls=calls)

    def targets(self, slot: Slot) -> frozenset[CallKey]:
        run = self.run
        if slot.conflicting:
            return conflict_targets(run.conflicts, slot, self.h.state.fleet)
        phase = self.phases.current().phase
        if run.op_id is None or (phase is Phase.ABORT and self.clearing()):
            return frozenset()
        names = set(self.members(slot.role))
        if phase is Phase.RESTORE:
            names -= {name for name, _ in run.replies}  # asked again: only who did not answer
        elif phase is Phase.ABORT:
            names &= run.touched  # resume (= abort) only where the rejected restore went
        elif phase is Phase.DISCARD:
            names &= {d.participant for d in run.pending_discards}
        return frozenset((name, run.op_id) for name in names)

    def plan(self, phase: Phase, key: CallKey) -> CallData:
        # No budget: a failed restore-flow call waits for the restore retry timer instead.
        return CallData(deadline_at=self.deadline())

    def payload(self, phase: Phase, key: CallKey) -> Any:
        run = self.run
        name = key[0]
        if phase is Phase.RESTORE:
            snapshot = run.snapshot
            assert snapshot is not None
            return RestoreTarget(snapshot.snapshot_id, dict(run.digests).get(name, ""))
        if phase is Phase.DISCARD:
            # One discard at a time per agent: a reply names no rollout.
            head = next(d for d in run.pending_discards if d.participant == name)
            return (head.rollout_id, head.attempt)
        return None

    def mark_attempted(self, key: CallKey) -> None:
        # Touched from the moment the restore call goes out (a lost reply is aborted too).
        if self.phases.current().phase is Phase.RESTORE:
            self.update(touched=self.run.touched | {key[0]})

    def record_answer(self, key: CallKey, result: Any) -> None:
        run = self.run
        name = key[0]
        phase = self.phases.current().phase
        if phase is Phase.RESTORE:
            self.update(replies=tuple(sorted({**dict(run.replies), name: result}.items())))
        elif phase is Phase.DISCARD:
            pending = run.pending_discards
            head = next(i for i, d in enumerate(pending) if d.participant == name)
            pending = pending[:head] + pending[head + 1 :]
            self.update(pending_discards=pending)
            if any(d.participant == name for d in pending):
                self.phases.send_new([key])  # the next discard of this agent

    def note_conflict(self, key: CallKey, active_id: OpId) -> None:
        """S5, as for a checkpoint: the id the participant is fenced to (a dead controller's
        restore) is resumed before the restore is asked again."""
        self.update(conflicts=with_conflict(self.run.conflicts, key, active_id))

    def clearing(self) -> bool:
        """Is the abort phase resuming only the conflicting ids, the restore still running
        (M9 restoring; the abort of a rejected snapshot runs once M9 is selecting again)?"""
        return self.value.state is RestoreState.RESTORING

    def call_failed(self, key: CallKey, cause: Cause, *, refused: bool) -> None:
        if self.phases.current().phase is not Phase.RESTORE:
            return  # the call's `failed` state is what the retry timer sends again
        run = self.run
        name = key[0]
        retryable = self.h.policy.classify(cause).retryable
        # A refusal changed nothing: nothing to abort there if the snapshot is rejected.
        touched = run.touched - {name} if refused else run.touched
        failures = tuple(sorted({**dict(run.failures), name: retryable}.items()))
        self.update(failures=failures, touched=touched)

    def role_settled(self, failed: frozenset[CallKey]) -> bool:
        phase = self.phases.current().phase
        if phase is Phase.RESTORE:
            return self.judged(self.judge())
        if not failed:
            return True
        if phase is Phase.ABORT and not self.clearing():
            self.arm_retry()  # aborting a rejected restore: M9 is already selecting
        else:
            # Clearing a conflict is part of the restore: a failed round spends one of the
            # snapshot's retries, so a chain of conflicts is bounded (M9 `max_retries`).
            self.fire(RestoreInput.CALL_FAILED)
        return False

    def phase_done(self) -> None:
        phase = self.phases.current().phase
        if phase is Phase.ABORT:
            clearing = self.clearing()
            self.update(calls=None, conflicts=frozenset())
            if clearing:
                self.phases.start(Phase.RESTORE)  # the same op id, to who did not answer
            else:
                self.select()
        else:
            self.fire(_DONE[phase])

    def judge(self) -> RestoreVerdict:
        """Verify the digests and ownership of every role restored so far (S16)."""
        run = self.run
        calls = self.phases.current()
        order = self.h.policy.phase_order[Phase.RESTORE][: calls.role + 1]
        called = [name for slot in order for name in self.members(slot.role)]
        digests = dict(run.digests)
        return self.h.policy.judge_restore(
            {n: digests.get(n, "") for n in called},
            dict(run.replies),
            dict(run.failures),
            run.ledger,
        )

    def judged(self, verdict: RestoreVerdict) -> bool:
        """Act on a role's verdict; True if the restore moves to the next role."""
        if verdict.action is VerdictAction.DONE:
            return True
        if verdict.action is VerdictAction.RETRY:
            self.fire(RestoreInput.CALL_FAILED)
        elif verdict.action is VerdictAction.REJECT:
            snapshot = self.run.snapshot
            self.h.log(
                "restore_rejected",
                level="warning",
                snapshot=str(snapshot.snapshot_id) if snapshot else "",
                reason=verdict.reason,
                mismatches=verdict.mismatches,
                unowned=verdict.unowned,
            )
            self.fire(RestoreInput.RESTORE_REJECTED, verdict.reason)
        return False

    def arm_retry(self) -> None:
        op_id = self.run.op_id
        assert op_id is not None
        at = self.h.now + self.h.config.prepare_retry_interval_s
        self.h.emit(ArmTimer(restore_retry_timer(op_id), at))

    def on_retry_timer(self, timer: TimerKey) -> None:
        """The restore retry timer fired: send the failed calls again, same op id."""
        run = self.run if self.active() else None
        if run is None or run.op_id is None or timer != restore_retry_timer(run.op_id):
            self.h.log("stale_timer", timer=str(timer))
            return
        retry = self._to_retry()
        if not retry or self.phases.in_flight():
            self.h.log("stale_timer", timer=str(timer))
            return
        phase = self.phases.current().phase
        if phase is Phase.RESTORE:
            names = {name for name, _ in retry}
            self.update(
                replies=tuple(p for p in run.replies if p[0] not in names),
                failures=tuple(p for p in run.failures if p[0] not in names),
            )
            if run.conflicts:
                # S5: resume the ids the refusals named; the restore is asked again after.
                self.phases.start(Phase.ABORT)
                return
        elif phase is Phase.ABORT:
            # Walked again (keeping who answered): a refusal may have named the id its
            # participant holds now, which replaces the one refused (`with_conflict`).
            self.phases.start(Phase.ABORT)
            return
        self.phases.send_new(sorted(retry))  # the same op id (M9 keeps its id on a retry)

    def _to_retry(self) -> frozenset[CallKey]:
        calls = self.progress()
        if calls is None:
            return frozenset()
        if calls.phase is Phase.RESTORE:
            # The judge decides which restore calls are asked again (a `failed` reply too).
            verdict = self.judge()
            op_id = self.run.op_id
            if verdict.action is not VerdictAction.RETRY or op_id is None:
                return frozenset()
            return frozenset((name, op_id) for name in verdict.retry)
        return self.phases.unanswered()

    # ------------------------------------------------------------------ after the restore

    def discard_plan(self) -> None:
        """In restored_paused, and only there: drop restart_only continuations (S12)."""
        run = self.run
        assert run.op_id is not None
        restored = tuple((name, c) for name, reply in run.replies for c in reply.continuations)
        discards = self.h.policy.plan_discards(self.value, run.op_id, restored)
        self.update(restored=restored, discards=discards, pending_discards=discards)
        self.fire(RestoreInput.DISCARD_BEGIN, len(discards))

    def levels(self, ledger: Ledger) -> LevelPlan:
        """The effective levels, with the target for an environment discovery did not list."""
        fleet = self.h.state.fleet
        levels = () if fleet is None else fleet.levels
        known = {level.environment for level in levels}
        target = self.h.config.rollout_recovery.target_level
        extra = tuple(
            EffectiveLevel(env, target, target)
            for env in sorted({g.environment for g in ledger.unfinished_groups()} - known)
        )
        return LevelPlan((*levels, *extra), ())

    def dispatch(self, items: Iterable[DispatchItem]) -> None:
        """Dispatch the plan in its order (unfinished groups before new work); each group
        retried at a level is announced once, and its deadline starts."""
        ledger = self.h.state.ledger
        groups: list[str] = []
        for item in items:
            group = ledger.group(item.group_id)
            if item.group_id not in groups:
                groups.append(item.group_id)
                if item.level is not None:
                    self.h.emit(Redispatch(item.group_id, item.level.value))
            ledger = ledger.dispatch(item.key)
            self.h.emit(
                Dispatch(
                    group.environment,
                    item.group_id,
                    item.rollout_id,
                    item.attempt,
                    item.resume_from_turn,
                )
            )
        self.h.state = replace(self.h.state, ledger=ledger, mutated=True)
        for group_id in groups:
            self.h.start_deadline(group_id)

    def finish(self) -> None:
        """M9 reached idle: report, then open admission (dispatch may flow)."""
        run = self.run
        selection = run.selection
        kind = SelectionKind.FRESH_START if selection is None else selection.kind
        metrics = run.metrics or RestoreMetrics()
        counts = metrics.as_dict()
        tags = (("result", kind.value),)
        for name, value in counts.items():
            self.h.emit(Metric(f"restore.{name}", float(value), tags))
        self.h.emit(Metric("restore.seconds", self.h.now - run.started_at, tags))
        snapshot = run.snapshot
        self.h.emit(
            RestoreOutcome(
                kind.value,
                self.h.config.restore_mode,
                snapshot_id=None if snapshot is None else snapshot.snapshot_id,
                op_id=run.op_id if snapshot is not None else None,
                intent=run.intent,
                intent_action=_action(run),
                rejected=_rejected(run),
                metrics=tuple(counts.items()),
            )
        )
        self.h.state = replace(self.h.state, restoring=None)
        self.h.release(Holder.RESTORE, deadlines=False)


def _action(run: RestoreRun) -> str:
    return IntentAction.NONE.value if run.decision is None else run.decision.action.value


def _rejected(run: RestoreRun) -> tuple[tuple[str, str], ...]:
    if run.selection is None:
        return ()
    return tuple((str(r.snapshot_id), r.reason) for r in run.selection.rejected)


# ============================================================================ named work
#
# One function per effect name of RESTORE's rows. `arg` is the M9 input's argument.


def _w_finish_in_flight(flow: RestoreFlow, decision: IntentDecision) -> None:
    # §6: the same id on every participant, by M1's rows (release, or quarantine and abort).
    flow.h.fire(_M1_VERDICT[decision.action])


def _w_clear_intent(flow: RestoreFlow, _arg: Any) -> None:
    intent = flow.run.intent
    if intent is not None and not flow.h.intent_cleared:
        flow.h.emit(ClearIntent(intent))


def _w_report_candidates(flow: RestoreFlow, _arg: Any) -> None:
    run = flow.run
    failure = None if run.selection is None else run.selection.failure
    detail = "" if failure is None else f"{failure.source}: {failure.detail}".rstrip(": ")
    rejected = _rejected(run)
    flow.h.emit(
        RestoreOutcome(
            "restore_failed",
            flow.h.config.restore_mode,
            intent=run.intent,
            intent_action=_action(run),
            rejected=rejected,
            failure=detail,
        )
    )
    flow.h.log("restore_failed", level="error", failure=detail, rejected=rejected)
    flow.h.emit(Stopped("restore_failed", None))
    flow.h.state = replace(flow.h.state, restoring=None)


def _w_send_restore(flow: RestoreFlow, _arg: Any) -> None:
    snapshot = flow.run.snapshot
    assert snapshot is not None
    flow.h.emit(LoadSnapshot(snapshot.snapshot_id))


def _w_abort_restore(flow: RestoreFlow, _arg: Any) -> None:
    run = flow.run
    if run.op_id is not None:
        flow.h.emit(CancelTimer(restore_retry_timer(run.op_id)))
    if run.touched or run.conflicts:
        # Resume (= abort) the ids refusals named, then the rejected restore's id everywhere
        # it may hold; then select.
        flow.phases.start(Phase.ABORT)
    else:
        flow.update(calls=None)


def _w_retry_same_op(flow: RestoreFlow, _arg: Any) -> None:
    flow.arm_retry()


def _w_send_discards(flow: RestoreFlow, _arg: Any) -> None:
    flow.phases.start(Phase.DISCARD)


def _w_send_resume(flow: RestoreFlow, _arg: Any) -> None:
    flow.phases.start(Phase.RESUME)


def _w_drain_acks(flow: RestoreFlow, _arg: Any) -> None:
    ledger = flow.run.ledger or Ledger()
    flow.h.state = replace(flow.h.state, ledger=ledger, mutated=True)
    flow.update(calls=None)
    if ledger.pending_acks():
        flow.h.send_acks()


def _w_redispatch(flow: RestoreFlow, _arg: Any) -> None:
    run = flow.run
    ledger = flow.h.state.ledger
    dropped = {(d.rollout_id, d.attempt) for d in run.discards}
    kept = [c for _, c in run.restored if (c.rollout_id, c.attempt) not in dropped]
    fleet = flow.h.state.fleet
    plan = plan_redispatch(
        ledger,
        kept,
        flow.levels(ledger),
        group_scored=frozenset() if fleet is None else fleet.group_scored,
        new_work=run.new_work,
        discarded=len(run.discards),
    )
    flow.h.state = replace(flow.h.state, ledger=plan.ledger)
    # N is tombstoned on every agent; N+1 claims its continuation once (Dispatch below).
    for retire in plan.retire:
        key = (retire.rollout_id, retire.attempt)
        for agent in flow.members(Role.AGENT):
            flow.h.retire(agent, key)
    snapshot = run.snapshot
    if snapshot is not None:
        flow.h.emit(RestoreCut(snapshot.snapshot_id))
    flow.dispatch(plan.dispatch)
    flow.update(metrics=plan.metrics)
    flow.fire(RestoreInput.REDISPATCHED)


def _w_start_at_anchor(flow: RestoreFlow, _arg: Any) -> None:
    run = flow.run
    anchor = run.anchor if isinstance(run.anchor, TrainerAnchor) else None
    flow.h.emit(
        RewindToAnchor(
            0 if anchor is None else anchor.step,
            0 if anchor is None else anchor.dataloader_position,
        )
    )
    # Nothing restored: the lost interval reruns from the dataloader; only queued new work.
    plan = plan_redispatch(Ledger(), (), flow.levels(Ledger()), new_work=run.new_work)
    flow.h.state = replace(flow.h.state, ledger=plan.ledger, mutated=True)
    flow.dispatch(plan.dispatch)
    flow.update(metrics=plan.metrics)
    flow.fire(RestoreInput.REDISPATCHED)


RESTORE_WORK: Mapping[str, Callable[[RestoreFlow, Any], None]] = work(
    RESTORE,
    {
        "finish_in_flight": _w_finish_in_flight,
        "clear_intent": _w_clear_intent,
        "report_candidates": _w_report_candidates,
        "send_restore": _w_send_restore,
        "abort_restore": _w_abort_restore,
        "retry_same_op": _w_retry_same_op,
        "send_discards": _w_send_discards,
        "send_resume": _w_send_resume,
        "drain_acks": _w_drain_acks,
        "redispatch": _w_redispatch,
        "start_at_anchor": _w_start_at_anchor,
    },
    level="coordinator",
)
"""The work each M9 effect name stands for (every name of RESTORE's rows is here)."""
