"""The served explorer: the page, and the one call it makes to step by hand.

Bound to 127.0.0.1 only: the page runs the model on whatever action it is asked for, so
it is for the person at this machine. Port 0 takes a free port; `on_ready` gets the URL
once the socket is bound, before requests are served.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from quiesce.explore._page import render_page
from quiesce.explore._session import BadStep, Session

__all__ = ["HOST", "explorer_app", "serve"]

HOST = "127.0.0.1"


def explorer_app(session: Session[Any]) -> Starlette:
    """The explorer app: `GET /` is the page, `POST /api/step` with `{"state", "action"}`
    (a frame's `id`, an index into its `actions`) returns the frame after that step."""
    page = render_page(session.document(served=True))

    # Handlers are async so the session is only ever touched from the event loop's thread.
    async def index(request: Request) -> Response:
        return HTMLResponse(page)

    async def step(request: Request) -> Response:
        try:
            body = await request.json()
            frame = session.step(int(body["state"]), int(body["action"]))
        except BadStep as error:
            return JSONResponse({"error": str(error)}, status_code=404)
        except (ValueError, KeyError, TypeError) as error:
            message = f'expected {{"state": int, "action": int}}, not that ({error!r})'
            return JSONResponse({"error": message}, status_code=400)
        return JSONResponse(frame)

    return Starlette(routes=[Route("/", index), Route("/api/step", step, methods=["POST"])])


def serve(session: Session[Any], *, port: int = 0, on_ready: Callable[[str], None]) -> None:
    """Serve the explorer on 127.0.0.1:`port` until interrupted (Ctrl-C)."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((HOST, port))
    listener.listen()  # before the URL is out: an early request waits instead of failing
    config = uvicorn.Config(explorer_app(session), log_level="warning")
    on_ready(f"http://{HOST}:{listener.getsockname()[1]}/")
    uvicorn.Server(config).run(sockets=[listener])
