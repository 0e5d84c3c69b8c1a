"""Every scenario mutant is killed by its check; a sample of generated ones, with the kill
rate reported; and the unmutated protocol passes every check (no false positives)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from quiesce.check import check
from quiesce.cli import main
from quiesce.models import ProtocolModel, ProtocolParams, scenario_system
from quiesce.mutants import MUTANTS, sample_generated, verify, verify_many
from quiesce.mutants._notes import SURVIVOR_NOTES

SCENARIO = [m for m in MUTANTS.values() if m.kind == "scenario"]


def test_one_scenario_mutant_per_scenario() -> None:
    assert {m.scenario for m in SCENARIO} == {f"S{n}" for n in range(1, 20)}
    assert all(m.killed_by and m.doc for m in SCENARIO)


@pytest.mark.parametrize("mutant", SCENARIO, ids=[m.name for m in SCENARIO])
def test_scenario_mutant_is_killed(mutant: object) -> None:
    verdict = verify(mutant)  # type: ignore[arg-type]
    assert verdict.killed, verdict.detail


@pytest.mark.parametrize(
    "params",
    sorted({tuple(sorted(m.params.items())) for m in SCENARIO if m.scripted is None}),
    ids=lambda p: ",".join(f"{k}={v}" for k, v in p if k in ("siblings", "faults", "triggers")),
)
def test_the_unmutated_protocol_survives_each_killing_configuration(params: tuple) -> None:
    result = check(ProtocolModel(ProtocolParams(**dict(params))), max_states=3000)
    assert result.violations == ()


@pytest.mark.parametrize(
    "mutant", [m for m in SCENARIO if m.scripted is not None], ids=lambda m: m.name
)
def test_the_unmutated_protocol_passes_each_scripted_scenario(mutant: object) -> None:
    mutant.scripted(scenario_system())  # type: ignore[attr-defined]


def test_generated_sample_kill_rate(capsys: pytest.CaptureFixture[str]) -> None:
    sample = sample_generated(6, seed=0)
    assert sample == sample_generated(6, seed=0)  # seeded
    verdicts = [verify(m) for m in sample]
    rate = sum(v.killed for v in verdicts) / len(verdicts)
    print(f"generated kill rate (sample of {len(verdicts)}): {rate:.0%}")
    assert all(v.mutant.kind == "generated" for v in verdicts)
    assert rate > 0


def test_mutants_cli_lists_and_verifies() -> None:
    listed = CliRunner().invoke(main, ["mutants", "--json"])
    assert listed.exit_code == 0
    names = {m["name"] for m in json.loads(listed.stdout)["mutants"]}
    assert "S15_stale_prepare_accepted" in names and len(names) == len(MUTANTS)
    ran = CliRunner().invoke(
        main, ["mutants", "--verify", "--sample", "2", "--seed", "1", "--json"]
    )
    assert ran.exit_code == 0, ran.output
    document = json.loads(ran.stdout)
    kinds = [m["kind"] for m in document["mutants"]]
    assert kinds.count("scenario") == len(SCENARIO) and kinds.count("generated") == 2
    assert all(m["killed"] for m in document["mutants"] if m["kind"] == "scenario")
    assert 0.0 <= document["kill_rate_generated"] <= 1.0


def test_every_survivor_note_names_a_generated_mutant() -> None:
    # A note keyed by a stale name (its row changed) would leave its survivor unreviewed.
    stale = [name for name in SURVIVOR_NOTES if name not in MUTANTS]
    assert stale == []
    assert all(MUTANTS[name].kind == "generated" for name in SURVIVOR_NOTES)


KILL_RATE_FLOOR = 0.75
"""The generated kill rate over the non-equivalent must not fall below this (measured by
`quiesce mutants --verify --all`: 587 of 775, 75.7%, with the participant stage, which
judges by the conformance kit; 514, 66%, without it, with the failure-budget, two-agent and
two-fault design stages; 441, 57%, without those; earlier, 406 of 736 with the design and
two-trigger stages, 393 without the two-trigger stage, 320 without either; issue 12 asks
for 50%, issue 28 for 70%)."""


@pytest.mark.slow
def test_every_generated_survivor_is_reviewed_and_the_kill_rate_holds() -> None:
    generated = [m for m in MUTANTS.values() if m.kind == "generated"]
    verdicts = list(verify_many(generated, jobs=2))
    survivors = {v.mutant.name for v in verdicts if v.status == "survived"}
    assert survivors == set(SURVIVOR_NOTES), "a survivor without a note, or a note without one"
    non_equivalent = [v for v in verdicts if v.status != "equivalent"]
    killed = sum(v.killed for v in non_equivalent)
    assert killed / len(non_equivalent) >= KILL_RATE_FLOOR
