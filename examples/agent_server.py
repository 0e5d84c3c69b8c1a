"""A toy agent server that already exists (FastAPI), made a quiesce participant.

Its own route, `POST /run`, starts a rollout of two turns; each turn asks a toy policy for
an action, then calls the resources server's `/tool` with it. The quiesce part: the state
dir lock and the participant host, the control routes mounted, their lifetime entered in
the service's lifespan, and the execution hooks called from the rollout code
(`begin` when a rollout starts, `at_boundary` before each turn's first call, `boundary`
after each turn, `finish` with the result). docs/adopting.md walks through it.

`/run` takes the body of quiesce's `begin` (docs/wire.md `BeginRequest`) and answers what
`begin` answers: 200 with the execution (the turns go on in the background) or 409 with the
refusal. So the quiesce controller can dispatch rollouts to `/run` (examples/ray_controller.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager, suppress
from pathlib import Path

import anyio
import httpx
from fastapi import FastAPI
from fastapi.responses import JSONResponse

from quiesce.adapters import (
    FileJournal,
    HostStopped,
    ParticipantHost,
    RealClock,
    StateDirLock,
    create_app,
    participant_lifespan,
    secret_incarnation,
)
from quiesce.protocol.wire import BeginRequest, ErrorReply


class ToolUnavailable(Exception):
    """The resources server did not take a tool call (the rollout is left to its deadline)."""


def create_agent_app(
    state_dir: Path,
    *,
    token: str,
    resources_url: str,
    name: str = "agent-0",
    think_s: float = 0.0,
) -> FastAPI:
    """The agent service, its control routes mounted under `/control/v1/`; its toy policy
    takes `think_s` seconds per call."""
    lock = StateDirLock.acquire(state_dir)  # one live server per state dir
    host = ParticipantHost.open(
        {"name": name, "role": "agent"},
        FileJournal(state_dir),  # the participant's journal, fsynced before every reply
        clock=RealClock(),
        incarnation_factory=secret_incarnation,
        run_work=False,  # the rollouts are this service's code, not quiesce's simulation
    )
    control = create_app(host, token=token)

    async def toy_policy(rollout_id: str, turn: int) -> str:
        """The policy call of a turn: an action for the environment."""
        await anyio.sleep(think_s)
        return f"{rollout_id}: move {turn}"

    async def call_tool(
        tools: httpx.AsyncClient, rollout: BeginRequest, turn: int, action: str
    ) -> None:
        """The turn's resources call, retried while the resources server restarts."""
        call = f"{rollout.rollout_id}#{rollout.attempt}/t{turn}"
        for retry in range(50):
            body = {
                "rollout_id": rollout.rollout_id,
                "call_id": f"{call}~{retry}",
                "action": action,
            }
            try:
                if (await tools.post("/tool", json=body)).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            await anyio.sleep(0.1)
        raise ToolUnavailable(call)

    async def rollout(tools: httpx.AsyncClient, job: BeginRequest) -> None:
        """Turns `resume_from_turn`..`turns - 1`, then the result."""
        key = job.rollout_id, job.attempt
        turn = job.resume_from_turn
        # At each boundary: wait while a checkpoint holds the fence (parking here if asked).
        while await host.at_boundary(*key):
            if turn == job.turns:
                await host.finish(*key, {"turns": job.turns, "reward": 1.0})
                return  # completed: the result is held until the controller ACKs it
            action = await toy_policy(job.rollout_id, turn)  # the turn: its policy call,
            await call_tool(tools, job, turn, action)  # then the resources call it triggers
            turn += 1
            # The turn is done and its tool state changed on a restart_only server.
            reply = await host.boundary(*key, turn, restart_only_dependency=True)
            if isinstance(reply, ErrorReply) or reply.state == "tombstoned":
                return  # retired meanwhile (deadline, restore): drop it
        # at_boundary False: the execution was retired (tombstoned): drop the rollout.

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        try:
            async with (
                participant_lifespan(control),  # the host runs while the app does
                httpx.AsyncClient(base_url=resources_url) as tools,
                anyio.create_task_group() as rollouts,  # where rollouts run after /run returns
            ):
                app.state.tools, app.state.rollouts = tools, rollouts
                yield
                rollouts.cancel_scope.cancel()  # shutting down: running rollouts die
        finally:
            lock.release()

    app = FastAPI(lifespan=lifespan)

    @app.post("/run")
    async def run(job: BeginRequest) -> JSONResponse:
        try:
            reply = await host.begin(
                job.rollout_id,
                job.attempt,
                group_id=job.group_id,
                turns=job.turns,
                resume_from_turn=job.resume_from_turn,
            )
        except HostStopped:
            return JSONResponse({"error": "shutting down"}, status_code=503)
        if isinstance(reply, ErrorReply):
            # admission_closed: a checkpoint is under way, the caller waits and retries;
            # stale_attempt: this attempt was acked or retired, the caller drops it.
            return JSONResponse(reply.model_dump(mode="json"), status_code=409)
        app.state.rollouts.start_soon(_guarded, rollout(app.state.tools, job))
        return JSONResponse(reply.model_dump(mode="json"))

    app.mount("/", control)  # last: it answers every path the service does not
    return app


async def _guarded(work: Awaitable[None]) -> None:
    """Run one rollout. A server shutting down under it, or a resources server that is
    gone, ends it: the controller retries the attempt (it sees the restart, or the
    rollout's deadline retires it)."""
    with suppress(HostStopped, ToolUnavailable):
        await work
