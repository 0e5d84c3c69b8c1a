"""What the table engine costs per transition, against a hand-written baseline and `transitions`.

Run: `uv run python benchmarks/bench_engine.py [--json]`.

All three contenders drive the same 4-state ring (`idle -> preparing -> quiesced ->
resuming -> idle`) with the same enums, the same guard callable and the same update
callable, holding the same frozen `Value`:
- baseline: a dict lookup on `(state, input)`, the guard, the update and the next `Value`,
  written by hand (what a careful engineer writes without an engine);
- compiled: `Table.step`;
- transitions: a `transitions.Machine` built from `transitions_config(table)`, driving a
  `TransitionsModel` that calls the same guard and update.

Each figure is the median over repeats of (loop time / transitions) with the garbage
collector disabled; ratios are taken within one run, so machines compare by ratio only.
Targets: `compiled_over_baseline <= 2.0`, `transitions_over_compiled >= 20`.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from collections.abc import Callable
from enum import Enum
from typing import Any

from quiesce.fsm import Table, TransitionsModel, Value, label, on


class Ring(Enum):
    IDLE = "idle"
    PREPARING = "preparing"
    QUIESCED = "quiesced"
    RESUMING = "resuming"


class Step(Enum):
    BEGIN = "begin"
    PREPARED = "prepared"
    COMMIT = "commit"
    RESUMED = "resumed"


def _ready(value: Value[Any, int], arg: Any) -> bool:
    return value.data >= 0


def _bump(data: int, arg: Any) -> int:
    return data + 1


_RING = [
    (Ring.IDLE, Step.BEGIN, Ring.PREPARING),
    (Ring.PREPARING, Step.PREPARED, Ring.QUIESCED),
    (Ring.QUIESCED, Step.COMMIT, Ring.RESUMING),
    (Ring.RESUMING, Step.RESUMED, Ring.IDLE),
]

TABLE: Table[Ring, Step] = Table(
    "bench_ring",
    doc="A 4-state ring: one guarded, counting row per state.",
    states=Ring,
    inputs=Step,
    initial=Ring.IDLE,
    initial_data=0,
    unmapped="forbidden",
    rows=[on(s, i, t, guard="ready", update="bump") for s, i, t in _RING],
    guards={"ready": _ready},
    updates={"bump": _bump},
)

# The baseline's table: the same enums and callables, indexed by hand.
_BASELINE: dict[tuple[Ring, Step], tuple[Callable[..., bool], Ring, Callable[..., int]]] = {
    (s, i): (_ready, t, _bump) for s, i, t in _RING
}


def _inputs(loops: int) -> list[Step]:
    return [_RING[n % 4][1] for n in range(loops)]


def _baseline(inputs: list[Step]) -> Value[Ring, int]:
    table = _BASELINE
    value: Value[Ring, int] = Value(Ring.IDLE, 0)
    for input in inputs:
        guard, target, update = table[(value.state, input)]
        if guard(value, None):
            value = Value(target, update(value.data, None))
    return value


def _compiled(inputs: list[Step]) -> Value[Ring, int]:
    step = TABLE.step
    value = TABLE.start()
    for input in inputs:
        value, _ = step(value, input)
    return value


def _transitions(names: list[str]) -> Value[Ring, int]:
    # `transitions` triggers by name: the names are prepared outside the timed loop.
    model = TransitionsModel.machine(TABLE)
    trigger = model.trigger  # type: ignore[attr-defined]
    for name in names:
        trigger(name, None)
    return model.value


def _ns_per_transition(run: Callable[[list[Any]], Value[Ring, int]], inputs: list[Any]) -> float:
    start = time.perf_counter_ns()
    final = run(inputs)
    elapsed = time.perf_counter_ns() - start
    # A contender that skipped work would be fast and wrong: check it did all of it.
    expected = Value(_RING[len(inputs) % 4][0], len(inputs))
    if final != expected:
        raise AssertionError(f"{run.__name__} ended in {final}, expected {expected}")
    return elapsed / len(inputs)


def measure(
    loops: int = 400_000, transitions_loops: int = 20_000, repeats: int = 7
) -> dict[str, float]:
    """Median ns per transition of each contender, and the two ratios the README quotes.

    Repeats are interleaved (baseline, compiled, transitions, baseline, ...) so a burst of
    load on the machine hits every contender alike. `transitions` is two orders of
    magnitude slower, so it runs fewer loops.
    """
    contenders = (
        ("baseline", _baseline, _inputs(loops)),
        ("compiled", _compiled, _inputs(loops)),
        ("transitions", _transitions, [label(i) for i in _inputs(transitions_loops)]),
    )
    samples: dict[str, list[float]] = {name: [] for name, _, _ in contenders}
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(repeats):
            for name, run, inputs in contenders:
                samples[name].append(_ns_per_transition(run, inputs))
    finally:
        if was_enabled:
            gc.enable()
    baseline, compiled, transitions = (statistics.median(samples[n]) for n, _, _ in contenders)
    return {
        "baseline_ns": round(baseline, 1),
        "compiled_ns": round(compiled, 1),
        "transitions_ns": round(transitions, 1),
        "compiled_over_baseline": round(compiled / baseline, 2),
        "transitions_over_compiled": round(transitions / compiled, 1),
    }


def main(argv: list[str] | None = None) -> int:
    """Print the figures (a table, or one JSON document with `--json`)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--loops", type=int, default=400_000, help="transitions per repeat")
    parser.add_argument("--repeats", type=int, default=7, help="repeats (the median is kept)")
    args = parser.parse_args(argv)
    result = measure(args.loops, max(args.loops // 20, 1), args.repeats)
    if args.json:
        print(json.dumps(result, sort_keys=True))
        return 0
    rows = (
        ("baseline (dict + guard + update)", f"{result['baseline_ns']:.1f} ns/transition"),
        ("compiled Table.step", f"{result['compiled_ns']:.1f} ns/transition"),
        ("transitions.Machine", f"{result['transitions_ns']:.1f} ns/transition"),
        ("compiled / baseline", f"{result['compiled_over_baseline']:.2f}  (target <= 2.0)"),
        ("transitions / compiled", f"{result['transitions_over_compiled']:.1f}  (target >= 20)"),
    )
    for name, figure in rows:
        print(f"{name:<34}: {figure}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
