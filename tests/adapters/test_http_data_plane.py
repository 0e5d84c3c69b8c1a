"""The HTTP data plane against REAL uvicorn servers on 127.0.0.1: an agent's generation
calls and mutations cross processes, and an execution freezes on a fenced policy over HTTP.

The servers are uvicorn (asyncio only); the clients run on both anyio backends.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from quiesce.adapters import (
    HostStopped,
    HttpParticipant,
    HttpPolicyService,
    HttpResourcesService,
    ParticipantHost,
    RealClock,
    ServiceUnusable,
    connect_services,
)
from quiesce.protocol.wire import (
    BeginRequest,
    CommitReply,
    ControlRequest,
    PrepareReply,
    ResumeReply,
)
from quiesce.testing import LocalServer, free_port

TOKEN = "tok-data-plane-51d04b8e"


# A fresh server per test: a test that fails midway leaves no fence for the next one.
@pytest.fixture
def policy() -> Iterator[LocalServer]:
    with LocalServer.start({"name": "policy-d", "role": "policy"}, token=TOKEN) as server:
        yield server


@pytest.fixture
def resources() -> Iterator[LocalServer]:
    config = {"name": "resources-d", "role": "resources", "recovery_mode": "export_restore"}
    with LocalServer.start(config, token=TOKEN) as server:
        yield server


@pytest.fixture
async def policy_clients(
    policy: LocalServer, anyio_backend: str
) -> AsyncIterator[tuple[HttpParticipant, HttpPolicyService]]:
    """The policy server's control client and an agent's generation client."""
    control = HttpParticipant(policy.url, token=TOKEN, name="policy-d")
    service = HttpPolicyService(policy.url, token=TOKEN)
    yield control, service
    await control.aclose()
    await service.aclose()


def ctl(op_id: str) -> ControlRequest:
    deadline_at = RealClock().now() + 30  # the running backend's clock
    return ControlRequest.model_validate({"op_id": op_id, "deadline_at": deadline_at})


async def until_ready(client: HttpParticipant, op_id: str) -> PrepareReply:
    """prepare(op_id) until the participant says ready (a not-ready prepare is retried)."""
    with anyio.fail_after(20):
        while True:
            reply = await client.prepare(ctl(op_id))
            assert isinstance(reply, PrepareReply), reply
            if reply.status == "ready":
                return reply
            await anyio.sleep(0.02)


class Hooks:
    """The `held` / `released` hooks of one generation call, recording what the agent saw."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self._held = anyio.Event()

    async def held(self) -> None:
        self.seen.append("held")
        self._held.set()

    async def released(self) -> None:
        self.seen.append("released")

    async def wait_held(self) -> None:
        with anyio.fail_after(10):
            await self._held.wait()


@pytest.mark.anyio
async def test_a_generation_call_is_held_by_a_fenced_policy_and_released_by_its_resume(
    policy_clients: tuple[HttpParticipant, HttpPolicyService],
) -> None:
    control, service = policy_clients
    hooks = Hooks()
    with anyio.fail_after(10):  # an open policy admits the call at once
        await service.generate("free", held=hooks.held, released=hooks.released)
    assert hooks.seen == []
    op_id = "ck-1-1-step0"
    await until_ready(control, op_id)
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: service.generate("fenced", held=hooks.held, released=hooks.released))
        await hooks.wait_held()
        assert hooks.seen == ["held"]  # the call waits behind the fence, the agent knows
        assert isinstance(await control.commit(ctl(op_id)), CommitReply)
        assert isinstance(await control.resume(ctl(op_id)), ResumeReply)
    assert hooks.seen == ["held", "released"]  # and it finished after the resume


@pytest.mark.anyio
async def test_a_caller_that_goes_away_while_held_leaves_no_call_in_flight(
    policy_clients: tuple[HttpParticipant, HttpPolicyService],
) -> None:
    control, service = policy_clients
    first, second = ("ck-1-1-step0", "ck-1-2-step0")
    hooks = Hooks()
    await until_ready(control, first)
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: service.generate("gone", held=hooks.held))
        await hooks.wait_held()
        tg.cancel_scope.cancel()  # the agent dies with its call held
    assert isinstance(await control.resume(ctl(first)), ResumeReply)
    # The server finished the abandoned call when the resume admitted it: nothing is
    # left in flight, so the next checkpoint's prepare is ready at once.
    with anyio.fail_after(5):
        ready = await until_ready(control, second)
    assert ready.status == "ready"
    assert isinstance(await control.resume(ctl(second)), ResumeReply)


@pytest.mark.anyio
async def test_mutations_and_wiring_errors(
    policy: LocalServer, resources: LocalServer, anyio_backend: str
) -> None:
    service = HttpResourcesService(resources.url, token=TOKEN, restart_only=False)
    wrong_role = HttpResourcesService(policy.url, token=TOKEN, restart_only=False)
    wrong_token = HttpPolicyService(policy.url, token="not-the-token")
    gone = HttpPolicyService(f"http://127.0.0.1:{free_port()}", token=TOKEN)
    try:
        await service.mutate(f"m-{anyio_backend}", "r1")
        with pytest.raises(HostStopped):
            await wrong_role.mutate("m-x", "r1")  # a policy server has no /data/v1/mutate
        with pytest.raises(HostStopped):
            await wrong_token.generate("g-x")
        with pytest.raises(HostStopped):
            await gone.generate("g-y")
    finally:
        for client in (service, wrong_role, wrong_token, gone):
            await client.aclose()
    assert TOKEN not in repr(service) and "not-the-token" not in repr(wrong_token)


class FailingPolicyHost(ParticipantHost):
    """A policy server whose generation has a bug."""

    async def generate(self, call_id: str, **hooks: Any) -> None:
        raise RuntimeError(f"bug in {call_id}")


