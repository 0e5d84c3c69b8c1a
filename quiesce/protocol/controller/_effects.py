"""What the coordinator asks the world to do: its effects (frozen slotted dataclasses).

The coordinator never performs work; it returns these, in order, and the driver (or the
model checker) carries them out. Some are *answered*: the driver reports their outcome
back as an input. The rest are fire-and-forget or informational.

| effect | answered by |
|---|---|
| `Call(participant, op, op_id, ...)` | `Reply` / `CallFailed` (same participant, op, op_id) |
| `WriteIntent(checkpoint_id, phase)` | `LocalDone(INTENT)` / `LocalFailed(INTENT)` |
| `CaptureCut(checkpoint_id, ...)` | `LocalDone(CUT)` / `LocalFailed(CUT)` |
| `Validate(checkpoint_id, ...)` | `LocalDone(VALIDATE)` / `LocalFailed(VALIDATE)` |
| `Publish(checkpoint_id)` | `LocalDone(PUBLISH)` / `LocalFailed(PUBLISH)` |
| `InspectPublished(checkpoint_id)` | `PublishInspected(checkpoint_id, verdict)` |
| `ArmTimer(key, at)` | `TimerDue(key)` at or after `at` (re-arming a key replaces it) |
| `ListSnapshots()` | `SnapshotsListed(anchor, candidates)` |
| `LoadSnapshot(snapshot_id)` | `SnapshotLoaded(...)` / `SnapshotLoadFailed(snapshot_id, reason)` |

`ClearIntent`, `WriteStaging`, `DiscardStaging`, `Quarantine`, `CancelTimer`, `Dispatch`,
`RestoreCut`, `RewindToAnchor` are performed in order and not answered.
`CloseAdmission`/`OpenAdmission`,
`SuspendDeadlines`/`ResumeDeadlines`, `Redispatch`, `Log`, `Metric`, `Outcome` and
`Stopped` report what the controller decided (the gate and the deadline registry live in
the controller's state; their timers come out as `ArmTimer`/`CancelTimer`). `RestoreOutcome`
reports how the restore at controller start (M9) ended.

Calls of the restore (M9) carry the restore's own `rs-` op id: `Call(p, RESTORE, R,
deadline, RestoreTarget(snapshot_id, digest))` (the driver loads `p`'s artifact of that
snapshot and sends it with the committed digest), `Call(p, DISCARD, R, deadline,
(rollout_id, attempt))` and `Call(p, RESUME, R, deadline)`; the replies come back as
`Reply` / `CallFailed` like every other call.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any, Literal

from quiesce.protocol._errors import LocalProtocolError
from quiesce.protocol._ids import OpId
from quiesce.protocol._messages import (
    AckRequest,
    ControlRequest,
    DiscardRequest,
    Message,
    Receipt,
    RestoreRequest,
    RetireRequest,
)
from quiesce.protocol._timers import ArmTimer, CancelTimer
from quiesce.protocol.machines import Holder, ResumeDeadlines, SuspendDeadlines

__all__ = [
    "Call",
    "CaptureCut",
    "ClearIntent",
    "CloseAdmission",
    "ControllerEffect",
    "DiscardStaging",
    "Dispatch",
    "InspectPublished",
    "ListSnapshots",
    "LoadSnapshot",
    "LocalOp",
    "Log",
    "Metric",
    "Op",
    "OpenAdmission",
    "Outcome",
    "Publish",
    "Quarantine",
    "Redispatch",
    "RestoreCut",
    "RestoreOutcome",
    "RestoreTarget",
    "RewindToAnchor",
    "Stopped",
    "Validate",
    "WriteIntent",
    "WriteStaging",
]


class Op(Enum):
    """A remote operation on a participant (the route of a `Call`)."""

    PREPARE = "prepare"
    COMMIT = "commit"
    RESUME = "resume"  # = abort (before publication) = release (after)
    RESTORE = "restore"  # payload: `RestoreTarget`
    DISCARD = "discard"  # payload: the `(rollout_id, attempt)` of the continuation
    STATUS = "status"
    ACK = "ack"  # payload: tuple of `OwedAck`
    RETIRE = "retire"  # payload: the `(rollout_id, attempt)` key


class LocalOp(Enum):
    """A step on the controller's own durable store."""

    INTENT = "intent"
    CUT = "cut"
    VALIDATE = "validate"
    PUBLISH = "publish"


# ------------------------------------------------------------------------ remote work


