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
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from quiesce.fsm import label
from quiesce.models._copier import replace
from quiesce.models._explorer import Always, always
from quiesce.models._protocol_state import CONTROL_OPS, Cast, Env, PState, executions
from quiesce.models._system import InFlight, SystemState
from quiesce.protocol import OpId
from quiesce.protocol.controller import (
    PHASE_OPS,
    Call,
    CaptureCut,
    Dispatch,
    Op,
    Outcome,
    Publish,
    Stopped,
    TimerKind,
    call_retry_timer,
)
from quiesce.protocol.machines import (
    PHASE_ORDER,
    AttemptState,
    CheckpointState,
    ExecState,
    FenceOp,
    FenceState,
    Phase,
    RegistryState,
    group_of_timer,
)
from quiesce.protocol.participant import ParticipantState
from quiesce.protocol.wire import CommitReply, Role

__all__ = ["Judge"]

# I5 judges against the §3 table itself, never the coordinator's injectable
# `policy.phase_order`, so a coordinator that swaps its order is still caught. By op: a call
# carries its op, not its phase (an abort is a resume, in resume's order).
_PHASE_ORDER: Mapping[Op, tuple[Role, ...]] = {
    PHASE_OPS[phase]: tuple(slot.role for slot in PHASE_ORDER[phase])
    for phase in (Phase.PREPARE, Phase.COMMIT, Phase.RESUME, Phase.RESTORE)
}
_COMMITTED_STATES = frozenset({FenceState.COMMITTED_PAUSED})
_WAITING_PHASES = frozenset(
    {
        CheckpointState.PREPARING,
        CheckpointState.COMMITTING,
        CheckpointState.RELEASING,
        CheckpointState.ABORTING,
    }
)
_COMMIT_OP = FenceOp.COMMIT


