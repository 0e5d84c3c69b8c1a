"""What checkpointing costs the training run: the same simulated run with a checkpoint at
every step and with checkpointing off, as the original review asked.

Run: `uv run python benchmarks/bench_overhead.py [--json] [--quick] [--seeds 20] [--steps 30]
[--workers 2]`. `--quick` is CI's form (`--seeds 4 --steps 12`, well under a minute on
2 cores); `--seeds` and `--steps` given beside it win.

For each latency profile (`quiesce.harness.LATENCY_PROFILES`: `fast`, the simulation's
default, and `review`, shaped like the review's settings) and `--seeds` seeds, one
`quiesce simulate` run of `--steps` training steps on the default fleet (2 agents, 4 groups
of 4 per step; `quiesce.harness.simulate`, nothing of it re-implemented here), faults off,
twice with the same seed: participant checkpointing `on` (a snapshot at every trainer
boundary, `save_period` 1, and the periodic attempt every `snapshot_attempt_interval_s`) and
`off` (`simulate(checkpointing=False)`: no trigger ever reaches the controller). In both
modes the trainer writes its own checkpoint at the end of every step (`save_period` 1, as in
the review, where only the participants' part is switched): `trainer_save_s` of the profile
(30 s on `review`, none on `fast`), in series with the participants' snapshot that follows
(no overlap is modelled: conservative). The profile states every duration
(`LatencyProfile.describe()`, printed under the table).

Per profile and mode, pooled over the seeds (virtual time, so the same on any machine):
- `throughput`: rollouts completed per virtual second of the run, from the controller's
  start until the data is used up, every group trained and (on) the last step's checkpoint
  done: the sum of rollouts over the sum of virtual seconds. Faults are off, so both modes
  complete the same rollouts (every one of them is trained) and `on / off` is the ratio of
  the runs' lengths;
- `trainer_save_s`: the trainer's own checkpoint write per training step (the profile's
  `trainer_save_s`; every step saves at `save_period` 1), the same in both modes;
- `checkpoint_s`: per training step, the seconds of the participants' snapshot (the
  attempt a trainer boundary started: `checkpoint.total_seconds`, from closing admission
  until idle again; the next optimizer step waits for it), mean, p50 and p99;
- `closed_s`: admission closed per snapshot (`checkpoint.admission_closed_s` of every
  attempt that closed it, periodic ones included), p50 and p99;
- `participant_s` / `controller_s`: the mean seconds per snapshot spent waiting on
  participants (preparing, committing, releasing, aborting) and in the controller's own
  phases (`checkpoint.participant_seconds` / `controller_seconds`); `phases_s` (in
  `--json`) the mean per phase, and `dominant` the phase that takes most of it;
- `periodic`: periodic attempts that ran (closed admission) and that were skipped (an
  optimizer step in progress, nothing mutated).

Beside `on / off` (the modelled run, trainer save included), `on / off without trainer
save` is the same ratio with the trainer's save taken out of both runs:
`(off_s - saves * trainer_save_s) / (on_s - saves * trainer_save_s)` over the pooled run
lengths, `saves` the training steps (each saved once). It is what the participants' snapshot
costs against training steps of `train_step_s` alone, so that nobody reads the target as met
without the trainer's save; it is reported, and is no target.

Target: on the `review` profile, throughput on / off >= 0.95 (the modelled run: the trainer
saves at every step in both modes); and every run `ok` (no invariant violated, no controller
stopped), or its figures mean nothing. The `fast` profile's ratio is reported beside it and
is no target: its training steps take tens of milliseconds, so any snapshot is a large share
of a step. Exit 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from quiesce.adapters import configure_logging
from quiesce.harness import LATENCY_PROFILES, simulate
from quiesce.protocol.controller import (
    ControllerEffect,
    ControllerInput,
    ControllerState,
    Outcome,
    TrainerBoundary,
)
from quiesce.protocol.controller.lowlevel import Metric

PROFILES = ("fast", "review")
MODES = ("on", "off")
TARGET_PROFILE = "review"
TARGET_RATIO = 0.95
QUICK = {"seeds": 4, "steps": 12}
FULL = {"seeds": 20, "steps": 30}


@dataclass(frozen=True, slots=True)
class Job:
    profile: str
    mode: str
    seed: int
    steps: int


@dataclass
class RunFigures:
    """What one simulated run contributes."""

    verdict: str = ""
    virtual_s: float = 0.0
    rollouts: int = 0
    trained: int = 0
    saves: int = 0  # training steps that ended with the trainer's own checkpoint write
    boundary_ids: set[str] = field(default_factory=set)  # attempts a trainer boundary began
    # checkpoint id -> (result, total s, participant s, controller s, {phase: s})
    attempts: dict[str, tuple[str, float, float, float, dict[str, float]]] = field(
        default_factory=dict
    )
    closed_s: list[float] = field(default_factory=list)

    def observe(
        self, event: ControllerInput, effects: tuple[ControllerEffect, ...], state: ControllerState
    ) -> None:
        if isinstance(event, TrainerBoundary) and state.attempt is not None:
            self.boundary_ids.add(str(state.attempt.op_id))
        outcome: Outcome | None = None
        seconds: dict[str, float] = {}
        phases: dict[str, float] = {}
        for effect in effects:
            if isinstance(effect, Outcome):
                outcome = effect
            elif isinstance(effect, Metric):
                if effect.name == "checkpoint.admission_closed_s":
                    self.closed_s.append(effect.value)
                elif effect.name == "checkpoint.phase_seconds":
                    phase = dict(effect.tags)["phase"]
                    phases[phase] = phases.get(phase, 0.0) + effect.value
                elif effect.name.startswith("checkpoint."):
                    seconds[effect.name.removeprefix("checkpoint.")] = effect.value
        if outcome is not None:
            # The metrics of an attempt are emitted with its outcome, in the same step.
            self.attempts[str(outcome.checkpoint_id)] = (
                outcome.result,
                seconds.get("total_seconds", 0.0),
                seconds.get("participant_seconds", 0.0),
                seconds.get("controller_seconds", 0.0),
                phases,
            )


def run_one(job: Job) -> RunFigures:
    """One `quiesce simulate` run (in a worker process)."""
    configure_logging("error")
    figures = RunFigures()
    result = simulate(
        steps=job.steps,
        seed=job.seed,
        latency=job.profile,
        checkpointing=job.mode == "on",
        observers=[figures.observe],
    )
    figures.verdict = result.verdict
    figures.virtual_s = result.virtual_seconds
    figures.rollouts = result.rollouts.completed
    figures.trained = result.rollouts.trained
    # Every step saves the trainer's checkpoint: `simulate`'s trainer checkpoints at each
    # step (save_period 1), and with faults off no step is rolled back.
    figures.saves = result.steps
    return figures


def _p(sample: Sequence[float], q: float) -> float:
    """The `q` quantile (nearest rank, like bench_faults' p99); 0.0 when empty."""
    ordered = sorted(sample)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def _mean(sample: Sequence[float]) -> float:
    return statistics.fmean(sample) if sample else 0.0


Row = dict[str, Any]
"""One profile and mode's figures."""


def summarise(runs: Iterable[RunFigures], trainer_save_s: float = 0.0) -> Row:
    """The figures of one profile and mode, over its runs (seeds); `trainer_save_s` is the
    profile's trainer checkpoint write per saving step."""
    runs = list(runs)
    ran = [a for run in runs for a in run.attempts.values() if a[0] != "skipped"]
    per_step = [
        a[1]
        for run in runs
        for cid, a in run.attempts.items()
        if cid in run.boundary_ids and a[0] != "skipped"
    ]
    periodic = Counter(
        "skipped" if a[0] == "skipped" else "ran"
        for run in runs
        for cid, a in run.attempts.items()
        if cid not in run.boundary_ids
    )
    closed = [s for run in runs for s in run.closed_s]
    phases: Counter[str] = Counter()
    for attempt in ran:
        phases.update(attempt[4])
    phases_s = {p: round(s / len(ran), 3) for p, s in phases.most_common() if s > 0}
    seconds = sum(run.virtual_s for run in runs)
    rollouts = sum(run.rollouts for run in runs)
    return {
        "runs": len(runs),
        "ok": sum(run.verdict == "ok" for run in runs),
        "rollouts": rollouts,
        "trained": sum(run.trained for run in runs),
        "virtual_s": round(seconds, 3),
        "throughput": round(rollouts / seconds, 4) if seconds else 0.0,
        "saves": sum(run.saves for run in runs),
        "trainer_save_s": trainer_save_s,
        "snapshots": len(ran),
        "checkpoint_mean_s": round(_mean(per_step), 3),
        "checkpoint_p50_s": round(_p(per_step, 0.5), 3),
        "checkpoint_p99_s": round(_p(per_step, 0.99), 3),
        "closed_p50_s": round(_p(closed, 0.5), 3),
        "closed_p99_s": round(_p(closed, 0.99), 3),
        "participant_s": round(_mean([a[2] for a in ran]), 3),
        "controller_s": round(_mean([a[3] for a in ran]), 3),
        "phases_s": phases_s,
        "dominant": next(iter(phases_s), None),
        "periodic_ran": periodic["ran"],
        "periodic_skipped": periodic["skipped"],
    }


Figures = dict[str, dict[str, Row]]
"""Profile -> mode -> its row."""


def ratios(figures: Figures, *, trainer_save: bool = True) -> dict[str, float]:
    """Throughput on / off per profile (of the profiles measured in both modes); the ratio
    of the pooled run lengths, since both modes complete the same rollouts. With
    `trainer_save=False`, the trainer's own checkpoint writes (`saves` of `trainer_save_s`
    each) are taken out of both runs' lengths first."""
    found: dict[str, float] = {}
    for profile, rows in figures.items():
        if "on" in rows and "off" in rows and rows["off"]["throughput"]:
            on, off = rows["on"], rows["off"]
            on_s, off_s = on["virtual_s"], off["virtual_s"]
            if not trainer_save:
                on_s -= on.get("saves", 0) * on.get("trainer_save_s", 0.0)
                off_s -= off.get("saves", 0) * off.get("trainer_save_s", 0.0)
            found[profile] = round((on["rollouts"] / on_s) / (off["rollouts"] / off_s), 4)
    return found


def verdicts(figures: Figures) -> dict[str, bool]:
    """Each target, met or not (of the profiles measured)."""
    met: dict[str, bool] = {}
    ratio = ratios(figures).get(TARGET_PROFILE)
    if ratio is not None:
        met[f"{TARGET_PROFILE}: throughput on / off >= {TARGET_RATIO}"] = ratio >= TARGET_RATIO
    for profile, rows in figures.items():
        met[f"{profile}: every run ok"] = all(row["ok"] == row["runs"] for row in rows.values())
    return met


def measure(
    seeds: int,
    steps: int,
    workers: int,
    profiles: Sequence[str] = PROFILES,
) -> dict[str, object]:
    """Every run, over `workers` processes; the figures per profile and mode, the ratios,
    the verdicts."""
    jobs = [
        Job(profile, mode, seed, steps)
        for profile in profiles
        for mode in MODES
        for seed in range(1, seeds + 1)
    ]
    start = time.perf_counter()
    with ProcessPoolExecutor(max_workers=workers) as pool:
        runs = list(pool.map(run_one, jobs))
    wall_s = time.perf_counter() - start
    figures: Figures = {}
    for profile in profiles:
        for mode in MODES:
            figures.setdefault(profile, {})[mode] = summarise(
                (
                    run
                    for job, run in zip(jobs, runs, strict=True)
                    if (job.profile, job.mode) == (profile, mode)
                ),
                LATENCY_PROFILES[profile].trainer_save_s,
            )
    return {
        "seeds": seeds,
        "steps": steps,
        "workers": workers,
        "wall_s": round(wall_s, 1),
        "profiles": {p: LATENCY_PROFILES[p].describe() for p in profiles},
        "figures": figures,
        "ratios": ratios(figures),
        "ratios_without_trainer_save": ratios(figures, trainer_save=False),
        "targets": verdicts(figures),
    }


def markdown(result: dict[str, object]) -> str:
    """The README's table (virtual time only: the same on any machine)."""
    figures: Figures = result["figures"]  # type: ignore[assignment]
    found: dict[str, float] = result["ratios"]  # type: ignore[assignment]
    bare: dict[str, float] = result["ratios_without_trainer_save"]  # type: ignore[assignment]

    def ratio(table: dict[str, float], profile: str, on: bool) -> str:
        return f"{table[profile]:.3f}" if on and profile in table else "-"

    lines = [
        "| profile | participant checkpointing | runs ok | trainer save s per step "
        "| rollouts / virtual s | on / off | on / off without trainer save "
        "| participant snapshot s per step mean / p50 / p99 | admission closed s p50 / p99 "
        "| participant s / controller s per snapshot |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for profile, rows in figures.items():
        for mode, row in rows.items():
            on = mode == "on"
            lines.append(
                f"| {profile} | {mode} | {row['ok']} of {row['runs']} "
                f"| {row['trainer_save_s']:g} | {row['throughput']:.4f} "
                f"| {ratio(found, profile, on)} | {ratio(bare, profile, on)} "
                + (
                    f"| {row['checkpoint_mean_s']:.3f} / {row['checkpoint_p50_s']:.3f} "
                    f"/ {row['checkpoint_p99_s']:.3f} "
                    f"| {row['closed_p50_s']:.3f} / {row['closed_p99_s']:.3f} "
                    f"| {row['participant_s']:.3f} / {row['controller_s']:.3f} |"
                    if on
                    else "| - | - | - |"
                )
            )
    return "\n".join(lines)


def _profiles(text: str) -> tuple[str, ...]:
    profiles = tuple(text.split(","))
    unknown = sorted(set(profiles) - set(LATENCY_PROFILES))
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown profiles {unknown}; choose among {sorted(LATENCY_PROFILES)}"
        )
    return profiles


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line's options (`--quick` fills in what `--seeds`/`--steps` leave)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"CI's form: --seeds {QUICK['seeds']} --steps {QUICK['steps']}",
    )
    parser.add_argument(
        "--seeds", type=_positive, default=None, help=f"seeds (default {FULL['seeds']})"
    )
    parser.add_argument(
        "--steps", type=_positive, default=None, help=f"training steps (default {FULL['steps']})"
    )
    parser.add_argument("--workers", type=_positive, default=2, help="worker processes")
    parser.add_argument(
        "--profiles",
        type=_profiles,
        default=PROFILES,
        help=f"comma-separated latency profiles of {','.join(PROFILES)}",
    )
    args = parser.parse_args(argv)
    preset = QUICK if args.quick else FULL
    args.seeds = args.seeds or preset["seeds"]
    args.steps = args.steps or preset["steps"]
    return args


