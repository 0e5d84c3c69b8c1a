"""A table as a state x input grid: what happens when input X arrives in state Y.

What lives here: a pure builder (`matrix`: table -> `Matrix`), its Markdown and JSON
renderings, and `write_matrices`, which writes the committed grids under `docs/tables/`.
What it does not know: which tables exist or where the grids are shown.

Every `(state, input)` pair gets one cell, read from the table exactly as `Table.step`
reads it:
- *mapped*: the pair's rows in priority order, one line each: the target state, `(holds)`
  when the state does not change, and `[guard]` when the row is guarded (the first row
  whose guard holds fires; when none holds, `GuardRejected`);
- `ignored`: accepted, nothing changes (declared with `ignored=`);
- `forbidden`: refused with `TransitionNotAllowed`, declared with `forbidden=` or left
  unmapped (`unmapped="forbidden"`).

Rendering is deterministic (states and inputs in enum order, rows in declared order), so
the committed grids compare byte for byte.

>>> print(render_matrix(table))  # doctest: +SKIP
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, Literal

from quiesce.fsm._table import Table, label

__all__ = [
    "MATRIX_REGENERATE_COMMAND",
    "Matrix",
    "MatrixCell",
    "MatrixMove",
    "matrix",
    "render_matrix",
    "write_matrices",
]

MATRIX_REGENERATE_COMMAND = "uv run quiesce tables --matrix --out-dir docs/tables"
"""The one command that rewrites the committed grids under `docs/tables/`."""

Disposition = Literal["mapped", "ignored", "forbidden"]


@dataclass(frozen=True, slots=True)
class MatrixMove:
    """One row of a cell: where the machine goes, under which guard, doing what."""

    row: int  # the row's index in the table
    target: str  # the state after the move (the source itself when `holds`)
    holds: bool  # the state does not change
    guard: str | None = None
    update: str | None = None
    effects: tuple[str, ...] = ()

    def text(self) -> str:
        """The cell line: `target [guard]` or `(holds) [guard]`."""
        text = "(holds)" if self.holds else self.target
        return f"{text} [{self.guard}]" if self.guard else text


@dataclass(frozen=True, slots=True)
class MatrixCell:
    """What the table does with one `(state, input)` pair.

    `declared` tells a forbidden pair listed in `forbidden=` from one refused because no
    row maps it; ignored pairs are always declared.
    """

    state: str
    input: str
    disposition: Disposition
    moves: tuple[MatrixMove, ...] = ()
    declared: bool = True

    def lines(self) -> tuple[str, ...]:
        """The cell's text: one line per row, or the disposition."""
        if self.disposition == "mapped":
            return tuple(move.text() for move in self.moves)
        return (self.disposition,)


