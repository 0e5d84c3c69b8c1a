"""The capture rule: may the controller cut now, flush its ACKs again, or must it skip?

What lives here: `judge_capture`, the decision `capturing` takes before writing the cut
(PROTOCOL.md M1), from three facts. What it does not know: where the facts come from or
how the cut is written; the coordinator gathers them and does what the verdict says.

- the trainer moved since the attempt started (an optimizer step landed between commit and
  capture, S9): skip as `trainer_state_changed` (the same id is aborted);
- ACKs are still pending in the ledger (accepted by an agent, not yet recorded, S7): flush
  them again inside the cut, once; still pending after that: skip as `acks_pending`;
- else: capture.

>>> judge_capture(CaptureFacts(trainer_moved=False, acks_pending=True, reflushed=False))
<CaptureVerdict.REFLUSH: 'reflush'>
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

__all__ = ["CaptureFacts", "CaptureVerdict", "judge_capture"]


class CaptureVerdict(Enum):
    """What `capturing` does next."""

    CAPTURE = "capture"
    TRAINER_MOVED = "trainer_state_changed"  # S9: skip, abort the same id
    REFLUSH = "reflush"  # S7: flush the outbox again, inside the cut
    ACKS_PENDING = "acks_pending"  # S7: still pending after the re-flush: skip


@dataclass(frozen=True, slots=True)
class CaptureFacts:
    """What the capture decision reads: did the trainer move (or is an optimizer step in
    progress), are ACKs pending in the ledger, was the outbox already flushed again."""

    trainer_moved: bool
    acks_pending: bool
    reflushed: bool


def judge_capture(facts: CaptureFacts) -> CaptureVerdict:
    """The capture rule (S7, S9), in the order it is checked."""
    if facts.trainer_moved:
        return CaptureVerdict.TRAINER_MOVED
    if facts.acks_pending:
        return CaptureVerdict.ACKS_PENDING if facts.reflushed else CaptureVerdict.REFLUSH
    return CaptureVerdict.CAPTURE
