"""`quiesce tables`: every registered table with its states, inputs and rows."""

from __future__ import annotations

import click
from rich.console import Console
from rich.table import Table as RichTable

from quiesce.cli._output import json_option, print_json
from quiesce.protocol.machines import TABLES


@click.command()
@json_option
def tables(as_json: bool) -> None:
    """List every registered table: states, inputs, rows, guards and effects."""
    described = [table.describe() for table in TABLES.values()]
    if as_json:
        print_json({"tables": described})
        return
    console = Console()
    for doc in described:
        view = RichTable(title=f"{doc['name']}: {doc['doc']}", title_justify="left")
        for column in ("#", "source", "input", "guard", "target", "update", "effects"):
            view.add_column(column)
        for row in doc["rows"]:
            target = "(holds)" if row["holds"] else row["target"]
            view.add_row(
                str(row["index"]),
                row["source"],
                row["input"],
                row["guard"] or "",
                target,
                row["update"] or "",
                ", ".join(row["effects"]),
            )
        console.print(view)
        console.print(
            f"states: {', '.join(doc['states'])}   initial: {doc['initial']}   "
            f"finals: {', '.join(doc['finals']) or '-'}   unmapped pairs: {doc['unmapped']}\n"
        )
