"""`quiesce check`: exhaustive model checking of a registered model, or (`--walks N`)
seeded random walks through it, for a model too big to exhaust.

Result on stdout (a stats table and numbered counterexample steps, or one JSON document
with `--json`); progress lines on stderr. Exit 0: every property holds; 1: a violation;
2: a usage error (unknown model, bad `--set`, an option the model does not take).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table as RichTable

from quiesce.cli._output import fail, json_option, print_json
from quiesce.fsm import QuiesceError
from quiesce.models import (
    CheckResult,
    Model,
    Progress,
    Violation,
    build_model,
    mermaid_sequence,
    walk,
)
from quiesce.models import (
    check as explore,
)

DEFAULT_MODEL = "protocol"


def _parse_settings(pairs: tuple[str, ...]) -> dict[str, str]:
    settings: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise click.UsageError(f"--set expects key=value, not {pair!r}")
        settings[key.strip()] = value.strip()
    return settings


def _log_progress(report: Progress) -> None:
    rate = report.distinct_states / report.seconds if report.seconds > 0 else 0.0
    click.echo(
        f"check: {report.distinct_states} distinct, {report.generated_states} generated, "
        f"frontier {report.frontier}, {rate:,.0f} states/s",
        err=True,
    )


def _log_walk_progress(report: Progress) -> None:
    click.echo(
        f"check: {report.distinct_states} distinct states visited, {report.generated_states}"
        f" steps, {report.frontier} walks left, {report.seconds:.0f}s",
        err=True,
    )


@click.command()
@click.argument("model_name", metavar="[MODEL]", required=False)
@click.option("--set", "settings", multiple=True, metavar="KEY=VALUE", help="A model parameter.")
@click.option("--faults", type=click.IntRange(min=0), help="Fault budget (models with faults).")
@click.option("--mutant", help="Check a named variant that reintroduces a known bug.")
@click.option("--symmetry", is_flag=True, help="Identify states equal up to symmetry.")
@click.option("--max-states", type=click.IntRange(min=1), help="Stop after N distinct states.")
@click.option(
    "--walks",
    type=click.IntRange(min=1),
    help="Take N seeded random walks instead of exploring every state (deep, not complete).",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of --walks.")
@click.option(
    "--max-depth",
    type=click.IntRange(min=1),
    default=500,
    show_default=True,
    help="Longest random walk (--walks).",
)
@click.option(
    "--trace-out",
    type=click.Path(file_okay=False, path_type=Path),
    help="Write each counterexample per table (engine --trace format) plus a Mermaid diagram.",
)
@json_option
def check(
    model_name: str | None,
    settings: tuple[str, ...],
    faults: int | None,
    mutant: str | None,
    symmetry: bool,
    max_states: int | None,
    walks: int | None,
    seed: int,
    max_depth: int,
    trace_out: Path | None,
    as_json: bool,
) -> None:
    """Explore every reachable state of MODEL (default: protocol) and check its properties.

    \b
    quiesce check two-phase --set rms=3
    quiesce check two-phase --mutant commit_without_message --trace-out traces/
    quiesce check --walks 2000 --seed 1
    """
    name = model_name or DEFAULT_MODEL
    if walks is not None and (symmetry or max_states is not None):
        raise click.UsageError("--walks takes neither --symmetry nor --max-states")
    try:
        model = build_model(name, _parse_settings(settings), faults=faults, mutant=mutant)
    except QuiesceError as error:
        fail(error)
    if walks is not None:
        result = walk(
            model, walks=walks, max_depth=max_depth, seed=seed, progress=_log_walk_progress
        )
        click.echo(
            f"check: {walks} random walks (seed {seed}) visited {result.distinct_states} states:"
            " not a proof beyond them",
            err=True,
        )
    else:
        if name == DEFAULT_MODEL and not settings and faults is None and max_states is None:
            click.echo(
                "check: the protocol at the §8 reference size has well over 10^7 states and"
                " will not finish in minutes (README, 'Model checking'): bound it with"
                " --max-states N, or sample it deeply with --walks N",
                err=True,
            )
        result = explore(model, max_states=max_states, symmetry=symmetry, progress=_log_progress)
    if result.truncated and walks is None:
        click.echo(
            f"check: stopped at --max-states {max_states}: the state space was not exhausted",
            err=True,
        )
    if trace_out is not None:
        _write_traces(model, result, trace_out)
    if as_json:
        document = result.to_json()
        document["mutant"] = mutant
        document["mode"] = "exhaustive" if walks is None else "walks"
        if walks is not None:
            document["walks"] = {"walks": walks, "seed": seed, "max_depth": max_depth}
        print_json(document)
    else:
        _print_human(result, mutant, shortest=walks is None)
    sys.exit(1 if result.violations else 0)


def _write_traces(model: Model[Any], result: CheckResult[Any], directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for violation in result.violations:
        for table in model.tables():
            steps = model.project(violation.trace, table)
            path = directory / f"{violation.property}.{table}.json"
            path.write_text(json.dumps(steps, indent=2) + "\n")
        diagram = mermaid_sequence(model, violation.trace, title=violation.property)
        (directory / f"{violation.property}.sequence.mmd").write_text(diagram)
    if result.violations:
        click.echo(f"check: counterexamples written to {directory}", err=True)


def _print_human(result: CheckResult[Any], mutant: str | None, *, shortest: bool) -> None:
    console = Console()
    params = ", ".join(f"{k}={v}" for k, v in result.model.params.items())
    title = f"{result.model.name} ({params})" + (f" mutant {mutant}" if mutant else "")
    stats = RichTable(title=title, title_justify="left")
    stats.add_column("measure")
    stats.add_column("value", justify="right")
    for measure, value in (
        ("distinct states", f"{result.distinct_states:,}"),
        ("generated states", f"{result.generated_states:,}"),
        ("depth", str(result.depth)),
        ("seconds", f"{result.seconds:.3f}"),
        ("states/s", f"{result.states_per_s:,.0f}"),
        ("symmetry", "on" if result.symmetry else "off"),
        ("truncated", "yes" if result.truncated else "no"),
    ):
        stats.add_row(measure, value)
    console.print(stats)
    failed = {v.property for v in result.violations}
    for prop in result.properties:
        if prop in failed:
            mark = "[red]VIOLATED[/red]"
        elif result.complete:
            mark = "[green]holds[/green]"
        else:
            mark = "[yellow]no violation in the states explored[/yellow]"
        console.print(f"  {prop}: {mark}")
    for violation in result.violations:
        _print_violation(console, result.model, violation, shortest)


def _print_violation(
    console: Console, model: Model[Any], violation: Violation[Any], shortest: bool
) -> None:
    trace = violation.trace
    which = "shortest trace" if shortest else "trace of a random walk"
    console.print(
        f"\n[bold red]{violation.property}[/bold red] violated ({violation.kind}), "
        f"{which}: {len(trace)} steps"
    )

    def show(state: Any) -> str:
        return json.dumps(model.describe_state(state), separators=(",", ":"), default=str)

    # Plain echo: one step per line, never wrapped, easy to grep and diff.
    click.echo(f"  0. initial  {show(trace.initial)}")
    for number, step in enumerate(trace.steps, 1):
        fault = " [fault]" if step.fault else ""
        click.echo(f"  {number}. {step.label}{fault}  {show(step.state)}")
    if trace.loop_from is not None:
        click.echo(f"  ... back to state {trace.loop_from}, forever")
