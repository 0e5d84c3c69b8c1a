"""The composed system, pure: one controller, its participants, the messages between them.

What lives here: `SystemState`, a frozen, hashable value (controller state + participant
states + in-flight messages + armed timers + the controller's durable store + the trainer's
anchor), and `System`, whose methods are the system's *actions*: deliver a message, lose
it, fail it, fire a timer, feed the controller an input from its environment, crash a
process, corrupt a restore's reported digest. Each action is a pure function
`(SystemState, ...) -> (SystemState, effects)`; the scenario tests drive them by hand and
the model checker enumerates them. What it does not know: which action comes next (the
caller decides), sockets, clocks or disks.

How effects are carried:
- a controller `Call` becomes an in-flight request; `deliver` hands it to the participant
  and the reply flies back; `deliver` again feeds it to the controller. `drop` loses a
  request or a reply (`request_lost` / `reply_lost`); `fail` fails a request undelivered;
- store effects are applied to `Store` and answered at once: the controller's disk is
  local and the model's faults are elsewhere. The store keeps each snapshot's contents
  (`Snapshot`), so the restore at start (M9) reads them back; published snapshots are
  pruned to `keep_latest_k`; `Store.unreadable` or an unreadable anchor fail the restore;
- `Dispatch` begins the execution on its agent at once (a refused begin is reported back
  as `RolloutFailed`); `ArmTimer`/`CancelTimer` maintain `timers`.

A controller crash keeps the store, the trainer anchor, the participants and the requests
already in flight (which may still arrive: S15). A participant crash keeps exactly its
journal (§6). The coordinator is the caller's; every participant steps by the `rules`
given and comes back from a crash through `recover`, so a mutant of either side runs
through these very actions.
"""

from __future__ import annotations

import functools
import operator
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, fields
from types import EllipsisType
from typing import Any, TypeVar

from quiesce.check import replace
from quiesce.protocol import Cause, OpId
from quiesce.protocol.controller import (
    ControllerEffect,
    ControllerInput,
    ControllerState,
    Coordinator,
    Ledger,
    TrainerBoundary,
)
from quiesce.protocol.controller.lowlevel import (
    ArmTimer,
    Call,
    CallFailed,
    CancelTimer,
    CaptureCut,
    ClearIntent,
    DiscardStaging,
    Discovered,
    Dispatch,
    InspectPublished,
    ListSnapshots,
    LoadSnapshot,
    LocalDone,
    LocalOp,
    Op,
    Publish,
    PublishInspected,
    Quarantine,
    Recovered,
    Reply,
    RolloutCompleted,
    RolloutFailed,
    SnapshotCandidate,
    SnapshotCondition,
    SnapshotLoaded,
    SnapshotLoadFailed,
    SnapshotsListed,
    SourceUnreadable,
    TimerDue,
    TimerKey,
    TrainerAnchor,
    Validate,
    WriteIntent,
    WriteStaging,
)
from quiesce.protocol.machines import PublishedState
from quiesce.protocol.participant import (
    PARTICIPANT_RULES,
    Answer,
    ParticipantRules,
    ParticipantState,
    Recovery,
    capabilities,
    from_journal,
    handle,
    journal_of,
)
from quiesce.protocol.wire import (
    BeginRequest,
    BoundaryRequest,
    Capabilities,
    ErrorReply,
    ExecutionReply,
    FinishRequest,
    Message,
    RestoreReply,
)

__all__ = ["WRONG_DIGEST", "InFlight", "Snapshot", "Store", "System", "SystemState"]

T = TypeVar("T")

WRONG_DIGEST = "0" * 64
"""The digest `System.wrong_digest_at_restore` makes a restore reply report."""


@dataclass(frozen=True, slots=True)
class Snapshot:
    """One snapshot's contents (staged, then published): every participant's
    `(participant, digest, artifact)`, the cut (ledger, trainer step), the topology
    fingerprint and whether it was taken at the trainer anchor."""

    snapshot_id: OpId
    artifacts: tuple[tuple[str, str, str], ...] = ()
    trainer_step: int = 0
    ledger: Ledger | None = None
    fingerprint: str = ""
    at_trainer_anchor: bool = False

    @property
    def digests(self) -> tuple[tuple[str, str], ...]:
        """`(participant, digest)` of every committed artifact."""
        return tuple((name, digest) for name, digest, _ in self.artifacts)

    def artifact(self, participant: str) -> str:
        """`participant`'s committed artifact (base64 text; empty if it has none)."""
        return next((a for name, _, a in self.artifacts if name == participant), "")


