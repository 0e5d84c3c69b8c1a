"""Random walks: on hand-made graphs whose answers are known, and on the protocol at the
reference size of PROTOCOL.md §8, where they reach what no exhaustive check can."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from click.testing import CliRunner

from quiesce.check import NO_STALL, Progress, always, walk
from quiesce.cli import main
from quiesce.models import ProtocolModel
from quiesce.mutants import MUTANTS, STEP_TIMEOUT_S, Mutant, verify, watching_hangs
from tests.check.test_explorer import Counter, Edge, Graph


def test_a_broken_invariant_is_found_on_a_trace_that_replays() -> None:
    result = walk(Counter(top=20, bad=7), walks=50, seed=3)
    violation = result.violation("not_bad")
    assert violation is not None and violation.kind == "always"
    states = violation.trace.states()
    assert states[0] == 0 and states[-1] == 7
    assert all(b - a in (1, 2) for a, b in itertools.pairwise(states))
    assert not result.complete and result.truncated


def test_a_clean_model_passes_and_the_counts_add_up() -> None:
    result = walk(Counter(top=10), walks=20, seed=1)
    assert result.ok and not result.complete
    assert result.distinct_states <= 11 and result.depth <= 10
    assert result.generated_states >= result.depth


def test_the_same_seed_takes_the_same_walks() -> None:
    runs = [walk(Counter(top=30, bad=29), walks=5, seed=11) for _ in range(2)]
    assert [r.generated_states for r in runs] == [runs[0].generated_states] * 2
    first, second = (r.violation("not_bad") for r in runs)
    assert (first is None) == (second is None)
    if first is not None and second is not None:
        assert first.trace.states() == second.trace.states()


def test_a_deadlock_outside_the_goals_is_a_stall() -> None:
    graph = Graph({0: [("a", False, 1)], 1: [("c", False, 2)], 2: []}, goals={9})
    violation = walk(graph, walks=1).violation(NO_STALL)
    assert violation is not None and violation.kind == "deadlock"
    assert [s.label for s in violation.trace.steps] == ["a", "c"]


def test_resting_in_a_goal_is_not_a_stall() -> None:
    assert walk(Graph({0: [("a", False, 1)], 1: []}, goals={1}), walks=3).ok


def test_a_cycle_avoiding_the_goals_is_a_lasso() -> None:
    graph = Graph({0: [("go", False, 1)], 1: [("ping", False, 2)], 2: [("pong", False, 1)]})
    violation = walk(graph, walks=1).violation(NO_STALL)
    assert violation is not None and violation.kind == "cycle"
    assert violation.trace.states() == [0, 1, 2, 1] and violation.trace.loop_from == 1


@pytest.mark.parametrize(
    "edges, goals",
    [
        # through a goal state
        ({0: [("a", False, 1)], 1: [("b", False, 0)]}, {1}),
        # through a fault: I7 speaks of what happens with no further faults
        ({0: [("work", False, 1)], 1: [("crash", True, 0), ("finish", False, 2)]}, {2}),
    ],
    ids=["through-a-goal", "through-a-fault"],
)
def test_cycles_with_an_excuse_are_not_stalls(
    edges: dict[Any, list[Edge]], goals: set[Any]
) -> None:
    result = walk(Graph(edges, goals=goals), walks=3, max_depth=20, fault_rate=1.0)
    assert result.violation(NO_STALL) is None


def test_a_state_whose_only_move_is_a_fault_is_deadlocked() -> None:
    graph = Graph({0: [("work", False, 1)], 1: [("crash", True, 2)], 2: []}, goals={2})
    violation = walk(graph, walks=1).violation(NO_STALL)
    assert violation is not None and violation.kind == "deadlock"
    assert violation.trace.states() == [0, 1]


def test_stuttering_self_loops_are_no_moves() -> None:
    edges: dict[Any, list[Edge]] = {0: [("go", False, 1)], 1: [("idle", False, 1)]}
    strict = walk(Graph(edges, goals={2}), walks=1).violation(NO_STALL)
    assert strict is not None and strict.kind == "cycle"
    stuttering = walk(Graph(edges, goals={2}, stutter_stalls=False), walks=1)
    found = stuttering.violation(NO_STALL)
    assert found is not None and found.kind == "deadlock"


@pytest.mark.parametrize(
    "walks, depth, rate", [(0, 10, 0.1), (1, 0, 0.1), (1, 10, 1.5)], ids=["walks", "depth", "rate"]
)
def test_bad_arguments_are_refused_naming_the_value(walks: int, depth: int, rate: float) -> None:
    with pytest.raises(ValueError, match="must"):
        walk(Counter(top=3), walks=walks, max_depth=depth, fault_rate=rate)


def test_every_property_is_checked_in_every_visited_state() -> None:
    seen: set[int] = set()

    def record(state: int) -> bool:
        seen.add(state)
        return True

    class Watched(Counter):
        def properties(self) -> Any:
            return (always("watch", record),)

    result = walk(Watched(top=12), walks=10, seed=2)
    assert result.ok and len(seen) == result.distinct_states


# ----------------------------------------------------------- the protocol, reference size


def test_the_protocol_at_the_reference_size_survives_random_walks() -> None:
    result = walk(ProtocolModel(), walks=300, seed=0)
    assert result.ok, [v.property for v in result.violations]
    # Deep: the walks reach well past where an exhaustive search stops in minutes.
    assert result.depth >= 30 and result.distinct_states > 5_000


@pytest.mark.parametrize(
    "name", ["S5_abort_with_new_id", "S17_retire_releases_completed", "S19_journal_not_durable"]
)
def test_random_walks_at_the_reference_size_kill_scenario_mutants(name: str) -> None:
    mutant = MUTANTS[name]
    model = ProtocolModel(hooks=mutant.hooks(), name=name)
    model.step_timeout = STEP_TIMEOUT_S
    with watching_hangs():
        result = walk(model, walks=1_000, seed=0)
    assert result.violations, f"{name} survived 1,000 random walks"


def test_a_generated_mutant_the_small_exhaustive_stages_miss_dies_on_a_walk() -> None:
    # No exhaustive stage kills it (its row: a restart of a participant the attempt never
    # called holds M1 where it is; the one-fault stages have no crash, and the design stage
    # sees a restart only in the reply of the call it makes, in that participant's turn).
    # On a walk at the reference size a crash lands before the attempt calls the crashed
    # participant, and the mutant moves M1 to idle with the checkpoint's holds still on.
    # (Until background calls became calls,
    # `control_fence:preparing:recv_prepare:same_id.retarget=prepared` was the example; the
    # walks no longer reach its crash: it survives, with its note.)
    name = "checkpoint:preparing+committing+capturing+validating:restarted.retarget=idle"
    mutant: Mutant = MUTANTS[name]
    verdict = verify(mutant)
    assert verdict.killed, verdict.detail
    assert verdict.stage == "walks", verdict.detail
    assert verdict.killed_by == "I4", verdict.detail


def test_check_walks_cli_prints_the_walk_document() -> None:
    ran = CliRunner().invoke(main, ["check", "protocol", "--walks", "40", "--seed", "2", "--json"])
    assert ran.exit_code == 0, ran.output
    document = json.loads(ran.stdout)
    assert document["mode"] == "walks" and document["complete"] is False
    assert document["walks"] == {"walks": 40, "seed": 2, "max_depth": 500}
    assert document["distinct_states"] > 0 and document["violations"] == []


def test_check_walks_cli_refuses_exhaustive_only_options() -> None:
    ran = CliRunner().invoke(main, ["check", "protocol", "--walks", "5", "--symmetry"])
    assert ran.exit_code == 2 and "--walks" in ran.output


def test_check_walks_cli_exits_1_on_a_mutant() -> None:
    ran = CliRunner().invoke(
        main,
        [
            "check",
            "protocol",
            "--walks",
            "200",
            "--mutant",
            "S17_retire_releases_completed",
            "--json",
        ],
    )
    assert ran.exit_code == 1, ran.output
    assert json.loads(ran.stdout)["violations"][0]["property"] == "I1"


def test_progress_is_reported_every_n_walks() -> None:
    reports: list[Progress] = []
    walk(Counter(top=10), walks=10, seed=0, progress=reports.append, progress_every=3)
    assert [r.frontier for r in reports] == [7, 4, 1]
    assert all(r.distinct_states >= 1 and r.generated_states >= 1 for r in reports)
