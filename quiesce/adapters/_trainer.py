"""The trainer and the controller's data plane: interfaces, and in-memory implementations.

What lives here: the trainer's anchor (step and weight version of its last checkpoint), its
optimizer steps and the lineage of batches it trained; the controller's dataloader
position, its queue of finished prompt groups, and the *controller cut* a checkpoint
captures (queue + ledger + dataloader position). What it does not know: rollouts in
flight -- the coordinator's recovery ledger travels through the cut as an opaque JSON value.

The lineage is the independent oracle of PROTOCOL.md §8: it records which `(prompt,
sibling)` went into which trained batch, and a restore's `rollback_to_anchor` drops the
batches trained after the anchor, exactly as a trainer restarting from its checkpoint
would. A duplicated item is one `(prompt, sibling)` in two batches of the final lineage.

Dataloader positions: prompt ids are the integers 0, 1, 2, ... in order. The anchor
records the *low watermark* -- the smallest consumed prompt not yet trained -- so a
bootstrap restart (no snapshot matches) rewinds there and re-consumes every prompt that
was in flight, skipping the ones the anchor's lineage already trained.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Annotated, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError

from quiesce.fsm import QuiesceError

__all__ = [
    "ControllerCut",
    "CorruptCut",
    "CutMismatch",
    "DataPlane",
    "FinishedGroup",
    "InMemoryDataPlane",
    "InMemoryTrainer",
    "OptimizerBusy",
    "TrainedBatch",
    "Trainer",
    "TrainerCheckpoint",
]

Item = tuple[int, int]
"""`(prompt_id, sibling)`: one rollout's identity within the training data."""


class CorruptCut(QuiesceError):
    """Bytes given to `restore_cut` are not a valid controller cut; `field` names the problem."""

    def __init__(self, field: str, reason: str) -> None:
        self.field = field
        self.reason = reason
        super().__init__(f"controller cut is corrupt [{field}]: {reason}")


class CutMismatch(QuiesceError):
    """A valid cut was taken at another trainer step/version than the trainer's anchor."""

    def __init__(self, cut: tuple[int, int], anchor: tuple[int, int]) -> None:
        self.cut = cut
        self.anchor = anchor
        super().__init__(
            f"controller cut was taken at trainer (step, version) {cut}, but the trainer is "
            f"anchored at {anchor}: select a snapshot that matches the anchor"
        )


class OptimizerBusy(QuiesceError):
    """An optimizer step was begun while another one is still committing."""

    def __init__(self, step: int) -> None:
        self.step = step
        super().__init__(f"optimizer step {step + 1} is already committing; finish it first")


# --------------------------------------------------------------------------- values


@dataclass(frozen=True, slots=True)
class TrainerCheckpoint:
    """The trainer's last checkpoint: a restore must match its step and version."""

    step: int
    version: int
    dataloader_position: int
    """Low watermark at the anchor: every prompt below it is trained in the anchor's lineage."""


@dataclass(frozen=True, slots=True)
class TrainedBatch:
    """One optimizer step: the weights it produced and the items it consumed."""

    step: int
    version: int
    items: tuple[Item, ...]


class FinishedGroup(BaseModel):
    """A prompt group whose G siblings are sealed, waiting in the queue to be trained."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    prompt_id: Annotated[int, Field(ge=0)]
    siblings: tuple[Annotated[int, Field(ge=0)], ...]

    def items(self) -> tuple[Item, ...]:
        """The `(prompt, sibling)` items this group trains."""
        return tuple((self.prompt_id, sibling) for sibling in self.siblings)


class ControllerCut(BaseModel):
    """What the controller captures into a snapshot (PROTOCOL.md M1 `capturing`).

    `ledger` is the coordinator's recovery ledger, opaque here. `to_bytes`/`restore_cut`
    are the snapshot store's artifact format.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    format_version: Literal[1] = 1
    trainer_step: Annotated[int, Field(ge=0)]
    trainer_version: Annotated[int, Field(ge=0)]
    dataloader_position: Annotated[int, Field(ge=0)]
    dataloader_skip: tuple[Annotated[int, Field(ge=0)], ...] = ()
    finished_groups: tuple[FinishedGroup, ...] = ()
    ledger: JsonValue = None

    def to_bytes(self) -> bytes:
        """Canonical JSON: equal cuts give equal bytes (and equal digests)."""
        return json.dumps(self.model_dump(mode="json"), sort_keys=True).encode()


# --------------------------------------------------------------------------- interfaces


