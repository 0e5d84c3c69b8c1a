"""M8 `rollout_attempt`: every legal move of one rollout attempt.

What lives here: the table (the source of truth for an attempt's life) and its data. What it
does not know: groups, time, participants; the controller's `Ledger` steps this table.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

from quiesce.fsm import Table, Value, on

__all__ = [
    "ARG_EXAMPLES",
    "DONE_ATTEMPT_STATES",
    "LIVE_ATTEMPT_STATES",
    "ROLLOUT_ATTEMPT",
    "AttemptData",
    "AttemptInput",
    "AttemptState",
]


# ============================================================================ rollout_attempt
#
#   reserved --DISPATCH--> dispatched --ROLLOUT_COMPLETED / owe_ack--> sealed
#      |                       |  \
#      +------ABANDON----------+   +--ATTEMPT_FAILED--> failed
#                  v
#              abandoned
#
#   failed | abandoned: ROLLOUT_COMPLETED (late) owes its ACK and is dropped;
#                       SUPERSEDE [not_superseded] lets exactly one attempt N+1 replace N.
#   sealed | failed | abandoned: ACK_FLUSHED [receipt_matches] clears the owed ACK.


class AttemptState(Enum):
    RESERVED = "reserved"
    DISPATCHED = "dispatched"
    SEALED = "sealed"
    FAILED = "failed"
    ABANDONED = "abandoned"


class AttemptInput(Enum):
    DISPATCH = "dispatch"  # the controller sends the attempt to its agent
    ROLLOUT_COMPLETED = "rollout_completed"  # the agent reports /run finished (arg: receipt)
    ATTEMPT_FAILED = "attempt_failed"  # deadline expired, or the agent restarted
    ABANDON = "abandon"  # replaced: a whole-group rerun, or a restore claimed its continuation
    SUPERSEDE = "supersede"  # a newer attempt of the same rollout is created
    ACK_FLUSHED = "ack_flushed"  # the agent accepted the ACK (arg: receipt)


@dataclass(frozen=True, slots=True)
class AttemptData:
    """The receipt of a completion, whether its ACK is still owed, whether N+1 exists."""

    receipt: str | None = None
    ack_owed: bool = False
    superseded: bool = False


# ----------------------------------------------------------------------------- the rows

_S = AttemptState
_I = AttemptInput
LIVE_ATTEMPT_STATES = (AttemptState.RESERVED, AttemptState.DISPATCHED)
DONE_ATTEMPT_STATES = (AttemptState.FAILED, AttemptState.ABANDONED)

# fmt: off
# ruff: disable[E501] one row per line: the table reads across
_ROWS = (
    # I2: the only way to dispatched is from reserved.
    on(_S.RESERVED, _I.DISPATCH, _S.DISPATCHED),
    on(_S.DISPATCHED, _I.ROLLOUT_COMPLETED, _S.SEALED, update="owe_ack", effects="owe_ack"),
    on(_S.DISPATCHED, _I.ATTEMPT_FAILED, _S.FAILED),
    on(LIVE_ATTEMPT_STATES, _I.ABANDON, _S.ABANDONED),
    on((_S.SEALED, *DONE_ATTEMPT_STATES), _I.ROLLOUT_COMPLETED, None, guard="same_receipt"),
    # A late completion of a retired attempt: ACK it (the agent holds it until then), drop it.
    on(DONE_ATTEMPT_STATES, _I.ROLLOUT_COMPLETED, None, update="owe_ack", effects="drop_late_completion"),
    # Only a failed or abandoned attempt may be replaced, and only once (I2).
    on(DONE_ATTEMPT_STATES, _I.SUPERSEDE, None, guard="not_superseded", update="mark_superseded"),
    on((_S.SEALED, *DONE_ATTEMPT_STATES), _I.ACK_FLUSHED, None, guard="receipt_matches", update="ack_done"),
)
# ruff: enable[E501]
# fmt: on


# ------------------------------------------------------------------ guards and updates


def _same_receipt(value: Value[Any, AttemptData], receipt: str) -> bool:
    # The same completion reported twice (a duplicated reply): nothing to record again.
    return value.data.receipt == receipt


def _receipt_matches(value: Value[Any, AttemptData], receipt: str) -> bool:
    return value.data.ack_owed and value.data.receipt == receipt


def _not_superseded(value: Value[Any, AttemptData], _arg: object) -> bool:
    return not value.data.superseded


def _owe_ack(data: AttemptData, receipt: str) -> AttemptData:
    # Sealing and the ACK obligation are one update: no value has one without the other.
    return replace(data, receipt=receipt, ack_owed=True)


def _ack_done(data: AttemptData, _receipt: str) -> AttemptData:
    return replace(data, ack_owed=False)


def _mark_superseded(data: AttemptData, _arg: object) -> AttemptData:
    return replace(data, superseded=True)


# ----------------------------------------------------------------------------- the table

ROLLOUT_ATTEMPT: Table[AttemptState, AttemptInput] = Table(
    "rollout_attempt",
    doc="M8: one attempt of one rollout; sealing records its ACK obligation atomically.",
    states=AttemptState,
    inputs=AttemptInput,
    initial=AttemptState.RESERVED,
    initial_data=AttemptData(),
    finals=(AttemptState.SEALED, AttemptState.FAILED, AttemptState.ABANDONED),
    rows=_ROWS,
    unmapped="forbidden",
    guards={
        "same_receipt": _same_receipt,
        "receipt_matches": _receipt_matches,
        "not_superseded": _not_superseded,
    },
    updates={"owe_ack": _owe_ack, "ack_done": _ack_done, "mark_superseded": _mark_superseded},
    invariants={
        "owed_ack_has_receipt": lambda v: not v.data.ack_owed or v.data.receipt is not None,
        "sealed_has_receipt": lambda v: (
            v.state is not AttemptState.SEALED or v.data.receipt is not None
        ),
        "only_finished_superseded": lambda v: (
            not v.data.superseded or v.state in DONE_ATTEMPT_STATES
        ),
    },
)
"""M8 `rollout_attempt`: reserved -> dispatched -> sealed | failed; live -> abandoned."""


ARG_EXAMPLES: Mapping[AttemptInput, tuple[object, ...]] = {
    AttemptInput.ROLLOUT_COMPLETED: ("r-1", "r-2"),
    AttemptInput.ACK_FLUSHED: ("r-1", "r-2"),
}
"""Example arguments by input, for the sweeps (`quiesce.check.arg_examples`); the inputs not
named take none."""
