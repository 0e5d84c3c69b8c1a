"""The controller's durable intent record and epoch (PROTOCOL.md §6).

What lives here: two small files in the controller's state directory, each replaced
atomically (tmp + fsync + rename + directory fsync):

- `intent.json` -- `{checkpoint_id, phase}` of the checkpoint in flight. Written before
  prepare, updated at publish, deleted after release or abort. At start the controller
  reads it and finishes that id (release if published and verified, else abort) before
  anything else.
- `epoch.json` -- the controller epoch, which grows at every start so ids minted by this
  process order after every id of an earlier one.

What it does not know: what to do about an intent. A record that cannot be parsed is a
`CorruptIntent` naming the file and field; it is never silently treated as "no intent",
because that would leave participants fenced to an id nobody finishes (S18).
"""

from __future__ import annotations

import json
import os
from enum import Enum
from pathlib import Path
from typing import Annotated, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from quiesce.adapters._durable import atomic_write, fsync_dir, make_dirs
from quiesce.adapters._snapshot_store import CheckpointIdText, parse_checkpoint_id
from quiesce.fsm import QuiesceError

__all__ = ["ControllerJournal", "CorruptIntent", "EpochRecord", "IntentPhase", "StoredIntent"]

M = TypeVar("M", bound=BaseModel)

INTENT_NAME = "intent.json"
EPOCH_NAME = "epoch.json"


class IntentPhase(Enum):
    """How far the checkpoint in flight got; the restart decision still inspects the store."""

    PREPARING = "preparing"  # written before the first prepare call
    PUBLISHING = "publishing"  # written just before the rename into published/
    RELEASING = "releasing"  # published; resume pending (release_pending)
    ABORTING = "aborting"  # not published; abort pending (abort_pending)


class StoredIntent(BaseModel):
    """The checkpoint in flight."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    format_version: Literal[1] = 1
    checkpoint_id: CheckpointIdText
    phase: IntentPhase


class EpochRecord(BaseModel):
    """The newest controller epoch handed out."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    format_version: Literal[1] = 1
    epoch: Annotated[int, Field(ge=0)]


class CorruptIntent(QuiesceError):
    """A controller state file exists but cannot be read: `path`, `field` and `reason` say how.

    Fix: inspect the file; if the run is known to be clean, delete it by hand.
    """

    def __init__(self, path: Path, field: str, reason: str) -> None:
        self.path = path
        self.field = field
        self.reason = reason
        super().__init__(f"controller state file {path} is corrupt [{field}]: {reason}")


class ControllerJournal:
    """The intent record and epoch under `state_dir` (created if missing).

    >>> import tempfile
    >>> state = ControllerJournal(tempfile.mkdtemp())
    >>> state.next_epoch(), state.next_epoch()
    (1, 2)
    >>> _ = state.write_intent("ck-2-1-step0", IntentPhase.PREPARING)
    >>> state.read_intent().phase
    <IntentPhase.PREPARING: 'preparing'>
    >>> state.clear_intent(); state.read_intent() is None
    True
    """

    def __init__(self, state_dir: str | os.PathLike[str]) -> None:
        self.state_dir = Path(state_dir)
        make_dirs(self.state_dir)
        self.intent_path = self.state_dir / INTENT_NAME
        self.epoch_path = self.state_dir / EPOCH_NAME

    def read_intent(self) -> StoredIntent | None:
        """The checkpoint in flight, or None if none; `CorruptIntent` if unreadable."""
        return _read(self.intent_path, StoredIntent)

    def write_intent(self, checkpoint_id: str, phase: IntentPhase) -> StoredIntent:
        """Durably record that `checkpoint_id` is at `phase` (replaces any earlier record)."""
        parse_checkpoint_id(checkpoint_id)  # a typed BadCheckpointId, not a pydantic error
        record = StoredIntent(checkpoint_id=checkpoint_id, phase=phase)
        atomic_write(self.intent_path, _dump(record))
        return record

    def clear_intent(self) -> None:
        """Durably forget the intent (after release or abort); a no-op if there is none."""
        try:
            self.intent_path.unlink()
        except FileNotFoundError:
            return
        fsync_dir(self.state_dir)

    def epoch(self) -> int:
        """The newest epoch handed out (0 before the first `next_epoch`)."""
        record = _read(self.epoch_path, EpochRecord)
        return 0 if record is None else record.epoch

    def next_epoch(self) -> int:
        """Durably increment the epoch and return it; call once per controller start."""
        epoch = self.epoch() + 1
        atomic_write(self.epoch_path, _dump(EpochRecord(epoch=epoch)))
        return epoch


def _dump(record: BaseModel) -> bytes:
    return (json.dumps(record.model_dump(mode="json"), sort_keys=True) + "\n").encode()


def _read(path: Path, model: type[M]) -> M | None:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        document = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CorruptIntent(path, "document", f"not valid JSON ({error})") from None
    try:
        return model.model_validate(document)
    except ValidationError as error:
        first = error.errors()[0]
        field = ".".join(str(part) for part in first["loc"]) or "document"
        raise CorruptIntent(path, field, first["msg"]) from None
