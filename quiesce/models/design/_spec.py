"""Registration of the `design` model for `quiesce check design`.

`quiesce check design --set key=value` sets any field of `DesignParams` (defaults:
PROTOCOL.md §8's reference size, fault budget 1); `--faults K` is the fault budget;
`--mutant NAME` checks a design mutant at the size given (`quiesce.mutants` attaches them).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from quiesce.check import ModelSpec, params_of, register_model, with_faults
from quiesce.models.design._model import DesignModel
from quiesce.models.design._state import DesignParams
from quiesce.protocol import RecoveryMode

__all__ = ["DESIGN_SPEC"]

_DOCS = {
    "siblings": "siblings of the prompt group (G)",
    "turns": "turns of every rollout",
    "attempts": "attempts per sibling; past them the group is abandoned (counted)",
    "triggers": "checkpoint triggers (periodic or trainer boundary)",
    "optimizer_steps": "optimizer steps (0 or 1); the step trains the finished group",
    "weight_sync": "weight syncs (0 or 1), after the optimizer step",
    "train_switch": "train switches (0 or 1)",
    "prepare_retries": "not-ready prepare retries per attempt before its deadline",
    "call_retries": "in-attempt retries of a failed call, same op id (PROTOCOL.md §4)",
    "faults": "fault budget (a crash counts as one); --faults sets it too",
    "max_consecutive_failures": "the controller's max_consecutive_failures",
    "recovery_mode": "the resources server's recovery mode",
    "crashes": "controller and participant crashes are faults",
    "symmetry": "identify states that differ only by the naming of siblings",
}


def _build(params: Mapping[str, Any], faults: int | None, mutant: str | None) -> DesignModel:
    # `mutant` is always None: the registry builds a mutant with the factory that
    # `quiesce.mutants` attached (`add_mutants`).
    return DesignModel(DesignParams(**with_faults(params, faults)))


_DEFAULTS = DesignParams()

DESIGN_SPEC = register_model(
    ModelSpec(
        name="design",
        factory=_build,
        doc="The design model: M1-M9's tables composed with atomic calls (§8 reference size).",
        params=params_of(_DEFAULTS, _DOCS, {"recovery_mode": RecoveryMode}),
        faults=True,
    )
)
"""The `design` model's registration (`quiesce check design`)."""
