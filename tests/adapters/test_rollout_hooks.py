"""The hooks a service's own rollout code calls on its `ParticipantHost` (docs/adopting.md):
`begin`, `boundary`, `finish`, `at_boundary` and `mutation`. On the virtual clock."""

from __future__ import annotations

import pytest

from quiesce.adapters import ParticipantHost, VirtualClock
from quiesce.protocol import ParticipantOp
from quiesce.protocol.wire import ControlRequest, ErrorReply, ExecutionReply, RetireRequest

pytestmark = pytest.mark.anyio

CK1 = ControlRequest.model_validate({"op_id": "ck-1-1-step0", "deadline_at": 1e9})


def host_of(clock: VirtualClock, role: str) -> ParticipantHost:
    return ParticipantHost.start({"name": role, "role": role}, clock=clock, run_work=False)


async def test_a_rollout_parks_at_its_boundary_and_goes_on_after_the_resume() -> None:
    clock = VirtualClock(seed=1)
    trace: list[str] = []

    async def scenario() -> None:
        agent = host_of(clock, "agent")
        async with clock.task_group() as tg:
            tg.start_soon(agent.run)
            begun = await agent.begin("r", 1, group_id="g", turns=2)
            assert isinstance(begun, ExecutionReply) and begun.state == "running"
            assert await agent.at_boundary("r", 1)  # the fence is idle: turn 0 may start
            prepared = await agent.handle(ParticipantOp.PREPARE, CK1)  # a checkpoint asks
            assert getattr(prepared, "status", None) == "not_ready"  # turn 0 is running

            async def rollout() -> None:
                # Turn 0 ends; the boundary parks it, and the next turn waits for the resume.
                reply = await agent.boundary("r", 1, 1)
                assert isinstance(reply, ExecutionReply)
                trace.append(reply.state)
                assert await agent.at_boundary("r", 1)
                trace.append("turn 1 starts")

            tg.start_soon(rollout)
            await clock.sleep(1)
            assert trace == ["parked"]  # waiting at the boundary while the fence is closed
            closed = await agent.begin("r2", 1, group_id="g", turns=1)
            assert isinstance(closed, ErrorReply) and closed.code == "admission_closed"
            await agent.handle(ParticipantOp.RESUME, CK1)
            await clock.sleep(1)
            assert trace == ["parked", "turn 1 starts"]
            await agent.boundary("r", 1, 2)
            assert await agent.at_boundary("r", 1)
            done = await agent.finish("r", 1, {"reward": 1.0})
            assert isinstance(done, ExecutionReply) and done.receipt is not None
            again = await agent.begin("r", 1, group_id="g", turns=2)
            assert isinstance(again, ErrorReply) and again.code == "duplicate_execution"
            agent.stop()

    await clock.run(scenario)


async def test_a_retired_rollout_is_dropped_at_its_boundary() -> None:
    clock = VirtualClock(seed=2)

    async def scenario() -> None:
        agent = host_of(clock, "agent")
        await agent.begin("r", 1, group_id="g", turns=2)
        retire = RetireRequest(rollout_id="r", attempt=1)
        await agent.handle(ParticipantOp.RETIRE, retire)
        assert not await agent.at_boundary("r", 1)  # tombstoned: the rollout code drops it
        stale = await agent.begin("r", 1, group_id="g", turns=2)
        assert isinstance(stale, ErrorReply) and stale.code == "stale_attempt"
        assert not await agent.at_boundary("never", 1)  # never begun

    await clock.run(scenario)


async def test_a_mutation_waits_while_the_resources_server_is_frozen() -> None:
    clock = VirtualClock(seed=3)
    changed: list[float] = []

    async def scenario() -> None:
        resources = host_of(clock, "resources")
        prepared = await resources.handle(ParticipantOp.PREPARE, CK1)
        assert getattr(prepared, "status", None) == "ready"  # frozen: nothing in flight
        async with clock.task_group() as tg:

            async def tool_call() -> None:
                async with resources.mutation("m1", "r"):
                    changed.append(clock.now())

            tg.start_soon(tool_call)
            await clock.sleep(5)
            assert changed == []  # held behind the fence
            await resources.handle(ParticipantOp.RESUME, CK1)
        assert changed == [pytest.approx(5.0)]

    await clock.run(scenario)
