"""The conformance kit's raw HTTP client: exact status codes and bodies, nothing hidden.

What lives here: `WireClient`, a thin synchronous httpx client over the routes of
docs/wire.md, and `Exchange`, the record of one request and its answer. Unlike
`HttpParticipant` (which turns every non-answer into a `CallFailed` for the driver), this
client keeps the status code, the raw body and the request exactly as sent, because the kit
must judge them and print them. What it does not know: any protocol rule.

`send_together` sends identical copies of one request at the same time (a retry racing its
original): one task per copy in an anyio task group, each on its own connection of one
`httpx.AsyncClient`, and httpcore's `trace` hook holds every copy before its first byte
until all are connected, and before it reads its reply until all are fully written. So
every copy is in flight before any reply is read; what the server does with them is then
its own business. The event loop runs in a background thread (an anyio blocking portal,
started on the first `send_together` and stopped by `close`), so the client stays
synchronous and works from inside a running event loop too.

The bearer token is sent in a header and never kept in an `Exchange`, a repr or an error.
"""

from __future__ import annotations

import json
import ssl
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from functools import cache, cached_property
from typing import Any, TypeVar

import anyio
import anyio.from_thread
import anyio.to_thread
import httpx

from quiesce.adapters import ROUTES
from quiesce.fsm import QuiesceError

__all__ = ["OPERATIONS", "Exchange", "ServerUnreachable", "Timed", "WireClient", "compact_json"]

T = TypeVar("T")

OPERATIONS: dict[str, tuple[str, str]] = {
    str(getattr(op, "value", op)): route for op, route in ROUTES.items()
}
"""`{operation name: (method, path)}` of every route of docs/wire.md."""


class ServerUnreachable(QuiesceError):
    """The server at `url` did not answer `method path` (connection refused, reset, timeout)."""

    def __init__(self, url: str, method: str, path: str, detail: str) -> None:
        self.url = url
        self.method = method
        self.path = path
        self.detail = detail
        super().__init__(
            f"{method} {url}{path} got no answer ({detail}); is the server running, and is "
            "--url right?"
        )


@dataclass(frozen=True, slots=True)
class Timed:
    """An `Exchange` of `send_overlapping`, with when it was `sent` and `answered`."""

    exchange: Exchange
    sent: float
    answered: float


@dataclass(frozen=True, slots=True)
class Exchange:
    """One request the kit sent and the answer it got.

    `body` is the JSON value sent (None for a GET; a `bytes` body is kept as text),
    `reply` the parsed JSON answer (the raw text if it is not JSON), `auth` how the request
    was authenticated (`"token"`, `"none"` or `"wrong"`).
    """

    method: str
    path: str
    body: Any
    status: int
    reply: Any
    auth: str = "token"

    def request_line(self) -> str:
        """`POST /control/v1/prepare {"op_id": ...}`: the request as a human reads it."""
        shown = "" if self.body is None else " " + compact_json(self.body)
        auth = "" if self.auth == "token" else f"  [{self.auth} bearer token]"
        return f"{self.method} {self.path}{shown}{auth}"

    def curl(self) -> str:
        """The request as a shell command against `$QUIESCE_URL` with `$QUIESCE_TOKEN`
        (the token itself is never printed)."""
        auth = {
            "token": ' -H "Authorization: Bearer $QUIESCE_TOKEN"',
            "wrong": " -H 'Authorization: Bearer not-the-token'",
            "none": "",
        }[self.auth]
        data = ""
        if self.body is not None:
            text = compact_json(self.body).replace("'", "'\\''")
            data = f" -H 'Content-Type: application/json' -d '{text}'"
        return f'curl -sS -X {self.method} "$QUIESCE_URL{self.path}"{auth}{data}'


def compact_json(value: Any) -> str:
    """`value` as JSON on one line, keys sorted (a string as it is: a raw body was sent as
    text); what JSON cannot hold is shown by its `str`."""
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, default=str)


@cache
def _tls() -> ssl.SSLContext:
    """The one TLS context of every client in this process. Loading the CA bundle costs
    tens of milliseconds of CPU, and the kit opens a client per example (and a shrink
    replays hundreds of examples), so a context per client took half a run's CPU time."""
    return httpx.create_ssl_context()


