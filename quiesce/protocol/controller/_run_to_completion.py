"""Run-to-completion: an event fired from inside a machine's work waits for that work.

The coordinator (M1) and the restore flow (M9) both step their table and then run the
named work of the rows that fired; work may fire the same machine again. Those events
queue behind the one being handled, so each step sees the state its predecessor left
(the statechart rule of run-to-completion), and work never interleaves with itself.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any, Generic, TypeVar

__all__ = ["RunToCompletion"]

E = TypeVar("E")


class RunToCompletion(Generic[E]):
    """Calls `handle(event, arg)` for each fired event, one at a time, in firing order."""

    __slots__ = ("_draining", "_handle", "_queue")

    def __init__(self, handle: Callable[[E, Any], None]) -> None:
        self._handle = handle
        self._queue: deque[tuple[E, Any]] = deque()
        self._draining = False

    def fire(self, event: E, arg: Any = None) -> None:
        """Handle `event` now, or after the event being handled if fired from its work."""
        self._queue.append((event, arg))
        if self._draining:
            return
        self._draining = True
        try:
            while self._queue:
                self._handle(*self._queue.popleft())
        finally:
            self._draining = False
