"""PROTOCOL.md §7: every failure scenario S1-S19 holds on the protocol.

The scripts live in `quiesce.models` (`SCENARIOS`), so the mutant catalog runs the very
same ones as the killing checks of its mutants; here each runs on the unmutated composed
system, and a script is shown able to fail.
"""

from __future__ import annotations

import pytest

from quiesce.models import SCENARIOS, ScenarioFailed, scenario_system
from quiesce.mutants import MUTANTS


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_the_scenario_holds_on_the_protocol(name: str) -> None:
    SCENARIOS[name](scenario_system())


def test_every_failure_scenario_has_a_script() -> None:
    scripted = {name.partition("_")[0] for name in SCENARIOS}
    assert scripted == {f"s{n}" for n in range(1, 20)}


@pytest.mark.parametrize(
    ("name", "mutant", "symptom"),
    [
        (
            "s15_a_delayed_prepare_after_its_resume_is_stale",
            "S15_stale_prepare_accepted",
            "stale_checkpoint",
        ),
        (
            "s19_a_participant_restart_mid_checkpoint_keeps_its_fence_and_aborts",
            "S19_journal_not_durable",
            "the policy's id after its restart",
        ),
    ],
    ids=["S15", "S19"],
)
def test_a_scenario_fails_on_its_mutant_and_says_what_it_saw(
    name: str, mutant: str, symptom: str
) -> None:
    # A participant mutant reaches the scenario's system through its hooks, not a patch.
    system = scenario_system(MUTANTS[mutant].hooks())
    with pytest.raises(ScenarioFailed, match=symptom):
        SCENARIOS[name](system)
