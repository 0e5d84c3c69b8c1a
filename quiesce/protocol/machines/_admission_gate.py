"""M6 admission gate (`admission_gate`): may new rollouts be dispatched?

What lives here: the gate's two states and the *set* of owners holding it closed (each a
`Holder`: `weight_sync`, `checkpoint`, `train_switch`, `restore`). What it does not know:
why they hold; the coordinator passes the owner as the input's argument.

    +------+  HOLD(o)                      +--------+  HOLD(o) / RELEASE(o), others remain
    | open | ----------------------------> | closed | <-------------------------------+
    +------+ <---------------------------- +--------+ --------------------------------+
               RELEASE(o) [last_holder]

The gate is open iff the holder set is empty. A repeated hold by the same owner is a
no-op (sets dedupe); a release by one owner never reopens what another still holds,
because the row back to `open` is guarded by `last_holder`. Releasing a hold the owner
does not have changes nothing: an owner never releases another owner's hold.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum

from quiesce.fsm import Table, on
from quiesce.protocol.machines._holder_set import Holder, Holders, HolderSet

__all__ = ["ADMISSION_GATE", "ARG_EXAMPLES", "GateInput", "GateState"]


class GateState(Enum):
    OPEN = "open"
    CLOSED = "closed"


class GateInput(Enum):
    HOLD = "hold"  # an owner starts holding admission closed
    RELEASE = "release"  # an owner stops holding


# ----------------------------------------------------------------------------- the rows

_S = GateState
_I = GateInput

# fmt: off
# ruff: disable[E501] one row per line: the table reads across
_ROWS = (
    on(_S.OPEN, _I.HOLD, _S.CLOSED, update="add_holder", effects="close_admission"),
    on(_S.OPEN, _I.RELEASE, None),  # nothing held: a stray release is a no-op
    on(_S.CLOSED, _I.HOLD, None, update="add_holder"),
    on(_S.CLOSED, _I.RELEASE, _S.OPEN, guard="last_holder", update="remove_holder", effects="open_admission"),
    on(_S.CLOSED, _I.RELEASE, None, update="remove_holder"),
)
# ruff: enable[E501]
# fmt: on


# ----------------------------------------------------------------------------- the table

# The gate's data *is* its holder set; the input's argument names the owner.
_OWNERS: HolderSet[Holders] = HolderSet(holders=lambda held: held, replace=lambda _, held: held)

ADMISSION_GATE: Table[GateState, GateInput] = Table(
    "admission_gate",
    doc="M6: admission is open iff no owner holds it.",
    states=GateState,
    inputs=GateInput,
    initial=GateState.OPEN,
    initial_data=frozenset(),
    rows=_ROWS,
    guards={"last_holder": _OWNERS.is_last},
    updates={"add_holder": _OWNERS.add, "remove_holder": _OWNERS.remove},
    invariants={
        "open_iff_no_holder": lambda v: (v.state is GateState.OPEN) == (not _OWNERS.held(v.data)),
    },
)

_OWNER_EXAMPLES = (Holder.CHECKPOINT, Holder.TRAIN_SWITCH, Holder.WEIGHT_SYNC)
ARG_EXAMPLES: Mapping[GateInput, tuple[object, ...]] = {
    GateInput.HOLD: _OWNER_EXAMPLES,
    GateInput.RELEASE: _OWNER_EXAMPLES,
}
"""Example arguments by input, for the sweeps (`quiesce.check.arg_examples`): owners."""
