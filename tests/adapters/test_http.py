"""The HTTP participant against REAL uvicorn servers on 127.0.0.1 (threads and processes).

uvicorn serves on asyncio only; the httpx client runs on both anyio backends.
"""

from __future__ import annotations

import base64
import io
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
import structlog
import uvicorn
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quiesce.adapters import (
    ROUTES,
    CallFailedError,
    FileJournal,
    HttpParticipant,
    MemoryJournal,
    ParticipantHost,
    RealClock,
    configure_server_logging,
    create_app,
)
from quiesce.protocol import Cause
from quiesce.protocol.wire import (
    AckRequest,
    BeginRequest,
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

TOKEN = "tok-7f3a9c2e51d04b8e"  # distinctive, so a grep of the logs finds any leak
CK1, CK2, CK3 = "ck-1-1-step0", "ck-1-2-step1", "ck-1-3-step2"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Served:
    url: str
    host: ParticipantHost
    server: uvicorn.Server
    thread: threading.Thread


LOGS = io.StringIO()


def _serve_in_thread(config: dict[str, Any], state_dir: Path) -> Served:
    host = ParticipantHost.open(config, FileJournal(state_dir), clock=RealClock())
    port = free_port()
    app = create_app(host, token=TOKEN)
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, loop="asyncio", log_config=None)
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.01)
    return Served(f"http://127.0.0.1:{port}", host, server, thread)


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Served]]:
    saved = (logging.root.handlers[:], logging.root.level)
    configure_server_logging("debug", LOGS)
    root = tmp_path_factory.mktemp("http")
    started = {
        "policy": _serve_in_thread({"name": "policy-0", "role": "policy"}, root / "policy"),
        "agent": _serve_in_thread({"name": "agent-0", "role": "agent"}, root / "agent"),
    }
    yield started
    for served in started.values():
        served.server.should_exit = True
    for served in started.values():
        served.thread.join(timeout=10)
    structlog.reset_defaults()
    logging.root.handlers[:], _ = saved
    logging.root.setLevel(saved[1])


def raw(served: Served, method: str, path: str, **kwargs: Any) -> httpx.Response:
    headers = kwargs.pop("headers", {"Authorization": f"Bearer {TOKEN}"})
    return httpx.request(method, served.url + path, headers=headers, timeout=10, **kwargs)


def fence(served: Served) -> str:
    status = raw(served, "GET", "/control/v1/status")
    assert status.status_code == 200
    return str(status.json()["fence"])


def ctl(op_id: str, deadline_at: float | None = None) -> ControlRequest:
    at = deadline_at if deadline_at is not None else time.monotonic() + 30
    return ControlRequest.model_validate({"op_id": op_id, "deadline_at": at})


# ------------------------------------------------------------------------ hostile input


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}, {"Authorization": "Basic x"}],
)
def test_missing_or_wrong_token_is_401_and_changes_nothing(
    servers: dict[str, Served], headers: dict[str, str]
) -> None:
    served = servers["policy"]
    before = fence(served)
    body = {"op_id": "ck-9-1-step0", "deadline_at": 1e12}
    response = raw(served, "POST", "/control/v1/prepare", json=body, headers=headers)
    assert response.status_code == 401
    assert response.json()["code"] == "unauthorized"
    assert response.headers["www-authenticate"].startswith("Bearer")
    assert TOKEN not in response.text
    assert fence(served) == before == "idle"


@pytest.mark.parametrize(
    ("content", "field"),
    [
        (b"{not json", "<body>"),
        (b"", "<body>"),
        (b'{"op_id": 7, "deadline_at": 1}', "op_id"),
        (b'{"op_id": "ck-1-x", "deadline_at": 1}', "op_id"),
        (b'{"op_id": "ck-9-1-step0"}', "deadline_at"),
        (b'{"op_id": "ck-9-1-step0", "deadline_at": 1, "sneaky": true}', "sneaky"),
        (b"[1, 2]", "<body>"),
    ],
)
def test_malformed_body_is_422_naming_the_field(
    servers: dict[str, Served], content: bytes, field: str
) -> None:
    served = servers["policy"]
    response = raw(served, "POST", "/control/v1/prepare", content=content)
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["code"] == "malformed_request" and body["field"] == field
    assert fence(served) == "idle"


def test_body_over_the_limit_is_413(servers: dict[str, Served]) -> None:
    served = servers["agent"]
    huge = b'{"receipts": [' + b" " * (1 << 20) + b"]}"
    response = raw(served, "POST", "/control/v1/ack", content=huge)
    assert response.status_code == 413
    assert response.json()["code"] == "body_too_large"


