"""A model's trace seen by one engine table: what every model's projection shares.

What lives here: the names of the table instances a trace projects onto (`instance_names`,
`split_instance`, `execution_key`), the protocol's own table of each (`SPEC_TABLES`), and
`project_table`, which turns the label a model state shows for one instance into rows
`quiesce diagram TABLE --trace FILE` accepts, a mutant's own moves marked `"variant"`.
What it does not know: how a model's state shows a table's label (each model passes a
view: `_protocol_traces` for the implementation, `_design_traces` for the design).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from quiesce.check import Trace
from quiesce.fsm import Table, label
from quiesce.protocol.machines import (
    ADMISSION_GATE,
    AGENT_EXECUTION,
    CHECKPOINT,
    CONTROL_FENCE,
    DEADLINE_REGISTRY,
    RESTORE,
)

__all__ = ["SPEC_TABLES", "execution_key", "instance_names", "project_table", "split_instance"]

St = TypeVar("St")

SPEC_TABLES: Mapping[str, Table[Any, Any]] = {
    "checkpoint": CHECKPOINT,
    "admission_gate": ADMISSION_GATE,
    "deadline_registry": DEADLINE_REGISTRY,
    "control_fence": CONTROL_FENCE,
    "agent_execution": AGENT_EXECUTION,
    "restore": RESTORE,
}
"""The protocol's own table of each projection, by base name."""


def instance_names(
    controller: Iterable[str],
    participants: Iterable[str],
    group: str,
    siblings: int,
    attempts: Iterable[int],
) -> list[str]:
    """The table instances of a model: its `controller` tables, one fence per participant,
    one agent execution per sibling of `group` and attempt number.

    >>> instance_names(["checkpoint"], ["agent"], "g0", 1, range(2))
    ['checkpoint', 'control_fence[agent]', 'agent_execution[g0-0#0]', 'agent_execution[g0-0#1]']
    """
    names = list(controller)
    names += [f"control_fence[{n}]" for n in participants]
    numbers = list(attempts)
    for sibling in range(siblings):
        # `/` would not survive as a file name (`--trace-out`): g0/1#0 is g0-1#0.
        names += [f"agent_execution[{group}-{sibling}#{attempt}]" for attempt in numbers]
    return names


def split_instance(table: str) -> tuple[str, str]:
    """`(base, key)` of an instance name: `control_fence[agent]` is `("control_fence",
    "agent")`, `checkpoint` is `("checkpoint", "")`."""
    base, _, key = table.partition("[")
    return base, key.rstrip("]")


def execution_key(key: str) -> tuple[str, int, int]:
    """`(group, sibling, attempt)` of an agent execution's instance key (`g0-1#0`)."""
    rollout, _, attempt = key.rpartition("#")
    group, _, sibling = rollout.rpartition("-")
    return group, int(sibling), int(attempt)


def project_table(
    trace: Trace[St],
    view: Callable[[St], str | None],
    spec: Table[Any, Any],
    running: Table[Any, Any],
) -> list[dict[str, str]]:
    """`trace` as steps of one table instance, rows the engine accepts.

    `view` shows the instance's state label in a model state (None: the instance does not
    exist there); `spec` is the protocol's table, `running` the one the model runs (a
    mutant's variant, or `spec` itself). A step the variant takes that the protocol's table
    has no row for (the bug itself, often the violating step) carries `"variant": <its
    name>`, so `quiesce diagram` can draw it as a move outside the table instead of
    refusing it. A move no row of either table explains starts a fresh instance.
    """
    steps: list[dict[str, str]] = []
    initial = label(spec.initial)
    for before, _action, after in trace.transitions():
        old, new = view(before), view(after)
        if new is None or old == new:
            continue
        chain = _table_steps(spec, initial if old is None else old, new)
        if not chain and running is not spec:
            chain = _table_steps(running, initial if old is None else old, new)
            for step in chain:
                if not _is_move(spec, step):
                    step["variant"] = str(running.variant)
        if not chain and old is not None:
            # No row leads there: the model replaced the instance by a fresh one (a
            # restarted controller runs M9 again from its initial state), whose steps
            # start over from the table's initial state.
            chain = _table_steps(spec, initial, new)
        steps.extend(chain)
    return steps


def _is_move(table: Table[Any, Any], step: Mapping[str, str]) -> bool:
    """Whether `table` has a row taking `step` (spec names) from its state to its target."""
    return any(
        label(row.input) == step["input"]
        and any(
            label(source) == step["state"] and label(row.target or source) == step["target"]
            for source in row.sources
        )
        for row in table.rows
    )


def _table_steps(found: Table[Any, Any], old: str, new: str) -> list[dict[str, str]]:
    """The table steps of one model step that moved `table` from `old` to `new`.

    One model step may run several transitions of a table at once (a trigger runs
    `idle -> closing_admission -> flushing_acks -> preparing` in one controller step), so
    the steps are the shortest chain of the table's own rows from `old` to `new`; each one
    is a row of the table, so the engine's `--trace` accepts it. No chain: `[]`.
    """
    edges: dict[str, list[tuple[str, str]]] = {}
    for row in found.rows:
        if row.target is None:
            continue
        for source in row.sources:
            edges.setdefault(label(source), []).append((label(row.input), label(row.target)))
    previous: dict[str, tuple[str, str]] = {}
    frontier = [old]
    seen = {old}
    while frontier and new not in seen:
        following = []
        for here in frontier:
            for name, target in edges.get(here, ()):
                if target not in seen:
                    seen.add(target)
                    previous[target] = (here, name)
                    following.append(target)
        frontier = following
    if new not in previous:
        return []
    chain: list[dict[str, str]] = []
    at = new
    while at != old:
        came_from, via = previous[at]
        chain.append({"state": came_from, "input": via, "target": at})
        at = came_from
    chain.reverse()
    return chain
