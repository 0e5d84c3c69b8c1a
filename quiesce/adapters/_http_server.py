"""The HTTP participant server: a Starlette app hosting one `ParticipantHost`.

What lives here: the routes of docs/wire.md (`/control/v1/<op>`, one per operation, plus
the role's data routes from `_http_data_plane`), bearer
authentication, the body size limit, and the mapping from what the host answers to an HTTP
status; and, for test rigs, `create_resettable_app`, whose `POST /control/v1/_reset` swaps in
a fresh participant (`quiesce serve --allow-reset`, docs/wire.md). What it does not know:
any protocol rule (the host's pure participant decides every answer) or how the process is
started (`quiesce serve`, `quiesce/cli/_serve.py`).

Status codes (the whole rule; docs/wire.md has the tables):
- 200: the operation's reply model;
- 409: a protocol refusal, body = `ErrorReply` (`checkpoint_conflict` with `active_id`,
  `stale_checkpoint` with `high_watermark`, `invalid_phase`, `admission_closed`, ...);
- 401 (missing/wrong token), 404 (unknown route), 405 (wrong method), 413 (body over the
  limit), 422 (malformed body, `field` named): body = `WireError`, nothing changed, checked
  before the host is touched;
- 503 / 500: the server itself failed (journal not writable, host not running yet or
  stopped, a bug). No input, however malformed, produces a 5xx.

Lifetime: the app's lifespan runs `host.run()` (the role's work). Until it has started, every
route (control, data, `/healthz`) answers 503 `unavailable` naming the missing step, so a
participant is never half alive: a Starlette or FastAPI app that mounts this one does not run
its lifespan, and enters `participant_lifespan(app)` in its own lifespan instead.

The token is compared with `hmac.compare_digest`, never logged, never echoed in an error.
The journal is fsynced before a 200 or 409 leaves (the host does it before replying).
"""

from __future__ import annotations

import hmac
import json
import logging
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Literal, TextIO, cast

import anyio
import structlog
from anyio.abc import TaskGroup, TaskStatus
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.types import Receive, Scope, Send

from quiesce.adapters._driver import configure_logging
from quiesce.adapters._http_data_plane import data_routes
from quiesce.adapters._participant_api import QueryOp
from quiesce.adapters._participant_host import HostStopped, ParticipantHost
from quiesce.protocol.participant import ParticipantOp, journal_of
from quiesce.protocol.wire import (
    AckRequest,
    BeginRequest,
    BoundaryRequest,
    ControlRequest,
    DiscardRequest,
    ErrorReply,
    FinishRequest,
    Message,
    RestoreRequest,
    RetireRequest,
)

__all__ = [
    "API_PREFIX",
    "DEFAULT_MAX_BODY_BYTES",
    "REQUEST_MODELS",
    "RESET_PATH",
    "ROUTES",
    "WireError",
    "configure_server_logging",
    "create_app",
    "create_resettable_app",
    "participant_lifespan",
    "status_of",
]

API_PREFIX = "/control/v1"
RESET_PATH = f"{API_PREFIX}/_reset"
"""The reset route of `create_resettable_app` (`quiesce serve --allow-reset`): a test rig's
way to a fresh participant, not an operation of the protocol."""
DEFAULT_MAX_BODY_BYTES = 1 << 20  # 1 MiB: a restore artifact of an agent fits many times

P = ParticipantOp
ROUTES: dict[ParticipantOp | str, tuple[Literal["GET", "POST"], str]] = {
    P.CAPABILITIES: ("GET", f"{API_PREFIX}/capabilities"),
    P.STATUS: ("GET", f"{API_PREFIX}/status"),
    QueryOp.COMPLETIONS: ("GET", f"{API_PREFIX}/completions"),
    P.PREPARE: ("POST", f"{API_PREFIX}/prepare"),
    P.COMMIT: ("POST", f"{API_PREFIX}/commit"),
    P.RESUME: ("POST", f"{API_PREFIX}/resume"),
    P.RESTORE: ("POST", f"{API_PREFIX}/restore"),
    P.DISCARD: ("POST", f"{API_PREFIX}/discard"),
    P.ACK: ("POST", f"{API_PREFIX}/ack"),
    P.RETIRE: ("POST", f"{API_PREFIX}/retire"),
    P.BEGIN: ("POST", f"{API_PREFIX}/begin"),
    P.BOUNDARY: ("POST", f"{API_PREFIX}/boundary"),
    P.FINISH: ("POST", f"{API_PREFIX}/finish"),
}
"""Method and path of every operation (and the `completions` query)."""

