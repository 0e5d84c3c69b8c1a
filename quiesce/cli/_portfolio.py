"""`quiesce check --portfolio`: exhaust the scenario portfolio, one small configuration per
PROTOCOL.md §7 scenario (`quiesce.models.PORTFOLIO`).

Each distinct configuration is checked once; a line per configuration goes to stderr as
it ends. Result on stdout: one line per scenario (its configuration's states, or why it
has none) and a total, or one JSON document with `--json`. Exit 0
when every configuration is exhausted without a violation, 1 otherwise.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any, NoReturn

import click

from quiesce.check import CheckResult
from quiesce.cli._output import print_json
from quiesce.models import run_portfolio


def _show(params: Mapping[str, Any], result: CheckResult[Any]) -> None:
    # prepare_retries is 1 throughout: naming it on every line adds nothing.
    sizes = ", ".join(f"{k}={v}" for k, v in params.items() if k != "prepare_retries")
    verdict = "ok" if result.ok and result.complete else "FAILED"
    click.echo(
        f"portfolio: {result.distinct_states:,} states in {result.seconds:.1f}s, {verdict}"
        f" ({sizes})",
        err=True,
    )


def check_portfolio(as_json: bool) -> NoReturn:
    """Run the portfolio, print its result, and exit with its verdict."""
    run = run_portfolio(on_result=_show)
    if as_json:
        print_json(run.to_json())
    else:
        for entry in run.entries:
            result = run.result_of(entry)
            if result is None:
                click.echo(f"{entry.scenario:4s} no configuration: {entry.note}")
                continue
            failed = [v.property for v in result.violations]
            verdict = f"VIOLATED {', '.join(failed)}" if failed else "holds"
            click.echo(
                f"{entry.scenario:4s} {result.distinct_states:>8,} states  {verdict:8s}"
                f"  {entry.exhibits}"
            )
        total = sum(r.distinct_states for _, r in run.results)
        click.echo(
            f"portfolio: {len(run.results)} configurations, {total:,} states,"
            f" {run.seconds:.1f}s: {'ok' if run.ok else 'FAILED'}"
        )
    sys.exit(0 if run.ok else 1)
