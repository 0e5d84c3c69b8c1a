"""The conformance kit's raw HTTP client: exact status codes and bodies, nothing hidden.

What lives here: `WireClient`, a thin synchronous httpx client over the routes of
docs/wire.md, and `Exchange`, the record of one request and its answer. Unlike
`HttpParticipant` (which turns every non-answer into a `CallFailed` for the driver), this
client keeps the status code, the raw body and the request exactly as sent, because the kit
must judge them and print them. What it does not know: any protocol rule.

The bearer token is sent in a header and never kept in an `Exchange`, a repr or an error.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import httpx

from quiesce.adapters._http_server import ROUTES
from quiesce.fsm import QuiesceError

__all__ = ["OPERATIONS", "Exchange", "ServerUnreachable", "WireClient"]

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
        shown = "" if self.body is None else " " + _compact(self.body)
        auth = "" if self.auth == "token" else f"  [{self.auth} bearer token]"
        return f"{self.method} {self.path}{shown}{auth}"


def _compact(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True)


class WireClient:
    """A synchronous client for one participant server: `send(op, body)` -> `Exchange`.

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
    ) -> None:
        self.url = url.rstrip("/")
        self._token = token
        self._http = httpx.Client(base_url=self.url, timeout=timeout, transport=transport)
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
        headers = {"Content-Type": "application/json"}
        if auth == "token":
            headers["Authorization"] = f"Bearer {self._token}"
        elif auth == "wrong":
            headers["Authorization"] = "Bearer not-the-token"
        content = raw if raw is not None else None if body is None else json.dumps(body).encode()
        self.requests += 1
        try:
            response = self._http.request(method, path, content=content, headers=headers)
        except httpx.HTTPError as error:
            raise ServerUnreachable(self.url, method, path, type(error).__name__) from None
        try:
            reply: Any = response.json()
        except ValueError:
            reply = response.text
        sent = raw.decode("utf-8", "replace") if raw is not None else body
        return Exchange(method, path, sent, response.status_code, reply, auth)

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()
