"""`quiesce explore`: step through a model in a web page (served, or saved with `--html`).

The page opens on a path: the counterexample of `--mutant` (found by a check, or by
`--walks N` random walks for a model too big to exhaust), the one in a `--trace` file
(the JSON `quiesce check --json` prints), or just the initial state. Served, it binds
127.0.0.1 only and prints its URL on stdout; `--html FILE` writes the same page as one
self-contained file (no network), which follows its path but cannot step off it.
Exit 2: a usage error (unknown model, bad `--set`, a trace that does not replay).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click

from quiesce.check import Model, Trace, Violation, build_model, check, walk
from quiesce.cli._check import DEFAULT_MODEL
from quiesce.cli._output import fail
from quiesce.cli._paths import InputFile, OutputFile
from quiesce.cli._values import Name, Setting
from quiesce.explore import Session, TraceFile, read_trace, render_page, serve
from quiesce.fsm import QuiesceError

__all__ = ["explore"]


@click.command()
@click.argument("model_name", metavar="[MODEL]", type=Name(), required=False)
@click.option("--set", "settings", multiple=True, type=Setting(), help="A model parameter.")
@click.option(
    "--mutant", type=Name(), help="Open the counterexample of a variant that reintroduces a bug."
)
@click.option(
    "--walks",
    type=click.IntRange(1, 1_000_000),
    help="Find the counterexample by N seeded random walks instead of a full check.",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of --walks.")
@click.option("--max-states", type=click.IntRange(1, 100_000_000), help="Bound the full check.")
@click.option(
    "--trace",
    "trace_path",
    type=InputFile(),
    help="Open this counterexample: the JSON of `quiesce check --json` (or one violation).",
)
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=0,
    show_default=True,
    help="Port on 127.0.0.1 (0: a free one).",
)
@click.option(
    "--html",
    "html_path",
    type=OutputFile(),
    help="Write the page as one self-contained HTML file instead of serving it.",
)
def explore(
    model_name: str | None,
    settings: tuple[tuple[str, str], ...],
    mutant: str | None,
    walks: int | None,
    seed: int,
    max_states: int | None,
    trace_path: Path | None,
    port: int,
    html_path: Path | None,
) -> None:
    """Step through MODEL (default: design) in a web page: its tables' diagrams with the
    current states, the enabled actions, the path, the properties and the rows covered.

    \b
    quiesce explore two-phase --mutant commit_without_message
    quiesce explore --mutant S17_retire_releases_completed --walks 200 --html s17.html
    quiesce check two-phase --mutant commit_without_message --json > cex.json
    quiesce explore --trace cex.json
    """
    if trace_path is not None and (walks is not None or max_states is not None):
        raise click.UsageError("--trace takes neither --walks nor --max-states")
    try:
        recorded = None if trace_path is None else read_trace(trace_path)
        name, parsed, mutant = _which_model(model_name, dict(settings), mutant, recorded)
        model = build_model(name, parsed, mutant=mutant)
        if recorded is not None:
            path: Trace[Any] | Violation[Any] | None = recorded.replay(model)
            origin = f"the trace in {trace_path}"
        elif mutant is not None or walks is not None:
            path, origin = _search(model, walks, seed, max_states)
        else:
            path, origin = None, "from the initial state"
    except QuiesceError as error:
        fail(error)
    session = Session(model, path, mutant=mutant, origin=origin)
    if html_path is not None:
        html_path.parent.mkdir(parents=True, exist_ok=True)
        html_path.write_text(render_page(session.document(served=False)), encoding="utf-8")
        click.echo(str(html_path))
        return
    click.echo("explore: serving until Ctrl-C", err=True)
    try:
        serve(session, port=port, on_ready=click.echo)
    except OSError as error:  # the port is taken, or not ours to bind
        fail(f"cannot serve on 127.0.0.1:{port}: {error.strerror}; pick another --port (0: any)")


def _which_model(
    name: str | None,
    settings: dict[str, str],
    mutant: str | None,
    recorded: TraceFile | None,
) -> tuple[str, dict[str, str], str | None]:
    """The model to build: the command line's, else the one the trace file was checked on."""
    if name is not None or recorded is None or recorded.model is None:
        # The same default as `quiesce check`: the page draws the tables the model composes.
        return name or DEFAULT_MODEL, settings, mutant
    params: Mapping[str, Any] = recorded.params or {}
    texts = {
        key: str(value).lower() if isinstance(value, bool) else str(value)
        for key, value in params.items()
    }
    return recorded.model, {**texts, **settings}, mutant or recorded.mutant


def _search(
    model: Model[Any], walks: int | None, seed: int, max_states: int | None
) -> tuple[Violation[Any] | None, str]:
    """The first counterexample of `model`, and a line saying how it was looked for."""
    if walks is not None:
        how = f"{walks} random walks (seed {seed})"
        result = walk(model, walks=walks, seed=seed)
    else:
        how = "a full check" if max_states is None else f"a check of {max_states} states"
        click.echo(f"explore: looking for a counterexample by {how} (--walks N samples)", err=True)
        result = check(model, max_states=max_states)
    if not result.violations:
        click.echo(f"explore: {how} found no violation; opening the initial state", err=True)
        return None, f"{how} found no violation"
    return result.violations[0], f"counterexample found by {how}"