class Trainer(Protocol):
    """What the controller asks of the trainer."""

    @property
    def step(self) -> int:
        """Optimizer steps done so far."""

    @property
    def version(self) -> int:
        """The version of the weights the trainer holds."""

    @property
    def optimizer_commit_in_progress(self) -> bool:
        """An optimizer step is being committed (a checkpoint skip precondition)."""

    def anchor(self) -> TrainerCheckpoint | None:
        """The trainer's last checkpoint, or None if it has none (skip `no_trainer_anchor`)."""

    def begin_optimizer_step(self, groups: Sequence[FinishedGroup]) -> None:
        """Start training `groups` into the next step; commit is in progress until finish."""

    def finish_optimizer_step(self, *, dataloader_position: int) -> TrainedBatch:
        """Commit the step begun last; the anchor moves to it and records the position."""

    def rollback_to_anchor(self) -> TrainerCheckpoint:
        """Forget every step after the anchor (a trainer restarted from its checkpoint)."""

    def lineage(self) -> tuple[TrainedBatch, ...]:
        """The batches that count: trained and not rolled back, oldest first."""


class DataPlane(Protocol):
    """The controller's side of the data: dataloader, finished-group queue, cut."""

    @property
    def position(self) -> int:
        """Index of the next fresh prompt the dataloader hands out."""

    def next_prompt(self) -> int:
        """Consume and return the next prompt id."""

    def push_finished(self, group: FinishedGroup) -> None:
        """Queue a group whose siblings are all sealed."""

    def take_finished(self, max_groups: int) -> tuple[FinishedGroup, ...]:
        """Dequeue up to `max_groups` groups, oldest first, for one optimizer step."""

    def capture(self, ledger: JsonValue = None) -> ControllerCut:
        """The controller cut at this instant, with the coordinator's `ledger` inside."""

    def restore_cut(self, data: bytes) -> ControllerCut:
        """Validate a captured cut and make it the current state; typed errors on bad input."""


# --------------------------------------------------------------------------- in memory


class InMemoryTrainer:
    """A trainer that only records: steps, versions, anchors, and the lineage.

    With `checkpoint_every=1` (the default) the trainer checkpoints after every step, so
    the anchor is always the latest step.

    >>> trainer = InMemoryTrainer()
    >>> trainer.anchor()
    TrainerCheckpoint(step=0, version=0, dataloader_position=0)
    >>> trainer.begin_optimizer_step([FinishedGroup(prompt_id=0, siblings=(0, 1))])
    >>> trainer.optimizer_commit_in_progress
    True
    >>> trainer.finish_optimizer_step(dataloader_position=1).items
    ((0, 0), (0, 1))
    >>> trainer.anchor().step
    1
    """

    def __init__(self, *, checkpoint_every: int = 1) -> None:
        if checkpoint_every < 1:
            raise ValueError(f"checkpoint_every must be >= 1, got {checkpoint_every}")
        self.checkpoint_every = checkpoint_every
        self._batches: list[TrainedBatch] = []
        self._rolled_back: list[TrainedBatch] = []
        self._anchor = TrainerCheckpoint(0, 0, 0)
        self._anchor_batches = 0
        self._pending: tuple[Item, ...] | None = None

    @property
    def step(self) -> int:
        """Optimizer steps done so far (after rollbacks)."""
        return len(self._batches)

    @property
    def version(self) -> int:
        """Weights version: one per optimizer step in this model."""
        return len(self._batches)

    @property
    def optimizer_commit_in_progress(self) -> bool:
        """True between `begin_optimizer_step` and `finish_optimizer_step`."""
        return self._pending is not None

    def anchor(self) -> TrainerCheckpoint:
        """The last trainer checkpoint (step 0 at bootstrap)."""
        return self._anchor

    def begin_optimizer_step(self, groups: Sequence[FinishedGroup]) -> None:
        """Start committing a step over `groups`."""
        if self._pending is not None:
            raise OptimizerBusy(self.step)
        self._pending = tuple(item for group in groups for item in group.items())

    def finish_optimizer_step(self, *, dataloader_position: int) -> TrainedBatch:
        """Commit the step; checkpoint (move the anchor) every `checkpoint_every` steps."""
        if self._pending is None:
            raise OptimizerBusy(self.step)
        step = self.step + 1
        batch = TrainedBatch(step, step, self._pending)
        self._pending = None
        self._batches.append(batch)
        if step % self.checkpoint_every == 0:
            self._anchor = TrainerCheckpoint(step, step, dataloader_position)
            self._anchor_batches = len(self._batches)
        return batch

    def optimizer_step(
        self, groups: Sequence[FinishedGroup], *, dataloader_position: int
    ) -> TrainedBatch:
        """`begin_optimizer_step` and `finish_optimizer_step` in one go."""
        self.begin_optimizer_step(groups)
        return self.finish_optimizer_step(dataloader_position=dataloader_position)

    def rollback_to_anchor(self) -> TrainerCheckpoint:
        """Drop the steps after the anchor (and any step being committed)."""
        self._rolled_back.extend(self._batches[self._anchor_batches :])
        del self._batches[self._anchor_batches :]
        self._pending = None
        return self._anchor

    def lineage(self) -> tuple[TrainedBatch, ...]:
        """The batches trained and not rolled back, oldest first."""
        return tuple(self._batches)

    def rolled_back(self) -> tuple[TrainedBatch, ...]:
        """Batches a rollback discarded, in the order they were discarded."""
        return tuple(self._rolled_back)

    def trained_items(self) -> frozenset[Item]:
        """Every `(prompt, sibling)` in the lineage."""
        return frozenset(item for batch in self._batches for item in batch.items)


