"""Goodput under faults: what per-call faults cost the training run, with and without retries,
and apart from them what participant restarts cost.

Run: `uv run python benchmarks/bench_faults.py [--json] [--seeds 50] [--steps 30] [--workers 2]`.

For each fault rate (0.01, 0.05, 0.10) and `--seeds` seeds, one `quiesce simulate` run of
`--steps` training steps on the default fleet (2 agents; `quiesce.harness.simulate`, nothing
of it re-implemented here) in each of three modes, in the same run of this script:
- `retries`: per-call faults (request or reply lost, 5xx, timed out, redelivered;
  `simulate --fault-rate p --restart-rate 0`) with the default retries inside an attempt;
- `no_retries`: the same faults with the retries off (`call_retries=0`);
- `retries_restarts`: the same rate with a participant restart among the fault kinds (1 in
  6; `simulate --fault-rate p`, its default), retries on. A restart is no fault of one call:
  §4 never retries it inside an attempt, and the agent's running executions die with it.
  This row shows what restarts cost; the targets are the per-call rows'.

Per rate and mode:
- `stopped`: runs whose controller stopped (verdict `stopped`); `violated`: runs whose
  oracle found a broken invariant (must be 0 in every mode);
- `completed` / `failed`: the training's checkpoint attempts (up to the attempt of the
  last step: the harness's settle tail after it runs without faults) by final outcome, one
  per checkpoint id (a published attempt whose release was retried counts once, completed);
  `skipped` attempts (a precondition, not a fault) are apart; `completed_pct` is
  completed / (completed + failed);
- `closed_median_s` / `closed_p99_s`: admission-closed seconds of every attempt of every
  run, pooled (virtual time);
- `failed_by`: the failed attempts by `<cause> at <op>` (`StopWitness`: the §4 cause of the
  attempt's first failure and the call that had it -- `participant_restarted at prepare`
  is a restart seen in a prepare's reply; an op-less cause failed on a timer or the store).

Targets (PROTOCOL.md §4; issue 23), retries on: per-call faults, at 0.05 0 runs stopped and
completed_pct >= 97, at 0.10 0 stopped and >= 90; with restarts, at 0.05 0 stopped and
>= 92, at 0.10 at most 2 of 50 runs stopped (4%) and >= 80; at every rate, closed_p99_s
with retries <= 1.5 x without. Any missed target exits 1. Runs are spread over `--workers`
processes; the wall time is reported (the figures are virtual-time only, so they are the
same on any machine).

`--quick` is the form CI gates on (`.ci/run`): 12 seeds at 0.05 and 0.10, every mode.
`--check-readme docs/benchmarks.md` then also fails unless that page's table for the same command
line is exactly what this run printed, so a quoted figure cannot drift.
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import statistics
import sys
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from quiesce.adapters import configure_logging
from quiesce.harness import StopWitness, simulate
from quiesce.protocol import QuiesceConfig
from quiesce.protocol.controller import (
    ControllerEffect,
    ControllerInput,
    ControllerState,
    Coordinator,
    Outcome,
)
from quiesce.protocol.controller.lowlevel import Metric
from quiesce.protocol.machines import CheckpointState

RATES = (0.01, 0.05, 0.10)
MODES = ("retries", "no_retries", "retries_restarts")
# mode -> rate -> (the least completed_pct, the most runs stopped as a share of the runs).
TARGETS = {
    "retries": {0.05: (97.0, 0.0), 0.10: (90.0, 0.0)},
    "retries_restarts": {0.05: (92.0, 0.0), 0.10: (80.0, 2 / 50)},
}
P99_RATIO_MAX = 1.5
QUICK = {"seeds": 12, "steps": 30, "rates": (0.05, 0.10), "modes": MODES}
"""The quick form CI gates on (`--quick`): 72 runs, about 2 CPU-minutes."""


@dataclass(frozen=True, slots=True)
class Job:
    rate: float
    mode: str
    seed: int
    steps: int


@dataclass
class RunFigures:
    """What one simulated run contributes: the attempts of its training, up to the end of
    the attempt of the last step (the harness's settle tail after it, faults off, is not
    the training's and is not counted)."""

    steps: int
    verdict: str = ""
    outcomes: dict[str, str] = field(default_factory=dict)  # checkpoint id -> final result
    closed_s: list[float] = field(default_factory=list)
    failed_by: dict[str, str] = field(default_factory=dict)  # failed id -> its failure label
    over: bool = False

    def observe(
        self, _event: ControllerInput, effects: tuple[ControllerEffect, ...], state: ControllerState
    ) -> None:
        if self.over:
            return
        for effect in effects:
            if isinstance(effect, Outcome):
                # The last outcome of an id is its final one (a retried release ends it).
                self.outcomes[str(effect.checkpoint_id)] = effect.result
                last_step = effect.checkpoint_id.step >= self.steps
                self.over = last_step and state.phase in (
                    CheckpointState.IDLE,
                    CheckpointState.STOPPED,
                )
            elif isinstance(effect, Metric) and effect.name == "checkpoint.admission_closed_s":
                self.closed_s.append(effect.value)


def _without_retries(config: QuiesceConfig) -> Coordinator:
    return Coordinator(config.model_copy(update={"call_retries": 0}))


def run_one(job: Job) -> RunFigures:
    """One `quiesce simulate` run (in a worker process)."""
    configure_logging("error")
    figures = RunFigures(job.steps)
    witness = StopWitness()
    factory = _without_retries if job.mode == "no_retries" else Coordinator
    result = simulate(
        steps=job.steps,
        fault_rate=job.rate,
        # None: a restart is one of the fault kinds (simulate's default); 0: none at all.
        restart_rate=None if job.mode == "retries_restarts" else 0.0,
        seed=job.seed,
        coordinator_factory=factory,
        observers=[figures.observe, witness],
    )
    figures.verdict = result.verdict
    figures.failed_by = {
        checkpoint_id: witness.failures[checkpoint_id].label
        for checkpoint_id, outcome in figures.outcomes.items()
        if outcome == "failed"
    }
    return figures


def _p99(sample: Sequence[float]) -> float:
    ordered = sorted(sample)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] if ordered else 0.0


