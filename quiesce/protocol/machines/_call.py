"""The per-call lifecycle (`call`): what became of one control call the controller sent.

What lives here: the states of one call, from sent to settled, and the rows that decide a
reply and a failure. Each row *names* the work it starts (`mark_attempted`, `record_answer`,
`retry_not_ready`, `abort_conflict`, `fail_call`, ...); the controller's phase runner does
exactly that work and nothing else, so dropping a name from a row really stops the work
(the mutants rely on it). What it does not know: roles,
phases, which op or id the call carries, how a reply is parsed, or what a settled call
means for its phase (M1 fails the attempt at the first failed call; M9 judges a role once
every call of it settled).

    queued --SEND / mark_attempted, send_call--> waiting
    waiting --RECV_ANSWER / record_answer--> answered
    waiting --RECV_NOT_READY / retry_not_ready--> not_ready --ASK_AGAIN / send_call--> waiting
    waiting --RECV_CONFLICT / abort_conflict--> refused
    waiting --RECV_REFUSAL / refuse_call--> refused
    waiting --RECV_INVALID / fail_call--> failed
    waiting --CALL_FAILED / fail_call--> failed
    answered, refused, failed: a late reply or failure holds / drop_stale

Rules encoded in the rows:
- the participant is marked attempted *before* the call goes out (S6): if the request is
  applied and its reply lost, the participant is still aborted;
- a reply settles the call: answered, refused (the participant changed nothing) or failed
  (it named another id, or was of the wrong kind); so does a failure to get one;
- a `not_ready` prepare is asked again when the prepare's retry timer fires (S10), with the
  same id, until the prepare deadline.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from quiesce.fsm import Table, on
from quiesce.protocol._causes import Cause

__all__ = [
    "ARG_EXAMPLES",
    "CALL",
    "CallData",
    "CallEvent",
    "CallInput",
    "CallState",
]


class CallState(Enum):
    QUEUED = "queued"  # decided, not sent yet
    WAITING = "waiting"  # sent, no reply yet
    NOT_READY = "not_ready"  # a prepare answered not_ready: asked again by the retry timer
    ANSWERED = "answered"  # the reply the phase waits for
    REFUSED = "refused"  # a typed refusal: the participant changed nothing
    FAILED = "failed"  # no usable reply, and no retry left


class CallInput(Enum):
    SEND = "send"  # the runner sends the call (arg: its CallData)
    RECV_ANSWER = "recv_answer"  # the expected reply, naming the call's id (arg: CallEvent)
    RECV_NOT_READY = "recv_not_ready"  # prepare answered not_ready (arg: CallEvent)
    RECV_CONFLICT = "recv_conflict"  # checkpoint_conflict naming the active id (arg: CallEvent)
    RECV_REFUSAL = "recv_refusal"  # any other typed refusal (arg: CallEvent with its cause)
    RECV_INVALID = "recv_invalid"  # wrong id, wrong kind, commit failed (arg: CallEvent)
    CALL_FAILED = "call_failed"  # no usable answer: timeout, lost, 5xx (arg: CallEvent)
    ASK_AGAIN = "ask_again"  # the prepare retry timer fired


@dataclass(frozen=True, slots=True)
class CallData:
    """One call: the deadline it must not outlive (I6). SEND's argument sets it."""

    deadline_at: float = float("inf")


@dataclass(frozen=True, slots=True)
class CallEvent:
    """What came back for a call: the failure it stands for (`cause`, None for a good
    answer) and the reply itself (`result`, None for a transport failure)."""

    cause: Cause | None = None
    result: Any = None


# ----------------------------------------------------------------------------- updates


def _launch(_data: CallData, planned: CallData) -> CallData:
    return planned


# ----------------------------------------------------------------------------- the table

_S = CallState
_I = CallInput

_OPEN = (_S.WAITING, _S.NOT_READY)
_SETTLED = (_S.ANSWERED, _S.REFUSED, _S.FAILED)
_REPLIES = (
    _I.RECV_ANSWER,
    _I.RECV_NOT_READY,
    _I.RECV_CONFLICT,
    _I.RECV_REFUSAL,
    _I.RECV_INVALID,
)

CALL: Table[CallState, CallInput] = Table(
    "call",
    doc="One control call of a phase: sent, then answered, refused or failed.",
    states=CallState,
    inputs=CallInput,
    initial=_S.QUEUED,
    initial_data=CallData(),
    finals=_SETTLED,
    rows=[
        # --- out: marked attempted first (S6).
        on(
            _S.QUEUED, _I.SEND, _S.WAITING, update="launch", effects=("mark_attempted", "send_call")
        ),
        # --- a reply settles the call (or asks for patience).
        on(_OPEN, _I.RECV_ANSWER, _S.ANSWERED, effects="record_answer"),
        on(_OPEN, _I.RECV_NOT_READY, _S.NOT_READY, effects="retry_not_ready"),
        on(_OPEN, _I.RECV_CONFLICT, _S.REFUSED, effects="abort_conflict"),
        on(_OPEN, _I.RECV_REFUSAL, _S.REFUSED, effects="refuse_call"),
        on(_OPEN, _I.RECV_INVALID, _S.FAILED, effects="fail_call"),
        # --- no usable answer.
        on(_OPEN, _I.CALL_FAILED, _S.FAILED, effects="fail_call"),
        on(_S.NOT_READY, _I.ASK_AGAIN, _S.WAITING, effects="send_call"),
        # --- late news about a call already settled changes nothing.
        *(on(_SETTLED, i, None, effects="drop_stale") for i in (*_REPLIES, _I.CALL_FAILED)),
    ],
    # The runner sends each call once from `queued`, and asks only not-ready calls again.
    unmapped="forbidden",
    updates={"launch": _launch},
)
"""`call`. Effects are named, unbound (`quiesce.fsm.Effect`): the controller's phase runner
interprets each name."""


_REFUSALS = tuple(
    CallEvent(cause) for cause in (Cause.CHECKPOINT_CONFLICT, Cause.STALE_ID, Cause.WRONG_ID)
)
ARG_EXAMPLES: Mapping[CallInput, tuple[object, ...]] = {
    _I.SEND: (CallData(deadline_at=10.0), CallData(deadline_at=60.0)),
    _I.RECV_ANSWER: (CallEvent(), CallEvent(result="reply")),
    _I.RECV_NOT_READY: (CallEvent(Cause.NOT_READY_UNTIL_DEADLINE),),
    _I.RECV_CONFLICT: _REFUSALS,
    _I.RECV_REFUSAL: _REFUSALS,
    _I.RECV_INVALID: _REFUSALS,
    _I.CALL_FAILED: tuple(CallEvent(cause) for cause in (Cause.TIMEOUT, Cause.IO_ERROR)),
}
"""Example arguments by input, for the sweeps (`quiesce.models.arg_examples`): the
prepare retry timer (`ASK_AGAIN`) takes none."""
