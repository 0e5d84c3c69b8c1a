"""The generic engine: transition tables as data, checked at definition, compiled to a
pure step, exported to `transitions`, drawn, and laid out as state x input grids.

>>> from quiesce.fsm import Table, on

The diagram names (`render`, `load_trace`, `TraceStep`, ...) are imported on first use:
a trace file is a pydantic model, and a program that only steps tables need not load
pydantic.
"""

import importlib
from typing import TYPE_CHECKING, Any

from quiesce.fsm._errors import (
    DefinitionError,
    GuardRejected,
    QuiesceError,
    TransitionNotAllowed,
    UnknownEffect,
)
from quiesce.fsm._matrix import (
    MATRIX_REGENERATE_COMMAND,
    Matrix,
    MatrixCell,
    MatrixMove,
    matrix,
    render_matrix,
    write_matrices,
)
from quiesce.fsm._recording import RowEvent, RowLog, recording
from quiesce.fsm._table import (
    Effect,
    EffectFn,
    GuardFn,
    Invariant,
    Row,
    Table,
    UpdateFn,
    Value,
    each,
    label,
    on,
)
from quiesce.fsm._transitions_bridge import (
    TransitionsExportError,
    TransitionsModel,
    transitions_config,
)
from quiesce.fsm._work import work

if TYPE_CHECKING:
    from quiesce.fsm._diagram import (
        REGENERATE_COMMAND,
        DiagramError,
        GraphvizFailed,
        GraphvizNotFound,
        TraceError,
        TraceStep,
        load_trace,
        render,
        render_dot,
        render_mermaid,
        render_svg,
        write_diagrams,
    )

# Name -> the module defining it, for the names imported on first use.
_LAZY = dict.fromkeys(
    (
        "REGENERATE_COMMAND",
        "DiagramError",
        "GraphvizFailed",
        "GraphvizNotFound",
        "TraceError",
        "TraceStep",
        "load_trace",
        "render",
        "render_dot",
        "render_mermaid",
        "render_svg",
        "write_diagrams",
    ),
    "quiesce.fsm._diagram",
)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once loaded, a plain attribute
    return value


__all__ = [
    "MATRIX_REGENERATE_COMMAND",
    "REGENERATE_COMMAND",
    "DefinitionError",
    "DiagramError",
    "Effect",
    "EffectFn",
    "GraphvizFailed",
    "GraphvizNotFound",
    "GuardFn",
    "GuardRejected",
    "Invariant",
    "Matrix",
    "MatrixCell",
    "MatrixMove",
    "QuiesceError",
    "Row",
    "RowEvent",
    "RowLog",
    "Table",
    "TraceError",
    "TraceStep",
    "TransitionNotAllowed",
    "TransitionsExportError",
    "TransitionsModel",
    "UnknownEffect",
    "UpdateFn",
    "Value",
    "each",
    "label",
    "load_trace",
    "matrix",
    "on",
    "recording",
    "render",
    "render_dot",
    "render_matrix",
    "render_mermaid",
    "render_svg",
    "transitions_config",
    "work",
    "write_diagrams",
    "write_matrices",
]
