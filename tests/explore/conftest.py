"""Shared fixtures: the two-phase counterexample every explorer test opens."""

from __future__ import annotations

from typing import Any

import pytest

from quiesce.check import Violation, build_model, check

MUTANT = "commit_without_message"


@pytest.fixture(scope="session")
def two_phase_violation() -> Violation[Any]:
    """The shortest TCConsistent violation of two-phase (3 RMs) with `MUTANT`:
    RMChooseToAbort(rm1), then RMRcvCommitMsg(rm2) with no Commit sent."""
    model = build_model("two-phase", mutant=MUTANT)
    found = check(model).violation("TCConsistent")
    assert found is not None
    return found
