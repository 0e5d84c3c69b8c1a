"""M3 agent execution (`agent_execution`, one per rollout attempt on an agent).

What lives here: the life of one `(rollout_id, attempt)` on an agent server, from `begin`
to its end (`acked` or `tombstoned`), and the data that travels with it (its group, how
many turns, the last durable turn, whether a saved turn depends on a `restart_only`
resource, and once finished its exact receipt and result). What it does not know: the
other executions, the fence, or the refusal keys. The agent role (`_agent_role.py`) looks
those up and passes the facts in as the argument of `BEGIN` (`Admission`) and of
`POLICY_RESUMED` (whether the fence is idle).

    new --BEGIN--> running --FENCE_PREPARE--> park_requested --TURN_BOUNDARY--> parked
                    |  ^                          |                                  |
   POLICY_CALL_HELD |  | POLICY_RESUMED           +------- FENCE_RESUME -------------+
                    v  |                                   (-> running)
                   frozen
    running, park_requested --RUN_FINISHED--> completed --RECV_ACK [exact_receipt]--> acked
    new, running, park_requested, parked, frozen --RETIRE--> tombstoned
    completed --RETIRE--> (holds, answers completed_unacknowledged)

Added state: `new` is the spec's "(new)" pseudo-state, so `begin` and its three refusals
are rows like any other (the execution value is created in `new` with its key, then
`BEGIN` fires). `new --RETIRE--> tombstoned` lets a retire that overtakes its `begin`
tombstone the key, so the late `begin` is refused `stale_attempt`.

One refinement of the spec: `frozen --POLICY_RESUMED-->` goes to `park_requested` while
the agent's own fence is still closed (the policy resumes before the agents, §3), so the
turn it finishes ends parked and "ready iff nothing running" stays true.

Refusals (`begin` on a closed fence, a retired key, a live key) and non-releasing answers
(`retire` of a completed result) are rows that hold and emit a named effect; everything
no row maps is refused (`unmapped="forbidden"`): e.g. a finish reported for a parked
execution is a local bug.

Every effect name is bound to the `ExecAnswer` it stands for, so the step returns typed
answers (the wire's refusal codes and retire outcomes are their values): the agent role
and the design model read `ExecAnswer.STALE_ATTEMPT`, never the string of a name. The
rows still name their effects, so a mutant that drops one drops its answer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from enum import Enum

from quiesce.fsm import Table, Value, on

__all__ = [
    "AGENT_EXECUTION",
    "ARG_EXAMPLES",
    "Admission",
    "AgentInput",
    "Completion",
    "ExecAnswer",
    "ExecState",
    "ExecutionData",
]


class ExecState(Enum):
    NEW = "new"
    RUNNING = "running"
    PARK_REQUESTED = "park_requested"
    PARKED = "parked"
    FROZEN = "frozen"
    COMPLETED = "completed"
    ACKED = "acked"
    TOMBSTONED = "tombstoned"


class AgentInput(Enum):
    BEGIN = "begin"  # controller: dispatch (rollout_id, attempt) here
    FENCE_PREPARE = "fence_prepare"  # this agent's fence started a prepare
    TURN_BOUNDARY = "turn_boundary"  # the execution ended a turn (its last turn is durable)
    POLICY_CALL_HELD = "policy_call_held"  # the paused policy holds its call as a waiter
    POLICY_RESUMED = "policy_resumed"  # the held call proceeds
    FENCE_RESUME = "fence_resume"  # this agent's fence retired the op (resume/abort)
    RUN_FINISHED = "run_finished"  # the execution's /run returned a result
    RECV_ACK = "recv_ack"  # controller: ACK quoting a receipt
    RETIRE = "retire"  # controller: deadline expired, or replaced on restore


class ExecAnswer(Enum):
    """What a row of M3 answers: the value its effect name is bound to.

    A refusal's value is its wire code (`Refusal.code`), a retire's its `RetireReply`
    outcome; `UNKNOWN_RECEIPT` lists an ACK's receipt in `AckReply.unknown`."""

    STARTED = "started"
    ADMISSION_CLOSED = "admission_closed"  # refusals: `AdmissionClosed.code`, ...
    STALE_ATTEMPT = "stale_attempt"
    DUPLICATE_EXECUTION = "duplicate_execution"
    PARKED = "parked"
    WOKEN = "woken"
    RESULT_HELD = "result_held"  # the result waits for its exact-receipt ACK
    LATE_EVENT_DROPPED = "late_event_dropped"
    LATE_FINISH_DROPPED = "late_finish_dropped"
    RESULT_RELEASED = "result_released"  # ACK: acknowledged
    ALREADY_ACKED = "already_acked"  # ACK: acknowledged again
    UNKNOWN_RECEIPT = "unknown_receipt"  # ACK: listed in `unknown`
    TOMBSTONED = "tombstoned"  # retire outcomes (`RetireReply.outcome`)
    COMPLETED_UNACKNOWLEDGED = "completed_unacknowledged"
    ALREADY_RETIRED = "already_retired"


