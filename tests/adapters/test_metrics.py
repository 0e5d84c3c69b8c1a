"""Metrics out of the controller: every `Metric` a simulated run emits reaches an
OpenTelemetry meter (read back through the SDK's in-memory reader) and a plain hook, under a
documented name; the figures agree with the run's own summary; and the extra stays optional."""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from quiesce.adapters import METRICS, MetricPoint, OpenTelemetryMetrics, metric_point
from quiesce.harness import SimulationResult, simulate
from quiesce.protocol.controller import ControllerEffect, ControllerInput, ControllerState
from quiesce.protocol.controller.lowlevel import Metric

DOCS = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"


class _Run:
    def __init__(self) -> None:
        self.reader = InMemoryMetricReader()
        self.points: list[MetricPoint] = []
        self.emitted: Counter[str] = Counter()

    def observe(
        self, _event: ControllerInput, effects: tuple[ControllerEffect, ...], _s: ControllerState
    ) -> None:
        self.emitted.update(e.name for e in effects if isinstance(e, Metric))


@pytest.fixture(scope="module")
def run() -> tuple[_Run, SimulationResult]:
    """The README's run: faults, participant restarts, a controller crash and a restore."""
    probe = _Run()
    sink = OpenTelemetryMetrics(meter_provider=MeterProvider(metric_readers=[probe.reader]))
    result = simulate(
        fault_rate=0.05,
        crash_at_step=4,
        seed=0,
        metrics=[sink, probe.points.append],
        observers=[probe.observe],
    )
    assert result.verdict == "ok" and result.restores
    return probe, result


def _exported(reader: InMemoryMetricReader) -> dict[str, Any]:
    data = reader.get_metrics_data()
    assert data is not None
    return {
        metric.name: metric
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
    }


def _sum(metric: Any, **attributes: str) -> float:
    return float(
        sum(
            point.value
            for point in metric.data.data_points
            if all(point.attributes.get(k) == v for k, v in attributes.items())
        )
    )


def test_opentelemetry_figures_match_the_runs_summary(run: tuple[_Run, SimulationResult]) -> None:
    probe, result = run
    exported = _exported(probe.reader)
    attempts = exported["quiesce.checkpoint.attempts"]
    assert attempts.unit == "{attempt}"
    checkpoints = result.checkpoints
    assert _sum(attempts, outcome="completed") == checkpoints.completed == 7
    assert _sum(attempts, outcome="failed") == checkpoints.failed == 1
    assert _sum(attempts, outcome="skipped") == checkpoints.skipped
    # Every failed attempt is counted under its cause (an attribute of the counter).
    causes = {p.attributes.get("cause") for p in attempts.data.data_points if p.value}
    assert None not in causes and len(causes) >= 1
    closed = exported["quiesce.checkpoint.admission_closed.duration"]
    assert closed.unit == "s"
    (histogram,) = closed.data.data_points
    assert round(histogram.max, 6) == result.admission_closed_s.max
    assert histogram.count == checkpoints.completed + checkpoints.failed + checkpoints.skipped
    resumed = exported["quiesce.restore.siblings.resumed_from_turn"]
    assert _sum(resumed) == result.rollouts.resumed_from_turn == 10
    assert _sum(resumed, result="snapshot") == 10
    rerun = exported["quiesce.restore.siblings.rerun_from_scratch"]
    assert _sum(rerun) == result.rollouts.rerun_from_scratch
    # Participant and controller seconds add up to the checkpoint's duration.
    total = exported["quiesce.checkpoint.duration"].data.data_points[0].sum
    parts = sum(
        exported[f"quiesce.checkpoint.{who}.duration"].data.data_points[0].sum
        for who in ("participant", "controller")
    )
    assert parts == pytest.approx(total)
    retries = exported["quiesce.call.retries"].data.data_points
    assert retries and all(
        {"participant", "role", "op", "cause"} <= set(p.attributes) for p in retries
    )


def test_every_emitted_name_reaches_the_hook_and_is_documented(
    run: tuple[_Run, SimulationResult],
) -> None:
    probe, _ = run
    assert set(probe.emitted) <= set(METRICS), set(probe.emitted) - set(METRICS)
    hooked = Counter(p.name for p in probe.points)
    assert hooked == Counter({METRICS[n].name: k for n, k in probe.emitted.items()})
    documented = _documented()
    for source in probe.emitted:
        spec = METRICS[source]
        assert documented.get(spec.name) == (spec.kind, spec.unit, spec.source), spec.name


def _documented() -> Mapping[str, tuple[str, str, str]]:
    rows = re.findall(
        r"^\| `(quiesce\.[a-z_.]+)` \| (\w+) \| `([^`]+)` \| [^|]* \| `([a-z_.]+)` \|",
        DOCS.read_text(encoding="utf-8"),
        re.M,
    )
    return {name: (kind, unit, source) for name, kind, unit, source in rows}


def test_docs_and_catalog_list_the_same_metrics() -> None:
    documented = _documented()
    assert documented == {s.name: (s.kind, s.unit, s.source) for s in METRICS.values()}
    for spec in METRICS.values():
        assert re.fullmatch(r"quiesce(\.[a-z][a-z_]*)+", spec.name), spec.name


def test_a_participant_metric_gets_its_role() -> None:
    tags = (("cause", "timeout"), ("op", "prepare"), ("participant", "agent-0"))
    point = metric_point(Metric("call_retries", 1.0, tags), {"agent-0": "agent"}.get)
    assert point is not None and dict(point.attributes)["role"] == "agent"
    assert metric_point(Metric("no.such.metric", 1.0)) is None


def test_importing_quiesce_does_not_import_opentelemetry() -> None:
    code = (
        "import sys, quiesce, quiesce.adapters, quiesce.harness, quiesce.cli; "
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))"
    )
    ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert ran.stdout.strip() == "[]"
