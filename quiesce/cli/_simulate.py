"""`quiesce simulate`: a simulated training run on the embedded in-memory fleet."""

from __future__ import annotations

import click

from quiesce.cli._output import fail


@click.command()
def simulate() -> None:
    """Run a simulated training run with checkpoints, faults and a crash (virtual clock)."""
    fail("simulate is not implemented yet (it lands with the adapters issue)", code=2)
