"""`quiesce check`: exhaustive model checking of a registered model, or (`--walks N`)
seeded random walks through it, for a model too big to exhaust, or (`--swarm N`) a swarm
of coverage-directed bitstate walkers, here or on Ray (`--ray [ADDRESS]`, `_swarm`).

Result on stdout (a one-line title, a stats table and numbered counterexample steps, or
one JSON document with `--json`); a live progress line on stderr. Exit 0: every property
holds; 1: a violation; 2: a usage error (unknown model or mutant, bad `--set`, an option
the model does not take); 130 / 143: stopped by Ctrl-C / SIGTERM, after printing what was
explored.
"""

from __future__ import annotations

import shutil
import sys
import time
from collections.abc import Callable, Mapping
from contextlib import nullcontext
from functools import partial
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from quiesce.check import CheckResult, Model, Progress, build_model, get_model_spec, walk
from quiesce.check import check as explore
from quiesce.cli._counterexample import print_story, write_traces
from quiesce.cli._output import fail, heartbeat, json_option, print_json, print_stats
from quiesce.cli._paths import OutputDir
from quiesce.cli._portfolio import check_portfolio
from quiesce.cli._signals import Stopped, stop_on_signals
from quiesce.cli._swarm import RAY_DEFAULT, print_swarm, run_swarm
from quiesce.cli._values import Name, Setting, unknown_name
from quiesce.fsm import QuiesceError
from quiesce.models import DEFAULT_BITSTATE_BITS, SwarmRequest, SwarmResult, SwarmSettings, refine

DEFAULT_MODEL = "design"
"""`quiesce check` with no MODEL checks the design (PROTOCOL.md §8, "Two levels of model"):
at the reference size it completes in well under a minute."""
IMPLEMENTATION_MODEL = "protocol"
"""The implementation-level model: at its reference size it does not finish."""

PROGRESS_INTERVAL_S = 1.0
"""The progress line on stderr is refreshed about this often."""

# How often the explorer reports to the CLI, which throttles by time: the protocol model
# explores ~500 states/s, so a report every 100 states keeps the line live.
_REPORT_EVERY_STATES = 100
_REPORT_EVERY_WALKS = 1


class _LiveProgress:
    """Keeps the latest report of a search and shows it on stderr at most once per
    `PROGRESS_INTERVAL_S`: one line rewritten in place on a terminal, a new line each time
    otherwise (so a log keeps the history)."""

    def __init__(
        self,
        walks: int | None,
        clock: Callable[[], float] = time.monotonic,
        *,
        unit: str = "walks",
    ) -> None:
        self.walks = walks
        self.unit = unit
        self.latest: Progress | None = None
        self.in_place = sys.stderr.isatty()
        self._clock = clock
        self._shown_at: float | None = None

    @property
    def frontier(self) -> str:
        """What `Progress.frontier` counts in this search."""
        return "queue" if self.walks is None else f"{self.unit} left"

    def __call__(self, report: Progress) -> None:
        self.latest = report
        now = self._clock()
        if self._shown_at is not None and now - self._shown_at < PROGRESS_INTERVAL_S:
            return
        self._shown_at = now
        if self.in_place:
            click.echo(f"\r{self.describe(report)}\x1b[K", err=True, nl=False)
        else:
            click.echo(self.describe(report), err=True)

    def describe(self, report: Progress) -> str:
        """One line: how far the search got and how fast it goes."""
        seconds = report.seconds
        if self.walks is None:
            rate = report.distinct_states / seconds if seconds > 0 else 0.0
            return (
                f"check: {report.distinct_states:,} states, {report.generated_states:,}"
                f" generated, depth {report.depth:,}, queue {report.frontier:,},"
                f" {rate:,.0f} states/s, {seconds:.0f}s"
            )
        rate = report.generated_states / seconds if seconds > 0 else 0.0
        return (
            f"check: {self.walks - report.frontier:,}/{self.walks:,} {self.unit},"
            f" {report.distinct_states:,} distinct states, {report.generated_states:,} steps,"
            f" depth {report.depth:,}, {rate:,.0f} steps/s, {seconds:.0f}s"
        )

    def close(self) -> None:
        """End a line rewritten in place, so what follows starts on its own line."""
        if self.in_place and self._shown_at is not None:
            click.echo(err=True)


