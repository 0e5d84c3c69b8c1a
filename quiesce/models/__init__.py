"""Models of the checkpoint protocol, in rooms, over the protocol-agnostic checker
(`quiesce.check`): the design (`DesignModel`, M1-M9's tables composed with atomic calls),
the implementation (`ProtocolModel` over the runtime's own `System`), the §7 scenarios and
the portfolio, refinement of the one by the other (`refine`, `validate_fence_log`,
`transition_cover`, `SystemMachine`), and coverage (`swarm`). The known bugs they must
catch are in `quiesce.mutants`.

This face imports each name on first use: a command pays only for the models it runs,
`simulate` for the fence-log judge alone, and nothing here imports hypothesis until a
stateful test asks.

>>> from quiesce.check import check
>>> from quiesce.models import ProtocolModel
"""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from quiesce.models.coverage import (
        DEFAULT_BITSTATE_BITS,
        ReplayFailed,
        RowReport,
        SwarmRayError,
        SwarmRequest,
        SwarmResult,
        SwarmSettings,
        WalkerResult,
        ray_runner,
        swarm,
    )
    from quiesce.models.design import DESIGN_SPEC, DesignModel, DesignParams
    from quiesce.models.implementation import (
        PROTOCOL_SPEC,
        Hooks,
        InFlight,
        ProtocolModel,
        ProtocolParams,
        Store,
        System,
        SystemState,
    )
    from quiesce.models.refinement import (
        COVER_PARAMS,
        MAX_FAULTS,
        REFINEMENT,
        CallRecord,
        CoverReport,
        DesignTooLarge,
        FenceLogJudge,
        JudgingFenceLog,
        LoggedLine,
        LogVerdict,
        MalformedFenceLog,
        RefinedModel,
        RefinementUnsupported,
        ReplayOutcome,
        StepKind,
        SystemMachine,
        SystemRun,
        SystemViolation,
        TransitionReplay,
        Unmapped,
        design_size,
        read_fence_logs,
        refine,
        system_machine,
        transition_cover,
        validate_fence_log,
    )
    from quiesce.models.scenarios import (
        PORTFOLIO,
        SCENARIOS,
        PortfolioEntry,
        PortfolioRun,
        Scenario,
        ScenarioFailed,
        run_portfolio,
        scenario_system,
    )

_LAZY: dict[str, str] = {
    "COVER_PARAMS": "quiesce.models.refinement",
    "CallRecord": "quiesce.models.refinement",
    "CoverReport": "quiesce.models.refinement",
    "DEFAULT_BITSTATE_BITS": "quiesce.models.coverage",
    "DESIGN_SPEC": "quiesce.models.design",
    "DesignModel": "quiesce.models.design",
    "DesignParams": "quiesce.models.design",
    "DesignTooLarge": "quiesce.models.refinement",
    "FenceLogJudge": "quiesce.models.refinement",
    "Hooks": "quiesce.models.implementation",
    "InFlight": "quiesce.models.implementation",
    "JudgingFenceLog": "quiesce.models.refinement",
    "LogVerdict": "quiesce.models.refinement",
    "LoggedLine": "quiesce.models.refinement",
    "MAX_FAULTS": "quiesce.models.refinement",
    "MalformedFenceLog": "quiesce.models.refinement",
    "PORTFOLIO": "quiesce.models.scenarios",
    "PROTOCOL_SPEC": "quiesce.models.implementation",
    "PortfolioEntry": "quiesce.models.scenarios",
    "PortfolioRun": "quiesce.models.scenarios",
    "ProtocolModel": "quiesce.models.implementation",
    "ProtocolParams": "quiesce.models.implementation",
    "REFINEMENT": "quiesce.models.refinement",
    "RefinedModel": "quiesce.models.refinement",
    "RefinementUnsupported": "quiesce.models.refinement",
    "ReplayFailed": "quiesce.models.coverage",
    "ReplayOutcome": "quiesce.models.refinement",
    "RowReport": "quiesce.models.coverage",
    "SCENARIOS": "quiesce.models.scenarios",
    "Scenario": "quiesce.models.scenarios",
    "ScenarioFailed": "quiesce.models.scenarios",
    "StepKind": "quiesce.models.refinement",
    "Store": "quiesce.models.implementation",
    "SwarmRayError": "quiesce.models.coverage",
    "SwarmRequest": "quiesce.models.coverage",
    "SwarmResult": "quiesce.models.coverage",
    "SwarmSettings": "quiesce.models.coverage",
    "System": "quiesce.models.implementation",
    "SystemMachine": "quiesce.models.refinement",
    "SystemRun": "quiesce.models.refinement",
    "SystemState": "quiesce.models.implementation",
    "SystemViolation": "quiesce.models.refinement",
    "TransitionReplay": "quiesce.models.refinement",
    "Unmapped": "quiesce.models.refinement",
    "WalkerResult": "quiesce.models.coverage",
    "design_size": "quiesce.models.refinement",
    "ray_runner": "quiesce.models.coverage",
    "read_fence_logs": "quiesce.models.refinement",
    "refine": "quiesce.models.refinement",
    "run_portfolio": "quiesce.models.scenarios",
    "scenario_system": "quiesce.models.scenarios",
    "swarm": "quiesce.models.coverage",
    "system_machine": "quiesce.models.refinement",
    "transition_cover": "quiesce.models.refinement",
    "validate_fence_log": "quiesce.models.refinement",
}
"""The room each name lives in."""


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value  # once loaded, a plain attribute
    return value


__all__ = [
    "COVER_PARAMS",
    "DEFAULT_BITSTATE_BITS",
    "DESIGN_SPEC",
    "MAX_FAULTS",
    "PORTFOLIO",
    "PROTOCOL_SPEC",
    "REFINEMENT",
    "SCENARIOS",
    "CallRecord",
    "CoverReport",
    "DesignModel",
    "DesignParams",
    "DesignTooLarge",
    "FenceLogJudge",
    "Hooks",
    "InFlight",
    "JudgingFenceLog",
    "LogVerdict",
    "LoggedLine",
    "MalformedFenceLog",
    "PortfolioEntry",
    "PortfolioRun",
    "ProtocolModel",
    "ProtocolParams",
    "RefinedModel",
    "RefinementUnsupported",
    "ReplayFailed",
    "ReplayOutcome",
    "RowReport",
    "Scenario",
    "ScenarioFailed",
    "StepKind",
    "Store",
    "SwarmRayError",
    "SwarmRequest",
    "SwarmResult",
    "SwarmSettings",
    "System",
    "SystemMachine",
    "SystemRun",
    "SystemState",
    "SystemViolation",
    "TransitionReplay",
    "Unmapped",
    "WalkerResult",
    "design_size",
    "ray_runner",
    "read_fence_logs",
    "refine",
    "run_portfolio",
    "scenario_system",
    "swarm",
    "system_machine",
    "transition_cover",
    "validate_fence_log",
]
