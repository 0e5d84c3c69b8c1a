"""`quiesce diagram` (one table, any format) and `quiesce diagrams` (the committed set).

`quiesce diagram NAME` draws one registered table on stdout or into `--out`, optionally
with a trace drawn on it. `quiesce diagrams --out-dir docs/diagrams` is the one command
that regenerates the committed Mermaid and DOT files the staleness test compares against.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from quiesce.check import build_model
from quiesce.cli._output import fail, print_json
from quiesce.cli._paths import InputFile, OutputDir, OutputFile
from quiesce.cli._values import Name, unknown_name
from quiesce.fsm import (
    DiagramError,
    GraphvizFailed,
    GraphvizNotFound,
    QuiesceError,
    Table,
    TraceStep,
    load_trace,
    render,
    write_diagrams,
)
from quiesce.protocol.machines import TABLES, UnknownTable, get_table

__all__ = ["diagram", "diagrams"]


@click.command()
@click.argument("name", type=Name())
@click.option(
    "--format",
    "format_",
    type=click.Choice(["mermaid", "dot", "svg"]),
    default="mermaid",
    show_default=True,
    help="Mermaid stateDiagram-v2, Graphviz DOT, or SVG (needs Graphviz `dot`).",
)
@click.option(
    "--out",
    type=OutputFile(),
    help="Write the diagram to this file (its directory must exist) instead of stdout.",
)
@click.option(
    "--model",
    "model_name",
    type=Name(),
    help="Draw a table of this registered model (`check --trace-out` names it when the table"
    " is not the protocol's, e.g. --model two-phase for `rm` and `tm`).",
)
@click.option(
    "--trace",
    "trace_file",
    type=InputFile(),
    help='Draw a trace: a UTF-8 JSON list of {"state", "input", "target"} steps (spec names),'
    ' as `check --trace-out` writes them; a step marked "violates" is drawn in red.',
)
def diagram(
    name: str, format_: str, out: Path | None, model_name: str | None, trace_file: Path | None
) -> None:
    """Draw the registered table NAME (`quiesce tables` lists the names).

    Edges read `input [guard] / effect, effect`; a trace numbers and highlights its steps.

    \b
    Example:
        quiesce diagram admission_gate --format svg --out gate.svg
        quiesce diagram rm --model two-phase
    """
    try:
        table = get_table(name) if model_name is None else _model_table(model_name, name)
        trace: list[TraceStep] = [] if trace_file is None else load_trace(table, trace_file)
        text = render(table, format_, trace)  # type: ignore[arg-type]
    except (GraphvizNotFound, GraphvizFailed) as error:
        fail(error, code=1)  # the machine lacks a tool: not a usage error
    except (UnknownTable, DiagramError, QuiesceError) as error:
        fail(error)
    if out is None:
        click.echo(text, nl=False)
    else:
        out.write_text(text, encoding="utf-8")
        click.echo(f"wrote {out}", err=True)


def _model_table(model_name: str, name: str) -> Table[Any, Any]:
    """The table called `name` that an instance of the registered model steps (its
    reference configuration, unmutated)."""
    model = build_model(model_name, {})
    tables = {
        table.name: table for table in map(model.table_of, model.tables()) if table is not None
    }
    if name not in tables:
        fail(unknown_name(f"{model_name} table", name, tables, "quiesce tables"))
    return tables[name]


@click.command()
@click.option(
    "--out-dir",
    type=OutputDir(),
    default=Path("docs/diagrams"),
    show_default=True,
    help="Directory receiving <table>.mmd and <table>.dot (created if missing).",
)
@click.option(
    "--prune",
    is_flag=True,
    help="Also delete .mmd/.dot files there whose table is no longer registered.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the written paths as JSON.")
def diagrams(out_dir: Path, prune: bool, as_json: bool) -> None:
    """Regenerate the Mermaid and DOT diagram of every registered table.

    This is the command that refreshes the committed diagrams (SVG is not committed: its
    bytes depend on the Graphviz version).

    \b
    Example:
        quiesce diagrams --out-dir docs/diagrams
    """
    tables = TABLES
    written = write_diagrams(out_dir, tables.values())
    orphans = sorted(
        path
        for suffix in (".mmd", ".dot")
        for path in out_dir.glob(f"*{suffix}")
        if path.stem not in tables
    )
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
