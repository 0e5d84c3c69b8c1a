"""A checkpoint, a controller crash and a restore, run through the example services over
HTTP: by `ToyController` in this process, and in a Ray actor killed for real."""

from __future__ import annotations

from pathlib import Path

import anyio
import httpx
import pytest

from examples.ray_controller import ToyController
from examples.serving import ServedApp
from tests.examples.conftest import TOKEN

AUTH = {"Authorization": f"Bearer {TOKEN}"}


def controller(agent: ServedApp, resources: ServedApp, state_dir: Path) -> ToyController:
    return ToyController(
        agent_url=agent.url, resources_url=resources.url, token=TOKEN, state_dir=str(state_dir)
    )


def test_checkpoint_crash_restore_in_process(
    agent: ServedApp, resources: ServedApp, tmp_path: Path
) -> None:
    async def lives() -> tuple[dict[str, object], dict[str, str], dict[str, object]]:
        first = controller(agent, resources, tmp_path / "controller")
        started = await first.start()
        await first.dispatch(groups=2, siblings=2)
        taken = await first.checkpoint()
        first.driver.crash()  # the controller dies: only its state dir survives
        second = controller(agent, resources, tmp_path / "controller")
        restored = await second.start()
        await second.stop()
        return started, taken, restored

    started, taken, restored = anyio.run(lives)
    assert started["kind"] == "bootstrap"
    assert taken["result"] == "completed", taken
    assert restored["kind"] == "snapshot", restored
    assert restored["snapshot_id"] == taken["checkpoint_id"]
    status = httpx.get(f"{agent.url}/control/v1/status", headers=AUTH).json()
    assert status["fence"] == "idle"


REPO = Path(__file__).resolve().parents[2]


@pytest.mark.usefixtures("local_ray")
@pytest.mark.timeout(180)
def test_checkpoint_crash_restore_in_a_ray_actor(
    agent: ServedApp, resources: ServedApp, tmp_path: Path
) -> None:
    ray = pytest.importorskip("ray", reason="the Ray controller needs the `quiesce[ray]` extra")
    # The actor's worker imports `examples` from this checkout.
    actor = ray.remote(ToyController).options(
        num_cpus=0, runtime_env={"env_vars": {"PYTHONPATH": str(REPO)}}
    )
    options = {
        "agent_url": agent.url,
        "resources_url": resources.url,
        "token": TOKEN,
        "state_dir": str(tmp_path / "controller"),
    }
    first = actor.remote(**options)
    assert ray.get(first.start.remote(), timeout=120)["kind"] == "bootstrap"
    ray.get(first.dispatch.remote(groups=2, siblings=2), timeout=30)
    taken = ray.get(first.checkpoint.remote(), timeout=60)
    assert taken["result"] == "completed", taken
    ray.kill(first)  # the actor's process is killed: only the state dir survives
    second = actor.remote(**options)
    restored = ray.get(second.start.remote(), timeout=120)
    assert restored["kind"] == "snapshot", restored
    assert restored["snapshot_id"] == taken["checkpoint_id"]
    # The successor goes on: another checkpoint through the restored fleet.
    ray.get(second.dispatch.remote(groups=1, siblings=2), timeout=30)
    assert ray.get(second.checkpoint.remote(), timeout=60)["result"] == "completed"
    ray.get(second.stop.remote(), timeout=30)
    ray.kill(second)
