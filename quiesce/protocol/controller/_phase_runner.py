"""The phase runner: one remote phase, walked in §3 order, every call a `call` table value.

What lives here: `PhaseRunner`, shared by the checkpoint attempt (M1: prepare, commit,
release, abort) and the restore at start (M9: restore, discard, resume, the abort of a
rejected snapshot). It walks the phase's slots (`CoordinatorPolicy.phase_order`, §3), sends
every call of one role at once, feeds each reply, failure and timer to that call's `call`
table value and does the work the row names (`CALL_WORK`), and moves to the next role when
every call of this one settled. Also here: how a reply is read as a call input
(`read_reply`), the backoff of a retried call (`backoff_s`), how long one try of it waits
(`try_deadline`) and the timers the runner arms.

What it does not know: who is called for a slot, what a call carries, or what a settled
call means for the phase. Its `PhaseOwner` says: M1 fails the attempt at the first failed
call and moves on when a role answered; M9 judges a role once every call of it settled
(S16) and retries with the same op id on its own timer.

    start(phase) -> call_role: the next slot with someone to call: SEND each call
                   (a phase started again keeps the calls already answered)
    reply / failure / timer -> the call's row -> its named work
                   (a transient failure: the same call again after a backoff, §4)
    nothing of the role in flight -> owner.role_settled(failed) -> next role, or not
    no slot left -> owner.phase_done()
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from types import MappingProxyType
from typing import Any, Protocol

from quiesce.fsm import Effect, work
from quiesce.protocol._causes import Cause, cause_of_refusal
from quiesce.protocol._config import QuiesceConfig
from quiesce.protocol._ids import OpId
from quiesce.protocol._messages import (
    CommitReply,
    ErrorReply,
    PrepareReply,
    RestoreReply,
    ResumeReply,
    Role,
)
from quiesce.protocol._timers import ArmTimer, CancelTimer, TimerKey, TimerKind
from quiesce.protocol.controller._effects import Call, Metric, Op
from quiesce.protocol.controller._host import StepHost
from quiesce.protocol.controller._state import Fleet
from quiesce.protocol.machines import (
    CALL,
    CallData,
    CallEvent,
    CallInput,
    CallKey,
    CallState,
    Phase,
    PhaseCalls,
    Slot,
)

__all__ = [
    "CALL_WORK",
    "PHASE_OPS",
    "PhaseOwner",
    "PhaseRunner",
    "backoff_s",
    "call_retry_timer",
    "conflict_targets",
    "prepare_retry_timer",
    "read_reply",
    "try_deadline",
    "with_conflict",
]

PHASE_OPS: Mapping[Phase, Op] = MappingProxyType(
    {
        Phase.PREPARE: Op.PREPARE,
        Phase.COMMIT: Op.COMMIT,
        Phase.RESTORE: Op.RESTORE,
        Phase.DISCARD: Op.DISCARD,
        Phase.RESUME: Op.RESUME,
        Phase.ABORT: Op.RESUME,  # abort = resume of an id that is not published
    }
)
"""The op every call of a phase sends."""

# The reply a call of each op expects (a discard is answered like a restore).
_EXPECTED: Mapping[Op, type] = MappingProxyType(
    {
        Op.PREPARE: PrepareReply,
        Op.COMMIT: CommitReply,
        Op.RESTORE: RestoreReply,
        Op.DISCARD: RestoreReply,
        Op.RESUME: ResumeReply,
    }
)

_IN_FLIGHT = (CallState.WAITING, CallState.NOT_READY, CallState.BACKING_OFF)
_UNANSWERED = (CallState.REFUSED, CallState.FAILED)


def prepare_retry_timer(op_id: OpId) -> TimerKey:
    """The timer that asks the not-ready participants of `op_id`'s prepare again (S10)."""
    return TimerKey(TimerKind.PREPARE_RETRY, str(op_id))


def call_retry_timer(op_id: OpId, participant: str) -> TimerKey:
    """The timer that sends the call `(participant, op_id)` again after its backoff."""
    return TimerKey(TimerKind.CALL_RETRY, str(op_id), participant)


def conflict_targets(
    conflicts: Iterable[CallKey], slot: Slot, fleet: Fleet | None
) -> frozenset[CallKey]:
    """The calls of a conflicting slot (S5): resume each id that a participant of the slot's
    role reported it is fenced to (`conflicts`: the participant and that id)."""
    return frozenset(
        (name, other)
        for name, other in conflicts
        if fleet is None or fleet.role_of(name) == slot.role
    )


