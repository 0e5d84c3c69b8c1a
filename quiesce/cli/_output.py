"""How every command reports: the result on stdout, errors and logs on stderr."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NoReturn, TypeVar

import click
from rich.console import Console
from rich.table import Table

from quiesce.fsm import QuiesceError

__all__ = [
    "abbreviated",
    "fail",
    "heartbeat",
    "json_option",
    "log_level_option",
    "one_line",
    "print_json",
    "print_stats",
    "progress_lines",
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


PROGRESS_EVERY_S = 2.0
"""A long command without a live bar (stderr is not a terminal) logs a line this often."""


def progress_lines(
    describe: Callable[[], str], clock: Callable[[], float] = time.monotonic
) -> Callable[[], None]:
    """A callback to call as often as work advances: once `PROGRESS_EVERY_S` have passed
    since the last line (or since it was made), it writes `describe()` on stderr, one line
    each time, so a log keeps the history; a run shorter than that writes nothing."""
    shown_at = clock()

    def tick() -> None:
        nonlocal shown_at
        now = clock()
        if now - shown_at < PROGRESS_EVERY_S:
            return
        shown_at = now
        click.echo(describe(), err=True)

    return tick


@contextmanager
def heartbeat(what: str, *, logged: bool = False) -> Iterator[Callable[[], float]]:
    """While the block runs (a step that reports no progress of its own), write `what` and
    the seconds so far on stderr every `PROGRESS_EVERY_S`: on a terminal, or (`logged`)
    also into a log, as `check`'s own progress does. Yields a function giving the seconds
    the block has taken."""
    started = time.monotonic()
    if not (logged or sys.stderr.isatty()):
        yield lambda: time.monotonic() - started
        return
    done = threading.Event()

    def beat() -> None:
        while not done.wait(PROGRESS_EVERY_S):
            click.echo(f"{what}, {time.monotonic() - started:.0f}s", err=True)

    thread = threading.Thread(target=beat, name="heartbeat", daemon=True)
    thread.start()
    try:
        yield lambda: time.monotonic() - started
    finally:
        done.set()
        thread.join()
