"""`quiesce check [MODEL] --swarm N [--ray [ADDRESS]]`: a bitstate swarm of walkers.

What lives here: `run_swarm` (the walkers here, or as Ray tasks; a Ray that cannot run is
a one-line error, exit 2) and `print_swarm` (the merged result: a stats table, the
properties, the rows never fired, the counterexamples). What it does not know: how a
walker walks (`quiesce.models.swarm`) or how `check` parses its options (`_check`).
"""

from __future__ import annotations

from collections.abc import Callable

import click
from rich.console import Console

from quiesce.check import Progress
from quiesce.cli._counterexample import print_story
from quiesce.cli._output import fail, print_json, print_stats
from quiesce.models import (
    SwarmRayError,
    SwarmRequest,
    SwarmResult,
    SwarmSettings,
    ray_runner,
    swarm,
)

__all__ = ["RAY_DEFAULT", "print_swarm", "run_swarm"]

RAY_DEFAULT = "default"
"""`--ray` without an address: wherever `ray.init()` finds a cluster (`RAY_ADDRESS`, one
started on this machine, or a new local one)."""

SHOWN_UNFIRED_ROWS = 10
"""The rows never fired that the human summary names (`--json` lists them all)."""


def run_swarm(
    request: SwarmRequest,
    settings: SwarmSettings,
    ray_address: str | None,
    progress: Callable[[Progress], None],
) -> SwarmResult:
    """Run the swarm: in this process when `ray_address` is None, else on Ray
    (`RAY_DEFAULT`: `ray.init()`'s own choice of cluster). Exits 2 naming the problem when
    Ray cannot run."""
    if ray_address is None:
        return swarm(request, settings, progress=progress)
    try:
        with ray_runner(None if ray_address == RAY_DEFAULT else ray_address) as runner:
            return swarm(request, settings, runner=runner, progress=progress)
    except SwarmRayError as error:  # raised connecting, before any walker runs
        fail(error)


def print_swarm(result: SwarmResult, title: str, mutant: str | None, *, as_json: bool) -> None:
    """The merged result on stdout (one JSON document with `as_json`), and on stderr what
    it does not prove."""
    s = result.settings
    click.echo(
        f"check: a swarm of {len(result.walkers)} walkers (seed {s.seed}) checked"
        f" {result.generated_states:,} states, about {result.distinct_estimate:,.0f} distinct:"
        " not a proof beyond them",
        err=True,
    )
    if result.saturated:
        click.echo(
            f"check: the merged bitstate is {result.bitstate.fill():.0%} full: the distinct"
            f" estimate is unreliable; raise --bitstate-bits (now {s.log2_bits})",
            err=True,
        )
    if as_json:
        document = result.to_json()
        document["mutant"] = mutant
        document["mode"] = "swarm"
        print_json(document)
        return
    click.echo(f"{title}, swarm")
    rows = result.rows
    fired = f"{len(rows.fired)}/{len(rows.tracked)}" if rows.tracked else "not recorded"
    print_stats(
        (
            ("walkers", f"{len(result.walkers):,}/{s.walkers:,}"),
            ("walks per walker", f"{s.walks:,} (depth <= {s.max_depth:,})"),
            ("states checked", f"{result.generated_states:,}"),
            ("distinct states (estimate)", f"{result.distinct_estimate:,.0f}"),
            ("bitstate fill", f"{result.bitstate.fill():.2%} of 2^{s.log2_bits} bits"),
            ("table rows fired", fired),
            ("rows dead by design", f"{len(rows.dead_by_design)}"),
            ("seconds", f"{result.seconds:.3f}"),
            ("CPU seconds (walkers)", f"{result.cpu_seconds:.3f}"),
            ("states/s per walker", f"{result.states_per_s_per_walker:,.0f}"),
        )
    )
    console = Console()
    failed = {v.property for v in result.violations}
    for prop in result.properties:
        mark = "[red]VIOLATED[/red]" if prop in failed else "[yellow]no violation seen[/yellow]"
        console.print(f"  {prop}: {mark}")
    if rows.not_fired:
        click.echo(f"rows never fired and not known dead by design: {len(rows.not_fired)}")
        for text in rows.not_fired[:SHOWN_UNFIRED_ROWS]:
            click.echo(f"  {text}")
        if len(rows.not_fired) > SHOWN_UNFIRED_ROWS:
            click.echo("  ... (--json lists them all)")
    for violation in result.violations:
        print_story(result.model, violation, shortest=False)
