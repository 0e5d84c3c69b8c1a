"""The protocol-agnostic checker: an explicit-state BFS explorer over any `Model`, its
fingerprint table and bitstate visited sets, seeded random walks, the dataclass copier the
models step with, hypothesis state machines generated from a table, the model registry
behind `quiesce check`, and Lamport's two-phase commit as the yardstick model.

What it does not know: this protocol. The models of it live in `quiesce.models`, the known
bugs in `quiesce.mutants`.

>>> from quiesce.check import build_model, check
>>> check(build_model("two-phase", {"rms": "3"})).distinct_states
288
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from quiesce.check._bitstate import Bitstate, Merged
from quiesce.check._copier import replace
from quiesce.check._explorer import (
    NO_STALL,
    Action,
    Always,
    CheckResult,
    Kind,
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
    paused_gc,
)
from quiesce.check._random_walks import Move, Walks, property_names, walk
from quiesce.check._registry import (
    BadModelParam,
    ModelSpec,
    Param,
    UnknownModel,
    UnsupportedOption,
    add_mutants,
    build_model,
    get_model_spec,
    known_models,
    params_of,
    register_model,
    with_faults,
)

if TYPE_CHECKING:
    from quiesce.check._table_machine import (
        TableMachine,
        arg_examples,
        arg_strategies,
        table_state_machine,
    )
    from quiesce.check._two_phase import RM_TABLE as TWO_PHASE_RM
    from quiesce.check._two_phase import TM_TABLE as TWO_PHASE_TM
    from quiesce.check._two_phase import RmInput, TwoPhase, TwoPhaseState

# Imported on first use (name -> module, attribute): the table machines import hypothesis
# (and, through its trio support, pytest); two-phase registers itself when
# `known_models()` asks, after the protocol's models.
_LAZY: dict[str, tuple[str, str]] = {
    "TableMachine": ("quiesce.check._table_machine", "TableMachine"),
    "arg_examples": ("quiesce.check._table_machine", "arg_examples"),
    "arg_strategies": ("quiesce.check._table_machine", "arg_strategies"),
    "table_state_machine": ("quiesce.check._table_machine", "table_state_machine"),
    "TWO_PHASE_RM": ("quiesce.check._two_phase", "RM_TABLE"),
    "TWO_PHASE_TM": ("quiesce.check._two_phase", "TM_TABLE"),
    "RmInput": ("quiesce.check._two_phase", "RmInput"),
    "TwoPhase": ("quiesce.check._two_phase", "TwoPhase"),
    "TwoPhaseState": ("quiesce.check._two_phase", "TwoPhaseState"),
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, attribute = _LAZY[name]
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value  # once loaded, a plain attribute
    return value


__all__ = [
    "NO_STALL",
    "TWO_PHASE_RM",
    "TWO_PHASE_TM",
    "Action",
    "Always",
    "BadModelParam",
    "Bitstate",
    "CheckResult",
    "Kind",
    "Merged",
    "Model",
    "ModelSpec",
    "Move",
    "Param",
    "Progress",
    "RmInput",
    "Step",
    "TableMachine",
    "TableStepper",
    "Trace",
    "TwoPhase",
    "TwoPhaseState",
    "UnknownModel",
    "UnknownProjection",
    "UnsupportedOption",
    "Violation",
    "Walks",
    "add_mutants",
    "always",
    "arg_examples",
    "arg_strategies",
    "build_model",
    "check",
    "get_model_spec",
    "known_models",
    "mermaid_sequence",
    "params_of",
    "paused_gc",
    "property_names",
    "register_model",
    "replace",
    "table_state_machine",
    "walk",
    "with_faults",
]
