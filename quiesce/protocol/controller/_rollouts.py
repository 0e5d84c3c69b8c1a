"""The rollout side of the coordinator: the recovery ledger's inputs and the ACK outbox.

What lives here: `Rollouts`, the work of one coordinator step on the ledger (M8): a group
opened and dispatched while admission is open, a completion sealed (or, if the ledger does
not own it, ACKed and dropped), a failed attempt or an expired group retried at its
environment's live level (S11), retired attempts whose late completion is sealed (S17),
and the ACK outbox -- sent in the background after every completion (at most one batch per
agent in flight) and strictly by M1's `flush_acks` (S8) -- with what an ACK answer settles.
What it does not know: the checkpoint lifecycle beyond telling M1 that its strict flush
ended (or failed), and the restore at start (the coordinator queues new groups with it
while it runs).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from quiesce.fsm import TransitionNotAllowed
from quiesce.protocol._causes import Cause
from quiesce.protocol._errors import LocalProtocolError
from quiesce.protocol._ids import OpId
from quiesce.protocol._levels import RecoveryLevel
from quiesce.protocol._messages import AckReply, Receipt, RetireReply
from quiesce.protocol._timers import ArmTimer, TimerKey, TimerKind
from quiesce.protocol.controller._effects import Call, Dispatch, Metric, Op, Redispatch
from quiesce.protocol.controller._host import StepHost
from quiesce.protocol.controller._inputs import (
    CallFailed,
    GroupOpened,
    GroupTrained,
    RolloutCompleted,
    RolloutFailed,
)
from quiesce.protocol.controller._ledger import AttemptKey, OwedAck, UnknownGroup
from quiesce.protocol.machines import (
    AttemptState,
    CheckpointInput,
    CheckpointState,
    GateState,
    GroupState,
)

__all__ = ["Rollouts"]

# What a ledger operation raises when an input does not fit the ledger (logged, ignored).
_REFUSED = (ValueError, TransitionNotAllowed, LocalProtocolError)


class Rollouts:
    """The ledger's work within one coordinator step (scratch: thrown away after it)."""

    def __init__(self, host: StepHost) -> None:
        self.h = host

    # ------------------------------------------------------------------ ACKs

    def send_acks(self, flush: OpId | None = None) -> frozenset[str]:
        """Send the ACK outbox, one batch per agent; the agents called.

        `flush` is the attempt whose strict flush (or re-flush inside the cut) this is: it
        calls every agent owed an ACK, and its calls carry that id, so only their own
        replies and failures settle the flush. A background drain (`flush=None`) is
        answered under None and never does (S8); it skips every agent that has a
        background batch in flight: receipts owed meanwhile go into that agent's next
        batch, sent when the one in flight is answered (a failed one waits for the next
        drain or strict flush), so at most one background batch per agent is in flight."""
        outbox = self._outbox()
        if flush is None:
            busy = self.h.state.background_acks
            outbox = {agent: owed for agent, owed in outbox.items() if agent not in busy}
        self._send(outbox, flush)
        return frozenset(outbox)

    def _send(self, batches: dict[str, tuple[OwedAck, ...]], flush: OpId | None) -> None:
        """Call each agent with its batch; a background batch is noted in flight."""
        if flush is None and batches:
            busy = self.h.state.background_acks
            self.h.state = replace(self.h.state, background_acks=busy.union(batches))
        deadline = self.h.now + self.h.config.control_timeout_s
        for agent in sorted(batches):
            self.h.emit(Call(agent, Op.ACK, flush, deadline, batches[agent]))

    def _outbox(self) -> dict[str, tuple[OwedAck, ...]]:
        """The ACK outbox by agent: the ledger's owed ACKs, then the unowned completions."""
        state = self.h.state
        by_agent: dict[str, list[OwedAck]] = {}
        for owed in state.ledger.pending_acks():
            agent = self.agent_of(owed.rollout_id)
            if agent is not None:
                by_agent.setdefault(agent, []).append(owed)
        for agent, owed in state.unowned_acks:
            by_agent.setdefault(agent, []).append(owed)
        return {agent: tuple(owed) for agent, owed in by_agent.items()}

    def on_ack_reply(self, participant: str, op_id: OpId | None, result: Any) -> None:
        """An agent answered an ACK batch: what it released leaves the outbox."""
        released: tuple[Receipt, ...] = ()
        if isinstance(result, AckReply):
            released = (*result.acknowledged, *result.unknown)
            state = self.h.state
            state = replace(state, ledger=state.ledger.ack_flushed(released))
            if state.unowned_acks:
                gone = {(r.rollout_id, r.attempt, r.receipt) for r in released}
                kept = tuple(
                    (agent, owed)
                    for agent, owed in state.unowned_acks
                    if agent != participant
                    or (owed.rollout_id, owed.attempt, owed.receipt) not in gone
                )
                state = replace(state, unowned_acks=kept)
            self.h.state = state
        if op_id is None:
            # An answer that settles none of its receipts counts as failed: re-sending them
            # at once would call that agent in a loop.
            self._background_ended(participant, answered=bool(released))
        self._ack_settled(participant, op_id, ok=isinstance(result, AckReply))

    def on_ack_failed(self, event: CallFailed) -> None:
        """An ACK batch got no answer: it stays in the outbox."""
        self.h.log(
            "ack_failed", level="warning", participant=event.participant, cause=event.cause.value
        )
        if event.op_id is None:
            self._background_ended(event.participant, answered=False)
        self._ack_settled(event.participant, event.op_id, ok=False, cause=event.cause)

    def on_ack_unused(self, participant: str, op_id: OpId | None) -> None:
        """An ACK reply from a restarted agent the coordinator does not use (S19): the
        batch ended all the same; what it carried is still owed."""
        if op_id is None:
            self._background_ended(participant, answered=False)

    def _background_ended(self, agent: str, *, answered: bool) -> None:
        """`agent`'s background batch ended. Answered: the receipts owed to it meanwhile
        go now, as its next batch. Failed: they wait for the next drain or the strict
        flush (S8), so an unreachable agent is not called in a loop."""
        busy = self.h.state.background_acks
        if agent not in busy:
            return  # a batch the restarted coordinator never sent (its state starts empty)
        self.h.state = replace(self.h.state, background_acks=busy - {agent})
        if not answered:
            return
        owed = self._outbox().get(agent)
        if owed:
            self._send({agent: owed}, None)

    def _ack_settled(
        self,
        agent: str,
        op_id: OpId | None,
        *,
        ok: bool,
        cause: Cause = Cause.PARTICIPANT_ERROR,
    ) -> None:
        attempt = self.h.state.attempt
        if attempt is None or op_id != attempt.op_id or agent not in attempt.acking:
            # A background drain's answer (or a stale flush's): it never settles the flush
            # in progress; the strict flush of the next attempt catches up (S8).
            return
        self.h.set_attempt(replace(attempt, acking=attempt.acking - {agent}))
        phase = self.h.state.phase
        if phase is CheckpointState.FLUSHING_ACKS:
            if not ok:
                self.h.fail(cause)  # S8: strict, the attempt fails now, not at the deadline
            elif not self.h.attempt.acking:
                self.h.fire(CheckpointInput.ACKS_FLUSHED)
        elif phase is CheckpointState.CAPTURING:
            if not ok:
                self.h.fail(Cause.ACKS_PENDING)
            elif not self.h.attempt.acking:
                self.h.capture()

    # ------------------------------------------------------------------ dispatch

    def agent_of(self, rollout_id: str) -> str | None:
        """The agent that runs `rollout_id`'s group (None: the ledger has no such group)."""
        try:
            return self.h.state.ledger.group(rollout_id.rpartition("/")[0]).environment
        except UnknownGroup:
            return None

    def dispatch_reserved(self) -> None:
        """While admission is open, dispatch every reserved attempt (oldest group first,
        so unfinished groups go out before new work)."""
        state = self.h.state
        if state.gate.state is not GateState.OPEN:
            return
        ledger = state.ledger
        mutated = state.mutated
        for record in ledger.attempts:
            if record.state is not AttemptState.RESERVED:
                continue
            group = ledger.group(record.group_id)
            if group.generation != record.generation or group.state is not GroupState.GENERATING:
                continue
            ledger = ledger.dispatch(record.key)
            self.h.emit(
                Dispatch(
                    group.environment,
                    record.group_id,
                    record.rollout_id,
                    record.attempt,
                    record.resume_from_turn,
                )
            )
            mutated = True
        self.h.state = replace(self.h.state, ledger=ledger, mutated=mutated)

    def on_group_opened(self, event: GroupOpened) -> None:
        """The dataloader opened a group: reserve its siblings, start its deadline."""
        try:
            ledger, _ = self.h.state.ledger.open_group(
                event.group_id, event.size, prompt=event.prompt, environment=event.environment
            )
        except _REFUSED as error:
            self.h.log("group_refused", level="warning", group=event.group_id, error=str(error))
            return
        self.h.state = replace(self.h.state, ledger=ledger, mutated=True)
        self.h.start_deadline(event.group_id)
        self.dispatch_reserved()

    # ------------------------------------------------------------------ outcomes

    def on_completed(self, event: RolloutCompleted) -> None:
        """A rollout finished: seal it (or drop it, ACKed, if the ledger does not own it)."""
        key: AttemptKey = (event.rollout_id, event.attempt)
        if not self.h.state.ledger.owns(*key):
            self.drop_unowned(event)
            return
        try:
            ledger = self.h.state.ledger.seal(key, event.receipt)
        except _REFUSED as error:
            self.h.log(
                "completion_refused", level="warning", rollout=event.rollout_id, error=str(error)
            )
            return
        self.h.state = replace(self.h.state, ledger=ledger, mutated=True)
        group_id = event.rollout_id.rpartition("/")[0]
        if ledger.group(group_id).state is GroupState.READY_TO_FINALIZE:
            self.h.stop_deadline(group_id)
        # The background ACK drain; the strict flush of the next attempt backs it up (S8).
        self.send_acks()

    def drop_unowned(self, event: RolloutCompleted) -> None:
        """A completion the ledger does not own (I1: its interval was rolled back by a
        restore, its prompt is in flight again or back in the dataloader): never trained,
        but ACKed, or its agent holds it unACKed and is never ready for a prepare again.
        It joins the ACK outbox until the agent accepts it (strict flushes retry it)."""
        agent = event.agent or self.agent_of(event.rollout_id)
        if agent is None:
            self.h.log(
                "unowned_completion_unroutable",
                level="warning",
                rollout=event.rollout_id,
                attempt=event.attempt,
            )
            return
        owed = (agent, OwedAck(event.rollout_id, event.attempt, event.receipt))
        state = self.h.state
        if owed not in state.unowned_acks:
            self.h.state = replace(
                state,
                unowned_acks=(*state.unowned_acks, owed),
                unowned_dropped=state.unowned_dropped + 1,
            )
            self.h.log(
                "unowned_completion_dropped",
                participant=agent,
                rollout=event.rollout_id,
                attempt=event.attempt,
            )
            dropped = float(self.h.state.unowned_dropped)
            self.h.emit(Metric("rollouts.unowned_completions_dropped", dropped))
        self.send_acks()

    def on_rollout_failed(self, event: RolloutFailed) -> None:
        """An attempt failed on its agent: retry its group at once, or at its deadline if
        it failed again right after that retry (no hot loop on an agent refusing all)."""
        key: AttemptKey = (event.rollout_id, event.attempt)
        try:
            ledger = self.h.state.ledger.fail(key)
        except _REFUSED as error:
            self.h.log("failure_ignored", rollout=event.rollout_id, error=str(error))
            return
        group_id = event.rollout_id.rpartition("/")[0]
        refused = self.h.state.refused_groups
        self.h.state = replace(
            self.h.state, ledger=ledger, mutated=True, refused_groups=refused | {group_id}
        )
        if group_id in refused:
            # Failed again right after its immediate retry: its deadline retries it (M7).
            self.h.log("redispatch_deferred", group=group_id, rollout=event.rollout_id)
            return
        self.retry_group(group_id)

    def on_group_trained(self, event: GroupTrained) -> None:
        """The trainer durably has a group: finalize it and compact the ledger."""
        try:
            ledger = self.h.state.ledger.begin_finalize(event.group_id).finalized(event.group_id)
        except _REFUSED as error:
            self.h.log("trained_ignored", group=event.group_id, error=str(error))
            return
        self.h.state = replace(self.h.state, ledger=ledger.compact(), mutated=True)

    def expire_group(self, group_id: str, *, retire: bool = True) -> None:
        """M7 expiry (or the agent restarted): fail the group's unfinished attempts, retire
        them at their agent (a late finish is then ACKed and dropped), retry the group."""
        try:
            ledger, keys = self.h.state.ledger.fail_group(group_id)
        except _REFUSED as error:
            self.h.log("expiry_ignored", group=group_id, error=str(error))
            return
        self.h.state = replace(
            self.h.state,
            ledger=ledger,
            mutated=True,
            refused_groups=self.h.state.refused_groups - {group_id},
        )
        agent = ledger.group(group_id).environment
        if retire:
            for key in keys:
                self.retire(agent, key)
        self.h.stop_deadline(group_id)
        self.retry_group(group_id)

    def retry_group(self, group_id: str) -> None:
        """Retry a group's failed siblings at its environment's live level (M8, S11)."""
        ledger = self.h.state.ledger
        group = ledger.group(group_id)
        target = self.h.config.rollout_recovery.target_level
        level = self.h.policy.retry_level(self.h.state.fleet, group.environment, target)
        if level is RecoveryLevel.PROMPT_GROUP:
            ledger, _ = ledger.rerun_group(group_id)
        else:
            for record in ledger.siblings(group_id):
                if record.state in (AttemptState.FAILED, AttemptState.ABANDONED):
                    ledger, _ = ledger.retry_sibling(group_id, record.sibling)
        self.h.state = replace(self.h.state, ledger=ledger)
        self.h.emit(Redispatch(group_id, level.value))
        self.h.start_deadline(group_id)
        self.dispatch_reserved()

    def retire(self, agent: str, key: AttemptKey) -> None:
        """Tombstone attempt `key` at `agent` (M3 `retire`; idempotent: an agent that has it
        retired already answers so)."""
        deadline = self.h.now + self.h.config.control_timeout_s
        self.h.emit(Call(agent, Op.RETIRE, None, deadline, key))

    def on_retire_failed(self, event: CallFailed) -> None:
        """A retire got no answer: send it again after `snapshot_attempt_interval_s`, until
        one is answered. Nothing else would: the ledger may compact the attempt's group, and
        a frozen execution the retire was meant for is never resumed (I9)."""
        key: AttemptKey = event.payload
        timer = TimerKey(TimerKind.RETIRE_RETRY, f"{key[0]}#{key[1]}", event.participant)
        at = self.h.now + self.h.config.snapshot_attempt_interval_s
        self.h.log(
            "retire_retried",
            level="warning",
            participant=event.participant,
            rollout=key[0],
            attempt=key[1],
            cause=event.cause.value,
            retry_at=at,
        )
        self.h.emit(ArmTimer(timer, at))

    def on_retire_due(self, timer: TimerKey) -> None:
        """The retry timer of a failed retire fired: send the same retire again."""
        rollout_id, _, attempt = timer.subject.rpartition("#")
        self.retire(timer.participant, (rollout_id, int(attempt)))

    def on_retire_reply(self, participant: str, result: Any) -> None:
        """A retire answered: a completed execution it found is sealed late and ACKed (S17:
        only an ACK releases a completed result)."""
        if isinstance(result, RetireReply) and result.receipt is not None:
            receipt = result.receipt
            try:
                ledger = self.h.state.ledger.seal(
                    (receipt.rollout_id, receipt.attempt), receipt.receipt
                )
            except _REFUSED as error:
                self.h.log("late_completion_refused", participant=participant, error=str(error))
                return
            self.h.state = replace(self.h.state, ledger=ledger)
            self.send_acks()