def with_conflict(
    conflicts: frozenset[CallKey], key: CallKey, active_id: OpId
) -> frozenset[CallKey]:
    """`conflicts` once the call `key` was refused as its participant is fenced to
    `active_id` (S5): that id is resumed next. If `key` was itself the resume of a
    conflicting id, the participant does not hold that id, so it is not resumed again (it
    would be refused the same way, round after round): the chain of conflicts is followed
    to the id the participant holds now.

    >>> x, z = OpId(1, 4, 0), OpId(1, 6, 0)
    >>> sorted(with_conflict(frozenset({("pol", x)}), ("pol", x), z)) == [("pol", z)]
    True
    """
    return (conflicts - {key}) | {(key[0], active_id)}


def backoff_s(config: QuiesceConfig, op_id: OpId | None, participant: str, retry: int) -> float:
    """The wait before retry number `retry` (1, 2, ...) of a call: exponential backoff with
    full jitter, a uniform fraction of `min(call_backoff_max_s, call_backoff_s * 2 ** (retry
    - 1))`. The fraction is a hash of the call and the retry number: the core stays pure (no
    clock, no global random source), a replay waits exactly as long, and the calls of one
    role, which failed together, are sent again apart.

    >>> config = QuiesceConfig(call_backoff_s=1.0)
    >>> 0.0 <= backoff_s(config, OpId(1, 3, 0), "agent", 2) < 2.0
    True
    """
    cap = min(config.call_backoff_max_s, config.call_backoff_s * 2.0 ** (retry - 1))
    digest = hashlib.blake2b(f"{op_id}|{participant}|{retry}".encode(), digest_size=8).digest()
    fraction: float = int.from_bytes(digest, "big") / 2**64
    return cap * fraction


def try_deadline(config: QuiesceConfig, now: float, call: CallData) -> float:
    """How long one try of `call`, sent at `now`, may wait: `call_try_timeout_s` (at most
    `control_timeout_s`; that when unset) if the call may be retried, never past the call's
    deadline. A try that times out then leaves its retries time to run before the deadline
    (§4). A call never retried (no budget) waits until its deadline.

    >>> config = QuiesceConfig(control_timeout_s=2.0, call_try_timeout_s=0.5)
    >>> try_deadline(config, 10.0, CallData(deadline_at=12.0, budget=3))
    10.5
    >>> try_deadline(config, 11.8, CallData(deadline_at=12.0, budget=3, retries=3))
    12.0
    >>> try_deadline(config, 10.0, CallData(deadline_at=12.0))
    12.0
    >>> try_deadline(QuiesceConfig(control_timeout_s=2.0), 0.0, CallData(deadline_at=5.0, budget=1))
    2.0
    """
    if not call.budget:
        return call.deadline_at
    patience = config.control_timeout_s
    if config.call_try_timeout_s is not None:
        patience = min(patience, config.call_try_timeout_s)
    return min(call.deadline_at, now + patience)


