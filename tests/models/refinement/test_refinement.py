"""Refinement: every step of the implementation model maps to a step of the design model, or
stutters; a planted implementation bug that no invariant catches is caught by it."""

from __future__ import annotations

import json
from typing import Any

from click.testing import CliRunner

from quiesce.check import TwoPhase, check
from quiesce.cli import main
from quiesce.models import (
    REFINEMENT,
    Hooks,
    ProtocolModel,
    ProtocolParams,
    RefinementUnsupported,
    refine,
)
from quiesce.models.refinement._refinement import design_params
from quiesce.protocol.machines import CONTROL_FENCE, FenceData
from quiesce.protocol.participant import ParticipantRules

SMALL: dict[str, Any] = {
    "siblings": 1,
    "turns": 1,
    "attempts": 1,
    "triggers": 1,
    "optimizer_steps": 0,
    "weight_sync": 0,
    "train_switch": 0,
    "faults": 0,
}
"""One rollout and one checkpoint, fault-free: exhausted in seconds at both levels."""


def _final_resume_forgotten() -> Hooks:
    """The planted bug: a fence that retires an id keeps no record of that resume (M2 asks
    it to answer a repeated resume from the record, but none repeats without a fault)."""
    fence = CONTROL_FENCE.derive(
        "final_resume_forgotten",
        updates={"retire": lambda data, call: FenceData(None, call.op_id, ())},
    )
    return Hooks(participant=ParticipantRules(fence=fence))


def test_every_step_of_the_implementation_maps_to_a_design_step() -> None:
    result = check(refine(ProtocolModel(ProtocolParams(**SMALL))), stop_on_violation=False)
    assert result.complete and result.violations == ()
    assert REFINEMENT in result.properties


def test_refinement_catches_a_step_the_design_does_not_allow_and_no_invariant_does() -> None:
    buggy = ProtocolModel(ProtocolParams(**SMALL), hooks=_final_resume_forgotten())
    unrefined = check(buggy, stop_on_violation=False)
    assert unrefined.complete and unrefined.violations == ()  # every invariant holds
    violation = check(refine(buggy)).violation(REFINEMENT)
    assert violation is not None and violation.kind == "always"
    before, step = violation.trace.states()[-2], violation.trace.steps[-1]
    assert step.label.startswith("deliver resume(") and not before.unmapped
    assert step.state.unmapped.startswith("fence of ")
    assert "which no step of the design does" in step.state.unmapped
    described = refine(buggy).describe_state(step.state)
    assert described["unmapped step"] == step.state.unmapped and "state" in described


def test_the_design_size_matches_the_implementation_size() -> None:
    reference = design_params(ProtocolParams())
    assert (reference.siblings, reference.turns, reference.attempts) == (2, 2, 2)
    assert reference.call_retries == ProtocolParams().call_retries
    # A fault-free implementation may still outrun a call by its deadline: one design fault.
    assert design_params(ProtocolParams(**SMALL)).faults == 1


def test_refinement_refuses_what_the_design_cannot_mirror() -> None:
    for model, needle in (
        (ProtocolModel(ProtocolParams(agents=2)), "agents=2"),
        (TwoPhase(), "'two-phase'"),
    ):
        try:
            refine(model)
        except RefinementUnsupported as error:
            assert needle in str(error)
        else:
            raise AssertionError(f"{model.name} was refined")


def test_check_protocol_walks_refine_cli() -> None:
    settings = [f"--set={k}={str(v).lower()}" for k, v in SMALL.items() if k != "faults"]
    ran = CliRunner().invoke(
        main,
        ["check", "protocol", *settings, "--faults", "1", "--walks", "30", "--refine", "--json"],
    )
    assert ran.exit_code == 0, ran.output
    document = json.loads(ran.stdout)
    assert document["mode"] == "walks" and document["violations"] == []
    assert REFINEMENT in document["properties"]
    refused = CliRunner().invoke(main, ["check", "two-phase", "--refine"])
    assert refused.exit_code == 2 and "only the protocol model refines" in refused.stderr
