"""The scenario portfolio: one small exhaustive configuration per §7 scenario, each under
the bound, pinned, holding every property; each scenario mutant the explorer can express
dies on its scenario's configuration."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import pytest
from click.testing import CliRunner

from quiesce.check import CheckResult
from quiesce.cli import main
from quiesce.models import PORTFOLIO
from quiesce.models.scenarios import PORTFOLIO_BOUND
from quiesce.models.scenarios._portfolio import distinct_configurations
from quiesce.mutants import MUTANTS
from tests import pins

# The configurations' state counts are pinned in tests/pins.py (`PORTFOLIO_STATES`); the
# whole portfolio takes about 31 CPU seconds (`/usr/bin/time` user time, under load).


def test_one_entry_per_scenario_in_order() -> None:
    assert [e.scenario for e in PORTFOLIO] == [f"S{n}" for n in range(1, 20)]
    assert all(e.exhibits for e in PORTFOLIO)
    assert all(e.note for e in PORTFOLIO if e.params is None or not e.mutants)


def test_every_explorer_scenario_mutant_belongs_to_its_scenarios_entry() -> None:
    listed = {name: e.scenario for e in PORTFOLIO for name in e.mutants}
    explorer = {m.name: m.scenario for m in MUTANTS.values() if m.kind == "scenario"}
    explorer = {n: s for n, s in explorer.items() if MUTANTS[n].scripted is None}
    assert listed == explorer


def test_the_portfolio_is_exhausted_within_the_bound_at_its_pinned_counts() -> None:
    ran = CliRunner().invoke(main, ["check", "--portfolio", "--json"])
    assert ran.exit_code == 0, ran.output
    document = json.loads(ran.stdout)
    assert document["ok"] is True
    configurations = document["configurations"]
    assert [c["params"] for c in configurations] == [dict(p) for p in distinct_configurations()]
    counts = tuple(c["distinct_states"] for c in configurations)
    assert all(c["complete"] and not c["violations"] for c in configurations)
    assert all(count <= PORTFOLIO_BOUND for count in counts)
    assert counts == pins.PORTFOLIO_STATES
    scenarios = {s for c in configurations for s in c["scenarios"]}
    assert scenarios == {e.scenario for e in PORTFOLIO if e.params is not None}


@pytest.mark.parametrize(
    ("scenario", "name"),
    [(e.scenario, name) for e in PORTFOLIO for name in e.mutants],
    ids=lambda value: str(value),
)
def test_each_scenario_mutant_dies_on_its_portfolio_entry(
    scenario: str, name: str, mutant_check: Callable[[str, Mapping[str, Any]], CheckResult[Any]]
) -> None:
    entry = next(e for e in PORTFOLIO if e.scenario == scenario)
    assert entry.params is not None
    result = mutant_check(name, entry.params)
    assert result.violations, f"{name} survives the {scenario} configuration"
