"""The names of generated mutants: each row is named by what it says, never by its index.

What lives here: `row_key` (a row's name, from its table, sources, input and guard),
`row_keys` (every row's, refusing two rows of one name), `mutant_name` (a generated
mutant's name: its row's key and the change) and `row_index` (the row a state, an input and
a guard select, for naming a row from the table instead of typing its key).

The format. A row key is `TABLE:SOURCES:INPUT`, or `TABLE:SOURCES:INPUT:GUARD` for a
guarded row, every part a state, input, guard or table label (letters, digits and `_`):

- SOURCES is the row's one source state; several are joined by `+` in the table's state
  order (`closing_admission+flushing_acks`); `any` is every state of the table, and
  `any-A-B` every state but A and B (written so when the row leaves from more than half
  the table's states: `any-idle` for the fence's seven states other than idle).
- A generated mutant is `KEY.drop_guard` (the row's guard dropped) or `KEY.retarget=STATE`
  (the row sent to STATE instead of its target).

So `checkpoint:abort_pending:trigger.retarget=committing`,
`control_fence:preparing:recv_prepare:same_id.retarget=prepared`,
`control_fence:any-idle:recv_restore:other_id_active.drop_guard`. A name holds no character
a POSIX shell treats specially (no `[`, `>`, `*`, `?`, space or quote), so
`quiesce check protocol --mutant NAME` takes it unquoted.

Why not the index: inserting a row renumbers every row after it, and a name (or a survivor
note keyed by it, `_notes`) would then silently denote another row. A key is a function of
the row's sources (as a set), input and guard, so two rows of one key are one row stated
twice (the second is never chosen where the first is, from any of its sources):
`row_keys` raises `ValueError` on that, and `_catalog` calls it for every table it
mutates when the package is imported.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from enum import Enum
from typing import Any, Literal

from quiesce.fsm import Table, label

__all__ = ["mutant_name", "row_index", "row_key", "row_keys"]

Operator = Literal["retarget", "drop_guard"]

_PART = re.compile(r"[A-Za-z0-9_]+")


def _part(text: str, what: str) -> str:
    if not _PART.fullmatch(text):
        raise ValueError(f"{what} {text!r} is not a name part (letters, digits and `_` only)")
    return text


def _sources(table: Table[Any, Any], sources: Iterable[Enum]) -> str:
    """SOURCES of a row key: the one state, `a+b` (table order), `any` or `any-a-b`."""
    chosen = set(sources)
    # Not `list(table.states)`: mypy takes a `Table[Any, Any]`'s states as `type[Any]`.
    states: list[Enum] = [state for state in table.states]
    if len(chosen) * 2 > len(states):
        others = [_part(label(s), "state") for s in states if s not in chosen]
        return "-".join(["any", *others])
    return "+".join(_part(label(s), "state") for s in states if s in chosen)


def row_key(table: Table[Any, Any], index: int) -> str:
    """The key of row `index` of `table`: `TABLE:SOURCES:INPUT[:GUARD]` (module docstring)."""
    row = table.rows[index]
    parts = [
        _part(table.name, "table"),
        _sources(table, row.sources),
        _part(label(row.input), "input"),
    ]
    if row.guard:
        parts.append(_part(row.guard, "guard"))
    return ":".join(parts)


def row_keys(table: Table[Any, Any]) -> list[str]:
    """The key of every row of `table`, in row order; `ValueError` if two rows share one."""
    keys = [row_key(table, index) for index in range(len(table.rows))]
    first: dict[str, int] = {}
    for index, key in enumerate(keys):
        if key in first:
            raise ValueError(
                f"rows {first[key]} and {index} of {table.name!r} are both {key}: the same"
                " sources, input and guard, so the second is never chosen (drop it or merge"
                " the two)"
            )
        first[key] = index
    return keys


def mutant_name(
    table: Table[Any, Any], index: int, operator: Operator, state: str | None = None
) -> str:
    """The generated mutant that applies `operator` to row `index` of `table`:
    `KEY.drop_guard`, or `KEY.retarget=STATE` (`state`: the new target's label)."""
    key = row_key(table, index)
    if operator == "drop_guard":
        if state is not None:
            raise ValueError(f"drop_guard takes no state (given {state!r})")
        return f"{key}.drop_guard"
    if state is None:
        raise ValueError("retarget needs the state it sends the row to")
    return f"{key}.retarget={_part(state, 'state')}"


def row_index(
    table: Table[Any, Any],
    sources: Enum | Iterable[Enum],
    input: Enum,
    guard: str | None = None,
) -> int:
    """The index of the first row of `table` with `input`, `guard` and a source in
    `sources`: the row `input` fires from that source when `guard` holds (`LookupError` if
    there is none)."""
    wanted = {sources} if isinstance(sources, Enum) else set(sources)
    for index, row in enumerate(table.rows):
        if row.input is input and wanted & set(row.sources) and row.guard == guard:
            return index
    named = "/".join(sorted(label(s) for s in wanted))
    where = f"{named} {label(input)}" + (f" [{guard}]" if guard else "")
    raise LookupError(f"{table.name} has no row {where}")
