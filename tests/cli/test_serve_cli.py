"""`quiesce serve`: an address, token or state dir it cannot use is one line, before
anything starts; one server per state dir, and only the journal's own participant
recovers it."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from quiesce.adapters import FileJournal
from quiesce.cli import main
from quiesce.protocol.participant import journal_of, new_participant
from quiesce.testing import free_port


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text("secret-token\n")
    return path


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        yield listener.getsockname()[1]


def serve(state_dir: Path, token_file: Path, *extra: str) -> tuple[int, str]:
    argv = ["serve", "--role", "policy", "--state-dir", str(state_dir)]
    result = CliRunner().invoke(main, [*argv, "--token-file", str(token_file), *extra])
    assert result.exception is None or isinstance(result.exception, SystemExit)
    return result.exit_code, result.stderr


def test_a_taken_port_exits_2_before_the_journal_is_touched(
    tmp_path: Path, token_file: Path, taken_port: int
) -> None:
    state = tmp_path / "state"
    code, err = serve(state, token_file, "--port", str(taken_port))
    assert code == 2
    assert err == (
        f"error: cannot listen on --host '127.0.0.1' --port {taken_port}: Address already in use\n"
    )
    assert not state.exists()


def test_a_host_that_does_not_resolve_exits_2(tmp_path: Path, token_file: Path) -> None:
    code, err = serve(tmp_path, token_file, "--port", "0", "--host", "no-such-host.invalid")
    assert code == 2 and err.startswith("error: cannot resolve --host 'no-such-host.invalid'")


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"\xffsecret", "is not UTF-8 text"),
        (b" \n", "is empty"),
        (b"two words", "has spaces or control characters"),
        (b"a\x00b", "has spaces or control characters"),
    ],
)
def test_a_token_that_cannot_be_a_bearer_token_is_a_usage_error(
    tmp_path: Path, content: bytes, problem: str
) -> None:
    token = tmp_path / "token"
    token.write_bytes(content)
    code, err = serve(tmp_path / "state", token, "--port", "0")
    assert code == 2 and problem in err
    assert "two words" not in err  # the token is never shown


# ------------------------------------------------------------------------ the state dir


class Server:
    """`quiesce serve --role policy --name policy-a` as a real process on a free port of
    127.0.0.1, its stderr in a file (a pipe nobody reads could fill and block it)."""

    def __init__(self, state_dir: Path, token_file: Path, log: Path) -> None:
        self.port = free_port()
        self.log = log
        command = [
            sys.executable, "-m", "quiesce", "serve", "--role", "policy", "--name", "policy-a",
            "--port", str(self.port), "--state-dir", str(state_dir),
            "--token-file", str(token_file),
        ]  # fmt: skip
        with log.open("wb") as err:
            self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=err)

    def wait_healthy(self, seconds: float = 30) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            assert self.process.poll() is None, self.log.read_text()
            try:
                if httpx.get(f"http://127.0.0.1:{self.port}/healthz", timeout=0.5).is_success:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        raise AssertionError(f"no /healthz on port {self.port} within {seconds}s")

    def stop(self) -> int:
        """SIGTERM (uvicorn's graceful shutdown), then the exit code: -SIGTERM, as uvicorn
        raises the signal again once it has shut down."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=30)


@pytest.fixture
def servers() -> Iterator[list[Server]]:
    """Every server a test starts; the ones still running are killed after it."""
    started: list[Server] = []
    yield started
    for server in started:
        if server.process.poll() is None:
            server.process.kill()
            server.process.wait()


def test_one_server_per_state_dir_until_it_exits(
    tmp_path: Path, token_file: Path, servers: list[Server]
) -> None:
    state = tmp_path / "state"
    first = Server(state, token_file, tmp_path / "first.log")
    servers.append(first)
    first.wait_healthy()
    assert (state / ".lock").read_text() == f"{first.process.pid}\n"

    second = Server(state, token_file, tmp_path / "second.log")
    servers.append(second)
    assert second.process.wait(timeout=60) == 2
    pid = first.process.pid
    assert second.log.read_text() == (
        f"error: --state-dir {str(state)!r} is locked by pid {pid}, a server already running "
        f"on it: stop pid {pid}, or give this server another --state-dir\n"
    )
    assert first.process.poll() is None  # the refused server did not disturb the first

    assert first.stop() == -signal.SIGTERM
    third = Server(state, token_file, tmp_path / "third.log")  # the lock went with the first
    servers.append(third)
    third.wait_healthy()
    assert (state / ".lock").read_text() == f"{third.process.pid}\n"
    assert third.stop() == -signal.SIGTERM


def test_a_state_dir_under_a_file_exits_2_naming_it(tmp_path: Path, token_file: Path) -> None:
    # Tests run as root, whom permission bits do not stop: a path through a regular file
    # is one no user can create.
    (tmp_path / "file").write_text("")
    code, err = serve(tmp_path / "file" / "state", token_file, "--port", "0")
    assert code == 2
    assert f"'{tmp_path / 'file'}' is a file, not a directory" in err


def test_a_state_dir_whose_lock_cannot_be_opened_exits_2_at_start(
    tmp_path: Path, token_file: Path
) -> None:
    (tmp_path / ".lock").mkdir()
    code, err = serve(tmp_path, token_file, "--port", "0")
    assert err == (
        f"error: --state-dir {str(tmp_path)!r} cannot be used: cannot open "
        f"{tmp_path / '.lock'} (Is a directory); give a writable directory\n"
    )
    assert code == 2


def _journal(state_dir: Path, name: str, role: str) -> None:
    state_dir.mkdir(parents=True, exist_ok=True)
    journal = journal_of(new_participant({"name": name, "role": role}, "inc-1"))
    (state_dir / FileJournal.FILE_NAME).write_bytes(FileJournal.encode(journal))


def test_a_restart_on_another_port_names_the_journals_participant_and_the_name_flag(
    tmp_path: Path, token_file: Path
) -> None:
    _journal(tmp_path, "policy-8001", "policy")
    code, err = serve(tmp_path, token_file, "--port", "0")
    assert err == (
        f"error: --state-dir {str(tmp_path)!r} holds the journal of policy 'policy-8001', "
        "not of policy 'policy-0' (without --name the name is <role>-<port>, so a restart on "
        "another port needs --name): to recover that participant, restart with "
        "--name policy-8001; to start a new one, give another --state-dir\n"
    )
    assert code == 2


def test_a_journal_of_another_role_names_the_role_flag(tmp_path: Path, token_file: Path) -> None:
    _journal(tmp_path, "p", "resources")
    code, err = serve(tmp_path, token_file, "--port", "0", "--name", "p")
    assert err == (
        f"error: --state-dir {str(tmp_path)!r} holds the journal of resources 'p', not of "
        "policy 'p': to recover that participant, restart with --role resources; to start "
        "a new one, give another --state-dir\n"
    )
    assert code == 2


def test_a_corrupt_journal_is_still_reported_corrupt(tmp_path: Path, token_file: Path) -> None:
    _journal(tmp_path, "policy-0", "policy")
    path = tmp_path / FileJournal.FILE_NAME
    path.write_bytes(path.read_bytes().replace(b"policy-0", b"policy-9"))
    code, err = serve(tmp_path, token_file, "--port", "0")
    assert code == 2
    assert err.startswith(f"error: participant journal {path} is corrupt at 'sha256'")
