"""M8 recovery ledger: the `rollout_attempt` and `prompt_group` tables, and the `Ledger` value.

What lives here: every legal move of one rollout attempt and of one prompt group (the two
tables below are the source of truth), and `Ledger`, the compact frozen value that holds
every group and attempt of a run, derives the ACK outbox from them and counts what was
discarded. Every `Ledger` operation steps the tables' compiled `step`, so an illegal move
raises `TransitionNotAllowed` (or `GuardRejected`) and the ledger is unchanged.
What it does not know: time, participants, levels (`_recovery_levels`), restore
(`_restore`). It never decides *when* to retry; it only refuses what must never happen.

Public API (stable; the coordinator and the oracles call these):

- `AttemptKey = tuple[str, int]`: `(rollout_id, attempt)`; `rollout_id` is
  `f"{group_id}/{sibling}"` and stays the same across reruns; `attempt` grows by one for
  every new attempt of a rollout and is never reused.
- `Ledger()` (empty). Mutators return a new `Ledger` (or `(Ledger, keys)`):
  - `open_group(group_id, size, *, prompt="", environment="") -> (Ledger, keys)`: new
    group `generating`, one `reserved` attempt 0 per sibling;
  - `dispatch(key)`: `reserved -> dispatched` only (I2);
  - `seal(key, receipt)`: `dispatched -> sealed` *and* the ACK obligation *and* the
    group's `sibling_sealed`, in one step; a late completion of a failed/abandoned attempt
    owes its ACK and is dropped (counted); a duplicate report changes nothing;
  - `fail(key)` (`dispatched -> failed`), `abandon(key)` (`reserved|dispatched ->
    abandoned`), `fail_group(group_id) -> (Ledger, retire_keys)` (deadline expiry:
    dispatched -> failed, reserved -> abandoned);
  - `retry_sibling(group_id, sibling) -> (Ledger, key)`: a new attempt from scratch for a
    sibling whose latest attempt is failed/abandoned (sealed: refused; once per attempt);
  - `claim_continuation(key, turn) -> (Ledger, new_key)`: attempt N's continuation is
    claimed once, by N+1 (which resumes at `turn`); N becomes abandoned;
  - `rerun_group(group_id) -> (Ledger, keys)`: counted whole-group rerun: the group goes
    `generating -> abandoned`, live attempts are abandoned, sealed siblings discarded
    (counted), a new generation of the group starts with one reserved attempt per sibling;
  - `ack_flushed(receipts)`: each receipt (anything with `rollout_id`, `attempt`,
    `receipt`) clears its owed ACK; unknown or already-flushed receipts are ignored;
  - `begin_finalize(group_id)`, `finalized(group_id)`, `controller_restarted()` (every
    `finalizing` group -> `finalization_unknown`), `resolve_finalization(group_id,
    trainer_has)` (-> `finalized`, or back to `generating`, to be rerun whole);
  - `compact()`: drops finished groups (finalized or abandoned) whose attempts owe nothing.
- Queries: `group(group_id)` (current generation), `attempt(key)`, `latest(group_id,
  sibling)`, `siblings(group_id)`, `unfinished_groups()`, `finalization_unknown_groups()`,
  `sealed_untrained()`, `pending_acks()` / `.outbox` (tuple of `OwedAck`), `retire_list()`,
  `owns(rollout_id, attempt)`, `.counters` (`LedgerCounters`).
- Errors: `UnknownGroup`, `UnknownAttempt`, `DuplicateGroup` (all `LocalProtocolError`),
  plus `TransitionNotAllowed` / `GuardRejected` from the tables.
- `ARG_EXAMPLES`: example input arguments of both tables, for the hypothesis sweep.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from quiesce.fsm import TransitionNotAllowed, Value
from quiesce.protocol._errors import LocalProtocolError
from quiesce.protocol._ids import rollout_id
from quiesce.protocol.machines import (
    DONE_ATTEMPT_STATES,
    LIVE_ATTEMPT_STATES,
    PROMPT_GROUP,
    ROLLOUT_ATTEMPT,
    AttemptData,
    AttemptInput,
    AttemptState,
    GroupData,
    GroupInput,
    GroupState,
)

__all__ = [
    "AttemptKey",
    "AttemptRecord",
    "DuplicateGroup",
    "GroupRecord",
    "Ledger",
    "LedgerCounters",
    "OwedAck",
    "UnknownAttempt",
    "UnknownGroup",
]

AttemptKey = tuple[str, int]


# ==================================================================================== Ledger


class _ReceiptLike(Protocol):
    @property
    def rollout_id(self) -> str: ...
    @property
    def attempt(self) -> int: ...
    @property
    def receipt(self) -> str: ...


class UnknownGroup(LocalProtocolError):
    """The ledger has no group `group_id`."""

    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        super().__init__(f"the ledger has no prompt group {group_id!r}; open_group() it first")


class DuplicateGroup(LocalProtocolError):
    """`open_group` with an id the ledger already has; a rerun uses `rerun_group`."""

    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        super().__init__(
            f"prompt group {group_id!r} already exists; use rerun_group() to run it again"
        )


class UnknownAttempt(LocalProtocolError):
    """The ledger has no attempt `(rollout_id, attempt)`."""

    def __init__(self, rollout_id: str, attempt: int) -> None:
        self.rollout_id = rollout_id
        self.attempt = attempt
        super().__init__(f"the ledger has no attempt {rollout_id}#{attempt}")


@dataclass(frozen=True, slots=True)
class OwedAck:
    """One entry of the ACK outbox: the exact receipt to quote to the agent."""

    rollout_id: str
    attempt: int
    receipt: str


@dataclass(frozen=True, slots=True)
class AttemptRecord:
    """One attempt: where it belongs and its `rollout_attempt` value."""

    group_id: str
    generation: int
    sibling: int
    attempt: int
    value: Value[AttemptState, AttemptData] = field(default_factory=ROLLOUT_ATTEMPT.start)
    resume_from_turn: int = 0  # > 0: it continues attempt-1's continuation from that turn

    @property
    def rollout_id(self) -> str:
        """`f"{group_id}/{sibling}"`, the same for every attempt of this sibling."""
        return rollout_id(self.group_id, self.sibling)

    @property
    def key(self) -> AttemptKey:
        """`(rollout_id, attempt)`."""
        return (self.rollout_id, self.attempt)

    @property
    def state(self) -> AttemptState:
        """The `rollout_attempt` state."""
        return self.value.state


@dataclass(frozen=True, slots=True)
class GroupRecord:
    """One generation of one prompt group and its `prompt_group` value."""

    group_id: str
    generation: int
    prompt: str
    environment: str
    value: Value[GroupState, GroupData]

    @property
    def state(self) -> GroupState:
        """The `prompt_group` state."""
        return self.value.state

    @property
    def size(self) -> int:
        """G, the number of siblings."""
        return self.value.data.size


@dataclass(frozen=True, slots=True)
class LedgerCounters:
    """What the ledger threw away on purpose (I1 counts these as not lost)."""

    discarded_siblings: int = 0  # sealed siblings discarded by whole-group reruns
    group_reruns: int = 0
    continuations_claimed: int = 0
    late_completions_dropped: int = 0  # completions of failed/abandoned attempts, ACKed


@dataclass(frozen=True, slots=True)
class Ledger:
    """Every prompt group and rollout attempt of a run, by order of creation.

    Frozen and hashable; every method returns a new ledger. The ACK outbox is derived from
    the attempts (`pending_acks()`), so it cannot disagree with them.

    >>> ledger, keys = Ledger().open_group("g0", 2)
    >>> ledger = ledger.dispatch(keys[0]).seal(keys[0], "rcpt-0")
    >>> [a.receipt for a in ledger.pending_acks()]
    ['rcpt-0']
    """

    groups: tuple[GroupRecord, ...] = ()
    attempts: tuple[AttemptRecord, ...] = ()
    counters: LedgerCounters = LedgerCounters()

    # ------------------------------------------------------------------ queries

    def group(self, group_id: str) -> GroupRecord:
        """The current (newest) generation of `group_id`."""
        for record in reversed(self.groups):
            if record.group_id == group_id:
                return record
        raise UnknownGroup(group_id)

    def attempt(self, key: AttemptKey) -> AttemptRecord:
        """The attempt `(rollout_id, attempt)`."""
        return self.attempts[self._attempt_index(key)]

    def owns(self, rollout_id: str, attempt: int) -> bool:
        """Does the ledger have this attempt (restore checks every restored execution)?"""
        return any(a.key == (rollout_id, attempt) for a in self.attempts)

    def latest(self, group_id: str, sibling: int) -> AttemptRecord:
        """The newest attempt of one sibling."""
        for record in reversed(self.attempts):
            if record.group_id == group_id and record.sibling == sibling:
                return record
        self.group(group_id)  # an unknown group is named as such
        raise UnknownAttempt(rollout_id(group_id, sibling), 0)

    def siblings(self, group_id: str) -> tuple[AttemptRecord, ...]:
        """The newest attempt of every sibling of the current generation, by sibling."""
        group = self.group(group_id)
        return tuple(self.latest(group_id, s) for s in range(group.size))

    def unfinished_groups(self) -> tuple[GroupRecord, ...]:
        """Current generations still `generating`, oldest first (they go out before new work)."""
        newest = {g.group_id: g.generation for g in self.groups}
        return tuple(
            g
            for g in self.groups
            if g.state is GroupState.GENERATING and newest[g.group_id] == g.generation
        )

    def finalization_unknown_groups(self) -> tuple[GroupRecord, ...]:
        """Groups a crash left mid-finalize; resolve each with `resolve_finalization`."""
        return tuple(g for g in self.groups if g.state is GroupState.FINALIZATION_UNKNOWN)

    def sealed_untrained(self) -> tuple[AttemptRecord, ...]:
        """Sealed attempts of groups neither finalized nor discarded (awaiting training)."""
        waiting = {
            (g.group_id, g.generation)
            for g in self.groups
            if g.state not in (GroupState.FINALIZED, GroupState.ABANDONED)
        }
        return tuple(
            a
            for a in self.attempts
            if a.state is AttemptState.SEALED and (a.group_id, a.generation) in waiting
        )

    def pending_acks(self) -> tuple[OwedAck, ...]:
        """The ACK outbox: every completion whose ACK is still owed, oldest first."""
        return tuple(
            OwedAck(a.rollout_id, a.attempt, a.value.data.receipt)
            for a in self.attempts
            if a.value.data.ack_owed and a.value.data.receipt is not None
        )

    @property
    def outbox(self) -> tuple[OwedAck, ...]:
        """Same as `pending_acks()`."""
        return self.pending_acks()

    def retire_list(self) -> tuple[AttemptKey, ...]:
        """Failed or abandoned attempts without a completion: tombstone them on every agent,
        so a late `begin` or `/run` of them is refused or dropped."""
        return tuple(
            a.key
            for a in self.attempts
            if a.state in DONE_ATTEMPT_STATES and a.value.data.receipt is None
        )

    # ------------------------------------------------------------------ attempt moves

    def open_group(
        self, group_id: str, size: int, *, prompt: str = "", environment: str = ""
    ) -> tuple[Ledger, tuple[AttemptKey, ...]]:
        """A new group `generating` with one `reserved` attempt per sibling."""
        if size < 1:
            raise ValueError(f"prompt group {group_id!r} needs at least one sibling, not {size}")
        if any(g.group_id == group_id for g in self.groups):
            raise DuplicateGroup(group_id)
        group = GroupRecord(
            group_id, 0, prompt, environment, PROMPT_GROUP.start(GroupData(size=size))
        )
        fresh = tuple(AttemptRecord(group_id, 0, s, 0) for s in range(size))
        ledger = replace(self, groups=(*self.groups, group), attempts=(*self.attempts, *fresh))
        return ledger, tuple(a.key for a in fresh)

    def dispatch(self, key: AttemptKey) -> Ledger:
        """`reserved -> dispatched`; from any other state `TransitionNotAllowed` (I2)."""
        return self._step_attempt(key, AttemptInput.DISPATCH)[0]

    def seal(self, key: AttemptKey, receipt: str) -> Ledger:
        """Record a completion: seal it, owe its ACK and mark the sibling sealed, at once.

        A completion of a failed or abandoned attempt is owed its ACK and dropped (counted
        in `late_completions_dropped`); the same completion reported twice changes nothing.
        """
        index = self._attempt_index(key)
        record = self.attempts[index]
        before = record.state
        ledger, effects = self._step_attempt(key, AttemptInput.ROLLOUT_COMPLETED, receipt)
        if before is AttemptState.DISPATCHED:
            group_index = self._group_index(record.group_id, record.generation)
            ledger = ledger._step_group_at(group_index, GroupInput.SIBLING_SEALED, record.sibling)
        elif effects:
            counters = replace(
                ledger.counters,
                late_completions_dropped=ledger.counters.late_completions_dropped + 1,
            )
            ledger = replace(ledger, counters=counters)
        return ledger

    def fail(self, key: AttemptKey) -> Ledger:
        """`dispatched -> failed` (deadline expired, or its agent restarted)."""
        return self._step_attempt(key, AttemptInput.ATTEMPT_FAILED)[0]

    def abandon(self, key: AttemptKey) -> Ledger:
        """`reserved | dispatched -> abandoned`."""
        return self._step_attempt(key, AttemptInput.ABANDON)[0]

    def fail_group(self, group_id: str) -> tuple[Ledger, tuple[AttemptKey, ...]]:
        """A group's deadline expired: dispatched -> failed, reserved -> abandoned.

        Returns the keys to retire at their agents (late completions are then ACKed and
        dropped). The group stays `generating`: the caller retries it at its live level.
        """
        ledger: Ledger = self
        retired: list[AttemptKey] = []
        for record in self.siblings(group_id):
            if record.state is AttemptState.DISPATCHED:
                ledger, retired = ledger.fail(record.key), [*retired, record.key]
            elif record.state is AttemptState.RESERVED:
                ledger, retired = ledger.abandon(record.key), [*retired, record.key]
        return ledger, tuple(retired)

    def retry_sibling(self, group_id: str, sibling: int) -> tuple[Ledger, AttemptKey]:
        """A new attempt, from scratch, replacing a failed or abandoned latest attempt.

        The latest attempt must be failed or abandoned and not yet replaced (sealed work is
        never redispatched, a live one is never doubled): else `TransitionNotAllowed`.
        """
        return self._supersede(self.latest(group_id, sibling).key, turn=0)

    def claim_continuation(self, key: AttemptKey, turn: int) -> tuple[Ledger, AttemptKey]:
        """Attempt N's continuation claimed by N+1, which resumes at `turn`; once only.

        N (reserved or dispatched in the restored ledger) becomes abandoned; the caller
        tombstones it on every participant. A second claim of N, or a claim of a sealed N,
        raises `TransitionNotAllowed` and changes nothing.
        """
        ledger = self
        if self.attempt(key).state in LIVE_ATTEMPT_STATES:
            ledger = ledger.abandon(key)
        ledger, new_key = ledger._supersede(key, turn=turn)
        counters = replace(
            ledger.counters, continuations_claimed=ledger.counters.continuations_claimed + 1
        )
        return replace(ledger, counters=counters), new_key

    def rerun_group(self, group_id: str) -> tuple[Ledger, tuple[AttemptKey, ...]]:
        """A counted whole-group rerun (the only way sealed work runs again).

        The current generation goes `generating -> abandoned` (from any other state:
        `TransitionNotAllowed`), its live attempts are abandoned, its sealed siblings are
        discarded and counted, and a new generation starts with one reserved attempt per
        sibling (attempt numbers continue, never reused).
        """
        group = self.group(group_id)
        group_index = self._group_index(group_id, group.generation)
        ledger = self._step_group_at(group_index, GroupInput.RERUN_WHOLE)
        discarded = 0
        for record in self.siblings(group_id):
            if record.state in LIVE_ATTEMPT_STATES:
                ledger = ledger.abandon(record.key)
            elif record.state is AttemptState.SEALED and record.generation == group.generation:
                discarded += 1
        generation = group.generation + 1
        fresh = tuple(
            AttemptRecord(group_id, generation, s, self.latest(group_id, s).attempt + 1)
            for s in range(group.size)
        )
        new_group = GroupRecord(
            group_id,
            generation,
            group.prompt,
            group.environment,
            PROMPT_GROUP.start(GroupData(size=group.size)),
        )
        counters = replace(
            ledger.counters,
            discarded_siblings=ledger.counters.discarded_siblings + discarded,
            group_reruns=ledger.counters.group_reruns + 1,
        )
        ledger = replace(
            ledger,
            groups=(*ledger.groups, new_group),
            attempts=(*ledger.attempts, *fresh),
            counters=counters,
        )
        return ledger, tuple(a.key for a in fresh)

    def ack_flushed(self, receipts: Iterable[_ReceiptLike]) -> Ledger:
        """Clear the owed ACK of every receipt the agent accepted; others are ignored
        (an ACK batch is idempotent)."""
        ledger = self
        for receipt in receipts:
            key = (receipt.rollout_id, receipt.attempt)
            index = ledger._find_attempt(key)
            if index is None:
                continue
            value = ledger.attempts[index].value
            if ROLLOUT_ATTEMPT.enabled(value, AttemptInput.ACK_FLUSHED, receipt.receipt):
                ledger = ledger._step_attempt(key, AttemptInput.ACK_FLUSHED, receipt.receipt)[0]
        return ledger

    # ------------------------------------------------------------------ group moves

    def begin_finalize(self, group_id: str) -> Ledger:
        """`ready_to_finalize -> finalizing`: the group is handed to the trainer."""
        return self._step_group(group_id, GroupInput.FINALIZE_BEGIN)

    def finalized(self, group_id: str) -> Ledger:
        """`finalizing -> finalized`: the trainer durably has the group."""
        return self._step_group(group_id, GroupInput.TRAINER_ACCEPTED)

    def controller_restarted(self) -> Ledger:
        """After a crash: every `finalizing` group becomes `finalization_unknown`."""
        ledger = self
        for index, record in enumerate(self.groups):
            if record.state is GroupState.FINALIZING:
                ledger = ledger._step_group_at(index, GroupInput.CONTROLLER_RESTARTED)
        return ledger

    def resolve_finalization(self, group_id: str, trainer_has: bool) -> Ledger:
        """`finalization_unknown -> finalized` if the trainer has the group, else back to
        `generating` (reopened: rerun it whole, its sealed siblings counted as discarded)."""
        event = GroupInput.TRAINER_HAS_GROUP if trainer_has else GroupInput.TRAINER_LACKS_GROUP
        return self._step_group(group_id, event)

    def compact(self) -> Ledger:
        """Drop finished groups (finalized, or abandoned and superseded) whose attempts are
        all final and owe no ACK; the rest is kept in order."""
        finished = {
            (g.group_id, g.generation)
            for g in self.groups
            if g.state in (GroupState.FINALIZED, GroupState.ABANDONED)
        }
        for a in self.attempts:
            if (a.group_id, a.generation) in finished and (
                a.state in LIVE_ATTEMPT_STATES or a.value.data.ack_owed
            ):
                finished.discard((a.group_id, a.generation))
        # An abandoned generation is the history of its group's newer one: keep it while
        # the group is still in play, so attempt numbers stay monotonic.
        live_ids = {g.group_id for g in self.groups if (g.group_id, g.generation) not in finished}
        drop = {key for key in finished if key[0] not in live_ids}
        return replace(
            self,
            groups=tuple(g for g in self.groups if (g.group_id, g.generation) not in drop),
            attempts=tuple(a for a in self.attempts if (a.group_id, a.generation) not in drop),
        )

    # ------------------------------------------------------------------ internals

    def _find_attempt(self, key: AttemptKey) -> int | None:
        for index in range(len(self.attempts) - 1, -1, -1):
            if self.attempts[index].key == key:
                return index
        return None

    def _attempt_index(self, key: AttemptKey) -> int:
        index = self._find_attempt(key)
        if index is None:
            raise UnknownAttempt(*key)
        return index

    def _group_index(self, group_id: str, generation: int) -> int:
        for index, record in enumerate(self.groups):
            if record.group_id == group_id and record.generation == generation:
                return index
        raise UnknownGroup(group_id)

    def _step_attempt(
        self, key: AttemptKey, event: AttemptInput, arg: Any = None
    ) -> tuple[Ledger, tuple[Any, ...]]:
        index = self._attempt_index(key)
        record = self.attempts[index]
        value, effects = ROLLOUT_ATTEMPT.step(record.value, event, arg)
        attempts = (
            *self.attempts[:index],
            replace(record, value=value),
            *self.attempts[index + 1 :],
        )
        return replace(self, attempts=attempts), effects

    def _step_group(self, group_id: str, event: GroupInput, arg: Any = None) -> Ledger:
        group = self.group(group_id)
        return self._step_group_at(self._group_index(group_id, group.generation), event, arg)

    def _step_group_at(self, index: int, event: GroupInput, arg: Any = None) -> Ledger:
        record = self.groups[index]
        value, _ = PROMPT_GROUP.step(record.value, event, arg)
        groups = (*self.groups[:index], replace(record, value=value), *self.groups[index + 1 :])
        return replace(self, groups=groups)

    def _supersede(self, key: AttemptKey, *, turn: int) -> tuple[Ledger, AttemptKey]:
        record = self.attempt(key)
        group = self.group(record.group_id)
        if group.generation != record.generation or group.state is not GroupState.GENERATING:
            # Only the current generation of a group still generating takes new attempts;
            # anything else would run sealed or discarded work again outside a rerun (I2).
            raise TransitionNotAllowed(
                "prompt_group",
                group.state if group.generation == record.generation else GroupState.ABANDONED,
                AttemptInput.SUPERSEDE,
                reason=f"refused for {record.rollout_id}#{record.attempt}: only a generating "
                "group's current generation takes new attempts",
            )
        ledger, _ = self._step_attempt(key, AttemptInput.SUPERSEDE)
        fresh = AttemptRecord(
            record.group_id,
            record.generation,
            record.sibling,
            record.attempt + 1,
            resume_from_turn=turn,
        )
        return replace(ledger, attempts=(*ledger.attempts, fresh)), fresh.key
