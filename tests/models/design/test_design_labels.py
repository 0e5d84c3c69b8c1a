"""The design model's state labels mirror the protocol's state enums and read as strings."""

from __future__ import annotations

import json

import pytest

from quiesce.models.design._labels import (
    GateLabel,
    LabelMismatch,
    M1Label,
    _check_mirrors,
    _Label,
)
from quiesce.protocol.machines import CheckpointState, GateState


def test_a_label_is_its_string_to_hash_equality_order_repr_and_json() -> None:
    idle = M1Label.IDLE
    assert idle == "idle" and hash(idle) == hash("idle") and str(idle) == "idle"
    assert repr((idle, GateLabel.OPEN)) == repr(("idle", "open"))
    assert json.dumps([idle]) == '["idle"]'
    assert sorted(M1Label) == sorted(M1Label, key=str)
    assert CheckpointState(idle) is CheckpointState.IDLE


def test_labels_that_do_not_mirror_their_states_raise_naming_the_difference() -> None:
    class Gate(_Label):
        OPEN = GateState.OPEN.value
        SHUT = "shut"

    with pytest.raises(LabelMismatch) as raised:
        _check_mirrors((M1Label, CheckpointState), (Gate, GateState))
    assert (raised.value.missing, raised.value.extra) == (["closed"], ["shut"])
    assert "Gate does not mirror GateState" in str(raised.value)
