"""The explorer's fingerprint visited set: the same answers as whole states, in less room."""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner

from quiesce.check import NO_STALL, TwoPhase, always, check
from quiesce.check._fingerprints import FingerprintTable
from quiesce.cli import main
from quiesce.models import ProtocolModel, ProtocolParams
from quiesce.mutants import MUTANTS
from tests.check.test_explorer import Graph
from tests.models.implementation.test_protocol_model import ONE_ROLLOUT, TWO_SIBLINGS


def test_table_numbers_each_fingerprint_once_across_growth() -> None:
    table = FingerprintTable(log2_capacity=4)
    fingerprints = [hash(("state", n)) for n in range(5_000)]
    assert all(table.number(f, n) == -1 for n, f in enumerate(fingerprints))
    # Growing rehashed every entry: each fingerprint still finds the number it was given.
    assert [table.number(f, -7) for f in fingerprints] == list(range(5_000))
    assert len(table) == 5_000
    assert table.nbytes <= 4 * 12 * len(table)  # at most 4 slots of 12 bytes a state


def test_table_folds_wide_ints_and_keeps_zero_apart() -> None:
    table = FingerprintTable()
    assert table.number(2**64 + 5, 0) == -1
    assert table.number(5, 1) == 0  # 2**64 + 5 and 5 agree on 64 bits: one fingerprint
    # 0 marks an empty slot in the array: its number is kept aside, not confused with 1.
    assert table.number(0, 2) == -1 and table.number(1, 3) == -1
    assert (table.number(0, 9), table.number(1, 9), len(table)) == (2, 3, 3)


def _graph() -> Graph:
    # 0 -> 1 -> 2 -> 3 (bad) and a fault-free cycle 4 <-> 5 off 1.
    edges: dict[Any, list[tuple[str, bool, Any]]] = {
        0: [("a", False, 1)],
        1: [("b", False, 2), ("c", False, 4)],
        2: [("d", False, 3)],
        4: [("e", False, 5)],
        5: [("f", False, 4)],
    }
    return Graph(edges, goals={3}, props=[always("not3", lambda s: s != 3)])


def test_fingerprints_give_the_same_counts_and_traces_as_exact_states() -> None:
    answers = []
    for exact in (True, False):
        result = check(_graph(), stop_on_violation=False, exact=exact)
        assert result.exact is exact
        traces = {
            v.property: ([s.label for s in v.trace.steps], v.trace.loop_from)
            for v in result.violations
        }
        answers.append((result.distinct_states, result.generated_states, traces))
    assert answers[0] == answers[1]
    assert answers[0][2] == {"not3": (["a", "b", "d"], None), NO_STALL: (["a", "c", "e", "f"], 2)}


def test_the_protocol_model_fingerprints_by_default_and_two_phase_does_not() -> None:
    assert not check(ProtocolModel(ProtocolParams(**TWO_SIBLINGS))).exact
    assert check(TwoPhase(2)).exact


@pytest.mark.parametrize(
    ("params", "distinct"), [(ONE_ROLLOUT, 1655), (TWO_SIBLINGS, 26)], ids=["one", "two"]
)
def test_pinned_protocol_counts_are_the_same_either_way(
    params: dict[str, Any], distinct: int
) -> None:
    model = ProtocolModel(ProtocolParams(**params))
    exact, fingerprinted = check(model, exact=True), check(model, exact=False)
    assert exact.distinct_states == fingerprinted.distinct_states == distinct
    assert exact.generated_states == fingerprinted.generated_states
    assert exact.ok and fingerprinted.ok


def test_a_mutant_trace_is_rebuilt_from_fingerprints() -> None:
    # Fingerprints keep no expanded state: the counterexample is re-run from the initial
    # state along the recorded actions, and must be the very trace an exact search finds.
    mutant = MUTANTS["S2_boolean_suspend"]
    params = ProtocolParams(**mutant.params)
    found = []
    for exact in (True, False):
        result = check(ProtocolModel(params, hooks=mutant.hooks()), exact=exact)
        [violation] = result.violations
        found.append((violation.property, [s.label for s in violation.trace.steps]))
        assert violation.trace.steps[-1].state == violation.trace.states()[-1]
    assert found[0] == found[1]


def test_fingerprints_store_under_100_bytes_a_state() -> None:
    result = check(ProtocolModel(), max_states=3_000)
    assert not result.exact and result.truncated
    assert 0 < result.bytes_per_state <= 100
    assert check(ProtocolModel(), max_states=3_000, exact=True).distinct_states == 3_000


def test_check_cli_fingerprints_unless_exact() -> None:
    runs = {}
    for extra in ([], ["--exact"]):
        args = ["check", "protocol", "--max-states", "200", "--json", *extra]
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 0, result.output
        document = json.loads(result.stdout)
        runs[document["exact"]] = document["distinct_states"]
    assert runs == {False: 200, True: 200}
    refused = CliRunner().invoke(main, ["check", "protocol", "--walks", "2", "--exact"])
    assert refused.exit_code == 2 and "--exact" in refused.output
