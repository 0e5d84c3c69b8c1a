"""The fence log: one JSON line per request a participant handled (docs/validate.md).

What lives here: the log's format -- `FenceLogHeader`, the versioned first line of every
file a writer opens, then one `FenceLogLine` per request, each carrying the participant's
fence (`FenceView`, PROTOCOL.md M2) before and after it -- and where the lines go:
`FenceLogSink`, which a `ParticipantHost` hands each line to, written to a file
(`FileFenceLog`), kept in memory (`MemoryFenceLog`) or handed to several (`TeeFenceLog`).
What it does not know: whether a line is a step the design allows (`quiesce validate`, in
`quiesce.models`, judges a log).

Why the fence and nothing else: the fence is what a participant and the design model hold
alike and move at the same grain (one request at a time), so a recorded run is judged by
refinement on exactly that view (`quiesce.models` `_refinement`).

>>> from quiesce.protocol.participant import new_participant
>>> state = new_participant({"name": "agent-0", "role": "agent"}, "inc-1")
>>> FenceView.of(state.fence).model_dump(mode="json")
{'state': 'idle', 'active': None, 'high_watermark': None, 'recorded': []}
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from types import TracebackType
from typing import IO, Literal

from pydantic import BaseModel, ConfigDict

from quiesce.fsm import Value
from quiesce.protocol.machines import FenceData, FenceOp, FenceState
from quiesce.protocol.participant import ParticipantState
from quiesce.protocol.wire import OpIdField, Role

__all__ = [
    "FENCE_LOG_FORMAT",
    "FENCE_LOG_VERSION",
    "FenceLogHeader",
    "FenceLogLine",
    "FenceLogSink",
    "FenceView",
    "FileFenceLog",
    "MemoryFenceLog",
    "TeeFenceLog",
]

FENCE_LOG_FORMAT: Literal["quiesce-fence-log"] = "quiesce-fence-log"
"""The `format` of a fence log's header line."""
FENCE_LOG_VERSION = 1
"""The `version` of the format this module writes (and the only one a reader accepts)."""

_FROZEN = ConfigDict(frozen=True, extra="forbid")


class FenceView(BaseModel):
    """A participant's fence (M2) as the log records it: its state, the active op id, the
    high-watermark (the newest retired id) and the `(op_id, op)` of each recorded result
    (the results themselves are not logged: refinement compares which ops were recorded)."""

    model_config = _FROZEN

    state: FenceState
    active: OpIdField | None
    high_watermark: OpIdField | None
    recorded: tuple[tuple[OpIdField, FenceOp], ...]

    @classmethod
    def of(cls, fence: Value[FenceState, FenceData]) -> FenceView:
        """The view of a participant's fence value."""
        data = fence.data
        return cls(
            state=fence.state,
            active=data.active,
            high_watermark=data.high_watermark,
            recorded=tuple((op_id, op) for op_id, op, _ in data.recorded),
        )


class FenceLogHeader(BaseModel):
    """The first line of every file a writer opens (again at each reopen: a restarted
    server appends to the same file)."""

    model_config = _FROZEN

    format: Literal["quiesce-fence-log"] = FENCE_LOG_FORMAT
    version: int = FENCE_LOG_VERSION


class FenceLogLine(BaseModel):
    """One request a participant handled: who (`participant`, `role`, `incarnation`), what
    (`op`, the route's name, and the request's `op_id` as sent, None for a request without
    one), when (`time`: the host clock's seconds, virtual under `quiesce simulate`, the
    event loop's monotonic clock under `quiesce serve`) and the fence `before` and `after`.
    """

    model_config = _FROZEN

    participant: str
    role: Role
    op: str
    op_id: str | None
    incarnation: str
    time: float
    before: FenceView
    after: FenceView

    @classmethod
    def of(
        cls,
        op: str,
        op_id: str | None,
        before: ParticipantState,
        after: ParticipantState,
        time: float,
    ) -> FenceLogLine:
        """The line of one request that took the participant from `before` to `after`."""
        return cls(
            participant=after.config.name,
            role=after.config.role,
            op=op,
            op_id=op_id,
            incarnation=after.incarnation,
            time=time,
            before=FenceView.of(before.fence),
            after=FenceView.of(after.fence),
        )


class FenceLogSink(ABC):
    """Where a `ParticipantHost` puts the line of each request it handled."""

    @abstractmethod
    def record(self, line: FenceLogLine) -> None:
        """Keep `line` (called under the host's lock, in the order requests are applied)."""


class MemoryFenceLog(FenceLogSink):
    """Keeps every line, in order (`lines`); one sink may serve a whole fleet."""

    def __init__(self) -> None:
        self.lines: list[FenceLogLine] = []

    def record(self, line: FenceLogLine) -> None:
        self.lines.append(line)


class TeeFenceLog(FenceLogSink):
    """Hands each line to every one of `sinks`, in order."""

    def __init__(self, *sinks: FenceLogSink) -> None:
        self.sinks = sinks

    def record(self, line: FenceLogLine) -> None:
        for sink in self.sinks:
            sink.record(line)


class FileFenceLog(FenceLogSink):
    """Writes lines to the file at `path` (created if missing), after a header line.

    Each line is flushed as it is written, so a process killed with SIGKILL leaves every
    line it recorded (the journal, not this log, is what is fsynced). By default it
    appends, so a restarted server continues the same log; `append=False` replaces the
    file. One sink may serve a whole fleet. Use it as a context manager, or `close()` it.
    """

    def __init__(self, path: Path, *, append: bool = True) -> None:
        self.path = path
        self._file: IO[str] = path.open("a" if append else "w", encoding="utf-8")
        self._write(FenceLogHeader().model_dump_json())

    def record(self, line: FenceLogLine) -> None:
        self._write(line.model_dump_json())

    def _write(self, text: str) -> None:
        self._file.write(text + "\n")
        self._file.flush()

    def close(self) -> None:
        """Close the file (lines recorded afterwards raise `ValueError`)."""
        self._file.close()

    def __enter__(self) -> FileFenceLog:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
