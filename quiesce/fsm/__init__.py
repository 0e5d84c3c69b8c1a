"""The generic engine: transition tables as data, checked at definition, compiled to a
pure step, exported to `transitions`, and drawn.

>>> from quiesce.fsm import Table, on
"""

from quiesce.fsm._errors import DefinitionError, GuardRejected, QuiesceError, TransitionNotAllowed
from quiesce.fsm._registry import UnknownTable, get_table, register, registered
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

__all__ = [
    "DefinitionError",
    "Effect",
    "EffectFn",
    "GuardFn",
    "GuardRejected",
    "Invariant",
    "QuiesceError",
    "Row",
    "Table",
    "TransitionNotAllowed",
    "UnknownTable",
    "UpdateFn",
    "Value",
    "each",
    "get_table",
    "label",
    "on",
    "register",
    "registered",
]