@dataclass(frozen=True, slots=True)
class Call:
    """Send `op` to `participant`; the call must not outlive `deadline_at` (I6).

    `op_id` is the checkpoint (or restore) id for fence operations and None for RETIRE,
    whose `payload` says what it is about. An ACK's `payload` is its batch (`OwedAck`s);
    its `op_id` is the attempt whose strict flush sent it, or None for a background drain,
    so the answer (which quotes the call's `op_id`) settles only the call that was made.
    """

    participant: str
    op: Op
    op_id: OpId | None
    deadline_at: float
    payload: Any = None

    def request(self, artifact: Callable[[OpId, str], str]) -> Message:
        """This call's wire request. `artifact(snapshot_id, participant)` is a restore's
        artifact as the wire carries it (base64 text), read only for a RESTORE; a fence
        operation without an op id is this side's bug (`LocalProtocolError`)."""
        if self.op is Op.ACK:
            return AckRequest(
                receipts=tuple(
                    Receipt(rollout_id=o.rollout_id, attempt=o.attempt, receipt=o.receipt)
                    for o in self.payload
                )
            )
        if self.op is Op.RETIRE:
            rollout_id, attempt = self.payload
            return RetireRequest(rollout_id=rollout_id, attempt=attempt)
        if self.op_id is None:
            raise LocalProtocolError(f"{self.op.value} to {self.participant!r} carries no op id")
        if self.op is Op.DISCARD:
            rollout_id, attempt = self.payload
            return DiscardRequest(op_id=self.op_id, rollout_id=rollout_id, attempt=attempt)
        if self.op is Op.RESTORE and isinstance(self.payload, RestoreTarget):
            target = self.payload
            return RestoreRequest(
                op_id=self.op_id,
                deadline_at=self.deadline_at,
                snapshot_id=target.snapshot_id,
                artifact=artifact(target.snapshot_id, self.participant),
                expected_digest=target.digest,
            )
        return ControlRequest(op_id=self.op_id, deadline_at=self.deadline_at)


@dataclass(frozen=True, slots=True)
class Dispatch:
    """Start attempt `(rollout_id, attempt)` of `group_id` on `agent` (a `begin`);
    `resume_from_turn > 0` continues a restored continuation."""

    agent: str
    group_id: str
    rollout_id: str
    attempt: int
    resume_from_turn: int = 0


@dataclass(frozen=True, slots=True)
class RestoreTarget:
    """The payload of a RESTORE call: restore `snapshot_id`, whose committed artifact of the
    called participant has `digest` (the driver loads the artifact and sends both)."""

    snapshot_id: OpId
    digest: str


@dataclass(frozen=True, slots=True)
class Redispatch:
    """Group `group_id` is being retried at `level` (`turn | sibling | prompt_group`)."""

    group_id: str
    level: str


# ------------------------------------------------------------------------ the durable store


@dataclass(frozen=True, slots=True)
class WriteIntent:
    """Write (fsync) the intent record `{checkpoint_id, phase}` (§6)."""

    checkpoint_id: OpId
    phase: Literal["preparing", "published"]


@dataclass(frozen=True, slots=True)
class ClearIntent:
    """Remove the intent record of `checkpoint_id`: it is released or aborted."""

    checkpoint_id: OpId


@dataclass(frozen=True, slots=True)
class WriteStaging:
    """Write one participant's committed artifact into the staging of `checkpoint_id`."""

    checkpoint_id: OpId
    participant: str
    digest: str
    artifact: str = ""


@dataclass(frozen=True, slots=True)
class CaptureCut:
    """Write the controller's cut into staging: the ledger, the trainer step, and (added
    by the driver, which owns it) the dataloader position."""

    checkpoint_id: OpId
    trainer_step: int
    ledger: Any = None


@dataclass(frozen=True, slots=True)
class Validate:
    """Check staging: every `(participant, digest)` of `manifest` is there and matches, and
    the topology `fingerprint` is recorded. A mismatch is answered as `artifact_mismatch`.

    `trainer_step` and `at_trainer_anchor` (the attempt was triggered by the trainer
    boundary that made the current anchor) go into the manifest: `restore_mode:
    trainer_checkpoint` selects only snapshots taken at the anchor (M9)."""

    checkpoint_id: OpId
    manifest: tuple[tuple[str, str], ...]
    fingerprint: str
    trainer_step: int = 0
    at_trainer_anchor: bool = False


@dataclass(frozen=True, slots=True)
class Publish:
    """fsync staging and rename it to published (atomic)."""

    checkpoint_id: OpId


@dataclass(frozen=True, slots=True)
class InspectPublished:
    """Look at the published path of `checkpoint_id` (the ambiguous-publish rule)."""

    checkpoint_id: OpId


@dataclass(frozen=True, slots=True)
class Quarantine:
    """Rename an unverifiable published snapshot aside, so it is never selected."""

    checkpoint_id: OpId


