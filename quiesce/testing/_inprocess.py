"""The kit's requests handed to a `Participant` object in this process instead of a socket.

What lives here: `ParticipantTransport`, an httpx transport that turns each control request
of docs/wire.md into the call the adapters implement (`Participant.send(op, request,
deadline_at)`, the wire model parsed from the body) and the answer into the HTTP status and
body `quiesce serve` sends: the reply with `status_of` (200, 409), a `CallFailedError` (no
usable answer) as 503, any other exception as 500 (the participant failed itself). A reply
of the wrong type (a commit answered with a `PrepareReply`) is sent as it is, as a server
would send it, so the kit names it (`commit answered PrepareReply, expected CommitReply`)
rather than `Participant.call`'s `CallFailedError` turning it into a 503. So the kit's
`WireClient`, machine and judges run unchanged.

What it does not know: any protocol rule (the kit judges the replies), and HTTP's own layer:
a `Participant` object is handed parsed wire models and has no bearer token, so the kit
sends it no malformed or unauthenticated requests (`KitRun.over_http`).
"""

from __future__ import annotations

import httpx

from quiesce.adapters import (
    REQUEST_MODELS,
    ROUTES,
    CallFailedError,
    Participant,
    WireError,
    status_of,
)
from quiesce.protocol.participant import ParticipantOp
from quiesce.protocol.wire import ControlRequest, Message

__all__ = ["IN_PROCESS_URL", "ParticipantTransport"]

IN_PROCESS_URL = "in-process://participant"
"""The base URL a `WireClient` over a `ParticipantTransport` is given: never resolved, and
not HTTP, so a report offers no curl commands to replay by hand."""

_OPERATION_AT: dict[tuple[str, str], ParticipantOp | str] = {
    (method, path): op for op, (method, path) in ROUTES.items()
}


class ParticipantTransport(httpx.AsyncBaseTransport):
    """Answer the routes of docs/wire.md by calling `participant` (see the module docstring)."""

    def __init__(self, participant: Participant) -> None:
        self.participant = participant

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        op = _OPERATION_AT.get((request.method, request.url.path))
        if op is None:
            message = f"no route {request.method} {request.url.path}; see docs/wire.md"
            return _answer(404, WireError(code="not_found", message=message))
        body = await request.aread()
        trace = request.extensions.get("trace")
        if trace is not None:  # the request is handed over: a kill may now cut it
            await trace("http11.send_request_body.complete", {})
        try:
            reply = await self._call(op, body)
        except CallFailedError as error:
            return _answer(503, WireError(code="unavailable", message=str(error)))
        except Exception as error:  # a bug in the participant: the kit reports the 500
            message = f"{type(error).__name__}: {error}"
            return _answer(500, WireError(code="internal_error", message=message))
        return _answer(status_of(reply), reply)

    async def _call(self, op: ParticipantOp | str, body: bytes) -> Message:
        if not isinstance(op, ParticipantOp):  # the `completions` query
            return await self.participant.completions()
        model = REQUEST_MODELS.get(op)
        request = None if model is None else model.model_validate_json(body)
        deadline_at = request.deadline_at if isinstance(request, ControlRequest) else None
        return await self.participant.send(op, request, deadline_at)


def _answer(status: int, reply: Message) -> httpx.Response:
    return httpx.Response(
        status, content=reply.model_dump_json(), headers={"Content-Type": "application/json"}
    )