def read_reply(
    op: Op, op_id: OpId, result: Any, *, conflicting: bool = False
) -> tuple[CallInput, CallEvent]:
    """What a reply to the call `(op, op_id)` says, as the `call` table's input.

    A typed refusal is a refusal (`checkpoint_conflict` naming the active id: a conflict,
    S5); a reply naming another id is invalid (`wrong_id`), so is one of the wrong kind
    (`malformed_reply`) or a commit that failed; a prepare may be not ready; anything else
    is the answer. A `conflicting` call resumes an id another controller left (S5): refused
    as stale, that id is at or below the participant's watermark, i.e. already retired,
    which is all the call was for, so that refusal is its answer (for one of the
    controller's own ids it stays `stale_id`: its ids are fresh and ordered).

    >>> stale = ErrorReply(participant="pol", incarnation="i1", code="stale_checkpoint",
    ...                    message="", high_watermark=OpId(1, 6, 0))
    >>> read_reply(Op.RESUME, OpId(1, 4, 0), stale)[0].value
    'recv_refusal'
    >>> read_reply(Op.RESUME, OpId(1, 4, 0), stale, conflicting=True)[0].value
    'recv_answer'
    """
    if isinstance(result, ErrorReply):
        cause = cause_of_refusal(result.code)
        if cause is Cause.CHECKPOINT_CONFLICT and result.active_id is not None:
            return CallInput.RECV_CONFLICT, CallEvent(cause, result)
        if cause is Cause.STALE_ID and conflicting and op is Op.RESUME:
            return CallInput.RECV_ANSWER, CallEvent(result=result)
        return CallInput.RECV_REFUSAL, CallEvent(cause, result)
    if getattr(result, "op_id", None) != op_id:
        return CallInput.RECV_INVALID, CallEvent(Cause.WRONG_ID, result)
    if not isinstance(result, _EXPECTED[op]):
        return CallInput.RECV_INVALID, CallEvent(Cause.MALFORMED_REPLY, result)
    if isinstance(result, PrepareReply) and result.status == "not_ready":
        return CallInput.RECV_NOT_READY, CallEvent(Cause.NOT_READY_UNTIL_DEADLINE, result)
    if isinstance(result, CommitReply) and result.status != "committed":
        return CallInput.RECV_INVALID, CallEvent(Cause.COMMIT_FAILED, result)
    return CallInput.RECV_ANSWER, CallEvent(result=result)


class PhaseOwner(Protocol):
    """Who runs a phase and what its calls mean: M1's attempt or M9's restore."""

    def progress(self) -> PhaseCalls | None:
        """The phase in progress, if any."""
        ...

    def save(self, calls: PhaseCalls | None) -> None:
        """Keep `calls` as the phase in progress."""
        ...

    def targets(self, slot: Slot) -> frozenset[CallKey]:
        """The calls one slot of the phase makes (empty: the slot is skipped)."""
        ...

    def plan(self, phase: Phase, key: CallKey) -> CallData:
        """A new call's deadline and retry budget."""
        ...

    def payload(self, phase: Phase, key: CallKey) -> Any:
        """What the call carries besides its op and id."""
        ...

    def mark_attempted(self, key: CallKey) -> None:
        """The participant may hold the call's id from now on (S6)."""
        ...

    def record_answer(self, key: CallKey, result: Any) -> None:
        """The call got the reply its phase waits for."""
        ...

    def note_conflict(self, key: CallKey, active_id: OpId) -> None:
        """The participant is fenced to `active_id`, another id (S5)."""
        ...

    def call_failed(self, key: CallKey, cause: Cause, *, refused: bool) -> None:
        """The call settled without an answer (`refused`: the participant changed nothing)."""
        ...

    def role_settled(self, failed: frozenset[CallKey]) -> bool:
        """Every call of the role settled (`failed`: those not answered); True moves on."""
        ...

    def phase_done(self) -> None:
        """Every slot of the phase answered."""
        ...


