"""`HttpParticipant`: the `Participant` client for an HTTP participant server (docs/wire.md).

What lives here: one `httpx.AsyncClient` per participant, the translation of every
transport outcome into either a reply value or `CallFailedError` with its `Cause`, and the
deadline bound of each call. What it does not know: what a reply means (the coordinator).

| what happened | result |
|---|---|
| 200 | the operation's reply model |
| 409 / 422 with an `ErrorReply` body | that `ErrorReply` (a refusal is an answer) |
| the deadline passed (the caller's `deadline_at` scope or httpx's timeout) | `Cause.TIMEOUT` |
| connection refused / reset, DNS, TLS, a broken HTTP stream | `Cause.IO_ERROR` |
| 5xx | `Cause.PARTICIPANT_ERROR` |
| any other 4xx (401, 404, 405, 413, 422 `WireError`) | `Cause.PARTICIPANT_ERROR` |
| a 200/409 body that does not parse | `PARTICIPANT_ERROR`; `error`: a `RemoteProtocolError` |

A reply that does not parse is classified explicitly as retryable (`parse_reply(...,
retryable=True)`): the next attempt may meet a healthy server, and repeated failures still
stop the controller after `max_consecutive_failures`.

Every call runs inside `clock.fail_at(deadline_at)` (anyio's, with the default `RealClock`),
and httpx's own timeout is set to the time left, so no call outlives its deadline (I6).
The token is sent as `Authorization: Bearer ...` and never appears in an error or a log.
"""

from __future__ import annotations

from typing import Any

import httpx

from quiesce.adapters._clock import Clock, RealClock
from quiesce.adapters._http_server import ROUTES
from quiesce.adapters._participant_api import (
    REPLY_MODELS,
    CallFailedError,
    CompletionsReply,
    Participant,
    QueryOp,
)
from quiesce.protocol import Cause, RemoteProtocolError
from quiesce.protocol.participant import ParticipantOp
from quiesce.protocol.wire import ErrorReply, Message, parse_reply

__all__ = ["HttpParticipant"]

DEFAULT_TIMEOUT_S = 10.0


class HttpParticipant(Participant):
    """A client for one participant server at `base_url` (e.g. `http://127.0.0.1:8301`).

    `name` is the participant's name (what `CallFailedError` reports); `timeout_s` bounds calls
    that carry no `deadline_at`. `transport` is for tests (an `httpx.MockTransport`).

    >>> client = HttpParticipant("http://127.0.0.1:9", token="t", name="agent-0")
    >>> client.name
    'agent-0'
    """

    def __init__(
        self,
        base_url: str,
        *,
        token: str,
        name: str | None = None,
        clock: Clock | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.name = name or self.base_url
        self.clock = clock or RealClock()
        self.timeout_s = timeout_s
        self._headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
        self._client = httpx.AsyncClient(
            base_url=self.base_url, transport=transport, headers=self._headers
        )

    def __repr__(self) -> str:
        # The token stays out of every repr and log line.
        return f"HttpParticipant({self.base_url!r}, name={self.name!r})"

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._client.aclose()

    async def send(
        self, op: ParticipantOp, request: Message | None, deadline_at: float | None
    ) -> Message:
        response = await self._exchange(op, request, deadline_at)
        if response.status_code == 200:
            return self._parse(op, REPLY_MODELS[op], response)
        if response.status_code in (409, 422) and _looks_like_refusal(response):
            return self._parse(op, ErrorReply, response)
        raise self._status_failure(op, response)

    async def completions(self, *, deadline_at: float | None = None) -> CompletionsReply:
        """Receipts of the agent's completed-but-unACKed executions."""
        op = ParticipantOp.STATUS  # reported as a status-like query in failures
        response = await self._exchange(QueryOp.COMPLETIONS, None, deadline_at)
        if response.status_code != 200:
            raise self._status_failure(op, response)
        reply = self._parse(op, CompletionsReply, response)
        assert isinstance(reply, CompletionsReply)
        return reply

    async def _exchange(
        self, op: ParticipantOp | str, request: Message | None, deadline_at: float | None
    ) -> httpx.Response:
        failed_op = op if isinstance(op, ParticipantOp) else ParticipantOp.STATUS
        method, path = ROUTES[op]
        deadline = deadline_at if deadline_at is not None else self.clock.now() + self.timeout_s
        left = deadline - self.clock.now()
        if left <= 0:
            raise CallFailedError(self.name, failed_op, Cause.TIMEOUT, "deadline already passed")
        content = request.model_dump_json().encode() if request is not None else None
        headers = {"Content-Type": "application/json"} if content is not None else None
        try:
            with self.clock.fail_at(deadline):
                return await self._client.request(
                    method, path, content=content, headers=headers, timeout=httpx.Timeout(left)
                )
        except (TimeoutError, httpx.TimeoutException) as error:
            raise CallFailedError(
                self.name, failed_op, Cause.TIMEOUT, "no reply before the deadline", error=error
            ) from None
        except httpx.TransportError as error:
            detail = type(error).__name__
            raise CallFailedError(
                self.name, failed_op, Cause.IO_ERROR, detail, error=error
            ) from None

    def _parse(self, op: ParticipantOp, model: type[Message], response: httpx.Response) -> Message:
        try:
            return parse_reply(model, self.name, response.content, retryable=True)
        except RemoteProtocolError as error:
            raise CallFailedError(
                self.name, op, Cause.PARTICIPANT_ERROR, str(error), error=error
            ) from None

    def _status_failure(self, op: ParticipantOp, response: httpx.Response) -> CallFailedError:
        code = _wire_code(response)
        detail = f"HTTP {response.status_code}" + (f" {code}" if code else "")
        return CallFailedError(self.name, op, Cause.PARTICIPANT_ERROR, detail)


def _body(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return None


def _looks_like_refusal(response: httpx.Response) -> bool:
    body = _body(response)
    return isinstance(body, dict) and "incarnation" in body and "code" in body


def _wire_code(response: httpx.Response) -> str:
    body = _body(response)
    code = body.get("code") if isinstance(body, dict) else None
    return code if isinstance(code, str) else ""