Row = dict[str, Any]
"""One rate and mode's figures (numbers, and `failed_by`: counts by failure label)."""


def summarise(runs: Iterable[RunFigures]) -> Row:
    """The figures of one rate and mode, over its runs."""
    runs = list(runs)
    results = [r for run in runs for r in run.outcomes.values()]
    closed = [s for run in runs for s in run.closed_s]
    completed, failed = results.count("completed"), results.count("failed")
    failed_by = Counter(label for run in runs for label in run.failed_by.values())
    return {
        "runs": len(runs),
        "stopped": sum(run.verdict == "stopped" for run in runs),
        "violated": sum(run.verdict == "violated" for run in runs),
        "completed": completed,
        "failed": failed,
        "skipped": results.count("skipped"),
        "completed_pct": round(100.0 * completed / max(completed + failed, 1), 1),
        "closed_median_s": round(statistics.median(closed), 3) if closed else 0.0,
        "closed_p99_s": round(_p99(closed), 3),
        "failed_by": dict(failed_by.most_common()),
    }


Figures = dict[str, dict[str, Row]]
"""Rate (as text) -> mode -> its row: only the rates and modes that were measured."""


def completion(figures: Figures, mode: str) -> dict[str, bool]:
    """The completion targets, met or not by `mode`'s rows (of the rates measured)."""
    met: dict[str, bool] = {}
    for rate, (least, stopped_share) in TARGETS.get(mode, {}).items():
        row = figures.get(str(rate), {}).get(mode)
        if row is not None:
            most = int(stopped_share * row["runs"])
            label = "" if mode == "retries" else f" ({_LABELS[mode][0]})"
            met[f"{rate}{label}: <= {most} of {row['runs']} stopped, >= {least:g}% completed"] = (
                row["stopped"] <= most and row["completed_pct"] >= least
            )
    return met


def verdicts(figures: Figures) -> dict[str, bool]:
    """Each target, met or not, of the rates and modes measured."""
    met = {**completion(figures, "retries"), **completion(figures, "retries_restarts")}
    for rate, rows in figures.items():
        if "retries" in rows and "no_retries" in rows:
            on, off = rows["retries"], rows["no_retries"]
            met[f"{rate}: p99 closed with retries <= {P99_RATIO_MAX}x without"] = (
                on["closed_p99_s"] <= P99_RATIO_MAX * off["closed_p99_s"]
            )
    for rate, rows in figures.items():
        met[f"{rate}: no invariant violated"] = all(row["violated"] == 0 for row in rows.values())
    return met


def tabulate(jobs: Sequence[Job], runs: Sequence[RunFigures]) -> Figures:
    """The rows of every rate and mode among `jobs` (each job's run at the same index)."""
    keys = dict.fromkeys((job.rate, job.mode) for job in jobs)
    figures: Figures = {}
    for rate, mode in keys:
        figures.setdefault(str(rate), {})[mode] = summarise(
            run for job, run in zip(jobs, runs, strict=True) if (job.rate, job.mode) == (rate, mode)
        )
    return figures


def measure(
    seeds: int,
    steps: int,
    workers: int,
    rates: Sequence[float] = RATES,
    modes: Sequence[str] = MODES,
) -> dict[str, object]:
    """Every run, over `workers` processes; the figures per rate and mode, and the verdicts."""
    jobs = [
        Job(rate, mode, seed, steps)
        for rate in rates
        for mode in modes
        for seed in range(1, seeds + 1)
    ]
    start = time.perf_counter()
    with ProcessPoolExecutor(max_workers=workers) as pool:
        runs = list(pool.map(run_one, jobs, chunksize=4))
    wall_s = time.perf_counter() - start
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    figures = tabulate(jobs, runs)
    return {
        "seeds": seeds,
        "steps": steps,
        "workers": workers,
        "wall_s": round(wall_s, 1),
        "cpu_s": round(children.ru_utime + children.ru_stime, 1),
        "figures": figures,
        "targets": verdicts(figures),
    }


