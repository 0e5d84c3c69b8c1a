"""The properties of the `protocol` model: PROTOCOL.md §5 judged against the environment.

What lives here: `Judge`, which keeps the environment's independent ledger (`Env`: what
completed, what was dispatched, which ids a participant committed, what the controller
reported) up to date from each step's effects and the participants' own states
(`observe`), notes the violations only a transition can show (I1 a result released
without an ACK, I2 a double dispatch, I5 a call out of phase order, I8 a cut or publish
of the wrong instant), and states the properties over a model state: I1-I6 and I8 as
`always`, and the goal states of the must-style I7 (`is_goal`, the explorer's
`no_stall`). What it does not know: which actions the environment offers (the model's),
or the coordinator's own bookkeeping as evidence (only as a statement of when a property
is due).

Cost: what depends on interned parts alone (a participant's holdings, a move between two
of its states, I1's accounts of a controller, I4 and I6 over the parts they read) is
computed once and remembered by the parts' identities (`_Memo`, per judge); a step that
notes nothing returns its `env` unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from quiesce.check import Always, always, replace
from quiesce.fsm import label
from quiesce.models.implementation._state import CONTROL_OPS, Cast, Env, PState, executions
from quiesce.models.implementation._system import InFlight, SystemState, trainer_anchor
from quiesce.models.oracles import (
    SPEC_PHASE_ORDER,
    Candidate,
    conflict_settled,
    failure_run,
    may_resume_from,
    newest_match,
    released_by_ack,
    stop_earned,
)
from quiesce.protocol import OpId, group_of, rollout_id
from quiesce.protocol.controller import ControllerState, Outcome, Stopped
from quiesce.protocol.controller.lowlevel import (
    PHASE_OPS,
    Call,
    CaptureCut,
    Dispatch,
    LoadSnapshot,
    Op,
    Publish,
    TimerKey,
    TimerKind,
    TrainerAnchor,
    background_timer,
    call_retry_timer,
)
from quiesce.protocol.machines import (
    AttemptState,
    CallState,
    CheckpointState,
    ExecState,
    FenceOp,
    FenceState,
    RegistryState,
    RestoreState,
    group_of_timer,
)
from quiesce.protocol.participant import ParticipantState
from quiesce.protocol.wire import CommitReply, ErrorReply, Role

__all__ = ["CONFLICT_FIRST", "NEWEST_SNAPSHOT", "RESUME_KEPT", "Judge"]

NEWEST_SNAPSHOT = "newest_snapshot"
"""M9: a `latest` restore loads the newest published snapshot matching the trainer anchor
and the topology, among those it has not rejected (`_oracles.newest_match`)."""
CONFLICT_FIRST = "conflict_abort_first"
"""§4, S5: a participant that reported a conflict naming X gets no other control call
before X is aborted there (`_oracles.conflict_settled`)."""
RESUME_KEPT = "resume_kept_continuation"
"""M9, S12: nothing resumes from a discarded (or already claimed) continuation: only from
one its agent still keeps (`_oracles.may_resume_from`)."""

# I5 judges against §3 as the spec states it (`oracles.SPEC_PHASE_ORDER`), never the table the
# coordinator walks (`machines.PHASE_ORDER`) nor its injectable `policy.phase_order`: a
# wrong order in either is caught. By op: a call carries its op, not its phase (an abort is
# a resume, in resume's order).
_PHASE_ORDER: Mapping[Op, tuple[Role, ...]] = {
    Op(op): tuple(Role(role) for role in roles) for op, roles in SPEC_PHASE_ORDER.items()
}
_WAITING_PHASES = frozenset(
    {
        CheckpointState.PREPARING,
        CheckpointState.COMMITTING,
        CheckpointState.RELEASING,
        CheckpointState.ABORTING,
    }
)
# A tuple, not the frozenset: `in` a tuple compares identities, `in` a set calls the
# enum's Python-level `__hash__` (measurable at one test per message per step).
_CONTROL_OPS = tuple(CONTROL_OPS)
# The effects `observe` notes; every other effect (timers, logs, metrics, admission)
# leaves the ledger alone. By exact type: the effects are final (frozen, slotted)
# dataclasses, and a type lookup is what lets most steps skip `observe` at once.
_NOTED_EFFECTS: frozenset[type] = frozenset(
    {Call, Dispatch, Outcome, Stopped, CaptureCut, Publish, LoadSnapshot}
)
_CONFLICT = "checkpoint_conflict"
# The properties in the order `Judge.properties` states them: name, doc, what each reads.
_PROPERTIES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    (
        "I1",
        "nothing completed is lost",
        ("executions", "ledger", "env.completed", "env.trained", "env.violations"),
    ),
    ("I2", "nothing runs twice", ("executions", "env.violations")),
    (
        "I3",
        "publish-or-abort",
        ("checkpoint", "restore", "fences", "messages", "store", "env.violations"),
    ),
    (
        "I4",
        "gates: held iff some owner holds",
        ("checkpoint", "admission_gate", "deadline_registry"),
    ),
    ("I5", "phase order (§3)", ("checkpoint", "fences", "env.violations")),
    (
        "I6",
        "bounded calls: the controller waits only on live calls",
        ("checkpoint", "attempt", "messages", "timers"),
    ),
    ("I8", "consistent snapshot", ("store", "env.violations")),
    (
        NEWEST_SNAPSHOT,
        "restore selects the newest matching snapshot (M9)",
        ("restore", "store", "env.violations"),
    ),
    (
        CONFLICT_FIRST,
        "a conflict naming X is followed by the abort of X (§4, S5)",
        ("messages", "fences", "env.violations"),
    ),
    (
        RESUME_KEPT,
        "nothing resumes from a discarded continuation (M9, S12)",
        ("executions", "env.violations"),
    ),
)


class Judge:
    """The ledger and the properties of the model for one `cast` (see the module doc)."""

    def __init__(self, cast: Cast) -> None:
        self.cast = cast
        # Per judge, never shared between models: a mutant's model must compute its own
        # answers (a memo shared across models once let a mutant survive).
        self._holding: _Memo[_Holding] = _Memo(_Holding.of)
        self._moves: _Memo[_Move | None] = _Memo(self._move_of)
        self._held: _Memo[frozenset[tuple[str, int]]] = _Memo(_held_keys)
        self._accounts: _Memo[_Accounts] = _Memo(_Accounts.of)
        self._gates: _Memo[bool] = _Memo(_gates_held)
        self._bounded: _Memo[bool] = _Memo(_calls_bounded)

    def observe(
        self,
        before: SystemState,
        after: SystemState,
        effects: Sequence[Any],
        env: Env,
        delivered: InFlight | None = None,
    ) -> Env:
        """Update the environment's ledger from what a step did (effects and the
        participants' states, `delivered` the message a delivery step took out of flight),
        and note any violation only a transition can show. Most steps note nothing and
        return `env` itself; the ledger's sets only grow, and one that gained nothing is
        kept as the very same object (its hash is cached)."""
        if before.participants is after.participants:
            moves: list[_Move] = []
        else:
            # Parts are interned: the same object is the same value (nothing moved).
            moves = [
                move
                for was, now in zip(before.participants, after.participants, strict=True)
                if was is not now and (move := self._moves(was, now)) is not None
            ]
        noted = [effect for effect in effects if type(effect) in _NOTED_EFFECTS]
        conflict = _conflict_of(delivered)
        if not moves and not noted and conflict is None and not env.conflicts:
            return env
        notes = _Notes(env)
        if conflict is not None or env.conflicts:
            reported = env.conflicts if conflict is None else env.conflicts | {conflict}
            notes.conflicts = _unsettled(after, reported)
        for move in moves:
            self._note_move(move, after, delivered, notes)
        sent_control = False
        for effect in noted:
            if isinstance(effect, Call):
                sent_control = sent_control or effect.op in _CONTROL_OPS
            elif isinstance(effect, Dispatch):
                key = (effect.rollout_id, effect.attempt)
                if key in notes.dispatched:
                    notes.flag("I2", f"attempt {key[0]}#{key[1]} dispatched twice")
                else:
                    notes.dispatched |= {key}
                self._check_redispatch(after, key, notes, effects)
                if effect.resume_from_turn > 0:
                    _check_resume(after, effect, notes)
            elif isinstance(effect, Outcome):
                if effect.result == "completed" and effect.checkpoint_id not in notes.reported:
                    notes.reported |= {effect.checkpoint_id}
                # I7 counts attempts that failed after their retries (§4), each once it
                # ended: a failing abort reports the attempt too, but its timer retries it,
                # same attempt. The count is the spec's fold over the outcomes' results and
                # reasons (`_oracles.failure_run`), never M1's own counter.
                ended = after.controller.phase in (CheckpointState.IDLE, CheckpointState.STOPPED)
                if effect.result != "failed" or ended:
                    notes.failures = failure_run(notes.failures, effect.result, effect.reason)
            elif isinstance(effect, Stopped):
                notes.stops += (effect.reason,)
            elif isinstance(effect, CaptureCut):
                steps = {s for x, s in notes.commit_steps if x == effect.checkpoint_id}
                if env.optimizer == 1 or any(s != env.trainer_step for s in steps):
                    notes.flag("I8", f"cut of {effect.checkpoint_id} after the trainer moved")
                if effect.ledger is not None and effect.ledger.pending_acks():
                    notes.flag("I8", f"cut of {effect.checkpoint_id} with ACKs pending")
            elif isinstance(effect, Publish):
                self._check_publish(after, effect.checkpoint_id, notes)
            elif isinstance(effect, LoadSnapshot):
                _check_selection(after, effect.snapshot_id, notes)
        if sent_control:
            self._check_order(before, after, notes)
        return notes.env_after()

    def _note_move(
        self, move: _Move, after: SystemState, delivered: InFlight | None, notes: _Notes
    ) -> None:
        """Note what one participant's `move` shows against the ledger: its completions
        not noted yet, a release the step's ACK batch does not excuse, a new commit."""
        for key in move.completed:
            if any(c[:2] == key for c in notes.completed):
                continue
            reruns = after.controller.ledger.counters.group_reruns
            notes.completed |= {(key[0], key[1], _kept(after, key), reruns)}
        # Left with its acked refusal key or without: only an ACK quoting its exact
        # receipt, in the batch this step delivered, may have released it (M3).
        for receipts, how in (
            (move.released, "released by its agent without an ACK"),
            (move.acked, "acked by its agent on a receipt no ACK quoted"),
        ):
            for receipt in receipts:
                if not released_by_ack(receipt, _delivered_acks(delivered)):
                    notes.flag("I1", f"{receipt[0]}#{receipt[1]} {how}")
        op_id = move.committed_to
        if op_id is not None and op_id not in notes.committed:
            notes.committed |= {op_id}
            notes.commit_steps |= {(op_id, notes.env.trainer_step)}

    def _move_of(self, was: ParticipantState, now: ParticipantState) -> _Move | None:
        """What a participant's move from `was` to `now` shows, whatever the ledger
        holds; None for a move that shows nothing (most do)."""
        then, held = self._holding(was), self._holding(now)
        completed = tuple(
            receipt[:2]
            for receipt in held.completed
            if then.states.get(receipt[:2]) is not ExecState.COMPLETED
        )
        # I1 (M3, S17): only an ACK releases a result. A completed execution that leaves
        # its agent must leave an acked refusal key behind (a crash keeps it in the
        # journal), unless the ACK batch the step delivered acks it (`_note_move`).
        gone = [receipt for receipt in then.completed if receipt[:2] not in held.states]
        released = tuple(receipt for receipt in gone if receipt not in held.refusal_keys)
        acked = tuple(receipt for receipt in gone if receipt in held.refusal_keys)
        if not completed and not released and not acked and held.committed_to is None:
            return None
        return _Move(completed, released, held.committed_to, acked)

    def _check_redispatch(
        self, after: SystemState, key: tuple[str, int], notes: _Notes, effects: Sequence[Any]
    ) -> None:
        """I2: a kept completion is not run again (unless rolled back or its whole group
        reruns), and a group-scored sibling is never retried alone."""
        rollout, attempt = key
        reruns = after.controller.ledger.counters.group_reruns
        for done_rollout, done_attempt, kept, reruns_then in notes.completed:
            if done_rollout != rollout or done_attempt >= attempt or not kept:
                continue
            if (done_rollout, done_attempt) in notes.env.rolled_back:
                continue
            if reruns <= reruns_then:
                notes.flag("I2", f"sealed {rollout}#{done_attempt} run again as #{attempt}")
        if self.cast.params.group_scored and attempt > 0:
            group = group_of(rollout)
            together = {e.rollout_id for e in effects if isinstance(e, Dispatch)}
            siblings = {rollout_id(group, s) for s in range(self.cast.params.siblings)}
            if not siblings <= together:
                notes.flag("I2", f"group-scored sibling {rollout} retried alone")

    def _check_publish(self, after: SystemState, op_id: OpId, notes: _Notes) -> None:
        """I8: `op_id` is published only with every participant committed to it, and with
        the digests they recorded."""
        for participant in after.participants:
            fence = participant.fence
            name = participant.config.name
            if fence.data.active != op_id or fence.state is not FenceState.COMMITTED_PAUSED:
                notes.flag("I8", f"{op_id} published while {name} is not committed to it")
                continue
            reply = fence.data.result(op_id, FenceOp.COMMIT)
            if not isinstance(reply, CommitReply):
                notes.flag("I8", f"{op_id} published without {name}'s commit")
        attempt = after.controller.attempt
        if attempt is not None and attempt.op_id == op_id:
            recorded = {
                p.config.name: r.digest
                for p in after.participants
                if isinstance(r := p.fence.data.result(op_id, FenceOp.COMMIT), CommitReply)
            }
            if dict(attempt.digests) != recorded:
                notes.flag("I8", f"{op_id} staged digests differ from the participants'")

    def _check_order(self, before: SystemState, after: SystemState, notes: _Notes) -> None:
        """I5: a control call to a role goes out only when every earlier role of the phase
        has done that op for that id (checked at the moment the call is sent: a call value
        the step added to the requests in flight). Requests enter the flight only as the
        controller's `Call` effects: `observe` calls this only for a step with one."""
        sent = [
            m.call
            for m in after.messages
            if m.reply is None and m.call.op in _CONTROL_OPS and m.call.op_id is not None
        ]
        if not sent:
            return
        # A multiset difference over a few calls: a list compares identities first (the
        # calls are interned), where a Counter would hash every call and its enum fields.
        already = [m.call for m in before.messages]
        for index, call in enumerate(sent):
            if call.op_id is None or call in sent[:index]:
                continue  # judged at its first occurrence
            if sent.count(call) <= already.count(call):
                continue  # in flight before this step
            for reporter, active in notes.conflicts:
                if reporter == call.participant and not conflict_settled(
                    active, call.op.value, call.op_id
                ):
                    notes.flag(
                        CONFLICT_FIRST,
                        f"{call.op.value}({call.op_id}) to {reporter}, which reported a"
                        f" conflict with {active}, before {active} was aborted there",
                    )
            order = _PHASE_ORDER.get(call.op)
            role = self.cast.roles.get(call.participant)
            if order is None or role is None:
                continue
            earlier = order[: order.index(role)]
            for participant in after.participants:
                name = participant.config.name
                if self.cast.roles.get(name) not in earlier:
                    continue
                if not _done(participant, call.op, call.op_id):
                    why = f"{call.op.value}({call.op_id}) to {call.participant} before {name}"
                    notes.flag("I5", why)

    # ------------------------------------------------------------------ properties

    def properties(self) -> Sequence[Always]:
        """I1-I6 and I8, and the named promises of M9 and §4 `_oracles` states, each an
        `always` over a model state: the ones with a check of their own here, the others
        (only a transition can show them) holding while no step flagged them."""
        checks = {"I1": self._i1, "I3": self._i3, "I4": self._i4, "I6": self._i6}
        return tuple(
            always(name, checks.get(name) or _unflagged(name), doc, reads=reads)
            for name, doc, reads in _PROPERTIES
        )

    def _i1(self, state: PState) -> bool:
        if _flags(state, "I1"):
            return False
        sys, env = state.system, state.env
        accounts = self._accounts(sys.controller)
        discarded = 0
        if env.completed:
            held = self._held(*sys.participants)
            for rollout, attempt, _kept, _ in env.completed:
                key = (rollout, attempt)
                if key in env.trained or key in env.rolled_back:
                    continue
                if key in accounts.waiting or key in held:
                    continue
                # Neither trained, nor waiting, nor held, nor rolled back: it must have
                # been discarded on purpose (a late completion after its deadline, or a
                # sealed sibling of a whole-group rerun), and the ledger must have counted
                # it.
                discarded += 1
        return discarded <= accounts.counted

    def _i3(self, state: PState) -> bool:
        """I3 is due once the controller is idle (`_idle`: a restarted controller is still
        restoring until M9 reaches `idle`, its participants possibly fenced to the restore
        id, as the design model and the system run also judge it) with no control call in
        flight. Then no participant is fenced, and every committed id is published and
        released or unpublished and aborted."""
        sys, env = state.system, state.env
        if not _idle(sys.controller):
            return True
        if any(m.call.op in _CONTROL_OPS for m in sys.messages):
            return True
        for participant in sys.participants:
            if participant.fence.state is not FenceState.IDLE:
                return False
        for op_id in env.committed:
            if op_id in sys.store.staging:
                return False
            if (op_id in sys.store.published) != (op_id in env.reported):
                return False
        return True

    def _i4(self, state: PState) -> bool:
        sys, env = state.system, state.env
        return self._gates(sys.controller, sys.timers, env.weight_sync, env.train_switch)

    def _i6(self, state: PState) -> bool:
        sys = state.system
        controller = sys.controller
        if controller.attempt is None or controller.phase is CheckpointState.STOPPED:
            return True  # `_calls_bounded`'s common case, answered before building a key
        return self._bounded(controller, sys.timers, *sys.messages)

    def is_goal(self, state: PState) -> bool:
        """I7's goal: the controller idle with admission open and every fence idle, or
        stopped after more than `max_consecutive_failures` retryable failures."""
        sys, env = state.system, state.env
        if env.raised:
            return False
        phase = sys.controller.phase
        if phase is CheckpointState.STOPPED:
            # Legitimate only after more than max_consecutive_failures retryable failures
            # (no fault of the model is fatal).
            return stop_earned(env.failures, self.cast.params.max_consecutive_failures)
        if phase is not CheckpointState.IDLE or sys.controller.gate.data:
            return False
        if any(m.call.op in _CONTROL_OPS for m in sys.messages):
            return False
        return all(p.fence.state is FenceState.IDLE for p in sys.participants)


