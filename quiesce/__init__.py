"""quiesce: a distributed checkpoint-and-recovery protocol as explicit finite-state machines.

The four subpackages are the design: `quiesce.fsm` (the generic table engine),
`quiesce.protocol` (the machines of PROTOCOL.md and the pure coordinator),
`quiesce.adapters` (the anyio driver and everything that touches the world) and
`quiesce.models` (model checking, stateful tests, mutants).
"""

from quiesce.fsm import QuiesceError

__all__ = ["QuiesceError"]
__version__ = "0.1.0"
