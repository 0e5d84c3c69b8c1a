"""Harnesses: whole training runs over the adapters, for people and for CI.

`simulate` runs a simulated training run on the in-memory fleet and a virtual clock (its
durations from a `LatencyProfile`: `fast` by default, or `review`, turns of seconds and
training steps of minutes; `checkpointing=False` runs the same training with no checkpoint),
and judges it with oracles independent of the coordinator (nothing lost or duplicated, every
consumed prompt group trained or counted, nothing left on an agent; why a stopped
controller stopped); `run_chaos` runs real participant processes and a real controller
and SIGKILLs them. Both are thin: every protocol decision is the coordinator's, every I/O
the adapters'. `RunRecorder` records a simulated run's timeline, `ChaosRecorder` a chaos run's (from
its processes' event lines and fence logs), and `render_report` draws either as one
self-contained HTML page (`quiesce simulate --report`, `quiesce chaos --report`).
`ScenarioFault` names the opt-in faults that put a simulated run into a §7 scenario the
random call faults never produce (`inject=`); `coverage=True` reports the §7 scenarios a
run reached and the controller table rows that fired (`RunCoverage`; `FAILURE_SCENARIOS`, and
`NOT_SIMULATED` for the ones a simulated world cannot produce, with why).
"""

import importlib
from typing import TYPE_CHECKING, Any

from quiesce.harness._latency import LATENCY_PROFILES, LatencyProfile, UnknownLatencyProfile
from quiesce.harness._progress import Untrained, UntrainedGroup
from quiesce.harness._recorder import EVENT_KINDS, ChaosRecorder, RunRecorder
from quiesce.harness._report import render_report, write_report
from quiesce.harness._scenarios import FAILURE_SCENARIOS, NOT_SIMULATED, RunCoverage, ScenarioFault
from quiesce.harness._simulate import (
    CheckpointCounts,
    CoordinatorFactory,
    RolloutCounts,
    SimulationConfig,
    SimulationResult,
    run_simulation,
    simulate,
)
from quiesce.harness._stop_cause import AttemptFailure, StopCause, StopWitness

if TYPE_CHECKING:
    from quiesce.harness._chaos import (
        ChaosConfig,
        ChaosError,
        ChaosInterrupted,
        ChaosResult,
        run_chaos,
    )
    from quiesce.harness._chaos_controller import (
        DurableTrainer,
        LoggedDataPlane,
        read_consumed,
        read_trained,
    )

# Name -> the module defining it, for the names imported on first use: real-process chaos
# imports httpx and the HTTP adapters, which a simulated run never needs.
_LAZY = {
    **dict.fromkeys(
        (
            "ChaosConfig",
            "ChaosError",
            "ChaosInterrupted",
            "ChaosResult",
            "run_chaos",
        ),
        "quiesce.harness._chaos",
    ),
    **dict.fromkeys(
        (
            "DurableTrainer",
            "LoggedDataPlane",
            "read_consumed",
            "read_trained",
        ),
        "quiesce.harness._chaos_controller",
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
    "EVENT_KINDS",
    "FAILURE_SCENARIOS",
    "LATENCY_PROFILES",
    "NOT_SIMULATED",
    "AttemptFailure",
    "ChaosConfig",
    "ChaosError",
    "ChaosInterrupted",
    "ChaosRecorder",
    "ChaosResult",
    "CheckpointCounts",
    "CoordinatorFactory",
    "DurableTrainer",
    "LatencyProfile",
    "LoggedDataPlane",
    "RolloutCounts",
    "RunCoverage",
    "RunRecorder",
    "ScenarioFault",
    "SimulationConfig",
    "SimulationResult",
    "StopCause",
    "StopWitness",
    "UnknownLatencyProfile",
    "Untrained",
    "UntrainedGroup",
    "read_consumed",
    "read_trained",
    "render_report",
    "run_chaos",
    "run_simulation",
    "simulate",
    "write_report",
]
