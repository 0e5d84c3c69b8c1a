"""The traces of the `design` model as steps of the engine's tables.

What lives here: `design_table_names` and `project_design` (a design trace seen by one table
instance, the same instances the `protocol` model projects onto, plus M9 `restore`), so
`quiesce check --trace-out` writes a trace `quiesce diagram TABLE --trace FILE` draws.
What it does not know: how a design state moves (`_design_step`) or how a table's steps
are chained and a mutant's moves marked (`_table_projection`, shared with `protocol`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from quiesce.check import Trace
from quiesce.fsm import Table
from quiesce.models.design._labels import ExecLabel, M9Label
from quiesce.models.design._state import NAMES, DesignParams, DesignState
from quiesce.models.design._tables import GROUP, DesignTables
from quiesce.models.projection import (
    SPEC_TABLES,
    execution_key,
    instance_names,
    project_table,
    split_instance,
)

__all__ = ["design_control", "design_table", "design_table_names", "project_design"]

_CONTROLLER_TABLES = ("checkpoint", "admission_gate", "deadline_registry", "restore")


def design_table_names(p: DesignParams) -> list[str]:
    """The table instances a design trace projects onto: the controller's (M1, M6, M7, M9),
    one fence per participant, one agent execution per attempt number of each sibling.

    Attempt numbers stay below `attempts` (one past it abandons the group), except that
    each fresh start after a controller crash numbers its attempts above every one still
    remembered: a crash costs a fault, so at most `faults` more numbers (`crashes` on).
    """
    fresh_starts = p.faults if p.crashes else 0
    return instance_names(
        _CONTROLLER_TABLES, NAMES, GROUP, p.siblings, range(p.attempts + fresh_starts)
    )


def project_design(
    trace: Trace[Any],
    table: str,
    tables: DesignTables,
    state_of: Callable[[Any], DesignState],
) -> list[dict[str, str]]:
    """`trace` as steps of `table` (one of `design_table_names`), rows the engine accepts;
    a move of a mutant's table the protocol's has no row for carries `"variant"`.
    `state_of` reads the design state out of one of the trace's states."""
    base, key = split_instance(table)
    view = _VIEWS[base]
    return project_table(
        trace,
        lambda state: view(state_of(state), key),
        SPEC_TABLES[base],
        design_table(tables, table),
    )


def design_control(state: DesignState, table: str) -> str | None:
    """The control state of `table` (one of `design_table_names`) in `state` (None: the
    instance does not exist there, e.g. an attempt not begun yet)."""
    base, key = split_instance(table)
    return _VIEWS[base](state, key)


def design_table(tables: DesignTables, table: str) -> Table[Any, Any]:
    """The table `tables` runs for instance `table` (a mutant's variant, or the
    protocol's own)."""
    running: dict[str, Table[Any, Any]] = {
        "checkpoint": tables.checkpoint,
        "admission_gate": tables.gate,
        "deadline_registry": tables.deadlines,
        "restore": tables.restore,
        "control_fence": tables.fence,
        "agent_execution": tables.execution,
    }
    return running[split_instance(table)[0]]


# ------------------------------------------------------------------ views


def _view_checkpoint(state: DesignState, _key: str) -> str | None:
    return state.controller.m1.state.value


def _view_gate(state: DesignState, _key: str) -> str | None:
    return state.controller.gate[0].value


def _view_registry(state: DesignState, _key: str) -> str | None:
    return state.controller.registry[0].value


def _view_restore(state: DesignState, _key: str) -> str | None:
    # The design drops M9's value once it reaches `idle` (and has none before a crash).
    m9 = state.controller.m9
    return (M9Label.IDLE if m9 is None else m9[0]).value


def _view_fence(state: DesignState, key: str) -> str | None:
    return state.parts.fences[NAMES.index(key)].state.value


def _view_execution(state: DesignState, key: str) -> str | None:
    _group, sibling, attempt = execution_key(key)
    parts = state.parts
    for execution in parts.executions:
        if (execution.sibling, execution.attempt) == (sibling, attempt):
            return execution.state.value
    # An ended execution leaves only the agent's refusal key for its rollout: the highest
    # retired attempt and whether that one was ACKed. How an older attempt ended is no
    # longer told, so it shows as nothing (its trace keeps the end it was seen to take).
    highest, acked = parts.refusals[sibling]
    if attempt != highest:
        return None
    return ExecLabel.ACKED.value if acked else ExecLabel.TOMBSTONED.value


_VIEWS: dict[str, Callable[[DesignState, str], str | None]] = {
    "checkpoint": _view_checkpoint,
    "admission_gate": _view_gate,
    "deadline_registry": _view_registry,
    "restore": _view_restore,
    "control_fence": _view_fence,
    "agent_execution": _view_execution,
}
