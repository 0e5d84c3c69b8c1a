"""PROTOCOL.md §7 on the implementation model: scripted scenarios on the composed `System`
and the portfolio of small configurations each exhausted for one scenario.
"""

from __future__ import annotations

from quiesce.models.scenarios._portfolio import (
    PORTFOLIO,
    PORTFOLIO_BOUND,
    PortfolioEntry,
    PortfolioRun,
    run_portfolio,
    small_params,
)
from quiesce.models.scenarios._scenarios import SCENARIOS, Scenario, ScenarioFailed, scenario_system

__all__ = [
    "PORTFOLIO",
    "PORTFOLIO_BOUND",
    "SCENARIOS",
    "PortfolioEntry",
    "PortfolioRun",
    "Scenario",
    "ScenarioFailed",
    "run_portfolio",
    "scenario_system",
    "small_params",
]
