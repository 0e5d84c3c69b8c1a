"""The checkpoint-overhead benchmark: one real run's observer, how runs are summed up and
judged, and docs/benchmarks.md's table, which is what CI's quick form prints (virtual time only,
so the same on any machine)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from benchmarks import bench_overhead
from benchmarks.bench_overhead import Job, RunFigures

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "benchmarks.md"


def test_one_run_on_counts_a_snapshot_per_step_and_its_seconds() -> None:
    figures = bench_overhead.run_one(Job("fast", "on", seed=1, steps=3))
    assert figures.verdict == "ok"
    assert figures.rollouts == figures.trained == 3 * 4 * 4
    # Every trainer boundary began an attempt, and each completed with its seconds.
    assert len(figures.boundary_ids) == 3
    for checkpoint_id in figures.boundary_ids:
        result, total, participant, controller, phases = figures.attempts[checkpoint_id]
        assert result == "completed"
        assert total > 0 and total == pytest.approx(participant + controller)
        assert total == pytest.approx(sum(phases.values()))
    assert len(figures.closed_s) == 3
    assert figures.saves == 3  # the trainer saved its own checkpoint at every step


def test_one_run_off_never_checkpoints() -> None:
    figures = bench_overhead.run_one(Job("fast", "off", seed=1, steps=3))
    assert figures.verdict == "ok"
    assert (figures.attempts, figures.boundary_ids, figures.closed_s) == ({}, set(), [])
    assert figures.rollouts == 3 * 4 * 4
    assert figures.saves == 3  # the trainer's own checkpoint is no participant checkpoint


def _run(virtual_s: float, totals: list[float], periodic: list[str]) -> RunFigures:
    run = RunFigures("ok", virtual_s, rollouts=16, trained=16, saves=len(totals))
    for i, total in enumerate(totals):
        run.boundary_ids.add(f"b{i}")
        phases = {"committing": total - 0.5, "preparing": 0.5}
        run.attempts[f"b{i}"] = ("completed", total, total, 0.0, phases)
        run.closed_s.append(total)
    for i, result in enumerate(periodic):
        run.attempts[f"p{i}"] = (result, 0.0 if result == "skipped" else 1.0, 1.0, 0.0, {})
    return run


def test_the_summary_pools_seeds_and_splits_periodic_attempts() -> None:
    row = bench_overhead.summarise(
        [_run(100.0, [2.0, 4.0], ["skipped"]), _run(60.0, [3.0], ["completed", "skipped"])],
        trainer_save_s=10.0,
    )
    assert (row["runs"], row["ok"], row["rollouts"], row["virtual_s"]) == (2, 2, 32, 160.0)
    assert row["throughput"] == 0.2
    assert (row["saves"], row["trainer_save_s"]) == (3, 10.0)
    assert row["checkpoint_mean_s"] == 3.0
    assert (row["checkpoint_p50_s"], row["checkpoint_p99_s"]) == (3.0, 4.0)
    assert (row["periodic_ran"], row["periodic_skipped"]) == (1, 2)
    assert row["snapshots"] == 4  # the skipped attempts are no snapshot
    assert row["dominant"] == "committing"


def test_the_target_is_the_review_ratio_and_every_run_ok() -> None:
    def row(rollouts: int, seconds: float, ok: int = 2) -> dict[str, float]:
        return {"rollouts": rollouts, "virtual_s": seconds, "throughput": 1.0, "ok": ok, "runs": 2}

    figures = {
        "fast": {"on": row(100, 200.0), "off": row(100, 100.0)},
        "review": {"on": row(100, 1000.0), "off": row(100, 960.0)},
    }
    assert bench_overhead.ratios(figures) == {"fast": 0.5, "review": 0.96}
    assert all(bench_overhead.verdicts(figures).values())  # fast's 0.5 is no target
    figures["review"]["on"] = row(100, 1020.0)
    assert not bench_overhead.verdicts(figures)["review: throughput on / off >= 0.95"]
    figures["review"]["on"] = row(100, 1000.0, ok=1)
    assert not bench_overhead.verdicts(figures)["review: every run ok"]


def test_the_ratio_without_trainer_save_takes_it_out_of_both_runs() -> None:
    def row(seconds: float, saves: int, save_s: float) -> dict[str, float]:
        return {
            "rollouts": 100,
            "virtual_s": seconds,
            "throughput": 1.0,
            "ok": 2,
            "runs": 2,
            "saves": saves,
            "trainer_save_s": save_s,
        }

    # 10 steps of 120 s, a trainer save of 30 s each, a participant snapshot of 8 s each.
    figures = {
        "review": {"on": row(1580.0, 10, 30.0), "off": row(1500.0, 10, 30.0)},
        "fast": {"on": row(2.0, 10, 0.0), "off": row(1.0, 10, 0.0)},
    }
    assert bench_overhead.ratios(figures) == {"review": 0.9494, "fast": 0.5}
    assert bench_overhead.ratios(figures, trainer_save=False) == {"review": 0.9375, "fast": 0.5}
    # The target is judged on the modelled run, trainer save included.
    assert not bench_overhead.verdicts(figures)["review: throughput on / off >= 0.95"]
    figures["review"]["on"] = row(1570.0, 10, 30.0)
    assert bench_overhead.verdicts(figures)["review: throughput on / off >= 0.95"]
    assert bench_overhead.ratios(figures, trainer_save=False)["review"] == 0.9449


def test_the_readme_table_is_what_the_command_it_names_prints() -> None:
    # docs/benchmarks.md quotes the command line its table came from, CI's quick form, in the
    # table's opening marker; `.ci/run` runs the same command as a gate.
    text = PAGE.read_text(encoding="utf-8")
    found = re.search(
        r"<!-- bench_overhead:begin (.*?) -->\n(.*?)\n<!-- bench_overhead:end", text, re.S
    )
    assert found is not None, "docs/benchmarks.md lost its bench_overhead table"
    command = found.group(1).split()
    assert command[:3] == ["uv", "run", "python"] and command[3].endswith("bench_overhead.py")
    args = bench_overhead.parse(command[4:])
    assert args.quick, "docs/benchmarks.md quotes CI's quick form"
    gates = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert found.group(1) in gates, "CI runs the command the table came from"
    result = bench_overhead.measure(args.seeds, args.steps, args.workers, args.profiles)
    assert bench_overhead.markdown(result) == found.group(2), (
        "move docs/benchmarks.md with the change"
    )