# mode -> the table's `faults` and `retries` cells.
_LABELS = {
    "retries": ("per call", "on"),
    "no_retries": ("per call", "off"),
    "retries_restarts": ("per call, 1 in 6 a restart", "on"),
}


def markdown(result: dict[str, object]) -> str:
    """The README's table."""
    figures: Figures = result["figures"]  # type: ignore[assignment]
    lines = [
        "| fault rate | faults | retries | runs stopped | attempts completed | attempts failed "
        "| completed % | admission closed median (s) | p99 (s) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for rate, rows in figures.items():
        for mode, row in rows.items():
            faults, retries = _LABELS[mode]
            lines.append(
                f"| {float(rate):.2f} | {faults} | {retries} | {row['stopped']} "
                f"| {row['completed']} | {row['failed']} | {row['completed_pct']:.1f} "
                f"| {row['closed_median_s']:.3f} | {row['closed_p99_s']:.3f} |"
            )
    return "\n".join(lines)


def _floats(text: str) -> tuple[float, ...]:
    return tuple(float(part) for part in text.split(","))


def _modes(text: str) -> tuple[str, ...]:
    modes = tuple(text.split(","))
    unknown = sorted(set(modes) - set(MODES))
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown modes {unknown}; choose among {list(MODES)}")
    return modes


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line's options (`--quick` sets seeds, steps, rates and modes to `QUICK`)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--quick", action="store_true", help="the form CI gates on: " + _QUICK)
    parser.add_argument("--seeds", type=int, default=50, help="seeds per rate and mode")
    parser.add_argument("--steps", type=int, default=30, help="training steps per run")
    parser.add_argument("--workers", type=int, default=2, help="worker processes")
    parser.add_argument(
        "--rates", type=_floats, default=RATES, help="comma-separated fault rates (all three)"
    )
    parser.add_argument(
        "--modes", type=_modes, default=MODES, help=f"comma-separated modes of {','.join(MODES)}"
    )
    parser.add_argument(
        "--check-readme",
        type=Path,
        metavar="README",
        help="also fail unless README's table for this command line is what this run printed",
    )
    args = parser.parse_args(argv)
    if args.quick:
        for name, value in QUICK.items():
            setattr(args, name, value)
    return args


_QUICK = f"{QUICK['seeds']} seeds x {QUICK['steps']} steps at rates 0.05 and 0.10, every mode"
_BLOCK = re.compile(r"<!-- bench_faults:begin(.*?)-->\n(.*?)\n<!-- bench_faults:end -->", re.S)


def readme_tables(text: str) -> dict[str, str]:
    """The README's tables, by the command-line arguments in each one's opening marker
    (`<!-- bench_faults:begin --quick -->`, then the table, then `<!-- bench_faults:end -->`).

    >>> readme_tables("<!-- bench_faults:begin --quick -->\\n| a |\\n<!-- bench_faults:end -->")
    {'--quick': '| a |'}
    """
    return {found.group(1).strip(): found.group(2) for found in _BLOCK.finditer(text)}


def readme_drift(readme: Path, marker: str, table: str) -> str | None:
    """Why README's table under `marker` is not `table` (None: it is)."""
    try:
        quoted = readme_tables(readme.read_text(encoding="utf-8")).get(marker)
    except OSError as error:
        return f"cannot read {readme}: {error.strerror}"
    if quoted is None:
        return f"{readme} has no table marked <!-- bench_faults:begin {marker} -->"
    if quoted != table:
        return f"{readme}'s table for `{marker}` differs from this run's: paste the table above"
    return None


def _marker(argv: Sequence[str]) -> str:
    # The arguments that decide the figures, as the README's marker quotes them.
    kept, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in ("--check-readme", "--workers"):
            skip = True
        elif arg != "--json" and not arg.startswith(("--check-readme=", "--workers=")):
            kept.append(arg)
    return " ".join(kept)


def main(argv: list[str] | None = None) -> int:
    """Print the table and the targets (or one JSON document with `--json`); exit 1 if a
    target is missed, or if `--check-readme` finds the README's table drifted."""
    argv = sys.argv[1:] if argv is None else argv
    args = parse(argv)
    result = measure(args.seeds, args.steps, args.workers, args.rates, args.modes)
    targets: dict[str, bool] = result["targets"]  # type: ignore[assignment]
    table = markdown(result)
    drift = (
        None if args.check_readme is None else readme_drift(args.check_readme, _marker(argv), table)
    )
    if args.json:
        print(json.dumps({**result, "readme_drift": drift}, sort_keys=True))
    else:
        print(table)
        print()
        for name, met in targets.items():
            print(f"{'met   ' if met else 'MISSED'} {name}")
        print(
            f"\n{args.seeds} seeds x {args.steps} steps x {len(args.rates)} rates x "
            f"{len(args.modes)} modes in {result['wall_s']:.1f} s wall, "
            f"{result['cpu_s']:.1f} s CPU ({args.workers} workers)"
        )
    if drift is not None:
        print(f"error: {drift}", file=sys.stderr)
    return 0 if all(targets.values()) and drift is None else 1


if __name__ == "__main__":
    sys.exit(main())
