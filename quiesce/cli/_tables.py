"""`quiesce tables`: every registered table's rows, or its state x input grid (`--matrix`).

On a terminal the rows are a rich table; into a pipe or a file they are plain text at full
width (rich would cut them to 80 columns with "…"). `--matrix` prints Markdown grids, and
`quiesce tables --matrix --out-dir docs/tables` is the one command that regenerates the
committed grids the staleness test compares against.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table as RichTable

from quiesce.cli._output import fail, json_option, print_json
from quiesce.cli._paths import OutputDir
from quiesce.cli._values import Name
from quiesce.fsm import Table, matrix, render_matrix, write_matrices
from quiesce.protocol.machines import TABLES, UnknownTable, get_table

__all__ = ["tables"]

_COLUMNS = ("#", "source", "input", "guard", "target", "update", "effects")


@click.command()
@click.argument("name", type=Name(), required=False)
@click.option(
    "--matrix",
    "as_matrix",
    is_flag=True,
    help="Print the state x input grid (Markdown; JSON with --json) instead of the rows.",
)
@click.option(
    "--out-dir",
    type=OutputDir(),
    help="With --matrix: write <table>.md into this directory instead of stdout.",
)
@click.option(
    "--prune",
    is_flag=True,
    help="With --out-dir: also delete .md files there whose table is no longer registered.",
)
@json_option
def tables(
    name: str | None, as_matrix: bool, out_dir: Path | None, prune: bool, as_json: bool
) -> None:
    """List the registered tables (or only NAME): states, inputs, rows, guards and effects.

    With --matrix, print each table as a state x input grid instead: every cell says what
    happens when that input arrives in that state (the target, `[guard]`, `(holds)`, or
    `ignored` / `forbidden`).

    \b
    Examples:
        quiesce tables checkpoint | less -S
        quiesce tables --matrix checkpoint
        quiesce tables --matrix --out-dir docs/tables
    """
    if out_dir is not None and not as_matrix:
        fail("--out-dir writes the grids: add --matrix")
    if prune and out_dir is None:
        fail("--prune deletes stale grids in --out-dir: add --out-dir")
    try:
        selected = list(TABLES.values()) if name is None else [get_table(name)]
    except UnknownTable as error:
        fail(error)
    if as_matrix and out_dir is not None:
        _write(out_dir, selected, prune, as_json)
    elif as_matrix and as_json:
        print_json({"tables": [matrix(table).to_json() for table in selected]})
    elif as_matrix:
        click.echo("\n".join(render_matrix(table) for table in selected), nl=False)
    elif as_json:
        print_json({"tables": [table.describe() for table in selected]})
    elif _is_terminal():
        _print_rich([table.describe() for table in selected])
    else:
        _print_plain([table.describe() for table in selected])


def _write(out_dir: Path, selected: list[Table[Any, Any]], prune: bool, as_json: bool) -> None:
    written = write_matrices(out_dir, selected)
    orphans = sorted(path for path in out_dir.glob("*.md") if path.stem not in TABLES)
    for orphan in orphans:
        if prune:
            orphan.unlink()
            click.echo(f"deleted {orphan} (no registered table)", err=True)
        else:
            click.echo(f"stale: {orphan} has no registered table (use --prune)", err=True)
    if as_json:
        print_json(
            {
                "written": [str(p) for p in written],
                "orphans": [str(p) for p in orphans],
                "pruned": prune,
            }
        )
    else:
        for path in written:
            click.echo(str(path))


def _is_terminal() -> bool:
    isatty = getattr(sys.stdout, "isatty", None)
    return bool(isatty and isatty())


def _cells(doc: dict[str, Any]) -> list[list[str]]:
    """One line of cells per row and source, in `_COLUMNS` order."""
    return [
        [
            str(row["index"]),
            row["source"],
            row["input"],
            row["guard"] or "",
            "(holds)" if row["holds"] else row["target"],
            row["update"] or "",
            ", ".join(row["effects"]),
        ]
        for row in doc["rows"]
    ]


def _title(doc: dict[str, Any]) -> str:
    return f"{doc['name']}: {doc['doc']}"


def _footer(doc: dict[str, Any]) -> str:
    return (
        f"states: {', '.join(doc['states'])}   initial: {doc['initial']}   "
        f"finals: {', '.join(doc['finals']) or '-'}   unmapped pairs: {doc['unmapped']}"
    )


def _print_rich(described: list[dict[str, Any]]) -> None:
    console = Console()
    for doc in described:
        view = RichTable(title=_title(doc), title_justify="left")
        for column in _COLUMNS:
            view.add_column(column)
        for cells in _cells(doc):
            view.add_row(*cells)
        console.print(view)
        console.print(_footer(doc) + "\n")


def _print_plain(described: list[dict[str, Any]]) -> None:
    # Full width, one line per row, columns padded: readable in `less -S`, greppable, and
    # never cut ("…") or wrapped as rich does when it guesses an 80-column terminal.
    for doc in described:
        lines = [list(_COLUMNS), *_cells(doc)]
        widths = [max(len(line[i]) for line in lines) for i in range(len(_COLUMNS))]
        click.echo(_title(doc))
        for line in lines:
            padded = "  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True))
            click.echo(padded.rstrip())
        click.echo(_footer(doc) + "\n")
