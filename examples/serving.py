"""Serve an ASGI app (your FastAPI service) on 127.0.0.1 in a background thread, for tests.

The conformance kit needs a running server and, to check §6, a way to restart it: `restart()`
stops the server (its lifespan ends, so the participant's host stops and its state dir is
unlocked) and serves a new app made by the same factory, on the same port and state dir.
`reset()` does the same on a fresh state dir, for a brand-new participant.
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

import uvicorn
from starlette.types import ASGIApp

from quiesce.testing import free_port


class ServedApp:
    """`make_app(state_dir)` served at `self.url` while in `with`."""

    def __init__(self, make_app: Callable[[Path], ASGIApp], state_dir: Path) -> None:
        self.make_app = make_app
        self.state_dir = state_dir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Serve a new app; return once it answers (its lifespan has started)."""
        config = uvicorn.Config(
            self.make_app(self.state_dir), host="127.0.0.1", port=self.port, lifespan="on",
            log_config=None, access_log=False, timeout_graceful_shutdown=2,
        )  # fmt: skip
        self._server = server = uvicorn.Server(config)
        self._thread = threading.Thread(target=server.run, daemon=True, name=self.url)
        self._thread.start()
        deadline = time.monotonic() + 20
        while not server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the app at {self.url} did not start; see its log")
            time.sleep(0.01)

    def stop(self) -> None:
        """Shut the server down (the app's lifespan ends)."""
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(timeout=20)
        self._server = self._thread = None

    def restart(self) -> None:
        """Stop, then serve a new app on the same port and state dir (the kit's `restart=`)."""
        self.stop()
        self.start()

    def reset(self) -> None:
        """Stop, wipe the state dir, serve a brand-new participant (the kit's `reset=`)."""
        self.stop()
        shutil.rmtree(self.state_dir, ignore_errors=True)
        self.start()

    def __enter__(self) -> ServedApp:
        self.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
