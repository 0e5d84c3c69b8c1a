"""`quiesce chaos`: SIGKILL a real deployment at random moments and check what survived.

Starts `quiesce serve` participants and a controller process on 127.0.0.1, kills one of
them (seeded) at a time -- inside prepare, commit, capture, publish, release or at any
moment -- restarts it, and judges the run with a ledger independent of the controller
(`quiesce/harness/_chaos.py`). One line per kill on stderr; the verdict on stdout (a table,
or one JSON object with `--json`). `--report FILE` also writes the run as one self-contained
HTML page (`quiesce.harness.render_report`): the controller's phases, the kills and
restarts, every participant's fence, on the host's monotonic clock. Exit 0 when every check
held, 1 otherwise, 2 on a usage or set-up error, 130 / 143 when stopped by Ctrl-C / SIGTERM
(every child is stopped first).
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table as RichTable

from quiesce.cli._output import fail, heartbeat, json_option, log_level_option, print_json
from quiesce.cli._paths import OutputDir, OutputFile
from quiesce.harness import (
    ChaosConfig,
    ChaosError,
    ChaosInterrupted,
    ChaosRecorder,
    ChaosResult,
    run_chaos,
    write_report,
)

__all__ = ["chaos"]


def _summary(result: ChaosResult) -> RichTable:
    table = RichTable(title=f"quiesce chaos (seed {result.seed})", show_header=True)
    table.add_column("what")
    table.add_column("value", justify="right")
    phases = ", ".join(f"{name} {count}" for name, count in result.kills_by_phase.items())
    rows: list[tuple[str, Any]] = [
        (
            "kills (controller / participant)",
            f"{result.kills} ({result.controller_kills} / {result.participant_kills})",
        ),
        ("kills by phase", phases or "-"),
        ("recoveries", result.recoveries),
        ("training steps", result.steps),
        ("checkpoints completed", result.checkpoints_completed),
        ("lost / duplicated", f"{result.lost} / {result.duplicated}"),
        ("corrupt snapshots selected", result.corrupt_selected),
        ("wall seconds", f"{result.wall_s:.1f}"),
        ("verdict", "ok" if result.ok else "VIOLATED"),
    ]
    for name, value in rows:
        table.add_row(name, str(value))
    return table


@click.command()
@click.option(
    "--kills",
    type=click.IntRange(0, 10_000),
    default=10,
    show_default=True,
    help="SIGKILLs to deal.",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seeds victims and moments.")
@click.option(
    "--steps",
    type=click.IntRange(1, 1_000_000),
    default=None,
    help="Training steps of the run (default: 3 per kill + 4, at least 6).",
)
@click.option(
    "--workdir",
    type=OutputDir(),
    default=None,
    help="Keep state, snapshots, ledgers and logs here, created if missing (default: a temp"
    " dir, kept on failure).",
)
@click.option(
    "--report",
    type=OutputFile(),
    default=None,
    help="Write a run report here (replaced): one self-contained HTML page with a timeline "
    "per participant (phases, kills, restarts, fences) and charts over training steps.",
)
@log_level_option("info", "Log level of the children (their logs go to <workdir>/logs/).")
@json_option
def chaos(
    kills: int,
    seed: int,
    steps: int | None,
    workdir: Path | None,
    report: Path | None,
    log_level: str,
    as_json: bool,
) -> None:
    """Kill -9 a real controller and participants at random moments; check nothing was
    lost, duplicated or restored from a half-written snapshot."""
    config = ChaosConfig(kills=kills, seed=seed, steps=steps, workdir=workdir, log_level=log_level)
    said: list[str] = []  # the progress lines so far, for the partial summary

    def say(line: str) -> None:
        said.append(line)
        click.echo(line, err=True)

    recorder = None if report is None else ChaosRecorder()
    try:
        # run_chaos stops its children on SIGINT / SIGTERM itself (ChaosInterrupted); the
        # heartbeat covers the seconds between two kills.
        with heartbeat("chaos: running"):
            result = run_chaos(config, say=say, recorder=recorder)
    except ChaosInterrupted as error:
        click.echo(f"chaos: {error}", err=True)
        click.echo(
            f"chaos: STOPPED by {signal.Signals(error.signum).name} after {len(said)} progress"
            " lines (see above): no verdict, the run did not finish"
        )
        raise SystemExit(128 + error.signum) from None
    except ChaosError as error:
        fail(error)
    if report is not None and recorder is not None:
        try:
            write_report(report, recorder)
        except OSError as error:
            fail(f"--report {report}: cannot be written ({error.strerror})")
        click.echo(f"report: {report}", err=True)
    if as_json:
        print_json(result.model_dump(mode="json"))
    else:
        Console().print(_summary(result))
        for violation in result.violations:
            click.echo(f"violation: {violation}", err=True)
        if result.workdir is not None:
            click.echo(f"files and logs: {result.workdir}", err=True)
    raise SystemExit(0 if result.ok else 1)