def main(argv: list[str] | None = None) -> int:
    """Print the table, the profiles and the targets (or one JSON document with `--json`);
    exit 1 if a target is missed."""
    args = parse(argv)
    result = measure(args.seeds, args.steps, args.workers, args.profiles)
    targets: dict[str, bool] = result["targets"]  # type: ignore[assignment]
    if args.json:
        print(json.dumps(result, sort_keys=True))
    else:
        figures: Figures = result["figures"]  # type: ignore[assignment]
        found: dict[str, float] = result["ratios"]  # type: ignore[assignment]
        bare: dict[str, float] = result["ratios_without_trainer_save"]  # type: ignore[assignment]
        print(markdown(result))
        print()
        for description in result["profiles"].values():  # type: ignore[attr-defined]
            print(f"profile {description}")
        for profile, rows in figures.items():
            on = rows["on"]
            if on["trainer_save_s"] and profile in found:
                print(
                    f"{profile}: participant snapshot {on['checkpoint_mean_s']:.3f} s per step "
                    f"(mean); on / off {found[profile]:.3f} with the trainer's own "
                    f"{on['trainer_save_s']:g} s checkpoint write at every step (both modes), "
                    f"{bare[profile]:.3f} without it"
                )
            if on["dominant"] is not None:
                print(
                    f"{profile}: a snapshot takes {on['participant_s'] + on['controller_s']:.3f} s "
                    f"on average, {on['phases_s'][on['dominant']]:.3f} s of it {on['dominant']}; "
                    f"periodic attempts: {on['periodic_ran']} ran, "
                    f"{on['periodic_skipped']} skipped"
                )
        print()
        for name, met in targets.items():
            print(f"{'met   ' if met else 'MISSED'} {name}")
        print(
            f"\n{args.seeds} seeds x {args.steps} steps x {len(args.profiles)} profiles x 2 "
            f"modes in {result['wall_s']:.1f} s wall ({args.workers} workers)"
        )
    return 0 if all(targets.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
