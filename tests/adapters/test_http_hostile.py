"""Hostile HTTP input that tests/adapters/test_http.py does not cover: a streamed body over
the limit, unknown fields and bad tokens on EVERY route, illegal and out-of-order operations
(each a typed 4xx that changes nothing, checked through `status`), and legal replays that
get the recorded result, byte for byte.

(The 300-example fuzz of malformed bodies lives in test_http.py; the conformance kit,
tests/testing/, drives generated operation sequences against `quiesce serve`.)
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from quiesce.adapters import REQUEST_MODELS, ROUTES, ParticipantHost, RealClock, create_app
from quiesce.protocol import ParticipantOp

TOKEN = "tok-hostile-1c5e"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
LIMIT = 4096
CK1, CK2, CK3 = "ck-1-1-step1", "ck-1-2-step2", "ck-1-3-step3"
RS4 = "rs-1-4-step4"
ROLLOUT = {"rollout_id": "r", "attempt": 0}


def _client(role: str) -> httpx.AsyncClient:
    host = ParticipantHost.start(
        {"name": f"{role}-h", "role": role}, clock=RealClock(), run_work=False
    )
    app = create_app(host, token=TOKEN, max_body_bytes=LIMIT, run_host=False)
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://quiesce.test", headers=AUTH
    )


@pytest.fixture(params=["asyncio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)  # the ASGI app runs on asyncio, like uvicorn


@pytest.fixture
async def agent() -> AsyncIterator[httpx.AsyncClient]:
    async with _client("agent") as client:
        yield client


async def _status(client: httpx.AsyncClient) -> dict[str, Any]:
    response = await client.get("/control/v1/status")
    assert response.status_code == 200
    body: dict[str, Any] = response.json()
    body.pop("incarnation")
    return body


async def _post(client: httpx.AsyncClient, op: str, body: Any) -> httpx.Response:
    return await client.post(f"/control/v1/{op}", json=body)


def _ctl(op_id: str) -> dict[str, Any]:
    return {"op_id": op_id, "deadline_at": 1e12}


def _valid(op: ParticipantOp) -> dict[str, Any]:
    return {
        ParticipantOp.PREPARE: _ctl(CK2),
        ParticipantOp.COMMIT: _ctl(CK2),
        ParticipantOp.RESUME: _ctl(CK2),
        ParticipantOp.RESTORE: {**_ctl(RS4), "snapshot_id": CK2, "expected_digest": "0" * 64},
        ParticipantOp.DISCARD: {"op_id": RS4, **ROLLOUT},
        ParticipantOp.ACK: {"receipts": [{**ROLLOUT, "receipt": "x"}]},
        ParticipantOp.RETIRE: dict(ROLLOUT),
        ParticipantOp.BEGIN: {**ROLLOUT, "group_id": "g", "turns": 1},
        ParticipantOp.BOUNDARY: {**ROLLOUT, "turn": 1},
        ParticipantOp.FINISH: {**ROLLOUT, "result": {}},
    }[op]


POST_OPS = sorted(REQUEST_MODELS, key=lambda op: op.value)


# ------------------------------------------------------------------------ size, fields, auth


@pytest.mark.anyio
async def test_a_streamed_body_over_the_limit_is_413_before_parsing(
    agent: httpx.AsyncClient,
) -> None:
    before = await _status(agent)

    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"receipts": ['
        for _ in range(LIMIT // 512 + 2):
            yield b" " * 512  # no Content-Length: the server must count what it reads
        yield b"]}"

    response = await agent.post("/control/v1/ack", content=chunks())
    assert "content-length" not in response.request.headers
    assert response.status_code == 413 and response.json()["code"] == "body_too_large"
    assert await _status(agent) == before


@pytest.mark.anyio
@pytest.mark.parametrize("op", POST_OPS, ids=lambda op: op.value)
async def test_an_unknown_field_on_every_route_is_422_naming_it(
    agent: httpx.AsyncClient, op: ParticipantOp
) -> None:
    before = await _status(agent)
    response = await _post(agent, op.value, {**_valid(op), "sneaky_extra": True})
    assert response.status_code == 422, response.text
    assert response.json() == {
        "code": "malformed_request",
        "message": response.json()["message"],
        "field": "sneaky_extra",
    }
    assert await _status(agent) == before


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("op", "method", "path"),
    [(op, method, path) for op, (method, path) in ROUTES.items()],
    ids=lambda v: v if isinstance(v, str) else getattr(v, "value", str(v)),
)
@pytest.mark.parametrize("auth", [None, "Bearer wrong", f"Basic {TOKEN}", f"Bearer {TOKEN}x"])
async def test_a_missing_or_wrong_token_on_every_route_is_401_and_changes_nothing(
    agent: httpx.AsyncClient, op: object, method: str, path: str, auth: str | None
) -> None:
    before = await _status(agent)
    body = _valid(op) if isinstance(op, ParticipantOp) and op in REQUEST_MODELS else None
    headers = {"Authorization": auth or ""}
    response = await agent.request(method, path, json=body, headers=headers)
    assert response.status_code == 401
    assert response.json()["code"] == "unauthorized" and TOKEN not in response.text
    assert response.headers["www-authenticate"] == 'Bearer realm="quiesce"'
    assert await _status(agent) == before


# ------------------------------------------------------------------------ illegal operations


async def _prepared(client: httpx.AsyncClient, op_id: str) -> None:
    assert (await _post(client, "resume", _ctl(CK1))).status_code == 200  # watermark CK1
    assert (await _post(client, "prepare", _ctl(op_id))).json()["status"] == "ready"


ILLEGAL: list[tuple[str, str, dict[str, Any], str]] = [
    # (setup, op, body, expected code)
    ("idle", "commit", _ctl(CK2), "invalid_phase"),
    ("idle", "discard", {"op_id": CK2, **ROLLOUT}, "invalid_phase"),
    ("idle", "prepare", _ctl(CK1), "stale_checkpoint"),
    ("idle", "resume", _ctl("ck-1-0-step0"), "stale_checkpoint"),
    ("idle", "finish", {**ROLLOUT, "result": {}}, "unknown_execution"),
    ("idle", "boundary", {**ROLLOUT, "turn": 1}, "unknown_execution"),
    ("prepared", "prepare", _ctl(CK3), "checkpoint_conflict"),
    ("prepared", "commit", _ctl(CK3), "checkpoint_conflict"),
    ("prepared", "resume", _ctl(CK3), "checkpoint_conflict"),
    (
        "prepared",
        "restore",
        {**_ctl(CK2), "snapshot_id": CK2, "expected_digest": "0"},
        "invalid_phase",
    ),
    ("prepared", "begin", {**ROLLOUT, "group_id": "g", "turns": 1}, "admission_closed"),
    ("prepared", "prepare", _ctl(CK1), "stale_checkpoint"),
]


@pytest.mark.anyio
@pytest.mark.parametrize(("setup", "op", "body", "code"), ILLEGAL, ids=lambda v: str(v)[:24])
async def test_illegal_and_out_of_order_operations_are_typed_409s_that_change_nothing(
    agent: httpx.AsyncClient, setup: str, op: str, body: dict[str, Any], code: str
) -> None:
    if setup == "prepared":
        await _prepared(agent, CK2)
    else:
        assert (await _post(agent, "resume", _ctl(CK1))).status_code == 200
    before = await _status(agent)
    response = await _post(agent, op, body)
    assert response.status_code == 409, response.text
    reply = response.json()
    assert reply["code"] == code and reply["participant"] == "agent-h" and reply["message"]
    if code == "checkpoint_conflict":
        assert reply["active_id"] == CK2
    if code == "stale_checkpoint":
        assert reply["high_watermark"] == CK1
    assert await _status(agent) == before


# ------------------------------------------------------------------------ legal replays


@pytest.mark.anyio
async def test_legal_replays_get_the_recorded_result_byte_for_byte(
    agent: httpx.AsyncClient,
) -> None:
    assert (await _post(agent, "resume", _ctl(CK1))).status_code == 200
    prepared = await _post(agent, "prepare", _ctl(CK2))
    assert prepared.json()["status"] == "ready"
    committed = await _post(agent, "commit", _ctl(CK2))
    assert committed.json()["status"] == "committed"
    replayed = await _post(agent, "commit", _ctl(CK2))
    assert replayed.status_code == 200 and replayed.content == committed.content
    # a late duplicate of the prepare, after the commit: the recorded ready, not a new run
    late = await _post(agent, "prepare", _ctl(CK2))
    assert late.status_code == 200 and late.content == prepared.content
    assert (await _status(agent))["fence"] == "committed_paused"
    resumed = await _post(agent, "resume", _ctl(CK2))
    again = await _post(agent, "resume", _ctl(CK2))  # idle now: the watermark's own resume
    assert again.status_code == 200 and again.content == resumed.content
    assert (await _status(agent))["fence"] == "idle"

    restore = {
        **_ctl(RS4),
        "snapshot_id": CK2,
        "artifact": committed.json()["artifact"],
        "expected_digest": committed.json()["digest"],
    }
    restored = await _post(agent, "restore", restore)
    assert restored.json()["status"] == "restored"
    replay = await _post(agent, "restore", {**restore, "expected_digest": "f" * 64})
    assert replay.status_code == 200 and replay.content == restored.content  # from the record
    assert (await _status(agent))["fence"] == "restored_paused"


@pytest.mark.anyio
async def test_a_failed_restore_records_nothing_and_a_retry_runs_again(
    agent: httpx.AsyncClient,
) -> None:
    await _prepared(agent, CK2)
    committed = (await _post(agent, "commit", _ctl(CK2))).json()
    await _post(agent, "resume", _ctl(CK2))
    bad = {**_ctl(RS4), "snapshot_id": CK2, "artifact": committed["artifact"]}
    failed = await _post(agent, "restore", {**bad, "expected_digest": "0" * 64})
    assert failed.status_code == 200 and failed.json()["status"] == "failed"
    assert (await _status(agent))["fence"] == "restore_failed_paused"
    retried = await _post(agent, "restore", {**bad, "expected_digest": committed["digest"]})
    assert retried.json()["status"] == "restored"
    assert (await _status(agent))["fence"] == "restored_paused"
