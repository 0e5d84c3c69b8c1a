"""The design model: M1-M9's tables composed with atomic calls, exhausted at PROTOCOL.md §8's
reference size (`quiesce check design`). What it does not know: wire messages, the
runtime's glue, or the implementation model (`quiesce.models.implementation`).
"""

from __future__ import annotations

from quiesce.models.design._model import DesignModel, Reached
from quiesce.models.design._spec import DESIGN_SPEC
from quiesce.models.design._state import NAMES, DesignParams, DesignState
from quiesce.models.design._tables import DesignTables

__all__ = [
    "DESIGN_SPEC",
    "NAMES",
    "DesignModel",
    "DesignParams",
    "DesignState",
    "DesignTables",
    "Reached",
]
