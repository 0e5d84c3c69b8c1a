"""The design model's state labels are the protocol's states and read as strings."""

from __future__ import annotations

import json
import pickle

import pytest

from quiesce.models.design._labels import (
    AttemptLabel,
    ExecLabel,
    FenceLabel,
    GateLabel,
    GroupLabel,
    M1Label,
    M9Label,
    PolicyLabel,
    RegistryLabel,
    ResourcesLabel,
    WalkPhase,
)
from quiesce.protocol.machines import (
    AttemptState,
    CheckpointState,
    ExecState,
    FenceState,
    GateState,
    GroupState,
    PolicyState,
    RegistryState,
    ResourcesState,
    RestoreState,
)

PAIRS = [
    (M1Label, CheckpointState),
    (FenceLabel, FenceState),
    (ExecLabel, ExecState),
    (PolicyLabel, PolicyState),
    (ResourcesLabel, ResourcesState),
    (GateLabel, GateState),
    (RegistryLabel, RegistryState),
    (AttemptLabel, AttemptState),
    (GroupLabel, GroupState),
    (M9Label, RestoreState),
]


@pytest.mark.parametrize(("labels", "states"), PAIRS, ids=[p[1].__name__ for p in PAIRS])
def test_each_machine_has_one_label_per_state_of_its_name_and_value(
    labels: type, states: type
) -> None:
    assert [(label.name, label.value) for label in labels] == [(s.name, s.value) for s in states]
    assert all(isinstance(label, str) for label in labels)


def test_a_label_is_its_string_to_hash_equality_order_repr_json_and_pickle() -> None:
    idle = M1Label.IDLE
    assert idle == "idle" and hash(idle) == hash("idle") and str(idle) == "idle"
    assert repr((idle, GateLabel.OPEN)) == repr(("idle", "open"))
    assert json.dumps([idle]) == '["idle"]'
    assert sorted(M1Label) == sorted(M1Label, key=str)
    assert CheckpointState(idle) is CheckpointState.IDLE
    assert pickle.loads(pickle.dumps(idle)) is idle


def test_a_walk_phase_is_its_string_and_no_walk_is_false() -> None:
    assert WalkPhase.REFLUSH == "reflush" and hash(WalkPhase.ABORT_RS) == hash("abort_rs")
    assert repr((WalkPhase.DISCARD, WalkPhase.NONE)) == repr(("discard", ""))
    assert not WalkPhase.NONE and all(phase for phase in WalkPhase if phase is not WalkPhase.NONE)
    assert pickle.loads(pickle.dumps(WalkPhase.RESUME_RS)) is WalkPhase.RESUME_RS
