"""The implementation model: the runtime's own controller and participants composed into a
`System` with an in-flight network, judged by §5's invariants (`quiesce check protocol`,
the default model). What it does not know: the design model (`quiesce.models.design`).
"""

from __future__ import annotations

from quiesce.models.implementation._model import UNREACHED_INPUTS, Hooks, ProtocolModel
from quiesce.models.implementation._spec import PROTOCOL_SPEC
from quiesce.models.implementation._state import ProtocolParams, PState
from quiesce.models.implementation._system import InFlight, Store, System, SystemState

__all__ = [
    "PROTOCOL_SPEC",
    "UNREACHED_INPUTS",
    "Hooks",
    "InFlight",
    "PState",
    "ProtocolModel",
    "ProtocolParams",
    "Store",
    "System",
    "SystemState",
]
