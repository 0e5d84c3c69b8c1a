"""The `quiesce` command line: one module per command, registered on one click group.

Results go to stdout (JSON with `--json`); logs and progress go to stderr. Every option is
checked before a command starts (`_paths.py`, `_values.py`): a bad value is one line
naming it and the fix, exit 2, never a traceback. A file-system error after that (a file
removed or a disk filled mid-run) is one line too, exit 1.

Commands are imported only when they run (`_COMMANDS` maps a name to its module), so a
participant server started by `quiesce serve` does not pay for hypothesis or the model
checker, and a restart in `quiesce chaos` is as fast as the server itself.
"""

from __future__ import annotations

import importlib
from typing import Any

import click

__all__ = ["main"]

# name -> (module, attribute), in the order `quiesce --help` lists them.
_COMMANDS: dict[str, tuple[str, str]] = {
    "simulate": ("quiesce.cli._simulate", "simulate"),
    "tables": ("quiesce.cli._tables", "tables"),
    "diagram": ("quiesce.cli._diagram", "diagram"),
    "diagrams": ("quiesce.cli._diagram", "diagrams"),
    "check": ("quiesce.cli._check", "check"),
    "mutants": ("quiesce.cli._mutants", "mutants"),
    "explore": ("quiesce.cli._explore", "explore"),
    "serve": ("quiesce.cli._serve", "serve"),
    "conform": ("quiesce.cli._conform", "conform"),
    "chaos": ("quiesce.cli._chaos", "chaos"),
    "validate": ("quiesce.cli._validate", "validate"),
    "cover": ("quiesce.cli._cover", "cover"),
}


class _LazyGroup(click.Group):
    """A click group whose commands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(_COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = _COMMANDS.get(cmd_name)
        if target is None:
            return None
        module, attribute = target
        command = getattr(importlib.import_module(module), attribute)
        assert isinstance(command, click.Command)
        return command

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except OSError as error:
            if error.filename is None:  # not about a file: a bug to see in full
                raise
            from quiesce.cli._output import fail

            fail(f"{error.filename}: {error.strerror}", code=1)


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="quiesce")
def main() -> None:
    """Declare, run and prove the quiesce checkpoint-and-recovery protocol."""
