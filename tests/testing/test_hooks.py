"""The kit's reset and restart hooks, as given on the command line or in Python."""

from __future__ import annotations

from pathlib import Path

import pytest

from quiesce.testing import ConformanceSetupError, LocalServer, check_conformance
from quiesce.testing._session import reset_hook, restart_hook


def test_a_restart_command_runs_in_the_shell_and_must_exit_0(tmp_path: Path) -> None:
    marker = tmp_path / "restarted"
    restart_hook(f"touch {marker}", timeout=10)()
    assert marker.exists()
    with pytest.raises(ConformanceSetupError) as caught:
        restart_hook("exit 3", timeout=10)()
    assert "the restart command exited 3; it must exit 0" in str(caught.value)


def test_a_restart_command_that_hangs_is_a_setup_error() -> None:
    with pytest.raises(ConformanceSetupError) as caught:
        restart_hook("sleep 5", timeout=0.2)()
    assert "ran over 0.2s" in str(caught.value)


def test_callables_are_called_once_per_use() -> None:
    calls: list[str] = []
    reset_hook(lambda: calls.append("reset"), token="t", timeout=1)()
    restart_hook(lambda: calls.append("restart"), timeout=1)()
    assert calls == ["reset", "restart"]


def test_a_reset_url_that_answers_nothing_is_a_setup_error() -> None:
    with pytest.raises(ConformanceSetupError) as caught:
        reset_hook("http://127.0.0.1:9/reset", token="secret-tok", timeout=1)()
    assert "the reset hook got no answer" in str(caught.value)
    assert "secret-tok" not in str(caught.value)


def test_an_error_that_a_replay_does_not_raise_again_is_a_one_line_setup_error() -> None:
    # Not a violation (no report to show) and not reproducible: the kit names the error in
    # one line (the CLI's exit 2) instead of letting hypothesis's FlakyFailure escape.
    calls: list[int] = []
    config = {"name": "policy-f", "role": "policy"}
    with LocalServer.start(config, token="flaky-tok-5c1e") as server:

        def restart_failing_once() -> None:
            calls.append(1)
            if len(calls) == 1:
                raise RuntimeError("the restart rig hiccuped")
            server.restart()

        with pytest.raises(ConformanceSetupError) as raised:
            check_conformance(
                server.url, "policy", "flaky-tok-5c1e", examples=10, seed=1,
                reset=server.reset, restart=restart_failing_once,
            )  # fmt: skip
    assert "RuntimeError (the restart rig hiccuped)" in str(raised.value)
    assert "no failure found" in str(raised.value)


def test_a_restart_command_failing_mid_run_ends_the_run_with_its_setup_error() -> None:
    # The rig is broken, not the sequence: no hypothesis replay, no "no failure found".
    config = {"name": "policy-c", "role": "policy"}
    with (
        LocalServer.start(config, token="cmd-tok-81d2") as server,
        pytest.raises(ConformanceSetupError) as raised,
    ):
        check_conformance(
            server.url, "policy", "cmd-tok-81d2", examples=10, seed=1,
            reset=server.reset, restart="exit 3",
        )  # fmt: skip
    assert "the restart command exited 3" in str(raised.value)
    assert "no failure found" not in str(raised.value)


def test_a_server_that_does_not_come_back_after_the_kits_restart_is_a_violation() -> None:
    config = {"name": "policy-d", "role": "policy"}
    with LocalServer.start(config, token="dead-tok-4a7e") as server:

        def restart_that_leaves_it_dead() -> None:
            server._in_server_loop(server.host.crash)  # stopped, never recovered: 503s

        result = check_conformance(
            server.url, "policy", "dead-tok-4a7e", examples=10, seed=1,
            reset=server.reset, restart=restart_that_leaves_it_dead, max_failures=1,
        )  # fmt: skip
    assert result.violation is not None and result.shrunk and not result.flaky
    assert result.violation.rule.startswith("§6: a restarted participant serves again")
    assert "the server did not come back after restart" in result.violation.differences[0]
    assert "capabilities answered 503" in result.violation.differences[0]