# ============================================================================ helpers


def _idle(controller: ControllerState) -> bool:
    """Is the controller `idle` in I3's sense (§5): M1 idle, and M9 never started or ended
    in `idle` (not restoring, not stopped by `restore_failed`)?"""
    if controller.phase is not CheckpointState.IDLE:
        return False
    restore = controller.restore
    return restore is None or restore.state is RestoreState.IDLE


def _kept(sys: SystemState, key: tuple[str, int]) -> bool:
    """Did the controller keep this completion (seal it), rather than drop it late?"""
    try:
        return sys.controller.ledger.attempt(key).state is AttemptState.SEALED
    except Exception:
        return False


def _done(participant: ParticipantState, op: Op, op_id: OpId) -> bool:
    """Has `participant` finished `op` for `op_id` (for the I5 order check)?"""
    fence = participant.fence
    if op is Op.PREPARE:
        return fence.data.active == op_id and fence.state in (
            FenceState.PREPARED,
            FenceState.COMMITTING,
            FenceState.COMMITTED_PAUSED,
        )
    if op is Op.COMMIT:
        return fence.data.active == op_id and fence.state is FenceState.COMMITTED_PAUSED
    if op is Op.RESTORE:
        return fence.data.active == op_id and fence.state is FenceState.RESTORED_PAUSED
    return fence.data.active != op_id


