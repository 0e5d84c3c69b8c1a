"""`quiesce mutants`: the list claims nothing it did not measure; a run ends with a summary."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest
from click.testing import CliRunner

from quiesce.cli import _mutants, main
from quiesce.models import MUTANTS, Mutant, Verdict

SCENARIO = sum(m.kind == "scenario" for m in MUTANTS.values())
GENERATED = len(MUTANTS) - SCENARIO


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_the_list_runs_nothing_so_calls_nothing_killed() -> None:
    code, out, _ = run("mutants")
    assert code == 0
    assert "killed" not in out
    assert "checked by I4" in out  # the check meant to kill S1, not a verdict
    lines = out.splitlines()
    assert len(lines) < 60  # the generated ones are grouped, not 880 lines
    assert lines[-1] == (
        f"{SCENARIO} scenario and {GENERATED} generated mutants;"
        " none was run here: `quiesce mutants --verify` runs them"
    )
    grouped = [line for line in lines if line.startswith("gen ")]
    assert sum(int(line.split()[2]) for line in grouped) == GENERATED


def test_the_full_list_has_one_line_per_mutant() -> None:
    code, out, _ = run("mutants", "--all")
    assert code == 0 and len(out.splitlines()) == len(MUTANTS) + 1


def test_the_json_list_keeps_its_shape_and_adds_a_summary() -> None:
    document = json.loads(run("mutants", "--json")[1])
    assert set(document) == {"mutants", "summary"}
    assert len(document["mutants"]) == len(MUTANTS)
    assert set(document["mutants"][0]) == {"name", "kind", "scenario", "killed_by", "params", "doc"}
    assert document["summary"] == {
        "listed": len(MUTANTS),
        "by_kind": {"scenario": SCENARIO, "generated": GENERATED},
        "run": 0,
    }


def _fake_verify(mutant: Mutant) -> Verdict:
    """Scenario mutants die; generated ones whose name has an even length survive."""
    killed = mutant.kind == "scenario" or len(mutant.name) % 2 == 1
    return Verdict(mutant, killed, "I1" if killed else None, 10, 0.01, "fake")


def test_verify_prints_only_what_ran_and_ends_with_a_summary(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_mutants, "verify", _fake_verify)
    code, out, err = run("mutants", "--verify", "--sample", "6", "--seed", "3")
    assert code == 0
    verdict_lines = out.splitlines()[:-1]
    assert len(verdict_lines) == SCENARIO + 6
    generated = [line for line in verdict_lines if "." in line.split()[1]]
    killed = sum(line.startswith("killed") for line in generated)
    survived = 6 - killed
    assert out.splitlines()[-1] == (
        f"{SCENARIO + killed} killed, {survived} survived of {SCENARIO + 6} run"
        f" (scenario {SCENARIO}/{SCENARIO} killed (100%), generated {killed}/6 killed"
        f" ({killed / 6:.0%})); {len(MUTANTS) - SCENARIO - 6} not run"
    )
    assert ("SURVIVED (10 states" in err) == (survived > 0)
    assert "by None" not in err


def test_verify_json_adds_a_summary_object(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_mutants, "verify", _fake_verify)
    document = json.loads(run("mutants", "--verify", "--sample", "4", "--json")[1])
    assert set(document) == {"mutants", "kill_rate_generated", "scenario_survivors", "summary"}
    summary = document["summary"]
    assert summary["run"] == SCENARIO + 4 == len(document["mutants"])
    assert summary["killed"] + summary["survived"] == summary["run"]
    assert summary["not_run"] == len(MUTANTS) - summary["run"]
    assert summary["by_kind"]["scenario"] == {"run": SCENARIO, "killed": SCENARIO, "survived": 0}
    assert summary["by_kind"]["generated"]["run"] == 4


def test_a_surviving_scenario_mutant_exits_1(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        _mutants, "verify", lambda m: Verdict(m, m.name != "S2_boolean_suspend", None, 1, 0.0)
    )
    code, out, _ = run("mutants", "--verify", "--sample", "0")
    assert code == 1
    assert "SURVIVED S2_boolean_suspend" in out
    assert f"{SCENARIO - 1} killed, 1 survived of {SCENARIO} run" in out


def test_ctrl_c_mid_verify_prints_what_ran_and_exits_130(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    def verify(mutant: Mutant) -> Verdict:
        calls.append(mutant)
        if len(calls) == 3:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(10)  # the handler raises here
        return _fake_verify(mutant)

    monkeypatch.setattr(_mutants, "verify", verify)
    code, out, err = run("mutants", "--verify", "--sample", "5")
    assert code == 130
    assert f"stopped by SIGINT after 2 of {SCENARIO + 5}" in err
    assert len(out.splitlines()) == 3  # two verdicts and the summary
    assert out.splitlines()[-1].startswith("2 killed, 0 survived of 2 run")
