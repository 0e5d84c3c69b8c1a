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

if TYPE_CHECKING:  # `X as X`: an explicit re-export for the type checker (PEP 484)
    from quiesce.models.coverage import DEFAULT_BITSTATE_BITS as DEFAULT_BITSTATE_BITS
    from quiesce.models.coverage import ReplayFailed as ReplayFailed
    from quiesce.models.coverage import RowReport as RowReport
    from quiesce.models.coverage import SwarmRayError as SwarmRayError
    from quiesce.models.coverage import SwarmRequest as SwarmRequest
    from quiesce.models.coverage import SwarmResult as SwarmResult
    from quiesce.models.coverage import SwarmSettings as SwarmSettings
    from quiesce.models.coverage import WalkerResult as WalkerResult
    from quiesce.models.coverage import ray_runner as ray_runner
    from quiesce.models.coverage import swarm as swarm
    from quiesce.models.design import DESIGN_SPEC as DESIGN_SPEC
    from quiesce.models.design import DesignModel as DesignModel
    from quiesce.models.design import DesignParams as DesignParams
    from quiesce.models.implementation import PROTOCOL_SPEC as PROTOCOL_SPEC
    from quiesce.models.implementation import Hooks as Hooks
    from quiesce.models.implementation import InFlight as InFlight
    from quiesce.models.implementation import ProtocolModel as ProtocolModel
    from quiesce.models.implementation import ProtocolParams as ProtocolParams
    from quiesce.models.implementation import Store as Store
    from quiesce.models.implementation import System as System
    from quiesce.models.implementation import SystemState as SystemState
    from quiesce.models.refinement import COVER_PARAMS as COVER_PARAMS
    from quiesce.models.refinement import MAX_FAULTS as MAX_FAULTS
    from quiesce.models.refinement import REFINEMENT as REFINEMENT
    from quiesce.models.refinement import CallRecord as CallRecord
    from quiesce.models.refinement import CoverReport as CoverReport
    from quiesce.models.refinement import DesignTooLarge as DesignTooLarge
    from quiesce.models.refinement import FenceLogJudge as FenceLogJudge
    from quiesce.models.refinement import JudgingFenceLog as JudgingFenceLog
    from quiesce.models.refinement import LoggedLine as LoggedLine
    from quiesce.models.refinement import LogVerdict as LogVerdict
    from quiesce.models.refinement import MalformedFenceLog as MalformedFenceLog
    from quiesce.models.refinement import RefinedModel as RefinedModel
    from quiesce.models.refinement import RefinementUnsupported as RefinementUnsupported
    from quiesce.models.refinement import ReplayOutcome as ReplayOutcome
    from quiesce.models.refinement import StepKind as StepKind
    from quiesce.models.refinement import SystemMachine as SystemMachine
    from quiesce.models.refinement import SystemRun as SystemRun
    from quiesce.models.refinement import SystemViolation as SystemViolation
    from quiesce.models.refinement import TransitionReplay as TransitionReplay
    from quiesce.models.refinement import Unmapped as Unmapped
    from quiesce.models.refinement import design_size as design_size
    from quiesce.models.refinement import read_fence_logs as read_fence_logs
    from quiesce.models.refinement import refine as refine
    from quiesce.models.refinement import system_machine as system_machine
    from quiesce.models.refinement import transition_cover as transition_cover
    from quiesce.models.refinement import validate_fence_log as validate_fence_log
    from quiesce.models.scenarios import PORTFOLIO as PORTFOLIO
    from quiesce.models.scenarios import SCENARIOS as SCENARIOS
    from quiesce.models.scenarios import PortfolioEntry as PortfolioEntry
    from quiesce.models.scenarios import PortfolioRun as PortfolioRun
    from quiesce.models.scenarios import Scenario as Scenario
    from quiesce.models.scenarios import ScenarioFailed as ScenarioFailed
    from quiesce.models.scenarios import run_portfolio as run_portfolio
    from quiesce.models.scenarios import scenario_system as scenario_system

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
"""The room each public name lives in: this face's `__all__`."""


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value  # once loaded, a plain attribute
    return value


__all__ = sorted(_LAZY)
