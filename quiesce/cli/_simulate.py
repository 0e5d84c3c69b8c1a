"""`quiesce simulate`: a simulated training run on the embedded in-memory fleet.

Virtual clock, seeded: the same options and seed print the same result. Default output: a
progress bar per training step (stderr) and a summary table (stdout), then why the
controller stopped and which prompt groups ended untrained, if any; `--json` prints the one
result document instead (`verdict`, `stop`, `untrained` included). `--report FILE` also
writes the run as one self-contained HTML page (`quiesce.harness.render_report`).
`--inject KIND` (repeatable) plays an opt-in scenario fault (`ScenarioFault`); `--coverage`
adds which §7 scenarios the run reached and which controller table rows fired (a
`coverage` key in the JSON; without `--coverage` the document is as it always was).

Exit codes (`EXIT_CODES`):
- 0: the run finished and every invariant held;
- 1: an invariant was violated (`violations` says which; an unfinished run is one: I7,
  and so is work left untrained without a counted reason: I9, and a fence move no step of
  the design model makes: refinement, checked unless `--no-validate`);
- 2: a usage error (an option out of range, `--crash-at-step` beyond `--steps`): one line;
- 3: the controller stopped before the run ended (a fatal cause, or more than
  `max_consecutive_failures` failed checkpoints): `stop` says which participant, which
  cause, after how many failures. A stopped run is never "ok";
- 130 / 143: Ctrl-C / SIGTERM stopped the run; it prints how many steps it finished.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table as RichTable

from quiesce.adapters import configure_logging
from quiesce.cli._output import fail, json_option, log_level_option, print_json, progress_lines
from quiesce.cli._paths import OutputDir, OutputFile
from quiesce.cli._signals import Stopped, stop_requested, stopped_in
from quiesce.cli._values import FiniteFloatRange
from quiesce.fsm import QuiesceError
from quiesce.harness import (
    FAILURE_SCENARIOS,
    LATENCY_PROFILES,
    NOT_SIMULATED,
    RunRecorder,
    ScenarioFault,
    SimulationConfig,
    SimulationResult,
    write_report,
)
from quiesce.harness import simulate as run

LEVELS = ("turn", "sibling", "prompt_group")

EXIT_CODES = {"ok": 0, "violated": 1, "stopped": 3}
"""The exit code of each `SimulationResult.verdict` (2 is a usage error)."""

# How many untrained groups the summary lists (the JSON has them all).
_LISTED = 10


def _summary(result: SimulationResult, crash_at_step: int | None) -> RichTable:
    table = RichTable(title=f"quiesce simulate (seed {result.seed})", show_header=True)
    table.add_column("what")
    table.add_column("value", justify="right")
    c, r = result.checkpoints, result.rollouts
    rows: list[tuple[str, Any]] = [
        ("training steps", result.steps),
        ("checkpoints completed / skipped / failed", f"{c.completed} / {c.skipped} / {c.failed}"),
        (
            "aborts / abort retries / release retries",
            f"{c.aborted} / {c.abort_retried} / {c.release_retried}",
        ),
        ("rollouts dispatched / completed", f"{r.dispatched} / {r.completed}"),
        ("items trained", r.trained),
        ("lost / duplicated", f"{r.lost} / {r.duplicated}"),
        ("untrained prompt groups", result.untrained.count),
        (
            "redispatched (resumed at turn / rerun)",
            f"{r.redispatched} ({r.resumed_from_turn} / {r.rerun_from_scratch})",
        ),
        (
            "admission closed median / max (s)",
            f"{result.admission_closed_s.median:.3f} / {result.admission_closed_s.max:.3f}",
        ),
        (
            "faults injected / participant restarts",
            f"{result.faults_injected} / {result.participant_restarts}",
        ),
        ("controller crash at step", _crash(result.crashed_at_step, crash_at_step)),
        ("virtual seconds", f"{result.virtual_seconds:.2f}"),
        ("fence moves / stutters vs the design", _refinement(result)),
        ("stopped", f"yes ({result.stop_reason})" if result.stopped else "no"),
        ("invariants", "ok" if result.invariants_ok else "VIOLATED"),
        ("verdict", f"{result.verdict} (exit {EXIT_CODES[result.verdict]})"),
    ]
    for name, value in rows:
        table.add_row(name, str(value))
    return table


def _crash(crashed: int | None, asked: int | None) -> str:
    """When the controller crashed, next to what `--crash-at-step` asked: the crash comes
    after the first checkpoint at or after that step with rollouts in flight."""
    if asked is None:
        return "-"
    if crashed is None:
        return f"none (asked: at or after {asked})"
    if crashed == asked:
        return str(crashed)
    return f"{crashed} (asked: at or after {asked})"


def _restore(restore: dict[str, Any]) -> str:
    """One restore of the run, on one line: what it restored and what it redispatched."""
    kind = restore["kind"]
    what = (
        f"from snapshot {restore['snapshot_id']}"
        if kind == "snapshot"
        else {
            "fresh_start": "a fresh start (no snapshot matched the trainer's anchor)",
            "bootstrap": "a bootstrap (no snapshot matched the trainer's anchor)",
            "restore_failed": "failed",
            "stopped": "stopped before it ended",
        }.get(kind, kind)
    )
    rejected = "; ".join(f"{snapshot}: {why}" for snapshot, why in restore["rejected"])
    return f"restore: {what}, {restore['redispatched']} attempts redispatched" + (
        f" (rejected {rejected})" if rejected else ""
    )


def _refinement(result: SimulationResult) -> str:
    found = result.refinement
    if found is None:
        return "not validated"
    verdict = "ok" if found["ok"] else "UNMAPPED"
    return f"{found['moves']} / {found['stutters']} ({verdict})"


def _explanations(result: SimulationResult, steps: int, crash_at_step: int | None) -> list[str]:
    """The lines under the table: why the crash came late or not at all, what each restore
    restored, why the controller stopped, what ended untrained."""
    lines: list[str] = []
    if crash_at_step is not None and result.crashed_at_step != crash_at_step:
        when = (
            f"at step {result.crashed_at_step}" if result.crashed_at_step is not None else "never"
        )
        lines.append(
            f"crash: {when}: the controller crashes after the first checkpoint at or after"
            f" step {crash_at_step} that completes with rollouts in flight"
        )
    lines.extend(_restore(restore) for restore in result.restores)
    if result.stop is not None:
        lines.append(f"stopped at step {result.steps} of {steps}: {result.stop.describe()}")
    for group in result.untrained.groups[:_LISTED]:
        lines.append(f"untrained {group.group} ({group.kind}): {group.reason}")
    if result.untrained.count > _LISTED:
        lines.append(f"... and {result.untrained.count - _LISTED} more untrained groups (--json)")
    return lines


def _coverage_lines(result: SimulationResult) -> list[str]:
    """What `--coverage` prints: each §7 scenario reached (with what happened), the rest,
    and the rows fired per controller table."""
    coverage = result.coverage
    if coverage is None:
        return []
    lines = [f"scenario {s}: {coverage.evidence[s]}" for s in coverage.scenarios]
    missed = [s for s in FAILURE_SCENARIOS if s not in coverage.evidence]
    lines.append(
        f"scenarios reached: {len(coverage.scenarios)} of {len(FAILURE_SCENARIOS)}"
        + (f"; not reached: {' '.join(missed)}" if missed else "")
    )
    never = [s for s in missed if s in NOT_SIMULATED]
    if never:
        lines.append(f"never simulated: {' '.join(never)} (see quiesce.harness.NOT_SIMULATED)")
    for table, rows in coverage.rows.items():
        lines.append(f"rows fired in {table}: {len(rows)} ({' '.join(map(str, rows))})")
    return lines


def _report_stopped(stop: Stopped, done: int, steps: int, as_json: bool) -> None:
    """The partial summary of a run stopped by a signal: how far it got. Nothing is judged:
    the invariants hold only of a finished run."""
    click.echo(
        f"simulate: {stop} after {done} of {steps} training steps: the run did not finish"
        " (nothing judged)",
        err=True,
    )
    if as_json:
        print_json({"interrupted": stop.signal.name, "steps": done, "of_steps": steps})
    else:
        click.echo(f"simulate: STOPPED by {stop.signal.name} at step {done} of {steps}")


def _one_line(error: ValidationError) -> str:
    """A config refusal on one line, each bad value named by its option."""
    problems = []
    for detail in error.errors():
        message = detail["msg"].removeprefix("Value error, ")
        if detail["loc"]:
            option = "--" + str(detail["loc"][0]).replace("_", "-")
            message = f"{option} {detail['input']!r}: {message[:1].lower()}{message[1:]}"
        problems.append(message)
    return "; ".join(problems)


@click.command()
# Every number is bounded at both ends: a huge size would start a run that never ends.
# `SimulationConfig` checks the same lower bounds for library callers.
@click.option(
    "--steps", type=click.IntRange(1, 10_000), default=8, show_default=True, help="Training steps."
)
@click.option(
    "--groups-per-step",
    type=click.IntRange(1, 1_000),
    default=4,
    show_default=True,
    help="Prompt groups per training step (>= 1).",
)
@click.option(
    "--group-size",
    type=click.IntRange(1, 256),
    default=4,
    show_default=True,
    help="Siblings per prompt group, G (>= 1).",
)
@click.option(
    "--agents", type=click.IntRange(1, 64), default=2, show_default=True, help="Agent servers."
)
@click.option(
    "--policies", type=click.IntRange(1, 64), default=1, show_default=True, help="Policy servers."
)
@click.option(
    "--resources",
    type=click.IntRange(0, 64),
    default=1,
    show_default=True,
    help="Resources servers.",
)
@click.option(
    "--resources-mode",
    type=click.Choice(["export_restore", "stateless", "restart_only"]),
    default="export_restore",
    show_default=True,
    help="Recovery mode of the resources servers.",
)
@click.option(
    "--fault-rate",
    type=FiniteFloatRange(0.0, 1.0),
    default=0.0,
    show_default=True,
    help="Probability, in [0, 1], that any one control call suffers a fault (a participant "
    "restart among them, unless --restart-rate is given).",
)
@click.option(
    "--restart-rate",
    type=FiniteFloatRange(0.0, 1.0),
    default=None,
    help="Give participant restarts their own rate: the probability, in [0, 1], that a control "
    "call restarts its participant; --fault-rate then draws only per-call faults.",
)
@click.option(
    "--crash-at-step",
    type=click.IntRange(1, 10_000),
    default=None,
    help="Crash the controller after the first checkpoint at or after this step (1 to --steps).",
)
@click.option(
    "--target-level",
    type=click.Choice(LEVELS),
    default="turn",
    show_default=True,
    help="rollout_recovery.target_level.",
)
@click.option("--group-scored", is_flag=True, help="Every environment scores whole groups.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option(
    "--snapshot-dir",
    type=OutputDir(),
    default=None,
    help="Keep snapshots and controller state here (default: a fresh temp dir).",
)
@click.option(
    "--validate/--no-validate",
    default=True,
    show_default=True,
    help="Check every participant's fence move against the design model (refinement; "
    "an unmapped move is a violation).",
)
@click.option(
    "--fence-log",
    type=OutputFile(),
    default=None,
    help="Write the run's fence log here (replaced; docs/validate.md), for quiesce validate.",
)
@click.option(
    "--report",
    type=OutputFile(),
    default=None,
    help="Write a run report here (replaced): one self-contained HTML page with a timeline "
    "per participant and charts over training steps.",
)
@click.option(
    "--latency",
    type=click.Choice(sorted(LATENCY_PROFILES)),
    default="fast",
    show_default=True,
    help="Latency profile: fast (milliseconds) or review (turns of seconds, training steps of "
    "minutes, each ending with a 30 s trainer checkpoint write, snapshot writes of seconds, a "
    "periodic attempt every 120 s).",
)
@click.option(
    "--checkpointing/--no-checkpointing",
    default=True,
    show_default=True,
    help="--no-checkpointing: the same training with no checkpoint trigger at all.",
)
@click.option(
    "--inject",
    type=click.Choice([kind.value for kind in ScenarioFault]),
    multiple=True,
    help="Play an opt-in scenario fault, once, deterministically from the seed (repeatable): "
    "conflict (S5), preparing-intent-crash (S18), restore-digest-mismatch (S16), "
    "duplicate-snapshot (two snapshots match the anchor; the restore must take the newest), "
    "staging-corruption (a staged artifact corrupted before publication), forged-receipt (an "
    "ACK quoting a completion's key with a wrong receipt; the agent must keep the result), "
    "optimizer-race (S9: the trainer steps between a checkpoint's commit and its capture). "
    "restore-digest-mismatch and duplicate-snapshot restart the controller at mid-run unless "
    "--crash-at-step says when.",
)
@click.option(
    "--coverage",
    is_flag=True,
    help="Report which PROTOCOL.md §7 scenarios the run reached (with what happened) and "
    "which controller table rows fired; --json gets a coverage key.",
)
@log_level_option("error")
@json_option
def simulate(
    steps: int,
    groups_per_step: int,
    group_size: int,
    agents: int,
    policies: int,
    resources: int,
    resources_mode: str,
    fault_rate: float,
    restart_rate: float | None,
    crash_at_step: int | None,
    target_level: str,
    group_scored: bool,
    seed: int,
    snapshot_dir: Path | None,
    validate: bool,
    fence_log: Path | None,
    report: Path | None,
    latency: str,
    checkpointing: bool,
    inject: tuple[str, ...],
    coverage: bool,
    log_level: str,
    as_json: bool,
) -> None:
    """Run a simulated training run with checkpoints, faults and a crash (virtual clock).

    \b
    Exit codes:
      0  the run finished and every invariant held
      1  an invariant was violated (lost or duplicated items, work left untrained
         without a counted reason, an unfinished run, ...)
      2  usage error (an option out of range, --crash-at-step beyond --steps)
      3  the controller stopped before the run ended (the summary says which participant,
         which cause, after how many failures)
    """
    configure_logging(log_level)
    if crash_at_step is not None and 1 <= steps < crash_at_step:
        # SimulationConfig refuses it too (and a bad --steps first); here the message names
        # the options.
        fail(
            f"--crash-at-step {crash_at_step} is beyond --steps {steps}: "
            f"crash at a step from 1 to {steps}"
        )
    if crash_at_step is not None and not checkpointing:
        fail(
            "--crash-at-step needs checkpointing: the controller crashes right after a "
            "published snapshot, and --no-checkpointing takes none"
        )
    try:
        config = SimulationConfig(
            steps=steps,
            groups_per_step=groups_per_step,
            group_size=group_size,
            agents=agents,
            policies=policies,
            resources=resources,
            resources_mode=resources_mode,
            fault_rate=fault_rate,
            restart_rate=restart_rate,
            crash_at_step=crash_at_step,
            target_level=target_level,
            group_scored=group_scored,
            seed=seed,
            snapshot_dir=snapshot_dir,
            validate_fences=validate,
            fence_log=fence_log,
            latency=latency,
            checkpointing=checkpointing,
            inject=tuple(dict.fromkeys(inject)),
            coverage=coverage,
        )
    except ValidationError as error:
        fail(_one_line(error))
    done = 0  # training steps finished, for the partial summary of a stopped run

    def reached(step: int) -> None:
        # A stop takes effect here, between two training steps, inside the run's task:
        # raised from the signal handler it could land in an event-loop callback, which
        # logs it and runs on.
        nonlocal done
        done = step
        if request.event.is_set():
            raise request.stopped()

    recorder = None if report is None else RunRecorder()
    recording: dict[str, Any] = {} if recorder is None else {"recorder": recorder}
    try:
        with stop_requested() as request:
            if as_json or not sys.stderr.isatty():
                # No live bar: a line on stderr every few seconds says how far it got.
                tick = progress_lines(lambda: f"simulate: step {done} of {steps}")

                def logged(step: int) -> None:
                    reached(step)
                    tick()

                result = run(config, progress=logged, **recording)
            else:
                # Imported here: only a terminal shows the bar.
                from rich.progress import (
                    BarColumn,
                    MofNCompleteColumn,
                    Progress,
                    TextColumn,
                    TimeElapsedColumn,
                )

                console = Console(stderr=True)
                with Progress(
                    TextColumn("training"),
                    BarColumn(),
                    MofNCompleteColumn(),
                    TimeElapsedColumn(),
                    console=console,
                    transient=True,
                ) as bar:
                    task = bar.add_task("steps", total=steps)

                    def show(step: int) -> None:
                        reached(step)
                        bar.update(task, completed=step)

                    result = run(config, progress=show, **recording)
    except QuiesceError as error:
        fail(error)
    except BaseException as error:
        stop = stopped_in(error)
        if stop is None:
            raise
        _report_stopped(stop, done, steps, as_json)
        raise SystemExit(stop.exit_code) from None
    if report is not None and recorder is not None:
        try:
            write_report(report, recorder)
        except OSError as error:
            fail(f"--report {report}: cannot be written ({error.strerror})")
        click.echo(f"report: {report}", err=True)
    if as_json:
        # Without --coverage the document is exactly what it always was.
        print_json(result.model_dump(mode="json", exclude=None if coverage else {"coverage"}))
    else:
        Console().print(_summary(result, crash_at_step))
        for explanation in _explanations(result, steps, crash_at_step):
            click.echo(explanation)
        for line in _coverage_lines(result):
            click.echo(line)
        for violation in result.violations:
            click.echo(f"violation: {violation}", err=True)
    raise SystemExit(EXIT_CODES[result.verdict])
