"""Ctrl-C and SIGTERM during a long command: stop cleanly, report what was done.

`stop_on_signals()` turns SIGINT and SIGTERM into one exception, `Stopped`, while a
block runs; the command catches it, prints its partial summary and exits with
`Stopped.exit_code` (130 for SIGINT, 143 for SIGTERM: 128 + the signal number, as a shell
reports a process killed by it). Without it, SIGTERM kills the process with no summary
and Ctrl-C prints a traceback.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

__all__ = ["StopRequest", "Stopped", "stop_on_signals", "stop_requested", "stopped_in"]

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Stopped(BaseException):
    """The command was asked to stop by `signal` (SIGINT or SIGTERM).

    A `BaseException`, like `KeyboardInterrupt`: code that catches `Exception` to report
    a failure (the models record what a mutant's core raised) must let it through.
    """

    def __init__(self, signum: int) -> None:
        self.signal = signal.Signals(signum)
        super().__init__(f"stopped by {self.signal.name}")

    @property
    def exit_code(self) -> int:
        """128 + the signal number: 130 for SIGINT, 143 for SIGTERM."""
        return 128 + int(self.signal)


def _raise_stopped(signum: int, _frame: FrameType | None) -> None:
    raise Stopped(signum)


@contextmanager
def _handled_by(handler: Callable[[int, FrameType | None], None]) -> Iterator[None]:
    """Handle SIGINT and SIGTERM with `handler` in the block; restore the handlers after.
    Off the main thread (where Python cannot install handlers) the block runs as is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.signal(signum, handler) for signum in _SIGNALS}
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


@contextmanager
def stop_on_signals() -> Iterator[None]:
    """Raise `Stopped` in the block on SIGINT or SIGTERM; restore the handlers after.

    Off the main thread (where Python cannot install handlers) the block runs as is.
    """
    with _handled_by(_raise_stopped):
        yield


class StopRequest:
    """SIGINT or SIGTERM, recorded for code that stops at its own safe points (between
    two requests) rather than wherever the signal lands: `event` is set by the first
    signal, `stopped()` is the `Stopped` to report."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.signum: int | None = None

    def record(self, signum: int, _frame: FrameType | None) -> None:
        if self.event.is_set():  # asked twice: stop now, wherever the program is
            raise Stopped(signum)
        self.signum = signum
        self.event.set()

    def stopped(self) -> Stopped:
        assert self.signum is not None, "no signal was recorded"
        return Stopped(self.signum)


@contextmanager
def stop_requested() -> Iterator[StopRequest]:
    """Record SIGINT or SIGTERM in the yielded `StopRequest` while the block runs; a
    second signal raises `Stopped` at once. Restore the handlers after. Off the main
    thread the block runs with no handlers, as under `stop_on_signals`."""
    request = StopRequest()
    with _handled_by(request.record):
        yield request


def stopped_in(error: BaseException) -> Stopped | None:
    """The `Stopped` that `error` is, or carries: a task group (anyio, a driver's event
    loop) raises it wrapped in an exception group."""
    if isinstance(error, Stopped):
        return error
    if isinstance(error, BaseExceptionGroup):
        for inner in error.exceptions:
            found = stopped_in(inner)
            if found is not None:
                return found
    return None
