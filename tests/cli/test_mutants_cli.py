"""`quiesce mutants`: the list claims nothing it did not measure; a run ends with a summary."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable, Iterator, Sequence

import pytest
from click.testing import CliRunner

from quiesce.cli import _mutants, main
from quiesce.mutants import MUTANTS, Mutant, Verdict

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
    return Verdict(mutant, "killed" if killed else "survived", "I1" if killed else None, 10, 0.01)


def _fake_many(verify: Callable[[Mutant], Verdict]) -> Callable[..., Iterator[Verdict]]:
    def verify_many(mutants: Sequence[Mutant], jobs: int = 1) -> Iterator[Verdict]:
        return (verify(mutant) for mutant in mutants)

    return verify_many


def test_verify_prints_only_what_ran_and_ends_with_a_summary(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_mutants, "verify_many", _fake_many(_fake_verify))
    code, out, err = run("mutants", "--verify", "--sample", "6", "--seed", "3")
    assert code == 0
    verdict_lines = out.splitlines()[:-1]
    assert len(verdict_lines) == SCENARIO + 6
    generated = [line for line in verdict_lines if "." in line.split()[1]]
    killed = sum(line.startswith("killed") for line in generated)
    survived = 6 - killed
    tally = ", ".join(
        f"{count} {status}"
        for count, status in ((killed, "killed"), (survived, "survived"))
        if count
    )
    assert out.splitlines()[-1] == (
        f"{SCENARIO + 6} run (scenario: {SCENARIO} killed; generated: {tally});"
        f" generated kill rate {killed / 6:.0%} of the non-equivalent,"
        f" {killed / 6:.0%} of the reached; {len(MUTANTS) - SCENARIO - 6} not run"
    )
    assert (": survived (10 states" in err) == (survived > 0)
    assert "by None" not in err


def test_verify_json_adds_a_summary_object(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_mutants, "verify_many", _fake_many(_fake_verify))
    document = json.loads(run("mutants", "--verify", "--sample", "4", "--json")[1])
    assert set(document) == {
        "mutants",
        "kill_rate_generated",
        "scenario_survivors",
        "generated_survivors",
        "summary",
    }
    summary = document["summary"]
    assert summary["run"] == SCENARIO + 4 == len(document["mutants"])
    assert summary["killed"] + summary["survived"] == summary["run"]
    assert summary["not_run"] == len(MUTANTS) - summary["run"]
    assert summary["by_kind"]["scenario"] == {
        "run": SCENARIO,
        "killed": SCENARIO,
        "survived": 0,
        "equivalent": 0,
        "dead_by_design": 0,
    }
    assert summary["by_kind"]["generated"]["run"] == 4
    survivors = {s["name"] for s in document["generated_survivors"]}
    assert survivors == {m["name"] for m in document["mutants"] if m["status"] == "survived"}


def test_equivalent_and_dead_mutants_are_not_survivors_nor_in_the_kill_rate(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    statuses = ["equivalent", "dead_by_design", "killed", "survived"]

    def judged(mutant: Mutant) -> Verdict:
        if mutant.kind == "scenario":
            return Verdict(mutant, "killed", "I1", 1, 0.0)
        return Verdict(mutant, statuses[len(mutant.name) % 4], None, 1, 0.0, "why")

    monkeypatch.setattr(_mutants, "verify_many", _fake_many(judged))
    document = json.loads(run("mutants", "--verify", "--sample", "40", "--json")[1])
    counts = document["summary"]["by_kind"]["generated"]
    assert sum(counts[s] for s in statuses) == counts["run"] == 40
    non_equivalent = 40 - counts["equivalent"]
    assert document["kill_rate_generated"] == round(counts["killed"] / non_equivalent, 4)
    assert document["summary"]["kill_rate_reached"] == round(
        counts["killed"] / (counts["killed"] + counts["survived"]), 4
    )
    assert len(document["generated_survivors"]) == counts["survived"]


def test_a_surviving_scenario_mutant_exits_1(monkeypatch: pytest.MonkeyPatch) -> None:
    def verify(m: Mutant) -> Verdict:
        return Verdict(m, "survived" if m.name == "S2_boolean_suspend" else "killed", None, 1, 0.0)

    monkeypatch.setattr(_mutants, "verify_many", _fake_many(verify))
    code, out, _ = run("mutants", "--verify", "--sample", "0")
    assert code == 1
    assert "SURVIVED       S2_boolean_suspend" in out
    assert f"{SCENARIO} run (scenario: {SCENARIO - 1} killed, 1 survived)" in out


def test_a_multi_line_detail_keeps_its_verdict_on_one_row(monkeypatch: pytest.MonkeyPatch) -> None:
    def verify(m: Mutant) -> Verdict:
        detail = "Traceback (most recent call last):\n  File x\nValueError: boom"
        return Verdict(m, "killed", "I1", 1, 0.0, detail=detail)

    monkeypatch.setattr(_mutants, "verify_many", _fake_many(verify))
    code, out, _ = run("mutants", "--verify", "--sample", "0")
    assert code == 0
    rows = out.splitlines()
    assert len(rows) == SCENARIO + 1
    assert all(row.startswith("killed ") for row in rows[:-1])
    assert rows[0].endswith("Traceback (most recent call last): File x ValueError: boom")


def test_ctrl_c_mid_verify_prints_what_ran_and_exits_130(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    def verify(mutant: Mutant) -> Verdict:
        calls.append(mutant)
        if len(calls) == 3:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(10)  # the handler raises here
        return _fake_verify(mutant)

    monkeypatch.setattr(_mutants, "verify_many", _fake_many(verify))
    code, out, err = run("mutants", "--verify", "--sample", "5")
    assert code == 130
    assert f"stopped by SIGINT after 2 of {SCENARIO + 5}" in err
    assert len(out.splitlines()) == 3  # two verdicts and the summary
    assert out.splitlines()[-1].startswith("2 run (scenario: 2 killed)")
