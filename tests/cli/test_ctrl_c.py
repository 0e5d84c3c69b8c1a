"""Every long-running command, stopped for real: started as a process with stderr on a
terminal (a pty), sent SIGINT (or SIGTERM) once its progress shows there, it exits 130
(143) with a partial summary on stdout and no traceback.

`check`'s exhaustive search under SIGTERM is in `test_check_cli.py`; here are the other
modes of `check` and the other commands. Waiting for the progress is also the check that
each one shows progress on a terminal within a few seconds.
"""

from __future__ import annotations

import os
import pty
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

QUIESCE = [sys.executable, "-m", "quiesce"]
# Long enough for a loaded machine to start the command and report once.
PROGRESS_TIMEOUT_S = 120


@dataclass(frozen=True)
class Stopped:
    code: int
    out: str
    err: str


def _stop_after_progress(
    args: list[str], progress: str, signum: int = signal.SIGINT, **kwargs: object
) -> Stopped:
    """Run `quiesce ARGS` with stderr on a terminal (a pty), send `signum` once stderr
    shows `progress`, and collect what it printed."""
    terminal, stderr = pty.openpty()
    process = subprocess.Popen(
        [*QUIESCE, *args],
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        **kwargs,  # type: ignore[call-overload]
    )
    os.close(stderr)
    assert process.stdout is not None
    seen: list[str] = []
    shown = threading.Event()

    def read() -> None:
        # A progress line may be rewritten in place (no newline): read what arrives.
        while True:
            try:
                chunk = os.read(terminal, 4096)
            except OSError:  # the other end closed: the process is gone
                return
            if not chunk:
                return
            seen.append(chunk.decode(errors="replace"))
            if progress in "".join(seen):
                shown.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert shown.wait(PROGRESS_TIMEOUT_S), f"no {progress!r} on stderr: {''.join(seen)}"
        process.send_signal(signum)
        out = process.stdout.read()
        process.wait(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
        reader.join(timeout=10)
        os.close(terminal)
    err = "".join(seen)
    assert "Traceback" not in err, err
    return Stopped(process.returncode, out, err)


def test_simulate_stops_on_ctrl_c_with_the_steps_it_finished() -> None:
    ran = _stop_after_progress(["simulate", "--steps", "5000"], "training")
    assert ran.code == 130, ran.err
    assert "simulate: STOPPED by SIGINT at step " in ran.out and "of 5000" in ran.out
    assert "the run did not finish (nothing judged)" in ran.err


def test_simulate_stops_on_sigterm_with_exit_143() -> None:
    ran = _stop_after_progress(
        ["simulate", "--steps", "5000", "--json"], "simulate: step ", signal.SIGTERM
    )
    assert ran.code == 143, ran.err
    assert '"interrupted": "SIGTERM"' in ran.out and '"of_steps": 5000' in ran.out


def test_check_walks_stop_on_ctrl_c() -> None:
    ran = _stop_after_progress(["check", "protocol", "--walks", "1000000"], "check: ")
    assert ran.code == 130, ran.err
    assert "STOPPED by SIGINT" in ran.out and "walks left" in ran.out


def test_check_swarm_stops_on_ctrl_c() -> None:
    args = ["check", "protocol", "--swarm", "100000", "--walks", "5"]
    ran = _stop_after_progress(args, "walkers")
    assert ran.code == 130, ran.err
    assert "STOPPED by SIGINT" in ran.out


def test_check_refine_stops_on_ctrl_c_while_it_exhausts_the_design() -> None:
    args = ["check", "protocol", "--walks", "5", "--refine"]
    ran = _stop_after_progress(args, "check: --refine: exhausting the design model")
    assert ran.code == 130, ran.err
    assert "STOPPED by SIGINT (design phase of --refine)" in ran.out


def test_mutants_verify_stops_on_ctrl_c_with_the_verdicts_so_far() -> None:
    args = ["mutants", "--verify", "--jobs", "1", "--sample", "0"]
    ran = _stop_after_progress(args, "mutants: ")
    assert ran.code == 130, ran.err
    assert " run (" in ran.out.splitlines()[-1]  # the summary line of what ran
    assert "mutants: stopped by SIGINT after " in ran.err


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture
def policy_server(tmp_path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    """A policy server on a free port: its URL and the environment holding its token."""
    env = {**os.environ, "QUIESCE_TOKEN": "ctrl-c-test-token"}
    port = _free_port()
    args = ["serve", "--role", "policy", "--port", str(port), "--state-dir", str(tmp_path)]
    server = subprocess.Popen(
        [*QUIESCE, *args, "--no-work"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + PROGRESS_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}", env
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_conform_stops_on_ctrl_c(policy_server: tuple[str, dict[str, str]]) -> None:
    url, env = policy_server
    args = ["conform", "--url", url, "--role", "policy", "--examples", "1000000"]
    ran = _stop_after_progress(args, "conform: checking", env=env)
    assert ran.code == 130, ran.err
    assert f"STOPPED by SIGINT: {url} was not judged" in ran.out


def test_chaos_stops_on_ctrl_c_and_stops_its_children(tmp_path: Path) -> None:
    args = ["chaos", "--kills", "50", "--workdir", str(tmp_path / "run")]
    ran = _stop_after_progress(args, "chaos: running")
    assert ran.code == 130, ran.err
    assert "chaos: STOPPED by SIGINT after " in ran.out
    assert "every child was stopped" in ran.err
