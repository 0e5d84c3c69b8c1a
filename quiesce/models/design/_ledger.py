"""The controller's ledger side of a design-model step: M6, M7, M8 and the background calls.

What lives here: `LedgerSide`, the controller's bookkeeping of rollouts: the admission
gate and the deadline registry (their holders, M6/M7), the recovery ledger (M8: attempts
and the prompt group) and what moves it, the completions, the ACK outbox and the retires
(background calls with their retries, one step each), dispatch, deadline expiry and
retries at the live level (`sibling`; past the attempt limit the group is abandoned and
counted). What it does not know: the checkpoint or the restore (`_design_step`), except
that a reply may show a participant's new incarnation (`seen_restart`, which the step
implements: it may fail the attempt in progress).
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from quiesce.models.design._labels import AttemptLabel, GateLabel, GroupLabel
from quiesce.models.design._participants import ParticipantSide
from quiesce.models.design._state import (
    AGENT,
    LIVE_ATTEMPTS,
    Attempt,
    Gate,
    Key,
    ack_batch,
    latest_attempts,
)
from quiesce.models.design._tables import GROUP
from quiesce.protocol.machines import (
    AttemptInput,
    ExecAnswer,
    GateInput,
    GroupInput,
    RegistryInput,
)

__all__ = ["LedgerSide"]

TI = AttemptInput
_ENDED = (AttemptLabel.FAILED, AttemptLabel.ABANDONED)  # without a result: retried


class LedgerSide(ParticipantSide, ABC):
    """The controller's rollout bookkeeping of a step (see the module doc)."""

    @abstractmethod
    def seen_restart(self, p: int) -> bool:
        """A reply shows `p`'s new incarnation (S19). True if the reply must not be used."""

    def hold(self, owner: str, deadlines: bool) -> None:
        """`owner` holds the admission gate (and the deadline registry)."""
        self.gate = self._gate(GateInput.HOLD, owner)
        if deadlines:
            self.registry_input(RegistryInput.SUSPEND, owner)

    def release(self, owner: str, deadlines: bool) -> None:
        """`owner` lets go of the gate (and the registry); reserved work may go out."""
        self.gate = self._gate(GateInput.RELEASE, owner)
        if deadlines:
            self.registry_input(RegistryInput.RESUME, owner)
        self.dispatch_reserved()

    def _gate(self, input: GateInput, owner: str) -> Gate:
        stepped = self.t.gate(self.gate, input, owner)
        return self.gate if stepped is None else stepped

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

    def ack_batch(self) -> tuple[Key, ...]:
        """The ACK outbox: owed ACKs of the ledger and completions it does not own."""
        return ack_batch(self)

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
        batch = self.ack_batch()
        if not batch or self.stopped:
            return
        kind, tries = self._tries(fault)
        if kind == "request_lost":
            return
        for _ in range(tries):
            reply = self.serve_ack(batch)
        if fault.endswith("*"):
            return  # every reply lost
        if self.stale >> AGENT & 1 and self.seen_restart(AGENT):
            return
        self.ack_flushed(reply[1])

    def deliver_retires(self, fault: str = "") -> None:
        """Tombstone every pending key at the agent, one retire call each (with its
        retries) in this step; a key stays pending until its answer arrives. `fault` as
        for `drain` strikes them all."""
        kind, tries = self._tries(fault)
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
        self.retires = tuple(sorted({*self.retires, *keys}))
        self.deliver_retires(fault)
        self.registry_input(RegistryInput.STOP, GROUP)
        self.retry_group()

    def retry_group(self) -> None:
        """Each unsealed sibling whose latest attempt failed gets a fresh attempt (live
        level `sibling`); one past the attempt limit abandons the group (counted)."""
        assert self.ledger is not None
        sealed = self.ledger.group.sealed
        for sibling, latest in sorted(latest_attempts(self.ledger).items()):
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
                self.retires = tuple(sorted({*self.retires, (attempt.sibling, attempt.attempt)}))
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
