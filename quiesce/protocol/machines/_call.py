"""The per-call lifecycle (`call`): what became of one control call the controller sent.

What lives here: the states of one call, from sent to settled; the rows that decide a
reply, a failure and a retry; and `TRANSIENT_CAUSES`, the causes a call is retried for
inside an attempt (PROTOCOL.md §4, amended). Each row *names* the work it starts
(`mark_attempted`, `record_answer`, `retry_not_ready`, `abort_conflict`, `back_off`, ...);
the controller's phase runner does exactly that work and nothing else, so dropping a name
from a row really stops the work (the mutants rely on it). What it does not know: roles,
phases, which op or id the call carries, how a reply is parsed, or what a settled call
means for its phase (M1 fails the attempt at the first failed call; M9 judges a role once
every call of it settled).

    queued --SEND / mark_attempted, send_call--> waiting
    waiting --RECV_ANSWER / record_answer--> answered
    waiting --RECV_NOT_READY / retry_not_ready--> not_ready --ASK_AGAIN / send_call--> waiting
    waiting --RECV_CONFLICT / abort_conflict--> refused
    waiting --RECV_REFUSAL / refuse_call--> refused
    waiting --RECV_INVALID / fail_call--> failed
    waiting --CALL_FAILED [may_retry] / back_off--> backing_off --RETRY_DUE / send_call--> waiting
    waiting --CALL_FAILED / fail_call--> failed
    answered, refused, failed: a late reply, failure or timer holds / drop_stale

Rules encoded in the rows:
- the participant is marked attempted *before* the call goes out (S6): if the request is
  applied and its reply lost, the participant is still aborted;
- a retry sends the *same* call again, with the same op id: safe because the fence records
  outcomes (M2). It happens only for a transient cause, while the call's retry budget
  lasts and when the backoff ends before the call's deadline (`may_retry`); any other
  failure, and every refusal, settles the call at once;
- a `not_ready` prepare is asked again when the prepare's retry timer fires (S10); that is
  not a retry and spends no budget (the prepare deadline bounds it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

from quiesce.fsm import Table, Value, on
from quiesce.protocol._causes import Cause

__all__ = [
    "ARG_EXAMPLES",
    "CALL",
    "TRANSIENT_CAUSES",
    "CallData",
    "CallEvent",
    "CallInput",
    "CallState",
]


class CallState(Enum):
    QUEUED = "queued"  # decided, not sent yet
    WAITING = "waiting"  # sent, no reply yet
    NOT_READY = "not_ready"  # a prepare answered not_ready: asked again by the retry timer
    BACKING_OFF = "backing_off"  # failed transiently: sent again when its backoff ends
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
    RETRY_DUE = "retry_due"  # the call's backoff timer fired


# ----------------------------------------------------------------------------- the rows

_S = CallState
_I = CallInput

_OPEN = (_S.WAITING, _S.NOT_READY, _S.BACKING_OFF)  # a reply to the same id still counts
_SETTLED = (_S.ANSWERED, _S.REFUSED, _S.FAILED)
_REPLIES = (_I.RECV_ANSWER, _I.RECV_NOT_READY, _I.RECV_CONFLICT, _I.RECV_REFUSAL, _I.RECV_INVALID)

# fmt: off
# ruff: disable[E501] one row per line: the table reads across
_ROWS = (
    # --- out: marked attempted first (S6).
    on(_S.QUEUED, _I.SEND, _S.WAITING, update="launch", effects=("mark_attempted", "send_call")),
    # --- a reply settles the call (or asks for patience).
    on(_OPEN, _I.RECV_ANSWER, _S.ANSWERED, effects="record_answer"),
    on(_OPEN, _I.RECV_NOT_READY, _S.NOT_READY, effects="retry_not_ready"),
    on(_OPEN, _I.RECV_CONFLICT, _S.REFUSED, effects="abort_conflict"),
    on(_OPEN, _I.RECV_REFUSAL, _S.REFUSED, effects="refuse_call"),
    on(_OPEN, _I.RECV_INVALID, _S.FAILED, effects="fail_call"),
    # --- no usable answer: the same call again after a backoff, or settled as failed.
    on(_S.WAITING, _I.CALL_FAILED, _S.BACKING_OFF, guard="may_retry", update="count_retry", effects="back_off"),
    on((_S.WAITING, _S.NOT_READY), _I.CALL_FAILED, _S.FAILED, effects="fail_call"),
    on(_S.NOT_READY, _I.ASK_AGAIN, _S.WAITING, effects="send_call"),
    on(_S.BACKING_OFF, _I.RETRY_DUE, _S.WAITING, effects="send_call"),
    # --- late news about a call already settled (or a timer it outran) changes nothing.
    *(on(_SETTLED, i, None, effects="drop_stale") for i in _REPLIES),
    on((_S.BACKING_OFF, *_SETTLED), _I.CALL_FAILED, None, effects="drop_stale"),
    on((_S.WAITING, _S.NOT_READY, *_SETTLED), _I.RETRY_DUE, None, effects="drop_stale"),
)
# ruff: enable[E501]
# fmt: on


TRANSIENT_CAUSES = frozenset(
    {Cause.TIMEOUT, Cause.REQUEST_LOST, Cause.REPLY_LOST, Cause.IO_ERROR, Cause.PARTICIPANT_ERROR}
)
"""§4 (amended): the causes a call is retried for inside an attempt. Never
`checkpoint_conflict`, `participant_restarted`, `artifact_mismatch`, `invariant_error` or a
skip: those settle the call."""


@dataclass(frozen=True, slots=True)
class CallData:
    """One call: the deadline it must not outlive (I6), its retry budget, the retries used.
    SEND's argument sets the first two; each retry counts one."""

    deadline_at: float = float("inf")
    budget: int = 0
    retries: int = 0


