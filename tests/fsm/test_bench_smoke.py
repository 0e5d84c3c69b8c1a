"""The engine benchmark runs and reports its figures (no timing is asserted here)."""

from __future__ import annotations

import json

import pytest

from benchmarks import bench_engine

KEYS = {
    "baseline_ns",
    "compiled_ns",
    "transitions_ns",
    "compiled_over_baseline",
    "transitions_over_compiled",
}


def test_measure_reports_every_figure_with_tiny_loops() -> None:
    figures = bench_engine.measure(loops=40, transitions_loops=8, repeats=1)
    assert set(figures) == KEYS
    assert all(value > 0 for value in figures.values())


def test_the_json_flag_prints_one_document(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench_engine.main(["--json", "--loops", "40", "--repeats", "1"]) == 0
    assert set(json.loads(capsys.readouterr().out)) == KEYS


def test_the_contenders_agree_on_the_final_value() -> None:
    inputs = bench_engine._inputs(10)
    expected = bench_engine._compiled(inputs)
    assert expected.data == 10
    assert bench_engine._baseline(inputs) == expected
    assert bench_engine._transitions([i.value for i in inputs]) == expected
