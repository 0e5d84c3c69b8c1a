"""The example agent's `/run` answers what `begin` answers, and its rollout code parks at a
boundary while a checkpoint holds the fence, then finishes after the resume."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI

from examples.agent_server import create_agent_app
from examples.serving import ServedApp
from tests.examples.conftest import TOKEN

AUTH = {"Authorization": f"Bearer {TOKEN}"}
CK = {"op_id": "ck-1-1-step0", "deadline_at": 4102444800.0}


def run(agent: ServedApp, rollout_id: str, attempt: int = 1) -> httpx.Response:
    job = {"rollout_id": rollout_id, "attempt": attempt, "group_id": "g", "turns": 2}
    return httpx.post(f"{agent.url}/run", json=job, timeout=10)


def control(agent: ServedApp, op: str, body: dict[str, Any] | None = None) -> Any:
    if body is None:
        return httpx.get(f"{agent.url}/control/v1/{op}", headers=AUTH, timeout=10).json()
    return httpx.post(f"{agent.url}/control/v1/{op}", json=body, headers=AUTH, timeout=10).json()


def wait_for(condition: Any, what: str) -> None:
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def test_run_answers_what_begin_answers(agent: ServedApp) -> None:
    started = run(agent, "r1")
    assert started.status_code == 200 and started.json()["state"] == "running"
    wait_for(lambda: control(agent, "completions")["receipts"], "r1 never completed")
    (receipt,) = control(agent, "completions")["receipts"]
    # The same attempt again: it is held completed, un-ACKed (a live key).
    again = run(agent, "r1")
    assert again.status_code == 409 and again.json()["code"] == "duplicate_execution"
    control(agent, "ack", {"receipts": [receipt]})
    stale = run(agent, "r1")  # ACKed: drop it
    assert stale.status_code == 409 and stale.json()["code"] == "stale_attempt"
    assert control(agent, "prepare", CK)["status"] == "ready"
    closed = run(agent, "r2")  # a checkpoint is under way: wait and retry
    assert closed.status_code == 409 and closed.json()["code"] == "admission_closed"
    control(agent, "resume", CK)
    assert run(agent, "r2").status_code == 200


def test_a_running_rollout_parks_for_a_checkpoint_and_finishes_after(
    tmp_path: Path, resources: ServedApp
) -> None:
    def thinking(state_dir: Path) -> FastAPI:  # each turn's policy call takes 0.3 s
        return create_agent_app(state_dir, token=TOKEN, resources_url=resources.url, think_s=0.3)

    with ServedApp(thinking, tmp_path / "agent") as agent:
        assert run(agent, "r1").status_code == 200
        first = control(agent, "prepare", CK)  # turn 0 is running: not ready yet
        assert first["status"] == "not_ready" and first["blockers"], first
        # The turn ends at its boundary, where the rollout code parks: ready.
        wait_for(lambda: control(agent, "prepare", CK)["status"] == "ready", "never parked")
        parked = control(agent, "prepare", CK)
        assert parked["parked"] == 1 and parked["completed_unacknowledged"] == 0, parked
        time.sleep(0.5)  # parked: turn 1 does not start while the checkpoint holds it
        assert control(agent, "completions")["receipts"] == []
        control(agent, "resume", CK)
        wait_for(lambda: control(agent, "completions")["receipts"], "r1 never finished")