@dataclass(frozen=True, slots=True)
class CallEvent:
    """What came back for a call: the failure it stands for (`cause`, None for a good
    answer), the reply itself (`result`, None for a transport failure) and, for a failure,
    when a retry would be sent (`retry_at`, computed by the runner from the backoff)."""

    cause: Cause | None = None
    result: Any = None
    retry_at: float = float("inf")


# ----------------------------------------------------------------------------- guards


def _may_retry(value: Value[Any, CallData], event: CallEvent) -> bool:
    # A transient cause, budget left, and the retry goes out before the deadline (§4).
    data = value.data
    return (
        event.cause in TRANSIENT_CAUSES
        and data.retries < data.budget
        and event.retry_at < data.deadline_at
    )


# ----------------------------------------------------------------------------- updates


def _launch(_data: CallData, planned: CallData) -> CallData:
    return planned


def _count_retry(data: CallData, _event: CallEvent) -> CallData:
    return replace(data, retries=data.retries + 1)


# ----------------------------------------------------------------------------- the table

CALL: Table[CallState, CallInput] = Table(
    "call",
    doc="M1/M9: one control call of a phase, the controller's per-call sub-machine: sent, "
    "then answered, refused or failed; a transient failure is sent again, same id, after a "
    "backoff.",
    states=CallState,
    inputs=CallInput,
    initial=_S.QUEUED,
    initial_data=CallData(),
    finals=_SETTLED,
    rows=_ROWS,
    # The runner sends each call once from `queued`, and asks only not-ready calls again.
    unmapped="forbidden",
    guards={"may_retry": _may_retry},
    updates={"launch": _launch, "count_retry": _count_retry},
    invariants={"retries_within_budget": lambda v: v.data.retries <= v.data.budget},
)
"""`call`. Effects are named, unbound (`quiesce.fsm.Effect`): the controller's phase runner
interprets each name."""


_PLANS = tuple(CallData(deadline_at=10.0, budget=budget) for budget in (0, 1, 2))
_ANSWERS = (CallEvent(), CallEvent(result="reply"))
_REFUSALS = tuple(
    CallEvent(cause) for cause in (Cause.CHECKPOINT_CONFLICT, Cause.STALE_ID, Cause.WRONG_ID)
)
_FAILURES = tuple(
    CallEvent(cause, retry_at=at)
    for cause in (Cause.TIMEOUT, Cause.PARTICIPANT_ERROR, Cause.ARTIFACT_MISMATCH)
    for at in (1.0, 20.0)
)
ARG_EXAMPLES: Mapping[CallInput, tuple[object, ...]] = {
    _I.SEND: _PLANS,
    _I.RECV_ANSWER: _ANSWERS,
    _I.RECV_NOT_READY: (CallEvent(Cause.NOT_READY_UNTIL_DEADLINE),),
    _I.RECV_CONFLICT: _REFUSALS,
    _I.RECV_REFUSAL: _REFUSALS,
    _I.RECV_INVALID: _REFUSALS,
    # Transient and not, each before and after the plans' deadline (10.0).
    _I.CALL_FAILED: _FAILURES,
}
"""Example arguments by input, for the sweeps (`quiesce.check.arg_examples`): the
timers (`ASK_AGAIN`, `RETRY_DUE`) take none."""
