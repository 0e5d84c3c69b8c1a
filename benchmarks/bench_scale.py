"""Controller CPU per checkpoint with 1k, 10k and 100k rollouts in flight (virtual clock).

Run: `uv run python benchmarks/bench_scale.py [--json] [--sizes 1000,10000,100000]`.

N in-flight rollouts (prompt groups of 4) are spread over 16 agents; one checkpoint parks
and resumes all of them: prepare (each agent reports N/16 parked), commit (each agent's
artifact lists its N/16 continuations), capture (the ledger of N attempts goes into the
cut), validate, publish, release, and the ledger is walked again when admission reopens.

What is measured is the **controller**: the pure coordinator plus the driver (staging
writes, the cut, the manifest, the atomic publish), on the virtual clock. The agents are
stubs whose replies are built once before the clock starts, so their own cost (parking N
executions) is not in the figure; the policy and resources servers are real in-memory
participants. CPU time is `time.process_time()` from the trigger to the outcome, best of
`--repeats`.

Reported: `cpu_s` per size, `cpu_per_rollout_us` at the largest size, and `growth_10x` =
CPU at 100k / CPU at 10k (target <= 11: linear).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio

from quiesce.adapters import (
    CompletionsReply,
    ControllerJournal,
    Driver,
    InMemoryDataPlane,
    InMemoryFleet,
    InMemoryTrainer,
    Participant,
    SnapshotStore,
    VirtualClock,
    configure_logging,
)
from quiesce.fsm import Value
from quiesce.protocol import Coordinator, QuiesceConfig
from quiesce.protocol.controller import Ledger, TrainerBoundary
from quiesce.protocol.controller.lowlevel import AttemptRecord, GroupRecord
from quiesce.protocol.machines import AttemptData, AttemptState, GroupData, GroupState
from quiesce.protocol.participant import ParticipantOp, canonical_json
from quiesce.protocol.wire import (
    AckReply,
    Capabilities,
    CommitReply,
    Continuation,
    Message,
    PrepareReply,
    ResumeReply,
)

AGENTS = 16
GROUP = 4


class _ParkedAgent(Participant):
    """An agent with `keys` parked at turn 1: every reply is prebuilt (stub, no state)."""

    def __init__(self, name: str, keys: list[tuple[str, int, str]]) -> None:
        self.name = name
        self.incarnation = f"inc-{name}"
        self.parked = len(keys)
        self.continuations = tuple(
            Continuation.model_construct(
                rollout_id=rollout_id,
                attempt=attempt,
                group_id=group_id,
                turn=1,
                turns=3,
                restart_only_dependency=False,
            )
            for rollout_id, attempt, group_id in keys
        )
        document = {
            "format": 1,
            "participant": name,
            "role": "agent",
            "state": {"continuations": [c.model_dump() for c in self.continuations]},
        }
        artifact = canonical_json(document).encode()
        self.digest = hashlib.sha256(artifact).hexdigest()
        self.artifact = base64.b64encode(artifact).decode("ascii")

    async def send(
        self, op: ParticipantOp, request: Message | None, deadline_at: float | None
    ) -> Message:
        stamp: dict[str, Any] = {"participant": self.name, "incarnation": self.incarnation}
        op_id: Any = getattr(request, "op_id", None)
        if op is ParticipantOp.CAPABILITIES:
            return Capabilities(**stamp, role="agent", recovery_mode="export_restore")
        if op is ParticipantOp.PREPARE:
            return PrepareReply.model_construct(
                None,
                **stamp,
                op_id=op_id,
                status="ready",
                blockers=(),
                parked=self.parked,
                frozen=0,
                completed_unacknowledged=0,
            )
        if op is ParticipantOp.COMMIT:
            return CommitReply.model_construct(
                None,
                **stamp,
                op_id=op_id,
                status="committed",
                digest=self.digest,
                artifact=self.artifact,
                continuations=self.continuations,
                reason="",
            )
        if op is ParticipantOp.RESUME:
            return ResumeReply.model_construct(None, **stamp, op_id=op_id, retired=op_id)
        if op is ParticipantOp.ACK:
            return AckReply(**stamp)
        # The benchmark parks and resumes only: any other op means the driver changed.
        raise ValueError(f"the scale benchmark's stub agent does not answer {op}")

    async def completions(self, *, deadline_at: float | None = None) -> Any:
        return CompletionsReply(participant=self.name, incarnation=self.incarnation)


def _ledger(size: int) -> tuple[Ledger, dict[str, list[tuple[str, int, str]]]]:
    """`size` dispatched attempts in groups of 4, group i on agent i % 16 (built directly:
    the benchmark measures the checkpoint, not how the flow got there)."""
    groups: list[GroupRecord] = []
    attempts: list[AttemptRecord] = []
    keys: dict[str, list[tuple[str, int, str]]] = {f"agent-{i}": [] for i in range(AGENTS)}
    for index in range(size // GROUP):
        group_id = f"g{index}"
        agent = f"agent-{index % AGENTS}"
        groups.append(
            GroupRecord(
                group_id, 0, str(index), agent, Value(GroupState.GENERATING, GroupData(GROUP))
            )
        )
        for sibling in range(GROUP):
            attempts.append(
                AttemptRecord(
                    group_id, 0, sibling, 0, Value(AttemptState.DISPATCHED, AttemptData())
                )
            )
            keys[agent].append((f"{group_id}/{sibling}", 0, group_id))
    return Ledger(tuple(groups), tuple(attempts)), keys


async def _checkpoint_cpu(size: int, repeats: int, root: Path) -> float:
    ledger, keys = _ledger(size)
    agents = {name: _ParkedAgent(name, owned) for name, owned in keys.items()}
    clock = VirtualClock(seed=size)
    best = float("inf")

    async def main() -> None:
        nonlocal best
        fleet = InMemoryFleet(clock, policies=1, agents=0, resources=1, run_work=False)
        participants: dict[str, Participant] = {**fleet.participants, **agents}
        trainer = InMemoryTrainer()
        driver = Driver(
            Coordinator(QuiesceConfig()),
            clock,
            participants,
            store=SnapshotStore(root / "snapshots"),
            journal=ControllerJournal(root / "controller"),
            trainer=trainer,
            data_plane=InMemoryDataPlane(trainer),
        )
        async with clock.task_group() as tg:
            tg.start_soon(fleet.run)
            tg.start_soon(driver.run)
            await driver.start()
            driver.state = replace(driver.state, ledger=ledger)
            for _ in range(repeats):
                count = len(driver.outcomes)
                batch = trainer.optimizer_step([], dataloader_position=0)
                started = time.process_time()
                driver.submit(TrainerBoundary(batch.step))
                await driver.wait_for(_more_than(driver, count))
                spent = time.process_time() - started
                outcome = driver.outcomes[count]
                if outcome.result != "completed":
                    raise RuntimeError(f"checkpoint did not complete: {outcome}")
                best = min(best, spent)
            driver.stop()
            fleet.stop()

    await clock.run(main)
    return best


def _more_than(driver: Driver, count: int) -> Callable[[Any], bool]:
    def ready(_state: Any) -> bool:
        return len(driver.outcomes) > count

    return ready


def measure(sizes: tuple[int, ...] = (1_000, 10_000, 100_000), repeats: int = 3) -> dict[str, Any]:
    """CPU seconds per checkpoint at each size, per rollout, and the growth over 10x."""
    cpu: dict[str, float] = {}
    for size in sizes:
        with tempfile.TemporaryDirectory(prefix="quiesce-scale-") as tmp:
            cpu[str(size)] = round(anyio.run(_checkpoint_cpu, size, repeats, Path(tmp)), 4)
    largest = max(sizes)
    figures: dict[str, Any] = {
        "cpu_s": cpu,
        "cpu_per_rollout_us": round(cpu[str(largest)] / largest * 1e6, 3),
    }
    if len(sizes) >= 2:
        ordered = sorted(sizes)
        top, below = ordered[-1], ordered[-2]
        figures["growth_10x"] = round(cpu[str(top)] / cpu[str(below)], 3)
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    configure_logging("critical")
    sizes = tuple(int(s) for s in args.sizes.split(","))
    figures = measure(sizes, args.repeats)
    if args.json:
        print(json.dumps(figures, sort_keys=True))
    else:
        for size, seconds in figures["cpu_s"].items():
            print(f"cpu_s[{size}] {seconds:10.4f}")
        for name in ("cpu_per_rollout_us", "growth_10x"):
            if name in figures:
                print(f"{name:20s} {figures[name]:10.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
