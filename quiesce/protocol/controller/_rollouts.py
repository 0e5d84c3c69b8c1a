"""The rollout side of the coordinator: the recovery ledger's inputs.

What lives here: `Rollouts`, the work of one coordinator step on the ledger (M8): a group
opened and dispatched while admission is open, a completion sealed (or, if the ledger does
not own it, ACKed and dropped), a failed attempt or an expired group retried at its
environment's live level (S11), and retired attempts whose late completion is sealed
(S17). What it does not know: how ACKs and retires are sent (`_background`: it asks the
step to drain the ACK outbox and to retire), the checkpoint lifecycle, and the restore at
start (the coordinator queues new groups with it while it runs).
"""

from __future__ import annotations

from dataclasses import replace

from quiesce.fsm import TransitionNotAllowed
from quiesce.protocol._errors import LocalProtocolError
from quiesce.protocol._ids import group_of
from quiesce.protocol._levels import RecoveryLevel
from quiesce.protocol._messages import Receipt
from quiesce.protocol.controller._background import agent_of
from quiesce.protocol.controller._effects import Dispatch, Metric, Redispatch
from quiesce.protocol.controller._host import StepHost
from quiesce.protocol.controller._inputs import (
    GroupOpened,
    GroupTrained,
    RolloutCompleted,
    RolloutFailed,
)
from quiesce.protocol.controller._ledger import AttemptKey, OwedAck
from quiesce.protocol.machines import (
    AttemptState,
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

    # ------------------------------------------------------------------ dispatch

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
        group_id = group_of(event.rollout_id)
        if ledger.group(group_id).state is GroupState.READY_TO_FINALIZE:
            self.h.stop_deadline(group_id)
        # The background ACK drain; the strict flush of the next attempt backs it up (S8).
        self.h.send_acks()

    def drop_unowned(self, event: RolloutCompleted) -> None:
        """A completion the ledger does not own (I1: its interval was rolled back by a
        restore, its prompt is in flight again or back in the dataloader): never trained,
        but ACKed, or its agent holds it unACKed and is never ready for a prepare again.
        It joins the ACK outbox until the agent accepts it (strict flushes retry it)."""
        agent = event.agent or agent_of(self.h.state.ledger, event.rollout_id)
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
        self.h.send_acks()

    def on_rollout_failed(self, event: RolloutFailed) -> None:
        """An attempt failed on its agent: retry its group at once, or at its deadline if
        it failed again right after that retry (no hot loop on an agent refusing all)."""
        key: AttemptKey = (event.rollout_id, event.attempt)
        try:
            ledger = self.h.state.ledger.fail(key)
        except _REFUSED as error:
            self.h.log("failure_ignored", rollout=event.rollout_id, error=str(error))
            return
        group_id = group_of(event.rollout_id)
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
                self.h.retire(agent, key)
        self.h.stop_deadline(group_id)
        self.retry_group(group_id)

    def retry_group(self, group_id: str) -> None:
        """Retry a group's failed siblings at its environment's live level (M8, S11)."""
        ledger = self.h.state.ledger
        group = ledger.group(group_id)
        target = self.h.config.rollout_recovery.target_level
        level = self.h.policy.retry_level(self.h.state.fleet, group.environment, target)
        if level is RecoveryLevel.PROMPT_GROUP:
            before = ledger.counters.discarded_siblings
            ledger, _ = ledger.rerun_group(group_id)
            discarded = ledger.counters.discarded_siblings - before
            self.h.emit(Metric("rollouts.groups_retried_whole", 1.0))
            if discarded:
                self.h.emit(Metric("rollouts.sealed_siblings_discarded", float(discarded)))
        else:
            for record in ledger.siblings(group_id):
                if record.state in (AttemptState.FAILED, AttemptState.ABANDONED):
                    ledger, _ = ledger.retry_sibling(group_id, record.sibling)
        self.h.state = replace(self.h.state, ledger=ledger)
        self.h.emit(Redispatch(group_id, level.value))
        self.h.start_deadline(group_id)
        self.dispatch_reserved()

    def seal_late(self, receipt: Receipt) -> None:
        """A retire found its execution completed: seal it late and ACK it (S17: only an
        ACK releases a completed result)."""
        key: AttemptKey = (receipt.rollout_id, receipt.attempt)
        try:
            ledger = self.h.state.ledger.seal(key, receipt.receipt)
        except _REFUSED as error:
            self.h.log("late_completion_refused", rollout=receipt.rollout_id, error=str(error))
            return
        self.h.state = replace(self.h.state, ledger=ledger)
        self.h.send_acks()
