"""Formal checks over the same tables the runtime executes.

The explorer (`check`) is an explicit-state BFS model checker over a `Model`; models are
registered by name for `quiesce check`; `walk` takes seeded random walks through a model
too big to exhaust (`quiesce check --walks N`). `TwoPhase` is Lamport's two-phase commit written as
quiesce tables, the standard yardstick (288 distinct states with 3 RMs). `DesignModel` is the
protocol's design (M1-M9's tables composed with atomic calls), exhausted at §8's reference size.
`refine` checks every step of the `protocol` model against it (refinement);
`validate_fence_log` checks a recorded run's fence log against it (`quiesce validate`);
`transition_cover` replays a shortest trace of every design step on `System` (`quiesce cover`).
`swarm` runs many coverage-directed walkers with bitstate visited sets (here, or on Ray:
`ray_runner`) and merges what they found.
`SCENARIOS` scripts PROTOCOL.md §7 on the composed `System`; the mutant catalog (`MUTANTS`,
`verify`) runs them and the explorer against known bugs.

>>> from quiesce.models import build_model, check
>>> check(build_model("two-phase", {"rms": "3"})).distinct_states
288
"""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from quiesce.models._design_model import DesignModel
    from quiesce.models._design_spec import DESIGN_SPEC
    from quiesce.models._design_state import DesignParams
    from quiesce.models._explorer import (
        NO_STALL,
        Action,
        Always,
        CheckResult,
        Model,
        Progress,
        Step,
        TableStepper,
        Trace,
        UnknownProjection,
        Violation,
        always,
        check,
        mermaid_sequence,
    )
    from quiesce.models._log_validation import (
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
    from quiesce.models._mutant_notes import survivor_note
    from quiesce.models._mutant_pool import verify_many
    from quiesce.models._mutants import (
        MUTANTS,
        STEP_TIMEOUT_S,
        Mutant,
        Verdict,
        sample_generated,
        verify,
    )
    from quiesce.models._portfolio import PORTFOLIO, PortfolioEntry, PortfolioRun, run_portfolio
    from quiesce.models._protocol_model import Hooks, ProtocolModel
    from quiesce.models._protocol_spec import PROTOCOL_SPEC
    from quiesce.models._protocol_state import ProtocolParams
    from quiesce.models._random_walks import walk
    from quiesce.models._refined_model import REFINEMENT, RefinedModel, refine
    from quiesce.models._refinement import RefinementUnsupported
    from quiesce.models._registry import (
        BadModelParam,
        ModelSpec,
        Param,
        UnknownModel,
        UnsupportedOption,
        build_model,
        get_model_spec,
        known_models,
        register_model,
    )
    from quiesce.models._scenarios import (
        SCENARIOS,
        Scenario,
        ScenarioFailed,
        scenario_system,
    )
    from quiesce.models._swarm import (
        DEFAULT_BITSTATE_BITS,
        ReplayFailed,
        RowReport,
        SwarmRequest,
        SwarmResult,
        SwarmSettings,
        WalkerResult,
        swarm,
    )
    from quiesce.models._swarm_ray import SwarmRayError, ray_runner
    from quiesce.models._system import InFlight, Store, System, SystemState
    from quiesce.models._system_ledger import CallRecord, SystemViolation
    from quiesce.models._system_machine import SystemMachine, system_machine
    from quiesce.models._system_run import SystemRun
    from quiesce.models._table_machine import (
        TableMachine,
        arg_examples,
        arg_strategies,
        table_state_machine,
    )
    from quiesce.models._transition_cover import (
        COVER_PARAMS,
        CoverReport,
        ReplayOutcome,
        TransitionReplay,
        transition_cover,
    )
    from quiesce.models._two_phase import (
        RM_TABLE as TWO_PHASE_RM,
    )
    from quiesce.models._two_phase import (
        TM_TABLE as TWO_PHASE_TM,
    )
    from quiesce.models._two_phase import (
        RmInput,
        TwoPhase,
        TwoPhaseState,
    )

# Every name is imported on first use (name -> its module and attribute): a command pays
# only for the models it runs, `simulate` for the fence-log judge alone, and nothing here
# imports hypothesis (and through its trio support, pytest) until a stateful test asks.
_LAZY: dict[str, tuple[str, str]] = {
    "DesignModel": ("quiesce.models._design_model", "DesignModel"),
    "DESIGN_SPEC": ("quiesce.models._design_spec", "DESIGN_SPEC"),
    "DesignParams": ("quiesce.models._design_state", "DesignParams"),
    "NO_STALL": ("quiesce.models._explorer", "NO_STALL"),
    "Action": ("quiesce.models._explorer", "Action"),
    "Always": ("quiesce.models._explorer", "Always"),
    "CheckResult": ("quiesce.models._explorer", "CheckResult"),
    "Model": ("quiesce.models._explorer", "Model"),
    "Progress": ("quiesce.models._explorer", "Progress"),
    "Step": ("quiesce.models._explorer", "Step"),
    "TableStepper": ("quiesce.models._explorer", "TableStepper"),
    "Trace": ("quiesce.models._explorer", "Trace"),
    "UnknownProjection": ("quiesce.models._explorer", "UnknownProjection"),
    "Violation": ("quiesce.models._explorer", "Violation"),
    "always": ("quiesce.models._explorer", "always"),
    "check": ("quiesce.models._explorer", "check"),
    "mermaid_sequence": ("quiesce.models._explorer", "mermaid_sequence"),
    "MAX_FAULTS": ("quiesce.models._log_validation", "MAX_FAULTS"),
    "DesignTooLarge": ("quiesce.models._log_validation", "DesignTooLarge"),
    "FenceLogJudge": ("quiesce.models._log_validation", "FenceLogJudge"),
    "JudgingFenceLog": ("quiesce.models._log_validation", "JudgingFenceLog"),
    "LoggedLine": ("quiesce.models._log_validation", "LoggedLine"),
    "LogVerdict": ("quiesce.models._log_validation", "LogVerdict"),
    "MalformedFenceLog": ("quiesce.models._log_validation", "MalformedFenceLog"),
    "StepKind": ("quiesce.models._log_validation", "StepKind"),
    "Unmapped": ("quiesce.models._log_validation", "Unmapped"),
    "design_size": ("quiesce.models._log_validation", "design_size"),
    "read_fence_logs": ("quiesce.models._log_validation", "read_fence_logs"),
    "validate_fence_log": ("quiesce.models._log_validation", "validate_fence_log"),
    "survivor_note": ("quiesce.models._mutant_notes", "survivor_note"),
    "verify_many": ("quiesce.models._mutant_pool", "verify_many"),
    "MUTANTS": ("quiesce.models._mutants", "MUTANTS"),
    "STEP_TIMEOUT_S": ("quiesce.models._mutants", "STEP_TIMEOUT_S"),
    "Mutant": ("quiesce.models._mutants", "Mutant"),
    "Verdict": ("quiesce.models._mutants", "Verdict"),
    "sample_generated": ("quiesce.models._mutants", "sample_generated"),
    "verify": ("quiesce.models._mutants", "verify"),
    "PORTFOLIO": ("quiesce.models._portfolio", "PORTFOLIO"),
    "PortfolioEntry": ("quiesce.models._portfolio", "PortfolioEntry"),
    "PortfolioRun": ("quiesce.models._portfolio", "PortfolioRun"),
    "run_portfolio": ("quiesce.models._portfolio", "run_portfolio"),
    "Hooks": ("quiesce.models._protocol_model", "Hooks"),
    "ProtocolModel": ("quiesce.models._protocol_model", "ProtocolModel"),
    "PROTOCOL_SPEC": ("quiesce.models._protocol_spec", "PROTOCOL_SPEC"),
    "ProtocolParams": ("quiesce.models._protocol_state", "ProtocolParams"),
    "walk": ("quiesce.models._random_walks", "walk"),
    "REFINEMENT": ("quiesce.models._refined_model", "REFINEMENT"),
    "RefinedModel": ("quiesce.models._refined_model", "RefinedModel"),
    "refine": ("quiesce.models._refined_model", "refine"),
    "RefinementUnsupported": ("quiesce.models._refinement", "RefinementUnsupported"),
    "BadModelParam": ("quiesce.models._registry", "BadModelParam"),
    "ModelSpec": ("quiesce.models._registry", "ModelSpec"),
    "Param": ("quiesce.models._registry", "Param"),
    "UnknownModel": ("quiesce.models._registry", "UnknownModel"),
    "UnsupportedOption": ("quiesce.models._registry", "UnsupportedOption"),
    "build_model": ("quiesce.models._registry", "build_model"),
    "get_model_spec": ("quiesce.models._registry", "get_model_spec"),
    "known_models": ("quiesce.models._registry", "known_models"),
    "register_model": ("quiesce.models._registry", "register_model"),
    "SCENARIOS": ("quiesce.models._scenarios", "SCENARIOS"),
    "Scenario": ("quiesce.models._scenarios", "Scenario"),
    "ScenarioFailed": ("quiesce.models._scenarios", "ScenarioFailed"),
    "scenario_system": ("quiesce.models._scenarios", "scenario_system"),
    "DEFAULT_BITSTATE_BITS": ("quiesce.models._swarm", "DEFAULT_BITSTATE_BITS"),
    "ReplayFailed": ("quiesce.models._swarm", "ReplayFailed"),
    "RowReport": ("quiesce.models._swarm", "RowReport"),
    "SwarmRequest": ("quiesce.models._swarm", "SwarmRequest"),
    "SwarmResult": ("quiesce.models._swarm", "SwarmResult"),
    "SwarmSettings": ("quiesce.models._swarm", "SwarmSettings"),
    "WalkerResult": ("quiesce.models._swarm", "WalkerResult"),
    "swarm": ("quiesce.models._swarm", "swarm"),
    "SwarmRayError": ("quiesce.models._swarm_ray", "SwarmRayError"),
    "ray_runner": ("quiesce.models._swarm_ray", "ray_runner"),
    "InFlight": ("quiesce.models._system", "InFlight"),
    "Store": ("quiesce.models._system", "Store"),
    "System": ("quiesce.models._system", "System"),
    "SystemState": ("quiesce.models._system", "SystemState"),
    "CallRecord": ("quiesce.models._system_ledger", "CallRecord"),
    "SystemViolation": ("quiesce.models._system_ledger", "SystemViolation"),
    "SystemMachine": ("quiesce.models._system_machine", "SystemMachine"),
    "system_machine": ("quiesce.models._system_machine", "system_machine"),
    "SystemRun": ("quiesce.models._system_run", "SystemRun"),
    "TableMachine": ("quiesce.models._table_machine", "TableMachine"),
    "arg_examples": ("quiesce.models._table_machine", "arg_examples"),
    "arg_strategies": ("quiesce.models._table_machine", "arg_strategies"),
    "table_state_machine": ("quiesce.models._table_machine", "table_state_machine"),
    "COVER_PARAMS": ("quiesce.models._transition_cover", "COVER_PARAMS"),
    "CoverReport": ("quiesce.models._transition_cover", "CoverReport"),
    "ReplayOutcome": ("quiesce.models._transition_cover", "ReplayOutcome"),
    "TransitionReplay": ("quiesce.models._transition_cover", "TransitionReplay"),
    "transition_cover": ("quiesce.models._transition_cover", "transition_cover"),
    "TWO_PHASE_RM": ("quiesce.models._two_phase", "RM_TABLE"),
    "TWO_PHASE_TM": ("quiesce.models._two_phase", "TM_TABLE"),
    "RmInput": ("quiesce.models._two_phase", "RmInput"),
    "TwoPhase": ("quiesce.models._two_phase", "TwoPhase"),
    "TwoPhaseState": ("quiesce.models._two_phase", "TwoPhaseState"),
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, attribute = _LAZY[name]
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value  # once loaded, a plain attribute
    return value


__all__ = [
    "COVER_PARAMS",
    "DEFAULT_BITSTATE_BITS",
    "DESIGN_SPEC",
    "MAX_FAULTS",
    "MUTANTS",
    "NO_STALL",
    "PORTFOLIO",
    "PROTOCOL_SPEC",
    "REFINEMENT",
    "SCENARIOS",
    "STEP_TIMEOUT_S",
    "TWO_PHASE_RM",
    "TWO_PHASE_TM",
    "Action",
    "Always",
    "BadModelParam",
    "CallRecord",
    "CheckResult",
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
    "Model",
    "ModelSpec",
    "Mutant",
    "Param",
    "PortfolioEntry",
    "PortfolioRun",
    "Progress",
    "ProtocolModel",
    "ProtocolParams",
    "RefinedModel",
    "RefinementUnsupported",
    "ReplayFailed",
    "ReplayOutcome",
    "RmInput",
    "RowReport",
    "Scenario",
    "ScenarioFailed",
    "Step",
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
    "TableMachine",
    "TableStepper",
    "Trace",
    "TransitionReplay",
    "TwoPhase",
    "TwoPhaseState",
    "UnknownModel",
    "UnknownProjection",
    "Unmapped",
    "UnsupportedOption",
    "Verdict",
    "Violation",
    "WalkerResult",
    "always",
    "arg_examples",
    "arg_strategies",
    "build_model",
    "check",
    "design_size",
    "get_model_spec",
    "known_models",
    "mermaid_sequence",
    "ray_runner",
    "read_fence_logs",
    "refine",
    "register_model",
    "run_portfolio",
    "sample_generated",
    "scenario_system",
    "survivor_note",
    "swarm",
    "system_machine",
    "table_state_machine",
    "transition_cover",
    "validate_fence_log",
    "verify",
    "verify_many",
    "walk",
]
