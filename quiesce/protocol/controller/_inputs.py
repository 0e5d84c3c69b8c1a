"""What the world tells the coordinator: its inputs (frozen slotted dataclasses).

Each input says where it comes from: the controller's own timers (`TimerDue`), the
schedule and the trainer (`PeriodElapsed`, `TrainerBoundary`, `OptimizerStep*`,
`TrainSwitch*`, `WeightSync*`), participants (`Reply`, `CallFailed`), the controller's
durable store (`LocalDone`, `LocalFailed`, `PublishInspected`), the rollout flow
(`GroupOpened`, `RolloutCompleted`, `RolloutFailed`, `GroupTrained`), setup
(`Discovered`, `Recovered`), and the restore at controller start (M9), which asks the store
and the trainer: `SnapshotsListed` answers `ListSnapshots`, `SnapshotLoaded` /
`SnapshotLoadFailed` answer `LoadSnapshot`. Time is never inside an input: it is the `now`
argument of `Coordinator.step`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, get_args

from quiesce.fsm import QuiesceError
from quiesce.protocol._causes import Cause
from quiesce.protocol._ids import OpId
from quiesce.protocol._messages import Capabilities
from quiesce.protocol._timers import TimerKey
from quiesce.protocol.controller._effects import LocalOp, Op
from quiesce.protocol.controller._ledger import Ledger
from quiesce.protocol.controller._restore_plan import (
    SnapshotCandidate,
    SourceUnreadable,
    TrainerAnchor,
)
from quiesce.protocol.machines import PublishedState

__all__ = [
    "CallFailed",
    "ControllerInput",
    "Discovered",
    "GroupOpened",
    "GroupTrained",
    "LocalDone",
    "LocalFailed",
    "OptimizerStepBegin",
    "OptimizerStepEnd",
    "PeriodElapsed",
    "PublishInspected",
    "Recovered",
    "Reply",
    "RolloutCompleted",
    "RolloutFailed",
    "SnapshotLoadFailed",
    "SnapshotLoaded",
    "SnapshotsListed",
    "TimerDue",
    "TrainSwitchBegin",
    "TrainSwitchEnd",
    "TrainerBoundary",
    "UnknownInput",
    "WeightSyncBegin",
    "WeightSyncEnd",
]


@dataclass(frozen=True, slots=True)
class TimerDue:
    """A timer the coordinator armed (`ArmTimer(name, at)`) fired; `name` is its key, handed
    back unread."""

    name: TimerKey


@dataclass(frozen=True, slots=True)
class PeriodElapsed:
    """The periodic schedule (`snapshot_attempt_interval_s`) asks for a snapshot."""


@dataclass(frozen=True, slots=True)
class TrainerBoundary:
    """The trainer finished step `step`; at a multiple of `save_period` its checkpoint is a
    durable anchor and a snapshot is triggered there."""

    step: int


@dataclass(frozen=True, slots=True)
class OptimizerStepBegin:
    """The optimizer started committing a step (a snapshot now would be torn)."""


@dataclass(frozen=True, slots=True)
class OptimizerStepEnd:
    """The optimizer committed step `step`: the trainer state changed (S9)."""

    step: int


@dataclass(frozen=True, slots=True)
class TrainSwitchBegin:
    """The colocated train switch starts: it holds admission and the deadline clocks."""


@dataclass(frozen=True, slots=True)
class TrainSwitchEnd:
    """The train switch ends: it releases only its own holds (S2)."""


@dataclass(frozen=True, slots=True)
class WeightSyncBegin:
    """A weight sync starts: it holds admission."""


@dataclass(frozen=True, slots=True)
class WeightSyncEnd:
    """The weight sync ends: it releases only its own hold."""


@dataclass(frozen=True, slots=True)
class Reply:
    """`participant` answered the call `(op, op_id)` with `result`, a parsed wire model
    (`PrepareReply`, `CommitReply`, `ResumeReply`, `AckReply`, `RetireReply`,
    `ErrorReply`, ...). `op_id` is the id the *call* carried; the result's own id must match
    it or the reply names the wrong id (`invariant_error`). `payload` is the call's own
    (`Call.payload`), as `CallFailed` has it: a retire's answer names its attempt key there."""

    participant: str
    op: Op
    op_id: OpId | None
    result: Any
    payload: Any = None


@dataclass(frozen=True, slots=True)
class CallFailed:
    """The call `(op, op_id)` to `participant` got no usable answer; `cause` says why
    (classified by `_causes.CAUSES`, never by exception class). `payload` is the call's own
    (`Call.payload`): a failed retire names its attempt key there, so it can be sent again."""

    participant: str
    op: Op
    op_id: OpId | None
    cause: Cause
    payload: Any = None


@dataclass(frozen=True, slots=True)
class LocalDone:
    """The durable store finished `op` for `checkpoint_id`."""

    op: LocalOp
    checkpoint_id: OpId


