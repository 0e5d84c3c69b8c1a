"""Checks that several model test modules need, run once per session.

`mutant_check(name, params)`: scenario mutant `name` checked by the explorer at `params`.
The S4 mutant's check, for one, must exhaust its configuration (its symptom is a stall,
found only once the graph is complete): both the portfolio's kill test and the protocol
model's projection test read that one result.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pytest

from quiesce.check import CheckResult, check
from quiesce.models import ProtocolModel, ProtocolParams
from quiesce.models.scenarios import PORTFOLIO_BOUND
from quiesce.mutants import MUTANTS, STEP_TIMEOUT_S, watching_hangs

MutantCheck = Callable[[str, Mapping[str, Any]], CheckResult[Any]]


@pytest.fixture(scope="session")
def mutant_check() -> MutantCheck:
    """Check scenario mutant `name` at `params` up to its first violation (at most
    `PORTFOLIO_BOUND` states, a step that hangs is an exception); each pair runs once."""
    done: dict[tuple[str, tuple[tuple[str, Any], ...]], CheckResult[Any]] = {}

    def run(name: str, params: Mapping[str, Any]) -> CheckResult[Any]:
        key = (name, tuple(sorted(params.items())))
        if key not in done:
            model = ProtocolModel(ProtocolParams(**params), hooks=MUTANTS[name].hooks(), name=name)
            model.step_timeout = STEP_TIMEOUT_S
            with watching_hangs():
                done[key] = check(model, max_states=PORTFOLIO_BOUND)
        return done[key]

    return run
