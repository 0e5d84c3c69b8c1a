"""The HTTP data plane: an agent's generation calls and state mutations across processes.

What lives here: the two data routes a policy or resources server adds to its app
(`POST /data/v1/generate`, `POST /data/v1/mutate`), their bodies, and the agent-side clients
`HttpPolicyService` / `HttpResourcesService` that implement `PolicyService` /
`ResourcesService` over them, plus `connect_services`, which checks every service URL once
before an agent starts. What it does not know: any protocol rule. The server's pure core
decides whether a call is admitted or held (M4/M5); this module only carries the answer.

Why a stream. A generation call held by a fenced policy must make the calling execution
`frozen` *while* it waits (PROTOCOL.md M3: a frozen execution counts as quiesced, or the
agent could never be ready while the policy is fenced). So the reply to `generate` is a
stream of NDJSON events, one line each, sent as they happen:

    {"event": "held"}        the call waits behind the fence (the agent marks it frozen)
    {"event": "released"}    a resume admitted it (the agent marks it running again)
    {"event": "done"}        the call finished: the last line
    {"event": "unavailable"} the server stopped or crashed under the call: the last line

`mutate` streams the same way (without `held` / `released`: a held mutation just waits).
A stream cut before its last line, a 503 or a refused connection is `HostStopped` on the
agent's side, which retries the call under a new id (the server finishes the abandoned
one itself, as it does for a caller that died in process). Any other status (401, 404, 422)
is a wiring error: it is logged and the call fails the same way.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Literal

import anyio
import httpx
import structlog
from anyio.abc import TaskGroup
from pydantic import Field, ValidationError
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from quiesce.adapters._participant_host import Hook, HostStopped, ParticipantHost
from quiesce.fsm import QuiesceError
from quiesce.protocol.wire import Capabilities, Message, Role

__all__ = [
    "DATA_PREFIX",
    "DataEvent",
    "GenerateRequest",
    "HttpPolicyService",
    "HttpResourcesService",
    "MutateRequest",
    "ServiceUnusable",
    "connect_services",
    "data_routes",
]

DATA_PREFIX = "/data/v1"
_IDS = Field(min_length=1, max_length=512)

log = structlog.get_logger("quiesce.http")


class GenerateRequest(Message):
    """`POST /data/v1/generate`: one generation call of an agent execution."""

    call_id: str = _IDS


class MutateRequest(Message):
    """`POST /data/v1/mutate`: one state mutation of a rollout on a resources server."""

    mutation_id: str = _IDS
    rollout_id: str = _IDS


class DataEvent(Message):
    """One line of a data-plane reply stream (see the module docstring)."""

    event: Literal["held", "released", "done", "unavailable"]


_LAST = frozenset({"done", "unavailable"})
_WAIT_POLL_S = 0.2  # between two tries of a service that is not up yet


class ServiceUnusable(QuiesceError):
    """A service URL given to an agent cannot serve it: unreachable, the token refused,
    or a server of another role. Raised before the agent starts, naming the URL."""

    def __init__(self, url: str, reason: str) -> None:
        self.url = url
        self.reason = reason
        super().__init__(f"service {url}: {reason}")


# ---------------------------------------------------------------------------- server side

Reader = Callable[[Request, type[Message] | None], Awaitable[Message | Response | None]]
"""Authenticates a request and parses its body: the payload, or the refusal to send."""

Call = Callable[[Hook, Hook], Awaitable[None]]
"""One data call on the host, given its `held` and `released` hooks."""


def data_routes(
    host: ParticipantHost,
    tasks: Callable[[], TaskGroup | None],
    read: Reader,
) -> list[Route]:
    """The data routes of `host`'s role: `generate` on a policy server, `mutate` on a
    resources server, none on an agent. `read` authenticates and parses a request (or
    returns the refusal); `tasks()` is the app's task group, where each call runs so that it
    outlives no server and a client that goes away cancels only its own call."""

    bound = log.bind(participant=host.name)

    def route(name: str, model: type[Message], call: Callable[[Any], Call]) -> Route:
        async def serve(request: Request) -> Response:
            body = await read(request, model)
            if isinstance(body, Response):
                return body
            assert body is not None  # a POST route always has a body model
            bound.debug("data_call", op=name, **body.model_dump())
            return _stream(tasks(), call(body), bound.bind(op=name))

        return Route(f"{DATA_PREFIX}/{name}", serve, methods=["POST"], name=name)

    role = host.config.role
    if role is Role.POLICY:

        def generation(body: GenerateRequest) -> Call:
            return lambda held, released: host.generate(body.call_id, held=held, released=released)

        return [route("generate", GenerateRequest, generation)]
    if role is Role.RESOURCES:

        def mutation(body: MutateRequest) -> Call:
            return lambda _held, _released: host.mutate(body.mutation_id, body.rollout_id)

        return [route("mutate", MutateRequest, mutation)]
    return []


def _line(event: str) -> bytes:
    return DataEvent(event=event).model_dump_json().encode() + b"\n"


def _stream(tasks: TaskGroup | None, call: Call, logger: Any) -> StreamingResponse:
    """Run `call` in the app's task group and stream its events.

    The call runs outside the response's generator, so no cancel scope ever spans a
    `yield`; the generator only reads events and, however it ends (done, or the client
    went away), cancels the call's own scope. Cancelling a call is safe: the host finishes
    an abandoned call itself. A call that fails (a bug) is logged and ends `unavailable`,
    as a 500 would: it never takes the server's task group down."""
    sender, receiver = anyio.create_memory_object_stream[bytes](len(_LAST) + 2)
    scope = anyio.CancelScope()

    def emit(event: str) -> None:
        # A closed receiver: the client went away, nobody to tell.
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
            sender.send_nowait(_line(event))

    async def hook_for(event: str) -> None:
        emit(event)

    async def run() -> None:
        with sender, scope:
            try:
                await call(lambda: hook_for("held"), lambda: hook_for("released"))
            except HostStopped:
                emit("unavailable")
                return
            except Exception as error:
                logger.error("data_call_failed", error=type(error).__name__)
                emit("unavailable")
                return
            emit("done")

    async def events() -> AsyncIterator[bytes]:
        try:
            with receiver:
                async for chunk in receiver:
                    yield chunk
        finally:
            scope.cancel()

    if tasks is None:  # the app was not started (no lifespan): nothing may run
        emit("unavailable")
        sender.close()
    else:
        tasks.start_soon(run)
    return StreamingResponse(events(), media_type="application/x-ndjson")


