"""`quiesce mutants`: list the mutant catalog, or verify that every check can fail.

`quiesce mutants [--json]` lists the catalog: each scenario mutant with the check meant to
kill it, the generated ones grouped by table and operator (`--all`: one line each, each
named by its row and change, `quiesce/mutants/_names.py`). Nothing is run, so nothing is
called killed. `quiesce mutants --verify` runs every scenario mutant
and a seeded sample of generated ones against its killing check (stopping at the first
violation); `--all` runs every generated one. A generated mutant is judged by row coverage
first: `equivalent` and `dead_by_design` ones are reported apart, with the reason, and are
not survivors; the rest run the stages that reach their row (`killed` / `survived`). The
mutants run on `--jobs` processes. Progress goes to stderr; the verdicts of what ran and a
summary (per kind and status, the generated kill rate over the non-equivalent ones) to
stdout. Exit 1 if any scenario mutant survives; 130 / 143 when stopped by Ctrl-C / SIGTERM
(after the verdicts so far).
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from typing import Any

import click

from quiesce.check import get_model_spec
from quiesce.cli._output import fail, heartbeat, json_option, one_line, print_json
from quiesce.cli._signals import Stopped, stop_on_signals
from quiesce.cli._values import Name
from quiesce.fsm import QuiesceError
from quiesce.mutants import MUTANTS, Mutant, Verdict, sample_generated, survivor_note, verify_many

KINDS = ("scenario", "generated")
STATUSES = ("killed", "survived", "equivalent", "dead_by_design")


def _entry(mutant: Mutant) -> dict[str, Any]:
    return {
        "name": mutant.name,
        "kind": mutant.kind,
        "scenario": mutant.scenario,
        "killed_by": mutant.killed_by,
        "params": dict(mutant.params),
        "doc": mutant.doc,
    }


def _family(mutant: Mutant) -> str:
    """The table and operator of a generated mutant, as its name's pattern (a generated
    mutant is named by its row, `TABLE:SOURCES:INPUT[:GUARD]`, and its change,
    `.drop_guard` or `.retarget=STATE`: `quiesce/mutants/_names.py`)."""
    assert mutant.site is not None  # every generated mutant names its site
    change = "retarget=<state>" if mutant.site.operator == "retarget" else "drop_guard"
    return f"{mutant.site.table.name}:<row>.{change}"


@click.command()
@click.option("--verify", "run", is_flag=True, help="Run each mutant against its killing check.")
@click.option(
    "--all",
    "everything",
    is_flag=True,
    help="Every generated mutant: one line each in the list; with --verify, run them all.",
)
@click.option(
    "--model",
    "model_name",
    type=Name(),
    help="List only the mutants `quiesce check MODEL --mutant NAME` takes, with what each breaks.",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the sample.")
@click.option(
    "--sample",
    type=click.IntRange(0, len(MUTANTS)),
    default=50,
    show_default=True,
    help="Generated mutants to verify (without --all).",
)
@click.option(
    "--jobs",
    type=click.IntRange(1, 64),
    default=os.cpu_count() or 1,
    show_default="the number of CPUs",
    help="Processes verifying mutants at once.",
)
@json_option
def mutants(
    run: bool,
    everything: bool,
    model_name: str | None,
    seed: int,
    sample: int,
    jobs: int,
    as_json: bool,
) -> None:
    """List the mutants, or (--verify) show that every check kills its mutant.

    \b
    quiesce mutants
    quiesce mutants --model design
    quiesce mutants --verify --json
    quiesce mutants --verify --all --jobs 2
    quiesce check --mutant S2_boolean_suspend --set train_switch=1
    quiesce check --mutant checkpoint:abort_pending:trigger.retarget=committing --set triggers=2

    A generated mutant is named by the row it changes, TABLE:SOURCES:INPUT[:GUARD], and
    the change, .drop_guard or .retarget=STATE (SOURCES: one state, a+b, any, or any-a
    for every state but a).
    """
    if model_name is not None:
        if run or everything:
            raise click.UsageError("--model lists a model's mutants: it takes no --verify, --all")
        _list_model(model_name, as_json)
        return
    if not run:
        _list(everything, as_json)
        return
    scenario = [m for m in MUTANTS.values() if m.kind == "scenario"]
    generated = (
        [m for m in MUTANTS.values() if m.kind == "generated"]
        if everything
        else sample_generated(sample, seed)
    )
    chosen = [*scenario, *generated]
    verdicts: list[Verdict] = []
    stopped: Stopped | None = None
    try:
        with stop_on_signals(), heartbeat("mutants: verifying"):
            for number, verdict in enumerate(verify_many(chosen, jobs), 1):
                verdicts.append(verdict)
                state = f"killed by {verdict.killed_by}" if verdict.killed else verdict.status
                click.echo(
                    f"mutants: [{number}/{len(chosen)}] {verdict.mutant.name}: {state}"
                    f" ({verdict.states} states, {verdict.seconds:.1f}s)",
                    err=True,
                )
    except Stopped as stop:
        stopped = stop
        click.echo(f"mutants: {stop} after {len(verdicts)} of {len(chosen)}", err=True)
    summary = _summary(verdicts, not_run=len(MUTANTS) - len(verdicts))
    survivors = [v.mutant.name for v in verdicts if v.mutant.kind == "scenario" and not v.killed]
    if as_json:
        document: dict[str, Any] = {
            "mutants": [v.to_json() for v in verdicts],
            "kill_rate_generated": summary["kill_rate_generated"],
            "scenario_survivors": survivors,
            "generated_survivors": _generated_survivors(verdicts),
            "summary": summary,
        }
        if stopped is not None:
            document["interrupted"] = stopped.signal.name
        print_json(document)
    else:
        for v in verdicts:
            mark = "killed" if v.killed else v.status.upper()
            detail = one_line(v.detail)[:80]
            click.echo(f"{mark:14s} {v.mutant.name:45s} {v.killed_by or '-':10s} {detail}")
        click.echo(_summary_line(summary))
    if stopped is not None:
        sys.exit(stopped.exit_code)
    sys.exit(1 if survivors else 0)


def _generated_survivors(verdicts: list[Verdict]) -> list[dict[str, str]]:
    """Each generated mutant that a reaching stage ran without killing, with why it may."""
    return [
        {"name": v.mutant.name, "detail": v.detail, "note": survivor_note(v.mutant.name)}
        for v in verdicts
        if v.mutant.kind == "generated" and v.status == "survived"
    ]


def _list(everything: bool, as_json: bool) -> None:
    """The catalog, without running anything: each mutant with the check meant to kill it."""
    catalog = list(MUTANTS.values())
    counts = Counter[str](m.kind for m in catalog)
    if as_json:
        summary = {"listed": len(catalog), "by_kind": {k: counts[k] for k in KINDS}, "run": 0}
        print_json({"mutants": [_entry(m) for m in catalog], "summary": summary})
        return
    for m in catalog:
        if m.kind == "scenario" or everything:
            tag = m.scenario or "gen"
            click.echo(f"{tag:4s} {m.name:45s} checked by {m.killed_by}  {m.doc}")
    if not everything:
        families = Counter((_family(m), m.killed_by) for m in catalog if m.kind == "generated")
        for (family, killer), count in families.items():
            many = f"{count} mutant{'s' if count > 1 else ''}"
            click.echo(f"gen  {family:45s} {many}, checked by {killer} (--all: each)")
    click.echo(
        f"{counts['scenario']} scenario and {counts['generated']} generated mutants;"
        " none was run here: `quiesce mutants --verify` runs them"
    )


def _list_model(model_name: str, as_json: bool) -> None:
    """The mutants `quiesce check MODEL --mutant NAME` takes, each with what it breaks."""
    try:
        spec = get_model_spec(model_name)
    except QuiesceError as error:
        fail(error)
    if as_json:
        print_json({"model": model_name, "mutants": dict(spec.mutants)})
        return
    for name, doc in spec.mutants.items():
        click.echo(f"{name:45s} {one_line(doc)}")
    first = next(iter(spec.mutants), None)
    try_one = f": `quiesce check {model_name} --mutant {first}` checks the first" if first else ""
    click.echo(f"{len(spec.mutants)} mutants of {model_name}{try_one}")


def _summary(verdicts: list[Verdict], not_run: int) -> dict[str, Any]:
    """Each status's count among the mutants that ran, in all and per kind, and the
    generated kill rate over the non-equivalent mutants (dead by design counts as not
    killed) and over the reached ones (killed or survived)."""

    def tally(kind: str | None) -> dict[str, int]:
        ran = [v for v in verdicts if kind is None or v.mutant.kind == kind]
        statuses = Counter[str](v.status for v in ran)
        return {"run": len(ran), **{status: statuses[status] for status in STATUSES}}

    generated = tally("generated")
    killed = generated["killed"]
    non_equivalent = generated["run"] - generated["equivalent"]
    reached = killed + generated["survived"]
    return {
        **tally(None),
        "not_run": not_run,
        "by_kind": {kind: tally(kind) for kind in KINDS},
        "kill_rate_generated": round(killed / non_equivalent, 4) if non_equivalent else 1.0,
        "kill_rate_reached": round(killed / reached, 4) if reached else 1.0,
    }


def _summary_line(summary: dict[str, Any]) -> str:
    per_kind = "; ".join(
        f"{kind}: " + ", ".join(f"{counts[s]} {s}" for s in STATUSES if counts[s])
        for kind, counts in summary["by_kind"].items()
        if counts["run"]
    )
    return (
        f"{summary['run']} run ({per_kind}); generated kill rate"
        f" {summary['kill_rate_generated']:.0%} of the non-equivalent,"
        f" {summary['kill_rate_reached']:.0%} of the reached; {summary['not_run']} not run"
    )
