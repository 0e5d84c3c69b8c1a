"""One step of the design model: the controller's side of it.

What lives here: `Step` (on `ParticipantSide`), the controller's rollout bookkeeping (the
admission gate and the deadline registry M6/M7, the recovery ledger M8, the background ACK
and retire calls, dispatch, deadline expiry and retries; past the attempt limit the group
is abandoned and counted), its checkpoint (M1) and restore (M9), their walks through the
participants in §3 order, one atomic call at a time, and its reading of each reply;
`initial_state`. An input fires a table through `Steppers` and the *names* of the effects
its row emits select the work (`_M1_WORK`, `_M9_WORK`, built by `quiesce.fsm.work` against
the same tables as the coordinator's: every name has work, an unknown one raises), so a
mutant that drops an effect from a row really drops that work. What it does not know:
which moves are enabled, or the properties (`_model`).

The abstraction (PROTOCOL.md §8, "Two levels of model"):
- a control call with its in-attempt retries (§4: the same op id) is ONE step: the
  participant's tables step on the request and the controller's on the reply. A first try
  lost or answered 5xx and then retried is the call itself, so the faults enumerated are
  those that leave a trace (`call`); every try failing costs `call_retries + 1` faults;
- the ACK outbox and the retire list are background calls, one step each, retried until
  answered (a lost retire answer for a completed result would otherwise hold it forever);
- the controller's local store steps (intent, cut, validate, publish, reading the intent
  record, selecting a snapshot) complete inside the step that starts them: the store is
  local and synchronous, and a controller crash still lands before or after publication;
- a rollout turn ends in one step; the next turn's policy call is made at once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from quiesce.fsm import work
from quiesce.models.design._labels import (
    AttemptLabel,
    FenceLabel,
    GateLabel,
    GroupLabel,
    M1Label,
    M9Label,
    PolicyLabel,
    ResourcesLabel,
    WalkPhase,
)
from quiesce.models.design._participants import ParticipantSide
from quiesce.models.design._state import (
    AGENT,
    EMPTY_WALK,
    LIVE_ATTEMPTS,
    NAMES,
    POLICY,
    RESOURCES,
    Attempt,
    Controller,
    DesignParams,
    DesignState,
    Fence,
    Group,
    Key,
    Ledger,
    Participants,
    Snapshot,
    Store,
    Walk,
    World,
)
from quiesce.models.design._tables import GROUP, Steppers
from quiesce.models.oracles import SPEC_PHASE_ORDER, disposition, reason_of
from quiesce.protocol import Cause, classify
from quiesce.protocol.machines import (
    CHECKPOINT,
    RESTORE,
    AttemptInput,
    CheckpointInput,
    ExecAnswer,
    GateInput,
    GroupInput,
    IntentAction,
    RegistryInput,
    Restart,
    RestoreInput,
)

__all__ = [
    "DELAYABLE",
    "TRANSIENT",
    "Step",
    "ack_batch",
    "initial_state",
    "next_call",
    "walk_active",
]

CI, TI = CheckpointInput, AttemptInput
_ENDED = (AttemptLabel.FAILED, AttemptLabel.ABANDONED)  # without a result: retried
_DONE_INPUT = {
    WalkPhase.PREPARE: CI.ROLES_DONE,
    WalkPhase.COMMIT: CI.ROLES_DONE,
    WalkPhase.RELEASE: CI.ROLES_DONE,
    WalkPhase.ABORT: CI.ROLES_DONE,
    WalkPhase.FLUSH: CI.ACKS_FLUSHED,
}
"""The M1 input a finished walk of a checkpoint fires (the re-flush goes back to the cut)."""
_RESTORE_CALL_PHASES = (WalkPhase.RESTORE, WalkPhase.DISCARD, WalkPhase.RESUME_RS)
"""The walks of a restore whose failed call M9 hears of (an abort of one is retried)."""
_ATTEMPTING_PHASES = (WalkPhase.PREPARE, WalkPhase.RESTORE)
"""The walks whose call marks its participant attempted before it is sent (S6)."""
_RESTARTED = classify(Cause.PARTICIPANT_RESTARTED)
_FAILED = {
    "error": Cause.PARTICIPANT_ERROR,
    "failed": Cause.COMMIT_FAILED,
    "restore_failed": Cause.PARTICIPANT_ERROR,
}
"""The cause a call fails with when its reply is a failure."""
# §4: a refusal answered to a control call is classified by its code.
_REFUSAL_CAUSE = {
    "checkpoint_conflict": Cause.CHECKPOINT_CONFLICT,
    "stale_checkpoint": Cause.STALE_ID,
    "invalid_phase": Cause.INVALID_PHASE,
}
DELAYABLE = ("prepare", "commit", "resume", "restore")
"""The ops whose request a timeout may hold back and redeliver later (S15)."""
TRANSIENT = {
    "request_lost": Cause.REQUEST_LOST,
    "reply_lost": Cause.REPLY_LOST,
    "timeout": Cause.TIMEOUT,
}
"""The transient faults of a call and the cause each one is reported with (a 5xx is a
request lost for the model: the participant changed nothing, the cause is as retryable)."""


_ALL = (1 << POLICY) | (1 << AGENT) | (1 << RESOURCES)
"""Every participant, as a bit set."""

_ORDERS: dict[WalkPhase, tuple[int, ...]] = {
    WalkPhase.PREPARE: (POLICY, AGENT, RESOURCES),
    WalkPhase.COMMIT: (AGENT, POLICY, RESOURCES),  # policy needs the agents' continuation index
    WalkPhase.RELEASE: (RESOURCES, POLICY, AGENT),
    WalkPhase.ABORT: (RESOURCES, POLICY, AGENT),
    WalkPhase.RESTORE: (POLICY, AGENT, RESOURCES),
    WalkPhase.RESUME_RS: (RESOURCES, POLICY, AGENT),
    WalkPhase.ABORT_RS: (RESOURCES, POLICY, AGENT),
}
"""§3: the order each walk calls the participants in."""

_M1_PHASE = {
    WalkPhase.FLUSH: M1Label.FLUSHING_ACKS,
    WalkPhase.PREPARE: M1Label.PREPARING,
    WalkPhase.COMMIT: M1Label.COMMITTING,
    WalkPhase.REFLUSH: M1Label.CAPTURING,
    WalkPhase.RELEASE: M1Label.RELEASING,
    WalkPhase.ABORT: M1Label.ABORTING,
}
"""The M1 state each walk of a checkpoint belongs to (outside it the walk is dormant)."""
_M9_PHASE = {
    WalkPhase.RESTORE: M9Label.RESTORING,
    WalkPhase.DISCARD: M9Label.DISCARDING,
    WalkPhase.RESUME_RS: M9Label.RESUMING,
    WalkPhase.ABORT_RS: M9Label.SELECTING,
}
"""The M9 state each walk of a restore belongs to."""
_ACK_PHASES = (WalkPhase.FLUSH, WalkPhase.REFLUSH)
"""The walks that flush the ACK outbox (one batch call to the agent)."""
_ABORT_PHASES = (WalkPhase.ABORT, WalkPhase.ABORT_RS)
"""The walks that call only the participants marked attempted."""


_PREPARE_DONE = (FenceLabel.PREPARED, FenceLabel.COMMITTING, FenceLabel.COMMITTED_PAUSED)
"""The fence states of a participant that has done the prepare of its active id."""


def _fence_done(fence: Fence, op: str, op_id: int) -> bool:
    """Has a participant whose fence is `fence` finished `op` under `op_id` (I5)?"""
    if op == "prepare":
        return fence.active == op_id and fence.state in _PREPARE_DONE
    if op == "commit":
        return fence.active == op_id and fence.state == FenceLabel.COMMITTED_PAUSED
    if op == "restore":
        return fence.active == op_id and fence.state == FenceLabel.RESTORED_PAUSED
    return fence.active != op_id  # resume: the id is no longer active there


def _latest_attempts(ledger: Ledger) -> dict[int, Attempt]:
    """The newest attempt of every sibling that has one."""
    latest: dict[int, Attempt] = {}
    for attempt in ledger.attempts:
        if attempt.sibling not in latest or attempt.attempt > latest[attempt.sibling].attempt:
            latest[attempt.sibling] = attempt
    return latest


def walk_active(c: Controller | Step) -> bool:
    """Is the walk the one its machine (M1 or M9) is waiting on right now?"""
    phase = c.walk.phase
    if not phase or c.stopped:
        return False
    if phase in _M1_PHASE:
        return c.m1.state == _M1_PHASE[phase]
    return c.m9 is not None and c.m9[0] == _M9_PHASE[phase]


def ack_batch(c: Controller | Step) -> tuple[Key, ...]:
    """The ACK outbox: owed ACKs of the ledger and completions it does not own."""
    owed = (
        ()
        if c.ledger is None
        else tuple((a.sibling, a.attempt) for a in c.ledger.attempts if a.ack_owed)
    )
    return tuple(sorted({*owed, *c.outbox})) if owed or c.outbox else ()


def _discards(c: Controller | Step, recovery_mode: str) -> tuple[tuple[int, int, int], ...]:
    """Restored continuations that depend on a `restart_only` resource (S12), still to
    discard (a discard answered leaves the restore's plan)."""
    if recovery_mode != "restart_only":
        return ()
    return tuple(r for r in c.continuations if r[2] > 0)


_OWN_ID_PHASES = (WalkPhase.PREPARE, WalkPhase.COMMIT, WalkPhase.RELEASE)
"""The walks of a checkpoint's own id that resume no conflicting id first (§4)."""
_PHASE_OP = {WalkPhase.PREPARE: "prepare", WalkPhase.COMMIT: "commit", WalkPhase.RESTORE: "restore"}
"""The op a walk's call sends (every other walk of `_ORDERS` sends `resume`)."""


def next_call(c: Controller | Step, recovery_mode: str) -> tuple[int, str, int, Any] | None:
    """The next call of the walk: `(participant, op, id, extra)`, or None when done."""
    phase, done = c.walk.phase, c.walk.done
    if phase in _ACK_PHASES:
        # The batch of the outbox as it is now (ACKs are idempotent, so a batch the
        # background drain already delivered is answered again, harmlessly).
        return None if done else (AGENT, "ack", 0, ack_batch(c))
    if phase is WalkPhase.DISCARD:
        left = _discards(c, recovery_mode)
        return (AGENT, "discard", c.rs, left[0]) if left else None
    if phase not in _OWN_ID_PHASES:
        # §4: a participant fenced to another id is aborted (resumed) with that id first.
        for p in _ORDERS[WalkPhase.ABORT]:
            for who, other in c.conflicts:
                if who == p:
                    return (p, "resume", other, "conflict")
    op_id = c.rs if phase in _M9_PHASE else c.m1.attempt
    op = _PHASE_OP.get(phase, "resume")
    needed = c.attempted if phase in _ABORT_PHASES else _ALL
    extra = c.m9[1] if phase is WalkPhase.RESTORE and c.m9 is not None else None
    for p in _ORDERS[phase]:
        if needed >> p & 1 and not done >> p & 1:
            return (p, op, op_id, extra)
    return None


def initial_state(p: DesignParams, steppers: Steppers) -> DesignState:
    """Discovery done, the prompt group opened and every sibling dispatched."""
    fence = Fence(FenceLabel.IDLE, 0, 0, ())
    controller = Controller(ledger=Ledger(Group(GroupLabel.GENERATING, 0, False), ()))
    refusals = tuple((-1, False) for _ in range(p.siblings))
    policy = (PolicyLabel.ACCEPTING, ())
    parts = Participants((fence,) * 3, policy, ResourcesLabel.ACCEPTING, (), refusals, ())
    state = DesignState(controller, parts, Store(0, ()), World(p.triggers, p.faults))
    step = Step(p, steppers, state)
    step.open_group()
    return step.result()


class Step(ParticipantSide):
    """One transition under construction (see the module doc)."""

    def __init__(self, params: DesignParams, steppers: Steppers, state: DesignState) -> None:
        super().__init__(params, steppers, state)
        self._m1_queue: list[tuple[CheckpointInput, Any]] = []
        self._m9_queue: list[tuple[RestoreInput, Any]] = []
        self._draining = False

    def fire(self, input: CheckpointInput, arg: Any = None) -> None:
        """Fire M1; the work its row names runs in row order (queued if fired from work)."""
        self._m1_queue.append((input, arg))
        if self._draining:
            return
        self._draining = True
        try:
            while self._m1_queue and not self.stopped:
                self._fire_one(*self._m1_queue.pop(0))
        finally:
            self._draining = False
            self._m1_queue.clear()

    def _fire_one(self, input: CheckpointInput, arg: Any) -> None:
        stepped = self.t.checkpoint(self.m1, input, arg)
        if stepped is None:
            self.stopped = "refused"  # the table refused what the composition fired
            return
        before, (self.m1, names) = self.m1, stepped
        for name in names:
            _M1_WORK[name](self, arg)
        if self.m1.state == M1Label.STOPPED and not self.stopped:
            self.stopped = "stopped"  # a row that stops without naming the `stop` work
        if input is CI.ROLES_DONE and before.state in (M1Label.RELEASING, M1Label.ABORTING):
            self.resolved(before.attempt, released=before.state == M1Label.RELEASING)
        if self.m1.state == M1Label.IDLE and before.state != M1Label.IDLE:
            # The attempt is over: what the controller tracked about it goes with it.
            self.staged, self.attempted, self.conflicts = (None, None, None), 0, ()
            self.deadline = self.retry = 0
            self.judge_end(before.attempt)
        if (
            self.m9 is not None
            and self.m9[0] == M9Label.FINISHING_INTENT
            and before.state != M1Label.IDLE
            and self.m1.state == M1Label.IDLE
        ):
            self.restore_input(RestoreInput.INTENT_FINISHED)

    def resolved(self, op_id: int, released: bool) -> None:
        """I3: the release (or abort) of `op_id` completed on every participant; a release
        must follow its publication, an abort must find it unpublished."""
        published = any(s.op_id == op_id for s in self.published)
        if released != published:
            what = "released unpublished" if released else "aborted though published"
            self.flag("I3", f"{op_id} {what}")
        self.w = self.w._replace(unresolved=self.w.unresolved - {op_id})

    def fail(self, cause: Cause) -> None:
        """Fail the attempt in progress with `cause` (§4 classifies it)."""
        self.judge_failure(cause)
        self.fire(CI.FAILED, cause)

    def judge_failure(self, cause: Cause) -> None:
        """I7's own count (§4): the attempt in progress failed with `cause`. Only its first
        cause counts, and only for an attempt never published (the failed release of a
        published one is retried by its timer: that attempt has not failed); a skip or a
        fatal cause is no retryable failure, as the oracles state §4 (`reason_of`,
        `disposition`): M1's counter and the code's cause table are never read here."""
        w, attempt = self.w, self.m1.attempt
        if w.failing or not attempt or any(s.op_id == attempt for s in self.published):
            return
        retryable = disposition(reason_of(cause.value)) == "retryable"
        self.w = w._replace(failing=True, failed_attempts=w.failed_attempts + retryable)

    def judge_end(self, attempt: int) -> None:
        """I7's own count: `attempt` ended. A published attempt succeeded, which ends the
        run of consecutive failures (§4); a failed one was counted when it failed."""
        published = any(s.op_id == attempt for s in self.published)
        failed = 0 if published else self.w.failed_attempts
        self.w = self.w._replace(failing=False, failed_attempts=failed)

    def capture(self, reflushed: bool) -> None:
        """The controller's cut (S7, S9): skip if the trainer moved, re-flush pending ACKs
        once inside the cut, else the cut is captured."""
        if self.w.trainer_step != self.m1.step or self.w.optimizer == 1:
            self.fail(Cause.TRAINER_STATE_CHANGED)
        elif ack_batch(self):
            if reflushed:
                self.fail(Cause.ACKS_PENDING)
            else:
                self.start_walk(WalkPhase.REFLUSH)
        else:
            self.fire(CI.CUT_CAPTURED)

    def publish(self) -> None:
        """Rename staging to published; I8 is judged on what is published."""
        op_id, ledger = self.m1.attempt, self.ledger
        assert ledger is not None
        for p in (POLICY, AGENT, RESOURCES):
            fence = self.fences[p]
            recorded = next(
                (r[2] for r in fence.recorded if r[0] == op_id and r[1] == "commit"), None
            )
            if fence.state != FenceLabel.COMMITTED_PAUSED or fence.active != op_id:
                self.flag("I8", f"{op_id} published while {NAMES[p]} is not committed to it")
            elif recorded != self.staged[p]:
                self.flag("I8", f"{op_id} staged digest of {NAMES[p]} differs from its commit")
        if self.w.trainer_step != self.m1.step or self.w.optimizer == 1:
            self.flag("I8", f"cut of {op_id} after the trainer moved")
        if any(a.ack_owed for a in ledger.attempts):
            self.flag("I8", f"cut of {op_id} with ACKs pending")
        snapshot = Snapshot(op_id, self.m1.step, self.staged, ledger)
        self.published = (*self.published, snapshot)
        self.fire(CI.PUBLISHED)

    def start_walk(self, phase: WalkPhase) -> None:
        """Begin a remote phase (a retried abort/release skips who answered)."""
        keep = self.walk.phase is phase
        self.walk = Walk(phase, self.walk.done if keep else 0, False, 0)
        nothing_to_ack = phase in _ACK_PHASES and not ack_batch(self)
        if nothing_to_ack or self.next_call() is None:
            self.finish_walk()

    def next_call(self) -> tuple[int, str, int, Any] | None:
        """The next call of the walk: `(participant, op, id, extra)`, or None when done."""
        return next_call(self, self.p.recovery_mode)

    def advance(self, p: int) -> None:
        """The call to `p` succeeded: on to the next one, or the phase is done."""
        self.walk = self.walk._replace(done=self.walk.done | 1 << p, not_ready=False)
        self.finish_if_done()

    def finish_if_done(self) -> None:
        """The walk is done once it has no call left to make."""
        if self.next_call() is None:
            self.finish_walk()

    def call_again(self, p: int) -> None:
        """`p` is called again in this walk, in its turn (a restarted participant is
        prepared again)."""
        self.walk = self.walk._replace(done=self.walk.done & ~(1 << p))

    def finish_walk(self) -> None:
        """Every call of the walk answered: its machine moves on."""
        phase = self.walk.phase
        self.walk = EMPTY_WALK
        if phase in _DONE_INPUT:
            self.fire(_DONE_INPUT[phase])
        elif phase is WalkPhase.REFLUSH:
            self.capture(reflushed=True)
        elif phase is WalkPhase.RESTORE:
            self.restore_input(RestoreInput.RECV_RESTORED)
            if self.m9 is not None and self.m9[0] == M9Label.RESTORED_PAUSED:
                self.check_restored()
                self.restore_input(
                    RestoreInput.DISCARD_BEGIN, len(_discards(self, self.p.recovery_mode))
                )
        elif phase is WalkPhase.DISCARD:
            self.restore_input(RestoreInput.RECV_DISCARDED)
        elif phase is WalkPhase.RESUME_RS:
            self.restore_input(RestoreInput.RECV_RESUMED)
        elif phase is WalkPhase.ABORT_RS:
            self.select_if_due()

    def fail_walk(self, cause: Cause) -> None:
        """The walk's call failed for good (retries spent, or a refusal)."""
        phase = self.walk.phase
        self.walk = self.walk._replace(not_ready=False)
        if phase is WalkPhase.REFLUSH:
            self.fail(Cause.ACKS_PENDING)
        elif phase in _M1_PHASE:
            self.fail(cause)
        elif phase in _RESTORE_CALL_PHASES:
            self.restore_input(RestoreInput.CALL_FAILED)
        # abort_rs: retried until it succeeds (the next call goes out again).

    def call(self, fault: str) -> None:
        """The walk's next call, with its in-attempt retries (§4), as one atomic step.

        `fault`: `""` none; `reply_lost` (the reply is lost, the retry is answered from the
        fence's record), `duplicate` (delivered twice), `timeout` (the request is held by
        the network and redelivered later; the retry goes through); `wrong_digest` and
        `restore_failure` at restore; a trailing `*` (`request_lost*`, `reply_lost*`,
        `timeout*`) makes every try fail: the call fails with its cause. A first try lost
        before it arrived, or answered 5xx, and then retried is the call itself: no fault.
        """
        found = self.next_call()
        assert found is not None
        p, op, op_id, extra = found
        walk = self.walk
        if walk.not_ready:  # the prepare retry timer asks the not-ready participant again
            self.walk = walk._replace(not_ready=False, nr_retries=walk.nr_retries + 1)
        self.check_order(p, op, op_id, extra)
        if walk.phase in _ATTEMPTING_PHASES:
            self.attempted |= 1 << p  # S6: attempted before the call is sent
        kind, every_try = fault.rstrip("*"), fault.endswith("*")
        tries = self.p.call_retries + 1 if every_try else 1
        self.spend_fault(self.cost(fault))
        if kind == "timeout" and op in DELAYABLE:
            snapshot = extra if op == "restore" else 0
            self.w = self.w._replace(delayed=(p, op, op_id, snapshot))
        if every_try:
            for _ in range(tries if kind == "reply_lost" else 0):
                self.serve(p, op, op_id, extra, "")
            self.fail_walk(TRANSIENT[kind])
            return
        reply = self.serve(p, op, op_id, extra, fault)
        if kind in ("reply_lost", "duplicate"):
            reply = self.serve(p, op, op_id, extra, fault)
        if self.stale >> p & 1 and self.seen_restart(p):
            return
        self.on_reply(p, op, op_id, extra, reply)

    def on_reply(self, p: int, op: str, op_id: int, extra: Any, reply: tuple[Any, ...]) -> None:
        """The controller's side of a call's reply."""
        kind, phase = reply[0], self.walk.phase
        if kind == "refused":
            code, active = reply[1], reply[2]
            if code == "checkpoint_conflict" and active:
                self.conflicts = tuple(sorted({*self.conflicts, (p, active)}))
                if phase in _M9_PHASE:
                    return  # the walk resumes the active id first, then asks `p` again
            self.fail_walk(_REFUSAL_CAUSE.get(code, Cause.PARTICIPANT_ERROR))
        elif kind in _FAILED:
            self.fail_walk(_FAILED[kind])
        elif kind == "not_ready":
            self.walk = self.walk._replace(not_ready=True)
        elif kind == "acked":
            self.ack_flushed(reply[1])
            self.advance(AGENT)
        elif kind == "committed":
            self.staged = (*self.staged[:p], reply[1], *self.staged[p + 1 :])
            self.advance(p)
        elif kind == "restored":
            if reply[1] != self.snapshot().digests[p]:
                self.restore_input(RestoreInput.RESTORE_REJECTED, "digest_mismatch")
                return
            if p == AGENT:
                cut = self.snapshot().cut
                owned = set() if cut is None else {(a.sibling, a.attempt) for a in cut.attempts}
                if any((s, a) not in owned for s, a, _ in reply[3]):
                    # M9: every restored execution must be owned by the restored ledger.
                    self.restore_input(RestoreInput.RESTORE_REJECTED, "unowned_execution")
                    return
                self.continuations = reply[3]
                for key in reply[2]:
                    self.unowned(key)
            self.advance(p)
        elif kind == "discarded":
            self.continuations = tuple(c for c in self.continuations if c != extra)
            self.finish_if_done()
        elif extra == "conflict":  # resumed: the conflicting id is retired there
            self.conflicts = tuple(c for c in self.conflicts if c != (p, op_id))
            self.finish_if_done()
        else:  # ready, resumed
            self.advance(p)

    def seen_restart(self, p: int) -> bool:
        """A reply shows `p`'s new incarnation (S19). True if the reply must not be used."""
        self.stale &= ~(1 << p)
        if (
            p == AGENT
            and self.ledger is not None
            and self.ledger.group.state == GroupLabel.GENERATING
        ):
            # Its running executions died with the old process, but a completed result whose
            # report was lost survives in its journal: retiring the attempts finds it.
            self.expire_group()
        # M1's rows decide: the attempt fails if it touched `p` (called it with its id).
        if self.walk.phase not in _M1_PHASE:
            return False
        before = self.m1.state
        touched = bool(self.attempted >> p & 1)
        # Seen in the reply of a call of the walk: `p`'s role is the one being called.
        self.fire(CI.RESTARTED, Restart(NAMES[p], touched, _RESTARTED, in_turn=True))
        if self.m1.state == before:
            return False
        self.judge_failure(Cause.PARTICIPANT_RESTARTED)
        return True

    def check_order(self, p: int, op: str, op_id: int, extra: Any) -> None:
        """I5: a control call goes to `p` only after every earlier participant of the
        phase's §3 order has done the op for that id (and commit only after every prepare)."""
        phase = self.walk.phase
        if phase not in _ORDERS or extra == "conflict":
            return
        needed = self.attempted if phase in _ABORT_PHASES else _ALL
        # §3 as the spec states it, by the call's op: never the walk's own `_ORDERS`.
        order = tuple(NAMES.index(role) for role in SPEC_PHASE_ORDER[op])
        for q in order[: order.index(p)]:
            if needed >> q & 1 and not _fence_done(self.fences[q], op, op_id):
                self.flag("I5", f"{op}({op_id}) to {NAMES[p]} before {NAMES[q]} did it")
        if op == "commit":
            for q in order:
                if not _fence_done(self.fences[q], "prepare", op_id):
                    self.flag("I5", f"commit({op_id}) to {NAMES[p]} before {NAMES[q]} prepared")

    def restore_input(self, input: RestoreInput, arg: Any = None) -> None:
        """Fire M9; the work its row names runs in row order."""
        self._m9_queue.append((input, arg))
        if len(self._m9_queue) > 1:
            return
        while self._m9_queue and self.m9 is not None and not self.stopped:
            input, arg = self._m9_queue[0]
            stepped = self.t.restore(self.m9, input, arg)
            if stepped is None:
                self.stopped = "refused"
                break
            self.m9, names = stepped
            for name in names:
                _M9_WORK[name](self, arg)
            self._m9_queue.pop(0)
            if self.m9 is not None and self.m9[0] == M9Label.IDLE:
                self.m9 = None
                self.release("restore", deadlines=True)
            elif self.m9 is not None and self.m9[0] == M9Label.RESTORE_FAILED:
                self.stopped = "restore_failed"
        self._m9_queue.clear()
        self.select_if_due()

    def select_if_due(self) -> None:
        """In `selecting` with no abort of a rejected restore still out, select at once
        (the store and the trainer anchor are read locally)."""
        if self.m9 is not None and self.m9[0] == M9Label.SELECTING and not self.walk.phase:
            self.select()

    def read_intent(self) -> None:
        """M9 at start: the intent record decides (the ambiguous-publish rule, §6)."""
        if not self.intent:
            self.restore_input(RestoreInput.INTENT_READ, IntentAction.NONE)
        else:
            published = any(s.op_id == self.intent for s in self.published)
            action = IntentAction.RELEASE if published else IntentAction.ABORT
            self.restore_input(RestoreInput.INTENT_READ, action)

    def select(self) -> None:
        """The newest published snapshot at the trainer's anchor step not yet rejected, or
        a fresh start at the anchor."""
        assert self.m9 is not None
        candidates = [
            s.op_id
            for s in self.published
            if s.trainer_step == self.w.trainer_step and s.op_id not in self.m9[3]
        ]
        if candidates:
            self.restore_input(RestoreInput.SNAPSHOT_SELECTED, max(candidates))
        else:
            self.restore_input(RestoreInput.FRESH_START)

    def check_restored(self) -> None:
        """I8: a restore is accepted only with every digest equal to the committed one."""
        snapshot = self.snapshot()
        for p in (POLICY, AGENT, RESOURCES):
            fence = self.fences[p]
            reported = next(
                (r[2] for r in fence.recorded if r[0] == self.rs and r[1] == "restore"), None
            )
            if reported != snapshot.digests[p]:
                self.flag("I8", f"restore of {snapshot.op_id} accepted a wrong digest")

    def install(self, snapshot: Snapshot | None) -> None:
        """Redispatch (M9): the snapshot's cut becomes the ledger (or a fresh one at the
        trainer anchor); every unfinished sibling's attempt N is tombstoned and replaced
        by a fresh attempt, which resumes N's kept continuation (M8)."""
        siblings = range(self.p.siblings)
        if snapshot is None:
            self.retire_lost_interval()
            if self.w.trainer_step > 0:  # the trainer has the group
                trained = Group(GroupLabel.FINALIZED, (1 << self.p.siblings) - 1, False)
                self.ledger = Ledger(trained, ())
                return
            self.ledger = Ledger(Group(GroupLabel.GENERATING, 0, False), ())
            self.open_group()
            return
        assert snapshot.cut is not None
        self.ledger = snapshot.cut
        if snapshot.cut.group.state != GroupLabel.GENERATING:
            return
        # The continuations the agent still holds from the snapshot (the discarded ones left
        # the plan as they were answered): N+1 resumes from N's turn.
        kept = {(s, a): t for s, a, t in self.continuations}
        for sibling in siblings:
            latest = _latest_attempts(self.ledger).get(sibling)
            if latest is None or self.ledger.group.sealed >> sibling & 1:
                continue
            key = (latest.sibling, latest.attempt)
            self.retire_later(key)
            if latest.state in LIVE_ATTEMPTS:
                index = self.owned(key)
                assert index is not None
                self.attempt_input(index, TI.ABANDON)
                latest = self.ledger.attempts[index]
            if not self.replace_attempt(latest, kept.get(key, 0)):
                return
        self.deliver_retires()
        self.registry_input(RegistryInput.START, GROUP)

    def retire_lost_interval(self) -> None:
        """A fresh start reruns the lost interval from the dataloader: the agent's status
        (M2 `status`) lists what it still runs or holds; the live executions are replaced,
        so they are tombstoned (M3 `retire`), and the held results are ACKed (counted)."""
        status = self.serve_status()
        if status is None:
            return
        live, held = status
        self.retire_later(*live)
        for key in held:
            self.unowned(key)
        self.deliver_retires()
        self.drain()

    def crash_controller(self) -> None:
        """The controller dies and restarts (§6): store, trainer and participants survive;
        everything completed and not trained is rolled back (its prompt reruns). The new
        process reads its intent record at once (nothing it owns happens in between)."""
        w = self.w
        self.w = w._replace(
            faults=w.faults - 1,
            unaccounted=frozenset(),  # rolled back: the restore reruns their prompts
            # The new process counts consecutive failures afresh (`stopped` and its count
            # are the process's, §2), as its M1 does.
            failed_attempts=0,
            failing=False,
            optimizer=0 if w.optimizer == 1 else w.optimizer,
            weight_sync=2 if w.weight_sync == 1 else w.weight_sync,
            train_switch=2 if w.train_switch == 1 else w.train_switch,
        )
        self.load(Controller(m9=(M9Label.FINISHING_INTENT, 0, 0, ())))
        self.hold("restore", deadlines=True)
        self.read_intent()  # the new process starts by reading the intent record (§6)

    # ------------------------------------------------------------------ rollouts (M6-M8)

    def hold(self, owner: str, deadlines: bool) -> None:
        """`owner` holds the admission gate (and the deadline registry)."""
        self.gate = self.t.gate(self.gate, GateInput.HOLD, owner) or self.gate
        if deadlines:
            self.registry_input(RegistryInput.SUSPEND, owner)

    def release(self, owner: str, deadlines: bool) -> None:
        """`owner` lets go of the gate (and the registry); reserved work may go out."""
        self.gate = self.t.gate(self.gate, GateInput.RELEASE, owner) or self.gate
        if deadlines:
            self.registry_input(RegistryInput.RESUME, owner)
        self.dispatch_reserved()

    def registry_input(self, input: RegistryInput, key: str, fault: str = "") -> None:
        """Fire M7; a deadline that expires fails and retries the group."""
        stepped = self.t.registry(self.registry, input, key)
        if stepped is None:
            return
        self.registry, expired = stepped
        if expired:
            self.expire_group(fault)

    def owned(self, key: Key) -> int | None:
        """The index of `key`'s attempt in the ledger, if the ledger owns it."""
        if self.ledger is None:
            return None
        for index, attempt in enumerate(self.ledger.attempts):
            if (attempt.sibling, attempt.attempt) == key:
                return index
        return None

    def attempt_input(self, index: int, input: AttemptInput) -> tuple[str, ...] | None:
        """Fire M8 `rollout_attempt` on the ledger's attempt `index`."""
        assert self.ledger is not None
        attempts = self.ledger.attempts
        stepped = self.t.attempt(attempts[index], input)
        if stepped is None:
            return None
        changed = (*attempts[:index], stepped[0], *attempts[index + 1 :])
        self.ledger = self.ledger._replace(attempts=changed)
        return stepped[1]

    def group_input(self, input: GroupInput, sibling: int | None = None) -> tuple[str, ...] | None:
        """Fire M8 `prompt_group` on the group."""
        assert self.ledger is not None
        stepped = self.t.group(self.ledger.group, self.p.siblings, input, sibling)
        if stepped is None:
            return None
        self.ledger = self.ledger._replace(group=stepped[0])
        return stepped[1]

    def ack_flushed(self, keys: tuple[Key, ...]) -> None:
        """The agent answered an ACK batch: the ledger and the outbox drop those receipts."""
        for key in keys:
            index = self.owned(key)
            if index is not None:
                self.attempt_input(index, TI.ACK_FLUSHED)
        self.outbox = tuple(k for k in self.outbox if k not in keys)

    def unowned(self, key: Key) -> None:
        """A completion the ledger does not own: ACKed and counted as discarded (I1)."""
        if key not in self.outbox:
            self.outbox = (*self.outbox, key)
        self.account(key)

    def account(self, *keys: Key) -> None:
        """`keys` are accounted for: trained, or counted as discarded (I1)."""
        self.w = self.w._replace(unaccounted=self.w.unaccounted - set(keys))

    def on_completed(self, key: Key, fault: str = "") -> None:
        """The controller hears that `key` completed (or a retire found it completed): it
        seals it (or counts it dropped) and drains the ACK outbox, `fault` striking the
        ACK call."""
        if self.stopped:
            return
        index = self.owned(key)
        if index is None:
            self.unowned(key)
        else:
            names = self.attempt_input(index, TI.ROLLOUT_COMPLETED) or ()
            if "drop_late_completion" in names:
                self.account(key)
            elif "owe_ack" in names:
                sealed = self.group_input(GroupInput.SIBLING_SEALED, key[0])
                if sealed is not None and "group_ready" in sealed:
                    self.registry_input(RegistryInput.STOP, GROUP)
        self.drain(fault)

    def drain(self, fault: str = "") -> None:
        """The background ACK drain: one batch to the agent, with its retries, one step.
        `fault` as for `call`: `reply_lost` (answered again on the retry), `request_lost*` /
        `reply_lost*` (every try fails: the outbox waits for a retry or the next strict
        flush, S8)."""
        batch = ack_batch(self)
        if not batch or self.stopped:
            return
        kind, tries = self.tries(fault)
        if kind == "request_lost":
            return
        for _ in range(tries):
            reply = self.serve_ack(batch)
        if fault.endswith("*"):
            return  # every reply lost
        if self.stale >> AGENT & 1 and self.seen_restart(AGENT):
            return
        self.ack_flushed(reply[1])

    def retire_later(self, *keys: Key) -> None:
        """`keys` are to be tombstoned at the agent (pending until answered)."""
        self.retires = tuple(sorted({*self.retires, *keys}))

    def deliver_retires(self, fault: str = "") -> None:
        """Tombstone every pending key at the agent, one retire call each (with its
        retries) in this step; a key stays pending until its answer arrives. `fault` as
        for `drain` strikes them all."""
        kind, tries = self.tries(fault)
        for key in self.retires:
            if kind == "request_lost":
                return
            for _ in range(tries):
                answer = self.serve_retire(key)
            if fault.endswith("*"):
                continue
            self.retires = tuple(k for k in self.retires if k != key)
            if self.stale >> AGENT & 1 and self.seen_restart(AGENT):
                continue
            if answer is ExecAnswer.COMPLETED_UNACKNOWLEDGED:
                self.on_completed(key)  # S17: sealed late, then ACKed: only an ACK releases it

    def fresh_attempt(self, sibling: int) -> int:
        """A never-used attempt number for `sibling` (attempts are ranks, like ids)."""
        seen = [self.refusals[sibling][0]]
        seen += (a for s, a in self.executions if s == sibling)
        seen += (c[1] for c in (*self.restored, *self.continuations) if c[0] == sibling)
        if self.ledger is not None:
            seen += (a.attempt for a in self.ledger.attempts if a.sibling == sibling)
        for keys in (self.w.unaccounted, self.outbox, self.retires):
            seen += (a for s, a in keys if s == sibling)
        return max(seen) + 1

    def open_group(self) -> None:
        """The dataloader opens the group: every sibling reserved, its deadline started."""
        ledger = self.ledger
        assert ledger is not None
        fresh = tuple(
            Attempt(s, self.fresh_attempt(s), AttemptLabel.RESERVED, False, False, False, 0)
            for s in range(self.p.siblings)
        )
        self.ledger = ledger._replace(attempts=tuple(sorted((*ledger.attempts, *fresh))))
        self.registry_input(RegistryInput.START, GROUP)
        self.dispatch_reserved()

    def dispatch_reserved(self) -> None:
        """While admission is open, dispatch every reserved attempt (I2: only from reserved,
        never a sibling whose result is sealed, nor once the trainer has the group)."""
        ledger = self.ledger
        if (
            ledger is None
            or self.gate[0] != GateLabel.OPEN
            or ledger.group.state != GroupLabel.GENERATING
        ):
            return
        for index, attempt in enumerate(ledger.attempts):
            if attempt.state != AttemptLabel.RESERVED:
                continue
            key = (attempt.sibling, attempt.attempt)
            if ledger.group.sealed >> attempt.sibling & 1 or self.w.trainer_step:
                self.flag("I2", f"s{key[0]}#{key[1]} dispatched though its sibling is sealed")
            if self.attempt_input(index, TI.DISPATCH) is None:
                continue
            self.begin(key, attempt.resume_turn)

    def expire_group(self, fault: str = "") -> None:
        """M7 expiry (or the agent restarted): dispatched attempts fail, reserved ones are
        abandoned, they are retired at the agent (`fault` striking the retire calls), and
        the group is retried (M8)."""
        if self.ledger is None or self.ledger.group.state != GroupLabel.GENERATING:
            return
        keys: list[Key] = []
        for index, attempt in enumerate(self.ledger.attempts):
            if attempt.state == AttemptLabel.DISPATCHED:
                self.attempt_input(index, TI.ATTEMPT_FAILED)
            elif attempt.state == AttemptLabel.RESERVED:
                self.attempt_input(index, TI.ABANDON)
            else:
                continue
            keys.append((attempt.sibling, attempt.attempt))
        self.retire_later(*keys)
        self.deliver_retires(fault)
        self.registry_input(RegistryInput.STOP, GROUP)
        self.retry_group()

    def retry_group(self) -> None:
        """Each unsealed sibling whose latest attempt failed gets a fresh attempt (live
        level `sibling`); one past the attempt limit abandons the group (counted)."""
        assert self.ledger is not None
        sealed = self.ledger.group.sealed
        for sibling, latest in sorted(_latest_attempts(self.ledger).items()):
            if sealed >> sibling & 1 or latest.state not in _ENDED:
                continue
            if not self.replace_attempt(latest, 0):
                return
        self.registry_input(RegistryInput.START, GROUP)
        self.dispatch_reserved()

    def replace_attempt(self, latest: Attempt, resume_turn: int) -> bool:
        """Attempt N+1 replaces `latest` (once: M8 `supersede`); False if the attempt
        limit abandoned the group instead."""
        fresh = self.fresh_attempt(latest.sibling)
        if fresh >= self.p.attempts:
            self.abandon_group()
            return False
        index = self.owned((latest.sibling, latest.attempt))
        assert index is not None and self.ledger is not None
        if self.attempt_input(index, TI.SUPERSEDE) is None:
            self.flag("I2", f"s{latest.sibling}#{latest.attempt} replaced twice")
            return True
        new = Attempt(
            latest.sibling, fresh, AttemptLabel.RESERVED, False, False, False, resume_turn
        )
        self.ledger = self.ledger._replace(attempts=tuple(sorted((*self.ledger.attempts, new))))
        return True

    def abandon_group(self) -> None:
        """The attempt limit is reached: the group is abandoned whole (M8 `rerun_whole`),
        its sealed siblings discarded and counted, its live attempts retired."""
        assert self.ledger is not None
        names = self.group_input(GroupInput.RERUN_WHOLE)
        if names is None:
            return
        if "discard_sealed_siblings" in names:
            self.account(
                *(
                    (a.sibling, a.attempt)
                    for a in self.ledger.attempts
                    if a.state == AttemptLabel.SEALED
                )
            )
        for index, attempt in enumerate(self.ledger.attempts):
            if attempt.state in LIVE_ATTEMPTS:
                self.attempt_input(index, TI.ABANDON)
                self.retire_later((attempt.sibling, attempt.attempt))
        self.deliver_retires()
        self.registry_input(RegistryInput.STOP, GROUP)

    def finish(self, key: Key, fault: str) -> bool:
        """`key` finishes and the controller hears of it and ACKs it at once (the drain, one
        step) unless `fault` loses the report (`report_lost`) or strikes the ACK
        (`ack_...`). False if the turn must wait."""
        if not self.run_finished(key):
            return False
        if fault != "report_lost":
            self.on_completed(key, fault.removeprefix("ack_"))
        return True


# ====================================================================== the named work


def _nothing(step: Step, arg: Any) -> None:
    """An effect with no work in the design model; each use says why."""


def _write_intent(step: Step, arg: Any) -> None:
    step.intent = step.m1.attempt
    step.fire(CI.INTENT_WRITTEN)


def _inspect(step: Step, arg: Any) -> None:
    published = any(s.op_id == step.m1.attempt for s in step.published)
    if not published:
        step.judge_failure(Cause.IO_ERROR)  # §6: a failure to publish, aborted as io_error
    step.fire(CI.INSPECTED_VERIFIED if published else CI.INSPECTED_ABSENT)


def _validate(step: Step, arg: Any) -> None:
    if any(d is None for d in step.staged):
        step.fail(Cause.TOPOLOGY_MISMATCH)
    else:
        step.fire(CI.VALIDATED)


def _stop(step: Step, arg: Any) -> None:
    fatal = isinstance(arg, Cause) and disposition(reason_of(arg.value)) == "fatal"
    step.stopped = "fatal" if fatal else "budget"


def _set(**fields: Callable[[Step], Any]) -> Callable[[Step, Any], None]:
    def work(step: Step, arg: Any) -> None:
        for name, value in fields.items():
            setattr(step, name, value(step))

    return work


def _walk(phase: WalkPhase) -> Callable[[Step, Any], None]:
    def work(step: Step, arg: Any) -> None:
        step.start_walk(phase)

    return work


_M1_WORK: Mapping[str, Callable[[Step, Any], None]] = work(
    CHECKPOINT,
    {
        "outcome": _nothing,  # metrics and logs: the world judges the attempts itself (I7)
        "quarantine": _nothing,  # unreachable: a published snapshot always verifies here
        "update_intent": _nothing,  # the intent record is its id alone (§6: published is read)
        "write_intent": _write_intent,
        "hold": lambda step, arg: step.hold("checkpoint", deadlines=True),
        "flush_acks": _walk(WalkPhase.FLUSH),
        "arm_prepare_deadline": _set(deadline=lambda s: s.m1.attempt),
        "call_prepare": _walk(WalkPhase.PREPARE),
        "cancel_prepare_timers": _set(deadline=lambda s: 0),
        "call_prepare_again": lambda step, arg: step.call_again(NAMES.index(arg.participant)),
        "call_commit": _walk(WalkPhase.COMMIT),
        "capture_cut": lambda step, arg: step.capture(reflushed=False),
        "validate": _validate,
        "publish": lambda step, arg: step.publish(),
        "call_release": _walk(WalkPhase.RELEASE),
        "call_abort": _walk(WalkPhase.ABORT),
        "inspect_published": _inspect,
        "clear_intent": _set(intent=lambda s: 0),
        "discard_staging": _set(staged=lambda s: (None, None, None)),
        "drop_holds": lambda step, arg: step.release("checkpoint", deadlines=True),
        "arm_retry": _set(retry=lambda s: s.m1.attempt),
        "cancel_retry": _set(retry=lambda s: 0),
        "stop": _stop,
    },
    level="design model",
)
"""The work behind each effect name of M1's rows (the names are `CHECKPOINT_WORK`'s)."""


def _finish_in_flight(step: Step, arg: Any) -> None:
    step.attempted = _ALL  # every participant may hold the id
    step.fire(CI.RECOVERED, (step.intent, step.w.trainer_step))


def _send_restore(step: Step, arg: Any) -> None:
    step.rs, step.attempted, step.continuations = step.mint(), 0, ()
    step.start_walk(WalkPhase.RESTORE)


def _start_at_anchor(step: Step, arg: Any) -> None:
    step.install(None)
    step.restore_input(RestoreInput.REDISPATCHED)


def _redispatch(step: Step, arg: Any) -> None:
    step.install(step.snapshot())
    step.restore_input(RestoreInput.REDISPATCHED)


_M9_WORK: Mapping[str, Callable[[Step, Any], None]] = work(
    RESTORE,
    {
        # The store is always readable here, so no restore fails for want of a candidate.
        "report_candidates": _nothing,
        # The walk's call stays next: it goes out again under the same op id.
        "retry_same_op": _nothing,
        "drain_acks": _nothing,  # the outbox drains in the background
        "finish_in_flight": _finish_in_flight,
        "clear_intent": _set(intent=lambda s: 0),
        "send_restore": _send_restore,
        "start_at_anchor": _start_at_anchor,
        "abort_restore": _walk(WalkPhase.ABORT_RS),
        "send_discards": _walk(WalkPhase.DISCARD),
        "send_resume": _walk(WalkPhase.RESUME_RS),
        "redispatch": _redispatch,
    },
    level="design model",
)
"""The work behind each effect name of M9's rows (the names are `RESTORE_WORK`'s)."""