@dataclass(frozen=True, slots=True)
class Matrix:
    """A table's grid: `cells[i][j]` is state `states[i]` under input `inputs[j]`."""

    name: str
    doc: str
    variant: str | None
    states: tuple[str, ...]
    inputs: tuple[str, ...]
    initial: str
    finals: tuple[str, ...]
    unmapped: str
    cells: tuple[tuple[MatrixCell, ...], ...]

    def cell(self, state: str, input: str) -> MatrixCell:
        """The cell of one pair, by spec names (`KeyError` names an unknown one)."""
        if state not in self.states:
            raise KeyError(f"{self.name!r} has no state {state!r}; states: {list(self.states)}")
        if input not in self.inputs:
            raise KeyError(f"{self.name!r} has no input {input!r}; inputs: {list(self.inputs)}")
        return self.cells[self.states.index(state)][self.inputs.index(input)]

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready document; `grid[state][input]` is the cell of that pair."""
        return {
            "name": self.name,
            "doc": self.doc,
            "variant": self.variant,
            "states": list(self.states),
            "inputs": list(self.inputs),
            "initial": self.initial,
            "finals": list(self.finals),
            "unmapped": self.unmapped,
            "grid": {
                state: {cell.input: _cell_json(cell) for cell in row}
                for state, row in zip(self.states, self.cells, strict=True)
            },
        }


def matrix(table: Table[Any, Any]) -> Matrix:
    """The state x input grid of `table`: one cell per pair, as `Table.step` reads it."""
    return Matrix(
        name=table.name,
        doc=table.doc,
        variant=table.variant,
        states=tuple(label(s) for s in table.states),
        inputs=tuple(label(i) for i in table.inputs),
        initial=label(table.initial),
        finals=tuple(label(s) for s in table.states if s in table.finals),
        unmapped=table.unmapped,
        cells=tuple(
            tuple(_cell(table, state, input) for input in table.inputs) for state in table.states
        ),
    )


def render_matrix(table: Table[Any, Any]) -> str:
    """The grid as a Markdown document: a title naming the machine, a legend, a pipe table.

    Rows are states (the initial and final ones marked), columns are inputs; a cell with
    several rows lists them in priority order, separated by `<br>`.
    """
    grid = matrix(table)
    header = ["state \\ input", *map(_escape, grid.inputs)]
    body = [
        [_escape(_state_label(grid, state)), *(_markdown_cell(cell) for cell in row)]
        for state, row in zip(grid.states, grid.cells, strict=True)
    ]
    widths = [max(len(line[i]) for line in (header, *body)) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    refused = "declared, or mapped by no row" if grid.unmapped == "forbidden" else "declared"
    lines = [
        f"# {_title(grid)}",
        "",
        f"<!-- generated from the table; regenerate with: {MATRIX_REGENERATE_COMMAND} -->",
        "",
    ]
    if grid.doc:
        lines += [" ".join(grid.doc.split()), ""]
    lines += [
        "What happens when an input (column) arrives in a state (row): the target state,",
        "`(holds)` when the state does not change, `[guard]` when the row is guarded. Several",
        "rows are listed in priority order: the first whose guard holds fires; when every row",
        "is guarded and none holds, the input is refused with `GuardRejected`.",
        "`ignored`: accepted, nothing changes.",
        f"`forbidden`: refused with `TransitionNotAllowed` ({refused}).",
        "",
        line(header),
        "| " + " | ".join("-" * w for w in widths) + " |",
        *(line(cells) for cells in body),
    ]
    return "\n".join(lines) + "\n"


def write_matrices(directory: str | Path, tables: Iterable[Table[Any, Any]]) -> list[Path]:
    """(Re)write `<name>.md` for each table into `directory`; returns the paths.

    Files are only rewritten when their content changed.
    """
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for table in tables:
        text = render_matrix(table)
        path = root / f"{table.name}.md"
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


# ---------------------------------------------------------------------- internals


def _cell(table: Table[Any, Any], state: Enum, input: Enum) -> MatrixCell:
    moves = tuple(
        MatrixMove(
            row=index,
            target=label(row.target or state),
            holds=row.target is None or row.target is state,
            guard=row.guard,
            update=row.update,
            effects=row.effects,
        )
        for index, row in enumerate(table.rows)
        if input is row.input and state in row.sources
    )
    s, i = label(state), label(input)
    if moves:
        return MatrixCell(s, i, "mapped", moves)
    if (state, input) in table.ignored:
        return MatrixCell(s, i, "ignored")
    return MatrixCell(s, i, "forbidden", declared=(state, input) in table.forbidden)


def _cell_json(cell: MatrixCell) -> dict[str, Any]:
    document: dict[str, Any] = {"disposition": cell.disposition, "text": list(cell.lines())}
    if cell.disposition == "mapped":
        document["moves"] = [
            {
                "row": move.row,
                "target": move.target,
                "holds": move.holds,
                "guard": move.guard,
                "update": move.update,
                "effects": list(move.effects),
            }
            for move in cell.moves
        ]
    else:
        document["declared"] = cell.declared
    return document


# A doc that opens with a machine tag (`M1: one snapshot attempt`) titles "M1 checkpoint";
# a sub-machine of several tags them all (`M1/M9: one control call` titles "M1/M9 call").
_TAG = re.compile(r"([A-Z]+[0-9]+(?:/[A-Z]+[0-9]+)*):\s")


def _title(grid: Matrix) -> str:
    tag = _TAG.match(grid.doc)
    name = grid.name if grid.variant is None else f"{grid.name} (variant {grid.variant})"
    return f"{tag.group(1)} {name}" if tag else name


def _state_label(grid: Matrix, state: str) -> str:
    marks = [
        m for m, on in (("initial", state == grid.initial), ("final", state in grid.finals)) if on
    ]
    return f"{state} ({', '.join(marks)})" if marks else state


def _markdown_cell(cell: MatrixCell) -> str:
    return "<br>".join(_escape(line) for line in cell.lines())


def _escape(text: str) -> str:
    # A pipe inside a state, input or guard name would end the cell early.
    return text.replace("|", "\\|")
