"""The `design` model: §8's reference size exhausted with fault budget 1 (pinned count, every
property holding), goals I7 and I9 checked apart, symmetry keeping every verdict, and every
design mutant killed by the property it names."""

from __future__ import annotations

import itertools
import json
from collections.abc import Hashable, Iterable, Sequence
from typing import Any

import pytest
from click.testing import CliRunner

from quiesce.check import Action, Model, Trace, UnknownProjection, build_model, check
from quiesce.cli import main
from quiesce.models import DesignModel, DesignParams, ProtocolParams
from quiesce.mutants import DESIGN_MUTANTS, small
from quiesce.protocol.machines import AGENT_EXECUTION, CONTROL_FENCE
from tests import pins

PROPERTIES = ("I1", "I2", "I3", "I4", "I5", "I6", "I8", "I7", "I9")


def test_reference_size_is_protocol_md_section_8() -> None:
    design, implementation = DesignParams(), ProtocolParams()
    shared = ("siblings", "turns", "attempts", "triggers", "optimizer_steps")
    shared += ("weight_sync", "train_switch", "prepare_retries", "faults")
    for key in shared:
        assert getattr(design, key) == getattr(implementation, key), key
    assert (design.faults, design.call_retries, design.crashes) == (1, 1, True)
    assert build_model("design").params == design.describe()


def test_quiesce_check_exhausts_the_design_at_the_reference_size_by_default() -> None:
    # `quiesce check` with no model: the design at §8's reference size, fault budget 1, every
    # property holding. Its budget in CI is 60 s on a 2-core machine (measured: docs/checking.md).
    ran = CliRunner().invoke(main, ["check", "--json"])
    assert ran.exit_code == 0, ran.output
    document = json.loads(ran.stdout)
    assert document["model"] == "design" and document["params"] == DesignParams().describe()
    assert document["complete"] and not document["truncated"]
    assert document["violations"] == [] and document["properties"] == list(PROPERTIES)
    assert document["distinct_states"] == pins.DESIGN_REFERENCE_STATES


SMALL_DESIGNS: dict[str, dict[str, Any]] = {
    "reference_fault_free": {"faults": 0},
    "one_rollout_every_fault": {**small(), "faults": 1, "crashes": True},
    "two_siblings_every_fault": {**small(siblings=2, attempts=2), "faults": 1, "crashes": True},
}


@pytest.mark.parametrize("name", list(SMALL_DESIGNS))
def test_pinned_state_count_and_no_violation(name: str) -> None:
    result = check(DesignModel(DesignParams(**SMALL_DESIGNS[name])), stop_on_violation=False)
    assert result.complete and result.violations == ()
    assert result.distinct_states == pins.DESIGN_SMALL_STATES[name]


def _first_call(model: DesignModel, label: str) -> tuple[Any, Action]:
    """The first reached state (breadth-first) offering an action labelled `label`."""
    frontier = list(model.init_states())
    seen = set(frontier)
    while frontier:
        state = frontier.pop(0)
        for action in model.actions(state):
            if action.label == label:
                return state, action
        for _, following in model.successors(state):
            if following not in seen:
                seen.add(following)
                frontier.append(following)
    raise AssertionError(f"no reached state offers {label!r}")


def test_a_call_is_retried_under_its_own_id_within_call_retries() -> None:
    # §4 (amended): a lost reply is retried with the same op id and answered from the
    # fence's record, so the commit walk goes on; without retries the same loss fails it.
    params = {**small(), "faults": 1}
    retried = DesignModel(DesignParams(**params, call_retries=1))
    state, action = _first_call(retried, "commit(1) -> agent [reply_lost]")
    after = retried.next_state(state, action)
    assert after is not None
    agent = after.state.parts.fences[1]
    assert (agent.state, agent.active) == ("committed_paused", 1)
    assert [(r, op) for r, op, _ in agent.recorded].count((1, "commit")) == 1
    assert after.state.controller.walk.done & 0b10  # the agent's commit counts as answered
    assert after.state.controller.m1.state == "committing"
    no_retry = DesignModel(DesignParams(**params, call_retries=0))
    state, action = _first_call(no_retry, "commit(1) -> agent [reply_lost*]")
    failed = no_retry.next_state(state, action)
    assert failed is not None and failed.state.controller.m1.state == "aborting"
    labels = {a.label for a in no_retry.actions(state)}
    assert "commit(1) -> agent [reply_lost]" not in labels  # no retry, so no loss survives


def test_symmetry_identifies_siblings_and_keeps_every_verdict() -> None:
    params = {**small(siblings=2, attempts=2), "faults": 1, "crashes": True}
    plain = check(DesignModel(DesignParams(**params, symmetry=False)), stop_on_violation=False)
    reduced = check(DesignModel(DesignParams(**params)), stop_on_violation=False)
    assert plain.ok and reduced.ok and plain.complete and reduced.complete
    assert reduced.distinct_states < plain.distinct_states
    mutant = DESIGN_MUTANTS["S17_retire_releases_completed"]
    for symmetry in (False, True):
        model = DesignModel(DesignParams(**params, symmetry=symmetry), tables=mutant.tables())
        assert check(model).violation("I1") is not None


def test_i9_is_a_goal_of_its_own() -> None:
    # Without an optimizer step nobody trains the group: the controller still rests (I7),
    # but rollout progress (I9) never completes.
    result = check(DesignModel(DesignParams(**small(optimizer_steps=0))), stop_on_violation=False)
    assert result.violation("I7") is None
    violation = result.violation("I9")
    assert violation is not None and violation.kind == "deadlock"
    last = violation.trace.states()[-1].state
    assert last.controller.ledger is not None
    assert last.controller.ledger.group.state == "ready_to_finalize"


