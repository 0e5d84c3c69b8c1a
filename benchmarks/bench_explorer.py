# ruff: noqa: RUF005  (tuple concatenation is the fastest way to build states: the baseline must be)
"""Explorer speed: two-phase commit against a minimal hand-written BFS, and the protocol
model at the reference size, in the same run.

    uv run python benchmarks/bench_explorer.py [--rms 5] [--repeat 5] [--protocol-states N] [--json]

Both two-phase sides explore TwoPhase (TLA+) with `--rms` resource managers and must find
the same states. The baseline is the shortest honest Python BFS of the spec: plain tuples,
a set, a deque, no tables, no properties. The explorer runs the real thing: a fresh
`TwoPhase` model built from quiesce tables (cold caches), TypeOK, TCConsistent and the
no-stall pass. Reported: distinct states per second of each (best of `--repeat`), their
ratio (`explorer_over_baseline`, target >= 0.5) and the state reduction of `--symmetry`.

The protocol model (`ProtocolModel()`, PROTOCOL.md §8's reference size, far too big to
exhaust) is explored breadth-first up to `--protocol-states` distinct states by a fresh
model (cold memos), in CPU time (`time.process_time`: the machine is shared, wall time
measures the neighbours). Reported: `protocol_states_per_s` (distinct states per CPU
second, target >= 7,000), `protocol_us_per_successor` (CPU per successor computed,
target <= 60) and `protocol_bytes_per_state` (what the explorer keeps per distinct state
with the model's default 64-bit fingerprints: visited set, numbering, parent pointers,
no-stall graph; target <= 100).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from quiesce.check import TwoPhase, check
from quiesce.models import ProtocolModel, ProtocolParams

_Rm = tuple[str, ...]
_State = tuple[_Rm, str, frozenset[int], frozenset[Any]]


def baseline_bfs(rms: int) -> tuple[int, int]:
    """TwoPhase written directly: `(distinct, generated)` states, TLC's way of counting."""
    commit, abort = ("commit",), ("abort",)
    initial: _State = (("working",) * rms, "init", frozenset(), frozenset())
    seen = {initial}
    queue = deque([initial])
    generated = 1
    # Tuples are built by concatenation, as fast as Python gets (and as the model does).
    while queue:
        rm, tm, prepared, msgs = queue.popleft()
        following: list[_State] = []
        if tm == "init":
            for r in range(rms):
                if ("prepared", r) in msgs:  # TMRcvPrepared(r)
                    following.append((rm, tm, prepared | {r}, msgs))
            if len(prepared) == rms:  # TMCommit
                following.append((rm, "committed", prepared, msgs | {commit}))
            following.append((rm, "aborted", prepared, msgs | {abort}))  # TMAbort
        for r in range(rms):
            head, tail = rm[:r], rm[r + 1 :]
            if rm[r] == "working":
                following.append(
                    (head + ("prepared",) + tail, tm, prepared, msgs | {("prepared", r)})
                )
                following.append((head + ("aborted",) + tail, tm, prepared, msgs))
            if commit in msgs:
                following.append((head + ("committed",) + tail, tm, prepared, msgs))
            if abort in msgs:
                following.append((head + ("aborted",) + tail, tm, prepared, msgs))
        for state in following:
            generated += 1
            if state not in seen:
                seen.add(state)
                queue.append(state)
    return len(seen), generated


def _timed(run: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    result = run()
    return time.perf_counter() - started, result


def measure(rms: int = 5, repeat: int = 7) -> dict[str, Any]:
    """Alternate the two sides `repeat` times (so both see the same machine load) and
    keep each side's best time."""
    baseline_s = explorer_s = float("inf")
    baseline_distinct, result = 0, None
    for _ in range(repeat):
        seconds, (baseline_distinct, _) = _timed(lambda: baseline_bfs(rms))
        baseline_s = min(baseline_s, seconds)
        seconds, result = _timed(lambda: check(TwoPhase(rms)))
        explorer_s = min(explorer_s, seconds)
    assert result is not None
    if result.distinct_states != baseline_distinct or not result.ok:
        raise SystemExit(
            f"explorer and baseline disagree: {result.distinct_states} vs {baseline_distinct}"
        )
    symmetric = check(TwoPhase(rms), symmetry=True)
    baseline_rate = baseline_distinct / baseline_s
    explorer_rate = result.distinct_states / explorer_s
    return {
        "rms": rms,
        "repeat": repeat,
        "baseline_states_per_s": round(baseline_rate, 1),
        "explorer_states_per_s": round(explorer_rate, 1),
        "explorer_over_baseline": round(explorer_rate / baseline_rate, 3),
        "distinct_states": result.distinct_states,
        "generated_states": result.generated_states,
        "symmetry_distinct_states": symmetric.distinct_states,
        "symmetry_reduction": round(result.distinct_states / symmetric.distinct_states, 2),
    }


def measure_protocol(max_states: int = 30_000) -> dict[str, Any]:
    """The protocol model at the reference size, explored up to `max_states` distinct
    states in CPU time: states per CPU second, CPU microseconds per successor, and the
    bytes the explorer keeps per state."""
    started = time.process_time()
    result = check(ProtocolModel(ProtocolParams()), max_states=max_states)
    cpu = time.process_time() - started
    if result.violations:
        raise SystemExit(f"the protocol model broke {result.violations[0].property}")
    return {
        "protocol_max_states": max_states,
        "protocol_distinct_states": result.distinct_states,
        "protocol_generated_states": result.generated_states,
        "protocol_cpu_s": round(cpu, 3),
        "protocol_states_per_s": round(result.distinct_states / cpu, 1),
        "protocol_us_per_successor": round(cpu / result.generated_states * 1e6, 1),
        "protocol_exact": result.exact,
        "protocol_bytes_per_state": round(result.bytes_per_state, 1),
    }


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Parse `argv`, measure, print (JSON with `--json`) and return the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rms", type=int, default=5, help="resource managers (default 5)")
    parser.add_argument("--repeat", type=int, default=7, help="runs per side; best counts")
    parser.add_argument(
        "--protocol-states",
        type=int,
        default=30_000,
        help="distinct states of the protocol model to explore (default 30000; 0: skip)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args(argv)
    figures = measure(args.rms, args.repeat)
    if args.protocol_states > 0:
        figures.update(measure_protocol(args.protocol_states))
    if args.json:
        print(json.dumps(figures, indent=2, sort_keys=True))
    else:
        for key, value in figures.items():
            print(f"{key:>26}: {value}")
    return figures


if __name__ == "__main__":
    main(sys.argv[1:])