def test_unknown_route_is_404_and_wrong_method_is_405(servers: dict[str, Served]) -> None:
    served = servers["policy"]
    missing = raw(served, "POST", "/control/v1/explode", json={})
    assert missing.status_code == 404 and missing.json()["code"] == "not_found"
    wrong = raw(served, "GET", "/control/v1/prepare")
    assert wrong.status_code == 405 and wrong.json()["code"] == "method_not_allowed"
    assert "POST" in wrong.headers["allow"]


def test_refusals_are_409_with_the_error_reply(servers: dict[str, Served]) -> None:
    served = servers["policy"]
    body = {"op_id": CK2, "deadline_at": 1e12}
    assert raw(served, "POST", "/control/v1/prepare", json=body).status_code == 200
    conflict = raw(served, "POST", "/control/v1/prepare", json={**body, "op_id": CK3})
    assert conflict.status_code == 409
    assert conflict.json()["code"] == "checkpoint_conflict"
    assert conflict.json()["active_id"] == CK2
    invalid = raw(
        served,
        "POST",
        "/control/v1/begin",
        json={"rollout_id": "r", "attempt": 0, "group_id": "g", "turns": 1},
    )
    assert invalid.status_code == 409 and invalid.json()["code"] == "unsupported_operation"
    assert raw(served, "POST", "/control/v1/resume", json=body).status_code == 200
    stale = raw(served, "POST", "/control/v1/prepare", json={**body, "op_id": CK1})
    assert stale.status_code == 409 and stale.json()["code"] == "stale_checkpoint"
    assert stale.json()["high_watermark"] == CK2
    replay = raw(served, "POST", "/control/v1/resume", json=body)  # M2: recorded result
    assert replay.status_code == 200 and replay.json()["retired"] == CK2
    assert fence(served) == "idle"


# ------------------------------------------------------------------------ the client


@pytest.mark.anyio
async def test_client_prepare_commit_resume_and_typed_refusal(
    servers: dict[str, Served], anyio_backend: str
) -> None:
    served = servers["policy"]
    client = HttpParticipant(served.url, token=TOKEN, name="policy-0")
    try:
        watermark = served.host.state.fence.data.high_watermark
        seq = 10 + (watermark.seq if watermark else 0)
        op = f"ck-1-{seq}-step0"
        caps = await client.capabilities()
        assert not isinstance(caps, ErrorReply) and caps.role == "policy"
        prepared = await client.prepare(ctl(op, RealClock().now() + 10))
        assert isinstance(prepared, PrepareReply) and prepared.status == "ready"
        assert prepared.incarnation == caps.incarnation
        conflict = await client.prepare(ctl(f"ck-1-{seq + 1}-step0", RealClock().now() + 10))
        assert isinstance(conflict, ErrorReply) and conflict.code == "checkpoint_conflict"
        assert str(conflict.active_id) == op
        committed = await client.commit(ctl(op, RealClock().now() + 10))
        assert isinstance(committed, CommitReply) and committed.status == "committed"
        resumed = await client.resume(ctl(op, RealClock().now() + 10))
        assert isinstance(resumed, ResumeReply) and str(resumed.retired) == op
        status = await client.status()
        assert isinstance(status, StatusReply) and status.fence == "idle"
        # the journal on disk matches what the server answered (fsynced before replying)
        on_disk = served.host.journal.load()
        assert on_disk is not None and str(on_disk.high_watermark) == op
    finally:
        await client.aclose()