def _check_selection(after: SystemState, snapshot_id: OpId, notes: _Notes) -> None:
    """M9: the snapshot a restore loads is the one `_oracles.newest_match` names, from the
    store's published snapshots and the trainer anchor. Of the controller's bookkeeping
    only which snapshots this restore already tried and rejected is read (S16's fallback
    skips them): a selection that skips a newer match is caught all the same."""
    anchor, store, controller = after.anchor, after.store, after.controller
    candidates = [
        Candidate(
            s.snapshot_id, s.trainer_step, trainer_anchor(s.trainer_step).version, s.fingerprint
        )
        for s in store.snapshots
        if s.snapshot_id in store.published
    ]
    restore = controller.restore
    rejected = {name for name, _ in restore.data.rejected} if restore is not None else set()
    expected = None
    if isinstance(anchor, TrainerAnchor):
        expected = newest_match(
            candidates,
            step=anchor.step,
            version=anchor.version,
            fingerprint="" if controller.fleet is None else controller.fleet.fingerprint,
            tried={c.snapshot_id for c in candidates if str(c.snapshot_id) in rejected},
        )
    if expected != snapshot_id:
        notes.flag(NEWEST_SNAPSHOT, f"restore loads {snapshot_id}, not the newest match {expected}")


def _check_resume(after: SystemState, dispatch: Dispatch, notes: _Notes) -> None:
    """M9, S12: a dispatch resuming attempt N's continuation resumes one its agent holds
    restored and not discarded (nor claimed) yet."""
    agent = after.participant(dispatch.agent)
    kept = {(t.rollout_id, t.attempt) for t in getattr(agent.role, "restored", ())}
    continuation = (dispatch.rollout_id, dispatch.attempt - 1)
    if not may_resume_from(continuation, kept):
        notes.flag(
            RESUME_KEPT,
            f"{dispatch.rollout_id}#{dispatch.attempt} resumes {continuation[0]}"
            f"#{continuation[1]}, whose continuation {dispatch.agent} no longer keeps",
        )