@dataclass(frozen=True, slots=True)
class Store:
    """The controller's durable store: the intent record and the snapshots (ids by
    condition, contents in `snapshots`); `unreadable` makes listing it fail."""

    intent: tuple[OpId, str] | None = None
    staging: frozenset[OpId] = frozenset()
    published: frozenset[OpId] = frozenset()
    quarantined: frozenset[OpId] = frozenset()
    snapshots: tuple[Snapshot, ...] = ()
    unreadable: bool = False

    def contents(self, snapshot_id: OpId) -> Snapshot | None:
        """What the store holds for `snapshot_id`, if anything."""
        return next((s for s in self.snapshots if s.snapshot_id == snapshot_id), None)

    def with_contents(self, snapshot: Snapshot) -> Store:
        """The store with `snapshot`'s contents replaced (or added)."""
        kept = tuple(s for s in self.snapshots if s.snapshot_id != snapshot.snapshot_id)
        ordered = sorted((*kept, snapshot), key=operator.attrgetter("snapshot_id"))
        return replace(self, snapshots=tuple(ordered))

    def staged(self, snapshot_id: OpId, **changes: Any) -> Store:
        """The store with `changes` made to `snapshot_id`'s contents (new ones if none)."""
        staged = self.contents(snapshot_id) or Snapshot(snapshot_id)
        return self.with_contents(replace(staged, **changes))

    def without(self, snapshot_ids: Iterable[OpId]) -> Store:
        """The store without the contents of `snapshot_ids`."""
        gone = frozenset(snapshot_ids)
        kept = tuple(s for s in self.snapshots if s.snapshot_id not in gone)
        return replace(self, snapshots=kept)


def trainer_anchor(step: int) -> TrainerAnchor:
    """The trainer anchor of the pure system at `step` (its version names the step)."""
    return TrainerAnchor(step, f"v{step}")


@dataclass(frozen=True, slots=True)
class InFlight:
    """A call on its way to its participant (`reply` None) or its reply on its way back."""

    call: Call
    reply: Message | None = None


@dataclass(frozen=True, slots=True)
class SystemState:
    """Everything in the composed system; frozen and hashable."""

    controller: ControllerState
    participants: tuple[ParticipantState, ...]
    messages: tuple[InFlight, ...] = ()
    timers: tuple[tuple[TimerKey, float], ...] = ()
    store: Store = field(default_factory=Store)
    now: float = 0.0
    anchor: TrainerAnchor | SourceUnreadable | None = None

    def participant(self, name: str) -> ParticipantState:
        """The participant called `name`."""
        return _member(self.participants, name)

    def requests(self, op: Op | None = None) -> tuple[int, ...]:
        """Indexes of in-flight requests (of `op`, if given), oldest first."""
        return tuple(
            i
            for i, m in enumerate(self.messages)
            if m.reply is None and (op is None or m.call.op is op)
        )

    def replies(self) -> tuple[int, ...]:
        """Indexes of in-flight replies, oldest first."""
        return tuple(i for i, m in enumerate(self.messages) if m.reply is not None)

    def with_participant(self, participant: ParticipantState) -> SystemState:
        """This state with `participant` in place of the one of the same name."""
        return replace(self, participants=_put(self.participants, participant))


parts_of: Callable[[Any], tuple[Any, ...]] = operator.attrgetter(
    *(f.name for f in fields(SystemState))
)
"""The fields of a system (or of a `_Draft` of one), in order."""


def _member(participants: tuple[ParticipantState, ...], name: str) -> ParticipantState:
    """The participant called `name` among `participants`."""
    for state in participants:
        if state.config.name == name:
            return state
    raise KeyError(f"no participant {name!r}; have {[p.config.name for p in participants]}")


