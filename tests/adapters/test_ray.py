"""The Ray adapter against real actors on a local Ray (started once for the module).

Awaiting Ray object refs needs asyncio, so these tests run on the asyncio backend only.
"""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

import anyio
import pytest

from quiesce.adapters import CallFailedError, RealClock, spawn_ray_participant
from quiesce.protocol import Cause
from quiesce.protocol.wire import (
    BeginRequest,
    BoundaryRequest,
    CommitReply,
    ControlRequest,
    ErrorReply,
    ExecutionReply,
    PrepareReply,
    RestoreReply,
    RestoreRequest,
    ResumeReply,
    StatusReply,
)

# Under `uv run`, Ray starts its workers with `uv run` in a fresh environment that lacks the
# optional `ray` extra; workers must use this interpreter instead. Read when ray is imported.
os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
ray = pytest.importorskip("ray", reason="the Ray adapter needs the `quiesce[ray]` extra")

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.parametrize("anyio_backend", ["asyncio"]),
    pytest.mark.usefixtures("local_ray"),
]


def ctl(op_id: str, timeout_s: float = 30.0) -> ControlRequest:
    at = RealClock().now() + timeout_s
    return ControlRequest.model_validate({"op_id": op_id, "deadline_at": at})


async def test_prepare_commit_resume_and_refusal_through_real_actors(anyio_backend: str) -> None:
    policy = spawn_ray_participant({"name": "policy-r", "role": "policy"})
    await policy.wait_ready()
    caps = await policy.capabilities()
    assert not isinstance(caps, ErrorReply) and caps.participant == "policy-r"
    prepared = await policy.prepare(ctl("ck-1-1-step0"))
    assert isinstance(prepared, PrepareReply) and prepared.status == "ready"
    conflict = await policy.prepare(ctl("ck-1-2-step0"))
    assert isinstance(conflict, ErrorReply) and conflict.code == "checkpoint_conflict"
    assert str(conflict.active_id) == "ck-1-1-step0"
    committed = await policy.commit(ctl("ck-1-1-step0"))
    assert isinstance(committed, CommitReply) and committed.status == "committed"
    resumed = await policy.resume(ctl("ck-1-1-step0"))
    assert isinstance(resumed, ResumeReply) and str(resumed.retired) == "ck-1-1-step0"
    stale = await policy.prepare(ctl("ck-1-1-step0"))
    assert isinstance(stale, ErrorReply) and stale.code == "stale_checkpoint"
    malformed = await policy.call(policy_op("prepare"), None)
    assert isinstance(malformed, ErrorReply) and malformed.code == "malformed_request"
    ray.kill(policy.actor)
    dead = await first_failure_after_kill(policy)
    assert dead.cause is Cause.IO_ERROR


async def first_failure_after_kill(participant: Any, attempts: int = 100) -> CallFailedError:
    """The `CallFailedError` a killed actor's participant raises. `ray.kill` only asks the GCS to
    kill the actor: a call sent in the next few milliseconds may still be answered by the live
    worker, so this calls until one fails; every answer before that must still be valid."""
    for _ in range(attempts):
        try:
            reply = await participant.status()
        except CallFailedError as failure:
            return failure
        assert isinstance(reply, StatusReply), reply
        await anyio.sleep(0.05)
    raise AssertionError(f"the killed actor still answered {attempts} status calls")


def policy_op(name: str) -> Any:
    from quiesce.protocol import ParticipantOp

    return ParticipantOp(name)


async def test_checkpoint_and_restore_of_an_agent_through_real_actors(
    anyio_backend: str, tmp_path: Path
) -> None:
    agent = spawn_ray_participant({"name": "agent-r", "role": "agent"}, state_dir=tmp_path)
    await agent.wait_ready()
    # An execution parked mid-rollout is saved as a continuation and restored from it.
    begin = BeginRequest(rollout_id="r1", attempt=0, group_id="g", turns=50)
    started = await agent.begin(begin)
    assert isinstance(started, ExecutionReply) and started.state == "running"
    ready = None
    for _ in range(400):
        ready = await agent.prepare(ctl("ck-1-1-step0"))
        assert isinstance(ready, PrepareReply)
        if ready.status == "ready":
            break
    assert ready is not None and ready.status == "ready" and ready.parked == 1
    committed = await agent.commit(ctl("ck-1-1-step0"))
    assert isinstance(committed, CommitReply) and committed.status == "committed"
    assert [c.rollout_id for c in committed.continuations] == ["r1"]
    assert b"r1" in base64.b64decode(committed.artifact)
    assert isinstance(await agent.resume(ctl("ck-1-1-step0")), ResumeReply)

    restore = RestoreRequest.model_validate(
        {
            "op_id": "rs-1-2-step0",
            "deadline_at": RealClock().now() + 30,
            "snapshot_id": "ck-1-1-step0",
            "artifact": committed.artifact,
            "expected_digest": committed.digest,
        }
    )
    restored = await agent.restore(restore)
    assert isinstance(restored, RestoreReply) and restored.status == "restored"
    assert [c.rollout_id for c in restored.continuations] == ["r1"]
    replay = await agent.restore(restore)  # M2: the recorded result
    assert isinstance(replay, RestoreReply) and replay.digest == restored.digest
    status = await agent.status()
    assert isinstance(status, StatusReply) and status.fence == "restored_paused"
    # a late event of the replaced live attempt is refused or dropped, never counted
    late = await agent.boundary(BoundaryRequest(rollout_id="zz", attempt=0, turn=1))
    assert isinstance(late, ErrorReply) and late.code == "unknown_execution"
    assert isinstance(await agent.resume(ctl("rs-1-2-step0")), ResumeReply)
    assert (tmp_path / "journal.json").exists()
    ray.kill(agent.actor)


async def test_deadline_bounds_a_ray_call(anyio_backend: str) -> None:
    policy = spawn_ray_participant({"name": "policy-t", "role": "policy"})
    await policy.wait_ready()
    with pytest.raises(CallFailedError) as late:
        await policy.prepare(ctl("ck-1-1-step0", timeout_s=-1.0))
    assert late.value.cause is Cause.TIMEOUT
    ray.kill(policy.actor)
