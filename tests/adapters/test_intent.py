"""The controller's intent record and epoch: durable, atomic, and loud when corrupt."""

from __future__ import annotations

from pathlib import Path

import pytest

from quiesce.adapters import BadCheckpointId, ControllerJournal, CorruptIntent, IntentPhase


def test_intent_lifecycle_survives_a_restart(tmp_path: Path) -> None:
    state = ControllerJournal(tmp_path)
    assert state.read_intent() is None
    state.write_intent("ck-1-4-step2", IntentPhase.PREPARING)
    state.write_intent("ck-1-4-step2", IntentPhase.PUBLISHING)
    restarted = ControllerJournal(tmp_path)
    record = restarted.read_intent()
    assert record is not None
    assert (record.checkpoint_id, record.phase) == ("ck-1-4-step2", IntentPhase.PUBLISHING)
    restarted.clear_intent()
    assert ControllerJournal(tmp_path).read_intent() is None
    restarted.clear_intent()  # clearing twice is harmless
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_epoch_grows_durably_across_starts(tmp_path: Path) -> None:
    assert ControllerJournal(tmp_path).epoch() == 0
    assert ControllerJournal(tmp_path).next_epoch() == 1
    assert ControllerJournal(tmp_path).next_epoch() == 2
    assert ControllerJournal(tmp_path).epoch() == 2


def test_a_leftover_tmp_file_from_a_crash_mid_write_is_ignored(tmp_path: Path) -> None:
    state = ControllerJournal(tmp_path)
    state.write_intent("ck-1-1-step0", IntentPhase.PREPARING)
    (tmp_path / ".intent.json.tmp").write_bytes(b'{"checkpoint_id": "ck-1-2')
    record = state.read_intent()
    assert record is not None and record.checkpoint_id == "ck-1-1-step0"
    state.write_intent("ck-1-2-step0", IntentPhase.PREPARING)
    assert not (tmp_path / ".intent.json.tmp").exists()


@pytest.mark.parametrize(
    ("content", "field"),
    [
        (b'{"checkpoint_id": "ck-1-1-st', "document"),
        (b"\xff\xfe", "document"),
        (b'{"checkpoint_id": "ck-1-1-step0", "phase": "napping"}', "phase"),
        (b'{"checkpoint_id": "ck-1-1-step0", "phase": "preparing", "x": 1}', "x"),
        (b'{"phase": "preparing"}', "checkpoint_id"),
        (b'{"checkpoint_id": "ck-01-1-step0", "phase": "preparing"}', "checkpoint_id"),
    ],
)
def test_a_corrupt_intent_is_a_typed_error_naming_the_file(
    tmp_path: Path, content: bytes, field: str
) -> None:
    (tmp_path / "intent.json").write_bytes(content)
    with pytest.raises(CorruptIntent) as caught:
        ControllerJournal(tmp_path).read_intent()
    assert caught.value.path == tmp_path / "intent.json"
    assert caught.value.field == field


def test_a_corrupt_epoch_is_never_reset_to_zero(tmp_path: Path) -> None:
    (tmp_path / "epoch.json").write_bytes(b'{"epoch": -3}')
    state = ControllerJournal(tmp_path)
    with pytest.raises(CorruptIntent) as caught:
        state.next_epoch()
    assert caught.value.field == "epoch"
    assert (tmp_path / "epoch.json").read_bytes() == b'{"epoch": -3}'


def test_writing_a_bad_id_is_refused_before_touching_disk(tmp_path: Path) -> None:
    state = ControllerJournal(tmp_path)
    state.write_intent("ck-1-1-step0", IntentPhase.PREPARING)
    with pytest.raises(BadCheckpointId):
        state.write_intent("ck-1-x-step0", IntentPhase.PUBLISHING)
    record = state.read_intent()
    assert record is not None and record.phase is IntentPhase.PREPARING
