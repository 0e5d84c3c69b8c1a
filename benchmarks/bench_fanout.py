"""Checkpoint pause against its critical path, on 64 in-memory participants (real clock).

Run: `uv run python benchmarks/bench_fanout.py [--json] [--participants 64] [--repeats 3]`.

The fleet: 64 participants (a quarter policies, half agents, a quarter resources), each
call's two legs drawn uniformly from 10-40 ms (so every call takes at least 20 ms), on the
REAL clock: the driver waits on events and deadlines only, never polls.

For one checkpoint:
- the **pause** is how long admission stayed closed (`checkpoint.admission_closed_s`);
- the **critical path** is the sum, over every `(phase, role)` step the checkpoint went
  through (prepare policy, prepare agents, ..., release agents), of the slowest call in
  that step: what a perfect fan-out could not beat, since roles follow the phase order.

`pause_over_critical_path` (median over repeats) shows what the driver adds on top: the
controller's own steps (intent record, staging writes, capture, validation, publish: real
files, fsynced, off the event loop in worker threads) and scheduling. Target: <= 1.10.
The store lives in the system temp dir unless `--store-dir` says otherwise: on a slow or
busy disk the fsyncs of staging and publishing show up in the figure. The same
figure for a **sequential** fan-out (one call at a time) shows what calling a role's
participants concurrently buys.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from quiesce.adapters import (
    ControllerJournal,
    Driver,
    InMemoryDataPlane,
    InMemoryFleet,
    InMemoryTrainer,
    Participant,
    RealClock,
    SnapshotStore,
    configure_logging,
)
from quiesce.protocol import Coordinator, OpId, QuiesceConfig
from quiesce.protocol.controller import Outcome, TrainerBoundary
from quiesce.protocol.controller.lowlevel import Metric
from quiesce.protocol.participant import ParticipantOp
from quiesce.protocol.wire import Message

LEG_S = (0.010, 0.040)
_PHASE_OPS = (ParticipantOp.PREPARE, ParticipantOp.COMMIT, ParticipantOp.RESUME)


@dataclass
class _Calls:
    """Every call's duration, by `(op, op_id, role)`."""

    durations: dict[tuple[ParticipantOp, str, str], list[float]] = field(default_factory=dict)

    def critical_path(self, op_id: OpId) -> float:
        return sum(
            max(times)
            for (op, call_id, _role), times in self.durations.items()
            if call_id == str(op_id) and op in _PHASE_OPS
        )


class _Timed(Participant):
    """Records each call's duration; with `lock`, calls run one at a time (sequential)."""

    def __init__(
        self, inner: Participant, role: str, clock: RealClock, calls: _Calls, lock: Any
    ) -> None:
        self.inner = inner
        self.name = inner.name
        self.role = role
        self.clock = clock
        self.calls = calls
        self.lock = lock

    async def send(
        self, op: ParticipantOp, request: Message | None, deadline_at: float | None
    ) -> Message:
        if self.lock is None:
            return await self._timed(op, request, deadline_at)
        async with self.lock:
            return await self._timed(op, request, deadline_at)

    async def _timed(
        self, op: ParticipantOp, request: Message | None, deadline_at: float | None
    ) -> Message:
        started = self.clock.now()
        reply = await self.inner.call(op, request, deadline_at)
        op_id = str(getattr(request, "op_id", ""))
        key = (op, op_id, self.role)
        self.calls.durations.setdefault(key, []).append(self.clock.now() - started)
        return reply

    async def completions(self, *, deadline_at: float | None = None) -> Any:
        return await self.inner.completions(deadline_at=deadline_at)


async def _run(
    participants: int, repeats: int, sequential: bool, seed: int, store_dir: str | None = None
) -> list[float]:
    clock = RealClock(seed=seed)
    quarter = max(1, participants // 4)
    agents = max(1, participants - 2 * quarter)
    fleet = InMemoryFleet(
        clock,
        policies=quarter,
        agents=agents,
        resources=quarter,
        latency_s=LEG_S,
        run_work=False,
    )
    calls = _Calls()
    lock = anyio.Lock() if sequential else None
    timed: dict[str, Participant] = {
        name: _Timed(client, fleet.configs[name].role, clock, calls, lock)
        for name, client in fleet.clients.items()
    }
    trainer = InMemoryTrainer()
    ratios: list[float] = []
    with tempfile.TemporaryDirectory(prefix="quiesce-fanout-", dir=store_dir) as tmp:
        config = QuiesceConfig(control_timeout_s=60.0, prepare_timeout_s=120.0)
        pauses: dict[str, float] = {}

        def observe(_event: Any, effects: tuple[Any, ...], _state: Any) -> None:
            pause = [
                e
                for e in effects
                if isinstance(e, Metric) and e.name == "checkpoint.admission_closed_s"
            ]
            outcome = [e for e in effects if isinstance(e, Outcome)]
            if pause and outcome:
                pauses[str(outcome[0].checkpoint_id)] = pause[0].value

        driver = Driver(
            Coordinator(config),
            clock,
            timed,
            store=SnapshotStore(Path(tmp) / "snapshots"),
            journal=ControllerJournal(Path(tmp) / "controller"),
            trainer=trainer,
            data_plane=InMemoryDataPlane(trainer),
            observers=[observe],
        )
        async with clock.task_group() as tg:
            tg.start_soon(fleet.run)
            tg.start_soon(driver.run)
            await driver.start()
            for _ in range(repeats):
                count = len(driver.outcomes)
                # A training step ends: its boundary triggers the checkpoint.
                batch = trainer.optimizer_step([], dataloader_position=0)
                driver.submit(TrainerBoundary(batch.step))
                await driver.wait_for(_more_than(driver, count))
                outcome = driver.outcomes[count]
                if outcome.result != "completed":
                    raise RuntimeError(f"checkpoint did not complete: {outcome}")
                key = str(outcome.checkpoint_id)
                ratios.append(pauses[key] / calls.critical_path(outcome.checkpoint_id))
            driver.stop()
            fleet.stop()
    return ratios


def _more_than(driver: Driver, count: int) -> Callable[[Any], bool]:
    def ready(_state: Any) -> bool:
        return len(driver.outcomes) > count

    return ready


def measure(
    participants: int = 64,
    repeats: int = 3,
    seed: int = 0,
    backend: str = "asyncio",
    store_dir: str | None = None,
) -> dict[str, float]:
    """Median pause / critical path for a concurrent and a sequential fan-out."""
    concurrent = anyio.run(_run, participants, repeats, False, seed, store_dir, backend=backend)
    # One sequential checkpoint is enough to show the difference (each takes ~15x longer).
    sequential = anyio.run(_run, participants, 1, True, seed, store_dir, backend=backend)
    return {
        "participants": float(participants),
        "pause_over_critical_path": round(statistics.median(concurrent), 4),
        "sequential_pause_over_critical_path": round(statistics.median(sequential), 4),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--participants", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--backend", choices=["asyncio", "trio"], default="asyncio")
    parser.add_argument(
        "--store-dir",
        default=None,
        help="where the snapshot store lives (default: the system temp dir); a tmpfs such "
        "as /dev/shm takes the disk's fsync latency out of the figure",
    )
    args = parser.parse_args(argv)
    configure_logging("critical")
    figures = measure(args.participants, args.repeats, args.seed, args.backend, args.store_dir)
    if args.json:
        print(json.dumps(figures, sort_keys=True))
    else:
        for name, value in figures.items():
            print(f"{name:40s} {value:10.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
