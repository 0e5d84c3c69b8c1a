"""`quiesce conform`: check a running participant server against the protocol.

Drives the server at `--url` with hypothesis-generated request sequences and judges every
reply against the reference participant (`quiesce.testing`, docs/wire.md, PROTOCOL.md §1
M2-M5). Result on stdout: `PASS`/`FAIL` with the counts and, on failure, the shortest
failing sequence as numbered HTTP requests with the expected and actual reply (one JSON
document with `--json`). Exit 0: conforms; 1: a violation; 2: a usage error or a server
that cannot be reached or has another role.

The examples share the one server: each starts by bringing it back to an idle fence (see
`quiesce/testing/_kit.py`), so nothing else may use the server during the run, and an agent
must not run executions on its own (`quiesce serve --no-work`, or pass `--no-executions`).
With `--reset-url` each example starts from a fresh participant instead, and a failing
sequence is shrunk; without it the failing sequence is printed as found, with the reason.
With `--restart-cmd` the kit also kills and restarts the server between requests and checks
§6: the journal gives back what was replied before the kill, under a new incarnation.

Every run reports its row coverage: which rows of M2 and the role's table (M3, M4 or M5) the
reference participant fired while judging the replies, the live rows not fired, and the rows
dead by design (with the reason). `--min-coverage PCT` fails a run that fired fewer.

A server that knowingly differs declares it: `--deviation RULE[:SHAPE]` (repeatable) or
`--deviations-file`; a declared deviation is tolerated where it occurs and counted, and the
search goes on. One run reports every distinct failing rule it finds, up to
`--max-failures` (default 5), each shrunk on its own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from quiesce.cli._output import fail, heartbeat, json_option, print_json
from quiesce.cli._paths import InputFile
from quiesce.cli._serve import read_token
from quiesce.cli._signals import stop_requested, stopped_in
from quiesce.cli._values import FiniteFloatRange, HttpUrl, Name, ShellCommand
from quiesce.protocol.wire import Role
from quiesce.testing import (
    ConformanceSetupError,
    ConformanceStopped,
    UnknownDeviation,
    check_conformance,
    parse_deviation,
    read_deviations,
)

__all__ = ["conform"]


class DeviationText(Name):
    """A `--deviation`: `RULE[:SHAPE]` with RULE a rule id the kit reports, refused as a
    usage error (naming the valid rules) before any request is sent."""

    name = "deviation"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        text = super().convert(value, param, ctx)
        try:
            parse_deviation(text)
        except UnknownDeviation as error:
            self.fail(str(error), param, ctx)
        return text


@click.command()
@click.option(
    "--url",
    type=HttpUrl(),
    required=True,
    help="Base URL of the server, e.g. http://127.0.0.1:8700.",
)
@click.option(
    "--role", type=click.Choice([r.value for r in Role]), required=True, help="The server's role."
)
@click.option(
    "--token-file",
    type=InputFile(),
    default=None,
    help="File holding the bearer token (default: $QUIESCE_TOKEN).",
)
@click.option(
    "--examples",
    type=click.IntRange(1, 1_000_000),
    default=100,
    show_default=True,
    help="Sequences.",
)
@click.option(
    "--steps",
    type=click.IntRange(1, 10_000),
    default=25,
    show_default=True,
    help="Operations each.",
)
@click.option("--seed", type=int, default=None, help="Seed of the generated sequences.")
@click.option(
    "--executions/--no-executions",
    default=True,
    show_default=True,
    help="Drive agent executions (begin/boundary/finish); --no-executions for an agent that "
    "runs its own rollouts.",
)
@click.option(
    "--timeout",
    type=FiniteFloatRange(0.1, 3600),
    default=10.0,
    show_default=True,
    help="Seconds to wait for each reply.",
)
@click.option(
    "--reset-url",
    type=HttpUrl(),
    default=None,
    help="URL the kit POSTs (with the bearer token) before each sequence to get a fresh "
    "participant; without it a failing sequence cannot be shrunk.",
)
@click.option(
    "--restart-cmd",
    type=ShellCommand(),
    default=None,
    help="Shell command that kills the server and starts it again on the same URL and "
    "state (exit 0 once it answers); the kit then checks durability (§6) across restarts.",
)
@click.option(
    "--min-coverage",
    type=FiniteFloatRange(0, 100),
    default=0.0,
    show_default=True,
    metavar="PCT",
    help="Fail the run (exit 1, listing the rows not fired) if it fired fewer than PCT "
    "percent of the role's live table rows (M2 and M3, M4 or M5).",
)
@click.option(
    "--deviation",
    "deviations",
    type=DeviationText(),
    multiple=True,
    metavar="RULE[:SHAPE]",
    help="A difference the server knowingly has (a rule id of the report, optionally where: "
    "an operation, a race shape such as prepare|resume|retire, or part of a row such as "
    "prepare_not_ready): tolerated where it occurs, counted, and the search goes on. "
    "Repeatable.",
)
@click.option(
    "--deviations-file",
    type=InputFile(),
    default=None,
    help="File of deviations, one RULE[:SHAPE] a line (# comments).",
)
@click.option(
    "--max-failures",
    type=click.IntRange(1, 100),
    default=5,
    show_default=True,
    help="Report up to this many distinct failing rules, each shrunk on its own.",
)
@json_option
def conform(
    url: str,
    role: str,
    token_file: Path | None,
    examples: int,
    steps: int,
    seed: int | None,
    executions: bool,
    timeout: float,
    reset_url: str | None,
    restart_cmd: str | None,
    min_coverage: float,
    deviations: tuple[str, ...],
    deviations_file: Path | None,
    max_failures: int,
    as_json: bool,
) -> None:
    """Check that the participant server at --url follows the protocol (docs/wire.md)."""
    token = read_token(token_file)
    try:
        declared = tuple(parse_deviation(d) for d in deviations)
        if deviations_file is not None:
            from_file = read_deviations(deviations_file)
            if not from_file:
                fail(
                    f"--deviations-file {deviations_file} declares no deviation; write one "
                    "RULE[:SHAPE] a line, or drop the option"
                )
            declared += from_file
    except UnknownDeviation as error:
        fail(error)
    except UnicodeDecodeError:
        fail(f"--deviations-file {deviations_file} is not UTF-8 text")
    except OSError as error:
        fail(f"cannot read --deviations-file {deviations_file}: {error.strerror}")
    try:
        with stop_requested() as request, heartbeat(f"conform: checking {url}"):
            result = check_conformance(
                url,
                role,
                token,
                examples=examples,
                steps=steps,
                seed=seed,
                executions=executions,
                timeout=timeout,
                reset=reset_url,
                restart=restart_cmd,
                min_coverage=min_coverage,
                stop=request.event,
                deviations=declared,
                max_failures=max_failures,
            )
    except ConformanceSetupError as error:
        fail(error)
    except BaseException as error:
        stop = request.stopped() if isinstance(error, ConformanceStopped) else stopped_in(error)
        if stop is None:
            raise
        click.echo(f"conform: {stop}: no verdict", err=True)
        click.echo(f"STOPPED by {stop.signal.name}: {url} was not judged (the run did not finish)")
        raise SystemExit(stop.exit_code) from None
    if as_json:
        print_json(result.to_json())
    else:
        click.echo(result.report())
    if not result.ok:
        raise SystemExit(1)
