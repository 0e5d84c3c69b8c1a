"""M8 `prompt_group`: every legal move of one prompt group (G sibling rollouts).

What lives here: the table and its data. What it does not know: attempts, the trainer, time;
the controller's `Ledger` steps this table.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

from quiesce.fsm import Table, Value, each, on

__all__ = ["ARG_EXAMPLES", "PROMPT_GROUP", "GroupData", "GroupInput", "GroupState"]


# ============================================================================== prompt_group
#
#   generating --SIBLING_SEALED [completes_group]--> ready_to_finalize --FINALIZE_BEGIN-->
#      |   ^                                                                finalizing
#      |   |                                                     TRAINER_ACCEPTED |  \ CONTROLLER_
#      |   +---TRAINER_LACKS_GROUP--- finalization_unknown <----------------------+--- RESTARTED
#      |                                   | TRAINER_HAS_GROUP                    v
#      +--RERUN_WHOLE--> abandoned         +-----------------------------> finalized


class GroupState(Enum):
    GENERATING = "generating"
    READY_TO_FINALIZE = "ready_to_finalize"
    FINALIZING = "finalizing"
    FINALIZATION_UNKNOWN = "finalization_unknown"
    FINALIZED = "finalized"
    ABANDONED = "abandoned"


class GroupInput(Enum):
    SIBLING_SEALED = "sibling_sealed"  # one sibling's attempt was sealed (arg: sibling index)
    FINALIZE_BEGIN = "finalize_begin"  # the controller hands the group to the trainer
    TRAINER_ACCEPTED = "trainer_accepted"  # the trainer durably has the group
    CONTROLLER_RESTARTED = "controller_restarted"  # the controller crashed and came back
    TRAINER_HAS_GROUP = "trainer_has_group"  # at restart: the trainer lineage has the group
    TRAINER_LACKS_GROUP = "trainer_lacks_group"  # at restart: it does not
    RERUN_WHOLE = "rerun_whole"  # discard the group (sealed siblings counted), rerun it


@dataclass(frozen=True, slots=True)
class GroupData:
    """G, the sealed sibling indexes, and whether a lost finalization reopened the group."""

    size: int
    sealed: frozenset[int] = frozenset()
    # The group's results left for the trainer, which lacks them after a crash: what the
    # ledger still marks sealed cannot be trusted, so the group is rerun whole.
    reopened: bool = False


# ----------------------------------------------------------------------------- the rows

_S = GroupState
_I = GroupInput

# fmt: off
# ruff: disable[E501] one row per line: the table reads across
_ROWS = (
    on(_S.GENERATING, _I.SIBLING_SEALED, _S.READY_TO_FINALIZE, guard="completes_group", update="add_sealed", effects="group_ready"),
    on(_S.GENERATING, _I.SIBLING_SEALED, None, guard="new_sibling", update="add_sealed"),
    on(_S.READY_TO_FINALIZE, _I.FINALIZE_BEGIN, _S.FINALIZING),
    on(_S.FINALIZING, _I.TRAINER_ACCEPTED, _S.FINALIZED),
    on(_S.FINALIZING, _I.CONTROLLER_RESTARTED, _S.FINALIZATION_UNKNOWN),
    on(_S.FINALIZATION_UNKNOWN, _I.TRAINER_HAS_GROUP, _S.FINALIZED),
    on(_S.FINALIZATION_UNKNOWN, _I.TRAINER_LACKS_GROUP, _S.GENERATING, update="reopen"),
    on(_S.GENERATING, _I.RERUN_WHOLE, _S.ABANDONED, effects="discard_sealed_siblings"),
)
# ruff: enable[E501]
# fmt: on

# A controller restart matters only while finalizing: did the trainer get the group?
_RESTART_CHANGES_NOTHING = (
    GroupState.GENERATING,
    GroupState.READY_TO_FINALIZE,
    GroupState.FINALIZATION_UNKNOWN,  # a second crash before the first was resolved
    GroupState.FINALIZED,
    GroupState.ABANDONED,
)
_IGNORED = each(_RESTART_CHANGES_NOTHING, GroupInput.CONTROLLER_RESTARTED)


# --------------------------------------------------- guards, updates and the invariant


def _new_sibling(value: Value[Any, GroupData], sibling: int) -> bool:
    return 0 <= sibling < value.data.size and sibling not in value.data.sealed


def _completes_group(value: Value[Any, GroupData], sibling: int) -> bool:
    return _new_sibling(value, sibling) and len(value.data.sealed) + 1 == value.data.size


def _add_sealed(data: GroupData, sibling: int) -> GroupData:
    return replace(data, sealed=data.sealed | {sibling})


def _reopen(data: GroupData, _arg: object) -> GroupData:
    return replace(data, reopened=True)


def _group_consistent(value: Value[GroupState, GroupData]) -> bool:
    complete = len(value.data.sealed) == value.data.size
    if value.state is GroupState.GENERATING:
        return not complete or value.data.reopened
    if value.state is GroupState.ABANDONED:
        return True
    return complete


# ----------------------------------------------------------------------------- the table

PROMPT_GROUP: Table[GroupState, GroupInput] = Table(
    "prompt_group",
    doc="M8: the G siblings of one prompt, trained on together.",
    states=GroupState,
    inputs=GroupInput,
    initial=GroupState.GENERATING,
    initial_data=GroupData(size=1),
    finals=(GroupState.FINALIZED, GroupState.ABANDONED),
    rows=_ROWS,
    ignored=_IGNORED,
    unmapped="forbidden",
    guards={"new_sibling": _new_sibling, "completes_group": _completes_group},
    updates={"add_sealed": _add_sealed, "reopen": _reopen},
    invariants={"ready_iff_all_sealed": _group_consistent},
)
"""M8 `prompt_group`: generating -> ready_to_finalize -> finalizing -> finalized."""


ARG_EXAMPLES: Mapping[GroupInput, tuple[object, ...]] = {
    # Sibling indexes, including ones outside any group (-1, and past the size) for the guards.
    GroupInput.SIBLING_SEALED: (-1, 0, 1, 2, 3, 4),
}
"""Example arguments by input, for the sweeps (`quiesce.check.arg_examples`; inputs not named
take none); start values come from `table.start()` (G=1 unless a sweep builds
`GroupData(size=2)`)."""
