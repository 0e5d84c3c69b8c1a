"""`quiesce check`: what it says before a long run."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from quiesce.cli import _check, main
from quiesce.models import check as explore


def test_check_warns_that_the_reference_size_will_not_finish(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(
        _check, "explore", lambda model, **kw: explore(model, **{**kw, "max_states": 5})
    )
    ran = CliRunner().invoke(main, ["check"])
    assert "will not finish in minutes" in ran.stderr and "--walks N" in ran.stderr
    bounded = CliRunner().invoke(main, ["check", "--max-states", "5"])
    assert "will not finish" not in bounded.stderr