class PhaseRunner:
    """The calls of one owner's phases, within one coordinator step."""

    def __init__(self, host: StepHost, owner: PhaseOwner) -> None:
        self.h = host
        self.owner = owner

    # ------------------------------------------------------------------ the phase

    def start(self, phase: Phase) -> None:
        """Call `phase` from its first slot. A phase started again (a retried abort or
        release) keeps the calls already answered; the calls of a phase it replaces that
        were backing off forget their timers."""
        current = self.owner.progress()
        if current is not None:
            for name, op_id in sorted(current.keys(CallState.BACKING_OFF)):
                self.h.emit(CancelTimer(call_retry_timer(op_id, name)))
        again = current is not None and current.phase is phase
        self.owner.save(current.restarted() if again and current is not None else PhaseCalls(phase))
        self.call_role()

    def call_role(self) -> None:
        """Send every call of the next slot that has someone to call, or end the phase."""
        calls = self.current()
        slots = self.h.policy.phase_order[calls.phase]
        answered = calls.keys(CallState.ANSWERED)
        role = calls.role
        while role < len(slots):
            keys = sorted(self.owner.targets(slots[role]) - answered)
            if keys:
                self.owner.save(replace(calls, role=role))
                self.send_new(keys)
                return
            role += 1
        self.owner.save(replace(calls, role=role))
        self.owner.phase_done()

    def send_new(self, keys: Iterable[CallKey]) -> None:
        """Send `keys` as new calls of the phase (a call sent before starts over)."""
        for key in keys:
            phase = self.current().phase
            self._save_call(key, self.h.call_table.start())
            self._step(key, CallInput.SEND, self.owner.plan(phase, key))

    def current(self) -> PhaseCalls:
        """The phase in progress (the runner is only asked to work on one)."""
        calls = self.owner.progress()
        assert calls is not None, "no phase in progress"
        return calls

    def in_flight(self) -> frozenset[CallKey]:
        """The calls not settled yet."""
        calls = self.owner.progress()
        return frozenset() if calls is None else calls.keys(*_IN_FLIGHT)

    def answered(self) -> frozenset[CallKey]:
        """The calls answered."""
        calls = self.owner.progress()
        return frozenset() if calls is None else calls.keys(CallState.ANSWERED)

    def calling(self, role: Role | None) -> bool:
        """Is the phase calling `role`'s slot now?"""
        calls = self.owner.progress()
        if calls is None or role is None:
            return False
        slots = self.h.policy.phase_order[calls.phase]
        return calls.role < len(slots) and slots[calls.role].role is role

    def unanswered(self) -> frozenset[CallKey]:
        """The calls settled without an answer."""
        calls = self.owner.progress()
        return frozenset() if calls is None else calls.keys(*_UNANSWERED)

    # ------------------------------------------------------------------ inputs

    def on_reply(self, participant: str, op: Op, op_id: OpId | None, result: Any) -> None:
        """`participant` answered the call `(op, op_id)`."""
        key = self._known(participant, op, op_id, "stale_reply")
        if key is None:
            return
        if self._step(key, *read_reply(op, key[1], result, conflicting=self._conflicting())):
            self._settle_role()

    def on_failure(self, participant: str, op: Op, op_id: OpId | None, cause: Cause) -> None:
        """The call `(op, op_id)` to `participant` got no usable answer."""
        key = self._known(participant, op, op_id, "stale_call_failure")
        if key is None:
            return
        value = self.current().get(key)
        assert value is not None
        retry_at = self.h.now + backoff_s(
            self.h.config, key[1], participant, value.data.retries + 1
        )
        if self._step(key, CallInput.CALL_FAILED, CallEvent(cause, retry_at=retry_at)):
            self._settle_role()

    def ask_again(self) -> None:
        """The prepare retry timer fired: ask every not-ready participant again (S10)."""
        calls = self.owner.progress()
        if calls is not None:
            for key in sorted(calls.keys(CallState.NOT_READY)):
                self._step(key, CallInput.ASK_AGAIN, None)

    def on_retry_due(self, timer: TimerKey) -> None:
        """A call's backoff ended: send it again."""
        calls = self.owner.progress()
        keys = () if calls is None else (k for k, _ in calls.calls)
        key = next((k for k in keys if call_retry_timer(k[1], k[0]) == timer), None)
        if key is None:
            self.h.log("stale_timer", timer=str(timer))
        else:
            self._step(key, CallInput.RETRY_DUE, None)

    # ------------------------------------------------------------------ internals

    def _known(self, participant: str, op: Op, op_id: OpId | None, stale: str) -> CallKey | None:
        calls = self.owner.progress()
        if op_id is not None and calls is not None and PHASE_OPS[calls.phase] is op:
            key = (participant, op_id)
            if calls.get(key) is not None:
                return key
        self.h.log(stale, participant=participant, op=op.value)
        return None

    def _conflicting(self) -> bool:
        # Does the slot being called resume conflicting ids? (A call in flight is always
        # one of that slot's: the next slot is called once every call of this one settled.)
        calls = self.current()
        slots = self.h.policy.phase_order[calls.phase]
        return calls.role < len(slots) and slots[calls.role].conflicting

    def _save_call(self, key: CallKey, value: Any) -> None:
        self.owner.save(self.current().with_call(key, value))

    def _step(self, key: CallKey, input: CallInput, arg: Any) -> bool:
        """Feed one call its input and do the named work; True if that settled the call."""
        value = self.current().get(key)
        assert value is not None
        after, named = self.h.call_table.step(value, input, arg)
        self._save_call(key, after)
        for effect in named:
            if isinstance(effect, Effect):
                CALL_WORK[effect.name](self, key, input, arg)
            else:  # a derived table may bind its own effect values
                self.h.emit(effect)
        return value.state in _IN_FLIGHT and after.state not in _IN_FLIGHT

    def _settle_role(self) -> None:
        calls = self.owner.progress()
        if calls is None or calls.role >= len(self.h.policy.phase_order[calls.phase]):
            return  # the phase ended (or was replaced by one already done) inside the work
        if calls.keys(*_IN_FLIGHT):
            return
        if self.owner.role_settled(calls.keys(*_UNANSWERED)):
            self.owner.save(replace(self.current(), role=calls.role + 1))
            self.call_role()


