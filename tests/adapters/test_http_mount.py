"""The control app mounted in a service's own app (issue 29): never half alive.

A mounted Starlette app's lifespan never runs, so the participant's host would not run
while its routes answered. Now every route answers 503 `unavailable` (naming the missing
step) until the parent's lifespan enters `participant_lifespan`, and the host runs from
then on: an agent's begun execution completes, which only a running host does.
Under plain Starlette and FastAPI alike, on asyncio and trio. The parent's lifespan is run
as a server runs it (`router.lifespan_context`), requests go through `httpx.ASGITransport`."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import anyio
import httpx
import pytest
from fastapi import FastAPI
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Mount, Route

from quiesce.adapters import (
    ParticipantHost,
    RealClock,
    WorkConfig,
    create_app,
    participant_lifespan,
)

TOKEN = "s3cret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
BEGIN = {"rollout_id": "r1", "attempt": 1, "group_id": "g1", "turns": 1}


def agent() -> ParticipantHost:
    # run_work: a begun execution runs (one simulated turn) only while the host runs.
    fast = WorkConfig(step_latency_s=(0.001, 0.002))
    return ParticipantHost.start({"name": "agent-0", "role": "agent"}, clock=RealClock(), work=fast)


async def run(request: Request) -> JSONResponse:
    return JSONResponse({"service": "own route"})


def starlette_service(host: ParticipantHost, *, enter: bool) -> Starlette:
    control = create_app(host, token=TOKEN)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if enter:
            async with participant_lifespan(control):
                yield
        else:
            yield  # the mistake: the mounted app's lifespan is never run

    return Starlette(
        routes=[Route("/run", run, methods=["POST"]), Mount("/", app=control)],
        lifespan=lifespan,
    )


def fastapi_service(host: ParticipantHost, *, enter: bool) -> FastAPI:
    control = create_app(host, token=TOKEN)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if enter:
            async with participant_lifespan(control):
                yield
        else:
            yield

    service = FastAPI(lifespan=lifespan)
    service.add_api_route("/run", run, methods=["POST"])
    service.mount("/", control)
    return service


SERVICES: list[Callable[..., Starlette]] = [starlette_service, fastapi_service]
pytestmark = pytest.mark.anyio


@asynccontextmanager
async def serving(app: Starlette) -> AsyncIterator[httpx.AsyncClient]:
    """`app` as a server runs it: its lifespan entered, then requests."""
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://service") as client,
    ):
        yield client


@pytest.mark.parametrize("service", SERVICES, ids=["starlette", "fastapi"])
async def test_mounted_without_the_lifespan_every_route_answers_503(
    service: Callable[..., Starlette],
) -> None:
    host = agent()
    async with serving(service(host, enter=False)) as client:
        assert (await client.post("/run")).json() == {"service": "own route"}  # the service's
        for method, path, body in [
            ("GET", "/control/v1/status", None),
            ("GET", "/control/v1/capabilities", None),
            ("GET", "/control/v1/completions", None),
            ("POST", "/control/v1/begin", BEGIN),
            ("POST", "/control/v1/prepare", {"op_id": "ck-1-1-step0", "deadline_at": 1e10}),
            ("GET", "/healthz", None),
        ]:
            reply = await client.request(method, path, json=body, headers=AUTH)
            assert reply.status_code == 503, (path, reply.text)
            assert reply.json()["code"] == "unavailable"
            assert "participant_lifespan" in reply.json()["message"], reply.text
        # Refused before the host was touched: nothing began.
        assert host.state.fence.state.value == "idle"
        assert host.completions().receipts == ()
        # A wrong token is still a 401 (auth first: a 503 tells a stranger nothing).
        assert (await client.get("/control/v1/status")).status_code == 401


@pytest.mark.parametrize("service", SERVICES, ids=["starlette", "fastapi"])
async def test_mounted_with_the_lifespan_the_host_runs(service: Callable[..., Starlette]) -> None:
    host = agent()
    async with serving(service(host, enter=True)) as client:
        assert (await client.get("/healthz")).json() == {"ok": True}
        status = await client.get("/control/v1/status", headers=AUTH)
        assert status.status_code == 200 and status.json()["fence"] == "idle"
        begun = await client.post("/control/v1/begin", json=BEGIN, headers=AUTH)
        assert begun.status_code == 200, begun.text
        # Only a running host runs the execution to its end.
        with anyio.fail_after(10):
            while not (await client.get("/control/v1/completions", headers=AUTH)).json()[
                "receipts"
            ]:
                await anyio.sleep(0.01)
        assert (await client.post("/run")).status_code == 200
    # The parent's shutdown stopped the host: the participant answers nothing more.
    assert not host.alive


def test_the_lifespan_refuses_an_app_create_app_did_not_make() -> None:
    with pytest.raises(TypeError, match="create_app"):
        participant_lifespan(Starlette())


async def test_entering_the_lifespan_twice_is_refused() -> None:
    control = create_app(agent(), token=TOKEN)
    lifetime: AbstractAsyncContextManager[None] = participant_lifespan(control)
    async with lifetime:
        with pytest.raises(RuntimeError, match="already runs"):
            async with participant_lifespan(control):
                pass


async def test_served_standalone_the_app_runs_its_own_lifespan() -> None:
    async with serving(create_app(agent(), token=TOKEN)) as client:
        assert (await client.get("/control/v1/status", headers=AUTH)).status_code == 200
