"""The goodput benchmark's figures: one real run's observer, and how runs are summed up
(the full sweep runs in `benchmarks/bench_faults.py`; the run docs/benchmarks.md quotes is a slow
test)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from benchmarks import bench_faults
from benchmarks.bench_faults import Job, RunFigures
from quiesce.protocol import Cause


def test_one_run_is_observed_through_simulate_and_counts_its_attempts() -> None:
    figures = bench_faults.run_one(Job(rate=0.05, mode="no_retries", seed=1, steps=3))
    assert figures.verdict in ("ok", "stopped")
    assert figures.outcomes  # every trainer boundary is an attempt
    assert set(figures.outcomes.values()) <= {"completed", "failed", "skipped"}
    # One admission-closed figure per attempt that closed admission, each positive.
    assert 0 < len(figures.closed_s) <= len(figures.outcomes)
    assert all(s > 0 for s in figures.closed_s)


def test_the_summary_counts_final_outcomes_and_pools_admission_closed() -> None:
    runs = [
        RunFigures(3, "ok", {"a": "completed", "b": "failed"}, [0.1, 0.2], {"b": "timeout"}),
        RunFigures(3, "stopped", {"c": "completed", "d": "skipped"}, [0.3, 5.0]),
    ]
    row = bench_faults.summarise(runs)
    assert (row["runs"], row["stopped"], row["violated"]) == (2, 1, 0)
    assert (row["completed"], row["failed"], row["skipped"]) == (2, 1, 1)
    assert row["completed_pct"] == 66.7
    assert row["closed_median_s"] == 0.25 and row["closed_p99_s"] == 5.0
    assert row["failed_by"] == {"timeout": 1}


def test_every_failed_attempt_is_broken_down_by_cause_and_op() -> None:
    figures = bench_faults.run_one(Job(rate=0.5, mode="retries_restarts", seed=1, steps=3))
    failed = {cid for cid, result in figures.outcomes.items() if result == "failed"}
    assert failed, "precondition: at this rate some attempt fails"
    assert set(figures.failed_by) == failed
    causes = {label.split(" at ")[0] for label in figures.failed_by.values()}
    assert causes <= {cause.value for cause in Cause}


def test_the_completion_targets_are_judged_per_mode() -> None:
    def row(stopped: int, pct: float) -> dict[str, float]:
        return {"stopped": stopped, "completed_pct": pct}

    figures = {
        "0.05": {"retries": row(0, 95.0), "retries_restarts": row(0, 85.0)},
        "0.1": {"retries": row(0, 80.0), "retries_restarts": row(1, 75.0)},
    }
    assert all(bench_faults.completion(figures, "retries").values())
    assert list(bench_faults.completion(figures, "retries_restarts").values()) == [False, False]


PAGE = Path(__file__).resolve().parents[2] / "docs" / "benchmarks.md"


@pytest.mark.slow
def test_the_benchmarks_table_is_what_the_command_it_names_prints() -> None:
    # docs/benchmarks.md quotes the command line its table came from (in the table's opening
    # marker); the figures are virtual-time only, so running it again prints the same table.
    text = PAGE.read_text(encoding="utf-8")
    found = re.search(r"<!-- bench_faults:begin(.*?)-->\n(.*?)\n<!-- bench_faults:end", text, re.S)
    assert found is not None, "docs/benchmarks.md lost its bench_faults table"
    args = bench_faults.parse(found.group(1).split())
    result = bench_faults.measure(args.seeds, args.steps, args.workers, args.rates, args.modes)
    assert bench_faults.markdown(result) == found.group(2)
