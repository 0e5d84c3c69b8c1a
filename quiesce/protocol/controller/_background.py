"""ACK batches and retires: the calls of the controller that belong to no remote phase.

What lives here: `BackgroundCalls`, the work of one coordinator step on the ACK outbox and
on the calls that drain it -- each agent's background ACK batch (sent after every
completion), M1's strict flush (S8: the outbox to every agent owed, under the attempt's id,
which the attempt waits for) -- and on the retires (M3 `retire`: a deadline expired, or a
restore replaced the attempt). What it does not know: the ledger's rules (it asks the
ledger what is owed and tells it what was released), the checkpoint lifecycle beyond
telling M1 that its strict flush ended or failed, or what a retire's late completion
means (its owner, `Rollouts`, is told).

Background calls are calls (PROTOCOL.md §4, amended): each one is a value of the `call`
table, like every call of a phase, and the table's rows decide a reply, a failure and a
retry. A call that fails for a transient cause is sent again with the same identity (the
same execution key; for an ACK batch, its receipts and those owed to that agent meanwhile)
after a backoff with full jitter, each try bounded by the per-try timeout, up to
`call_retries` times and never past its deadline: the strict flush's is
`control_timeout_s` from when it was sent; a background call has none, as no phase waits
for it.

    drain: each agent owed an ACK with no batch in flight -> a batch (SEND)
    flush(X): each agent owed -> a batch under X; every one answered -> ACKS_FLUSHED
    retire(agent, key): a call, unless the same retire is in flight already
    answered -> an ACK: release what it settles (a background batch: send what is owed
                meanwhile); a retire: its late completion to the ledger (S17)
    failed, transient, retry left -> backing off -> RETRY_DUE -> sent again
    failed or refused, a flush's -> the attempt fails (S8: strict)
    failed, a background call's -> kept `failed`: sent again, with a new budget, when
                that agent answers any call (nothing calls an unreachable agent in a loop;
                an ACK's receipts also go with the next batch or the strict flush)
    refused, a background call's -> dropped (the agent changed nothing, and would refuse
                it again)

At most one background batch per agent is in flight: a completion while one is out adds
its receipt to what that batch carries when it is answered or retried.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from types import MappingProxyType
from typing import Any

from quiesce.fsm import Effect, work
from quiesce.protocol._causes import Cause, cause_of_refusal
from quiesce.protocol._ids import OpId, group_of
from quiesce.protocol._messages import AckReply, ErrorReply, Receipt, RetireReply
from quiesce.protocol._timers import ArmTimer, TimerKey, TimerKind
from quiesce.protocol.controller._effects import Call, Metric, Op
from quiesce.protocol.controller._host import StepHost
from quiesce.protocol.controller._inputs import CallFailed, Reply
from quiesce.protocol.controller._ledger import AttemptKey, Ledger, OwedAck, UnknownGroup
from quiesce.protocol.controller._phase_runner import backoff_s, try_deadline
from quiesce.protocol.controller._state import BackgroundCall, BackgroundKey
from quiesce.protocol.machines import (
    CALL,
    CallData,
    CallEvent,
    CallInput,
    CallState,
    CheckpointInput,
)
from quiesce.protocol.machines import CheckpointState as _S

__all__ = ["BackgroundCalls", "agent_of", "background_timer"]

_IN_FLIGHT = (CallState.WAITING, CallState.BACKING_OFF)
_EXPECTED: Mapping[Op, type] = MappingProxyType({Op.ACK: AckReply, Op.RETIRE: RetireReply})
# The metric a background call's retry counts in (docs/metrics.md).
_BACKGROUND_RETRIES = {Op.ACK: "acks.background_retries", Op.RETIRE: "retires.retries"}
_NO_DEADLINE = float("inf")  # no phase waits for a background call: each try is bounded


def background_timer(key: BackgroundKey) -> TimerKey:
    """The timer that sends the call `key` again after its backoff.

    >>> str(background_timer(("agent-0", Op.RETIRE, "g0/1#0")))
    'background_retry:retire g0/1#0/agent-0'
    """
    agent, op, subject = key
    return TimerKey(TimerKind.BACKGROUND_RETRY, f"{op.value} {subject}".rstrip(), agent)


def agent_of(ledger: Ledger, rollout_id: str) -> str | None:
    """The agent that runs `rollout_id`'s group (None: the ledger has no such group)."""
    try:
        return ledger.group(group_of(rollout_id)).environment
    except UnknownGroup:
        return None


def _ack_key(agent: str, flush: OpId | None) -> BackgroundKey:
    # An agent's background batch is about nothing; a flush's is about its attempt.
    return (agent, Op.ACK, "" if flush is None else str(flush))


