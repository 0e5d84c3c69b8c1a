"""`quiesce serve`: an address or token it cannot use is one line, before anything starts."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from quiesce.cli import main


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
