"""`StateDirLock`: one live holder per state dir, named to the next; gone with its process."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

import pytest

from quiesce.adapters import StateDirBusy, StateDirLock, StateDirUnusable

HOLD = """
import sys
from quiesce.adapters import StateDirLock
lock = StateDirLock.acquire(sys.argv[1])
print("locked", flush=True)
sys.stdin.read()  # hold it until killed
"""


def test_the_lock_creates_the_dir_writes_the_pid_and_refuses_a_second_holder(
    tmp_path: Path,
) -> None:
    state = tmp_path / "a" / "state"
    with StateDirLock.acquire(state) as lock:
        assert lock.path == state / ".lock"
        assert lock.path.read_text() == f"{os.getpid()}\n"
        # flock is per open file: a second acquire in this very process is refused too.
        with pytest.raises(StateDirBusy) as busy:
            StateDirLock.acquire(state)
        assert busy.value.pid == os.getpid() and busy.value.state_dir == state
        assert str(busy.value) == (
            f"state dir {state} is locked by pid {os.getpid()} ({state / '.lock'}): "
            f"stop pid {os.getpid()}, or use another state dir"
        )
    with StateDirLock.acquire(state) as again:  # released on leaving the block
        again.release()  # idempotent with the `with`'s own release


def test_a_holder_that_wrote_no_pid_is_another_process(tmp_path: Path) -> None:
    (tmp_path / ".lock").write_text("not a pid")
    fd = os.open(tmp_path / ".lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        with pytest.raises(StateDirBusy) as busy:
            StateDirLock.acquire(tmp_path)
        assert busy.value.pid is None and "locked by another process" in str(busy.value)
    finally:
        os.close(fd)


def test_a_killed_holder_leaves_no_stale_lock(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(tmp_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
        with pytest.raises(StateDirBusy) as busy:
            StateDirLock.acquire(tmp_path)
        assert busy.value.pid == holder.pid
    finally:
        holder.kill()
        holder.communicate()
    with StateDirLock.acquire(tmp_path) as lock:
        assert lock.path.read_text() == f"{os.getpid()}\n"  # the dead holder's pid replaced


def test_a_dir_that_cannot_be_created_or_opened_is_unusable(tmp_path: Path) -> None:
    # As root, permission bits stop nothing: a path through a regular file does.
    (tmp_path / "file").write_text("")
    with pytest.raises(StateDirUnusable) as under_a_file:
        StateDirLock.acquire(tmp_path / "file" / "state")
    assert str(under_a_file.value) == (
        f"state dir {tmp_path / 'file' / 'state'} cannot be used: "
        "cannot create it (Not a directory)"
    )
    (tmp_path / "state" / ".lock").mkdir(parents=True)
    with pytest.raises(StateDirUnusable) as lock_is_a_dir:
        StateDirLock.acquire(tmp_path / "state")
    assert (
        lock_is_a_dir.value.detail == f"cannot open {tmp_path / 'state' / '.lock'} (Is a directory)"
    )