@pytest.mark.anyio
async def test_client_agent_execution_checkpoint_and_restore(
    servers: dict[str, Served], anyio_backend: str
) -> None:
    served = servers["agent"]
    client = HttpParticipant(served.url, token=TOKEN, name="agent-0")
    clock = RealClock()
    try:
        rollout = f"r-{anyio_backend}"
        begin = BeginRequest(rollout_id=rollout, attempt=0, group_id="g", turns=2)
        started = await client.begin(begin)
        assert isinstance(started, ExecutionReply) and started.state == "running"
        receipts: tuple[Any, ...] = ()
        for _ in range(200):
            receipts = tuple(
                r for r in (await client.completions()).receipts if r.rollout_id == rollout
            )
            if receipts:
                break
            time.sleep(0.02)
        assert receipts, "the execution never completed"
        acked = await client.acknowledge_completed(AckRequest(receipts=receipts))
        assert not isinstance(acked, ErrorReply) and len(acked.acknowledged) == 1

        base = 100 if anyio_backend == "asyncio" else 200
        watermark = served.host.state.fence.data.high_watermark
        base += watermark.seq if watermark else 0
        ck, rs = f"ck-1-{base}-step3", f"rs-1-{base + 1}-step3"
        prepared = await client.prepare(ctl(ck, clock.now() + 10))
        assert isinstance(prepared, PrepareReply) and prepared.status == "ready"
        committed = await client.commit(ctl(ck, clock.now() + 10))
        assert isinstance(committed, CommitReply) and committed.status == "committed"
        assert base64.b64decode(committed.artifact)  # an agent always saves its index
        assert isinstance(await client.resume(ctl(ck, clock.now() + 10)), ResumeReply)

        restore = RestoreRequest(
            op_id=rs,  # type: ignore[arg-type]
            deadline_at=clock.now() + 10,
            snapshot_id=ck,  # type: ignore[arg-type]
            artifact=committed.artifact,
            expected_digest=committed.digest,
        )
        restored = await client.restore(restore)
        assert isinstance(restored, RestoreReply) and restored.status == "restored"
        assert restored.digest == committed.digest
        assert fence(served) == "restored_paused"
        assert isinstance(await client.resume(ctl(rs, clock.now() + 10)), ResumeReply)
        assert fence(served) == "idle"
    finally:
        await client.aclose()


@pytest.mark.anyio
async def test_client_maps_http_failures_to_causes(anyio_backend: str) -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path.endswith("/status"):
            return httpx.Response(503, json={"code": "unavailable", "message": "x"})
        if path.endswith("/capabilities"):
            return httpx.Response(200, json={"participant": "p", "nonsense": 1})
        if path.endswith("/prepare"):
            return httpx.Response(401, json={"code": "unauthorized", "message": "x"})
        raise httpx.ConnectError("refused", request=request)

    client = HttpParticipant(
        "http://p.invalid", token=TOKEN, name="p", transport=httpx.MockTransport(answer)
    )
    clock = RealClock()
    failures: dict[str, CallFailedError] = {}
    for name, call in {
        "status": client.status(),
        "capabilities": client.capabilities(),
        "prepare": client.prepare(ctl(CK1, clock.now() + 5)),
        "commit": client.commit(ctl(CK1, clock.now() + 5)),
        "expired": client.resume(ctl(CK1, clock.now() - 1)),
    }.items():
        with pytest.raises(CallFailedError) as caught:
            await call
        failures[name] = caught.value
    assert failures["status"].cause is Cause.PARTICIPANT_ERROR
    assert failures["capabilities"].cause is Cause.PARTICIPANT_ERROR
    assert failures["capabilities"].error is not None  # the RemoteProtocolError
    assert failures["prepare"].cause is Cause.PARTICIPANT_ERROR
    assert failures["commit"].cause is Cause.IO_ERROR
    assert failures["expired"].cause is Cause.TIMEOUT
    assert all(TOKEN not in str(f) for f in failures.values())
    assert TOKEN not in repr(client)
    await client.aclose()


# ------------------------------------------------------------------------ real processes