def _conflict_of(delivered: InFlight | None) -> tuple[str, OpId] | None:
    """`(participant, X)` if the step delivered a reply refusing with `checkpoint_conflict`
    naming X (§4)."""
    if delivered is None:
        return None
    reply = delivered.reply
    if not isinstance(reply, ErrorReply) or reply.code != _CONFLICT or reply.active_id is None:
        return None
    return (delivered.call.participant, reply.active_id)


def _unsettled(
    after: SystemState, conflicts: frozenset[tuple[str, OpId]]
) -> frozenset[tuple[str, OpId]]:
    """The reported conflicts whose participant is still fenced to the id it named."""
    return frozenset(
        (name, active)
        for name, active in conflicts
        if (fence := after.participant(name).fence).state is not FenceState.IDLE
        and fence.data.active == active
    )


def _flags(state: PState, prop: str) -> bool:
    bad = state.env.bad
    return bool(bad) and any(name == prop for name, _ in bad)


def _unflagged(prop: str) -> Callable[[PState], bool]:
    """The property `prop` that holds while no transition flagged it."""
    return lambda state: not _flags(state, prop)


def _delivered_acks(delivered: InFlight | None) -> frozenset[tuple[str, int, str]]:
    """The receipts of the ACK batch a delivery step took out of flight (none for any
    other step)."""
    if delivered is None or delivered.call.op is not Op.ACK or delivered.reply is not None:
        return frozenset()
    return frozenset((o.rollout_id, o.attempt, o.receipt) for o in delivered.call.payload or ())


