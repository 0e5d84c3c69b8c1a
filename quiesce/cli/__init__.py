"""The `quiesce` command line: one module per command, registered on one click group.

Results go to stdout (JSON with `--json`); logs and progress go to stderr. Every option is
checked before a command starts (`_paths.py`, `_values.py`): a bad value is one line
naming it and the fix, exit 2, never a traceback. A file-system error after that (a file
removed or a disk filled mid-run) is one line too, exit 1.

Commands are imported only when they run (`_COMMANDS` maps a name to its module and its
one-line summary), so `quiesce --help` imports none of them, a participant server started
by `quiesce serve` does not pay for hypothesis or the model checker, and a restart in
`quiesce chaos` is as fast as the server itself.
"""

from __future__ import annotations

import importlib
from typing import Any

import click

__all__ = ["main"]

# name -> (module, attribute, summary), in the order `quiesce --help` lists them. The
# summary is the command's own (its docstring's first sentence; a test keeps them equal),
# so `quiesce --help` lists the commands without importing any of them.
_COMMANDS: dict[str, tuple[str, str, str]] = {
    "simulate": (
        "quiesce.cli._simulate",
        "simulate",
        "Run a simulated training run with checkpoints, faults and a crash (virtual clock).",
    ),
    "tables": (
        "quiesce.cli._tables",
        "tables",
        "List the registered tables (or only NAME): states, inputs, rows, guards and effects.",
    ),
    "diagram": (
        "quiesce.cli._diagram",
        "diagram",
        "Draw the registered table NAME (`quiesce tables` lists the names).",
    ),
    "diagrams": (
        "quiesce.cli._diagram",
        "diagrams",
        "Regenerate the Mermaid and DOT diagram of every registered table.",
    ),
    "check": (
        "quiesce.cli._check",
        "check",
        "Explore every reachable state of MODEL (default: design) and check its properties.",
    ),
    "mutants": (
        "quiesce.cli._mutants",
        "mutants",
        "List the mutants, or (--verify) show that every check kills its mutant.",
    ),
    "explore": (
        "quiesce.cli._explore",
        "explore",
        "Step through MODEL (default: design) in a web page: its tables' diagrams with the"
        " current states, the enabled actions, the path, the properties and the rows covered.",
    ),
    "serve": (
        "quiesce.cli._serve",
        "serve",
        "Serve one participant over HTTP (routes in docs/wire.md).",
    ),
    "conform": (
        "quiesce.cli._conform",
        "conform",
        "Check that the participant server at --url follows the protocol (docs/wire.md).",
    ),
    "chaos": (
        "quiesce.cli._chaos",
        "chaos",
        "Kill -9 a real controller and participants at random moments; check nothing was"
        " lost, duplicated or restored from a half-written snapshot.",
    ),
    "validate": (
        "quiesce.cli._validate",
        "validate",
        "Check fence logs (docs/validate.md) against the design model, step by step.",
    ),
    "cover": (
        "quiesce.cli._cover",
        "cover",
        "Replay a shortest trace of every design step label on the pure System.",
    ),
}


class _LazyGroup(click.Group):
    """A click group whose commands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(_COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = _COMMANDS.get(cmd_name)
        if target is None:
            return None
        module, attribute, _ = target
        command = getattr(importlib.import_module(module), attribute)
        assert isinstance(command, click.Command)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # click's own would import every command for its short help: a stand-in command
        # holding the same summary is cut by click the way the real one would be.
        width = formatter.width - 6 - max(map(len, _COMMANDS))
        rows = [
            (name, click.Command(name, help=summary).get_short_help_str(width))
            for name, (_, _, summary) in _COMMANDS.items()
        ]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            # Ctrl-C before a command took over its signals (while it starts): the exit
            # status a shell gives a process stopped by SIGINT, not click's "Aborted!" 1.
            click.echo("quiesce: stopped by SIGINT", err=True)
            raise SystemExit(130) from None
        except OSError as error:
            if error.filename is None:  # not about a file: a bug to see in full
                raise
            from quiesce.cli._output import fail

            fail(f"{error.filename}: {error.strerror}", code=1)


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="quiesce")
def main() -> None:
    """Declare, run and prove the quiesce checkpoint-and-recovery protocol."""