REQUEST_MODELS: dict[ParticipantOp, type[Message]] = {
    P.PREPARE: ControlRequest,
    P.COMMIT: ControlRequest,
    P.RESUME: ControlRequest,
    P.RESTORE: RestoreRequest,
    P.DISCARD: DiscardRequest,
    P.ACK: AckRequest,
    P.RETIRE: RetireRequest,
    P.BEGIN: BeginRequest,
    P.BOUNDARY: BoundaryRequest,
    P.FINISH: FinishRequest,
}
"""The request body model of every POST route."""

# Which refusal answers with which status: a malformed body is the client's fault in form
# (422); every other refusal is the protocol saying "not now / not this" (409).
_REFUSAL_STATUS = {"malformed_request": 422}

log = structlog.get_logger("quiesce.http")


class WireError(Message):
    """The body of a transport-level 4xx/5xx (not a protocol refusal): `code` is one of
    `unauthorized`, `not_found`, `method_not_allowed`, `body_too_large`,
    `malformed_request`, `unavailable`, `internal_error`; `field` names the bad field of a
    422."""

    code: str
    message: str
    field: str | None = None


def status_of(reply: Message) -> int:
    """The HTTP status a host reply is sent with (200, 409 or 422)."""
    if isinstance(reply, ErrorReply):
        return _REFUSAL_STATUS.get(reply.code, 409)
    return 200


def _error(status: int, code: str, message: str, field: str | None = None) -> JSONResponse:
    body = WireError(code=code, message=message, field=field).model_dump(mode="json")
    headers = {"WWW-Authenticate": 'Bearer realm="quiesce"'} if status == 401 else None
    return JSONResponse(body, status_code=status, headers=headers)


class _TooLarge(Exception):
    pass


async def _read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _TooLarge
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _TooLarge
        chunks.append(chunk)
    return b"".join(chunks)


def _validate(model: type[Message], body: bytes) -> Message | JSONResponse:
    if not body.strip():
        return _error(422, "malformed_request", "the request body is empty; send JSON", "<body>")
    try:
        return model.model_validate_json(body)
    except ValidationError as error:
        first = error.errors()[0]
        field = ".".join(str(part) for part in first["loc"]) or "<body>"
        message = f"{field!r}: {first['msg']}"
        return _error(422, "malformed_request", message, field)


