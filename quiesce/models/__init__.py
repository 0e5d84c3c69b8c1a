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