def _put(
    participants: tuple[ParticipantState, ...], participant: ParticipantState
) -> tuple[ParticipantState, ...]:
    """`participants` with `participant` in place of the one of the same name (the very
    tuple if that one is `participant` already)."""
    name = participant.config.name
    members = tuple(participant if p.config.name == name else p for p in participants)
    return participants if all(map(operator.is_, members, participants)) else members


@dataclass(slots=True, init=False)
class _Draft:
    """A `SystemState` one action is changing: the action's changes (the controller's
    steps, the effects it carries out) are made here in place, and `freeze` builds the
    frozen state once at the end. A frozen copy per change was most of what an action
    cost (a step carries out several effects)."""

    origin: SystemState
    controller: ControllerState
    participants: tuple[ParticipantState, ...]
    messages: tuple[InFlight, ...]
    timers: tuple[tuple[TimerKey, float], ...]
    store: Store
    now: float
    anchor: TrainerAnchor | SourceUnreadable | None

    def __init__(self, origin: SystemState) -> None:
        self.origin = origin
        self.controller = origin.controller
        self.participants = origin.participants
        self.messages = origin.messages
        self.timers = origin.timers
        self.store = origin.store
        self.now = origin.now
        self.anchor = origin.anchor

    def participant(self, name: str) -> ParticipantState:
        """The participant called `name`."""
        return _member(self.participants, name)

    def put(self, participant: ParticipantState) -> None:
        """Put `participant` in place of the one of the same name."""
        self.participants = _put(self.participants, participant)

    def take(self, index: int) -> InFlight:
        """Take message `index` out of flight."""
        messages = self.messages
        self.messages = messages[:index] + messages[index + 1 :]
        return messages[index]

    def freeze(self) -> SystemState:
        """The state drafted (the state it started from if nothing changed)."""
        parts = parts_of(self)  # the draft's fields named as the system's
        if all(map(operator.is_, parts, parts_of(self.origin))):
            return self.origin
        return SystemState(*parts)


Effects = tuple[ControllerEffect, ...]