class Judge:
    """The ledger and the properties of the model for one `cast` (see the module doc)."""

    def __init__(self, cast: Cast) -> None:
        self.cast = cast

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
        and note any violation only a transition can show. The ledger's sets only grow: one
        that gained nothing is kept as the very same object (its hash is cached)."""
        bad = list(env.bad)
        completed = set(env.completed)
        dispatched = set(env.dispatched)
        committed = set(env.committed)
        commit_steps = set(env.commit_steps)
        reported = set(env.reported)
        failures = env.failures
        stops = list(env.stops)
        # The receipts of the ACK batch delivered in this step.
        delivered_acks = (
            {(o.rollout_id, o.attempt, o.receipt) for o in delivered.call.payload or ()}
            if delivered is not None and delivered.call.op is Op.ACK and delivered.reply is None
            else set()
        )
        for agent in self.cast.agents:
            was, now = before.participant(agent), after.participant(agent)
            if was is now:
                continue  # the same value: nothing completed, nothing released
            self._completions(was, now, after, completed)
            self._releases(was, now, delivered_acks, bad)
        # Commits: a participant whose fence reached committed_paused with an id.
        for was, now in zip(before.participants, after.participants, strict=True):
            if was is now:
                continue
            fence = now.fence
            active = fence.data.active
            if fence.state in _COMMITTED_STATES and active is not None and active not in committed:
                committed.add(active)
                commit_steps.add((active, env.trainer_step))
        ended = after.controller.phase in (CheckpointState.IDLE, CheckpointState.STOPPED)
        for effect in effects:
            if isinstance(effect, Dispatch):
                key = (effect.rollout_id, effect.attempt)
                if key in dispatched:
                    bad.append(("I2", f"attempt {key[0]}#{key[1]} dispatched twice"))
                dispatched.add(key)
                self._check_redispatch(after, env, key, completed, bad, effects)
            elif isinstance(effect, Outcome):
                if effect.result == "completed":
                    reported.add(effect.checkpoint_id)
                    failures = 0
                elif effect.result == "failed" and effect.retryable and ended:
                    # I7 counts attempts that failed after their retries (§4): a failing
                    # abort reports the attempt too, but its timer retries it, same attempt.
                    failures += 1
            elif isinstance(effect, Stopped):
                stops.append(effect.reason)
            elif isinstance(effect, CaptureCut):
                steps = {s for x, s in commit_steps if x == effect.checkpoint_id}
                if env.optimizer == 1 or any(s != env.trainer_step for s in steps):
                    bad.append(("I8", f"cut of {effect.checkpoint_id} after the trainer moved"))
                if effect.ledger is not None and effect.ledger.pending_acks():
                    bad.append(("I8", f"cut of {effect.checkpoint_id} with ACKs pending"))
            elif isinstance(effect, Publish):
                self._check_publish(after, effect.checkpoint_id, bad)
        self._check_order(before, after, effects, bad)
        if len(bad) > len(env.bad):
            bad = sorted(set(bad))
        if (
            len(completed) == len(env.completed)
            and len(dispatched) == len(env.dispatched)
            and len(committed) == len(env.committed)
            and len(reported) == len(env.reported)
            and failures == env.failures
            and len(stops) == len(env.stops)
            and len(bad) == len(env.bad)
        ):
            return env  # most steps: nothing to note (commit_steps grows with committed)
        return replace(
            env,
            completed=_grown(env.completed, completed),
            dispatched=_grown(env.dispatched, dispatched),
            committed=_grown(env.committed, committed),
            commit_steps=_grown(env.commit_steps, commit_steps),
            reported=_grown(env.reported, reported),
            failures=failures,
            stops=env.stops if len(stops) == len(env.stops) else tuple(stops),
            bad=env.bad if len(bad) == len(env.bad) else tuple(bad),
        )

    def _completions(
        self,
        was: ParticipantState,
        now: ParticipantState,
        after: SystemState,
        completed: set[tuple[str, int, bool, int]],
    ) -> None:
        """Note every agent execution that became `completed` in this step."""
        before = {e.data.key: e.state for e in executions(was)}
        reruns = after.controller.ledger.counters.group_reruns
        for execution in executions(now):
            key = execution.data.key
            if execution.state is not ExecState.COMPLETED:
                continue
            if before.get(key) is ExecState.COMPLETED or any(c[:2] == key for c in completed):
                continue
            completed.add((key[0], key[1], _kept(after, key), reruns))

    def _releases(
        self,
        was: ParticipantState,
        now: ParticipantState,
        delivered_acks: set[tuple[str, int, str]],
        bad: list[tuple[str, str]],
    ) -> None:
        """I1 (M3, S17): only an ACK releases a result. A completed execution that leaves
        its agent must leave an acked refusal key behind (a crash keeps it in the journal)."""
        held = {e.data.key for e in executions(now)}
        keys = getattr(now.role, "refusal_keys", ())
        for execution in executions(was):
            key = execution.data.key
            if execution.state is not ExecState.COMPLETED or key in held:
                continue
            receipt = (key[0], key[1], execution.data.receipt)
            if receipt not in keys and receipt not in delivered_acks:
                bad.append(("I1", f"{key[0]}#{key[1]} released by its agent without an ACK"))

    def _check_redispatch(
        self,
        after: SystemState,
        env: Env,
        key: tuple[str, int],
        completed: set[tuple[str, int, bool, int]],
        bad: list[tuple[str, str]],
        effects: Sequence[Any],
    ) -> None:
        """I2: a kept completion is not run again (unless rolled back or its whole group
        reruns), and a group-scored sibling is never retried alone."""
        rollout, attempt = key
        reruns = after.controller.ledger.counters.group_reruns
        for done_rollout, done_attempt, kept, reruns_then in completed:
            if done_rollout != rollout or done_attempt >= attempt or not kept:
                continue
            if (done_rollout, done_attempt) in env.rolled_back:
                continue
            if reruns <= reruns_then:
                bad.append(("I2", f"sealed {rollout}#{done_attempt} run again as #{attempt}"))
        if self.cast.params.group_scored and attempt > 0:
            group = rollout.rpartition("/")[0]
            together = {e.rollout_id for e in effects if isinstance(e, Dispatch)}
            siblings = {f"{group}/{s}" for s in range(self.cast.params.siblings)}
            if not siblings <= together:
                bad.append(("I2", f"group-scored sibling {rollout} retried alone"))

    def _check_publish(self, after: SystemState, op_id: OpId, bad: list[tuple[str, str]]) -> None:
        """I8: `op_id` is published only with every participant committed to it, and with
        the digests they recorded."""
        for participant in after.participants:
            fence = participant.fence
            if fence.data.active != op_id or fence.state is not FenceState.COMMITTED_PAUSED:
                bad.append(
                    (
                        "I8",
                        f"{op_id} published while {participant.config.name} is not committed to it",
                    )
                )
                continue
            reply = fence.data.result(op_id, _COMMIT_OP)
            if not isinstance(reply, CommitReply):
                bad.append(("I8", f"{op_id} published without {participant.config.name}'s commit"))
        attempt = after.controller.attempt
        if attempt is not None and attempt.op_id == op_id:
            recorded = {
                p.config.name: r.digest
                for p in after.participants
                if isinstance(r := p.fence.data.result(op_id, _COMMIT_OP), CommitReply)
            }
            if dict(attempt.digests) != recorded:
                bad.append(("I8", f"{op_id} staged digests differ from the participants'"))

    def _check_order(
        self,
        before: SystemState,
        after: SystemState,
        effects: Sequence[Any],
        bad: list[tuple[str, str]],
    ) -> None:
        """I5: a control call to a role goes out only when every earlier role of the phase
        has done that op for that id (checked at the moment the call is sent: a call value
        the step added to the requests in flight). Requests enter the flight only as the
        controller's `Call` effects: a step without one sent nothing."""
        if not any(isinstance(e, Call) and e.op in CONTROL_OPS for e in effects):
            return
        sent = Counter(
            m.call
            for m in after.messages
            if m.reply is None and m.call.op in CONTROL_OPS and m.call.op_id is not None
        )
        if not sent:
            return
        sent.subtract(m.call for m in before.messages if m.call in sent)
        for call, added in sent.items():
            if added <= 0 or call.op_id is None:
                continue
            order = _PHASE_ORDER.get(call.op)
            if order is None:
                continue
            role = self.cast.roles.get(call.participant)
            if role is None:
                continue
            for earlier in order[: order.index(role)]:
                for participant in after.participants:
                    if self.cast.roles.get(participant.config.name) != earlier:
                        continue
                    if not _done(participant, call.op, call.op_id):
                        bad.append(
                            (
                                "I5",
                                f"{call.op.value}({call.op_id}) to {call.participant}"
                                f" before {participant.config.name}",
                            )
                        )

    # ------------------------------------------------------------------ properties

    def properties(self) -> Sequence[Always]:
        """I1-I6 and I8, each an `always` over a model state."""
        return (
            always(
                "I1",
                self._i1,
                "nothing completed is lost",
                reads=("executions", "ledger", "env.completed", "env.trained", "env.violations"),
            ),
            always(
                "I2",
                lambda s: not _flags(s, "I2"),
                "nothing runs twice",
                reads=("executions", "env.violations"),
            ),
            always(
                "I3",
                self._i3,
                "publish-or-abort",
                reads=("checkpoint", "fences", "messages", "store", "env.violations"),
            ),
            always(
                "I4",
                self._i4,
                "gates: held iff some owner holds",
                reads=("checkpoint", "admission_gate", "deadline_registry"),
            ),
            always(
                "I5",
                lambda s: not _flags(s, "I5"),
                "phase order (§3)",
                reads=("checkpoint", "fences", "env.violations"),
            ),
            always(
                "I6",
                self._i6,
                "bounded calls: the controller waits only on live calls",
                reads=("checkpoint", "attempt", "messages", "timers"),
            ),
            always(
                "I8",
                lambda s: not _flags(s, "I8"),
                "consistent snapshot",
                reads=("store", "env.violations"),
            ),
        )

    def _i1(self, state: PState) -> bool:
        if _flags(state, "I1"):
            return False
        sys, env = state.system, state.env
        ledger = sys.controller.ledger
        held = {
            e.data.key
            for agent in self.cast.agents
            for e in executions(sys.participant(agent))
            if e.state is ExecState.COMPLETED
        }
        waiting = {a.key for a in ledger.sealed_untrained()}
        discarded = 0
        for rollout, attempt, _kept, _ in env.completed:
            key = (rollout, attempt)
            if key in env.trained or key in env.rolled_back or key in held or key in waiting:
                continue
            # Neither trained, nor waiting, nor held, nor rolled back: it must have been
            # discarded on purpose (a late completion after its deadline, or a sealed
            # sibling of a whole-group rerun), and the ledger must have counted it.
            discarded += 1
        counters = ledger.counters
        # Completions the controller no longer owns (compacted, or from before a restart)
        # are ACKed and counted apart from the ledger.
        unowned = getattr(sys.controller, "unowned_dropped", 0)
        counted = counters.discarded_siblings + counters.late_completions_dropped + unowned
        return discarded <= counted

    def _i3(self, state: PState) -> bool:
        sys, env = state.system, state.env
        if sys.controller.phase is not CheckpointState.IDLE:
            return True
        if any(m.call.op in CONTROL_OPS for m in sys.messages):
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
        controller = sys.controller
        phase = controller.phase
        checkpoint = phase is not CheckpointState.IDLE
        gate = {"checkpoint"} if checkpoint else set()
        if env.weight_sync == 1:
            gate.add("weight_sync")
        if env.train_switch == 1:
            gate.add("train_switch")
        deadlines = {"checkpoint"} if checkpoint else set()
        if env.train_switch == 1:
            deadlines.add("train_switch")
        # A restarted controller's restore (M9) holds both while it runs, and only then.
        restore = controller.restore
        if restore is not None and label(restore.state) not in ("idle", "restore_failed"):
            gate.add("restore")
            if "restore" in controller.deadlines.data.holders:
                deadlines.add("restore")
        if set(controller.gate.data) != gate or (label(controller.gate.state) == "open") != (
            not gate
        ):
            return False
        registry = controller.deadlines
        if set(registry.data.holders) != deadlines:
            return False
        running = registry.state is RegistryState.RUNNING
        if running == bool(deadlines):
            return False
        armed = any(group_of_timer(name) is not None for name, _ in sys.timers)
        return not (armed and not running)

    def _i6(self, state: PState) -> bool:
        sys = state.system
        attempt = sys.controller.attempt
        if attempt is None or sys.controller.phase is CheckpointState.STOPPED:
            return True
        flying = {(m.call.participant, m.call.op, m.call.op_id) for m in sys.messages}
        phase = sys.controller.phase
        # In abort_pending/release_pending the controller waits on its retry timer, not on
        # the calls of the failed round.
        if attempt.phase is not None and phase in _WAITING_PHASES:
            op = PHASE_OPS[attempt.phase]
            timers = {name for name, _ in sys.timers}
            # A not-ready participant is asked again by the retry timer, and the prepare
            # deadline bounds the whole phase: both are the controller's own timers.
            paced = any(
                t.kind in (TimerKind.PREPARE_RETRY, TimerKind.PREPARE_DEADLINE) for t in timers
            )
            for participant, op_id in attempt.waiting:
                if (participant, op, op_id) in flying:
                    continue
                # A call backing off is sent again by its own timer, before its deadline.
                if (participant, op_id) in attempt.backing_off:
                    if call_retry_timer(op_id, participant) in timers:
                        continue
                    return False
                if not (participant in attempt.not_ready and paced):
                    return False
        if phase not in (CheckpointState.FLUSHING_ACKS, CheckpointState.CAPTURING):
            return True
        acking = {m.call.participant for m in sys.messages if m.call.op is Op.ACK}
        return attempt.acking <= acking

    def is_goal(self, state: PState) -> bool:
        """I7's goal: the controller idle with admission open and every fence idle, or
        stopped after more than `max_consecutive_failures` retryable failures."""
        sys, env = state.system, state.env
        if env.raised:
            return False
        phase = sys.controller.phase
        if phase is CheckpointState.STOPPED:
            # Legitimate only after more than max_consecutive_failures retryable failures.
            return env.failures > self.cast.params.max_consecutive_failures
        if phase is not CheckpointState.IDLE or sys.controller.gate.data:
            return False
        if any(m.call.op in CONTROL_OPS for m in sys.messages):
            return False
        return all(p.fence.state is FenceState.IDLE for p in sys.participants)


# ============================================================================ helpers


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


def _grown(old: frozenset[Any], new: set[Any]) -> frozenset[Any]:
    """`new` frozen, or `old` itself when nothing was added to it (the ledger only grows)."""
    return old if len(new) == len(old) else frozenset(new)


def _flags(state: PState, prop: str) -> bool:
    return any(name == prop for name, _ in state.env.bad)