@dataclass(frozen=True, slots=True)
class LocalFailed:
    """The durable store failed `op` for `checkpoint_id` (`io_error`, `artifact_mismatch`)."""

    op: LocalOp
    checkpoint_id: OpId
    cause: Cause


@dataclass(frozen=True, slots=True)
class PublishInspected:
    """What `InspectPublished(checkpoint_id)` found at the published path."""

    checkpoint_id: OpId
    verdict: PublishedState


@dataclass(frozen=True, slots=True)
class GroupOpened:
    """The dataloader produced prompt group `group_id` of `size` siblings for
    `environment` (the agent server that runs it)."""

    group_id: str
    size: int
    environment: str
    prompt: str = ""


@dataclass(frozen=True, slots=True)
class RolloutCompleted:
    """Attempt `(rollout_id, attempt)` finished on its agent with `receipt`.

    `agent` is the agent that holds the result (None: the agent of its group in the
    ledger). The coordinator needs it to ACK a completion its ledger does not own (work of
    an interval a restore rolled back): that one is ACKed and dropped, never trained."""

    rollout_id: str
    attempt: int
    receipt: str
    agent: str | None = None


@dataclass(frozen=True, slots=True)
class RolloutFailed:
    """Attempt `(rollout_id, attempt)` failed on its agent (its begin was refused, or /run
    errored); it is retried at its environment's live level."""

    rollout_id: str
    attempt: int


@dataclass(frozen=True, slots=True)
class GroupTrained:
    """The trainer durably has group `group_id`."""

    group_id: str


@dataclass(frozen=True, slots=True)
class Discovered:
    """Discovery answers (§2): every participant's `Capabilities` (or raw mapping), and
    which resources each agent's rollouts depend on (None: all of them)."""

    capabilities: tuple[Capabilities | Mapping[str, Any], ...]
    depends_on: tuple[tuple[str, tuple[str, ...]], ...] | None = None


@dataclass(frozen=True, slots=True)
class Recovered:
    """Controller start: the intent record found (if any) and the trainer anchor step.

    Starts the restore (M9): the in-flight id is finished first (released or aborted by the
    ambiguous-publish rule), then `ListSnapshots`, ... until the restore is `idle` (or
    `restore_failed`). Checkpoint triggers wait until then."""

    intent: OpId | None
    anchor_step: int | None


@dataclass(frozen=True, slots=True)
class SnapshotsListed:
    """The answer to `ListSnapshots`: the trainer anchor (`None`: no trainer checkpoint yet,
    step 0) and every snapshot in the store, or `SourceUnreadable` for the one that cannot
    be read (the only way a restore fails, `restore_failed`)."""

    anchor: TrainerAnchor | SourceUnreadable | None
    candidates: tuple[SnapshotCandidate, ...] | SourceUnreadable


@dataclass(frozen=True, slots=True)
class SnapshotLoaded:
    """The answer to `LoadSnapshot(snapshot_id)`: the committed `(participant, digest)`
    pairs of its manifest, the ledger of its controller cut, and which of that ledger's
    groups the trainer durably has (`trained`, to settle groups caught mid-finalize)."""

    snapshot_id: OpId
    digests: tuple[tuple[str, str], ...]
    ledger: Ledger
    trained: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class SnapshotLoadFailed:
    """`LoadSnapshot(snapshot_id)` could not read it (`reason`: `corrupt`, `half_written`,
    ...): the snapshot is rejected and an older one is tried."""

    snapshot_id: OpId
    reason: str


ControllerInput = (
    TimerDue
    | PeriodElapsed
    | TrainerBoundary
    | OptimizerStepBegin
    | OptimizerStepEnd
    | TrainSwitchBegin
    | TrainSwitchEnd
    | WeightSyncBegin
    | WeightSyncEnd
    | Reply
    | CallFailed
    | LocalDone
    | LocalFailed
    | PublishInspected
    | GroupOpened
    | RolloutCompleted
    | RolloutFailed
    | GroupTrained
    | Discovered
    | Recovered
    | SnapshotsListed
    | SnapshotLoaded
    | SnapshotLoadFailed
)
"""Every input the coordinator accepts."""


class UnknownInput(QuiesceError, TypeError):
    """`Coordinator.step` was given `input`, which is none of its inputs (`ControllerInput`).

    A `TypeError` too: it is a wrong argument. A driver logs it and drops the input (the
    state is unchanged). Values such as the restore plan's `NewGroup` are not inputs: a new
    prompt group is opened with `GroupOpened`.
    """

    def __init__(self, input: object) -> None:
        self.input = input
        self.accepted = tuple(kind.__name__ for kind in get_args(ControllerInput))
        super().__init__(
            f"the coordinator has no input {type(input).__name__!r}: pass one of "
            f"{', '.join(self.accepted)} (a new prompt group is a GroupOpened)"
        )