@dataclass(frozen=True, slots=True)
class DiscardStaging:
    """Delete the staging of an aborted `checkpoint_id`."""

    checkpoint_id: OpId


# ------------------------------------------------------------------------ restore (M9)


@dataclass(frozen=True, slots=True)
class ListSnapshots:
    """Read the trainer anchor and list every snapshot in the store (published ones, and
    quarantined or unreadable ones with their condition), answered by `SnapshotsListed`."""


@dataclass(frozen=True, slots=True)
class LoadSnapshot:
    """Read snapshot `snapshot_id`: its committed digests and the ledger of its controller
    cut, answered by `SnapshotLoaded` (or `SnapshotLoadFailed` if it cannot be read)."""

    snapshot_id: OpId


@dataclass(frozen=True, slots=True)
class RestoreCut:
    """Install the controller cut of the restored `snapshot_id` in the data plane (finished
    group queue, dataloader position); emitted before the redispatch's `Dispatch` effects."""

    snapshot_id: OpId


@dataclass(frozen=True, slots=True)
class RewindToAnchor:
    """Nothing matches the anchor: rollouts start fresh at trainer step `step`, the
    dataloader rewinds to `dataloader_position` (the lost interval reruns, counted)."""

    step: int
    dataloader_position: int = 0


@dataclass(frozen=True, slots=True)
class RestoreOutcome:
    """How the restore at controller start ended (M9).

    `result` is `snapshot` (restored `snapshot_id` under op id `op_id`), `fresh_start`,
    `bootstrap` (fresh start at step 0) or `restore_failed` (`failure` says which source
    could not be read); `intent` / `intent_action` say what happened to the checkpoint the
    last run left in flight; `rejected` lists every candidate not restored and why, newest
    first; `metrics` are the per-restore counters (`RestoreMetrics.as_dict()`).
    """

    result: Literal["snapshot", "fresh_start", "bootstrap", "restore_failed"]
    mode: str
    snapshot_id: OpId | None = None
    op_id: OpId | None = None
    intent: OpId | None = None
    intent_action: str = "none"
    rejected: tuple[tuple[str, str], ...] = ()
    failure: str = ""
    metrics: tuple[tuple[str, int], ...] = ()


# ------------------------------------------------------------------------ reports


@dataclass(frozen=True, slots=True)
class CloseAdmission:
    """`owner` closed the admission gate (M6): dispatch no new rollouts."""

    owner: Holder


@dataclass(frozen=True, slots=True)
class OpenAdmission:
    """The last holder, `owner`, released the admission gate: dispatch may resume."""

    owner: Holder


@dataclass(frozen=True, slots=True)
class Outcome:
    """The end of one checkpoint attempt (or of one retry of its pending abort/release).

    `result` is `completed | skipped | failed`; `reason` is the §4 reason; the counters are
    the consecutive failures and skips *after* this outcome.
    """

    checkpoint_id: OpId
    result: Literal["completed", "skipped", "failed"]
    reason: str
    retryable: bool
    consecutive_failures: int
    consecutive_skips: int


@dataclass(frozen=True, slots=True)
class Stopped:
    """The controller stopped (fatal cause, or more than `max_consecutive_failures`);
    `checkpoint_id` is the id the intent record leaves for the next start, if any.
    `participant` and `cause` name the last failure: whose call failed (None if no call
    did) and its cause (`timeout`, `participant_error`, ...)."""

    reason: str
    checkpoint_id: OpId | None
    participant: str | None = None
    cause: str | None = None


@dataclass(frozen=True, slots=True)
class Log:
    """A structured log line: `event` with `fields` (sorted `(key, value)` pairs)."""

    event: str
    level: Literal["debug", "info", "warning", "error"] = "info"
    fields: tuple[tuple[str, Any], ...] = ()


@dataclass(frozen=True, slots=True)
class Metric:
    """One measurement: `name` = `value`, with `tags` (sorted `(key, value)` pairs)."""

    name: str
    value: float
    tags: tuple[tuple[str, str], ...] = ()


ControllerEffect = (
    Call
    | Dispatch
    | Redispatch
    | WriteIntent
    | ClearIntent
    | WriteStaging
    | CaptureCut
    | Validate
    | Publish
    | InspectPublished
    | Quarantine
    | DiscardStaging
    | ListSnapshots
    | LoadSnapshot
    | RestoreCut
    | RewindToAnchor
    | RestoreOutcome
    | ArmTimer
    | CancelTimer
    | CloseAdmission
    | OpenAdmission
    | SuspendDeadlines
    | ResumeDeadlines
    | Outcome
    | Stopped
    | Log
    | Metric
)
"""Every effect the coordinator returns."""