@pytest.mark.parametrize("name", sorted(DESIGN_MUTANTS))
def test_every_design_mutant_is_killed_by_its_property(name: str) -> None:
    mutant = DESIGN_MUTANTS[name]
    result = check(mutant.model())
    assert result.violation(mutant.killed_by) is not None, [v.property for v in result.violations]
    # ... and the real tables pass at the very same configuration.
    unmutated = check(DesignModel(mutant.model().p), stop_on_violation=False)
    assert unmutated.complete and unmutated.violations == ()


def test_mutants_derive_tables_and_leave_the_machines_untouched() -> None:
    fence_rows, agent_rows = CONTROL_FENCE.rows, AGENT_EXECUTION.rows
    tables = {name: mutant.tables() for name, mutant in DESIGN_MUTANTS.items()}
    assert tables["S15_stale_prepare_accepted"].fence.variant
    assert tables["S17_retire_releases_completed"].execution.variant
    assert (CONTROL_FENCE.rows, AGENT_EXECUTION.rows) == (fence_rows, agent_rows)
    assert CONTROL_FENCE.variant is None and AGENT_EXECUTION.variant is None


def test_counterexamples_read_as_protocol_steps() -> None:
    mutant = DESIGN_MUTANTS["S15_stale_prepare_accepted"]
    violation = check(mutant.model()).violation("I3")
    assert violation is not None
    labels = [step.label for step in violation.trace.steps]
    assert any(label.endswith("[timeout]") for label in labels)
    assert labels[-1].startswith("delayed prepare")
    document = json.dumps(violation.to_json(mutant.model()))
    assert '"state": "preparing"' in document  # the fence the stale prepare closed


def test_traces_keep_the_siblings_names_under_symmetry() -> None:
    # States are compared by their canonical form but kept as reached: each step of a trace
    # moves the sibling its label names.
    params = DesignParams(**{**small(siblings=2, turns=2, attempts=2), "faults": 1})
    mutant = DESIGN_MUTANTS["S17_retire_releases_completed"]
    violation = check(DesignModel(params, tables=mutant.tables())).violation("I1")
    assert violation is not None
    for before, action, after in violation.trace.transitions():
        if action.payload[0] in ("turn", "finish"):
            key = action.payload[1]
            was = {(e.sibling, e.attempt): e for e in before.state.parts.executions}[key]
            now = {(e.sibling, e.attempt): e for e in after.state.parts.executions}[key]
            assert (now.turn, now.state) != (was.turn, was.state), action.label


def test_traces_project_onto_the_protocol_models_tables_and_m9() -> None:
    model = DesignModel(DesignParams(siblings=1, attempts=2, faults=1))
    names = model.tables()
    assert names[:4] == ["checkpoint", "admission_gate", "deadline_registry", "restore"]
    assert "control_fence[agent]" in names
    # Attempts 0 and 1, and one more number a fresh start after a crash may use.
    assert [n for n in names if n.startswith("agent_execution")] == [
        f"agent_execution[g0-0#{a}]" for a in range(3)
    ]
    with pytest.raises(UnknownProjection, match="prompt_group"):
        model.project(Trace(next(iter(model.init_states())), ()), "prompt_group")


def test_a_restore_is_projected_from_its_first_step_to_idle() -> None:
    # S12 restores after a crash: M9 runs from finishing_intent in the crash's step (the
    # design keeps no M9 value at rest, a fresh start begins at the initial state).
    mutant = DESIGN_MUTANTS["S12_restart_only_resumed"]
    model = mutant.model()
    violation = check(model).violation(mutant.killed_by)
    assert violation is not None
    steps = model.project(violation.trace, "restore")
    assert steps[0] == {
        "state": "finishing_intent",
        "input": "intent_read",
        "target": "selecting",
    }
    assert steps[-1]["target"] == "idle"
    assert all(a["target"] == b["state"] for a, b in itertools.pairwise(steps))


def test_cli_checks_the_design_model_and_its_mutants() -> None:
    runner = CliRunner()
    settings = [f"--set={k}={v}" for k, v in small().items()]
    ok = runner.invoke(main, ["check", "design", *settings, "--json"])
    assert ok.exit_code == 0, ok.output
    document = json.loads(ok.stdout)
    assert document["model"] == "design" and document["complete"]
    assert document["properties"] == list(PROPERTIES)
    killed = runner.invoke(
        main,
        ["check", "design", *settings, "--faults", "1", "--mutant", "S15_stale_prepare_accepted"],
    )
    assert killed.exit_code == 1
    assert "I3" in killed.output


# ----------------------------------------------------------------- the explorer's goals


class _TwoGoals(Model[int]):
    """0 -> 1 -> 2 (a dead end): state 2 is a goal of `near` but not of `far`."""

    liveness = True

    def init_states(self) -> Iterable[int]:
        yield 0

    def actions(self, state: int) -> Sequence[Action]:
        return [Action(f"{state}->{state + 1}")] if state < 2 else []

    def next_state(self, state: int, action: Action) -> int | None:
        return state + 1

    def canonical(self, state: int) -> Hashable:
        return state

    def liveness_goals(self) -> Sequence[tuple[str, Any]]:
        return (("near", lambda s: s == 2), ("far", lambda s: s == 3))


def test_the_explorer_checks_each_goal_on_its_own() -> None:
    result = check(_TwoGoals(), stop_on_violation=False)
    assert result.properties == ("near", "far")
    assert result.violation("near") is None
    far = result.violation("far")
    assert far is not None and far.kind == "deadlock" and len(far.trace) == 2
