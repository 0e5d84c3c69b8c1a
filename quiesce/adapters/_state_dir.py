"""One live process per state directory: `StateDirLock`.

What lives here: the exclusive claim a process lays on the directory holding its journal,
so that two servers never write one journal (each would overwrite the other's fence state,
and a restart would recover a mixture). The claim is an `fcntl.flock` on
`<state-dir>/.lock`, held on an open descriptor for as long as the process keeps it: the
kernel drops it when the process exits, however it exits, so a crash never leaves a stale
lock behind. The holder's pid is written into the file for the message a second process
prints; the pid is informative only, the flock decides.

Taking the lock also creates the directory and a file in it, so a directory that cannot be
written fails here, at start, instead of at the first journal write.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path
from types import TracebackType

from quiesce.adapters._durable import make_dirs
from quiesce.fsm import QuiesceError

__all__ = ["StateDirBusy", "StateDirLock", "StateDirUnusable"]


class StateDirBusy(QuiesceError):
    """Another live process holds the lock on `state_dir`; `pid` is the pid it wrote in
    the lock file (None if it has not written it yet, or wrote something else)."""

    def __init__(self, state_dir: Path, pid: int | None) -> None:
        self.state_dir = state_dir
        self.pid = pid
        self.holder = "another process" if pid is None else f"pid {pid}"
        super().__init__(
            f"state dir {state_dir} is locked by {self.holder} "
            f"({state_dir / StateDirLock.FILE_NAME}): stop {self.holder}, "
            "or use another state dir"
        )


class StateDirUnusable(QuiesceError):
    """`state_dir` cannot hold a journal: `detail` says which step failed and why."""

    def __init__(self, state_dir: Path, detail: str) -> None:
        self.state_dir = state_dir
        self.detail = detail
        super().__init__(f"state dir {state_dir} cannot be used: {detail}")


class StateDirLock:
    """The exclusive lock on a state directory, held until `release` (or process exit).

    >>> import tempfile
    >>> with StateDirLock.acquire(Path(tempfile.mkdtemp()) / "state") as lock:
    ...     lock.path.read_text() == f"{os.getpid()}\\n"
    True
    """

    FILE_NAME = ".lock"

    def __init__(self, state_dir: Path, fd: int) -> None:
        self.state_dir = state_dir
        self.path = state_dir / self.FILE_NAME
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, state_dir: Path | str) -> StateDirLock:
        """Create `state_dir` if missing and lock it for this process, without waiting.
        Raises `StateDirBusy` if a live process holds it, `StateDirUnusable` if the
        directory or its lock file cannot be created or written."""
        state_dir = Path(state_dir)
        path = state_dir / cls.FILE_NAME
        try:
            make_dirs(state_dir)
        except OSError as error:
            raise StateDirUnusable(state_dir, f"cannot create it ({error.strerror})") from None
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as error:
            raise StateDirUnusable(state_dir, f"cannot open {path} ({error.strerror})") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _pid_in(fd)
            os.close(fd)
            raise StateDirBusy(state_dir, holder) from None
        try:
            # The file outlives its holders: overwrite the previous holder's pid.
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError as error:
            os.close(fd)  # closing the descriptor drops the lock
            raise StateDirUnusable(state_dir, f"cannot write {path} ({error.strerror})") from None
        return cls(state_dir, fd)

    def release(self) -> None:
        """Drop the lock (idempotent). The file stays: removing it would let a process
        that opened it just before lock an orphaned inode while a third locks a new file."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> StateDirLock:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.release()


def _pid_in(fd: int) -> int | None:
    """The pid a holder wrote in the lock file, or None if it holds no pid (yet)."""
    with contextlib.suppress(OSError, ValueError):
        return int(os.pread(fd, 32, 0).decode("ascii").strip())
    return None
