"""The `protocol` model: pinned state counts, no violation on the real protocol, symmetry
preserving every verdict, and counterexamples that project onto the engine's tables."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from quiesce.check import NO_STALL, CheckResult, build_model, check
from quiesce.cli import main
from quiesce.models import ProtocolModel, ProtocolParams
from quiesce.models.implementation import Hooks
from quiesce.mutants import MUTANTS
from quiesce.protocol.controller.lowlevel import CoordinatorPolicy
from quiesce.protocol.machines import PHASE_ORDER, Phase
from tests import pins

# The smallest exhaustive configurations, cheap enough for every CI run. The §8 reference
# size (`ProtocolParams()`) is far larger: see docs/checking.md, "The §8 reference size", for
# its measured size.
ONE_ROLLOUT: dict[str, Any] = dict(
    siblings=1,
    turns=1,
    attempts=1,
    triggers=1,
    optimizer_steps=0,
    weight_sync=0,
    train_switch=0,
    prepare_retries=1,
    faults=0,
    crashes=False,
)
TWO_SIBLINGS: dict[str, Any] = {**ONE_ROLLOUT, "siblings": 2, "triggers": 0}
# The largest configurations CI exhausts (tens of seconds each): every fault kind of §8
# (crashes included) on one rollout, and two siblings racing one checkpoint without faults.
EVERY_FAULT: dict[str, Any] = {**ONE_ROLLOUT, "prepare_retries": 2, "faults": 1, "crashes": True}
TWO_SIBLINGS_ONE_CHECKPOINT: dict[str, Any] = {**ONE_ROLLOUT, "siblings": 2, "prepare_retries": 2}


def test_reference_size_is_protocol_md_section_8() -> None:
    params = ProtocolParams()
    assert (params.siblings, params.turns, params.attempts, params.triggers) == (2, 2, 2, 2)
    assert (params.optimizer_steps, params.weight_sync, params.train_switch) == (1, 1, 1)
    assert (params.prepare_retries, params.faults, params.agents) == (2, 1, 1)
    assert build_model("protocol").params == params.describe()


# Their counts, and why they moved, are pinned in tests/pins.py (`PROTOCOL_STATES`).
PINNED_CONFIGURATIONS: dict[str, dict[str, Any]] = {
    "one_rollout": ONE_ROLLOUT,
    "two_siblings": TWO_SIBLINGS,
    "every_fault": EVERY_FAULT,
    "two_siblings_one_checkpoint": TWO_SIBLINGS_ONE_CHECKPOINT,
}


@pytest.mark.parametrize("name", list(PINNED_CONFIGURATIONS))
def test_pinned_state_count_and_no_violation(name: str) -> None:
    params = ProtocolParams(**PINNED_CONFIGURATIONS[name])
    result = check(ProtocolModel(params), stop_on_violation=False)
    assert result.complete and not result.truncated
    assert result.violations == ()
    assert result.distinct_states == pins.PROTOCOL_STATES[name]
    assert NO_STALL in result.properties
    assert {"I1", "I2", "I3", "I4", "I5", "I6", "I8"} <= set(result.properties)


def test_faults_are_explored_without_violation() -> None:
    params = ProtocolParams(**{**ONE_ROLLOUT, "faults": 1})
    result = check(ProtocolModel(params), max_states=4000, stop_on_violation=False)
    assert result.violations == ()
    assert (
        result.distinct_states > check(ProtocolModel(ProtocolParams(**ONE_ROLLOUT))).distinct_states
    )


def test_symmetry_identifies_siblings_and_keeps_the_verdict() -> None:
    model = ProtocolModel(ProtocolParams(**TWO_SIBLINGS))
    plain, reduced = check(model), check(model, symmetry=True)
    assert plain.ok and reduced.ok and plain.complete and reduced.complete
    assert reduced.distinct_states < plain.distinct_states


@pytest.mark.parametrize(
    "mutant",
    ["S11_group_scored_sibling_alone", "S1_deadline_runs_while_parked", "S2_boolean_suspend"],
)
def test_symmetry_preserves_the_verdict_of_a_mutant(mutant: str) -> None:
    catalog = MUTANTS[mutant]
    params = ProtocolParams(**{**catalog.params, "siblings": 2})
    verdicts = []
    for symmetry in (False, True):
        model = ProtocolModel(params, hooks=catalog.hooks())
        result = check(model, symmetry=symmetry, max_states=20_000)
        verdicts.append({v.property for v in result.violations})
    assert verdicts[0] == verdicts[1] != set()


def test_counterexample_projects_onto_checkpoint_for_the_diagram(
    tmp_path: Path, mutant_check: Callable[[str, Mapping[str, Any]], CheckResult[Any]]
) -> None:
    # The S4 mutant's stall is found only once its configuration is exhausted: the check
    # is shared with the portfolio's kill test (tests/models/conftest.py).
    mutant = MUTANTS["S4_release_failure_reraised"]
    result = mutant_check(mutant.name, mutant.params)
    model = result.model
    assert isinstance(model, ProtocolModel)
    [violation] = result.violations
    steps = model.project(violation.trace, "checkpoint")
    assert steps[0] == {"state": "idle", "input": "trigger", "target": "closing_admission"}
    assert steps[-1]["target"] == "stopped"
    trace = tmp_path / "checkpoint.json"
    trace.write_text(json.dumps(steps))
    drawn = CliRunner().invoke(main, ["diagram", "checkpoint", "--trace", str(trace)])
    assert drawn.exit_code == 0, drawn.output
    # The last step, numbered and drawn into `stopped` (perhaps out of a junction).
    last = f"--> stopped : {len(steps)}. failed"
    assert last in drawn.output


def test_check_cli_kills_a_mutant_and_writes_traces(tmp_path: Path) -> None:
    settings = [f"--set={k}={v}" for k, v in MUTANTS["S2_boolean_suspend"].params.items()]
    ran = CliRunner().invoke(
        main,
        [
            "check",
            "protocol",
            *settings,
            "--mutant",
            "S2_boolean_suspend",
            "--json",
            "--trace-out",
            str(tmp_path),
        ],
    )
    assert ran.exit_code == 1, ran.output
    document = json.loads(ran.stdout)
    assert document["model"] == "protocol[S2_boolean_suspend]"
    assert document["violations"][0]["property"] == "I4"
    assert (tmp_path / "I4.checkpoint.json").exists()
    assert "sequenceDiagram" in (tmp_path / "I4.sequence.mmd").read_text()
    ok = CliRunner().invoke(main, ["check", "protocol", *settings, "--json"])
    assert ok.exit_code == 0 and json.loads(ok.stdout)["violations"] == []


def test_restore_out_of_phase_order_breaks_i5() -> None:
    # §3: restore goes policy -> agents -> resources. A controller that restores in the
    # resume order is caught at the first restore call it sends too early.
    reversed_order = {**PHASE_ORDER, Phase.RESTORE: tuple(reversed(PHASE_ORDER[Phase.RESTORE]))}
    hooks = Hooks(policy=CoordinatorPolicy(phase_order=reversed_order))
    model = ProtocolModel(ProtocolParams(**EVERY_FAULT), hooks=hooks)
    violation = check(model).violation("I5")
    assert violation is not None
    last = violation.trace.states()[-1]
    assert any(p == "I5" and why.startswith("restore(") for p, why in last.env.bad)
