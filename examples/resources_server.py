"""A toy resources server that already exists (FastAPI), made a quiesce participant.

Its own route, `POST /tool`, changes a rollout's environment state (here: appends the
agent's action to the rollout's transcript). The quiesce part is four lines: the state dir
lock and the participant host, the control routes mounted, their lifetime entered in the
service's lifespan, and every state change wrapped in `host.mutation(...)`, so a checkpoint
freezes the server between changes (M5). docs/adopting.md walks through it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import JSONResponse
from pydantic import BaseModel

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


class ToolCall(BaseModel):
    """One tool call of a rollout's turn; `call_id` is unique per call."""

    rollout_id: str
    call_id: str
    action: str


def create_resources_app(state_dir: Path, *, token: str, name: str = "resources-0") -> FastAPI:
    """The resources service, its control routes mounted under `/control/v1/`."""
    lock = StateDirLock.acquire(state_dir)  # one live server per state dir
    host = ParticipantHost.open(
        # restart_only: this toy state is not saved in a snapshot, so a restored rollout
        # that changed it restarts from scratch (M5); the safe default.
        {"name": name, "role": "resources", "recovery_mode": "restart_only"},
        FileJournal(state_dir),  # the participant's journal, fsynced before every reply
        clock=RealClock(),
        incarnation_factory=secret_incarnation,
    )
    control = create_app(host, token=token)
    transcripts: dict[str, list[str]] = {}  # the service's own state, per rollout

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        try:
            async with participant_lifespan(control):  # the host runs while the app does
                yield
        finally:
            lock.release()

    app = FastAPI(lifespan=lifespan)

    @app.post("/tool")
    async def tool(call: ToolCall) -> JSONResponse:
        try:
            # Admitted at once, or held while a checkpoint has the server frozen.
            async with host.mutation(call.call_id, call.rollout_id):
                transcripts.setdefault(call.rollout_id, []).append(call.action)
        except HostStopped:
            return JSONResponse({"error": "shutting down"}, status_code=503)
        return JSONResponse({"steps": len(transcripts[call.rollout_id])})

    app.mount("/", control)  # last: it answers every path the service does not
    return app
