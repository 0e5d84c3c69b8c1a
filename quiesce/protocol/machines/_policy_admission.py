"""M4 policy admission (`policy_admission`): may a generation call start on this policy?

What lives here: the policy server's three states, the number of calls in flight and the
calls waiting (by call id, so the adapter knows whom to release). What it does not know:
the fence (the participant fires `FENCE_PREPARE`/`FENCE_RESUME` when its fence starts a
prepare or retires an op), the agents whose calls these are, or time.

    accepting --FENCE_PREPARE [nothing_in_flight]--> paused
    accepting --FENCE_PREPARE--> draining --CALL_FINISHED [last_call]--> paused
    draining, paused --FENCE_RESUME / release_waiters--> accepting

A call that arrives while not accepting waits as a waiter (`hold_as_waiter`): that is what
makes an agent execution `frozen` (M3). On resume (= abort) every waiter is admitted at
once, in arrival order; `release_waiters` is emitted as a plain `Effect` and the policy
role names the released call ids from the value before the step (the next value has
already admitted them). Auxiliary servers (`instance_role: auxiliary`, a judge, a
simulator) are never fenced: the participant never fires `FENCE_PREPARE` at them, so they
stay `accepting`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from quiesce.fsm import Table, on

__all__ = [
    "ARG_EXAMPLES",
    "POLICY_ADMISSION",
    "AdmissionData",
    "PolicyInput",
    "PolicyState",
]


class PolicyState(Enum):
    ACCEPTING = "accepting"
    DRAINING = "draining"
    PAUSED = "paused"


class PolicyInput(Enum):
    CALL_STARTED = "call_started"  # an agent's generation call arrived (arg: call id)
    CALL_FINISHED = "call_finished"  # an admitted call returned (arg: call id)
    FENCE_PREPARE = "fence_prepare"  # the fence started a prepare (or a restore)
    FENCE_RESUME = "fence_resume"  # the fence retired the op (resume = abort = release)


@dataclass(frozen=True, slots=True)
class AdmissionData:
    """`in_flight`: admitted calls not yet finished; `waiters`: call ids held, in order."""

    in_flight: int = 0
    waiters: tuple[str, ...] = ()


# ----------------------------------------------------------------------------- the rows

S = PolicyState
I = PolicyInput  # noqa: E741  (h2's StreamInputs)

# fmt: off
# ruff: disable[E501] one row per line: the table reads across
_ROWS = (
    on(S.ACCEPTING, I.CALL_STARTED, None, update="admit", effects="admit_call"),
    on((S.DRAINING, S.PAUSED), I.CALL_STARTED, None, update="wait", effects="hold_as_waiter"),
    on(S.ACCEPTING, I.CALL_FINISHED, None, guard="in_flight", update="finish"),
    on(S.DRAINING, I.CALL_FINISHED, S.PAUSED, guard="last_call", update="finish"),
    on(S.DRAINING, I.CALL_FINISHED, None, guard="in_flight", update="finish"),
    on(S.ACCEPTING, I.FENCE_PREPARE, S.PAUSED, guard="nothing_in_flight"),
    on(S.ACCEPTING, I.FENCE_PREPARE, S.DRAINING),
    on((S.DRAINING, S.PAUSED), I.FENCE_PREPARE, None),  # a retried prepare: nothing new
    on((S.DRAINING, S.PAUSED), I.FENCE_RESUME, S.ACCEPTING, update="admit_waiters", effects="release_waiters"),
    on(S.ACCEPTING, I.FENCE_RESUME, None),  # resume of an op that never closed it
)
# ruff: enable[E501]
# fmt: on


# ----------------------------------------------------------------------------- updates


def _admit(data: AdmissionData, call_id: str) -> AdmissionData:
    return AdmissionData(data.in_flight + 1, data.waiters)


def _finish(data: AdmissionData, call_id: str) -> AdmissionData:
    return AdmissionData(data.in_flight - 1, data.waiters)


def _wait(data: AdmissionData, call_id: str) -> AdmissionData:
    return AdmissionData(data.in_flight, (*data.waiters, call_id))


def _admit_waiters(data: AdmissionData, _: Any) -> AdmissionData:
    return AdmissionData(data.in_flight + len(data.waiters), ())


# ----------------------------------------------------------------------------- the table

POLICY_ADMISSION: Table[PolicyState, PolicyInput] = Table(
    "policy_admission",
    doc="M4: a policy drains its in-flight calls on prepare; new calls wait until resume.",
    states=PolicyState,
    inputs=PolicyInput,
    initial=S.ACCEPTING,
    initial_data=AdmissionData(),
    unmapped="forbidden",
    rows=_ROWS,
    guards={
        "in_flight": lambda v, _: v.data.in_flight > 0,
        "last_call": lambda v, _: v.data.in_flight == 1,
        "nothing_in_flight": lambda v, _: v.data.in_flight == 0,
    },
    updates={
        "admit": _admit,
        "finish": _finish,
        "wait": _wait,
        "admit_waiters": _admit_waiters,
    },
    invariants={
        "paused_means_drained": lambda v: v.state is not S.PAUSED or v.data.in_flight == 0,
        "waiters_only_while_closed": lambda v: v.state is not S.ACCEPTING or not v.data.waiters,
        "in_flight_non_negative": lambda v: v.data.in_flight >= 0,
    },
)

ARG_EXAMPLES: Mapping[PolicyInput, tuple[object, ...]] = {
    I.CALL_STARTED: ("call-1", "call-2"),
    I.CALL_FINISHED: ("call-1", "call-2"),
}
"""Example arguments by input, for the sweeps (`quiesce.check.arg_examples`): call ids for
call inputs; fence inputs take none."""
