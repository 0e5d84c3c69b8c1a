"""Where quiesce touches the world: clocks, the snapshot store, the controller's durable
intent, and the trainer / data-plane interfaces the driver executes effects against.

Nothing here decides protocol behaviour; the pure core in `quiesce.protocol` does.

>>> from quiesce.adapters import SnapshotStore, VirtualClock
"""

import importlib
from typing import TYPE_CHECKING, Any

from quiesce.adapters._clock import (
    Clock,
    ClockEvent,
    ClockStopped,
    Lock,
    Queue,
    RealClock,
    TaskGroup,
    UnmanagedTask,
    VirtualClock,
    VirtualDeadlock,
)
from quiesce.adapters._controller import (
    CompletionHook,
    PollCompletions,
    WiringError,
    build_controller,
)
from quiesce.adapters._driver import (
    Companion,
    Driver,
    DriverError,
    Observer,
    RestoreReport,
    configure_logging,
)
from quiesce.adapters._fence_log import (
    FENCE_LOG_FORMAT,
    FENCE_LOG_VERSION,
    FenceLogHeader,
    FenceLogLine,
    FenceLogSink,
    FenceView,
    FileFenceLog,
    MemoryFenceLog,
    TeeFenceLog,
)
from quiesce.adapters._host_journal import (
    FileJournal,
    ForeignJournal,
    JournalCorrupt,
    JournalSink,
    MemoryJournal,
)
from quiesce.adapters._in_memory import (
    CALL_FAULTS,
    CONTROL_OPS,
    FaultKind,
    Faults,
    InMemoryFleet,
    InMemoryParticipant,
)
from quiesce.adapters._intent import (
    ControllerJournal,
    CorruptIntent,
    EpochRecord,
    IntentPhase,
    StoredIntent,
)
from quiesce.adapters._ledger_codec import (
    CorruptLedger,
    ledger_from_json,
    ledger_to_json,
    ledger_to_text,
)
from quiesce.adapters._metrics import (
    METRICS,
    MetricHook,
    MetricPoint,
    MetricSpec,
    MetricsUnavailable,
    OpenTelemetryMetrics,
    metric_point,
)
from quiesce.adapters._participant_api import (
    REPLY_MODELS,
    CallFailedError,
    CompletionsReply,
    Participant,
)
from quiesce.adapters._participant_host import (
    DEDUPED_OPS,
    HostRef,
    HostStopped,
    NoJournal,
    ParticipantHost,
    PolicyService,
    ResourcesService,
    WorkConfig,
    dedupe_key,
    random_incarnation,
    secret_incarnation,
)
from quiesce.adapters._snapshot_store import (
    FORMAT_VERSION,
    MANIFEST_NAME,
    AlreadyPublished,
    ArtifactEntry,
    ArtifactMismatch,
    BadArtifactName,
    BadCheckpointId,
    CorruptSnapshot,
    Inspection,
    LoadedSnapshot,
    Manifest,
    NotStaged,
    PruneResult,
    PublishConflict,
    SnapshotNotFound,
    SnapshotStore,
    SnapshotStoreError,
    Staging,
    StoreUnreadable,
    parse_checkpoint_id,
)
from quiesce.adapters._state_dir import StateDirBusy, StateDirLock, StateDirUnusable
from quiesce.adapters._store_effects import CUT_ARTIFACT, artifact_name
from quiesce.adapters._trainer import (
    ControllerCut,
    CorruptCut,
    CutMismatch,
    DataPlane,
    FinishedGroup,
    InMemoryDataPlane,
    InMemoryTrainer,
    OptimizerBusy,
    TrainedBatch,
    Trainer,
    TrainerCheckpoint,
)

if TYPE_CHECKING:
    from quiesce.adapters._http_client import HttpParticipant
    from quiesce.adapters._http_data_plane import (
        DATA_PREFIX,
        DataEvent,
        GenerateRequest,
        HttpPolicyService,
        HttpResourcesService,
        MutateRequest,
        ServiceUnusable,
        connect_services,
    )
    from quiesce.adapters._http_server import (
        API_PREFIX,
        DEFAULT_MAX_BODY_BYTES,
        REQUEST_MODELS,
        RESET_PATH,
        ROUTES,
        WireError,
        configure_server_logging,
        create_app,
        create_resettable_app,
        participant_lifespan,
        status_of,
    )
    from quiesce.adapters._ray import (
        ParticipantActor,
        RayParticipant,
        RayUnavailable,
        spawn_ray_participant,
    )

