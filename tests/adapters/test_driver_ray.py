"""A full checkpoint and restore through the driver over real Ray actors (local Ray,
started once for this module). Awaiting Ray object refs needs asyncio: asyncio only."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from quiesce.adapters import (
    ControllerJournal,
    Driver,
    InMemoryDataPlane,
    InMemoryTrainer,
    Participant,
    RealClock,
    SnapshotStore,
    configure_logging,
    spawn_ray_participant,
)
from quiesce.protocol import Coordinator, QuiesceConfig
from quiesce.protocol.controller import GroupOpened, PeriodElapsed
from quiesce.protocol.wire import StatusReply

# Ray workers must use this interpreter, not a fresh `uv run` environment without the extra.
os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
ray = pytest.importorskip("ray", reason="the Ray adapter needs the `quiesce[ray]` extra")

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.parametrize("anyio_backend", ["asyncio"]),
    pytest.mark.usefixtures("local_ray"),
]


async def test_checkpoint_then_restore_through_the_driver_over_ray(
    anyio_backend: str, tmp_path: Path
) -> None:
    configure_logging("warning")
    clock = RealClock(seed=1)
    clients: dict[str, Participant] = {
        "policy-0": spawn_ray_participant(
            {"name": "policy-0", "role": "policy", "recovery_mode": "stateless"},
            state_dir=tmp_path / "policy",
        ),
        "agent-0": spawn_ray_participant(
            {"name": "agent-0", "role": "agent", "recovery_mode": "export_restore"},
            state_dir=tmp_path / "agent",
        ),
        "resources-0": spawn_ray_participant(
            {"name": "resources-0", "role": "resources", "recovery_mode": "export_restore"},
            state_dir=tmp_path / "resources",
        ),
    }
    for client in clients.values():
        await client.wait_ready()  # type: ignore[attr-defined]
    trainer = InMemoryTrainer()
    plane = InMemoryDataPlane(trainer)
    config = QuiesceConfig(control_timeout_s=20.0, prepare_timeout_s=30.0)

    def controller() -> Driver:
        return Driver(
            Coordinator(config),
            clock,
            clients,
            store=SnapshotStore(tmp_path / "snapshots"),
            journal=ControllerJournal(tmp_path / "controller"),
            trainer=trainer,
            data_plane=plane,
            turns=lambda _dispatch: 400,  # long enough to be parked by the checkpoint
        )

    driver = controller()
    async with clock.task_group() as tg:
        tg.start_soon(driver.run)
        first = await driver.start()
        assert first.kind == "bootstrap"
        driver.submit(GroupOpened("g0", 1, "agent-0", prompt="0"))
        await driver.wait_for(
            lambda s: any(a.state.value == "dispatched" for a in s.ledger.attempts)
        )
        count = len(driver.outcomes)
        driver.submit(PeriodElapsed())
        await driver.wait_for(lambda _s: len(driver.outcomes) > count)
        outcome = driver.outcomes[count]
        assert outcome.result == "completed", outcome
        snapshot = str(outcome.checkpoint_id)
        assert SnapshotStore(tmp_path / "snapshots").published() == (snapshot,)

        driver.crash()  # the controller dies; the actors and the store survive
        driver = controller()
        tg.start_soon(driver.run)
        report = await driver.start()
        assert (report.kind, report.snapshot_id) == ("snapshot", snapshot)
        assert report.metrics.siblings_resumed_from_turn == 1 and report.redispatched == 1
        resumed = [a for a in driver.state.ledger.attempts if a.attempt == 1]
        assert [a.rollout_id for a in resumed] == ["g0/0"]
        for client in clients.values():
            status = await client.status()
            assert isinstance(status, StatusReply) and status.fence == "idle"
        driver.stop()
    for client in clients.values():
        ray.kill(client.actor)  # type: ignore[attr-defined]
