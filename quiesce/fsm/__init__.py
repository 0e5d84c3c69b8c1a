"""The generic engine: transition tables as data, checked at definition, compiled to a
pure step, exported to `transitions`, and drawn.

>>> from quiesce.fsm import Table, on
"""

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
from quiesce.fsm._errors import DefinitionError, GuardRejected, QuiesceError, TransitionNotAllowed
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

__all__ = [
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
    "QuiesceError",
    "Row",
    "Table",
    "TraceError",
    "TraceStep",
    "TransitionNotAllowed",
    "TransitionsExportError",
    "TransitionsModel",
    "UpdateFn",
    "Value",
    "each",
    "label",
    "load_trace",
    "on",
    "render",
    "render_dot",
    "render_mermaid",
    "render_svg",
    "transitions_config",
    "write_diagrams",
]
