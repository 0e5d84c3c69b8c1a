"""How every command reports: the result on stdout, errors and logs on stderr."""

from __future__ import annotations

import json
import sys
from typing import Any, NoReturn

import click

from quiesce.fsm import QuiesceError

__all__ = ["fail", "print_json"]


def print_json(document: Any) -> None:
    """Print one JSON document on stdout (sorted keys, so equal results print equally)."""
    click.echo(json.dumps(document, indent=2, sort_keys=True, default=str))


def fail(error: QuiesceError | str, code: int = 2) -> NoReturn:
    """Report `error` on stderr and exit with `code` (2: usage or input error)."""
    click.echo(f"error: {error}", err=True)
    sys.exit(code)
