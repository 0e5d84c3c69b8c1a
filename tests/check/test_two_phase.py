"""TwoPhase commit as quiesce tables: the published counts, the properties, a broken variant."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest
from click.testing import CliRunner

from quiesce.check import (
    NO_STALL,
    TWO_PHASE_RM,
    TWO_PHASE_TM,
    BadModelParam,
    RmInput,
    Step,
    Trace,
    TwoPhase,
    UnknownModel,
    UnsupportedOption,
    build_model,
    check,
    mermaid_sequence,
)
from quiesce.cli import main
from quiesce.protocol.machines import TABLES as REGISTERED

ROOT = Path(__file__).resolve().parents[2]

# (distinct, generated) states. TLC on TwoPhase.tla with RM = {r1, r2, r3} reports 288
# distinct states, as stateright's 2pc example pins; the others match the hand-written BFS.
PINNED = {1: (12, 20), 2: (56, 154), 3: (288, 1146), 4: (1568, 8258), 5: (8832, 58146)}
# Distinct states up to permutations of the RMs.
PINNED_SYMMETRIC = {1: 12, 2: 34, 3: 80, 4: 166, 5: 314}


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "bench_explorer", ROOT / "benchmarks" / "bench_explorer.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("bench_explorer", module)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("rms", sorted(PINNED))
def test_counts_are_those_of_the_published_spec(rms: int) -> None:
    result = check(TwoPhase(rms))
    assert (result.distinct_states, result.generated_states) == PINNED[rms]
    assert _bench().baseline_bfs(rms) == PINNED[rms]
    assert result.ok and result.complete
    assert result.properties == ("TypeOK", "TCConsistent", NO_STALL)


@pytest.mark.parametrize("rms", sorted(PINNED_SYMMETRIC))
def test_symmetry_reduces_and_keeps_the_verdict(rms: int) -> None:
    result = check(TwoPhase(rms), symmetry=True)
    assert result.distinct_states == PINNED_SYMMETRIC[rms]
    assert result.ok


def test_tables_are_well_formed_and_not_registered() -> None:
    assert TWO_PHASE_RM.problems == () and TWO_PHASE_TM.problems == ()
    # The CLI's table listing is for the protocol; the yardstick stays out of it.
    assert "rm" not in dict(REGISTERED) and "tm" not in dict(REGISTERED)


def test_terminal_states_are_all_committed_or_all_aborted() -> None:
    model = TwoPhase(3)
    result = check(model)
    assert result.ok
    goals = [s for s in _reachable(model) if model.is_goal(s)]
    assert goals
    for rm, _tm, _prepared, _msgs in goals:
        assert set(rm) in ({"committed"}, {"aborted"})


def _reachable(model: TwoPhase) -> set[tuple[object, ...]]:
    seen = set(model.init_states())
    frontier = list(seen)
    while frontier:
        for _, following in model.successors(frontier.pop()):
            if following not in seen:
                seen.add(following)
                frontier.append(following)
    return seen


def _broken() -> TwoPhase:
    row = next(i for i, r in enumerate(TWO_PHASE_RM.rows) if r.input is RmInput.RECV_COMMIT)
    return TwoPhase(3, rm_table=TWO_PHASE_RM.without_guard(row))


def test_commit_without_a_commit_message_is_caught_with_a_shortest_trace() -> None:
    model = _broken()
    assert model.rm_table.variant is not None and "drop_guard" in model.rm_table.variant
    violation = check(model).violation("TCConsistent")
    assert violation is not None and violation.kind == "always"
    assert [s.label for s in violation.trace.steps] == [
        "RMChooseToAbort(rm1)",
        "RMRcvCommitMsg(rm2)",
    ]
    # The registered mutant is the same variant.
    via_registry = build_model("two-phase", {"rms": "3"}, mutant="commit_without_message")
    again = check(via_registry).violation("TCConsistent")
    assert again is not None and again.trace == violation.trace


def test_trace_projects_onto_each_table_in_the_engine_format() -> None:
    model = _broken()
    violation = check(model).violation("TCConsistent")
    assert violation is not None
    assert model.tables() == ("tm", "rm1", "rm2", "rm3")
    assert model.project(violation.trace, "rm1") == [
        {"state": "working", "input": "choose_to_abort", "target": "aborted"}
    ]
    assert model.project(violation.trace, "rm2") == [
        {"state": "working", "input": "recv_commit", "target": "committed"}
    ]
    assert model.project(violation.trace, "tm") == []
    diagram = mermaid_sequence(model, violation.trace)
    assert "Note over rm1: 1. RMChooseToAbort(rm1)" in diagram
    assert "TM->>rm2: 2. Commit" in diagram


def test_projection_of_a_commit_run_follows_the_tm_table() -> None:
    model = TwoPhase(1)
    state = next(iter(model.init_states()))
    labels = ["RMPrepare(rm1)", "TMRcvPrepared(rm1)", "TMCommit", "RMRcvCommitMsg(rm1)"]
    steps = []
    for wanted in labels:
        action, state = next((a, t) for a, t in model.successors(state) if a.label == wanted)
        steps.append((action, state))
    trace = Trace(next(iter(model.init_states())), tuple(Step(a, s) for a, s in steps))
    assert model.project(trace, "tm") == [
        {"state": "init", "input": "recv_prepared", "target": "init"},
        {"state": "init", "input": "commit", "target": "committed"},
    ]
    assert model.is_goal(state)


def test_registry_validates_parameters_and_options() -> None:
    assert build_model("two-phase").params == {"rms": 3}
    with pytest.raises(BadModelParam) as caught:
        build_model("two-phase", {"nodes": "3"})
    assert caught.value.key == "nodes" and caught.value.known == ["rms"]
    with pytest.raises(BadModelParam, match="must be >= 1"):
        build_model("two-phase", {"rms": "0"})
    with pytest.raises(UnknownModel) as unknown:
        build_model("three-phase")
    assert "two-phase" in unknown.value.known
    with pytest.raises(UnsupportedOption, match="faults"):
        build_model("two-phase", faults=1)
    with pytest.raises(UnsupportedOption, match="commit_without_message"):
        build_model("two-phase", mutant="nope")


def test_cli_check_two_phase_json() -> None:
    result = CliRunner().invoke(main, ["check", "two-phase", "--set", "rms=3", "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert {
        "model",
        "params",
        "distinct_states",
        "generated_states",
        "depth",
        "seconds",
        "states_per_s",
        "violations",
    } <= set(document)
    assert document["model"] == "two-phase" and document["params"] == {"rms": 3}
    assert document["distinct_states"] == 288 and document["violations"] == []


def test_cli_bad_set_key_exits_2_naming_it() -> None:
    result = CliRunner().invoke(main, ["check", "two-phase", "--set", "nodes=3"])
    assert result.exit_code == 2
    assert "nodes" in result.stderr and "rms" in result.stderr


def test_cli_unknown_model_lists_the_known_ones() -> None:
    result = CliRunner().invoke(main, ["check", "no-such-model"])
    assert result.exit_code == 2 and "two-phase" in result.stderr


def test_cli_mutant_exits_1_and_writes_traces(tmp_path: Path) -> None:
    out = tmp_path / "traces"
    result = CliRunner().invoke(
        main,
        ["check", "two-phase", "--mutant", "commit_without_message", "--trace-out", str(out)],
    )
    assert result.exit_code == 1
    assert "1. RMChooseToAbort(rm1)" in result.stdout
    files = sorted(p.name for p in out.iterdir())
    # Only the tables the counterexample moves get a trace; the others are named.
    assert files == [
        "TCConsistent.rm1.json",
        "TCConsistent.rm2.json",
        "TCConsistent.sequence.mmd",
    ]
    assert "no trace file for tm, rm3" in result.stderr
    assert json.loads((out / "TCConsistent.rm2.json").read_text()) == [
        {
            "state": "working",
            "input": "recv_commit",
            "target": "committed",
            "violates": "TCConsistent",
        }
    ]


def test_benchmark_smoke() -> None:
    figures = _bench().main(["--rms", "2", "--repeat", "1", "--json"])
    assert figures["distinct_states"] == PINNED[2][0]
    assert figures["symmetry_distinct_states"] == PINNED_SYMMETRIC[2]
    assert figures["explorer_over_baseline"] > 0