class System:
    """The actions of the composed system (pure; holds only the coordinator, the
    participants' `rules` and their `recover`y from a journal).

    >>> from quiesce.protocol._config import QuiesceConfig
    >>> system = System(Coordinator(QuiesceConfig()))  # doctest: +SKIP
    >>> state, effects = system.start([policy, agent, resources])  # doctest: +SKIP
    """

    def __init__(
        self,
        coordinator: Coordinator,
        *,
        turns: int = 2,
        rules: ParticipantRules = PARTICIPANT_RULES,
        recover: Recovery = from_journal,
    ) -> None:
        self.coordinator = coordinator
        self.turns = turns  # turns of every dispatched rollout
        self.rules = rules
        self.recover = recover
        self.save_period = coordinator.config.save_period
        self.keep_latest_k = coordinator.config.keep_latest_k

    # ------------------------------------------------------------------ setup

    def start(
        self,
        participants: Iterable[ParticipantState],
        *,
        epoch: int = 1,
        anchor_step: int | SourceUnreadable | None = 0,
        now: float = 0.0,
        store: Store | None = None,
    ) -> tuple[SystemState, Effects]:
        """A controller starting: discovery, then recovery from `store`'s intent and the
        restore (M9) from its snapshots at the trainer anchor `anchor_step` (None: no
        trainer checkpoint yet; `SourceUnreadable`: the anchor cannot be read)."""
        members = tuple(sorted(participants, key=lambda p: p.config.name))
        anchor: TrainerAnchor | SourceUnreadable | None
        if isinstance(anchor_step, SourceUnreadable):
            anchor, step = anchor_step, None
        else:
            step = anchor_step
            anchor = None if step is None else trainer_anchor(step)
        state = SystemState(
            self.coordinator.initial(epoch),
            members,
            store=store or Store(),
            now=now,
            anchor=anchor,
        )
        caps = tuple(map(self._capabilities, members))
        discovered = self._made(caps, lambda: Discovered(caps))
        intent = None if state.store.intent is None else state.store.intent[0]
        return self._act(
            state, lambda draft: self._run(draft, [discovered, Recovered(intent, step)])
        )

    # ------------------------------------------------------------------ environment

    def input(
        self, state: SystemState, event: ControllerInput, now: float | None = None
    ) -> tuple[SystemState, Effects]:
        """The controller's environment (trainer, schedule, dataloader) sends `event`."""
        draft = _Draft(state)
        if now is not None:
            draft.now = max(state.now, now)
        if isinstance(event, TrainerBoundary) and event.step % self.save_period == 0:
            draft.anchor = trainer_anchor(event.step)  # a durable checkpoint
        effects = self._run(draft, [event])
        return self._freeze(draft), effects

    def agent_event(
        self, state: SystemState, agent: str, op: str, request: Message
    ) -> tuple[SystemState, Message, Effects]:
        """An agent execution reports progress (`boundary`, `finish`); a finish that
        completes is reported to the controller as `RolloutCompleted`."""
        after, reply, _ = self.handle(state.participant(agent), op, request, state.now)
        draft = _Draft(state)
        draft.put(after)
        effects: Effects = ()
        if isinstance(reply, ExecutionReply) and reply.receipt is not None and op == "finish":
            receipt = reply.receipt
            completed = self._made(
                (reply, agent),
                lambda: RolloutCompleted(
                    receipt.rollout_id, receipt.attempt, receipt.receipt, agent
                ),
            )
            effects = self._run(draft, [completed])
        return self._freeze(draft), reply, effects

    def turn(
        self, state: SystemState, agent: str, rollout_id: str, attempt: int, turn: int
    ) -> tuple[SystemState, Message, Effects]:
        """Attempt `(rollout_id, attempt)` on `agent` reached the end of `turn`."""
        request = self._made(
            ("boundary", rollout_id, attempt, turn),
            lambda: BoundaryRequest(rollout_id=rollout_id, attempt=attempt, turn=turn),
        )
        return self.agent_event(state, agent, "boundary", request)

    def finish(
        self, state: SystemState, agent: str, rollout_id: str, attempt: int
    ) -> tuple[SystemState, Message, Effects]:
        """Attempt `(rollout_id, attempt)` on `agent` finished its `/run`."""
        request = self._made(
            ("finish", rollout_id, attempt),
            lambda: FinishRequest(rollout_id=rollout_id, attempt=attempt),
        )
        return self.agent_event(state, agent, "finish", request)

    # ------------------------------------------------------------------ messages

    def deliver(self, state: SystemState, index: int) -> tuple[SystemState, Effects]:
        """Deliver message `index`: a request to its participant (whose reply then flies
        back), or a reply to the controller."""
        draft = _Draft(state)
        message = draft.take(index)
        call = message.call
        if message.reply is not None:
            answer = message.reply
            reply = self._made(
                (message,),
                lambda: Reply(call.participant, call.op, call.op_id, answer, call.payload),
            )
            effects = self._run(draft, [reply])
            return self._freeze(draft), effects
        participant = state.participant(call.participant)
        request = self._request(call, state.store)
        after, answered, _ = self.handle(participant, call.op, request, state.now)
        draft.put(after)
        draft.messages = (*draft.messages, InFlight(call, answered))
        return self._freeze(draft), ()

    def drop(self, state: SystemState, index: int) -> tuple[SystemState, Effects]:
        """Lose message `index`: the controller's call ends `request_lost` or `reply_lost`."""
        return self._act(state, lambda draft: self._lose(draft, index))

    def fail(self, state: SystemState, index: int, cause: Cause) -> tuple[SystemState, Effects]:
        """End message `index`'s call with `cause` (timeout, 5xx, ...), undelivered."""
        return self._act(state, lambda draft: self._fail(draft, index, cause))

    def delay(self, state: SystemState, index: int) -> tuple[SystemState, Message]:
        """Take request `index` out of flight without any answer and return its request, so
        it can be redelivered later with `redeliver` (a stale delayed request, S15)."""
        call = state.messages[index].call
        rest = state.messages[:index] + state.messages[index + 1 :]
        return replace(state, messages=rest), self._request(call, state.store)

    def wrong_digest_at_restore(self, state: SystemState, index: int) -> SystemState:
        """Fault: the in-flight reply `index` to a restore call reports a digest that differs
        from the committed one (S16: the controller must reject that snapshot)."""
        message = state.messages[index]
        reply = message.reply
        if message.call.op is not Op.RESTORE or not isinstance(reply, RestoreReply):
            raise ValueError(f"message {index} is not a restore reply in flight: {message!r}")
        wrong = InFlight(message.call, reply.model_copy(update={"digest": WRONG_DIGEST}))
        messages = (*state.messages[:index], wrong, *state.messages[index + 1 :])
        return replace(state, messages=messages)

    def restore_replies(self, state: SystemState) -> tuple[int, ...]:
        """Indexes of in-flight restored replies whose digest `wrong_digest_at_restore`
        can still corrupt (the fault's enabling condition), oldest first."""
        return tuple(
            i
            for i, m in enumerate(state.messages)
            if m.call.op is Op.RESTORE
            and isinstance(m.reply, RestoreReply)
            and m.reply.status == "restored"
            and m.reply.digest != WRONG_DIGEST
        )

    def redeliver(
        self, state: SystemState, participant: str, op: Op, request: Message
    ) -> tuple[SystemState, Message]:
        """A stale request arrives at `participant` long after it was sent; its reply goes
        nowhere (the call it answered is long over)."""
        after, reply, _ = self.handle(state.participant(participant), op, request, state.now)
        return state.with_participant(after), reply

    # ------------------------------------------------------------------ time and crashes

    def fire_timer(self, state: SystemState, name: TimerKey) -> tuple[SystemState, Effects]:
        """Fire the armed timer `name` (time advances to it)."""
        draft = _Draft(state)
        draft.now = max(state.now, dict(state.timers)[name])
        draft.timers = tuple(t for t in state.timers if t[0] != name)
        effects = self._run(draft, [TimerDue(name)])
        return self._freeze(draft), effects

    def crash_controller(
        self,
        state: SystemState,
        *,
        epoch: int,
        anchor_step: int | SourceUnreadable | EllipsisType | None = ...,
    ) -> tuple[SystemState, Effects]:
        """The controller dies and restarts with `epoch`: its store, the trainer anchor
        (unless `anchor_step` says otherwise) and the participants survive; replies to the
        dead process and its timers are gone. The restart runs the restore (M9)."""
        survivors = tuple(m for m in state.messages if m.reply is None)
        restarted = replace(state, messages=survivors, timers=())
        if isinstance(anchor_step, EllipsisType):
            anchor = state.anchor
            anchor_step = anchor.step if isinstance(anchor, TrainerAnchor) else anchor
        fresh, effects = self.start(
            restarted.participants,
            epoch=epoch,
            anchor_step=anchor_step,
            now=state.now,
            store=state.store,
        )
        return replace(fresh, messages=(*survivors, *fresh.messages)), effects

    def crash_participant(
        self, state: SystemState, name: str, incarnation: str
    ) -> tuple[SystemState, Effects]:
        """Participant `name` dies and restarts as `incarnation`, keeping its journal (§6);
        requests and replies in flight to or from it are lost."""
        draft = _Draft(state)
        draft.put(self.restart(state.participant(name), incarnation))
        effects: list[ControllerEffect] = []
        # Losing one message may make the controller send another to `name`: lost too.
        while True:
            lost = next((i for i, m in enumerate(draft.messages) if m.call.participant == name), -1)
            if lost < 0:
                return self._freeze(draft), tuple(effects)
            effects.extend(self._lose(draft, lost))

    # ------------------------------------------------------------------ internals

    def handle(
        self, participant: ParticipantState, op: str | Op, request: Message, now: float
    ) -> Answer:
        """`participant` answers `request` by `rules` (every participant step goes through
        here, so a model can memoise it)."""
        return handle(participant, op, request, now, rules=self.rules)

    def restart(self, participant: ParticipantState, incarnation: str) -> ParticipantState:
        """`participant` back from its journal as `incarnation` after a crash (every
        restart goes through here, so a model can memoise it)."""
        return self.recover(journal_of(participant), incarnation, self.rules)

    def _freeze(self, draft: _Draft) -> SystemState:
        """The state `draft` ends an action in (every action's passes here, so a model can
        hand out one object per distinct state)."""
        return draft.freeze()

    def _made(self, parts: tuple[object, ...], build: Callable[[], T]) -> T:
        """`build()`: a request or a controller input the system makes from `parts` (the
        message, the cause, ...). Every one is made here, so a model can hand out one
        object per `parts` and know it again by identity (`MemoSystem`)."""
        return build()

    def _capabilities(self, participant: ParticipantState) -> Capabilities:
        """What `participant` reports at discovery."""
        return self._made((participant,), lambda: capabilities(participant))

    def _request(self, call: Call, store: Store) -> Any:
        """The wire request of `call` (a restore's carries its artifact from `store`)."""
        # Only a restore's request reads the store.
        parts = (call, store) if call.op is Op.RESTORE else (call,)
        return self._made(parts, lambda: call.request(functools.partial(_artifact, store)))

    def _act(
        self, state: SystemState, change: Callable[[_Draft], Effects]
    ) -> tuple[SystemState, Effects]:
        """`state` after `change` (an action's work on a draft of it), and its effects."""
        draft = _Draft(state)
        effects = change(draft)
        return self._freeze(draft), effects

    def _lose(self, draft: _Draft, index: int) -> Effects:
        """Lose message `index` of `draft` (see `drop`)."""
        cause = Cause.REQUEST_LOST if draft.messages[index].reply is None else Cause.REPLY_LOST
        return self._fail(draft, index, cause)

    def _fail(self, draft: _Draft, index: int, cause: Cause) -> Effects:
        """End message `index`'s call in `draft` with `cause` (see `fail`)."""
        call = draft.take(index).call
        failed = self._made(
            (call, cause),
            lambda: CallFailed(call.participant, call.op, call.op_id, cause, call.payload),
        )
        return self._run(draft, [failed])

    def _run(self, draft: _Draft, events: Iterable[ControllerInput]) -> Effects:
        """Feed the controller `events` in `draft`, and what carrying out its effects
        answers, until nothing is left; the effects, in order."""
        queue: deque[ControllerInput] = deque(events)
        produced: list[ControllerEffect] = []
        while queue:
            draft.controller, effects = self.coordinator.step(
                draft.controller, draft.now, queue.popleft()
            )
            produced.extend(effects)
            for effect in effects:
                self._carry(draft, effect, queue)
        return tuple(produced)

    def _carry(
        self, draft: _Draft, effect: ControllerEffect, queue: deque[ControllerInput]
    ) -> None:
        """Carry out `effect` in `draft`; what answers the controller joins `queue`."""
        store = draft.store
        if isinstance(effect, Call):
            draft.messages = (*draft.messages, InFlight(effect))
        elif isinstance(effect, ArmTimer):
            arm = effect
            timers = tuple(t for t in draft.timers if t[0] != arm.name)
            timer = self._made((arm,), lambda: (arm.name, arm.at))
            draft.timers = tuple(sorted((*timers, timer)))
        elif isinstance(effect, CancelTimer):
            draft.timers = tuple(t for t in draft.timers if t[0] != effect.name)
        elif isinstance(effect, WriteIntent):
            queue.append(LocalDone(LocalOp.INTENT, effect.checkpoint_id))
            draft.store = replace(store, intent=(effect.checkpoint_id, effect.phase))
        elif isinstance(effect, ClearIntent):
            draft.store = replace(store, intent=None)
        elif isinstance(effect, WriteStaging):
            held = store.contents(effect.checkpoint_id)
            others = tuple(a for a in held.artifacts if a[0] != effect.participant) if held else ()
            artifact = (effect.participant, effect.digest, effect.artifact)
            store = replace(store, staging=store.staging | {effect.checkpoint_id})
            draft.store = store.staged(
                effect.checkpoint_id, artifacts=tuple(sorted((*others, artifact)))
            )
        elif isinstance(effect, CaptureCut):
            queue.append(LocalDone(LocalOp.CUT, effect.checkpoint_id))
            ledger = effect.ledger if isinstance(effect.ledger, Ledger) else None
            draft.store = store.staged(
                effect.checkpoint_id, trainer_step=effect.trainer_step, ledger=ledger
            )
        elif isinstance(effect, Validate):
            queue.append(LocalDone(LocalOp.VALIDATE, effect.checkpoint_id))
            draft.store = store.staged(
                effect.checkpoint_id,
                fingerprint=effect.fingerprint,
                at_trainer_anchor=effect.at_trainer_anchor,
            )
        elif isinstance(effect, Publish):
            queue.append(LocalDone(LocalOp.PUBLISH, effect.checkpoint_id))
            published = sorted(store.published | {effect.checkpoint_id})
            pruned = published[: max(0, len(published) - self.keep_latest_k)]
            store = replace(
                store,
                staging=store.staging - {effect.checkpoint_id},
                published=frozenset(published) - frozenset(pruned),
            )
            draft.store = store.without(pruned)
        elif isinstance(effect, ListSnapshots):
            queue.append(_listing(store, draft.anchor))
        elif isinstance(effect, LoadSnapshot):
            queue.append(_load(store, effect.snapshot_id))
        elif isinstance(effect, InspectPublished):
            found = effect.checkpoint_id in store.published
            # The model's store publishes only verified snapshots: found is verified.
            verdict = PublishedState.VERIFIED if found else PublishedState.ABSENT
            queue.append(PublishInspected(effect.checkpoint_id, verdict))
        elif isinstance(effect, Quarantine):
            moved = store.published - {effect.checkpoint_id}
            quarantined = store.quarantined | {effect.checkpoint_id}
            draft.store = replace(store, published=moved, quarantined=quarantined)
        elif isinstance(effect, DiscardStaging):
            cid = effect.checkpoint_id
            store = replace(store, staging=store.staging - {cid})
            if cid not in store.published and cid not in store.quarantined:
                store = store.without([cid])
            draft.store = store
        elif isinstance(effect, Dispatch):
            dispatch = effect
            request = self._made(
                (dispatch,),
                lambda: BeginRequest(
                    rollout_id=dispatch.rollout_id,
                    attempt=dispatch.attempt,
                    group_id=dispatch.group_id,
                    turns=self.turns,
                    resume_from_turn=dispatch.resume_from_turn,
                ),
            )
            agent = draft.participant(effect.agent)
            after, reply, _ = self.handle(agent, "begin", request, draft.now)
            if isinstance(reply, ErrorReply):
                queue.append(RolloutFailed(effect.rollout_id, effect.attempt))
            draft.put(after)


