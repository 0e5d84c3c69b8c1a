"""The implementation judged against the design: refinement of every protocol-model step,
the fence-log judge of a recorded run (`quiesce validate`), the transition cover
(`quiesce cover`) and the hypothesis stateful test of the composed `System`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from quiesce.models.refinement._log_validation import (
    MAX_FAULTS,
    DesignTooLarge,
    FenceLogJudge,
    JudgingFenceLog,
    LoggedLine,
    LogVerdict,
    MalformedFenceLog,
    StepKind,
    Unmapped,
    design_size,
    read_fence_logs,
    validate_fence_log,
)
from quiesce.models.refinement._refined_model import REFINEMENT, RefinedModel, refine
from quiesce.models.refinement._refinement import RefinementUnsupported
from quiesce.models.refinement._system_ledger import CallRecord, SystemViolation
from quiesce.models.refinement._system_run import SystemRun
from quiesce.models.refinement._transition_cover import (
    COVER_PARAMS,
    CoverReport,
    ReplayOutcome,
    TransitionReplay,
    transition_cover,
)

if TYPE_CHECKING:
    from quiesce.models.refinement._system_machine import SystemMachine, system_machine

# Imported on first use: these import hypothesis (and, through its trio support, pytest).
_LAZY = {
    "SystemMachine": "quiesce.models.refinement._system_machine",
    "system_machine": "quiesce.models.refinement._system_machine",
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value


__all__ = [
    "COVER_PARAMS",
    "MAX_FAULTS",
    "REFINEMENT",
    "CallRecord",
    "CoverReport",
    "DesignTooLarge",
    "FenceLogJudge",
    "JudgingFenceLog",
    "LogVerdict",
    "LoggedLine",
    "MalformedFenceLog",
    "RefinedModel",
    "RefinementUnsupported",
    "ReplayOutcome",
    "StepKind",
    "SystemMachine",
    "SystemRun",
    "SystemViolation",
    "TransitionReplay",
    "Unmapped",
    "design_size",
    "read_fence_logs",
    "refine",
    "system_machine",
    "transition_cover",
    "validate_fence_log",
]