def _spawn(state_dir: Path, port: int, token_file: Path, stderr: Any) -> subprocess.Popen[bytes]:
    command = [
        sys.executable, "-m", "quiesce", "serve", "--role", "policy", "--port", str(port),
        "--state-dir", str(state_dir), "--token-file", str(token_file), "--name", "policy-k",
    ]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "QUIESCE_TOKEN"}
    process = subprocess.Popen(command, stderr=stderr, stdout=subprocess.DEVNULL, env=env)
    deadline = time.monotonic() + 20
    while True:
        assert process.poll() is None, "quiesce serve exited at start"
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=0.5).status_code == 200:
                return process
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, "quiesce serve did not come up"
        time.sleep(0.05)


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_killed_server_mid_call_fails_then_recovers_from_its_journal(
    tmp_path: Path, anyio_backend: str
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    state_dir = tmp_path / "state"
    port = free_port()
    log_path = tmp_path / "server.log"
    clock = RealClock()
    url = f"http://127.0.0.1:{port}"
    with log_path.open("wb") as log:
        process = _spawn(state_dir, port, token_file, log)
        client = HttpParticipant(url, token=TOKEN, name="policy-k")
        try:
            first = await client.capabilities()
            assert not isinstance(first, ErrorReply)
            prepared = await client.prepare(ctl(CK1, clock.now() + 10))
            assert isinstance(prepared, PrepareReply) and prepared.status == "ready"
            # The server hangs mid-call (stopped), then dies: the call times out...
            process.send_signal(signal.SIGSTOP)
            with pytest.raises(CallFailedError) as hung:
                await client.commit(ctl(CK1, clock.now() + 0.5))
            assert hung.value.cause is Cause.TIMEOUT
            process.kill()
            process.wait(timeout=10)
            # ... and the next one cannot connect at all.
            with pytest.raises(CallFailedError) as refused:
                await client.status()
            assert refused.value.cause is Cause.IO_ERROR
        finally:
            await client.aclose()
            if process.poll() is None:
                process.kill()
                process.wait()
        # Restart on the same state dir: the journal survives, the incarnation changes.
        process = _spawn(state_dir, port, token_file, log)
        client = HttpParticipant(url, token=TOKEN, name="policy-k")
        try:
            status = await client.status()
            assert isinstance(status, StatusReply)
            assert status.incarnation != first.incarnation
            assert status.fence == "prepared" and str(status.active_id) == CK1
            # The controller aborts the id it failed with, then a later checkpoint works.
            assert isinstance(await client.resume(ctl(CK1, clock.now() + 10)), ResumeReply)
            for call in (client.prepare, client.commit, client.resume):
                reply = await call(ctl(CK2, clock.now() + 10))
                assert not isinstance(reply, ErrorReply), reply
            assert (await client.status()).fence == "idle"  # type: ignore[union-attr]
        finally:
            await client.aclose()
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=10)
    server_log = log_path.read_text()
    assert "participant_start" in server_log and '"recovered": true' in server_log
    assert TOKEN not in server_log


def test_token_never_appears_in_logs(servers: dict[str, Served]) -> None:
    served = servers["policy"]
    raw(served, "GET", "/control/v1/status", headers={"Authorization": "Bearer " + TOKEN[:-1]})
    raw(served, "POST", "/control/v1/prepare", content=b"{bad")
    raw(served, "GET", "/control/v1/status")
    logging.getLogger("uvicorn.error").info("probe")
    captured = LOGS.getvalue()
    assert "unauthorized" in captured and "malformed_request" in captured  # logs were caught
    assert TOKEN not in captured and TOKEN[:-1] not in captured


def test_serve_without_a_token_refuses_to_start(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "QUIESCE_TOKEN"}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "quiesce",
            "serve",
            "--role",
            "agent",
            "--port",
            "1",
            "--state-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert result.returncode == 2
    assert "QUIESCE_TOKEN" in result.stderr


# ------------------------------------------------------------------------ in-process checks


def _asgi_client(host: ParticipantHost) -> httpx.AsyncClient:
    app = create_app(host, token=TOKEN, max_body_bytes=4096, run_host=False)
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app),
        base_url="http://quiesce.test",
        headers={"Authorization": f"Bearer {TOKEN}"},
    )


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_journal_write_failure_is_503_and_changes_nothing(anyio_backend: str) -> None:
    journal = MemoryJournal()
    host = ParticipantHost.start(
        {"name": "p", "role": "policy"}, clock=RealClock(), journal=journal
    )
    journal.fail_writes = True
    async with _asgi_client(host) as client:
        body = {"op_id": CK1, "deadline_at": 1e12}
        response = await client.post("/control/v1/prepare", json=body)
        assert response.status_code == 503 and response.json()["code"] == "unavailable"
        assert (await client.get("/control/v1/status")).json()["fence"] == "idle"


_ROUTE_PATHS = [path for _, path in ROUTES.values()] + ["/control/v1/nope", "/x"]


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    path=st.sampled_from(_ROUTE_PATHS),
    method=st.sampled_from(["GET", "POST", "PUT", "DELETE"]),
    body=st.one_of(
        st.binary(max_size=64),
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
            lambda inner: (
                st.lists(inner, max_size=3)
                | st.dictionaries(
                    st.sampled_from(["op_id", "deadline_at", "receipts", "rollout_id", "x"]),
                    inner,
                    max_size=4,
                )
            ),
            max_leaves=8,
        ).map(lambda value: json.dumps(value).encode()),
        st.just(b"{" * 5000),
    ),
    auth=st.sampled_from([None, "Bearer " + TOKEN, "Bearer nope", "Basic abc"]),
)
async def test_hostile_input_never_gets_a_5xx_nor_a_state_change(
    anyio_backend: str, path: str, method: str, body: bytes, auth: str | None
) -> None:
    host = ParticipantHost.start({"name": "a", "role": "agent"}, clock=RealClock(), run_work=False)
    before = host.state
    async with _asgi_client(host) as client:
        headers = {"Authorization": auth} if auth is not None else {"Authorization": ""}
        response = await client.request(method, path, content=body, headers=headers)
    assert response.status_code < 500, response.text
    if response.status_code >= 400:
        assert isinstance(response.json()["code"], str)  # a typed error body
        assert host.state == before
    assert TOKEN not in response.text


