"""The controller's room: the pure coordinator, the restore flow, the ledger, the levels.

`Coordinator.step(state, now, input) -> (state, effects)` composes the machines of
`quiesce.protocol.machines` for one run; `Ledger` is the recovery ledger (M8); the restore
flow (M9) runs at controller start. Nothing here awaits, sleeps or reads a clock, and
nothing here knows how a participant is implemented: it sees only wire replies.

This face is what an embedder needs, the one who runs a controller (`build_controller` /
`Driver` of `quiesce.adapters`) beside a trainer:

- the coordinator and its values: `Coordinator`, `ControllerState`, and the two unions
  `ControllerInput` and `ControllerEffect` (an observer's and `Driver.submit`'s types);
- the inputs the embedder submits, from the schedule (`PeriodElapsed`), the trainer
  (`TrainerBoundary`, `OptimizerStep*`, `TrainSwitch*`, `WeightSync*`, `GroupTrained`)
  and the dataloader (`GroupOpened`);
- the effects the embedder reads: `Outcome` (`Driver.outcomes`) and `Stopped`
  (`Driver.stopped`);
- what discovery establishes (`Fleet`, `Member`, `Topology`, `validate_discovery`), the
  recovery `Ledger`, and the refusals a start or a step raises (`DiscoveryRefused` and its
  kinds, `DuplicateParticipant`, `UnknownInput`).

Every other name is in `quiesce.protocol.controller.lowlevel`: the effects a driver carries
out and the inputs that report their outcomes (a driver matches each of them, an embedder
none), the ledger's records, the phase work and timers the models judge, and
`CoordinatorPolicy`, the bundle of pure decisions the mutants swap. A name moves up here
only when an embedder needs it.

>>> from quiesce.protocol import QuiesceConfig
>>> coordinator = Coordinator(QuiesceConfig())
>>> state, effects = coordinator.step(coordinator.initial(epoch=1), 0.0, PeriodElapsed())
>>> [(effect.result, effect.reason) for effect in effects if isinstance(effect, Outcome)]
[('skipped', 'not_discovered')]
"""

from quiesce.protocol.controller import lowlevel
from quiesce.protocol.controller._coordinator import Coordinator
from quiesce.protocol.controller._effects import ControllerEffect, Outcome, Stopped
from quiesce.protocol.controller._inputs import (
    ControllerInput,
    GroupOpened,
    GroupTrained,
    OptimizerStepBegin,
    OptimizerStepEnd,
    PeriodElapsed,
    TrainerBoundary,
    TrainSwitchBegin,
    TrainSwitchEnd,
    UnknownInput,
    WeightSyncBegin,
    WeightSyncEnd,
)
from quiesce.protocol.controller._ledger import Ledger
from quiesce.protocol.controller._recovery_levels import (
    DiscoveryRefused,
    DuplicateParticipant,
    Topology,
    UnknownRecoveryMode,
    UnknownRole,
    UnmanagedMultiProcess,
    validate_discovery,
)
from quiesce.protocol.controller._state import ControllerState, Fleet, Member

__all__ = [
    "ControllerEffect",
    "ControllerInput",
    "ControllerState",
    "Coordinator",
    "DiscoveryRefused",
    "DuplicateParticipant",
    "Fleet",
    "GroupOpened",
    "GroupTrained",
    "Ledger",
    "Member",
    "OptimizerStepBegin",
    "OptimizerStepEnd",
    "Outcome",
    "PeriodElapsed",
    "Stopped",
    "Topology",
    "TrainSwitchBegin",
    "TrainSwitchEnd",
    "TrainerBoundary",
    "UnknownInput",
    "UnknownRecoveryMode",
    "UnknownRole",
    "UnmanagedMultiProcess",
    "WeightSyncBegin",
    "WeightSyncEnd",
    "lowlevel",
    "validate_discovery",
]