def _held_keys(*participants: ParticipantState) -> frozenset[tuple[str, int]]:
    """The keys of the completed agent executions the participants hold (I1)."""
    return frozenset(
        e.data.key
        for participant in participants
        for e in executions(participant)
        if e.state is ExecState.COMPLETED
    )


def _gates_held(
    controller: ControllerState,
    timers: tuple[tuple[TimerKey, float], ...],
    weight_sync: int,
    train_switch: int,
) -> bool:
    """I4 over what it reads: admission is held iff some owner holds it (the checkpoint,
    a weight sync, a train switch, a restore), and the deadline clocks run iff no owner
    holds them, with no group timer armed while they are suspended."""
    owners = {
        "checkpoint": controller.phase is not CheckpointState.IDLE,
        "weight_sync": weight_sync == 1,
        "train_switch": train_switch == 1,
    }
    gate = {owner for owner, holds in owners.items() if holds}
    deadlines = gate - {"weight_sync"}  # a weight sync holds admission, not the clocks
    # A restarted controller's restore (M9) holds both while it runs, and only then.
    restore = controller.restore
    if restore is not None and label(restore.state) not in ("idle", "restore_failed"):
        gate.add("restore")
        if "restore" in controller.deadlines.data.holders:
            deadlines.add("restore")
    if set(controller.gate.data) != gate or (label(controller.gate.state) == "open") != (not gate):
        return False
    registry = controller.deadlines
    if set(registry.data.holders) != deadlines:
        return False
    running = registry.state is RegistryState.RUNNING
    if running == bool(deadlines):
        return False
    armed = any(group_of_timer(name) is not None for name, _ in timers)
    return not (armed and not running)