def create_app(
    host: ParticipantHost,
    *,
    token: str,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    run_host: bool = True,
) -> Starlette:
    """A Starlette app serving `host` under `/control/v1`, every route behind
    `Authorization: Bearer <token>`. The app's lifespan runs `host.run()` (the role's
    work) and stops the host on shutdown; until it runs, every route answers 503
    `unavailable`. Served standalone (uvicorn), the server runs the lifespan; mounted in
    another app (`Mount("/", app=...)`, FastAPI's `app.mount`), enter
    `participant_lifespan(app)` in the parent's lifespan (docs/adopting.md).
    `run_host=False`: the caller runs the host itself, and the app answers at once.

    >>> from quiesce.adapters import ParticipantHost, RealClock
    >>> host = ParticipantHost.start({"name": "p", "role": "policy"}, clock=RealClock())
    >>> app = create_app(host, token="s3cret")
    >>> sorted(r.path for r in app.routes)[:2]
    ['/control/v1/ack', '/control/v1/begin']
    """
    authorized = _authorizer(token)
    bound = log.bind(participant=host.name)
    running: list[TaskGroup] = []  # the lifespan's task group, while the app runs
    started = [not run_host]  # whether the host runs (or the caller runs it)

    def not_running() -> JSONResponse | None:
        """The 503 of a participant whose host does not run yet (never 200 from it)."""
        if started[0]:
            return None
        return _error(
            503,
            "unavailable",
            f"participant {host.name!r} is not running: its lifespan never started. Served "
            "standalone, the server runs it; mounted in another app, enter "
            "quiesce.adapters.participant_lifespan(app) in that app's lifespan "
            "(docs/adopting.md)",
        )

    async def read(request: Request, model: type[Message] | None) -> Message | Response | None:
        """Authenticate `request` and parse its body as `model` (none for a GET): the
        payload, or the refusal to send (401, 503 before the host runs, 413, 422), checked
        before the host is touched."""
        name = request.url.path.rsplit("/", 1)[-1]
        if not authorized(request):
            bound.warning("unauthorized", op=name)
            return _error(401, "unauthorized", "missing or wrong bearer token")
        if (unavailable := not_running()) is not None:
            return unavailable
        if model is None:
            return None
        try:
            body = await _read_body(request, max_body_bytes)
        except _TooLarge:
            return _error(413, "body_too_large", f"the request body exceeds {max_body_bytes} bytes")
        parsed = _validate(model, body)
        if isinstance(parsed, JSONResponse):
            bound.info("malformed_request", op=name)
        return parsed

    def endpoint(op: ParticipantOp | str) -> Any:
        model = REQUEST_MODELS.get(op) if isinstance(op, ParticipantOp) else None
        name = op.value if isinstance(op, ParticipantOp) else op

        async def serve(request: Request) -> Response:
            payload = await read(request, model)
            if isinstance(payload, Response):
                return payload
            try:
                if not isinstance(op, ParticipantOp):
                    reply: Message = host.completions()
                else:
                    reply = await host.handle(op, payload)
            except HostStopped:
                return _error(503, "unavailable", "this participant is shutting down")
            except OSError as error:
                bound.error("journal_write_failed", op=name, error=type(error).__name__)
                return _error(503, "unavailable", "the participant journal is not writable")
            status = status_of(reply)
            bound.debug("answered", op=name, status=status)
            return Response(
                reply.model_dump_json(), status_code=status, media_type="application/json"
            )

        return serve

    routes = [
        Route(path, endpoint(op), methods=[method], name=str(getattr(op, "value", op)))
        for op, (method, path) in ROUTES.items()
    ]
    routes += data_routes(host, lambda: running[0] if running else None, read)

    async def healthz(request: Request) -> Response:
        """Liveness (no state, no auth): for process supervisors and tests; 503 until the
        host runs."""
        return not_running() or Response(json.dumps({"ok": True}), media_type="application/json")

    routes.append(Route("/healthz", healthz, methods=["GET"]))

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        if exc.status_code == 405:
            response = _error(405, "method_not_allowed", f"{request.method} is not allowed here")
            if exc.headers and "Allow" in exc.headers:
                response.headers["Allow"] = exc.headers["Allow"]
            return response
        if exc.status_code == 404:
            return _error(404, "not_found", f"no route {request.url.path}; see docs/wire.md")
        return _error(exc.status_code, "http_error", str(exc.detail))

    async def internal_error(request: Request, exc: Exception) -> Response:
        # A bug in the server: say so without echoing anything from the request.
        bound.error("internal_error", error=type(exc).__name__)
        return _error(500, "internal_error", "the participant server failed")

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if running:
            # Entered twice (its own server and a parent's lifespan): two runs of one host.
            raise RuntimeError(
                f"participant {host.name!r} already runs: enter its lifespan once (mounted: "
                "in the parent app's lifespan only)"
            )
        async with anyio.create_task_group() as tg:
            if run_host:
                tg.start_soon(host.run)
            running.append(tg)
            started[0] = True
            bound.info("participant_serving", role=host.config.role, incarnation=host.incarnation)
            try:
                yield
            finally:
                running.clear()
                host.stop()

    app = Starlette(
        routes=routes,
        exception_handlers={HTTPException: http_error, Exception: internal_error},
        lifespan=lifespan,
    )
    app.state.quiesce_participant = host.name  # what `participant_lifespan` recognises
    return app


def participant_lifespan(app: Starlette) -> AbstractAsyncContextManager[None]:
    """The lifetime of the participant `app` serves (`create_app`'s app): entering it runs
    the host (`host.run()`, the role's work) and opens the routes, which answer 503
    `unavailable` until then; leaving it stops the host. Enter it in the lifespan of the
    application that mounts `app`, since Starlette and FastAPI never run a mounted app's
    own lifespan:

        control = create_app(host, token=token)

        @asynccontextmanager
        async def lifespan(parent):
            async with participant_lifespan(control):
                yield

        service = FastAPI(lifespan=lifespan)   # or Starlette(routes=..., lifespan=lifespan)
        service.mount("/", control)            # last: it answers every other path

    Raises `TypeError` for an app `create_app` did not make.

    >>> participant_lifespan(object())  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    TypeError: participant_lifespan needs the app create_app(host, token=...) returned, ...
    """
    state = getattr(app, "state", None)
    if not isinstance(app, Starlette) or not hasattr(state, "quiesce_participant"):
        raise TypeError(
            "participant_lifespan needs the app create_app(host, token=...) returned, not "
            f"{type(app).__name__}: mount that app and pass it here"
        )
    # `create_app`'s lifespan yields no state (None): the Mapping half of Starlette's type.
    return cast(AbstractAsyncContextManager[None], app.router.lifespan_context(app))


