"""How every command reports: the result on stdout, errors and logs on stderr."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

import click
from rich.console import Console
from rich.table import Table

from quiesce.fsm import QuiesceError

__all__ = [
    "abbreviated",
    "fail",
    "json_option",
    "log_level_option",
    "one_line",
    "print_json",
    "print_stats",
]


def print_json(document: Any) -> None:
    """Print one JSON document on stdout (sorted keys, so equal results print equally)."""
    click.echo(json.dumps(document, indent=2, sort_keys=True, default=str))


def print_stats(rows: tuple[tuple[str, str], ...]) -> None:
    """Print a two-column `measure | value` table of a run's numbers on stdout."""
    stats = Table()
    stats.add_column("measure")
    stats.add_column("value", justify="right")
    for measure, value in rows:
        stats.add_row(measure, value)
    Console().print(stats)


def abbreviated(value: object, limit: int = 120) -> str:
    """`repr(str(value))`, cut to about `limit` characters: an error message names what was
    wrong without echoing a 5,000-character argument back (control characters escaped)."""
    shown = repr(str(value))
    if len(shown) <= limit:
        return shown
    return f"{shown[: limit - 12]}...' ({len(str(value)):,} chars)"


def one_line(text: str) -> str:
    """`text` with every run of whitespace (newlines included) as one space: a row of a
    table, or a one-line error, stays one line whatever the message holds."""
    return " ".join(text.split())


def fail(error: QuiesceError | str, code: int = 2) -> NoReturn:
    """Report `error` on stderr and exit with `code` (2: usage or input error)."""
    click.echo(f"error: {one_line(str(error))}", err=True)
    sys.exit(code)


LOG_LEVELS = ("debug", "info", "warning", "error")
_Command = TypeVar("_Command", bound=Callable[..., Any])

json_option = click.option(
    "--json", "as_json", is_flag=True, help="Print the result as one JSON document on stdout."
)
"""The `--json` flag every command that prints a result shares."""


def log_level_option(
    default: str, help: str = "Log level on stderr."
) -> Callable[[_Command], _Command]:
    """The `--log-level` option, validated against the levels the logging setup knows."""
    return click.option(
        "--log-level",
        type=click.Choice(LOG_LEVELS, case_sensitive=False),
        default=default,
        show_default=True,
        help=help,
    )
