"""`StepHost`: what the parts of one coordinator step share.

One `Coordinator.step` is a scratch object (`_coordinator._Run`) that owns the state being
stepped, the time, the effects emitted so far and the plumbing every part needs: M1's
queue of inputs, the gate and the deadline registry, the id counter. The parts -- the
phase runner, M1's named work, the rollout bookkeeping, the M9 restore flow -- each live in
their own module and see the step only through this protocol, so none imports another
and the coordinator composes them. What it does not hold: any decision.
"""

from __future__ import annotations

from typing import Any, Protocol

from quiesce.fsm import Table
from quiesce.protocol._causes import Cause
from quiesce.protocol._config import QuiesceConfig
from quiesce.protocol._ids import OpId, OpKind
from quiesce.protocol.controller._effects import ControllerEffect
from quiesce.protocol.controller._ledger import AttemptKey
from quiesce.protocol.controller._policy import CoordinatorPolicy
from quiesce.protocol.controller._state import ControllerState
from quiesce.protocol.machines import (
    Attempt,
    CallInput,
    CallState,
    CheckpointInput,
    Holder,
    RestoreInput,
    RestoreState,
)

__all__ = ["StepHost"]


class StepHost(Protocol):
    """One coordinator step, as its parts see it (`_coordinator._Run` implements it)."""

    state: ControllerState
    now: float
    config: QuiesceConfig
    intent_cleared: bool  # an M1 row cleared the intent record in this step

    @property
    def policy(self) -> CoordinatorPolicy:
        """The pure functions this coordinator decides with."""
        ...

    @property
    def call_table(self) -> Table[CallState, CallInput]:
        """The per-call table (`call`) this coordinator runs."""
        ...

    @property
    def restore_table(self) -> Table[RestoreState, RestoreInput]:
        """The restore table (M9) this coordinator runs."""
        ...

    @property
    def attempt(self) -> Attempt:
        """The checkpoint attempt in flight, or the one a row of this step just ended."""
        ...

    def set_attempt(self, attempt: Attempt) -> None:
        """Replace the attempt in flight (and the one just ended)."""
        ...

    def emit(self, *effects: ControllerEffect) -> None:
        """Append effects, in order."""
        ...

    def log(self, event: str, level: str = "info", **fields: Any) -> None:
        """Emit a `Log` effect."""
        ...

    def fire(self, event: CheckpointInput, arg: Any = None) -> None:
        """Feed M1 an input; its named work runs in row order."""
        ...

    def fail(self, cause: Cause, participant: str | None = None) -> None:
        """Feed M1 `FAILED` with `cause`, classified by the policy; `participant` is whose
        call or restart it was (a stop names it)."""
        ...

    def mint_id(self, kind: OpKind) -> OpId:
        """A fresh op id of `kind` (one ordered counter for checkpoints and restores)."""
        ...

    def hold(self, owner: Holder, *, deadlines: bool) -> None:
        """`owner` holds admission closed (M6) and, if `deadlines`, the clocks (M7)."""
        ...

    def release(self, owner: Holder, *, deadlines: bool) -> None:
        """`owner` lets go of its holds; dispatch resumes if admission opened."""
        ...

    def start_deadline(self, group_id: str) -> None:
        """Start (or restart) group `group_id`'s rollout deadline (M7)."""
        ...

    def stop_deadline(self, group_id: str) -> None:
        """Forget group `group_id`'s rollout deadline (M7)."""
        ...

    def send_acks(self, flush: OpId | None = None) -> frozenset[str]:
        """Send the ACK outbox; the agents called (`flush`: the attempt whose strict flush
        this is, to every agent owed; None: a background drain, a batch to each agent owed
        with none in flight, and the empty set)."""
        ...

    def retire(self, agent: str, key: AttemptKey) -> None:
        """Retire attempt `key` at `agent`, a background call (M3 `retire`)."""
        ...

    def dispatch_reserved(self) -> None:
        """While admission is open, dispatch every reserved attempt."""
        ...

    def capture(self) -> None:
        """M1 `capturing`: capture the cut, flush again, or skip (the capture rule)."""
        ...
