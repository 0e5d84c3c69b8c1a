"""M9 restore, driven by the coordinator: the `restore` table's rows name the work, this
module does it.

What lives here: the controller's side of the restore at start, as the work behind every
effect name of `RESTORE`'s rows (`finish_in_flight`, `send_restore`, `abort_restore`,
`retry_same_op`, `send_discards`, `send_resume`, `drain_acks`, `redispatch`,
`start_at_anchor`, `clear_intent`, `report_candidates`), and M9's side of its remote phases
(restore, discard, resume, and the abort of a rejected snapshot), which the shared phase
runner walks in §3 order. How each phase is run is data, checked when the module is
imported: one `_RestorePhase` of `_PHASES` per phase names its behaviours (who is called,
what a call carries, what an answer or a failure records, when a role is settled, what
ends the phase, what the retry timer sends again); so is what entering an M9 state starts
beside its row's work, `_ON_ENTRY` (selecting: select; restored_paused: plan the
discards; idle: finish). The flow looks both up; it never switches on the phase in
progress or the state entered. Every decision is one of the pure planning functions --
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
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any

from quiesce.fsm import DefinitionError, Effect, TransitionNotAllowed, Value, work
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
    PHASE_ORDER,
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
            entered = _ON_ENTRY.get(after.state)
            if entered is not None:
                entered(self)

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

    def _walking(self) -> _RestorePhase:
        """How the phase in progress is run: its entry of `_PHASES`."""
        return _PHASES[self.phases.current().phase]

    def targets(self, slot: Slot) -> frozenset[CallKey]:
        """A conflicting slot resumes the ids refusals named (S5); any other calls the
        phase's `called` members of the slot's role, with the restore's op id."""
        run = self.run
        if slot.conflicting:
            return conflict_targets(run.conflicts, slot, self.h.state.fleet)
        if run.op_id is None:
            return frozenset()
        called = self._walking().called(self, frozenset(self.members(slot.role)))
        return frozenset((name, run.op_id) for name in called)

    def plan(self, phase: Phase, key: CallKey) -> CallData:
        # No budget: a failed restore-flow call waits for the restore retry timer instead.
        return CallData(deadline_at=self.deadline())

    def payload(self, phase: Phase, key: CallKey) -> Any:
        """What a call of `phase` carries: that phase's `payload`."""
        return _PHASES[phase].payload(self, key[0])

    def mark_attempted(self, key: CallKey) -> None:
        """A call went out: the phase's `attempted` records it."""
        self._walking().attempted(self, key[0])

    def record_answer(self, key: CallKey, result: Any) -> None:
        """A call was answered: the phase's `answered` records it."""
        self._walking().answered(self, key, result)

    def note_conflict(self, key: CallKey, active_id: OpId) -> None:
        """S5, as for a checkpoint: the id the participant is fenced to (a dead controller's
        restore) is resumed before the restore is asked again."""
        self.update(conflicts=with_conflict(self.run.conflicts, key, active_id))

    def clearing(self) -> bool:
        """Is the abort phase resuming only the conflicting ids, the restore still running
        (M9 restoring; the abort of a rejected snapshot runs once M9 is selecting again)?"""
        return self.value.state is RestoreState.RESTORING

    def call_failed(self, key: CallKey, cause: Cause, *, refused: bool) -> None:
        """A call settled unanswered: the phase's `failed` records it."""
        self._walking().failed(self, key, cause, refused)

    def role_settled(self, failed: frozenset[CallKey]) -> bool:
        """Every call of a role settled: the phase's `settled` says whether it moves on."""
        return self._walking().settled(self, failed)

    def phase_done(self) -> None:
        """Every slot answered: the phase's `done`."""
        self._walking().done(self)

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
        """The restore retry timer fired: the phase's `retry` sends its `to_retry` calls
        again, same op id."""
        run = self.run if self.active() else None
        if run is None or run.op_id is None or timer != restore_retry_timer(run.op_id):
            self.h.log("stale_timer", timer=str(timer))
            return
        retry = self._to_retry()
        if not retry or self.phases.in_flight():
            self.h.log("stale_timer", timer=str(timer))
            return
        self._walking().retry(self, retry)

    def _to_retry(self) -> frozenset[CallKey]:
        """The calls the phase in progress sends again on the retry timer (none: stale)."""
        calls = self.progress()
        if calls is None:
            return frozenset()
        return _PHASES[calls.phase].to_retry(self)

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