class WireClient:
    """A synchronous client for one participant server: `send(op, body)` -> `Exchange`.

    With `async_transport` (a participant in this process: `check_participant`), every
    request goes through it instead of the network, on the background event loop.

    >>> client = WireClient("http://127.0.0.1:1", "secret")
    >>> "secret" in repr(client)
    False
    >>> client.close()
    """

    def __init__(
        self,
        url: str,
        token: str,
        *,
        timeout: float = 10.0,
        transport: httpx.BaseTransport | None = None,
        async_transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self._token = token
        self._timeout = timeout
        self._http = httpx.Client(
            base_url=self.url, timeout=timeout, transport=transport, verify=_tls()
        )
        self._async_transport = async_transport
        self._background = ExitStack()
        self.requests = 0

    def __repr__(self) -> str:
        return f"WireClient({self.url!r})"

    def send(
        self, op: str, body: Any = None, *, auth: str = "token", raw: bytes | None = None
    ) -> Exchange:
        """Send operation `op` (a name of `OPERATIONS`) with JSON `body` (or the bytes `raw`)
        and return what came back. `auth`: `"token"`, `"none"` (no header) or `"wrong"`.
        Raises `ServerUnreachable` when no HTTP answer arrives."""
        method, path = OPERATIONS[op]
        content, headers = self._encode(body, auth, raw)
        self.requests += 1
        try:
            if self._async_transport is None:
                response = self._http.request(method, path, content=content, headers=headers)
            else:
                response = self._portal.call(self._request, method, path, content, headers)
        except httpx.HTTPError as error:
            raise ServerUnreachable(self.url, method, path, type(error).__name__) from None
        sent = raw.decode("utf-8", "replace") if raw is not None else body
        return _exchange(method, path, sent, response, auth)

    async def _request(
        self, method: str, path: str, content: bytes | None, headers: dict[str, str]
    ) -> httpx.Response:
        async with self._async_client() as http:
            return await http.request(method, path, content=content, headers=headers)

    def send_together(self, op: str, body: Any, *, copies: int = 2) -> tuple[Exchange, ...]:
        """Send `copies` identical requests `op` with JSON `body` at the same time, each on
        its own connection, every one in flight before any reply is read (the module
        docstring says how); the exchanges in the order their replies arrived. Over the
        network, or the constructor's `async_transport` (its `transport` is not used). Raises
        `ServerUnreachable` when a copy gets no HTTP answer."""
        if copies < 2:
            raise ValueError(f"send_together needs at least 2 copies, not {copies}")
        self.requests += copies
        return self._portal.call(self._together, op, body, copies)

    async def _together(self, op: str, body: Any, copies: int) -> tuple[Exchange, ...]:
        method, path = OPERATIONS[op]
        content, headers = self._encode(body, "token", None)
        barriers = tuple(_Barrier(copies) for _ in _STAGES)
        responses: list[httpx.Response] = []
        failures: list[str] = []

        async def one(http: httpx.AsyncClient, copy: _Copy) -> None:
            try:
                trace = {"trace": copy.trace}
                responses.append(
                    await http.request(
                        method, path, content=content, headers=headers, extensions=trace
                    )
                )
            except httpx.HTTPError as error:
                failures.append(type(error).__name__)
            finally:
                copy.leave()  # a copy that is done must not hold the others at a barrier

        async with (
            self._async_client() as http,
            anyio.create_task_group() as group,
        ):
            for _ in range(copies):
                group.start_soon(one, http, _Copy(barriers))
        if failures:
            raise ServerUnreachable(self.url, method, path, failures[0])
        return tuple(_exchange(method, path, body, r, "token") for r in responses)

    def send_overlapping(
        self, requests: Sequence[tuple[str, Any]], *, stagger: float = 0.02
    ) -> tuple[Timed, ...]:
        """Send different requests `(op, body)` so that they overlap: each is sent
        `stagger` seconds after the previous one, without waiting for any reply (each on
        its own connection); the answers in request order, each with when it was sent and
        answered (`time.monotonic()`), so a judge knows which ones really overlapped.
        Raises `ServerUnreachable` when one gets no HTTP answer."""
        self.requests += len(requests)
        return self._portal.call(self._overlapping, tuple(requests), stagger)

    async def _overlapping(
        self, requests: tuple[tuple[str, Any], ...], stagger: float
    ) -> tuple[Timed, ...]:
        answers: dict[int, Timed] = {}
        failures: list[tuple[str, str, str]] = []

        async def one(http: httpx.AsyncClient, index: int, op: str, body: Any) -> None:
            method, path = OPERATIONS[op]
            content, headers = self._encode(body, "token", None)
            sent = time.monotonic()
            try:
                response = await http.request(method, path, content=content, headers=headers)
            except httpx.HTTPError as error:
                failures.append((method, path, type(error).__name__))
                return
            answered = time.monotonic()
            answers[index] = Timed(_exchange(method, path, body, response, "token"), sent, answered)

        async with (
            self._async_client() as http,
            anyio.create_task_group() as group,
        ):
            for index, (op, body) in enumerate(requests):
                if index:
                    await anyio.sleep(stagger)
                group.start_soon(one, http, index, op, body)
        if failures:
            raise ServerUnreachable(self.url, *failures[0])
        return tuple(answers[i] for i in range(len(requests)))

    def send_while(self, op: str, body: Any, during: Callable[[], object]) -> Exchange | None:
        """Send `op` with JSON `body` and, once the request is fully written (or answered,
        whichever comes first), call `during()` (blocking, in a worker thread) while the
        reply is awaited: a restart hook killing the server in the middle of a request.
        The exchange, or None when no HTTP answer came; what `during` raises propagates."""
        self.requests += 1
        answer: Exchange | None = self._portal.call(self._while, op, body, during)
        return answer

    async def _while(self, op: str, body: Any, during: Callable[[], object]) -> Exchange | None:
        method, path = OPERATIONS[op]
        content, headers = self._encode(body, "token", None)
        written = anyio.Event()
        answer: list[Exchange] = []

        async def trace(event: str, info: dict[str, Any]) -> None:
            if event == "http11.send_request_body.complete":
                written.set()

        async def request(http: httpx.AsyncClient) -> None:
            try:
                response = await http.request(
                    method, path, content=content, headers=headers, extensions={"trace": trace}
                )
                answer.append(_exchange(method, path, body, response, "token"))
            except httpx.HTTPError:
                pass  # the kill cut it: no answer
            finally:
                written.set()

        async with self._async_client() as http, anyio.create_task_group() as group:
            group.start_soon(request, http)
            await written.wait()
            await anyio.to_thread.run_sync(during)
        return answer[0] if answer else None

    def call_in_loop(self, function: Callable[[], T]) -> T:
        """Call `function` on the client's background event loop and return what it returns
        (from the caller's thread, or from a worker thread of that loop, such as `during`
        of `send_while`): where an in-process participant's calls run."""
        return self._portal.call(function)

    def _async_client(self) -> httpx.AsyncClient:
        if self._async_transport is not None:
            return httpx.AsyncClient(
                base_url=self.url, timeout=self._timeout, transport=self._async_transport
            )
        return httpx.AsyncClient(base_url=self.url, timeout=self._timeout, verify=_tls())

    @cached_property
    def _portal(self) -> anyio.from_thread.BlockingPortal:
        return self._background.enter_context(anyio.from_thread.start_blocking_portal())

    def _encode(
        self, body: Any, auth: str, raw: bytes | None
    ) -> tuple[bytes | None, dict[str, str]]:
        headers = {"Content-Type": "application/json"}
        if auth == "token":
            headers["Authorization"] = f"Bearer {self._token}"
        elif auth == "wrong":
            headers["Authorization"] = "Bearer not-the-token"
        content = raw if raw is not None else None if body is None else json.dumps(body).encode()
        return content, headers

    def close(self) -> None:
        """Close the connection pool (and stop the background event loop, if started)."""
        self._http.close()
        self._background.close()


def _exchange(method: str, path: str, sent: Any, response: httpx.Response, auth: str) -> Exchange:
    try:
        reply: Any = response.json()
    except ValueError:
        reply = response.text
    return Exchange(method, path, sent, response.status_code, reply, auth)


_STAGES = {
    "http11.send_request_headers.started": 0,  # every copy has its own connection
    "http11.receive_response_headers.started": 1,  # every copy's request is fully written
}
"""httpcore trace events at which a copy of `send_together` waits for all the others."""


@dataclass
class _Barrier:
    """Opens when `parties` copies have arrived (or left)."""

    parties: int
    opened: anyio.Event = field(default_factory=anyio.Event)

    def arrive(self) -> None:
        self.parties -= 1
        if self.parties == 0:
            self.opened.set()


@dataclass
class _Copy:
    """One copy of `send_together` on its way through the barriers of `_STAGES`."""

    barriers: tuple[_Barrier, ...]
    passed: int = 0

    async def trace(self, event: str, info: dict[str, Any]) -> None:
        """httpcore's `trace` extension callback: wait at the barrier of `event`, if any."""
        stage = _STAGES.get(event)
        if stage is not None:
            self._reach(stage + 1)
            await self.barriers[stage].opened.wait()

    def _reach(self, count: int) -> None:
        while self.passed < count:
            self.barriers[self.passed].arrive()
            self.passed += 1

    def leave(self) -> None:
        """The copy is done (answered or failed): it no longer holds anyone back."""
        self._reach(len(self.barriers))