@dataclass(frozen=True, slots=True)
class ExecutionData:
    """One execution's facts. `turn`: the last durable boundary; `result`: canonical JSON."""

    rollout_id: str
    attempt: int
    group_id: str = ""
    turns: int = 1
    turn: int = 0
    restart_only_dependency: bool = False
    receipt: str = ""
    result: str = ""

    @property
    def key(self) -> tuple[str, int]:
        """`(rollout_id, attempt)`: the identity of the execution."""
        return self.rollout_id, self.attempt


@dataclass(frozen=True, slots=True)
class Admission:
    """The argument of `BEGIN`: is the agent's fence idle, and is the key retired (acked or
    tombstoned: at or below the rollout's refusal key)?"""

    fence_idle: bool = True
    retired: bool = False


@dataclass(frozen=True, slots=True)
class Completion:
    """The argument of `RUN_FINISHED`: the exact receipt and the result (canonical JSON)."""

    receipt: str
    result: str = "{}"


Execution = Value[ExecState, ExecutionData]


# ----------------------------------------------------------------------------- the rows

S = ExecState
I = AgentInput  # noqa: E741  (h2's StreamInputs)
LIVE = (S.RUNNING, S.PARK_REQUESTED, S.PARKED, S.FROZEN)  # can still be tombstoned
WORKING = (S.RUNNING, S.PARK_REQUESTED)  # between boundaries, may finish or call
ENDED = (S.ACKED, S.TOMBSTONED)

# fmt: off
_ROWS = (
    on(S.NEW, I.BEGIN, None, guard="admission_closed", effects="refuse_admission_closed"),
    on(S.NEW, I.BEGIN, None, guard="retired_key", effects="refuse_stale_attempt"),
    on(S.NEW, I.BEGIN, S.RUNNING, effects="start_execution"),
    on((*LIVE, S.COMPLETED), I.BEGIN, None, effects="refuse_duplicate_execution"),
    on(ENDED, I.BEGIN, None, effects="refuse_stale_attempt"),
    # A checkpoint's prepare: a running execution parks at its next boundary.
    on(S.RUNNING, I.FENCE_PREPARE, S.PARK_REQUESTED),
    on((S.PARK_REQUESTED, S.PARKED, S.FROZEN, S.COMPLETED), I.FENCE_PREPARE, None),
    on(S.RUNNING, I.TURN_BOUNDARY, None, update="boundary"),
    on(S.PARK_REQUESTED, I.TURN_BOUNDARY, S.PARKED, update="boundary", effects="parked"),
    on(S.TOMBSTONED, I.TURN_BOUNDARY, None, effects="drop_late_event"),
    # Only a policy call held as a waiter freezes: it sits exactly at its last boundary.
    on(WORKING, I.POLICY_CALL_HELD, S.FROZEN),
    on(S.TOMBSTONED, I.POLICY_CALL_HELD, None, effects="drop_late_event"),
    on(S.FROZEN, I.POLICY_RESUMED, S.PARK_REQUESTED, guard="fence_closed"),
    on(S.FROZEN, I.POLICY_RESUMED, S.RUNNING),
    on(S.TOMBSTONED, I.POLICY_RESUMED, None, effects="drop_late_event"),
    on((S.PARKED, S.PARK_REQUESTED), I.FENCE_RESUME, S.RUNNING, effects="wake"),
    on((S.RUNNING, S.FROZEN, S.COMPLETED), I.FENCE_RESUME, None),
    on(WORKING, I.RUN_FINISHED, S.COMPLETED, update="complete", effects="hold_result"),
    on(S.TOMBSTONED, I.RUN_FINISHED, None, effects="drop_late_finish"),
    on(S.COMPLETED, I.RECV_ACK, S.ACKED, guard="exact_receipt", effects="release_result"),
    on(S.COMPLETED, I.RECV_ACK, None, effects="unknown_receipt"),
    on(S.ACKED, I.RECV_ACK, None, guard="exact_receipt", effects="already_acked"),
    on(S.ACKED, I.RECV_ACK, None, effects="unknown_receipt"),
    on((S.NEW, *LIVE), I.RETIRE, S.TOMBSTONED, effects="tombstone"),
    on(S.COMPLETED, I.RETIRE, None, effects="answer_completed_unacknowledged"),
    on(ENDED, I.RETIRE, None, effects="already_retired"),
)
# fmt: on