# ============================================================================ the phases
#
# How M9 runs each remote phase it walks, as data: one `_RestorePhase` per phase, its
# behaviours named below, grouped by what they answer. `RestoreFlow` looks the phase in
# progress up (`_walking`) and never branches on it.


@dataclass(frozen=True, slots=True)
class _RestorePhase:
    """How the restore runs one remote phase (the `PhaseOwner` answers, for that phase).

    `called`: who of a slot's role is called (the slot's members given), the phase's own
    id; `payload`: what a call to a participant carries; `attempted`: what a call that
    went out records; `answered`: what an answer records (and what it sends next);
    `failed`: what a call settled without an answer records (`refused`: the participant
    changed nothing); `settled`: once every call of a role settled (the unanswered given),
    does the phase move to the next role; `done`: every slot answered; `to_retry`: the
    calls the restore retry timer sends again; `retry`: what the timer does with them.
    """

    phase: Phase
    called: Callable[[RestoreFlow, frozenset[str]], frozenset[str]]
    payload: Callable[[RestoreFlow, str], Any]
    attempted: Callable[[RestoreFlow, str], None]
    answered: Callable[[RestoreFlow, CallKey, Any], None]
    failed: Callable[[RestoreFlow, CallKey, Cause, bool], None]
    settled: Callable[[RestoreFlow, frozenset[CallKey]], bool]
    done: Callable[[RestoreFlow], None]
    to_retry: Callable[[RestoreFlow], frozenset[CallKey]]
    retry: Callable[[RestoreFlow, frozenset[CallKey]], None]


def _nothing(*_args: Any) -> None:
    """Records nothing: the phase keeps no bookkeeping of this (of a failed call, say: its
    `failed` state is what the retry timer sends again)."""


# -------------------------------------------------- who is called (the phase's own id)


def _not_answered(flow: RestoreFlow, names: frozenset[str]) -> frozenset[str]:
    return names - {name for name, _ in flow.run.replies}  # asked again: who did not answer


def _touched(flow: RestoreFlow, names: frozenset[str]) -> frozenset[str]:
    if flow.clearing():
        return frozenset()  # only the conflicting ids are resumed, not the restore's own
    return names & flow.run.touched  # resume (= abort) only where the rejected restore went


def _discarding(flow: RestoreFlow, names: frozenset[str]) -> frozenset[str]:
    return names & {d.participant for d in flow.run.pending_discards}


def _everyone(_flow: RestoreFlow, names: frozenset[str]) -> frozenset[str]:
    return names


# -------------------------------------------------- what a call carries


def _restore_target(flow: RestoreFlow, name: str) -> RestoreTarget:
    run = flow.run
    snapshot = run.snapshot
    assert snapshot is not None
    return RestoreTarget(snapshot.snapshot_id, dict(run.digests).get(name, ""))


def _next_discard(flow: RestoreFlow, name: str) -> tuple[str, int]:
    # One discard at a time per agent: a reply names no rollout.
    head = next(d for d in flow.run.pending_discards if d.participant == name)
    return (head.rollout_id, head.attempt)


def _no_payload(_flow: RestoreFlow, _name: str) -> None:
    return None


# -------------------------------------------------- what a call records


def _touch(flow: RestoreFlow, name: str) -> None:
    # Touched from the moment the restore call goes out (a lost reply is aborted too).
    flow.update(touched=flow.run.touched | {name})


def _keep_reply(flow: RestoreFlow, key: CallKey, result: Any) -> None:
    replies = {**dict(flow.run.replies), key[0]: result}
    flow.update(replies=tuple(sorted(replies.items())))


def _discarded(flow: RestoreFlow, key: CallKey, _result: Any) -> None:
    name = key[0]
    pending = flow.run.pending_discards
    head = next(i for i, d in enumerate(pending) if d.participant == name)
    pending = pending[:head] + pending[head + 1 :]
    flow.update(pending_discards=pending)
    if any(d.participant == name for d in pending):
        flow.phases.send_new([key])  # the next discard of this agent