@pytest.fixture
def failing_policy() -> Iterator[LocalServer]:
    # Built outside the test's event loop: the server thread runs its own (asyncio).
    config = {"name": "policy-f", "role": "policy"}
    with LocalServer.start(config, token=TOKEN, host_class=FailingPolicyHost) as server:
        yield server


@pytest.mark.anyio
async def test_a_failing_data_call_ends_unavailable_and_the_server_stays_up(
    failing_policy: LocalServer, anyio_backend: str
) -> None:
    service = HttpPolicyService(failing_policy.url, token=TOKEN)
    control = HttpParticipant(failing_policy.url, token=TOKEN, name="policy-f")
    try:
        for call_id in ("g-1", "g-2"):  # the first failure did not take the server down
            with pytest.raises(HostStopped):
                await service.generate(call_id)
        assert (await control.status()).fence == "idle"  # type: ignore[union-attr]
    finally:
        await service.aclose()
        await control.aclose()


def test_connect_services_checks_every_url_before_an_agent_starts(
    policy: LocalServer, resources: LocalServer
) -> None:
    policies, resource_clients = connect_services(
        token=TOKEN, policies=(policy.url,), resources=(resources.url,)
    )
    assert [p.base_url for p in policies] == [policy.url]
    assert [r.restart_only for r in resource_clients] == [False]  # export_restore
    nowhere = f"http://127.0.0.1:{free_port()}"
    cases = [
        ({"policies": (resources.url,)}, "is a resources server, given as a policy server"),
        ({"resources": (policy.url,)}, "is a policy server, given as a resources server"),
        ({"policies": (nowhere,)}, "unreachable"),
    ]
    for wiring, message in cases:
        with pytest.raises(ServiceUnusable, match=message) as refused:
            connect_services(token=TOKEN, wait_s=0.5, **wiring)  # type: ignore[arg-type]
        assert refused.value.url in (resources.url, policy.url, nowhere)
    with pytest.raises(ServiceUnusable, match="refused the token"):
        connect_services(token="wrong", policies=(policy.url,))


def _serve_agent(tmp_path: Path, port: int, *services: str) -> subprocess.Popen[bytes]:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    command = [
        sys.executable, "-m", "quiesce", "serve", "--role", "agent", "--port", str(port),
        "--state-dir", str(tmp_path / "agent"), "--token-file", str(token_file),
        "--name", "agent-d", *services,
    ]  # fmt: skip
    # Logs to a file: a pipe nobody reads could fill up and block the server.
    with (tmp_path / "agent.log").open("wb") as log:
        return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log)


def test_serve_wires_only_agents(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from quiesce.cli import main

    argv = ["serve", "--role", "policy", "--port", "1", "--state-dir", str(tmp_path)]
    result = CliRunner().invoke(main, [*argv, "--policy", "http://127.0.0.1:1"])
    assert result.exit_code == 2
    assert "--policy and --resources wire an agent, not a policy server" in result.output


def test_serve_refuses_an_agent_wired_to_a_server_of_the_wrong_role(
    tmp_path: Path, resources: LocalServer
) -> None:
    process = _serve_agent(tmp_path, free_port(), "--policy", resources.url)
    assert process.wait(timeout=60) == 2
    err = (tmp_path / "agent.log").read_text()
    assert f"service {resources.url}: is a resources server" in err


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_an_agent_served_over_http_freezes_on_its_fenced_policy_and_carries_on(
    tmp_path: Path, policy: LocalServer, resources: LocalServer, anyio_backend: str
) -> None:
    """`quiesce serve --role agent --policy URL --resources URL`: the agent's executions
    call the policy and resources servers; a checkpoint in phase order (policy first) holds
    their next generation call, so they freeze, and the agent is ready with them frozen."""
    port = free_port()
    process = _serve_agent(tmp_path, port, "--policy", policy.url, "--resources", resources.url)
    url = f"http://127.0.0.1:{port}"
    clients = {
        "policy": HttpParticipant(policy.url, token=TOKEN, name="policy-d"),
        "agent": HttpParticipant(url, token=TOKEN, name="agent-d"),
        "resources": HttpParticipant(resources.url, token=TOKEN, name="resources-d"),
    }
    op_id = "ck-2-1-step0"
    try:
        with anyio.fail_after(30):
            while True:
                assert process.poll() is None, "quiesce serve exited at start"
                try:
                    if httpx.get(f"{url}/healthz", timeout=0.5).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                await anyio.sleep(0.05)
        agent = clients["agent"]
        for n in range(3):
            begin = BeginRequest(rollout_id=f"r{n}", attempt=0, group_id="g", turns=400)
            assert (await agent.begin(begin)).state == "running"  # type: ignore[union-attr]
        await anyio.sleep(0.3)  # turns are under way: calls to both services
        await until_ready(clients["policy"], op_id)  # prepare: policy -> agents -> resources
        await anyio.sleep(0.3)  # every execution reaches its next turn's (held) policy call
        ready = await until_ready(agent, op_id)
        assert ready.frozen + ready.parked == 3 and ready.frozen >= 1, ready
        await until_ready(clients["resources"], op_id)
        for role in ("agent", "policy", "resources"):  # commit order
            committed = await clients[role].commit(ctl(op_id))
            assert isinstance(committed, CommitReply), committed
        for role in ("resources", "policy", "agent"):  # resume order
            assert isinstance(await clients[role].resume(ctl(op_id)), ResumeReply)
        # The held calls were released: the executions go on turning.
        status = await agent.status()
        assert status.fence == "idle" and status.live_executions == 3  # type: ignore[union-attr]
    finally:
        for client in clients.values():
            await client.aclose()
        process.kill()
        process.wait()