# ----------------------------------------------------------------------------- updates


def _boundary(data: ExecutionData, turn: int) -> ExecutionData:
    return replace(data, turn=max(data.turn, turn))


def _complete(data: ExecutionData, done: Completion) -> ExecutionData:
    return replace(data, receipt=done.receipt, result=done.result)


# ----------------------------------------------------------------------------- answers

A = ExecAnswer
# The answer each effect name of the rows is bound to (every name a row emits).
_ANSWERS: Mapping[str, ExecAnswer] = {
    "refuse_admission_closed": A.ADMISSION_CLOSED,
    "refuse_stale_attempt": A.STALE_ATTEMPT,
    "refuse_duplicate_execution": A.DUPLICATE_EXECUTION,
    "start_execution": A.STARTED,
    "parked": A.PARKED,
    "wake": A.WOKEN,
    "hold_result": A.RESULT_HELD,
    "drop_late_event": A.LATE_EVENT_DROPPED,
    "drop_late_finish": A.LATE_FINISH_DROPPED,
    "release_result": A.RESULT_RELEASED,
    "already_acked": A.ALREADY_ACKED,
    "unknown_receipt": A.UNKNOWN_RECEIPT,
    "tombstone": A.TOMBSTONED,
    "answer_completed_unacknowledged": A.COMPLETED_UNACKNOWLEDGED,
    "already_retired": A.ALREADY_RETIRED,
}


def _answer(answer: ExecAnswer) -> Callable[[Execution, object], ExecAnswer]:
    return lambda _value, _arg: answer


# ----------------------------------------------------------------------------- the table

AGENT_EXECUTION: Table[ExecState, AgentInput] = Table(
    "agent_execution",
    doc="M3: one rollout attempt on an agent; only an exact-receipt ACK releases a result.",
    states=ExecState,
    inputs=AgentInput,
    initial=S.NEW,
    initial_data=ExecutionData("", 0),  # the agent role starts each value with its own key
    finals=ENDED,
    unmapped="forbidden",
    rows=_ROWS,
    guards={
        "admission_closed": lambda v, adm: not adm.fence_idle,
        "retired_key": lambda v, adm: adm.retired,
        "fence_closed": lambda v, fence_idle: not fence_idle,
        "exact_receipt": lambda v, receipt: bool(v.data.receipt) and receipt == v.data.receipt,
    },
    updates={"boundary": _boundary, "complete": _complete},
    effects={name: _answer(answer) for name, answer in _ANSWERS.items()},
    invariants={
        "completed_has_receipt": lambda v: (
            v.state not in (S.COMPLETED, S.ACKED) or bool(v.data.receipt)
        ),
        "turn_never_negative": lambda v: v.data.turn >= 0,
    },
)

_RECEIPTS = ("r0#0:abc", "r0#1:def")
ARG_EXAMPLES: Mapping[AgentInput, tuple[object, ...]] = {
    I.BEGIN: tuple(Admission(idle, retired) for idle in (True, False) for retired in (True, False)),
    I.TURN_BOUNDARY: (0, 1, 2, 3),
    I.POLICY_RESUMED: (True, False),
    I.RUN_FINISHED: (Completion(_RECEIPTS[0], '{"reward":1}'), Completion(_RECEIPTS[1], "{}")),
    I.RECV_ACK: (*_RECEIPTS, "wrong"),
}
"""Example arguments by input, for the sweeps (`quiesce.check.arg_examples`): each input
with the argument type it takes; the other inputs take none."""