# ------------------------------------------------------------------------ with the driver


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_killed_server_mid_prepare_leads_to_abort_then_a_successful_checkpoint(
    tmp_path: Path, servers: dict[str, Served], anyio_backend: str
) -> None:
    from quiesce.adapters import (
        ControllerJournal,
        Driver,
        InMemoryDataPlane,
        InMemoryTrainer,
        SnapshotStore,
    )
    from quiesce.models import read_fence_logs, validate_fence_log
    from quiesce.protocol import Coordinator, QuiesceConfig
    from quiesce.protocol.controller import PeriodElapsed

    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    port = free_port()
    agent_dir = tmp_path / "agent"
    fence_log = tmp_path / "agent.fence.jsonl"  # appended to across the kill
    command = [
        sys.executable, "-m", "quiesce", "serve", "--role", "agent", "--port", str(port),
        "--state-dir", str(agent_dir), "--token-file", str(token_file), "--name", "agent-k",
        "--fence-log", str(fence_log),
    ]  # fmt: skip

    def spawn() -> subprocess.Popen[bytes]:
        process = subprocess.Popen(command, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=0.5).status_code == 200:
                    return process
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline and process.poll() is None
            time.sleep(0.05)

    clock = RealClock()
    config = QuiesceConfig(
        prepare_timeout_s=1.0,
        control_timeout_s=1.0,
        prepare_retry_interval_s=0.1,
        snapshot_attempt_interval_s=0.5,
        max_consecutive_failures=10,
    )
    # a fresh policy server for this test, so earlier tests' ids do not matter
    policy = _serve_in_thread({"name": "policy-e", "role": "policy"}, tmp_path / "policy")
    process = spawn()
    clients = {
        "policy-e": HttpParticipant(policy.url, token=TOKEN, name="policy-e"),
        "agent-k": HttpParticipant(f"http://127.0.0.1:{port}", token=TOKEN, name="agent-k"),
    }
    trainer = InMemoryTrainer()
    driver = Driver(
        Coordinator(config),
        clock,
        clients,
        store=SnapshotStore(tmp_path / "snapshots"),
        journal=ControllerJournal(tmp_path / "controller"),
        trainer=trainer,
        data_plane=InMemoryDataPlane(trainer),
    )
    try:
        async with clock.task_group() as tg:
            tg.start_soon(driver.run)
            await driver.start()
            process.send_signal(signal.SIGSTOP)  # the agent hangs: its prepare never answers
            driver.submit(PeriodElapsed())
            with anyio.fail_after(30):
                await driver.wait_for(lambda s: s.phase.value != "idle")
                while not any(o.result == "failed" for o in driver.outcomes):
                    await anyio.sleep(0.05)
            failed = next(o for o in driver.outcomes if o.result == "failed")
            assert failed.reason == "timeout"
            process.kill()  # the agent dies mid-checkpoint and comes back from its journal
            process.wait()
            process = spawn()
            with anyio.fail_after(30):
                while not any(o.result == "completed" for o in driver.outcomes):
                    if driver.state.phase.value == "idle":
                        driver.submit(PeriodElapsed())
                    await anyio.sleep(0.2)
            completed = next(o for o in driver.outcomes if o.result == "completed")
            assert completed.checkpoint_id > failed.checkpoint_id
            assert driver.stopped is None
            store = SnapshotStore(tmp_path / "snapshots")
            assert str(completed.checkpoint_id) in store.published()
            assert str(failed.checkpoint_id) not in store.published()
            store.verify(str(completed.checkpoint_id))  # complete and verifiable
            driver.stop()
        # Refinement of the HTTP run: every fence move the agent made, before and after its
        # SIGKILL, is a move of the design (the restart is one more incarnation).
        verdict = validate_fence_log(read_fence_logs([fence_log]))
        assert verdict.ok, verdict.unmapped and verdict.unmapped.explain()
        assert verdict.restarts == 1 and verdict.moves >= 4, verdict.describe()
    finally:
        for client in clients.values():
            await client.aclose()
        if process.poll() is None:
            process.kill()
            process.wait()
        policy.server.should_exit = True
        policy.thread.join(timeout=10)