class InMemoryDataPlane:
    """The controller's dataloader and finished-group queue, with capture and restore.

    >>> plane = InMemoryDataPlane(InMemoryTrainer())
    >>> plane.next_prompt(), plane.next_prompt()
    (0, 1)
    >>> plane.push_finished(FinishedGroup(prompt_id=1, siblings=(0, 1)))
    >>> cut = plane.capture(ledger={"attempts": []})
    >>> (cut.dataloader_position, len(cut.finished_groups))
    (2, 1)
    """

    def __init__(self, trainer: InMemoryTrainer) -> None:
        self.trainer = trainer
        self._position = 0
        self._skip: set[int] = set()
        self._queue: deque[FinishedGroup] = deque()
        self.consumed: list[int] = []
        """Every prompt handed out, in order, across rewinds (input to the §8 oracle)."""

    @property
    def position(self) -> int:
        """Index of the next fresh prompt."""
        return self._position

    def next_prompt(self) -> int:
        """Consume the next prompt, skipping prompts a rewind found already trained."""
        while self._position in self._skip:
            self._skip.discard(self._position)
            self._position += 1
        prompt = self._position
        self._position += 1
        self.consumed.append(prompt)
        return prompt

    def push_finished(self, group: FinishedGroup) -> None:
        """Queue `group` for training."""
        self._queue.append(group)

    def take_finished(self, max_groups: int) -> tuple[FinishedGroup, ...]:
        """Dequeue up to `max_groups` groups, oldest first."""
        count = min(max_groups, len(self._queue))
        return tuple(self._queue.popleft() for _ in range(count))

    def queued(self) -> tuple[FinishedGroup, ...]:
        """The queue's contents, oldest first."""
        return tuple(self._queue)

    def low_watermark(self, in_flight: Iterable[int]) -> int:
        """The smallest prompt that is consumed but not trained (queued or `in_flight`).

        This is what the trainer anchor records, so a bootstrap rewind re-consumes it.
        """
        pending = [group.prompt_id for group in self._queue]
        pending.extend(in_flight)
        return min(pending, default=self._position)

    def train(self, max_groups: int, *, in_flight: Iterable[int] = ()) -> TrainedBatch | None:
        """Train up to `max_groups` queued groups in one optimizer step (None if empty)."""
        groups = self.take_finished(max_groups)
        if not groups:
            return None
        self.trainer.begin_optimizer_step(groups)
        return self.trainer.finish_optimizer_step(dataloader_position=self.low_watermark(in_flight))

    def capture(self, ledger: JsonValue = None) -> ControllerCut:
        """The controller cut now: trainer step/version, dataloader, queue, `ledger`."""
        return ControllerCut(
            trainer_step=self.trainer.step,
            trainer_version=self.trainer.version,
            dataloader_position=self._position,
            dataloader_skip=tuple(sorted(self._skip)),
            finished_groups=tuple(self._queue),
            ledger=ledger,
        )

    def restore_cut(self, data: bytes) -> ControllerCut:
        """Validate `data` and adopt its dataloader and queue; the trainer must match it.

        Raises `CorruptCut` (naming the field) for bad bytes and `CutMismatch` when the cut
        was taken at another trainer step or version; in both cases nothing changes.
        """
        cut = _parse_cut(data)
        actual = (self.trainer.step, self.trainer.version)
        if (cut.trainer_step, cut.trainer_version) != actual:
            raise CutMismatch((cut.trainer_step, cut.trainer_version), actual)
        self._position = cut.dataloader_position
        self._skip = set(cut.dataloader_skip)
        self._queue = deque(cut.finished_groups)
        return cut

    def rewind_to_anchor(self) -> TrainerCheckpoint:
        """Bootstrap (no snapshot matches): roll the trainer back to its anchor and rewind
        the dataloader to the anchor's low watermark, skipping prompts already trained.

        The queue is emptied: its groups were consumed after the low watermark, so they
        come round again (counted as rerun by the caller).
        """
        anchor = self.trainer.rollback_to_anchor()
        trained = {prompt for prompt, _ in self.trainer.trained_items()}
        self._position = anchor.dataloader_position
        self._skip = {prompt for prompt in trained if prompt >= anchor.dataloader_position}
        self._queue.clear()
        return anchor


def _parse_cut(data: bytes) -> ControllerCut:
    try:
        document = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CorruptCut("document", f"not valid JSON ({error})") from None
    try:
        return ControllerCut.model_validate(document)
    except ValidationError as error:
        first = error.errors()[0]
        field = ".".join(str(part) for part in first["loc"]) or "document"
        raise CorruptCut(field, first["msg"]) from None
