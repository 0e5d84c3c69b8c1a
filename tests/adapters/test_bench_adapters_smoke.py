"""The fan-out and scale benchmarks run and report their figures at tiny sizes (no timing
is asserted: speed is measured in `benchmarks/` only)."""

from __future__ import annotations

import json

import pytest

from benchmarks import bench_fanout, bench_scale


def test_fanout_reports_both_ratios_with_a_tiny_fleet() -> None:
    figures = bench_fanout.measure(participants=4, repeats=1)
    assert set(figures) == {
        "participants",
        "pause_over_critical_path",
        "sequential_pause_over_critical_path",
    }
    # A pause can never beat the slowest call of each step it waited for.
    assert figures["pause_over_critical_path"] >= 1.0
    assert figures["sequential_pause_over_critical_path"] >= 1.0


def test_scale_reports_cpu_per_size_and_growth(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench_scale.main(["--json", "--sizes", "16,64", "--repeats", "1"]) == 0
    figures = json.loads(capsys.readouterr().out)
    assert set(figures) == {"cpu_s", "cpu_per_rollout_us", "growth_10x"}
    assert set(figures["cpu_s"]) == {"16", "64"}
    assert all(seconds > 0 for seconds in figures["cpu_s"].values())


def test_scale_ledger_puts_every_rollout_on_one_of_16_agents() -> None:
    ledger, keys = bench_scale._ledger(64)
    assert len(ledger.attempts) == 64 and len(ledger.groups) == 16
    assert len(keys) == bench_scale.AGENTS
    assert sum(len(owned) for owned in keys.values()) == 64