def _authorizer(token: str) -> Callable[[Request], bool]:
    """Whether a request carries `Authorization: Bearer <token>`."""
    if not token:
        raise ValueError("an HTTP participant needs a non-empty bearer token")
    expected = token.encode()

    def authorized(request: Request) -> bool:
        header = request.headers.get("authorization", "")
        scheme, _, given = header.partition(" ")
        # Compare even when the scheme is wrong, so timing does not tell which part failed.
        ok = hmac.compare_digest(given.strip().encode(), expected)
        return ok and scheme.lower() == "bearer"

    return authorized


def create_resettable_app(
    host: ParticipantHost,
    fresh: Callable[[], ParticipantHost],
    *,
    token: str,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
) -> Starlette:
    """`create_app(host)`, plus `POST RESET_PATH` (bearer token; 204, no body): the served
    participant is stopped and replaced by `fresh()`, a brand-new one (its own incarnation),
    whose journal replaces the old one's at once, so a restart after a reset recovers the
    new participant. For test rigs only (`quiesce serve --allow-reset`, the conformance kit's
    `--reset-url`): a reset forgets everything the participant promised. Requests in flight
    during a reset are answered 503 by the stopped participant; reset a quiet server.

    >>> from quiesce.adapters import ParticipantHost, RealClock
    >>> def fresh():
    ...     return ParticipantHost.start({"name": "p", "role": "policy"}, clock=RealClock())
    >>> app = create_resettable_app(fresh(), fresh, token="s3cret")
    >>> RESET_PATH in [r.path for r in app.routes]
    True
    """
    authorized = _authorizer(token)
    served: list[tuple[ParticipantHost, Starlette, anyio.CancelScope]] = []  # the one served now
    running: list[TaskGroup] = []  # the lifespan's task group, while the app runs
    swapping = anyio.Lock()

    async def serve(participant: ParticipantHost) -> None:
        app = create_app(participant, token=token, max_body_bytes=max_body_bytes)
        served.append((participant, app, await running[0].start(_run_lifespan, app)))

    def stop_serving() -> None:
        for participant, _, scope in served:
            participant.stop()  # at once: later requests to it are refused, not answered
            scope.cancel()  # and its lifespan (the role's work, its data calls) ends
        served.clear()

    async def reset(request: Request) -> Response:
        if not authorized(request):
            return _error(401, "unauthorized", "missing or wrong bearer token")
        async with swapping:
            if not running:
                return _error(503, "unavailable", "this participant is shutting down")
            stop_serving()
            participant = fresh()
            await participant.journal.write(journal_of(participant.state))
            await serve(participant)
        log.info(
            "participant_reset", participant=participant.name, incarnation=participant.incarnation
        )
        return Response(status_code=204)

    async def forward(scope: Scope, receive: Receive, send: Send) -> None:
        if not served:  # between stop and serve of a reset, or shutting down
            unavailable = _error(503, "unavailable", "this participant is being replaced")
            await unavailable(scope, receive, send)
            return
        await served[0][1](scope, receive, send)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with anyio.create_task_group() as tasks:
            running.append(tasks)
            await serve(host)
            try:
                yield
            finally:
                running.clear()
                stop_serving()

    return Starlette(
        routes=[Route(RESET_PATH, reset, methods=["POST"]), Mount("", app=forward)],
        lifespan=lifespan,
    )


async def _run_lifespan(
    app: Starlette, *, task_status: TaskStatus[anyio.CancelScope] = anyio.TASK_STATUS_IGNORED
) -> None:
    """Run `app`'s lifespan (its host's work, its data calls) until the cancel scope it
    reports as started is cancelled."""
    with anyio.CancelScope() as scope:
        async with app.router.lifespan_context(app):
            task_status.started(scope)
            await anyio.sleep_forever()


def configure_server_logging(level: str = "info", stream: TextIO | None = None) -> None:
    """The driver's structlog setup (JSON lines when `stream` is not a TTY), plus the
    stdlib logging uvicorn writes to, on the same `stream` (stderr)."""
    out = stream or sys.stderr
    configure_logging(level, stream=out)
    logging.basicConfig(stream=out, level=level.upper(), force=True)