# ---------------------------------------------------------------------------- agent side


class _DataClient:
    """One connection pool to one service; `_call` streams a route's events into hooks."""

    def __init__(
        self,
        base_url: str,
        *,
        token: str,
        transport: httpx.AsyncBaseTransport | None = None,
        connect_timeout_s: float = 5.0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        # No read timeout: a held call legitimately waits as long as the fence stays closed.
        timeout = httpx.Timeout(None, connect=connect_timeout_s)
        self._client = httpx.AsyncClient(
            base_url=self.base_url, transport=transport, headers=headers, timeout=timeout
        )

    def __repr__(self) -> str:
        # The token stays out of every repr and log line.
        return f"{type(self).__name__}({self.base_url!r})"

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._client.aclose()

    async def _call(
        self, path: str, request: Message, hooks: dict[str, Hook | None] | None = None
    ) -> None:
        content = request.model_dump_json().encode()
        try:
            async with self._client.stream("POST", path, content=content) as response:
                if response.status_code != 200:
                    await response.aread()
                    self._refused(path, response)
                async for line in response.aiter_lines():
                    if not line.strip():
                        continue
                    event = DataEvent.model_validate_json(line).event
                    if event in _LAST:
                        if event == "done":
                            return
                        break
                    hook = (hooks or {}).get(event)
                    if hook is not None:
                        await hook()
        except (httpx.TransportError, ValidationError) as error:
            log.info("service_call_failed", url=self.base_url + path, error=type(error).__name__)
        raise HostStopped(self.base_url)

    def _refused(self, path: str, response: httpx.Response) -> None:
        if response.status_code != 503:
            # Not a restart: a wiring error (token, role, body). Loud, then like a dead server.
            log.error(
                "service_refused",
                url=self.base_url + path,
                status=response.status_code,
                body=response.text[:200],
            )
        raise HostStopped(self.base_url)


class HttpPolicyService(_DataClient):
    """`PolicyService` over HTTP: `generate` on the policy server at `base_url`.

    >>> HttpPolicyService("http://127.0.0.1:9", token="t")
    HttpPolicyService('http://127.0.0.1:9')
    """

    async def generate(
        self, call_id: str, *, held: Hook | None = None, released: Hook | None = None
    ) -> None:
        """Run generation call `call_id`; `held()` / `released()` are awaited when the
        server holds and releases it. Raises `HostStopped` if the server is down."""
        hooks = {"held": held, "released": released}
        await self._call(f"{DATA_PREFIX}/generate", GenerateRequest(call_id=call_id), hooks)


class HttpResourcesService(_DataClient):
    """`ResourcesService` over HTTP: `mutate` on the resources server at `base_url`.

    `restart_only` is the server's recovery mode, read once by `connect_services`.
    """

    def __init__(self, base_url: str, *, token: str, restart_only: bool, **options: Any) -> None:
        super().__init__(base_url, token=token, **options)
        self._restart_only = restart_only

    @property
    def restart_only(self) -> bool:
        """Whether the server's state cannot be restored (`restart_only` recovery mode)."""
        return self._restart_only

    async def mutate(self, mutation_id: str, rollout_id: str) -> None:
        """Change `rollout_id`'s state on the server (waits while it is frozen). Raises
        `HostStopped` if the server is down."""
        request = MutateRequest(mutation_id=mutation_id, rollout_id=rollout_id)
        await self._call(f"{DATA_PREFIX}/mutate", request)


def connect_services(
    *,
    token: str,
    policies: tuple[str, ...] = (),
    resources: tuple[str, ...] = (),
    timeout_s: float = 5.0,
    wait_s: float = 30.0,
) -> tuple[list[HttpPolicyService], list[HttpResourcesService]]:
    """Clients for an agent's services, each URL checked first (blocking, before any event
    loop runs): it answers `GET /control/v1/capabilities` with `token` and has the role it
    was given as. A server not up yet is waited for, up to `wait_s` seconds in all (so a
    fleet may start in any order); anything else fails at once. Raises `ServiceUnusable`
    naming the first URL that does not do."""
    give_up = time.monotonic() + wait_s

    def capabilities(url: str, role: Role) -> Capabilities:
        target = url.rstrip("/") + "/control/v1/capabilities"
        while True:
            try:
                response = httpx.get(
                    target, headers={"Authorization": f"Bearer {token}"}, timeout=timeout_s
                )
                break
            except httpx.TransportError as error:
                if time.monotonic() >= give_up:
                    failure = type(error).__name__
                    reason = f"unreachable ({failure}) for {wait_s:g} s; is it running?"
                    raise ServiceUnusable(url, reason) from None
                log.info("waiting_for_service", url=url, role=role)
                time.sleep(_WAIT_POLL_S)
        if response.status_code == 401:
            raise ServiceUnusable(url, "refused the token (401); give the agent its token")
        if response.status_code != 200:
            raise ServiceUnusable(url, f"answered HTTP {response.status_code} to capabilities")
        try:
            caps = Capabilities.model_validate_json(response.content)
        except ValidationError:
            reason = "is not a quiesce participant (capabilities unreadable)"
            raise ServiceUnusable(url, reason) from None
        if caps.role is not role:
            raise ServiceUnusable(url, f"is a {caps.role} server, given as a {role} server")
        return caps

    policy_clients = []
    for url in policies:
        capabilities(url, Role.POLICY)
        policy_clients.append(HttpPolicyService(url, token=token))
    resources_clients = []
    for url in resources:
        restart_only = capabilities(url, Role.RESOURCES).recovery_mode == "restart_only"
        resources_clients.append(HttpResourcesService(url, token=token, restart_only=restart_only))
    return policy_clients, resources_clients
