"""Registration of the `design` model for `quiesce check design`.

`quiesce check design --set key=value` sets any field of `DesignParams` (defaults:
PROTOCOL.md §8's reference size, fault budget 1); `--faults K` is the fault budget;
`--mutant NAME` checks a design mutant (`_design_mutants.DESIGN_MUTANTS`) at the size given.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from quiesce.models._design_model import DesignModel
from quiesce.models._design_mutants import DESIGN_MUTANTS
from quiesce.models._design_state import DesignParams
from quiesce.models._registry import ModelSpec, params_of, register_model

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
    values = dict(params)
    if faults is not None:
        values["faults"] = faults
    chosen = DesignParams(**values)
    if mutant is None:
        return DesignModel(chosen)
    return DesignModel(chosen, tables=DESIGN_MUTANTS[mutant].tables(), name=f"design[{mutant}]")


_DEFAULTS = DesignParams()

DESIGN_SPEC = register_model(
    ModelSpec(
        name="design",
        factory=_build,
        doc="The design model: M1-M9's tables composed with atomic calls (§8 reference size).",
        params=params_of(_DEFAULTS, _DOCS),
        mutants={name: m.doc for name, m in DESIGN_MUTANTS.items()},
        faults=True,
    )
)
"""The `design` model's registration (`quiesce check design`)."""
