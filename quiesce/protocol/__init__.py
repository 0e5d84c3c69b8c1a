"""The machines of PROTOCOL.md as tables, and the pure coordinator that composes them.

Nothing here awaits, sleeps, reads a clock or touches a socket: time comes in as `now`,
outcomes come in as inputs, and work goes out as effects.
"""

from quiesce.fsm import register
from quiesce.protocol._admission_gate import ADMISSION_GATE, GateInput, GateState

for _table in (ADMISSION_GATE,):
    register(_table)

__all__ = ["ADMISSION_GATE", "GateInput", "GateState"]
