"""M5 resources: freeze after mutations drain; revisions fixed while frozen; import."""

from __future__ import annotations

import pytest

from quiesce.check import arg_examples
from quiesce.fsm import GuardRejected, TransitionNotAllowed
from quiesce.protocol.machines import (
    RESOURCES,
    Mutation,
    RecoveryMode,
    ResourcesData,
    ResourcesInput,
    ResourcesState,
)

ARG_EXAMPLES = arg_examples(RESOURCES)

I, S = ResourcesInput, ResourcesState  # noqa: E741
M1, M2 = Mutation("m1", "r0"), Mutation("m2", "r1")


def test_a_finished_mutation_bumps_its_rollouts_revision() -> None:
    value, effects = RESOURCES.step(RESOURCES.start(), I.MUTATION_STARTED, M1)
    assert value.data.in_flight == 1 and [e.name for e in effects] == ["admit_mutation"]
    value, _ = RESOURCES.step(value, I.MUTATION_FINISHED, M1)
    assert value.data == ResourcesData(0, (), (("r0", 1),))
    assert value.data.revision("r0") == 1 and value.data.revision("r9") == 0


def test_prepare_freezes_at_once_when_nothing_is_in_flight() -> None:
    value, _ = RESOURCES.step(RESOURCES.start(), I.FENCE_PREPARE)
    assert value.state is S.FROZEN


def test_prepare_waits_for_in_flight_mutations_then_freezes() -> None:
    value = RESOURCES.start()
    for m in (M1, M2):
        value, _ = RESOURCES.step(value, I.MUTATION_STARTED, m)
    value, _ = RESOURCES.step(value, I.FENCE_PREPARE)
    assert value.state is S.DRAINING
    value, _ = RESOURCES.step(value, I.MUTATION_FINISHED, M1)
    assert value.state is S.DRAINING
    value, _ = RESOURCES.step(value, I.MUTATION_FINISHED, M2)
    assert value.state is S.FROZEN
    assert value.data.revisions == (("r0", 1), ("r1", 1))


@pytest.mark.parametrize("draining", [True, False])
def test_no_mutation_starts_once_prepare_began_and_resume_admits_them(draining: bool) -> None:
    value = RESOURCES.start()
    if draining:
        value, _ = RESOURCES.step(value, I.MUTATION_STARTED, M1)
    value, _ = RESOURCES.step(value, I.FENCE_PREPARE)
    frozen_revisions = value.data.revisions
    value, effects = RESOURCES.step(value, I.MUTATION_STARTED, M2)
    assert value.data.waiters == ("m2",) and [e.name for e in effects] == ["hold_as_waiter"]
    assert value.data.revisions == frozen_revisions
    value, effects = RESOURCES.step(value, I.FENCE_RESUME)
    assert value.state is S.ACCEPTING and value.data.waiters == ()
    assert value.data.in_flight == (2 if draining else 1)
    assert [e.name for e in effects] == ["release_waiters"]


def test_import_installs_revisions_only_while_frozen() -> None:
    frozen, _ = RESOURCES.step(RESOURCES.start(), I.FENCE_PREPARE)
    value, _ = RESOURCES.step(frozen, I.IMPORT, (("r1", 4), ("r0", 2)))
    assert value.data.revisions == (("r0", 2), ("r1", 4))
    with pytest.raises(TransitionNotAllowed):
        RESOURCES.step(RESOURCES.start(), I.IMPORT, ())


def test_stray_events_are_refused_or_change_nothing() -> None:
    start = RESOURCES.start()
    assert RESOURCES.step(start, I.FENCE_RESUME) == (start, ())
    frozen, _ = RESOURCES.step(start, I.FENCE_PREPARE)
    assert RESOURCES.step(frozen, I.FENCE_PREPARE) == (frozen, ())
    with pytest.raises(GuardRejected):
        RESOURCES.step(start, I.MUTATION_FINISHED, M1)
    with pytest.raises(TransitionNotAllowed):
        RESOURCES.step(frozen, I.MUTATION_FINISHED, M1)


def test_recovery_mode_defaults_and_examples() -> None:
    assert [m.value for m in RecoveryMode] == ["stateless", "export_restore", "restart_only"]
    # Fence inputs take no argument; every other input has examples.
    assert set(ARG_EXAMPLES) == {I.MUTATION_STARTED, I.MUTATION_FINISHED, I.IMPORT}
