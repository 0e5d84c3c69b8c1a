"""`quiesce cover`: replay a shortest trace of every design step on the pure `System`.

The design model is exhausted at the size of a small protocol configuration (default:
`COVER_PARAMS`, `--set key=value` changes it like `quiesce check protocol --set`); for
every distinct design step label a shortest trace taking it is replayed on the System
the protocol model drives, its fences compared with the design's at every step
(`quiesce.models` `transition_cover`). Result on stdout: the counts (step labels covered,
replayed, abstracted with the reason, mismatched) and every mismatch with the step it
stopped at and both projections (one JSON document with `--json`).

Exit codes: 0 every step label replays or is a listed abstraction; 1 a mismatch; 2 a usage
error (one line naming the bad value).
"""

from __future__ import annotations

import dataclasses
import sys

import click

from quiesce.cli._output import fail, json_option, print_json
from quiesce.cli._values import Setting
from quiesce.fsm import QuiesceError
from quiesce.models import (
    COVER_PARAMS,
    PROTOCOL_SPEC,
    CoverReport,
    ProtocolParams,
    ReplayOutcome,
    transition_cover,
)

__all__ = ["cover"]


def _params(settings: tuple[tuple[str, str], ...], faults: int | None) -> ProtocolParams:
    """`COVER_PARAMS` with the settings given (parsed and checked as `quiesce check` does)."""
    given = dict(settings)
    parsed = PROTOCOL_SPEC.parse(given)
    changes = {key: parsed[key] for key in given}
    if faults is not None:
        changes["faults"] = faults
    return dataclasses.replace(COVER_PARAMS, **changes)


def _summary(report: CoverReport) -> str:
    return (
        f"{len(report.replays)} design step labels covered (the design: "
        f"{report.design_states:,} states): {report.count(ReplayOutcome.REPLAYED)} replayed "
        f"on the System, {report.count(ReplayOutcome.ABSTRACTED)} abstracted, "
        f"{report.count(ReplayOutcome.MISMATCH)} mismatched ({report.system_states:,} System "
        "states stepped)"
    )


@click.command()
@click.option("--set", "settings", multiple=True, type=Setting(), help="A protocol parameter.")
@click.option(
    "--faults", type=click.IntRange(0, 3), help="Fault budget (default 1; 2 takes about 90 s CPU)."
)
@json_option
def cover(settings: tuple[tuple[str, str], ...], faults: int | None, as_json: bool) -> None:
    """Replay a shortest trace of every design step label on the pure System.

    The design model is exhausted at the configuration's size (default: one sibling, one
    turn, one trigger, fault budget 1, crashes on); each trace is followed by the real
    controller and participants, their fences compared with the design's at every step.

    \b
    Exit codes:
      0  every step label replayed, or is an abstraction listed with its reason
      1  a step of some trace could not be reproduced (named, with both projections)
      2  usage error
    """
    try:
        report = transition_cover(_params(settings, faults))
    except (QuiesceError, ValueError) as error:
        fail(str(error))  # a bad --set value, or a size the design model refuses
    if as_json:
        print_json(report.describe())
    else:
        click.echo(("OK, " if report.ok else "MISMATCH: ") + _summary(report))
        for replay in report.replays:
            if replay.outcome is not ReplayOutcome.REPLAYED:
                click.echo(replay.explain())
    sys.exit(0 if report.ok else 1)
