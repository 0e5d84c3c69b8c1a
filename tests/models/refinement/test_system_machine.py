"""The system-level state machine: the real driver, in-memory fleet and virtual clock under
Hypothesis, with PROTOCOL.md §5 checked against an independent ledger after every rule.

Four kinds of tests: the unmutated protocol survives the machine (`ci` profile), every
fence move refining the design; the machine *catches* mutants whose bug needs a deep
schedule of the real runtime (`hunt` profile); it catches by refinement a planted bug that
no invariant sees; and each hand-forged symptom trips the check that names it, so no check
is vacuous.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import structlog
from hypothesis import Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from quiesce.adapters import configure_logging
from quiesce.check import UnsupportedOption
from quiesce.models import (
    REFINEMENT,
    CallRecord,
    Hooks,
    SystemMachine,
    SystemRun,
    SystemViolation,
    system_machine,
)
from quiesce.mutants import MUTANTS
from quiesce.protocol import OpId
from quiesce.protocol.controller import PeriodElapsed
from quiesce.protocol.machines import CONTROL_FENCE, FenceData, FenceOp
from quiesce.protocol.participant import ParticipantOp, ParticipantRules

# The unmutated protocol through the whole machine. Measured at ~13 examples/s, so the
# `ci` profile's 200 examples of up to 50 rules each take ~15 s.
SURVIVES = settings.get_profile("ci")

# A bug hunt stops at the first failure: shrinking a virtual-clock run of 50 rules takes
# minutes and the test only needs the catch (the failing program is still printed).
HUNT = settings(settings.get_profile("hunt"), phases=(Phase.explicit, Phase.reuse, Phase.generate))


@pytest.fixture(autouse=True)
def quiet_logs() -> Iterator[None]:
    """The driver logs every transition; thousands of runs need none of it."""
    saved = structlog.get_config()
    configure_logging("critical")
    yield
    structlog.configure(**saved)


def test_the_protocol_survives_the_system_machine() -> None:
    assert SystemMachine.refine  # every fence move of every run is judged by the design
    run_state_machine_as_test(SystemMachine, settings=SURVIVES)


@pytest.mark.parametrize(
    "mutant", ["S1_deadline_runs_while_parked", "S2_boolean_suspend"], ids=["S1", "S2"]
)
def test_the_machine_catches_a_deadline_mutant(mutant: str) -> None:
    machine = system_machine(MUTANTS[mutant].hooks(), name=f"System[{mutant}]")
    with pytest.raises(SystemViolation) as caught:
        run_state_machine_as_test(machine, settings=HUNT)
    # Both bugs let a deadline expire while the checkpoint or the train switch holds it.
    assert caught.value.invariant == "I4"


def test_a_recovery_mutant_is_refused_not_run_unmutated() -> None:
    # The in-memory hosts recover from their journals by the protocol's own code: the
    # mutant's recovery would silently not apply.
    with pytest.raises(UnsupportedOption, match="protocol model only"):
        SystemRun(hooks=MUTANTS["S19_journal_not_durable"].hooks())


def test_participant_tables_reach_every_in_memory_host() -> None:
    hooks = MUTANTS["S15_stale_prepare_accepted"].hooks()
    run = SystemRun(hooks=hooks)
    try:
        assert run.fleet.rules is hooks.participant
        assert len(run.fleet.hosts) == 3  # a policy, an agent and a resources server
        assert all(host.rules is hooks.participant for host in run.fleet.hosts.values())
    finally:
        run.close()


@pytest.fixture
def retired_results_kept() -> Hooks:
    """The planted bug, a legal-looking move the design never makes: a fence that retires
    an id keeps that id's prepare and commit results beside its final resume (M2 keeps the
    resume alone: the one request of a retired id still answered). Every replay still
    finds its result and every other request of that id is refused as stale, so the run
    behaves exactly as the protocol's. The hooks give the in-memory hosts these fence
    rules."""
    fence = CONTROL_FENCE.derive(
        "retired_results_kept",
        updates={
            "retire": lambda data, call: FenceData(
                None, call.op_id, (*data.recorded, (call.op_id, FenceOp.RESUME, call.result))
            )
        },
    )
    return Hooks(participant=ParticipantRules(fence=fence))


def _checkpoint_restart_and_drain(run: SystemRun) -> None:
    run.open_group(2)
    run.submit(PeriodElapsed())
    run.advance(0.5)
    run.check()
    run.restart_controller()
    run.open_group(3)
    run.advance(0.05)
    run.check()
    run.drain()


def test_the_planted_bug_breaks_no_invariant(retired_results_kept: Hooks) -> None:
    # With refinement off the bug runs a checkpoint, a controller restart and the final
    # drain with I1-I8 all holding, and so does the whole machine.
    run = SystemRun(seed=5, hooks=retired_results_kept, refine=False)
    try:
        _checkpoint_restart_and_drain(run)
        assert run.store.published()
    finally:
        run.close()
    unrefined = system_machine(
        retired_results_kept, name="Unrefined[retired_results_kept]", refine=False
    )
    run_state_machine_as_test(unrefined, settings=SURVIVES)


def test_refinement_catches_the_planted_bug_at_its_first_unmapped_step(
    retired_results_kept: Hooks,
) -> None:
    machine = system_machine(retired_results_kept, name="System[retired_results_kept]")
    with pytest.raises(SystemViolation) as caught:
        run_state_machine_as_test(machine, settings=HUNT)
    assert caught.value.invariant == REFINEMENT
    # The validators' own wording: where, who and which request, then both fences.
    first, before, after = caught.value.detail.splitlines()
    assert first.startswith("the machine's fence log line ") and ", resume(ck-" in first
    assert first.endswith("which no step of the design does")
    # A prepared (or committed) id resumes: its prepare result is kept beside the resume.
    assert '"prepare"]' in before and '"state": "idle"' in after
    assert '"prepare"], ["ck-' in after and '"resume"]]' in after


# ------------------------------------------------------------------ the harness itself


@pytest.fixture
def run() -> Iterator[SystemRun]:
    system = SystemRun(seed=5)
    yield system
    system.close()


def test_a_scripted_run_trains_every_item_and_publishes_consistent_snapshots(
    run: SystemRun,
) -> None:
    _checkpoint_restart_and_drain(run)
    assert run.store.published()
    trained = run.trainer.trained_items()
    assert {(0, 0), (0, 1), (1, 0), (1, 1), (1, 2)} <= trained
    assert run.generation == 2
    # Calls were logged for every phase the checkpoint went through, in §3's order.
    ops = {c.op for c in run.calls}
    assert {ParticipantOp.PREPARE, ParticipantOp.COMMIT, ParticipantOp.RESUME} <= ops
    # Every request every participant handled was judged, and each fence move refines.
    assert run.fence_log is not None
    verdict = run.fence_log.judge.verdict()
    assert verdict.ok and verdict.participants == 3 and verdict.moves > 0


def _forged(run: SystemRun, role: str, op: ParticipantOp, started: float, **kw: object) -> None:
    record = CallRecord(
        generation=99,
        participant=f"{role}-0",
        role=role,
        op=op,
        op_id=OpId(99, 1, 0),
        started=started,
        deadline=kw.get("deadline", started + 1.0),  # type: ignore[arg-type]
        ended=kw.get("ended", started + 0.5),  # type: ignore[arg-type]
        outcome="reply",
    )
    run.calls.append(record)


def test_a_call_to_a_later_role_first_breaks_phase_order(run: SystemRun) -> None:
    _forged(run, "resources", ParticipantOp.PREPARE, 1.0)
    _forged(run, "policy", ParticipantOp.PREPARE, 2.0)
    with pytest.raises(SystemViolation, match="reached resources") as caught:
        run.check()
    assert caught.value.invariant == "I5"


def test_a_call_that_outlives_its_deadline_breaks_bounded_calls(run: SystemRun) -> None:
    _forged(run, "agent", ParticipantOp.COMMIT, 1.0, deadline=2.0, ended=2.5)
    with pytest.raises(SystemViolation, match="after its deadline") as caught:
        run.check()
    assert caught.value.invariant == "I6"


def test_a_prepared_participant_never_resumed_breaks_publish_or_abort(run: SystemRun) -> None:
    run.advance(0.1)
    _forged(run, "agent", ParticipantOp.PREPARE, 0.05)
    with pytest.raises(SystemViolation, match="never resumed") as caught:
        run.check()
    assert caught.value.invariant == "I3"


def test_a_tampered_snapshot_breaks_consistency(run: SystemRun) -> None:
    run.open_group(1)
    run.submit(PeriodElapsed())
    run.advance(1.0)
    [name] = run.store.published()
    artifact = next(p for p in (run.store.published_dir / name).rglob("p.agent-0*"))
    artifact.write_bytes(b"tampered")
    with pytest.raises(SystemViolation, match="does not verify") as caught:
        run.check()
    assert caught.value.invariant == "I8"