# Name -> the module defining it, for the names imported on first use: the HTTP and Ray
# adapters import httpx and starlette (or ray), which a simulated run never needs.
_LAZY = {
    **dict.fromkeys(("HttpParticipant",), "quiesce.adapters._http_client"),
    **dict.fromkeys(
        (
            "DATA_PREFIX",
            "DataEvent",
            "GenerateRequest",
            "HttpPolicyService",
            "HttpResourcesService",
            "MutateRequest",
            "ServiceUnusable",
            "connect_services",
        ),
        "quiesce.adapters._http_data_plane",
    ),
    **dict.fromkeys(
        (
            "API_PREFIX",
            "DEFAULT_MAX_BODY_BYTES",
            "REQUEST_MODELS",
            "RESET_PATH",
            "ROUTES",
            "WireError",
            "configure_server_logging",
            "create_app",
            "create_resettable_app",
            "participant_lifespan",
            "status_of",
        ),
        "quiesce.adapters._http_server",
    ),
    **dict.fromkeys(
        (
            "ParticipantActor",
            "RayParticipant",
            "RayUnavailable",
            "spawn_ray_participant",
        ),
        "quiesce.adapters._ray",
    ),
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once loaded, a plain attribute
    return value


__all__ = [
    "API_PREFIX",
    "CALL_FAULTS",
    "CONTROL_OPS",
    "CUT_ARTIFACT",
    "DATA_PREFIX",
    "DEDUPED_OPS",
    "DEFAULT_MAX_BODY_BYTES",
    "FENCE_LOG_FORMAT",
    "FENCE_LOG_VERSION",
    "FORMAT_VERSION",
    "MANIFEST_NAME",
    "METRICS",
    "REPLY_MODELS",
    "REQUEST_MODELS",
    "RESET_PATH",
    "ROUTES",
    "AlreadyPublished",
    "ArtifactEntry",
    "ArtifactMismatch",
    "BadArtifactName",
    "BadCheckpointId",
    "CallFailedError",
    "Clock",
    "ClockEvent",
    "ClockStopped",
    "Companion",
    "CompletionHook",
    "CompletionsReply",
    "ControllerCut",
    "ControllerJournal",
    "CorruptCut",
    "CorruptIntent",
    "CorruptLedger",
    "CorruptSnapshot",
    "CutMismatch",
    "DataEvent",
    "DataPlane",
    "Driver",
    "DriverError",
    "EpochRecord",
    "FaultKind",
    "Faults",
    "FenceLogHeader",
    "FenceLogLine",
    "FenceLogSink",
    "FenceView",
    "FileFenceLog",
    "FileJournal",
    "FinishedGroup",
    "ForeignJournal",
    "GenerateRequest",
    "HostRef",
    "HostStopped",
    "HttpParticipant",
    "HttpPolicyService",
    "HttpResourcesService",
    "InMemoryDataPlane",
    "InMemoryFleet",
    "InMemoryParticipant",
    "InMemoryTrainer",
    "Inspection",
    "IntentPhase",
    "JournalCorrupt",
    "JournalSink",
    "LoadedSnapshot",
    "Lock",
    "Manifest",
    "MemoryFenceLog",
    "MemoryJournal",
    "MetricHook",
    "MetricPoint",
    "MetricSpec",
    "MetricsUnavailable",
    "MutateRequest",
    "NoJournal",
    "NotStaged",
    "Observer",
    "OpenTelemetryMetrics",
    "OptimizerBusy",
    "Participant",
    "ParticipantActor",
    "ParticipantHost",
    "PolicyService",
    "PollCompletions",
    "PruneResult",
    "PublishConflict",
    "Queue",
    "RayParticipant",
    "RayUnavailable",
    "RealClock",
    "ResourcesService",
    "RestoreReport",
    "ServiceUnusable",
    "SnapshotNotFound",
    "SnapshotStore",
    "SnapshotStoreError",
    "Staging",
    "StateDirBusy",
    "StateDirLock",
    "StateDirUnusable",
    "StoreUnreadable",
    "StoredIntent",
    "TaskGroup",
    "TeeFenceLog",
    "TrainedBatch",
    "Trainer",
    "TrainerCheckpoint",
    "UnmanagedTask",
    "VirtualClock",
    "VirtualDeadlock",
    "WireError",
    "WiringError",
    "WorkConfig",
    "artifact_name",
    "build_controller",
    "configure_logging",
    "configure_server_logging",
    "connect_services",
    "create_app",
    "create_resettable_app",
    "dedupe_key",
    "ledger_from_json",
    "ledger_to_json",
    "ledger_to_text",
    "metric_point",
    "parse_checkpoint_id",
    "participant_lifespan",
    "random_incarnation",
    "secret_incarnation",
    "spawn_ray_participant",
    "status_of",
]