def _calls_bounded(
    controller: ControllerState, timers: tuple[tuple[TimerKey, float], ...], *messages: InFlight
) -> bool:
    """I6 over what it reads: every call a controller with an attempt under way waits on
    is in flight, or will be sent again by one of its own timers."""
    attempt = controller.attempt
    phase = controller.phase
    if attempt is None or phase is CheckpointState.STOPPED:
        return True
    flying = {(m.call.participant, m.call.op, m.call.op_id) for m in messages}
    # In abort_pending/release_pending the controller waits on its retry timer, not on
    # the calls of the failed round.
    if attempt.phase is not None and phase in _WAITING_PHASES:
        op = PHASE_OPS[attempt.phase]
        names = {name for name, _ in timers}
        # A not-ready participant is asked again by the retry timer, and the prepare
        # deadline bounds the whole phase: both are the controller's own timers.
        paced = any(t.kind in (TimerKind.PREPARE_RETRY, TimerKind.PREPARE_DEADLINE) for t in names)
        for participant, op_id in attempt.waiting:
            if (participant, op, op_id) in flying:
                continue
            # A call backing off is sent again by its own timer, before its deadline.
            if (participant, op_id) in attempt.backing_off:
                if call_retry_timer(op_id, participant) in names:
                    continue
                return False
            if not (participant in attempt.not_ready and paced):
                return False
    if phase not in (CheckpointState.FLUSHING_ACKS, CheckpointState.CAPTURING):
        return True
    acking = {m.call.participant for m in messages if m.call.op is Op.ACK}
    # A flush's batch backing off is sent again by its own timer (§4, like a phase's call).
    names = {name for name, _ in timers}
    flush = str(attempt.op_id)
    for (agent, op, about), call in controller.background:
        backing_off = op is Op.ACK and call.value.state is CallState.BACKING_OFF
        if backing_off and about == flush and background_timer((agent, op, about)) in names:
            acking.add(agent)
    return attempt.acking <= acking


