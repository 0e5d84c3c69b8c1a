"""`quiesce mutants`: list the mutant catalog, or verify that every check can fail.

`quiesce mutants [--json]` lists every mutant. `quiesce mutants --verify` runs every
scenario mutant and a seeded sample of generated ones against its killing check (stopping
at the first violation); `--all` runs every generated one. Progress goes to stderr. Exit 1
if any scenario mutant survives.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from quiesce.cli._output import json_option, print_json
from quiesce.models import MUTANTS, Mutant, Verdict, sample_generated, verify


def _entry(mutant: Mutant) -> dict[str, Any]:
    return {
        "name": mutant.name,
        "kind": mutant.kind,
        "scenario": mutant.scenario,
        "killed_by": mutant.killed_by,
        "params": dict(mutant.params),
        "doc": mutant.doc,
    }


@click.command()
@click.option("--verify", "run", is_flag=True, help="Run each mutant against its killing check.")
@click.option("--all", "everything", is_flag=True, help="Verify every generated mutant too.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the sample.")
@click.option(
    "--sample",
    type=click.IntRange(min=0),
    default=50,
    show_default=True,
    help="Generated mutants to verify (without --all).",
)
@json_option
def mutants(run: bool, everything: bool, seed: int, sample: int, as_json: bool) -> None:
    """List the mutants, or (--verify) show that every check kills its mutant.

    \b
    quiesce mutants
    quiesce mutants --verify --json
    quiesce check --mutant S2_boolean_suspend --set train_switch=1
    """
    if not run:
        listed = [_entry(m) for m in MUTANTS.values()]
        if as_json:
            print_json({"mutants": listed})
        else:
            for m in MUTANTS.values():
                tag = m.scenario or "gen"
                click.echo(f"{tag:4s} {m.name:45s} killed by {m.killed_by}  {m.doc}")
        return
    scenario = [m for m in MUTANTS.values() if m.kind == "scenario"]
    generated = (
        [m for m in MUTANTS.values() if m.kind == "generated"]
        if everything
        else sample_generated(sample, seed)
    )
    verdicts: list[Verdict] = []
    for number, mutant in enumerate([*scenario, *generated], 1):
        verdict = verify(mutant)
        verdicts.append(verdict)
        state = "killed" if verdict.killed else "SURVIVED"
        click.echo(
            f"mutants: [{number}/{len(scenario) + len(generated)}] {mutant.name}: {state}"
            f" by {verdict.killed_by} ({verdict.states} states, {verdict.seconds:.1f}s)",
            err=True,
        )
    gen = [v for v in verdicts if v.mutant.kind == "generated"]
    rate = sum(v.killed for v in gen) / len(gen) if gen else 1.0
    survivors = [v.mutant.name for v in verdicts if v.mutant.kind == "scenario" and not v.killed]
    if as_json:
        print_json(
            {
                "mutants": [v.to_json() for v in verdicts],
                "kill_rate_generated": round(rate, 4),
                "scenario_survivors": survivors,
            }
        )
    else:
        for v in verdicts:
            mark = "killed  " if v.killed else "SURVIVED"
            click.echo(f"{mark} {v.mutant.name:45s} {v.killed_by or '-':12s} {v.detail[:80]}")
        click.echo(f"generated kill rate: {rate:.1%} of {len(gen)}")
    sys.exit(1 if survivors else 0)
