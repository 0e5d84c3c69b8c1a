"""`CoordinatorPolicy`: the coordinator's decisions that are pure functions, in one bundle.

What lives here: every decision the coordinator takes by calling a function rather than by
stepping a table -- how a cause is classified (§4), how discovery is validated and the
recovery levels lowered (§2), at which level a failed group is retried (M8), whether the
cut may be captured (S7, S9), how a restore is judged and which restored continuations are
discarded (M9), the §3 phase order, and the op id a retried call carries -- each defaulting
to the protocol's own. A variant
of the protocol (a mutant of `quiesce.models`) passes its own bundle,
`Coordinator(config, policy=replace(CoordinatorPolicy(), classify=...))`, and runs through
the very same code; nothing is patched. What it does not know: when the coordinator calls
them.

>>> CoordinatorPolicy().classify(Cause.REPLY_LOST).reason
'timeout'
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from quiesce.fsm import Value
from quiesce.protocol._causes import Cause, Classification, classify
from quiesce.protocol._ids import OpId
from quiesce.protocol._levels import RecoveryLevel
from quiesce.protocol._messages import Capabilities, Continuation, RestoreReply
from quiesce.protocol.controller._capture import CaptureFacts, CaptureVerdict, judge_capture
from quiesce.protocol.controller._ledger import Ledger
from quiesce.protocol.controller._recovery_levels import (
    EnvironmentTraits,
    LevelPlan,
    Topology,
    lower_levels,
    validate_discovery,
)
from quiesce.protocol.controller._restore_plan import (
    DiscardContinuation,
    RestoreVerdict,
    judge_restore,
    plan_discards,
)
from quiesce.protocol.controller._state import Fleet
from quiesce.protocol.machines import PHASE_ORDER, Phase, RestoreState, Slot

__all__ = ["CoordinatorPolicy", "live_level", "same_op_id"]


def live_level(fleet: Fleet | None, environment: str, target: RecoveryLevel) -> RecoveryLevel:
    """The level a failed group of `environment` is retried at: its live level after
    discovery lowered it (M8, S11), or `target` before discovery or for an unlisted one."""
    return target if fleet is None else fleet.live_level(environment, target)


def same_op_id(op_id: OpId, _retry: int) -> OpId:
    """The op id a retried call carries: its own, every time (§4: the fence replays it)."""
    return op_id


@dataclass(frozen=True)
class CoordinatorPolicy:
    """The pure functions the coordinator decides with (see the module docstring)."""

    classify: Callable[[Cause], Classification] = classify
    """§4: a cause's reason and disposition."""
    validate_discovery: Callable[[Iterable[Capabilities | Mapping[str, Any]]], Topology] = (
        validate_discovery
    )
    """§2: the discovery replies' topology, or a setup refusal naming the server."""
    lower_levels: Callable[
        [RecoveryLevel, Iterable[EnvironmentTraits], Mapping[str, RecoveryLevel] | None],
        LevelPlan,
    ] = lower_levels
    """§2, M8: every environment's effective levels."""
    retry_level: Callable[[Fleet | None, str, RecoveryLevel], RecoveryLevel] = live_level
    """M8: the level a failed group is retried at."""
    judge_capture: Callable[[CaptureFacts], CaptureVerdict] = judge_capture
    """M1 `capturing`: capture, flush again, or skip (S7, S9)."""
    judge_restore: Callable[
        [Mapping[str, str], Mapping[str, RestoreReply], Mapping[str, bool], Ledger | None],
        RestoreVerdict,
    ] = judge_restore
    """M9: verify a role's restore replies (S16)."""
    plan_discards: Callable[
        [Value[RestoreState, Any], OpId, Iterable[tuple[str, Continuation]]],
        tuple[DiscardContinuation, ...],
    ] = plan_discards
    """M9 `restored_paused`: the continuations to discard before resume (S12)."""
    phase_order: Mapping[Phase, tuple[Slot, ...]] = field(default_factory=lambda: PHASE_ORDER)
    """§3: every phase's slots, in calling order."""
    retry_op_id: Callable[[OpId, int], OpId] = same_op_id
    """§4: the op id a call carries on its n-th retry (n = 0 for the first send)."""
