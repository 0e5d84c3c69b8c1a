"""The controller's low-level face: what a driver, a checker or a mutant needs, as
`trio.lowlevel` is to `trio`.

Who it is for:

- the driver (`quiesce.adapters`) and whoever writes another one: every effect it must
  carry out (`Call`, `WriteIntent`, `ArmTimer`, ...) and every input that reports an
  effect's outcome back (`Reply`, `CallFailed`, `LocalDone`, `TimerDue`, ...), the
  ledger's records, and the restore's plan and metrics;
- the models and the conformance kit (`quiesce.models`, `quiesce.testing`), which run the
  coordinator in a pure world and judge it: the phase work (`PHASE_OPS`, `CALL_WORK`, ...),
  the timers' keys, the restore flow;
- the mutants (`quiesce.mutants`): `CoordinatorPolicy`, the bundle of the coordinator's
  pure decisions, and the decisions themselves (`judge_capture`, `judge_restore`,
  `lower_levels`, ...), which a mutant swaps one at a time.

An embedder needs none of this: `quiesce.protocol.controller` has the coordinator, its
state, the input and effect unions and the inputs a trainer, a dataloader or a schedule
submits. These names are less stable than that face: they follow the coordinator's
internals and may change, or move, in any release. Nothing here awaits, sleeps or reads a
clock either.

>>> from quiesce.protocol import Cause
>>> from quiesce.protocol.controller.lowlevel import CoordinatorPolicy
>>> CoordinatorPolicy().classify(Cause.REPLY_LOST).reason
'timeout'
"""

from quiesce.protocol._timers import ArmTimer, CancelTimer, TimerKey, TimerKind
from quiesce.protocol.controller._background import background_timer
from quiesce.protocol.controller._capture import CaptureFacts, CaptureVerdict, judge_capture
from quiesce.protocol.controller._checkpoint_work import (
    CHECKPOINT_WORK,
    prepare_deadline_timer,
    retry_timer,
)
from quiesce.protocol.controller._effects import (
    Call,
    CaptureCut,
    ClearIntent,
    CloseAdmission,
    DiscardStaging,
    Dispatch,
    InspectPublished,
    ListSnapshots,
    LoadSnapshot,
    LocalOp,
    Log,
    Metric,
    Op,
    OpenAdmission,
    Publish,
    Quarantine,
    Redispatch,
    RestoreCut,
    RestoreOutcome,
    RestoreTarget,
    RewindToAnchor,
    Validate,
    WriteIntent,
    WriteStaging,
)
from quiesce.protocol.controller._inputs import (
    CallFailed,
    Discovered,
    LocalDone,
    LocalFailed,
    PublishInspected,
    Recovered,
    Reply,
    RolloutCompleted,
    RolloutFailed,
    SnapshotLoaded,
    SnapshotLoadFailed,
    SnapshotsListed,
    TimerDue,
)
from quiesce.protocol.controller._ledger import (
    AttemptKey,
    AttemptRecord,
    DuplicateGroup,
    GroupRecord,
    LedgerCounters,
    OwedAck,
    UnknownAttempt,
    UnknownGroup,
)
from quiesce.protocol.controller._phase_runner import (
    CALL_WORK,
    PHASE_OPS,
    backoff_s,
    call_retry_timer,
    prepare_retry_timer,
    read_reply,
)
from quiesce.protocol.controller._policy import CoordinatorPolicy, live_level, same_op_id
from quiesce.protocol.controller._recovery_levels import (
    EffectiveLevel,
    EnvironmentTraits,
    LevelPlan,
    LevelWarning,
    LoweringReason,
    UnknownEnvironment,
    lower_levels,
    topology_fingerprint,
)
from quiesce.protocol.controller._restore_flow import (
    RESTORE_WORK,
    RestoreFlow,
    restore_retry_timer,
)
from quiesce.protocol.controller._restore_plan import (
    DiscardContinuation,
    DispatchItem,
    NewGroup,
    RedispatchPlan,
    Rejection,
    RestoreMetrics,
    RestoreMode,
    RestoreVerdict,
    Retire,
    Selection,
    SelectionKind,
    SnapshotCandidate,
    SnapshotCondition,
    SourceUnreadable,
    TrainerAnchor,
    UnresolvedFinalization,
    VerdictAction,
    judge_restore,
    plan_discards,
    plan_redispatch,
    select_snapshot,
)
from quiesce.protocol.controller._state import RestoreRun, restore_active, restore_failed
from quiesce.protocol.machines import DeadlineExpired, ResumeDeadlines, SuspendDeadlines

__all__ = [
    "CALL_WORK",
    "CHECKPOINT_WORK",
    "PHASE_OPS",
    "RESTORE_WORK",
    "ArmTimer",
    "AttemptKey",
    "AttemptRecord",
    "Call",
    "CallFailed",
    "CancelTimer",
    "CaptureCut",
    "CaptureFacts",
    "CaptureVerdict",
    "ClearIntent",
    "CloseAdmission",
    "CoordinatorPolicy",
    "DeadlineExpired",
    "DiscardContinuation",
    "DiscardStaging",
    "Discovered",
    "Dispatch",
    "DispatchItem",
    "DuplicateGroup",
    "EffectiveLevel",
    "EnvironmentTraits",
    "GroupRecord",
    "InspectPublished",
    "LedgerCounters",
    "LevelPlan",
    "LevelWarning",
    "ListSnapshots",
    "LoadSnapshot",
    "LocalDone",
    "LocalFailed",
    "LocalOp",
    "Log",
    "LoweringReason",
    "Metric",
    "NewGroup",
    "Op",
    "OpenAdmission",
    "OwedAck",
    "Publish",
    "PublishInspected",
    "Quarantine",
    "Recovered",
    "Redispatch",
    "RedispatchPlan",
    "Rejection",
    "Reply",
    "RestoreCut",
    "RestoreFlow",
    "RestoreMetrics",
    "RestoreMode",
    "RestoreOutcome",
    "RestoreRun",
    "RestoreTarget",
    "RestoreVerdict",
    "ResumeDeadlines",
    "Retire",
    "RewindToAnchor",
    "RolloutCompleted",
    "RolloutFailed",
    "Selection",
    "SelectionKind",
    "SnapshotCandidate",
    "SnapshotCondition",
    "SnapshotLoadFailed",
    "SnapshotLoaded",
    "SnapshotsListed",
    "SourceUnreadable",
    "SuspendDeadlines",
    "TimerDue",
    "TimerKey",
    "TimerKind",
    "TrainerAnchor",
    "UnknownAttempt",
    "UnknownEnvironment",
    "UnknownGroup",
    "UnresolvedFinalization",
    "Validate",
    "VerdictAction",
    "WriteIntent",
    "WriteStaging",
    "background_timer",
    "backoff_s",
    "call_retry_timer",
    "judge_capture",
    "judge_restore",
    "live_level",
    "lower_levels",
    "plan_discards",
    "plan_redispatch",
    "prepare_deadline_timer",
    "prepare_retry_timer",
    "read_reply",
    "restore_active",
    "restore_failed",
    "restore_retry_timer",
    "retry_timer",
    "same_op_id",
    "select_snapshot",
    "topology_fingerprint",
]
