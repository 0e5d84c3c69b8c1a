"""The table instances a model composes, and where each one is along a path.

A model names its table instances (`Model.tables()`: `tm`, `rm1`, `control_fence[policy]`),
tells what a trace does to each (`Model.project`) and which `Table` each steps
(`Model.table_of`), but not an instance's control state in a given model state. That, and
the rest, is read here through the public API:

- the table of an instance: `Model.table_of` (the model's own, possibly mutated, tables),
  else the protocol's table of the instance's base name (`control_fence[policy]` ->
  `control_fence`);
- the rows a step fires: the projection of the one-step trace, matched against the rows;
- the control states: where the projection moved an instance, else what the model shows
  (`describe_state` of the first two, `DesignModel.control`; their initial state is
  already past some steps: the protocol model opens its prompt group before the search
  starts). The protocol's description drops a retired execution, so a final control state
  is kept while the instance is absent from it; an absent one that was not final is gone
  (lost in a crash). A model neither reads starts at its tables' initial states.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from quiesce.check import Action, Model, Step, Trace, TwoPhase
from quiesce.fsm import Table, label
from quiesce.models import DesignModel, ProtocolModel
from quiesce.protocol.machines import TABLES

__all__ = ["Fired", "TableInstance", "controls", "fired", "shown_name", "table_instances"]


@dataclass(frozen=True, slots=True)
class TableInstance:
    """One instance of a table in a model: `name` (`rm1`) and the `table` it steps."""

    name: str
    table: Table[Any, Any]


@dataclass(frozen=True, slots=True)
class Fired:
    """What one model step did to one table instance: the rows it fired (indices into
    `table.rows`, every row matching a projected step) and the control state it left."""

    rows: tuple[int, ...]
    target: str


def table_instances(model: Model[Any]) -> tuple[TableInstance, ...]:
    """The instances of `model` whose table is known, in the model's order."""
    tables = ((name, _table_of(model, name)) for name in model.tables())
    return tuple(TableInstance(name, table) for name, table in tables if table is not None)


def shown_name(model: Model[Any], instance: str) -> str:
    """The name the page gives `instance`: for an agent execution, the one the model's own
    action labels use, so one execution has one name on the page. The design model says
    `s1#0 ends turn 1` of `agent_execution[g0-1#0]` (its one group is implicit), the
    protocol model `turn g0/1#0 ends turn 1`; any other instance keeps its name.

    >>> from quiesce.check import build_model
    >>> shown_name(build_model("design"), "agent_execution[g0-1#0]")
    's1#0'
    """
    base, _, key = instance.partition("[")
    if base != "agent_execution" or not key.endswith("]"):
        return instance
    rollout, _, attempt = key[:-1].rpartition("#")
    group, _, sibling = rollout.rpartition("-")
    if isinstance(model, DesignModel):
        return f"s{sibling}#{attempt}"
    if isinstance(model, ProtocolModel):
        return f"{group}/{sibling}#{attempt}"
    return instance


def controls(
    model: Model[Any],
    state: Any,
    instances: Sequence[TableInstance],
    step: tuple[Mapping[str, str | None], Mapping[str, Fired]] | None = None,
) -> dict[str, str | None]:
    """The control state of every instance in model `state` (`None`: the instance does not
    exist, e.g. an attempt not started yet, or lost with its participant's crash).

    `step` is `(controls before, fired)` when `state` was reached by a step, `None` for an
    initial state. An instance the step moved is where the projection says; any other is
    where the model's description says, else (no description of it) where it was if that
    was a final state (a retired execution stays retired), else nowhere.
    """
    read = _read_controls(model, state, instances)
    if step is None:
        return read if read is not None else {i.name: label(i.table.initial) for i in instances}
    before, moved = step
    now: dict[str, str | None] = {}
    for instance in instances:
        name = instance.name
        if name in moved:
            now[name] = moved[name].target
        elif read is None:
            now[name] = before[name]
        elif read[name] is not None:
            now[name] = read[name]
        else:
            finals = {label(s) for s in instance.table.finals}
            now[name] = before[name] if before[name] in finals else None
    return now


def _read_controls(
    model: Model[Any], state: Any, instances: Sequence[TableInstance]
) -> dict[str, str | None] | None:
    """The control states the model's `describe_state` shows (`None`: a model it cannot
    read)."""
    described = model.describe_state(state)
    if isinstance(model, TwoPhase):
        return {
            i.name: described["tmState"] if i.name == "tm" else described["rmState"][i.name]
            for i in instances
        }
    if isinstance(model, ProtocolModel):
        return {i.name: _protocol_control(described, i.name) for i in instances}
    if isinstance(model, DesignModel):
        return {i.name: model.control(state, i.name) for i in instances}
    return None


def fired(
    model: Model[Any],
    before: Any,
    action: Action,
    after: Any,
    instances: Sequence[TableInstance],
) -> dict[str, Fired]:
    """The instances the step `before --action--> after` moved, with the rows it fired."""
    step = Trace(before, (Step(action, after),))
    moved: dict[str, Fired] = {}
    for instance in instances:
        projected = model.project(step, instance.name)
        if not projected:
            continue
        rows = tuple(
            dict.fromkeys(
                index
                for one in projected
                for index, row in enumerate(instance.table.rows)
                if _matches(row, one)
            )
        )
        moved[instance.name] = Fired(rows, projected[-1]["target"])
    return moved


def _matches(row: Any, step: Mapping[str, str]) -> bool:
    if label(row.input) != step["input"]:
        return False
    return any(
        label(source) == step["state"] and label(row.target or source) == step["target"]
        for source in row.sources
    )


def _table_of(model: Model[Any], instance: str) -> Table[Any, Any] | None:
    return model.table_of(instance) or TABLES.get(instance.partition("[")[0])


def _protocol_control(described: Mapping[str, Any], instance: str) -> str | None:
    """An instance's control state read from `ProtocolModel.describe_state`."""
    base, _, key = instance.partition("[")
    key = key.rstrip("]")
    if base == "checkpoint":
        return str(described["checkpoint"])
    if base == "admission_gate":
        # The description keeps the holders; the gate is closed exactly while one holds.
        return "closed" if described["admission_gate"] else "open"
    if base == "deadline_registry":
        return str(described["deadline_registry"][0])
    if base == "control_fence":
        return str(described["fences"][key][0])
    # agent_execution[g0-1#0] is the execution of rollout g0/1, attempt 0.
    group, _, rest = key.partition("-")
    execution = described["executions"].get(f"{group}/{rest}")
    return None if execution is None else str(execution[0])
