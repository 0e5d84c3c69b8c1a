"""Design mutants: each re-introduces a known design bug by deriving a table, and the design
model must kill it.

What lives here: `DESIGN_MUTANTS`, one entry per bug, each naming its §7 scenario, how its
tables are derived from the machines' own (`without_row`, `retarget`, `without_guard`,
`derive`: the original tables are untouched, nothing is patched; a bug the protocol model's
catalog carries too is the very table `_bugs` derives for both), the property that kills
it and the smallest configuration that does; `kill` runs one. What it does not know: the
implementation mutants (`quiesce.mutants._catalog`, for the `protocol` model), or bugs that
live outside the tables (the controller's digest check of S16, the journal of S19, the
"attempted before the call" rule of S6): the design model composes tables, so only a bug
in a table is a design bug it can be asked to find.

>>> result = kill(DESIGN_MUTANTS["S17_retire_releases_completed"])  # doctest: +SKIP
>>> result.violation("I1") is not None  # doctest: +SKIP
True
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import quiesce.mutants._bugs as bugs
from quiesce.check import CheckResult, add_mutants, check, with_faults
from quiesce.fsm import Table
from quiesce.models.design import DesignModel, DesignParams, DesignTables
from quiesce.mutants._names import row_index
from quiesce.protocol.machines import (
    CONTROL_FENCE,
    RESTORE,
    FenceInput,
    FenceState,
    RestoreInput,
    RestoreState,
)

__all__ = ["DESIGN_MUTANTS", "DesignMutant", "kill", "small"]


@dataclass(frozen=True)
class DesignMutant:
    """One design bug: the tables that carry it, the property that must kill it (`I1`..`I9`)
    and the smallest configuration that does (`params`, over `small()`)."""

    name: str
    scenario: str
    doc: str
    tables: Callable[[], DesignTables]
    killed_by: str
    params: Mapping[str, Any] = field(default_factory=dict)

    def model(self) -> DesignModel:
        """The design model carrying this bug, at its killing configuration."""
        return DesignModel(
            DesignParams(**small(**self.params)), tables=self.tables(), name=f"design[{self.name}]"
        )


def small(**overrides: Any) -> dict[str, Any]:
    """A small configuration: one sibling of one turn, one trigger, the optimizer step that
    trains it, nothing else unless asked (the other parameters at their defaults)."""
    base: dict[str, Any] = dict(
        siblings=1,
        turns=1,
        attempts=1,
        triggers=1,
        optimizer_steps=1,  # the trainer consumes the group (I9)
        weight_sync=0,
        train_switch=0,
        faults=0,
        crashes=False,
    )
    base.update(overrides)
    return base


def kill(mutant: DesignMutant, max_states: int | None = None) -> CheckResult[Any]:
    """Explore the mutant's model until the first violation (or exhaustion)."""
    return check(mutant.model(), max_states=max_states)


_BASE = DesignTables()


def _carrying(scenario: str, **tables: Callable[[], Table[Any, Any]]) -> Callable[[], DesignTables]:
    """The design's tables with each of `tables` (a known bug's table, `_bugs`: derived
    once for both model levels) in its place."""

    def derive() -> DesignTables:
        return _BASE.derive(scenario, **{slot: bug() for slot, bug in tables.items()})

    return derive


def _restart_only_resumed() -> DesignTables:
    # S12: restored continuations on a restart_only resource are not discarded first.
    index = row_index(
        RESTORE, RestoreState.RESTORED_PAUSED, RestoreInput.DISCARD_BEGIN, "has_discards"
    )
    return _BASE.derive("S12", restore=RESTORE.without_row(index))


def _commit_not_replayed() -> DesignTables:
    # M2: the same commit(X) after a lost reply is not answered from the record.
    index = row_index(CONTROL_FENCE, FenceState.COMMITTED_PAUSED, FenceInput.RECV_COMMIT, "same_id")
    return _BASE.derive("M2-commit", fence=CONTROL_FENCE.without_row(index))


def _final_resume_not_replayed() -> DesignTables:
    # M2: a repeated resume(X) of the newest retired id is refused as stale, not replayed.
    index = row_index(CONTROL_FENCE, FenceState.IDLE, FenceInput.RECV_RESUME, "watermark_id")
    return _BASE.derive("M2-resume", fence=CONTROL_FENCE.without_row(index))


DESIGN_MUTANTS: Mapping[str, DesignMutant] = {
    m.name: m
    for m in (
        DesignMutant(
            "S1_deadline_runs_while_parked",
            "S1",
            "the checkpoint's hold does not suspend the deadline clocks",
            _carrying("S1", deadlines=bugs.deadline_runs_while_parked),
            "I4",
        ),
        DesignMutant(
            "S2_boolean_suspend",
            "S2",
            "a boolean, not a holder set: the train switch's end restarts the clocks",
            _carrying("S2", deadlines=bugs.boolean_suspend),
            "I4",
            {"train_switch": 1},
        ),
        DesignMutant(
            "S4_release_failure_stops",
            "S4",
            "a release that fails after its retries stops the run, not release_pending",
            _carrying("S4", checkpoint=bugs.release_failure_stops),
            "I7",
            {"faults": 1, "call_retries": 0},
        ),
        DesignMutant(
            "S5_abort_with_new_id",
            "S5",
            "a pending abort of X is dropped at the next trigger; the next attempt is new",
            _carrying("S5", checkpoint=bugs.abort_with_new_id),
            "I3",
            {"faults": 1, "call_retries": 0, "triggers": 2},
        ),
        DesignMutant(
            "S12_restart_only_resumed",
            "S12",
            "a restored continuation on a restart_only resource is resumed, not discarded",
            _restart_only_resumed,
            "I8",
            {"turns": 2, "attempts": 2, "faults": 1, "crashes": True},
        ),
        DesignMutant(
            "S15_stale_prepare_accepted",
            "S15",
            "a delayed prepare(X) after resume(X) is accepted (no high-watermark check)",
            _carrying("S15", fence=bugs.stale_prepare_accepted),
            "I3",
            {"faults": 1},
        ),
        DesignMutant(
            "S17_retire_releases_completed",
            "S17",
            "retire tombstones a completed, un-ACKed execution",
            _carrying("S17", execution=bugs.retire_releases_completed),
            "I1",
            {"attempts": 2, "triggers": 0, "faults": 1},
        ),
        DesignMutant(
            "S18_intent_ignored_at_restart",
            "S18",
            "a restarted controller ignores the intent record of the id in flight",
            _carrying("S18", checkpoint=bugs.intent_ignored),
            "I6",
            {"faults": 1, "crashes": True},
        ),
        DesignMutant(
            "M2_commit_not_replayed",
            "§4",
            "a retried commit(X) whose first reply was lost is not answered from the record",
            _commit_not_replayed,
            "I7",
            {"faults": 1},
        ),
        DesignMutant(
            "M2_final_resume_not_replayed",
            "S4",
            "a repeated resume(X) of the newest retired id is refused as stale",
            _final_resume_not_replayed,
            "I7",
            {"faults": 1},
        ),
    )
}
"""Every design mutant by name (`quiesce check design --mutant NAME`)."""


def _build(params: Mapping[str, Any], faults: int | None, mutant: str | None) -> DesignModel:
    assert mutant is not None  # the registry calls it for these mutants only
    chosen = DesignParams(**with_faults(params, faults))
    return DesignModel(chosen, tables=DESIGN_MUTANTS[mutant].tables(), name=f"design[{mutant}]")


add_mutants("design", {name: m.doc for name, m in DESIGN_MUTANTS.items()}, _build)