def _retire_key(agent: str, key: AttemptKey) -> BackgroundKey:
    return (agent, Op.RETIRE, f"{key[0]}#{key[1]}")


def _read(op: Op, result: Any) -> tuple[CallInput, CallEvent]:
    # A typed refusal changed nothing and would be refused again; a reply of the wrong
    # kind is invalid; the expected reply is the answer.
    if isinstance(result, ErrorReply):
        return CallInput.RECV_REFUSAL, CallEvent(cause_of_refusal(result.code), result)
    if not isinstance(result, _EXPECTED[op]):
        return CallInput.RECV_INVALID, CallEvent(Cause.MALFORMED_REPLY, result)
    return CallInput.RECV_ANSWER, CallEvent(result=result)


class BackgroundCalls:
    """The ACK and retire calls' work within one coordinator step (scratch)."""

    def __init__(self, host: StepHost, late_completion: Callable[[Receipt], None]) -> None:
        self.h = host
        # What a retire's answer hands back: a completed execution to seal late (S17).
        self.late_completion = late_completion

    # ------------------------------------------------------------------ sending

    def outbox(self) -> dict[str, tuple[OwedAck, ...]]:
        """The ACK outbox by agent: the ledger's owed ACKs, then the unowned completions."""
        state = self.h.state
        by_agent: dict[str, list[OwedAck]] = {}
        for owed in state.ledger.pending_acks():
            agent = agent_of(state.ledger, owed.rollout_id)
            if agent is not None:
                by_agent.setdefault(agent, []).append(owed)
        for agent, owed in state.unowned_acks:
            by_agent.setdefault(agent, []).append(owed)
        return {agent: tuple(owed) for agent, owed in by_agent.items()}

    def drain(self) -> None:
        """The background drain: a batch to every agent owed an ACK that has none in
        flight (one in flight carries the new receipts when it is answered or retried)."""
        for agent, owed in sorted(self.outbox().items()):
            if not self._in_flight(_ack_key(agent, None)):
                self._start(_ack_key(agent, None), owed, None, _NO_DEADLINE)

    def flush(self, op_id: OpId) -> frozenset[str]:
        """M1's strict flush (S8), or the re-flush inside the cut (S7): the whole outbox to
        every agent owed, under the attempt's id, so only these calls settle it; the agents
        called."""
        outbox = self.outbox()
        deadline = self.h.now + self.h.config.control_timeout_s
        for agent, owed in sorted(outbox.items()):
            self._start(_ack_key(agent, op_id), owed, op_id, deadline)
        return frozenset(outbox)

    def retire(self, agent: str, key: AttemptKey) -> None:
        """Tombstone attempt `key` at `agent` (M3 `retire`; idempotent: an agent that has it
        retired already answers so), unless that retire is in flight already."""
        call = _retire_key(agent, key)
        if not self._in_flight(call):
            self._start(call, key, None, _NO_DEADLINE)

    # ------------------------------------------------------------------ inputs

    def on_reply(self, event: Reply) -> None:
        """An agent answered an ACK batch or a retire."""
        key = self._key_of(event.participant, event.op, event.op_id, event.payload)
        if key is not None:
            self._step(key, *_read(event.op, event.result))
            return
        self.h.log("stale_reply", participant=event.participant, op=event.op.value)
        if isinstance(event.result, AckReply):
            # An answer to a batch no longer in flight still says what the agent released
            # (ACKs are idempotent): out of the outbox, though it settles no call.
            self.release(event.participant, event.result)

    def on_failed(self, event: CallFailed) -> None:
        """An ACK batch or a retire got no usable answer."""
        key = self._key_of(event.participant, event.op, event.op_id, event.payload)
        if key is None:
            self.h.log("stale_call_failure", participant=event.participant, op=event.op.value)
            return
        call = self._get(key)
        assert call is not None
        retry = call.value.data.retries + 1
        wait = backoff_s(self.h.config, call.op_id, str(background_timer(key)), retry)
        failed = CallEvent(event.cause, retry_at=self.h.now + wait)
        self._step(key, CallInput.CALL_FAILED, failed)

    def on_unused(self, event: Reply) -> None:
        """A reply from a restarted agent that the coordinator does not use (S19): the
        call ended all the same (never retried, §4); what it carried is still owed."""
        key = self._key_of(event.participant, event.op, event.op_id, event.payload)
        if key is not None:
            failed = CallEvent(Cause.PARTICIPANT_RESTARTED, event.result)
            self._step(key, CallInput.CALL_FAILED, failed)

    def on_timer(self, timer: TimerKey) -> None:
        """A call's backoff ended: send it again."""
        key = next((k for k, _ in self.h.state.background if background_timer(k) == timer), None)
        if key is None:
            self.h.log("stale_timer", timer=str(timer))
        else:
            self._step(key, CallInput.RETRY_DUE, None)

    def on_answered(self, participant: str) -> None:
        """`participant` answered a call: it is reachable again, so its background calls
        that spent their retries go again, each with a new budget (an ACK batch only if
        anything is still owed to it)."""
        owed = self.outbox().get(participant)
        for key, call in self.h.state.background:
            if key[0] != participant or call.value.state is not CallState.FAILED:
                continue
            if key[1] is Op.RETIRE:
                self._start(key, call.payload, None, _NO_DEADLINE)
            elif owed and not self._in_flight(_ack_key(participant, None)):
                self._start(key, owed, None, _NO_DEADLINE)
            else:
                self._put(key, None)

    # ------------------------------------------------------------------ the strict flush

    def _flush_settled(self, agent: str, op_id: OpId, cause: Cause | None) -> None:
        """The flush's call to `agent` settled: answered (`cause` None) or not."""
        attempt = self.h.state.attempt
        if attempt is None or op_id != attempt.op_id or agent not in attempt.acking:
            return  # an older attempt's flush: it never settles the flush in progress
        self.h.set_attempt(replace(attempt, acking=attempt.acking - {agent}))
        phase = self.h.state.phase
        if phase is _S.FLUSHING_ACKS:
            if cause is not None:
                self.h.fail(cause)  # S8: strict, the attempt fails now, not at the deadline
            elif not self.h.attempt.acking:
                self.h.fire(CheckpointInput.ACKS_FLUSHED)
        elif phase is _S.CAPTURING:
            if cause is not None:
                self.h.fail(Cause.ACKS_PENDING)
            elif not self.h.attempt.acking:
                self.h.capture()

    # ------------------------------------------------------------------ internals

    def release(self, agent: str, reply: AckReply) -> tuple[Receipt, ...]:
        """Take what an ACK answer released out of the outbox; what it released."""
        released = (*reply.acknowledged, *reply.unknown)
        state = self.h.state
        state = replace(state, ledger=state.ledger.ack_flushed(released))
        if state.unowned_acks:
            gone = {(r.rollout_id, r.attempt, r.receipt) for r in released}
            kept = tuple(
                (owner, owed)
                for owner, owed in state.unowned_acks
                if owner != agent or (owed.rollout_id, owed.attempt, owed.receipt) not in gone
            )
            state = replace(state, unowned_acks=kept)
        self.h.state = state
        return released

    def _key_of(
        self, participant: str, op: Op, op_id: OpId | None, payload: Any
    ) -> BackgroundKey | None:
        # An ACK's news is about its agent's batch (or that flush's); a retire's names its
        # attempt key (the call's payload; news without one names no call). News of a call
        # not in flight is stale.
        if op is Op.ACK:
            key = _ack_key(participant, op_id)
        elif isinstance(payload, tuple) and len(payload) == 2:
            key = _retire_key(participant, payload)
        else:
            return None
        return key if self._in_flight(key) else None

    def _in_flight(self, key: BackgroundKey) -> bool:
        call = self._get(key)
        return call is not None and call.value.state in _IN_FLIGHT

    def _get(self, key: BackgroundKey) -> BackgroundCall | None:
        for known, call in self.h.state.background:
            if known == key:
                return call
        return None

    def _put(self, key: BackgroundKey, call: BackgroundCall | None) -> None:
        kept = [(k, c) for k, c in self.h.state.background if k != key]
        if call is not None:
            kept.append((key, call))
        self.h.state = replace(self.h.state, background=tuple(sorted(kept, key=_by_key)))

    def _start(self, key: BackgroundKey, payload: Any, op_id: OpId | None, due: float) -> None:
        plan = CallData(deadline_at=due, budget=self.h.config.call_retries)
        self._put(key, BackgroundCall(self.h.call_table.start(), payload, op_id))
        self._step(key, CallInput.SEND, plan)

    def _step(self, key: BackgroundKey, input: CallInput, arg: Any) -> None:
        """Feed one call its input and do the work its row names."""
        call = self._get(key)
        assert call is not None
        after, named = self.h.call_table.step(call.value, input, arg)
        self._put(key, replace(call, value=after))
        for effect in named:
            if isinstance(effect, Effect):
                BACKGROUND_WORK[effect.name](self, key, input, arg)
            else:  # a derived table may bind its own effect values
                self.h.emit(effect)