@click.command()
@click.argument("model_name", metavar="[MODEL]", required=False, type=Name())
@click.option("--set", "settings", multiple=True, type=Setting(), help="A model parameter.")
@click.option("--faults", type=click.IntRange(0, 1_000), help="Fault budget (models with faults).")
@click.option("--mutant", type=Name(), help="Check a named variant that reintroduces a known bug.")
@click.option("--symmetry", is_flag=True, help="Identify states equal up to symmetry.")
@click.option(
    "--exact",
    is_flag=True,
    help="Keep whole states in the visited set. The protocol model keeps 64-bit fingerprints"
    " by default: two of n states collide (one goes unexplored) with odds about n^2/2^65,"
    " 3e-8 at 10^6 states; --exact has no such risk but keeps kilobytes a state.",
)
@click.option("--max-states", type=click.IntRange(1, 10**12), help="Stop after N distinct states.")
@click.option(
    "--walks",
    type=click.IntRange(1, 10**9),
    help="Take N seeded random walks instead of exploring every state (deep, not complete).",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of --walks, --swarm.")
@click.option(
    "--max-depth",
    type=click.IntRange(1, 10**6),
    default=500,
    show_default=True,
    help="Longest random walk (--walks, --swarm).",
)
@click.option(
    "--swarm",
    "walkers",
    type=click.IntRange(1, 10**6),
    help="Run N coverage-directed bitstate walkers (each takes --walks walks, default"
    f" {SwarmSettings.walks}) and merge what they find.",
)
@click.option(
    "--ray",
    "ray_address",
    type=Name(),
    is_flag=False,
    flag_value=RAY_DEFAULT,
    metavar="[ADDRESS]",
    help="Run the --swarm walkers as Ray tasks: on the cluster at ADDRESS (HOST:PORT,"
    " ray://HOST:PORT, auto, local), or where ray.init() finds one (`--ray` alone; needs"
    " `uv sync --extra ray`).",
)
@click.option(
    "--wave",
    type=click.IntRange(1, 10**6),
    help="--swarm walkers started together, each wave steered by the rows the waves before it"
    f" fired (a cluster's CPU count keeps it busy) [default: {SwarmSettings.wave}].",
)
@click.option(
    "--bitstate-bits",
    type=click.IntRange(10, 36),
    help=f"log2 of each --swarm walker's bitstate size in bits [default: {DEFAULT_BITSTATE_BITS}].",
)
@click.option(
    "--refine",
    "refined",
    is_flag=True,
    help="Check every step of the protocol model against the design model (refinement);"
    " the design is exhausted first at the matching size.",
)
@click.option(
    "--trace-out",
    type=OutputDir(),
    help="Write each counterexample per table (engine --trace format) plus a Mermaid diagram"
    " into this directory (created if missing).",
)
@click.option("--portfolio", is_flag=True, help="Exhaust one small configuration per §7 scenario.")
@json_option
def check(
    model_name: str | None,
    settings: tuple[tuple[str, str], ...],
    faults: int | None,
    mutant: str | None,
    symmetry: bool,
    exact: bool,
    max_states: int | None,
    walks: int | None,
    seed: int,
    max_depth: int,
    walkers: int | None,
    ray_address: str | None,
    wave: int | None,
    bitstate_bits: int | None,
    refined: bool,
    trace_out: Path | None,
    portfolio: bool,
    as_json: bool,
) -> None:
    """Explore every reachable state of MODEL (default: design) and check its properties.

    A progress line goes to stderr every second; Ctrl-C or SIGTERM stops the search and
    prints what it explored (exit 130 / 143).

    \b
    quiesce check                     # the design model, §8 reference size, fault budget 1
    quiesce check design --faults 2   # the longer run (minutes)
    quiesce check two-phase --mutant commit_without_message --trace-out traces/
    quiesce check protocol --walks 2000 --seed 1 --refine
    quiesce check protocol --swarm 200 --walks 20 --ray   # docs/checking.md, 'Past one machine'
    quiesce check --portfolio
    """
    if portfolio:
        if model_name or settings or faults is not None or mutant or walks is not None:
            raise click.UsageError("--portfolio takes no MODEL, --set, --faults, --mutant, --walks")
        check_portfolio(as_json)
    name = model_name or DEFAULT_MODEL
    sampled = walks is not None or walkers is not None
    if sampled and (symmetry or exact or max_states is not None):
        raise click.UsageError(
            "--walks and --swarm take neither --symmetry, --exact nor --max-states"
        )
    if walkers is None and (ray_address, wave, bitstate_bits) != (None, None, None):
        raise click.UsageError("--ray, --wave and --bitstate-bits shape a swarm: add --swarm N")
    if walkers is not None and refined:
        raise click.UsageError("--swarm takes no --refine (use --walks N --refine)")
    model = _build(name, settings, faults, mutant)
    design_seconds = 0.0
    if refined:
        # Exhausting the design first takes minutes at some sizes: say so while it runs,
        # stop cleanly on a signal, and count its time in the run's.
        what = "check: --refine: exhausting the design model at the matching size"
        try:
            with stop_on_signals(), heartbeat(what, logged=True) as elapsed:
                model = _refined(model)
        except Stopped as stop:
            click.echo(
                f"check: {stop} while exhausting the design for --refine: nothing explored",
                err=True,
            )
            if as_json:
                print_json({"model": name, "mutant": mutant, "interrupted": stop.signal.name,
                            "distinct_states": 0, "complete": False, "violations": []})  # fmt: skip
            else:
                click.echo(f"{name}: STOPPED by {stop.signal.name} (design phase of --refine)")
            sys.exit(stop.exit_code)
        design_seconds = elapsed()
        click.echo(f"check: --refine: the design was exhausted in {design_seconds:.1f}s", err=True)
    title = _title(name, model.params, mutant)
    mode = "exhaustive" if not sampled else "walks" if walkers is None else "swarm"
    if walkers is not None:
        progress = _LiveProgress(walkers, unit="walkers")
        swarm_settings = SwarmSettings(
            walkers=walkers,
            walks=walks or SwarmSettings.walks,
            max_depth=max_depth,
            seed=seed,
            log2_bits=bitstate_bits or DEFAULT_BITSTATE_BITS,
            wave=wave or SwarmSettings.wave,
        )
        request = SwarmRequest(name, settings, faults, mutant)
    else:
        progress = _LiveProgress(walks)
    search: Callable[[], CheckResult[Any] | SwarmResult]
    if walkers is not None:
        search = partial(run_swarm, request, swarm_settings, ray_address, progress)
    elif walks is None:
        unbounded = not settings and faults is None and max_states is None
        if name == IMPLEMENTATION_MODEL and unbounded:
            click.echo(
                "check: the protocol at the §8 reference size has well over 10^7 states and"
                " will not finish in minutes (docs/checking.md): bound it with"
                " --max-states N, or sample it deeply with --walks N",
                err=True,
            )
        search = partial(
            explore, model, max_states=max_states, symmetry=symmetry, progress=progress,
            progress_every=_REPORT_EVERY_STATES, exact=True if exact else None,
        )  # fmt: skip
    else:
        search = partial(
            walk, model, walks=walks, max_depth=max_depth, seed=seed, progress=progress,
            progress_every=_REPORT_EVERY_WALKS,
        )  # fmt: skip
    started = time.perf_counter()
    # A swarm reports once per walker, which may take longer than a progress line's
    # interval: a heartbeat fills the gaps.
    beat = heartbeat("check: swarm running", logged=True) if walkers is not None else nullcontext()
    try:
        with stop_on_signals(), beat:
            result = search()
    except Stopped as stop:
        progress.close()
        seconds = time.perf_counter() - started
        json_base = {"model": name, "params": dict(model.params), "mutant": mutant, "mode": mode}
        _report_stopped(stop, title, progress, seconds, json_base if as_json else None)
        sys.exit(stop.exit_code)
    progress.close()
    if isinstance(result, SwarmResult):
        if trace_out is not None:
            write_traces(result.model, result.violations, trace_out, model_name=name)
        print_swarm(result, title, mutant, as_json=as_json)
        sys.exit(1 if result.violations else 0)
    if walks is not None:
        click.echo(
            f"check: {walks} random walks (seed {seed}) visited {result.distinct_states} states:"
            " not a proof beyond them",
            err=True,
        )
    elif result.truncated:
        click.echo(
            f"check: stopped at --max-states {max_states}: the state space was not exhausted",
            err=True,
        )
    if trace_out is not None:
        write_traces(model, result.violations, trace_out, model_name=name)
    if as_json:
        document = result.to_json()
        document["mutant"] = mutant
        document["mode"] = mode
        if refined:
            document["refine_design_seconds"] = round(design_seconds, 6)
        if walks is not None:
            document["walks"] = {"walks": walks, "seed": seed, "max_depth": max_depth}
        print_json(document)
    else:
        _print_human(result, title, shortest=walks is None, design_seconds=design_seconds)
    sys.exit(1 if result.violations else 0)


def _build(
    name: str, settings: tuple[tuple[str, str], ...], faults: int | None, mutant: str | None
) -> Model[Any]:
    """The model to check, or exit 2 naming what is wrong with the request."""
    try:
        spec = get_model_spec(name)
        if mutant is not None and mutant not in spec.mutants:
            listing = f"quiesce mutants --model {name}"
            fail(unknown_name(f"{name} mutant", mutant, spec.mutants, listing))
        return build_model(name, dict(settings), faults=faults, mutant=mutant)
    except QuiesceError as error:
        fail(error)


def _refined(model: Model[Any]) -> Model[Any]:
    """`model` with every step checked against the design, or exit 2 saying why not."""
    try:
        return refine(model)
    except QuiesceError as error:
        fail(error)


def _title(name: str, params: Mapping[str, Any], mutant: str | None) -> str:
    """One line naming the model, the parameters set away from their defaults and the
    mutant, cut to the terminal's width (`--json` lists every parameter)."""
    defaults = get_model_spec(name).defaults()
    parts = [f"{key}={value}" for key, value in params.items() if defaults.get(key) != value]
    kept = len(params) - len(parts)
    if kept:
        other = "other " if parts else ""
        parts.append(f"{kept} {other}parameter{'s' if kept > 1 else ''} at defaults")
    title = f"{name} ({', '.join(parts)})" if parts else name
    if mutant is not None:
        title += f", mutant {mutant}"
    width = shutil.get_terminal_size().columns
    return title if len(title) <= width else title[: width - 3] + "..."


def _report_stopped(
    stop: Stopped,
    title: str,
    progress: _LiveProgress,
    seconds: float,
    json_base: dict[str, Any] | None,
) -> None:
    """The partial summary of a stopped search: how far it got, and that it found no
    violation there (the search ends at the first one, so a running search has none).
    `json_base` starts the `--json` document; None prints the human summary."""
    report = progress.latest or Progress(0, 0, 0, seconds)
    click.echo(
        f"check: {stop} after {report.distinct_states:,} states: the search did not finish"
        " (no violation in the states explored; not a proof)",
        err=True,
    )
    if json_base is not None:
        print_json(
            {
                **json_base,
                "interrupted": stop.signal.name,
                "distinct_states": report.distinct_states,
                "generated_states": report.generated_states,
                "frontier": report.frontier,
                "depth": report.depth,
                "seconds": round(seconds, 6),
                "complete": False,
                "violations": [],
            }
        )
        return
    click.echo(f"{title}: STOPPED by {stop.signal.name}")
    print_stats(
        (
            ("distinct states", f"{report.distinct_states:,}"),
            ("generated states", f"{report.generated_states:,}"),
            ("depth", f"{report.depth:,}"),
            (progress.frontier, f"{report.frontier:,}"),
            ("seconds", f"{seconds:.3f}"),
        )
    )


def _print_human(
    result: CheckResult[Any], title: str, *, shortest: bool, design_seconds: float = 0.0
) -> None:
    click.echo(title)
    # With --refine, the design's exhaustion before the search is part of the run's time.
    design = (("seconds exhausting the design", f"{design_seconds:.3f}"),) if design_seconds else ()
    print_stats(
        (
            ("distinct states", f"{result.distinct_states:,}"),
            ("generated states", f"{result.generated_states:,}"),
            ("depth", str(result.depth)),
            *design,
            ("seconds", f"{result.seconds:.3f}"),
            ("states/s", f"{result.states_per_s:,.0f}"),
            ("symmetry", "on" if result.symmetry else "off"),
            ("visited set", "exact states" if result.exact else "64-bit fingerprints"),
            ("truncated", "yes" if result.truncated else "no"),
        )
    )
    console = Console()
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
        print_story(result.model, violation, shortest=shortest)
