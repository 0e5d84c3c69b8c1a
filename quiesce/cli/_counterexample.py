"""A counterexample as a story: what `quiesce check` prints and writes for a violation.

Printed (`print_story`): the initial state once, one line per field; then numbered steps,
each with its action, the tables it moved (`agent_execution[g0-0#0]: completed --retire-->
tombstoned`) and only the fields of the described state that changed; then the violated
property with the values it reads at the last step.

Written (`write_traces`, `check --trace-out DIR`): per property, a Mermaid
`sequenceDiagram` of the calls (`I1.sequence.mmd`) and one engine trace per table the
counterexample moved (`I1.agent_execution.g0-0_0.json`: file names keep to letters,
digits, `_`, `-` and `.`, so no shell reads them as a glob). The steps of the last model
step carry `"violates": <property>`, so `quiesce diagram TABLE --trace FILE` draws the
violating step in red; a table the trace never moved gets no file, and the command says
which tables those are.

What it does not know: how a model describes or projects its states (`Model` does).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from quiesce.check import NO_STALL, Model, Step, Trace, Violation, mermaid_sequence
from quiesce.protocol.machines import TABLES

__all__ = [
    "TableMoves",
    "draw_command",
    "field_diff",
    "flat_fields",
    "print_story",
    "trace_file_stem",
    "write_traces",
]

_ABSENT = object()
"""A field one side of a step does not have (shown as `(none)`)."""


@dataclass(frozen=True, slots=True)
class TableMoves:
    """What each step of a trace did to each table: `per_step[k][table]` lists the table
    steps (`{"state", "input", "target"}`, maybe `"variant"`) of model step `k + 1`."""

    per_step: tuple[dict[str, list[dict[str, str]]], ...]

    @classmethod
    def of(cls, model: Model[Any], trace: Trace[Any]) -> TableMoves:
        """Project every step of `trace` onto every table of `model` (empty moves left out)."""
        per_step = []
        for before, action, after in trace.transitions():
            one = Trace(before, (Step(action, after),))
            moved = {table: model.project(one, table) for table in model.tables()}
            per_step.append({table: steps for table, steps in moved.items() if steps})
        return cls(tuple(per_step))

    def of_table(self, table: str, violates: str | None) -> list[dict[str, str]]:
        """The whole trace as steps of `table`; those of the last model step carry
        `"violates": violates` (when given)."""
        steps: list[dict[str, str]] = []
        last = len(self.per_step) - 1
        for number, moved in enumerate(self.per_step):
            for step in moved.get(table, ()):
                if violates is not None and number == last:
                    step = {**step, "violates": violates}
                steps.append(dict(step))
        return steps


def print_story(model: Model[Any], violation: Violation[Any], *, shortest: bool) -> None:
    """Print `violation` as numbered steps with diffs, then the property's values."""
    trace = violation.trace
    which = "shortest trace" if shortest else "trace of a random walk"
    doc = _property_doc(model, violation.property)
    click.secho(
        f"\n{violation.property} violated ({violation.kind}){doc}: {which}, {len(trace)} steps",
        fg="red",
        bold=True,
    )
    states = [model.describe_state(state) for state in trace.states()]
    click.echo("  initial state:")
    for path, value in flat_fields(states[0], depth=1).items():
        click.echo(f"      {path}: {_text(value)}")
    moves = TableMoves.of(model, trace)
    for number, step in enumerate(trace.steps, 1):
        fault = " [fault]" if step.fault else ""
        last = number == len(trace.steps) and violation.kind != "cycle"
        marker = f"   <- {violation.property} violated here" if last else ""
        click.echo(f"  {number:>3}. {step.label}{fault}{marker}")
        for table, steps in moves.per_step[number - 1].items():
            click.echo(f"         {table}: {_chain(steps)}")
        changes = field_diff(states[number - 1], states[number])
        for path, change in changes.items():
            click.echo(f"           {path}: {change}")
        if not changes and not moves.per_step[number - 1]:
            click.echo("           (no change to the described state)")
    if trace.loop_from is not None:
        click.echo(f"  ... back to the state after step {trace.loop_from}, forever")
    _print_values(model, violation, states[-1], states[-2] if len(states) > 1 else None)


def write_traces(
    model: Model[Any],
    violations: Sequence[Violation[Any]],
    directory: Path,
    *,
    model_name: str,
) -> None:
    """Write each violation's sequence diagram and per-table traces into `directory`,
    saying on stderr what was written, which tables the trace left alone, and the
    `quiesce diagram` command that draws one (`model_name`: the registered model)."""
    directory.mkdir(parents=True, exist_ok=True)
    for violation in violations:
        prop = violation.property
        stem = trace_file_stem(prop)
        diagram = directory / f"{stem}.sequence.mmd"
        diagram.write_text(mermaid_sequence(model, violation.trace, title=prop), encoding="utf-8")
        moves = TableMoves.of(model, violation.trace)
        violates = None if violation.kind == "cycle" else prop
        written: list[tuple[str, Path]] = []
        untouched: list[str] = []
        for table in model.tables():
            steps = moves.of_table(table, violates)
            if not steps:
                untouched.append(table)
                continue
            path = directory / f"{stem}.{trace_file_stem(table)}.json"
            path.write_text(json.dumps(steps, indent=2) + "\n", encoding="utf-8")
            written.append((table, path))
        click.echo(f"check: {prop}: wrote {diagram}", err=True)
        last_moved = moves.per_step[-1] if moves.per_step and violates else {}
        for table, path in written:
            marked = " (has the violating step)" if table in last_moved else ""
            click.echo(f"check: {prop}: wrote {path}{marked}", err=True)
        if untouched:
            click.echo(
                f"check: {prop}: no trace file for {', '.join(untouched)}: the counterexample"
                " never moves them",
                err=True,
            )
        if violates is not None and moves.per_step and not last_moved:
            click.echo(
                f"check: {prop}: the violating step ({violation.trace.steps[-1].label}) moves"
                " no table: see the printed story for the fields it changed",
                err=True,
            )
        drawable = [(t, p) for t, p in written if model.table_of(t) is not None]
        if drawable:
            table, path = next(((t, p) for t, p in drawable if t in last_moved), drawable[0])
            command = draw_command(model, model_name, table, path)
            click.echo(f"check: draw one with: {command}", err=True)


