"""`quiesce simulate`: a simulated training run on the embedded in-memory fleet.

Virtual clock, seeded: the same options and seed print the same result. Default output: a
progress bar per training step (stderr) and a summary table (stdout); `--json` prints the
one result document instead. Exit 0 when every invariant held, 1 otherwise, 2 on a usage
error.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table as RichTable

from quiesce.adapters import configure_logging
from quiesce.cli._output import fail, json_option, log_level_option, print_json
from quiesce.fsm import QuiesceError
from quiesce.harness import SimulationConfig, SimulationResult
from quiesce.harness import simulate as run

LEVELS = ("turn", "sibling", "prompt_group")


def _summary(result: SimulationResult) -> RichTable:
    table = RichTable(title=f"quiesce simulate (seed {result.seed})", show_header=True)
    table.add_column("what")
    table.add_column("value", justify="right")
    c, r = result.checkpoints, result.rollouts
    rows: list[tuple[str, Any]] = [
        ("training steps", result.steps),
        ("checkpoints completed / skipped / failed", f"{c.completed} / {c.skipped} / {c.failed}"),
        (
            "aborts / abort retries / release retries",
            f"{c.aborted} / {c.abort_retried} / {c.release_retried}",
        ),
        ("rollouts dispatched / completed", f"{r.dispatched} / {r.completed}"),
        ("items trained", r.trained),
        ("lost / duplicated", f"{r.lost} / {r.duplicated}"),
        (
            "redispatched (resumed at turn / rerun)",
            f"{r.redispatched} ({r.resumed_from_turn} / {r.rerun_from_scratch})",
        ),
        (
            "admission closed median / max (s)",
            f"{result.admission_closed_s.median:.3f} / {result.admission_closed_s.max:.3f}",
        ),
        (
            "faults injected / participant restarts",
            f"{result.faults_injected} / {result.participant_restarts}",
        ),
        ("controller crash at step", result.crashed_at_step if result.crashed_at_step else "-"),
        ("virtual seconds", f"{result.virtual_seconds:.2f}"),
        ("stopped", f"yes ({result.stop_reason})" if result.stopped else "no"),
        ("invariants", "ok" if result.invariants_ok else "VIOLATED"),
    ]
    for name, value in rows:
        table.add_row(name, str(value))
    return table


@click.command()
@click.option(
    "--steps", type=click.IntRange(min=1), default=8, show_default=True, help="Training steps."
)
@click.option(
    "--groups-per-step",
    type=click.IntRange(min=1),
    default=4,
    show_default=True,
    help="Prompt groups per training step.",
)
@click.option(
    "--group-size",
    type=click.IntRange(min=1),
    default=4,
    show_default=True,
    help="Siblings per prompt group (G).",
)
@click.option("--agents", type=click.IntRange(min=1), default=2, show_default=True)
@click.option("--policies", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--resources", type=click.IntRange(min=0), default=1, show_default=True)
@click.option(
    "--resources-mode",
    type=click.Choice(["export_restore", "stateless", "restart_only"]),
    default="export_restore",
    show_default=True,
    help="Recovery mode of the resources servers.",
)
@click.option(
    "--fault-rate",
    type=click.FloatRange(0.0, 1.0),
    default=0.0,
    show_default=True,
    help="Probability that any one control call suffers a fault.",
)
@click.option(
    "--crash-at-step",
    type=click.IntRange(min=1),
    default=None,
    help="Crash the controller after the first checkpoint at or after this step.",
)
@click.option(
    "--target-level",
    type=click.Choice(LEVELS),
    default="turn",
    show_default=True,
    help="rollout_recovery.target_level.",
)
@click.option("--group-scored", is_flag=True, help="Every environment scores whole groups.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option(
    "--snapshot-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Keep snapshots and controller state here (default: a fresh temp dir).",
)
@log_level_option("error")
@json_option
def simulate(
    steps: int,
    groups_per_step: int,
    group_size: int,
    agents: int,
    policies: int,
    resources: int,
    resources_mode: str,
    fault_rate: float,
    crash_at_step: int | None,
    target_level: str,
    group_scored: bool,
    seed: int,
    snapshot_dir: Path | None,
    log_level: str,
    as_json: bool,
) -> None:
    """Run a simulated training run with checkpoints, faults and a crash (virtual clock)."""
    configure_logging(log_level)
    try:
        config = SimulationConfig(
            steps=steps,
            groups_per_step=groups_per_step,
            group_size=group_size,
            agents=agents,
            policies=policies,
            resources=resources,
            resources_mode=resources_mode,
            fault_rate=fault_rate,
            crash_at_step=crash_at_step,
            target_level=target_level,
            group_scored=group_scored,
            seed=seed,
            snapshot_dir=snapshot_dir,
        )
    except ValueError as error:
        fail(str(error))
    try:
        if as_json:
            result = run(config)
        else:
            console = Console(stderr=True)
            with Progress(
                TextColumn("training"),
                BarColumn(),
                MofNCompleteColumn(),
                console=console,
                transient=True,
            ) as bar:
                task = bar.add_task("steps", total=steps)
                result = run(config, progress=lambda step: bar.update(task, completed=step))
    except QuiesceError as error:
        fail(error)
    if as_json:
        print_json(result.model_dump(mode="json"))
    else:
        Console().print(_summary(result))
        for violation in result.violations:
            click.echo(f"violation: {violation}", err=True)
    raise SystemExit(0 if result.invariants_ok else 1)
