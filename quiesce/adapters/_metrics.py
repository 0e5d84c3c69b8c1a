"""Metrics out of the controller: the catalog of every `Metric` the coordinator emits, and sinks.

What lives here: `METRICS`, one `MetricSpec` per `Metric` name the pure core emits (the
name it exports under, counter or histogram, unit, attributes, when it moves), the
`MetricPoint` a sink receives, and `OpenTelemetryMetrics`, the sink that records every point
on an OpenTelemetry meter (the optional `otel` extra). What it does not know: when a metric
moves. The coordinator decides that and emits `Metric` effects; the driver turns each one
into a `MetricPoint` (`metric_point`) and hands it to every hook it was given
(`Driver(metrics=[...])`). A hook is any callable taking a `MetricPoint`: a Prometheus client,
Ray's `ray.util.metrics`, a test's list (docs/metrics.md shows Ray).

Names follow OpenTelemetry's conventions: dotted lower case under `quiesce.`, the unit in
the instrument (`s`, `{attempt}`), never in the name; attributes are the tags the core put on
the effect, plus `role` wherever a `participant` is named and discovery knew its role.
docs/metrics.md lists the same catalog; a test checks the two agree and that every name a
simulated run emits is in it.

>>> point = metric_point(Metric("checkpoint.admission_closed_s", 0.25))
>>> (point.name, point.kind, point.unit, point.value)
('quiesce.checkpoint.admission_closed.duration', 'histogram', 's', 0.25)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal

from quiesce.fsm import QuiesceError
from quiesce.protocol.controller.lowlevel import Metric

if TYPE_CHECKING:  # the optional extra: imported only when a sink is built
    from opentelemetry.metrics import Meter, MeterProvider

__all__ = [
    "METRICS",
    "MetricHook",
    "MetricPoint",
    "MetricSpec",
    "MetricsUnavailable",
    "OpenTelemetryMetrics",
    "metric_point",
]


@dataclass(frozen=True, slots=True)
class MetricSpec:
    """One metric: `source` is the coordinator's `Metric.name`; `name` the exported name,
    `kind` a monotonic `counter` (summed) or a `histogram` (one sample per emission), `unit`
    in UCUM (`s`, or a `{annotation}` for a count), `attributes` its keys, `moves` when."""

    source: str
    name: str
    kind: Literal["counter", "histogram"]
    unit: str
    attributes: tuple[str, ...]
    moves: str


@dataclass(frozen=True, slots=True)
class MetricPoint:
    """What a hook receives: one emission of a metric, under its exported name."""

    name: str
    kind: Literal["counter", "histogram"]
    unit: str
    value: float
    attributes: tuple[tuple[str, str], ...] = ()


MetricHook = Callable[[MetricPoint], None]
"""A metrics sink: called once per `Metric` effect, in the driver's task (keep it quick)."""

_RESTORE_COUNTS = {
    "groups_rerun_group_scored": (
        "groups.rerun_group_scored",
        "{group}",
        "a restore reran a prompt group whole because its environment scores whole groups",
    ),
    "groups_rerun_whole": (
        "groups.rerun_whole",
        "{group}",
        "a restore reran a prompt group whole for another reason (level, reopened group)",
    ),
    "sealed_siblings_discarded": (
        "siblings.sealed_discarded",
        "{rollout}",
        "a restore's whole-group rerun discarded a sealed sibling",
    ),
    "siblings_resumed_from_turn": (
        "siblings.resumed_from_turn",
        "{rollout}",
        "a restore resumed an unfinished sibling from its saved turn",
    ),
    "siblings_rerun_from_scratch": (
        "siblings.rerun_from_scratch",
        "{rollout}",
        "a restore reran an unfinished sibling from turn 0",
    ),
    "continuations_discarded_restart_only": (
        "continuations.discarded_restart_only",
        "{rollout}",
        "a restore discarded a saved continuation that depends on a restart_only resource",
    ),
}