# ============================================================================ named work
#
# One function per effect name of CALL's rows: `(runner, call, input, its argument)`.


def _w_mark_attempted(run: PhaseRunner, key: CallKey, _input: CallInput, _arg: Any) -> None:
    run.owner.mark_attempted(key)


def _w_send_call(run: PhaseRunner, key: CallKey, _input: CallInput, _arg: Any) -> None:
    calls = run.current()
    value = calls.get(key)
    assert value is not None
    name, op_id = key
    sent_as = run.h.policy.retry_op_id(op_id, value.data.retries)  # §4: the same id
    payload = run.owner.payload(calls.phase, key)
    deadline = try_deadline(run.h.config, run.h.now, value.data)
    run.h.emit(Call(name, PHASE_OPS[calls.phase], sent_as, deadline, payload))


def _w_record_answer(run: PhaseRunner, key: CallKey, _input: CallInput, event: CallEvent) -> None:
    run.owner.record_answer(key, event.result)


def _w_retry_not_ready(run: PhaseRunner, key: CallKey, _input: CallInput, _arg: Any) -> None:
    # One timer for the whole prepare: every not-ready participant is asked again at once.
    at = run.h.now + run.h.config.prepare_retry_interval_s
    run.h.emit(ArmTimer(prepare_retry_timer(key[1]), at))


def _w_abort_conflict(run: PhaseRunner, key: CallKey, _input: CallInput, event: CallEvent) -> None:
    run.owner.note_conflict(key, event.result.active_id)
    _w_refuse_call(run, key, _input, event)


def _w_refuse_call(run: PhaseRunner, key: CallKey, _input: CallInput, event: CallEvent) -> None:
    assert event.cause is not None
    run.owner.call_failed(key, event.cause, refused=True)


def _w_fail_call(run: PhaseRunner, key: CallKey, _input: CallInput, event: CallEvent) -> None:
    assert event.cause is not None
    run.owner.call_failed(key, event.cause, refused=False)


def _w_back_off(run: PhaseRunner, key: CallKey, _input: CallInput, event: CallEvent) -> None:
    # Every retry is armed, logged and counted (§4).
    calls = run.current()
    value = calls.get(key)
    assert value is not None and event.cause is not None
    name, op_id = key
    op = PHASE_OPS[calls.phase]
    run.h.emit(ArmTimer(call_retry_timer(op_id, name), event.retry_at))
    run.h.log(
        "call_retried",
        level="warning",
        participant=name,
        op=op.value,
        op_id=str(op_id),
        cause=event.cause.value,
        retry=value.data.retries,
        retry_at=event.retry_at,
    )
    tags = (("cause", event.cause.value), ("op", op.value), ("participant", name))
    run.h.emit(Metric("call_retries", 1.0, tags))


_STALE = {CallInput.CALL_FAILED: "stale_call_failure", CallInput.RETRY_DUE: "stale_timer"}


def _w_drop_stale(run: PhaseRunner, key: CallKey, input: CallInput, _arg: Any) -> None:
    name, op_id = key
    op = PHASE_OPS[run.current().phase]
    run.h.log(_STALE.get(input, "stale_reply"), participant=name, op=op.value, op_id=str(op_id))


CALL_WORK: Mapping[str, Callable[[PhaseRunner, CallKey, CallInput, Any], None]] = work(
    CALL,
    {
        "mark_attempted": _w_mark_attempted,
        "send_call": _w_send_call,
        "record_answer": _w_record_answer,
        "retry_not_ready": _w_retry_not_ready,
        "abort_conflict": _w_abort_conflict,
        "refuse_call": _w_refuse_call,
        "fail_call": _w_fail_call,
        "back_off": _w_back_off,
        "drop_stale": _w_drop_stale,
    },
    level="coordinator",
)
"""The work each effect name of the `call` table stands for (every name of its rows)."""