def draw_command(model: Model[Any], model_name: str, instance: str, path: Path) -> str:
    """The `quiesce diagram` command that draws the trace file `path` of table instance
    `instance`: a protocol table by its name, any other model's by `--model`."""
    table = model.table_of(instance)
    assert table is not None
    if table.name in TABLES:
        return f"quiesce diagram {table.name} --trace {path}"
    return f"quiesce diagram {table.name} --model {model_name} --trace {path}"


def trace_file_stem(name: str) -> str:
    """`name` as part of a file name no shell expands: `agent_execution[g0-0#0]` is
    `agent_execution.g0-0_0`, `control_fence[agent]` is `control_fence.agent`."""
    base, bracket, key = name.partition("[")
    readable = f"{base}.{key.rstrip(']')}" if bracket else name
    return re.sub(r"[^A-Za-z0-9_.-]", "_", readable)


def flat_fields(described: Any, depth: int | None = None, prefix: str = "") -> dict[str, Any]:
    """A described state as `{dotted.path: value}`: mappings are opened (to `depth` levels,
    all when None), anything else is a value."""
    if not isinstance(described, Mapping) or depth == 0:
        return {prefix: described}
    fields: dict[str, Any] = {}
    for key, value in described.items():
        path = f"{prefix}.{key}" if prefix else str(key)
        deeper = None if depth is None else depth - 1
        if isinstance(value, Mapping) and value and deeper != 0:
            fields.update(flat_fields(value, deeper, path))
        else:
            fields[path] = value
    return fields


def field_diff(before: Any, after: Any) -> dict[str, str]:
    """The fields that differ between two described states, `{path: change}`: `old -> new`
    as JSON (`(none)` for a field only one side has), or for two lists the items that
    left and came (`-"a" +"b"`), so a long message list shows only what moved."""
    old, new = flat_fields(before), flat_fields(after)
    changed: dict[str, str] = {}
    for path in dict.fromkeys([*old, *new]):
        was, now = old.get(path, _ABSENT), new.get(path, _ABSENT)
        if was == now:
            continue
        moved = _list_change(was, now) if isinstance(was, list) and isinstance(now, list) else ""
        changed[path] = moved or f"{_text(was)} -> {_text(now)}"
    return changed


def _list_change(was: list[Any], now: list[Any]) -> str:
    """`-x +y` for the items of `was` missing from `now` and back; "" when only the order
    changed."""
    left, came = list(was), list(now)
    for item in now:
        if item in left:
            left.remove(item)
            came.remove(item)
    return " ".join([*(f"-{_json(i)}" for i in left), *(f"+{_json(i)}" for i in came)])


# ---------------------------------------------------------------------- internals


def _print_values(
    model: Model[Any], violation: Violation[Any], last: Any, previous: Any | None
) -> None:
    """The violated property and the values it reads in the last state (or, when the
    property does not say what it reads, the fields the last step changed)."""
    if violation.property == NO_STALL:
        why = {
            "deadlock": "the last state is not a goal and has no fault-free move",
            "cycle": "the steps after the loop point repeat forever without reaching a goal",
        }.get(violation.kind, violation.kind)
        click.echo(f"  {NO_STALL}: {why}")
        return
    reads = next((p.reads for p in model.properties() if p.name == violation.property), ())
    fields = flat_fields(last)
    if reads:
        shown = {
            path: _text(value)
            for path, value in fields.items()
            if any(path == r or path.startswith(f"{r}.") for r in reads)
        }
        where = "the values it reads"
    else:
        changed = field_diff(previous or {}, last)
        shown = {path: _text(fields.get(path, _ABSENT)) for path in changed}
        where = "the fields the last step changed"
    click.echo(f"  {violation.property} is false after the last step; {where}:")
    for path, value in shown.items():
        click.echo(f"      {path} = {value}")


def _property_doc(model: Model[Any], name: str) -> str:
    doc = next((p.doc for p in model.properties() if p.name == name), "")
    return f" - {doc}" if doc else ""


def _chain(steps: Sequence[Mapping[str, str]]) -> str:
    """`running --run_finished--> completed --retire--> tombstoned`, a variant's move
    named."""
    text = steps[0]["state"]
    for step in steps:
        outside = f" (variant {step['variant']}, not in the table)" if "variant" in step else ""
        text += f" --{step['input']}--> {step['target']}{outside}"
    return text


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), default=str)


def _text(value: Any) -> str:
    return "(none)" if value is _ABSENT else _json(value)
