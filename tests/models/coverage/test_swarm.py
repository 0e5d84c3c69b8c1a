"""The bitstate swarm: its bit array, its walkers, how their results merge, and Ray.

The Ray tests start a local Ray once for their module part (`local_ray`) and are slow
(Ray alone takes 30-60 s to start on this loaded machine)."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator, Sequence

import pytest
from click.testing import CliRunner

from quiesce.check import Bitstate, Merged, build_model, walk
from quiesce.cli import main
from quiesce.models import (
    DesignModel,
    ReplayFailed,
    SwarmRequest,
    SwarmSettings,
    WalkerResult,
    swarm,
)
from quiesce.models.coverage import ray_runner, recording_design_tables
from quiesce.models.coverage._swarm import FoundViolation, WalkerPlan, replay, run_in_process
from quiesce.models.design import DesignTables

S17 = "S17_retire_releases_completed"

# ------------------------------------------------------------------ the bit array


def test_a_bitstate_says_new_once_per_fingerprint() -> None:
    seen = Bitstate(16)
    assert [seen.add(f) for f in (1, 2, 1, 2**70 + 1)] == [True, True, False, False]
    assert seen.set_bits() <= 6 and seen.estimate() == pytest.approx(2, abs=0.1)


def test_the_estimate_of_a_union_counts_shared_states_once() -> None:
    rng = random.Random(5)
    common = [rng.getrandbits(64) for _ in range(5_000)]
    left, right = Bitstate(20), Bitstate(20)
    for f in [*common, *(rng.getrandbits(64) for _ in range(3_000))]:
        left.add(f)
    for f in [*common, *(rng.getrandbits(64) for _ in range(2_000))]:
        right.add(f)
    assert left.estimate() == pytest.approx(8_000, rel=0.03)
    merged = Merged(20)
    merged.add(left.packed())
    merged.add(right.packed())
    assert merged.estimate() == pytest.approx(10_000, rel=0.03)


def test_a_bitstate_ships_packed_and_merges_only_with_its_own_size() -> None:
    seen = Bitstate(18)
    for f in range(1_000):
        seen.add(f * 0x9E3779B97F4A7C15)
    packed = seen.packed()
    assert len(packed) < 2**18 // 8 // 4  # 1% full: a quarter of the raw array at most
    merged = Merged(18)
    merged.add(packed)
    assert merged.set_bits() == seen.set_bits() and merged.fill() == seen.set_bits() / 2**18
    with pytest.raises(ValueError, match="same --bitstate-bits"):
        Merged(17).add(packed)
    with pytest.raises(ValueError, match=r"log2_bits 40 must lie in \[10, 36\]"):
        Bitstate(40)


# ------------------------------------------------------------------ the swarm


def test_the_swarm_finds_a_scenario_mutants_violation_on_a_trace_that_replays() -> None:
    request = SwarmRequest("protocol", mutant=S17)
    result = swarm(request, SwarmSettings(walkers=4, walks=3, max_depth=200))
    violation = next(v for v in result.violations if v.property == "I1")
    assert violation.kind == "always"
    model = result.model
    holds = next(p.holds for p in model.properties() if p.name == "I1")
    states = violation.trace.states()
    assert all(holds(s) for s in states[:-1]) and not holds(states[-1])
    assert not result.check_result().complete
    # No wave starts after the one that found it.
    assert result.stopped_early is (len(result.walkers) < 4)


def test_the_unmutated_protocol_passes_and_every_fired_row_is_tracked() -> None:
    result = swarm(SwarmRequest("protocol"), SwarmSettings(walkers=2, walks=2, max_depth=100))
    assert result.violations == () and len(result.walkers) == 2
    assert result.rows.fired <= result.rows.tracked and len(result.rows.fired) > 20
    # What the implementation model never produces is listed apart, with the reason.
    dead = dict(result.rows.dead_by_design)
    assert dead["checkpoint[11] publishing publish_failed"].startswith("the model's snapshot")


def test_merged_coverage_is_the_union_of_the_walkers_and_beats_each_of_them() -> None:
    result = swarm(SwarmRequest("design"), SwarmSettings(walkers=6, walks=3, wave=3))
    assert result.coverage is not None
    walkers = [w.coverage for w in result.walkers]
    assert all(c is not None for c in walkers)
    fired = frozenset().union(*(c.fired for c in walkers if c is not None))
    refused = frozenset().union(*(c.refused for c in walkers if c is not None))
    assert result.coverage.fired == fired and result.coverage.refused == refused
    own = [len({(t, r) for t, r, _ in c.fired}) for c in walkers if c is not None]
    assert len(result.rows.fired) > max(own)


def test_directed_walkers_fire_more_rows_than_uniform_walks_of_the_same_number() -> None:
    tables, recorder = recording_design_tables(DesignTables())
    walk(DesignModel(tables=tables), walks=40, seed=0)
    uniform_rows = {(t, r) for t, r, _ in recorder.coverage().fired}
    directed = swarm(SwarmRequest("design"), SwarmSettings(walkers=1, walks=40))
    assert len(directed.rows.fired) > len(uniform_rows)


def test_the_estimate_counts_the_distinct_states_of_a_small_model() -> None:
    # Two-phase commit with 3 RMs has exactly 288 states; the swarm meets them all.
    result = swarm(SwarmRequest("two-phase"), SwarmSettings(walkers=8, walks=50))
    assert result.distinct_estimate == pytest.approx(288, rel=0.01)
    assert result.generated_states > 288 and result.coverage is None
    assert result.rows.tracked == frozenset()


def test_a_bitstate_too_small_says_so_and_never_counts_past_the_states_checked() -> None:
    # 1,024 bits for two-phase commit's 288 states, three bits each: more than half full.
    result = swarm(SwarmRequest("two-phase"), SwarmSettings(walkers=8, walks=50, log2_bits=10))
    assert result.saturated and result.bitstate.fill() > 0.5
    assert result.distinct_estimate <= result.generated_states
    assert result.to_json()["swarm"]["saturated"] is True


def test_the_result_depends_on_the_seed_not_on_the_order_walkers_finish() -> None:
    def backwards(request: SwarmRequest, plans: Sequence[WalkerPlan]) -> Iterator[WalkerResult]:
        return run_in_process(request, list(reversed(plans)))

    settings = SwarmSettings(walkers=4, walks=2, wave=2, seed=9)
    forward = swarm(SwarmRequest("design"), settings)
    backward = swarm(SwarmRequest("design"), settings, runner=backwards)
    assert [w.generated for w in forward.walkers] == [w.generated for w in backward.walkers]
    assert forward.coverage == backward.coverage
    assert forward.bitstate.set_bits() == backward.bitstate.set_bits()
    other = swarm(SwarmRequest("design"), SwarmSettings(walkers=4, walks=2, wave=2, seed=10))
    assert [w.generated for w in other.walkers] != [w.generated for w in forward.walkers]


def test_a_counterexample_that_does_not_replay_is_an_error() -> None:
    model = build_model("two-phase")
    found = FoundViolation("TCConsistent", "always", 0, ("no such move",))
    with pytest.raises(ReplayFailed, match=r"does not replay at step 1.*'no such move'"):
        replay(model, found)
    with pytest.raises(ReplayFailed, match="the property holds in the last state"):
        replay(model, FoundViolation("TCConsistent", "always", 0, ()))


def test_bad_settings_name_the_value() -> None:
    with pytest.raises(ValueError, match=r"walkers \(0\) must be at least 1"):
        SwarmSettings(walkers=0)
    with pytest.raises(ValueError, match="fault_rate 2"):
        SwarmSettings(walkers=1, fault_rate=2)


# ------------------------------------------------------------------ Ray


@pytest.mark.slow
def test_a_swarm_of_200_runs_on_a_local_ray(local_ray: None) -> None:
    args = ["check", "--swarm", "200", "--walks", "1", "--max-depth", "30", "--ray", "--json"]
    ran = CliRunner().invoke(main, args)
    assert ran.exit_code == 0, ran.stderr
    document = json.loads(ran.stdout)
    assert document["mode"] == "swarm" and document["model"] == "design"
    section = document["swarm"]
    assert section["walkers_run"] == 200 and len(section["per_walker"]) == 200
    assert section["rows"]["fired"] > 50 and not section["saturated"]
    # Every walker hashed alike (PYTHONHASHSEED): the union is far smaller than the sum.
    assert section["distinct_estimate"] < document["generated_states"] / 2


@pytest.mark.slow
def test_ray_walkers_find_the_mutant_and_merge_like_local_ones(local_ray: None) -> None:
    request = SwarmRequest("protocol", mutant=S17)
    settings = SwarmSettings(walkers=4, walks=3, max_depth=200)
    with ray_runner() as runner:
        on_ray = swarm(request, settings, runner=runner)
    assert [v.property for v in on_ray.violations] == ["I1"]
    here = swarm(request, settings)
    assert len(on_ray.walkers) == len(here.walkers)
