"""M6 admission gate: the holder set, row by row."""

import pytest

from quiesce.fsm import TransitionNotAllowed
from quiesce.protocol.machines import ADMISSION_GATE as GATE
from quiesce.protocol.machines import GateInput, GateState


def test_hold_closes_and_names_the_owner() -> None:
    value, effects = GATE.step(GATE.start(), GateInput.HOLD, "checkpoint")
    assert value.state is GateState.CLOSED
    assert value.data == {"checkpoint"}
    assert [e.name for e in effects] == ["close_admission"]


def test_release_by_one_owner_keeps_what_another_holds() -> None:
    value = GATE.start()
    for owner in ("checkpoint", "train_switch"):
        value, _ = GATE.step(value, GateInput.HOLD, owner)
    value, effects = GATE.step(value, GateInput.RELEASE, "train_switch")
    assert value.state is GateState.CLOSED and value.data == {"checkpoint"}
    assert effects == ()
    value, effects = GATE.step(value, GateInput.RELEASE, "checkpoint")
    assert value.state is GateState.OPEN and not value.data
    assert [e.name for e in effects] == ["open_admission"]


def test_repeated_hold_is_a_no_op() -> None:
    once, _ = GATE.step(GATE.start(), GateInput.HOLD, "checkpoint")
    twice, effects = GATE.step(once, GateInput.HOLD, "checkpoint")
    assert twice == once and effects == ()


def test_release_of_a_hold_not_held_changes_nothing() -> None:
    held, _ = GATE.step(GATE.start(), GateInput.HOLD, "checkpoint")
    after, _ = GATE.step(held, GateInput.RELEASE, "weight_sync")
    assert after == held
    assert GATE.check_invariants(after) == []


def test_a_derived_table_refuses_what_its_row_no_longer_maps() -> None:
    broken = GATE.without_row(0)
    with pytest.raises(TransitionNotAllowed):
        broken.step(broken.start(), GateInput.HOLD, "checkpoint")