# ============================================================================ memos

R = TypeVar("R")


class _Memo(Generic[R]):
    """The answers of a pure function of immutable values, remembered by the values'
    identities (parts are interned: the same object is the same value; an equal value in
    another object merely computes its answer again). It holds on to the values it was
    asked about, so no other object can take an `id` one of its keys names. The model's
    interner keeps every part alive anyway: what the memo adds is its entries."""

    __slots__ = ("_answers", "_compute")

    def __init__(self, compute: Callable[..., R]) -> None:
        self._compute = compute
        self._answers: dict[tuple[int, ...], tuple[tuple[Any, ...], R]] = {}

    def __call__(self, *values: Any) -> R:
        key = tuple(map(id, values))
        found = self._answers.get(key)
        if found is None:
            found = self._answers[key] = (values, self._compute(*values))
        return found[1]


@dataclass(frozen=True, slots=True)
class _Holding:
    """What one participant state holds, as the judge reads it: each agent execution's
    state by key (`states`), the completed ones' receipts `(rollout, attempt, receipt)`
    (`completed`), the acked refusal keys, and the id its fence is committed to
    (`committed_to`, None unless committed_paused)."""

    states: Mapping[tuple[str, int], ExecState]
    completed: tuple[tuple[str, int, str], ...]
    refusal_keys: frozenset[tuple[str, int, str]]
    committed_to: OpId | None

    @classmethod
    def of(cls, participant: ParticipantState) -> _Holding:
        held = executions(participant)
        completed = tuple(
            (e.data.key[0], e.data.key[1], e.data.receipt)
            for e in held
            if e.state is ExecState.COMPLETED
        )
        fence = participant.fence
        return cls(
            states={e.data.key: e.state for e in held},
            completed=completed,
            refusal_keys=frozenset(getattr(participant.role, "refusal_keys", ())),
            committed_to=fence.data.active if fence.state is FenceState.COMMITTED_PAUSED else None,
        )