def _keep_failure(flow: RestoreFlow, key: CallKey, cause: Cause, refused: bool) -> None:
    run = flow.run
    name = key[0]
    retryable = flow.h.policy.classify(cause).retryable
    # A refusal changed nothing: nothing to abort there if the snapshot is rejected.
    touched = run.touched - {name} if refused else run.touched
    failures = tuple(sorted({**dict(run.failures), name: retryable}.items()))
    flow.update(failures=failures, touched=touched)


# -------------------------------------------------- when a role is settled


def _judge_role(flow: RestoreFlow, _failed: frozenset[CallKey]) -> bool:
    return flow.judged(flow.judge())


def _all_answered(flow: RestoreFlow, failed: frozenset[CallKey]) -> bool:
    if not failed:
        return True
    # M9 is told of a failed round: clearing a conflict is part of the restore, so there it
    # spends one of the snapshot's retries and a chain of conflicts is bounded (M9
    # `max_retries`); a discard or resume is retried until it succeeds.
    flow.fire(RestoreInput.CALL_FAILED)
    return False


def _aborted(flow: RestoreFlow, failed: frozenset[CallKey]) -> bool:
    if failed and not flow.clearing():
        flow.arm_retry()  # aborting a rejected restore: M9 is already selecting
        return False
    return _all_answered(flow, failed)


# -------------------------------------------------- when the phase is done


def _tell(event: RestoreInput) -> Callable[[RestoreFlow], None]:
    """Every call of the phase answered: M9 is told `event`."""

    def done(flow: RestoreFlow) -> None:
        flow.fire(event)

    return done


def _after_abort(flow: RestoreFlow) -> None:
    # M9 is told nothing: clearing, it is still restoring; otherwise already selecting.
    clearing = flow.clearing()
    flow.update(calls=None, conflicts=frozenset())
    if clearing:
        flow.phases.start(Phase.RESTORE)  # the same op id, to who did not answer
    else:
        flow.select()


# -------------------------------------------------- what the retry timer sends again


def _judged_retry(flow: RestoreFlow) -> frozenset[CallKey]:
    # The judge decides which restore calls are asked again (a `failed` reply too).
    verdict = flow.judge()
    op_id = flow.run.op_id
    if verdict.action is not VerdictAction.RETRY or op_id is None:
        return frozenset()
    return frozenset((name, op_id) for name in verdict.retry)


def _unanswered(flow: RestoreFlow) -> frozenset[CallKey]:
    return flow.phases.unanswered()


def _send_again(flow: RestoreFlow, retry: frozenset[CallKey]) -> None:
    flow.phases.send_new(sorted(retry))  # the same op id (M9 keeps its id on a retry)


def _restore_again(flow: RestoreFlow, retry: frozenset[CallKey]) -> None:
    run = flow.run
    names = {name for name, _ in retry}
    flow.update(
        replies=tuple(p for p in run.replies if p[0] not in names),
        failures=tuple(p for p in run.failures if p[0] not in names),
    )
    if run.conflicts:
        # S5: resume the ids the refusals named; the restore is asked again after.
        flow.phases.start(Phase.ABORT)
    else:
        _send_again(flow, retry)


def _abort_again(flow: RestoreFlow, _retry: frozenset[CallKey]) -> None:
    # Walked again (keeping who answered): a refusal may have named the id its participant
    # holds now, which replaces the one refused (`with_conflict`).
    flow.phases.start(Phase.ABORT)


_WALKED: frozenset[Phase] = frozenset({Phase.RESTORE, Phase.ABORT, Phase.DISCARD, Phase.RESUME})
"""The remote phases the restore walks: restore, the abort of a rejected snapshot (and the
resume of the ids a restore call conflicted with), discard, resume."""


