"""Row coverage of the protocol tables and the swarm: many coverage-directed walkers with
bitstate visited sets, here or on Ray, whose findings are merged (`quiesce swarm`).
"""

from __future__ import annotations

from quiesce.models.coverage._row_coverage import (
    RowCoverage,
    recording_design_tables,
    recording_hooks,
)
from quiesce.models.coverage._swarm import (
    DEFAULT_BITSTATE_BITS,
    ReplayFailed,
    RowReport,
    SwarmRequest,
    SwarmResult,
    SwarmSettings,
    WalkerResult,
    swarm,
)
from quiesce.models.coverage._swarm_ray import SwarmRayError, ray_runner

__all__ = [
    "DEFAULT_BITSTATE_BITS",
    "ReplayFailed",
    "RowCoverage",
    "RowReport",
    "SwarmRayError",
    "SwarmRequest",
    "SwarmResult",
    "SwarmSettings",
    "WalkerResult",
    "ray_runner",
    "recording_design_tables",
    "recording_hooks",
    "swarm",
]
