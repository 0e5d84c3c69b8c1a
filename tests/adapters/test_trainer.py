"""The in-memory trainer and data plane: anchors, lineage, rollback, and the cut."""

from __future__ import annotations

import json

import pytest

from quiesce.adapters import (
    ControllerCut,
    CorruptCut,
    CutMismatch,
    DataPlane,
    FinishedGroup,
    InMemoryDataPlane,
    InMemoryTrainer,
    OptimizerBusy,
    Trainer,
    TrainerCheckpoint,
)


def _group(prompt: int, siblings: int = 2) -> FinishedGroup:
    return FinishedGroup(prompt_id=prompt, siblings=tuple(range(siblings)))


def test_in_memory_classes_satisfy_the_interfaces() -> None:
    trainer: Trainer = InMemoryTrainer()
    plane: DataPlane = InMemoryDataPlane(InMemoryTrainer())
    assert trainer.anchor() == TrainerCheckpoint(0, 0, 0)
    assert plane.position == 0


def test_optimizer_step_advances_step_version_anchor_and_lineage() -> None:
    trainer = InMemoryTrainer()
    trainer.begin_optimizer_step([_group(0), _group(1)])
    assert trainer.optimizer_commit_in_progress
    with pytest.raises(OptimizerBusy):
        trainer.begin_optimizer_step([_group(2)])
    batch = trainer.finish_optimizer_step(dataloader_position=2)
    assert not trainer.optimizer_commit_in_progress
    assert (trainer.step, trainer.version) == (1, 1)
    assert trainer.anchor() == TrainerCheckpoint(1, 1, 2)
    assert batch.items == ((0, 0), (0, 1), (1, 0), (1, 1))
    assert trainer.lineage() == (batch,)
    with pytest.raises(OptimizerBusy):
        trainer.finish_optimizer_step(dataloader_position=2)


def test_rollback_drops_the_steps_after_the_anchor() -> None:
    trainer = InMemoryTrainer(checkpoint_every=2)
    for prompt in range(3):
        trainer.optimizer_step([_group(prompt)], dataloader_position=prompt + 1)
    assert trainer.anchor().step == 2 and trainer.step == 3
    trainer.begin_optimizer_step([_group(9)])
    anchor = trainer.rollback_to_anchor()
    assert anchor.step == 2 and trainer.step == 2
    assert not trainer.optimizer_commit_in_progress
    assert [b.step for b in trainer.lineage()] == [1, 2]
    assert [b.items for b in trainer.rolled_back()] == [((2, 0), (2, 1))]
    assert (2, 0) not in trainer.trained_items()


def test_dataloader_hands_out_a_deterministic_sequence() -> None:
    plane = InMemoryDataPlane(InMemoryTrainer())
    assert [plane.next_prompt() for _ in range(4)] == [0, 1, 2, 3]
    assert plane.consumed == [0, 1, 2, 3] and plane.position == 4


def test_capture_and_restore_round_trip_through_bytes() -> None:
    trainer = InMemoryTrainer()
    plane = InMemoryDataPlane(trainer)
    for _ in range(3):
        plane.next_prompt()
    plane.push_finished(_group(2))
    plane.push_finished(_group(0))
    cut = plane.capture(ledger={"attempts": [[1, 0, "dispatched"]]})
    data = cut.to_bytes()
    assert cut.to_bytes() == data  # canonical: same cut, same bytes, same digest

    plane.next_prompt()
    plane.take_finished(5)
    restored = plane.restore_cut(data)
    assert restored == cut
    assert restored.ledger == {"attempts": [[1, 0, "dispatched"]]}
    assert plane.position == 3
    assert plane.queued() == (_group(2), _group(0))


@pytest.mark.parametrize(
    ("data", "field"),
    [
        (b'{"trainer_step": 0', "document"),
        (b"\x80", "document"),
        (b'{"trainer_step": 0, "trainer_version": 0}', "dataloader_position"),
        (
            b'{"trainer_step": 0, "trainer_version": 0, "dataloader_position": -1}',
            "dataloader_position",
        ),
        (
            b'{"trainer_step": 0, "trainer_version": 0, "dataloader_position": 1, "x": 0}',
            "x",
        ),
        (
            b'{"trainer_step": 0, "trainer_version": 0, "dataloader_position": 1,'
            b' "finished_groups": [{"prompt_id": 1}]}',
            "finished_groups.0.siblings",
        ),
    ],
)
def test_a_corrupt_cut_is_refused_and_changes_nothing(data: bytes, field: str) -> None:
    plane = InMemoryDataPlane(InMemoryTrainer())
    plane.next_prompt()
    plane.push_finished(_group(0))
    with pytest.raises(CorruptCut) as caught:
        plane.restore_cut(data)
    assert caught.value.field == field
    assert plane.position == 1 and plane.queued() == (_group(0),)


def test_a_cut_from_another_trainer_step_is_refused() -> None:
    trainer = InMemoryTrainer()
    plane = InMemoryDataPlane(trainer)
    old = plane.capture().to_bytes()
    trainer.optimizer_step([], dataloader_position=0)
    with pytest.raises(CutMismatch) as caught:
        plane.restore_cut(old)
    assert caught.value.cut == (0, 0) and caught.value.anchor == (1, 1)


def test_bootstrap_rewind_reruns_in_flight_work_without_duplicates() -> None:
    trainer = InMemoryTrainer()
    plane = InMemoryDataPlane(trainer)
    prompts = [plane.next_prompt() for _ in range(4)]  # 0..3 in flight
    plane.push_finished(_group(1))
    plane.push_finished(_group(3))
    # Step 1 trains 1 and 3 while 0 and 2 are still in flight: the anchor's low watermark is 0.
    batch = plane.train(2, in_flight=[0, 2])
    assert batch is not None and trainer.anchor() == TrainerCheckpoint(1, 1, 0)
    plane.next_prompt()  # 4, consumed after the anchor
    plane.rewind_to_anchor()
    rerun = [plane.next_prompt() for _ in range(3)]
    assert rerun == [0, 2, 4]  # 1 and 3 are already in the anchor's lineage
    trained = [item for b in trainer.lineage() for item in b.items]
    assert len(trained) == len(set(trained))
    assert prompts == [0, 1, 2, 3]


def test_train_with_an_empty_queue_does_nothing() -> None:
    trainer = InMemoryTrainer()
    assert InMemoryDataPlane(trainer).train(4) is None
    assert trainer.step == 0


def test_controller_cut_model_is_frozen_and_strict() -> None:
    cut = ControllerCut(trainer_step=0, trainer_version=0, dataloader_position=0)
    with pytest.raises(ValueError):
        cut.trainer_step = 3  # type: ignore[misc]
    assert json.loads(cut.to_bytes())["format_version"] == 1