def _by_key(item: tuple[BackgroundKey, BackgroundCall]) -> tuple[str, str, str]:
    agent, op, subject = item[0]
    return (agent, op.value, subject)


# ============================================================================ named work
#
# One function per effect name of the `call` table's rows, as the phase runner has, for a
# call of no phase: `(calls, key, input, its argument)`.


def _w_nothing(_calls: BackgroundCalls, _key: BackgroundKey, _input: CallInput, _arg: Any) -> None:
    # Marked attempted: no fence holds an id because of an ACK or a retire.
    return


def _w_send_call(calls: BackgroundCalls, key: BackgroundKey, _input: CallInput, _arg: Any) -> None:
    call = calls._get(key)
    assert call is not None
    agent, op, _ = key
    payload = call.payload
    if op is Op.ACK:
        # A batch carries what is owed now: the receipts it was sent with that are still
        # owed, and every one owed to that agent meanwhile (ACKs are idempotent); if the
        # strict flush released them all meanwhile, the same batch again.
        payload = calls.outbox().get(agent) or call.payload
        calls._put(key, replace(call, payload=payload))
    # One try waits as a phase's would, and never unbounded (I6): a background call has no
    # deadline of its own, so with no retry left its try still ends `control_timeout_s` on.
    config, now = calls.h.config, calls.h.now
    deadline = min(try_deadline(config, now, call.value.data), now + config.control_timeout_s)
    calls.h.emit(Call(agent, op, call.op_id, deadline, payload))