@dataclass(frozen=True, slots=True)
class _Move:
    """What one participant's move shows the ledger: the keys of the agent executions
    that became completed (`completed`), the receipts of completed ones that left the
    agent without an acked refusal key behind (`released`), the id its fence is
    committed to after it (`committed_to`), and the receipts of completed ones that left
    with their acked refusal key (`acked`: an ACK must have quoted them exactly)."""

    completed: tuple[tuple[str, int], ...]
    released: tuple[tuple[str, int, str], ...]
    committed_to: OpId | None
    acked: tuple[tuple[str, int, str], ...] = ()


@dataclass(frozen=True, slots=True)
class _Accounts:
    """What one controller state accounts for (I1): the keys of the sealed attempts
    awaiting training (`waiting`), and how many completions it counted as discarded on
    purpose (`counted`)."""

    waiting: frozenset[tuple[str, int]]
    counted: int

    @classmethod
    def of(cls, controller: ControllerState) -> _Accounts:
        counters = controller.ledger.counters
        # Completions the controller no longer owns (compacted, or from before a restart)
        # are ACKed and counted apart from the ledger.
        unowned = getattr(controller, "unowned_dropped", 0)
        return cls(
            waiting=frozenset(a.key for a in controller.ledger.sealed_untrained()),
            counted=counters.discarded_siblings + counters.late_completions_dropped + unowned,
        )


class _Notes:
    """What one step adds to the ledger of `env`, copy-on-write: a field is rebound to a
    grown copy (`notes.dispatched |= {key}` builds a new frozenset) only when the step
    adds to it, so a set the step left alone stays the very object `env` holds (its hash
    cached). `bad` collects the violations the step shows."""

    __slots__ = (
        "bad",
        "commit_steps",
        "committed",
        "completed",
        "conflicts",
        "dispatched",
        "env",
        "failures",
        "reported",
        "stops",
    )

    def __init__(self, env: Env) -> None:
        self.env = env
        self.completed = env.completed
        self.dispatched = env.dispatched
        self.committed = env.committed
        self.commit_steps = env.commit_steps
        self.reported = env.reported
        self.failures = env.failures
        self.stops = env.stops
        self.conflicts = env.conflicts
        self.bad: list[tuple[str, str]] = []

    def flag(self, prop: str, why: str) -> None:
        """Note a violation of `prop` only this transition shows."""
        self.bad.append((prop, why))

    def env_after(self) -> Env:
        """`env` with what the step added: `env` itself if it added nothing."""
        env = self.env
        changes: dict[str, Any] = {}
        if self.completed is not env.completed:
            changes["completed"] = self.completed
        if self.dispatched is not env.dispatched:
            changes["dispatched"] = self.dispatched
        if self.committed is not env.committed:
            changes["committed"] = self.committed
            changes["commit_steps"] = self.commit_steps  # grows with `committed`
        if self.reported is not env.reported:
            changes["reported"] = self.reported
        if self.failures != env.failures:
            changes["failures"] = self.failures
        if self.stops is not env.stops:
            changes["stops"] = self.stops
        if self.conflicts != env.conflicts:
            changes["conflicts"] = self.conflicts
        if self.bad:
            bad = tuple(sorted({*env.bad, *self.bad}))
            if len(bad) > len(env.bad):
                changes["bad"] = bad
        return replace(env, **changes) if changes else env