_SPECS = (
    MetricSpec(
        "checkpoint.attempts",
        "quiesce.checkpoint.attempts",
        "counter",
        "{attempt}",
        ("outcome", "cause", "retryable"),
        "a checkpoint attempt ended: outcome completed, skipped or failed; cause its reason",
    ),
    MetricSpec(
        "checkpoint.total_seconds",
        "quiesce.checkpoint.duration",
        "histogram",
        "s",
        (),
        "a checkpoint attempt ended: its time from closing admission to its outcome",
    ),
    MetricSpec(
        "checkpoint.phase_seconds",
        "quiesce.checkpoint.phase.duration",
        "histogram",
        "s",
        ("phase",),
        "a checkpoint attempt ended: once per M1 state it spent time in",
    ),
    MetricSpec(
        "checkpoint.participant_seconds",
        "quiesce.checkpoint.participant.duration",
        "histogram",
        "s",
        (),
        "a checkpoint attempt ended: its seconds waiting on participants (prepare, commit,"
        " release, abort)",
    ),
    MetricSpec(
        "checkpoint.controller_seconds",
        "quiesce.checkpoint.controller.duration",
        "histogram",
        "s",
        (),
        "a checkpoint attempt ended: its other seconds (the controller's own work);"
        " participant + controller = duration",
    ),
    MetricSpec(
        "checkpoint.admission_closed_s",
        "quiesce.checkpoint.admission_closed.duration",
        "histogram",
        "s",
        (),
        "a checkpoint dropped its holds: how long it kept admission closed",
    ),
    MetricSpec(
        "checkpoint.rollouts_parked",
        "quiesce.checkpoint.rollouts.parked",
        "histogram",
        "{rollout}",
        (),
        "a checkpoint attempt ended: executions its prepare parked at a turn boundary",
    ),
    MetricSpec(
        "checkpoint.rollouts_frozen",
        "quiesce.checkpoint.rollouts.frozen",
        "histogram",
        "{rollout}",
        (),
        "a checkpoint attempt ended: executions frozen on a paused policy call",
    ),
    MetricSpec(
        "call_retries",
        "quiesce.call.retries",
        "counter",
        "{retry}",
        ("participant", "role", "op", "cause"),
        "a control call failed with a transient cause and is retried with the same op id (§4)",
    ),
    MetricSpec(
        "rollouts.unowned_completions_dropped",
        "quiesce.rollouts.unowned_completions_dropped",
        "counter",
        "{rollout}",
        (),
        "an agent reported completions of attempts the ledger does not own; they are ACKed"
        " and dropped",
    ),
    # Moved by the background-retry rework of the live path (controller `_rollouts.py`).
    MetricSpec(
        "rollouts.groups_retried_whole",
        "quiesce.rollouts.groups.retried_whole",
        "counter",
        "{group}",
        (),
        "a live prompt group is retried whole (its live level is prompt_group: a deadline or"
        " a failed attempt)",
    ),
    MetricSpec(
        "rollouts.sealed_siblings_discarded",
        "quiesce.rollouts.siblings.sealed_discarded",
        "counter",
        "{rollout}",
        (),
        "a live whole-group retry discarded a sealed sibling",
    ),
    MetricSpec(
        "acks.background_retries",
        "quiesce.acks.background.retries",
        "counter",
        "{retry}",
        ("participant", "role", "cause"),
        "a background ACK batch failed and is sent again (same receipts) after its backoff",
    ),
    MetricSpec(
        "retires.retries",
        "quiesce.retires.retries",
        "counter",
        "{retry}",
        ("participant", "role", "cause"),
        "a retire failed and is sent again (same execution key) after its backoff",
    ),
    *(
        MetricSpec(
            f"restore.{field}",
            f"quiesce.restore.{name}",
            "counter",
            unit,
            ("result",),
            f"{moves} (added once per restore; result: snapshot, fresh_start, bootstrap)",
        )
        for field, (name, unit, moves) in _RESTORE_COUNTS.items()
    ),
    MetricSpec(
        "restore.seconds",
        "quiesce.restore.duration",
        "histogram",
        "s",
        ("result",),
        "a controller start finished its restore: from reading the intent to redispatching",
    ),
)

METRICS: Mapping[str, MetricSpec] = MappingProxyType({spec.source: spec for spec in _SPECS})
"""Every metric, by the coordinator's `Metric.name` (docs/metrics.md lists the same)."""


class MetricsUnavailable(QuiesceError):
    """`OpenTelemetryMetrics` needs the `otel` extra (`opentelemetry-api`)."""


def metric_point(
    metric: Metric, role_of: Callable[[str], str | None] | None = None
) -> MetricPoint | None:
    """The exported point of one `Metric` effect (None: a name the catalog does not know).

    `role_of(participant)` adds a `role` attribute where the metric names a participant."""
    spec = METRICS.get(metric.name)
    if spec is None:
        return None
    attributes = dict(metric.tags)
    participant = attributes.get("participant")
    if participant is not None and role_of is not None and "role" not in attributes:
        role = role_of(participant)
        if role is not None:
            attributes["role"] = role
    return MetricPoint(
        spec.name, spec.kind, spec.unit, metric.value, tuple(sorted(attributes.items()))
    )


class OpenTelemetryMetrics:
    """A `MetricHook` recording every point on an OpenTelemetry meter: one instrument per
    `METRICS` entry, counters as `Counter.add`, histograms as `Histogram.record`.

    `meter` defaults to `get_meter("quiesce")` of `meter_provider` (default: the global
    one your SDK set up). Needs the `otel` extra (`pip install 'quiesce[otel]'`); without it
    the constructor raises `MetricsUnavailable`.

    >>> sink = OpenTelemetryMetrics()  # doctest: +SKIP
    >>> driver = build_controller(participants, ..., metrics=[sink])  # doctest: +SKIP
    """

    def __init__(
        self, meter: Meter | None = None, *, meter_provider: MeterProvider | None = None
    ) -> None:
        try:
            from opentelemetry import metrics
        except ImportError as error:
            raise MetricsUnavailable(
                "OpenTelemetryMetrics needs opentelemetry-api: install the otel extra "
                "(pip install 'quiesce[otel]', or uv sync --extra otel)"
            ) from error
        self.meter = meter or metrics.get_meter("quiesce", meter_provider=meter_provider)
        self._instruments: dict[str, Any] = {}
        for spec in METRICS.values():
            make = (
                self.meter.create_counter if spec.kind == "counter" else self.meter.create_histogram
            )
            self._instruments[spec.name] = make(spec.name, unit=spec.unit, description=spec.moves)

    def __call__(self, point: MetricPoint) -> None:
        instrument = self._instruments[point.name]
        attributes = dict(point.attributes)
        if point.kind == "counter":
            instrument.add(point.value, attributes=attributes)
        else:
            instrument.record(point.value, attributes=attributes)
