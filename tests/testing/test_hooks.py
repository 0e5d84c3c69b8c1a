"""The kit's reset and restart hooks, as given on the command line or in Python."""

from __future__ import annotations

from pathlib import Path

import pytest

from quiesce.testing import ConformanceSetupError
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
