"""`quiesce validate LOG [LOG...]`: check a recorded fence log against the design model.

A fence log (docs/validate.md) is what `quiesce serve --fence-log FILE` and `quiesce
simulate --fence-log FILE` write: one JSON line per request a participant handled, with
its fence before and after. Each fence move must be a move the design model makes, or
stutter (`quiesce.models` `validate_fence_log`). Result on stdout: `OK` with the counts,
or `UNMAPPED` with the first step that maps to no design step and both fences (one JSON
document with `--json`).

Exit codes: 0 the log refines the design; 1 a step maps to no design step; 2 a usage error
or a malformed log (one line naming the file and line, never a traceback).
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from quiesce.cli._output import fail, json_option, print_json
from quiesce.cli._paths import InputFile
from quiesce.models import (
    MAX_FAULTS,
    LogVerdict,
    MalformedFenceLog,
    read_fence_logs,
    validate_fence_log,
)

__all__ = ["validate"]


def _summary(verdict: LogVerdict) -> str:
    return (
        f"{verdict.lines:,} lines of {verdict.participants} participants: "
        f"{verdict.moves:,} fence moves, {verdict.stutters:,} stutters, "
        f"{verdict.unlogged:,} unlogged moves ({verdict.restarts} restarts); the design "
        f"at fault budget {verdict.design.faults} ({verdict.design_states:,} states)"
    )


@click.command()
@click.argument("logs", nargs=-1, required=True, type=InputFile())
@click.option(
    "--max-faults",
    type=click.IntRange(1, MAX_FAULTS),
    default=MAX_FAULTS,
    show_default=True,
    help="The largest fault budget the design is exhausted at before a step counts as "
    "unmapped (each budget is tried only if the one below misses a step).",
)
@json_option
def validate(logs: tuple[Path, ...], max_faults: int, as_json: bool) -> None:
    """Check fence logs (docs/validate.md) against the design model, step by step.

    Every logged fence move of every participant must be a move of the design's fences,
    or stutter; so must a move between two lines (a restart). Several LOGs are read in
    order, one participant's lines continuing across files.

    \b
    Exit codes:
      0  every step maps to a design step or stutters (OK)
      1  a step maps to no design step (UNMAPPED: where, and both fences)
      2  usage error, or a malformed log (the file and line are named)
    """
    try:
        verdict = validate_fence_log(read_fence_logs(logs), max_faults=max_faults)
    except MalformedFenceLog as error:
        fail(error)
    if as_json:
        print_json(verdict.describe())
    elif verdict.unmapped is None:
        click.echo(f"OK, every step maps to a design step or stutters: {_summary(verdict)}")
    else:
        click.echo(f"UNMAPPED: {verdict.unmapped.explain()}")
        click.echo(f"the log: {_summary(verdict)}")
    sys.exit(0 if verdict.ok else 1)
