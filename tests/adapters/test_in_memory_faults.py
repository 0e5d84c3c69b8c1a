"""The in-memory fleet's random faults: per-call faults and process restarts, apart."""

from __future__ import annotations

import pytest

from quiesce.adapters import CALL_FAULTS, FaultKind, Faults


def test_call_faults_are_every_kind_but_a_restart() -> None:
    assert set(CALL_FAULTS) == set(FaultKind) - {FaultKind.CRASH_RESTART}


@pytest.mark.parametrize("field", ["rate", "restart_rate"])
def test_a_rate_outside_zero_to_one_is_refused_naming_it(field: str) -> None:
    with pytest.raises(ValueError, match=field.replace("_", " ") + r".*\[0, 1\], got 1.5"):
        Faults(**{field: 1.5})  # type: ignore[arg-type]
