"""The `quiesce` command line: one module per command, registered on one click group.

Results go to stdout (JSON with `--json`); logs and progress go to stderr.
"""

from __future__ import annotations

import click

from quiesce.cli._check import check
from quiesce.cli._conform import conform
from quiesce.cli._diagram import diagram, diagrams
from quiesce.cli._mutants import mutants
from quiesce.cli._serve import serve
from quiesce.cli._simulate import simulate
from quiesce.cli._tables import tables

__all__ = ["main"]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="quiesce")
def main() -> None:
    """Declare, run and prove the quiesce checkpoint-and-recovery protocol."""


for _command in (check, conform, diagram, diagrams, mutants, serve, simulate, tables):
    main.add_command(_command)
