"""Registration of the `protocol` model for `quiesce check` (the default model).

`quiesce check --set key=value` sets any field of `ProtocolParams` (defaults: PROTOCOL.md §8
reference size); `--faults K` is the fault budget; `--mutant NAME` checks a catalog mutant
(`quiesce.mutants` attaches them; `quiesce mutants` lists them).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from quiesce.check import ModelSpec, params_of, register_model, with_faults
from quiesce.models.implementation._model import ProtocolModel
from quiesce.models.implementation._state import ProtocolParams
from quiesce.protocol import RecoveryMode

__all__ = ["PROTOCOL_SPEC"]

_DOCS = {
    "siblings": "siblings of the prompt group (G)",
    "turns": "turns of every rollout",
    "attempts": "attempts per rollout (deadline retries bounded by it)",
    "triggers": "checkpoint triggers (periodic or trainer boundary)",
    "optimizer_steps": "optimizer steps (0 or 1)",
    "weight_sync": "weight syncs (0 or 1)",
    "train_switch": "train switches (0 or 1)",
    "prepare_retries": "not-ready prepare retries per attempt before its deadline",
    "faults": "fault budget (a crash counts as a fault); --faults sets it too",
    "agents": "agent servers (the group runs on the first)",
    "max_consecutive_failures": "the controller's max_consecutive_failures",
    "call_retries": "the controller's call_retries (§4 retries inside an attempt)",
    "group_scored": "the agent's environment is group-scored",
    "recovery_mode": "the resources server's recovery mode",
    "crashes": "controller and participant crashes are faults",
    "digest_faults": "wrong digests at restore (S16), a budget beside faults",
}


_DEFAULTS = ProtocolParams()


def _build(params: Mapping[str, Any], faults: int | None, mutant: str | None) -> ProtocolModel:
    # `mutant` is always None: the registry builds a mutant with the factory that
    # `quiesce.mutants` attached (`add_mutants`).
    return ProtocolModel(ProtocolParams(**with_faults(params, faults)))


PROTOCOL_SPEC = register_model(
    ModelSpec(
        name="protocol",
        factory=_build,
        doc="The composed checkpoint protocol (PROTOCOL.md §8 reference size by default).",
        params=params_of(_DEFAULTS, _DOCS, {"recovery_mode": RecoveryMode}),
        faults=True,
    )
)