def _phase_table(*entries: _RestorePhase) -> Mapping[Phase, _RestorePhase]:
    """`entries` by phase, checked: exactly one per phase of `_WALKED`, each one the shared
    phase order (§3) can walk; a `DefinitionError` lists every problem otherwise.

    >>> _phase_table(*(e for e in _PHASES.values() if e.phase is not Phase.DISCARD))
    Traceback (most recent call last):
    ...
    quiesce.fsm._errors.DefinitionError: table 'restore phases' is malformed (1 problems):
      - [unknown_name] phase 'discard' is walked by the restore but has no entry
    """
    problems: list[tuple[str, str]] = []
    by_phase: dict[Phase, _RestorePhase] = {}
    for entry in entries:
        if entry.phase in by_phase:
            problems.append(("conflicting_pair", f"phase {entry.phase.value!r} has two entries"))
        by_phase[entry.phase] = entry
    problems += [
        ("unknown_name", f"phase {phase.value!r} is walked by the restore but has no entry")
        for phase in sorted(_WALKED - by_phase.keys(), key=lambda p: p.value)
    ]
    problems += [
        ("unknown_name", f"entry for phase {phase.value!r}, which the restore never walks")
        for phase in sorted(by_phase.keys() - _WALKED, key=lambda p: p.value)
    ]
    problems += [
        ("unknown_name", f"phase {phase.value!r} has no order in §3 (PHASE_ORDER)")
        for phase in sorted(by_phase.keys() - PHASE_ORDER.keys(), key=lambda p: p.value)
    ]
    if problems:
        raise DefinitionError("restore phases", problems)
    return MappingProxyType(by_phase)


_PHASES: Mapping[Phase, _RestorePhase] = _phase_table(
    _RestorePhase(
        Phase.RESTORE,
        called=_not_answered,
        payload=_restore_target,
        attempted=_touch,
        answered=_keep_reply,
        failed=_keep_failure,
        settled=_judge_role,
        done=_tell(RestoreInput.RECV_RESTORED),
        to_retry=_judged_retry,
        retry=_restore_again,
    ),
    _RestorePhase(
        Phase.ABORT,
        called=_touched,
        payload=_no_payload,
        attempted=_nothing,
        answered=_nothing,
        failed=_nothing,
        settled=_aborted,
        done=_after_abort,
        to_retry=_unanswered,
        retry=_abort_again,
    ),
    _RestorePhase(
        Phase.DISCARD,
        called=_discarding,
        payload=_next_discard,
        attempted=_nothing,
        answered=_discarded,
        failed=_nothing,
        settled=_all_answered,
        done=_tell(RestoreInput.RECV_DISCARDED),
        to_retry=_unanswered,
        retry=_send_again,
    ),
    _RestorePhase(
        Phase.RESUME,
        called=_everyone,
        payload=_no_payload,
        attempted=_nothing,
        answered=_nothing,
        failed=_nothing,
        settled=_all_answered,
        done=_tell(RestoreInput.RECV_RESUMED),
        to_retry=_unanswered,
        retry=_send_again,
    ),
)
"""How the restore runs each phase it walks (`RestoreFlow._walking`: the one in progress)."""


# ============================================================================ on entry
#
# What entering an M9 state starts, beside its row's named work (which runs first).


# Each calls the flow's method by name, looked up when it runs (a subclass or a planted bug
# that replaces the method is run, not the one this table was built with).


def _select_unless_aborting(flow: RestoreFlow) -> None:
    # A rejected snapshot's abort still calling selects when it is done (`_after_abort`).
    if flow.run.calls is None:
        flow.select()


def _plan_discards(flow: RestoreFlow) -> None:
    flow.discard_plan()


def _finish(flow: RestoreFlow) -> None:
    flow.finish()


def _entry_table(
    entries: Mapping[RestoreState, Callable[[RestoreFlow], None]],
) -> Mapping[RestoreState, Callable[[RestoreFlow], None]]:
    """`entries`, checked: every key a state of M9's table (a `DefinitionError` otherwise).

    >>> _entry_table({"idle": _finish})
    Traceback (most recent call last):
    ...
    quiesce.fsm._errors.DefinitionError: table 'restore' is malformed (1 problems):
      - [unknown_state] entry work for 'idle', not a state of 'restore'
    """
    problems = [
        ("unknown_state", f"entry work for {state!r}, not a state of {RESTORE.name!r}")
        for state in entries
        if not isinstance(state, RESTORE.states)
    ]
    if problems:
        raise DefinitionError(RESTORE.name, problems)
    return MappingProxyType(dict(entries))


_ON_ENTRY: Mapping[RestoreState, Callable[[RestoreFlow], None]] = _entry_table(
    {
        RestoreState.SELECTING: _select_unless_aborting,
        RestoreState.RESTORED_PAUSED: _plan_discards,
        RestoreState.IDLE: _finish,
    }
)
"""The work entering an M9 state starts (a state not here starts nothing)."""


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