def _w_record_answer(
    calls: BackgroundCalls, key: BackgroundKey, _input: CallInput, event: CallEvent
) -> None:
    call = calls._get(key)
    assert call is not None
    agent, op, _ = key
    calls._put(key, None)
    if op is Op.RETIRE:
        reply: RetireReply = event.result
        if reply.receipt is not None:
            calls.late_completion(reply.receipt)
        return
    released = calls.release(agent, event.result)
    if call.op_id is not None:
        calls._flush_settled(agent, call.op_id, None)
    elif released and (owed := calls.outbox().get(agent)):
        # What was owed meanwhile goes now, as the next batch; an answer that released
        # nothing is not followed at once (that agent would be called in a loop).
        calls._start(key, owed, None, _NO_DEADLINE)


def _w_settled(
    calls: BackgroundCalls, key: BackgroundKey, input: CallInput, event: CallEvent
) -> None:
    # No answer, and no retry left (or refused, or answered with the wrong kind). A flush's
    # call fails its attempt (S8). A background call refused changed nothing and would be
    # refused again: dropped; one that failed is kept, and goes again when its agent next
    # answers (`on_answered`).
    call = calls._get(key)
    assert call is not None and event.cause is not None
    agent, op, subject = key
    calls.h.log(
        "background_call_failed" if call.op_id is None else "ack_failed",
        level="warning",
        participant=agent,
        op=op.value,
        about=subject,
        cause=event.cause.value,
    )
    if call.op_id is not None:
        calls._put(key, None)
        calls._flush_settled(agent, call.op_id, event.cause)
    elif input is not CallInput.CALL_FAILED:
        calls._put(key, None)


def _w_back_off(
    calls: BackgroundCalls, key: BackgroundKey, _input: CallInput, event: CallEvent
) -> None:
    # Every retry is armed, logged and counted (§4), like a phase's.
    call = calls._get(key)
    assert call is not None and event.cause is not None
    agent, op, subject = key
    calls.h.emit(ArmTimer(background_timer(key), event.retry_at))
    calls.h.log(
        "call_retried",
        level="warning",
        participant=agent,
        op=op.value,
        about=subject,
        cause=event.cause.value,
        retry=call.value.data.retries,
        retry_at=event.retry_at,
    )
    if call.op_id is not None:  # the strict flush's: a retry inside the attempt
        tags = (("cause", event.cause.value), ("op", op.value), ("participant", agent))
        calls.h.emit(Metric("call_retries", 1.0, tags))
    else:
        calls.h.emit(
            Metric(
                _BACKGROUND_RETRIES[op],
                1.0,
                (("cause", event.cause.value), ("participant", agent)),
            )
        )


def _w_drop_stale(calls: BackgroundCalls, key: BackgroundKey, _input: CallInput, _arg: Any) -> None:
    calls.h.log("stale_background_news", participant=key[0], op=key[1].value, about=key[2])


BACKGROUND_WORK: Mapping[str, Callable[[BackgroundCalls, BackgroundKey, CallInput, Any], None]] = (
    work(
        CALL,
        {
            "mark_attempted": _w_nothing,
            "send_call": _w_send_call,
            "record_answer": _w_record_answer,
            # An ACK or a retire is never a prepare, nor fenced: the reader gives neither
            # input, so these rows settle the call like any refusal.
            "retry_not_ready": _w_settled,
            "abort_conflict": _w_settled,
            "refuse_call": _w_settled,
            "fail_call": _w_settled,
            "back_off": _w_back_off,
            "drop_stale": _w_drop_stale,
        },
        level="background calls",
    )
)
"""The work each effect name of the `call` table stands for, for an ACK batch or a retire."""