def _listing(store: Store, anchor: TrainerAnchor | SourceUnreadable | None) -> SnapshotsListed:
    """The answer to `ListSnapshots`: the trainer `anchor` and every snapshot of `store`
    with contents."""
    if store.unreadable:
        return SnapshotsListed(anchor, SourceUnreadable("snapshot_store", "unreadable"))
    candidates = []
    for snapshot in store.snapshots:
        if snapshot.snapshot_id in store.published:
            condition = SnapshotCondition.VERIFIED
        elif snapshot.snapshot_id in store.quarantined:
            condition = SnapshotCondition.QUARANTINED
        else:
            continue  # staging is never a candidate
        candidates.append(
            SnapshotCandidate(
                snapshot.snapshot_id,
                snapshot.trainer_step,
                trainer_anchor(snapshot.trainer_step).version,
                snapshot.fingerprint,
                condition,
                snapshot.at_trainer_anchor,
            )
        )
    return SnapshotsListed(anchor, tuple(candidates))


def _load(store: Store, snapshot_id: OpId) -> SnapshotLoaded | SnapshotLoadFailed:
    """The answer to `LoadSnapshot`: the committed digests and the cut's ledger."""
    snapshot = store.contents(snapshot_id)
    if snapshot is None or snapshot_id not in store.published or snapshot.ledger is None:
        return SnapshotLoadFailed(snapshot_id, "corrupt")
    return SnapshotLoaded(snapshot_id, snapshot.digests, snapshot.ledger)


def _artifact(store: Store, snapshot_id: Any, participant: str) -> str:
    """A stored snapshot's artifact of `participant` ("" once the snapshot is gone)."""
    snapshot = store.contents(snapshot_id)
    return "" if snapshot is None else snapshot.artifact(participant)
