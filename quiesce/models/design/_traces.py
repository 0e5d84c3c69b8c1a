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
    return project_table(
        trace,
        lambda state: design_control(state_of(state), table),
        SPEC_TABLES[split_instance(table)[0]],
        design_table(tables, table),
    )


def design_control(state: DesignState, table: str) -> str | None:
    """The control state of `table` (one of `design_table_names`) in `state` (None: the
    instance does not exist there, e.g. an attempt not begun yet)."""
    base, key = split_instance(table)
    c, parts = state.controller, state.parts
    if base == "checkpoint":
        return c.m1.state.value
    if base == "admission_gate":
        return c.gate[0].value
    if base == "deadline_registry":
        return c.registry[0].value
    if base == "restore":
        # The design drops M9's value once it reaches `idle` (and has none before a crash).
        return (M9Label.IDLE if c.m9 is None else c.m9[0]).value
    if base == "control_fence":
        return parts.fences[NAMES.index(key)].state.value
    _group, sibling, attempt = execution_key(key)
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


def design_table(tables: DesignTables, table: str) -> Table[Any, Any]:
    """The table `tables` runs for instance `table` (a mutant's variant, or the
    protocol's own)."""
    running: Table[Any, Any] = getattr(tables, _FIELDS[split_instance(table)[0]])
    return running


_FIELDS = {
    "checkpoint": "checkpoint",
    "admission_gate": "gate",
    "deadline_registry": "deadlines",
    "restore": "restore",
    "control_fence": "fence",
    "agent_execution": "execution",
}
"""The `DesignTables` field of each table a design trace projects onto."""
