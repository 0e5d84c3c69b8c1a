"""`LocalServer`: a participant served over real HTTP from a background thread.

What lives here: uvicorn in a daemon thread on 127.0.0.1 and a free port, serving
`create_app(host)`, started and stopped as a context manager. The conformance kit's own
tests use it (for the reference participant and the deliberately broken ones in
`_broken.py`); users can use it to try the kit, or to check a `ParticipantHost` subclass of
their own, without a separate process. What it does not know: the protocol.
"""

from __future__ import annotations

import asyncio
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any

import uvicorn
from starlette.types import Receive, Scope, Send

from quiesce.adapters import (
    DEFAULT_MAX_BODY_BYTES,
    FileJournal,
    JournalSink,
    MemoryJournal,
    ParticipantHost,
    RealClock,
    create_app,
)
from quiesce.fsm import QuiesceError

__all__ = ["RESET_PATH", "LocalServer", "ServerDidNotStart", "free_port"]

RESET_PATH = "/testing/v1/reset"
"""The route of a `LocalServer`'s reset hook (not a route of docs/wire.md)."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:  # no event loop runs in this thread
        return None


class ServerDidNotStart(QuiesceError):
    """uvicorn did not start serving on `port` within `seconds`."""

    def __init__(self, port: int, seconds: float) -> None:
        self.port = port
        self.seconds = seconds
        super().__init__(f"the local participant server on port {port} did not start in {seconds}s")


class LocalServer:
    """Serve `host` over HTTP on 127.0.0.1 (uvicorn in a daemon thread) while in `with`.

    >>> with LocalServer.start({"name": "p", "role": "policy"}, token="t") as server:
    ...     server.url.startswith("http://127.0.0.1:")
    True
    """

    def __init__(
        self,
        host: ParticipantHost,
        *,
        token: str,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        make_host: Callable[[], ParticipantHost] | None = None,
        run_work: bool = False,
    ) -> None:
        self.host = host
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._token = token
        self._max_body_bytes = max_body_bytes
        self._make_host = make_host
        self._run_work = run_work
        self._app = create_app(host, token=token, max_body_bytes=max_body_bytes)
        config = uvicorn.Config(
            self._dispatch, host="127.0.0.1", port=self.port, loop="asyncio", log_config=None,
            access_log=False, lifespan="on", interface="asgi3",
        )  # fmt: skip
        self._server = uvicorn.Server(config)
        self._loop: asyncio.AbstractEventLoop | None = None  # uvicorn's, once it serves
        self._thread = threading.Thread(target=self._server.run, daemon=True, name=self.url)

    @classmethod
    def start(
        cls,
        config: Mapping[str, Any],
        *,
        token: str,
        host_class: type[ParticipantHost] = ParticipantHost,
        state_dir: Path | None = None,
        run_work: bool = False,
        **options: Any,
    ) -> LocalServer:
        """A fresh participant of `config` hosted by `host_class` (default the reference
        `ParticipantHost`), journaled in `state_dir` (default in memory). `run_work=False`
        (default): an agent runs no executions of its own, as the conformance kit needs.
        `reset()` swaps in a new participant (always journaled in memory)."""

        def make(journal: JournalSink | None = None) -> ParticipantHost:
            return host_class.start(
                config, clock=RealClock(), journal=journal or MemoryJournal(), run_work=run_work
            )

        first = make(FileJournal(state_dir) if state_dir else None)
        return cls(first, token=token, make_host=make, run_work=run_work, **options)

    @property
    def reset_url(self) -> str:
        """The URL of the reset hook (`check_conformance(reset=...)`, `quiesce conform
        --reset-url`): a POST with the bearer token does what `reset()` does, answering 204."""
        return self.url + RESET_PATH

    async def _dispatch(self, scope: Scope, receive: Receive, send: Send) -> None:
        # One uvicorn, swappable participants: `reset()` replaces the app between requests.
        self._loop = asyncio.get_running_loop()
        if scope["type"] == "http" and scope["path"] == RESET_PATH and scope["method"] == "POST":
            authorized = (b"authorization", f"Bearer {self._token}".encode()) in scope["headers"]
            if authorized:
                self.reset()
            await send({"type": "http.response.start", "status": 204 if authorized else 401})
            await send({"type": "http.response.body", "body": b""})
            return
        await self._app(scope, receive, send)

    def reset(self) -> None:
        """Serve a brand-new participant (same config and host class, fresh state, new
        incarnation, always journaled in memory) on the same URL from now on: the reset hook
        of `check_conformance(server.url, ..., reset=server.reset)`.

        Only for servers made by `LocalServer.start` (it knows how to build the host)."""
        if self._make_host is None:
            raise TypeError("reset() needs a LocalServer made by LocalServer.start(...)")
        make = self._make_host
        # The replaced host is simply dropped: a host that is not run() holds no tasks.
        self._in_server_loop(lambda: self._serve(make()))

    def restart(self) -> None:
        """Kill the participant (its executions and anything not yet journaled die) and
        start it again from its journal under a new incarnation, on the same URL (§6): the
        restart hook of `check_conformance(..., restart=server.restart)`. Safe to call from
        any thread, also while requests are in flight (they die with the participant: 503)."""
        self._in_server_loop(self._crash_and_recover)

    def _crash_and_recover(self) -> None:
        journal = self.host.journal
        self.host.crash()
        if journal.load() is None and self._make_host is not None:
            self._serve(self._make_host())  # nothing was ever journaled: it starts afresh
            return
        incarnation = f"inc-{secrets.token_hex(8)}"
        host = type(self.host).recover(
            journal, incarnation, clock=RealClock(), run_work=self._run_work
        )
        self._serve(host)

    def _serve(self, host: ParticipantHost) -> None:
        """Answer every request with `host` from now on."""
        self.host = host
        self._app = create_app(
            host, token=self._token, max_body_bytes=self._max_body_bytes, run_host=False
        )

    def _in_server_loop(self, swap: Callable[[], None]) -> None:
        """Run `swap` on uvicorn's event loop (the hosts' events belong to it), waiting for
        it; directly if the server is not serving yet, or this is its loop (the reset route)."""
        loop = self._loop
        if loop is None or not loop.is_running() or _running_loop() is loop:
            swap()
            return

        async def call() -> None:
            swap()

        asyncio.run_coroutine_threadsafe(call(), loop).result(timeout=10)

    @contextmanager
    def fresh(self) -> Iterator[str]:
        """`reset()`, then yield the URL: a factory of fresh servers for
        `check_conformance(server.fresh, ...)`, one per example, without restarting uvicorn."""
        self.reset()
        yield self.url

    def __enter__(self) -> LocalServer:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                self._server.should_exit = True
                raise ServerDidNotStart(self.port, 10)
            time.sleep(0.01)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
