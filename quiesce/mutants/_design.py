"""Design mutants: each re-introduces a known design bug by deriving a table, and the design
model must kill it.

What lives here: `DESIGN_MUTANTS`, one entry per known bug that lives in a table
(`_bugs.KNOWN_BUGS`: its name, scenario and table, derived once for both model levels from
the machines' own, which stay untouched), the property that kills it and the smallest
configuration that does. What it does not know: the implementation mutants (`_catalog`,
for the `protocol` model), or bugs that live outside the tables (S16's digest check, S19's
journal, S6's "attempted before the call"): the design model composes tables, so only a
bug in a table is a design bug it can be asked to find.

>>> result = check(DESIGN_MUTANTS["S17_retire_releases_completed"].model())  # doctest: +SKIP
>>> result.violation("I1") is not None  # doctest: +SKIP
True
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

import quiesce.mutants._bugs as bugs
from quiesce.check import add_mutants, with_faults
from quiesce.fsm import Table
from quiesce.models.design import DesignModel, DesignParams, DesignTables

__all__ = ["DESIGN_MUTANTS", "DesignMutant", "design_tables", "small"]


@dataclass(frozen=True)
class DesignMutant:
    """One design bug (`_bugs.KNOWN_BUGS`, under its name, scenario and doc): the table that
    carries it, the property that must kill it (`killed_by`, `I1`..`I9`) and the smallest
    configuration that does (`params`, over `small()`)."""

    name: str
    scenario: str
    doc: str
    table: bugs.Derive
    killed_by: str
    params: Mapping[str, Any]

    @classmethod
    def of(cls, bug: bugs.KnownBug) -> DesignMutant:
        """The design mutant of `bug`, which must live in a table and name a design check."""
        if bug.design is None or bug.table is None:
            raise ValueError(
                f"known bug {bug.name} has no design check or lives outside the tables:"
                " the design model composes tables, so it can carry only a bug in one"
            )
        return cls(bug.name, bug.scenario, bug.doc, bug.table, bug.design.check, bug.design.params)

    def tables(self) -> DesignTables:
        """The design's tables with the bug's table in the place of the machine it changes."""
        return design_tables(self.scenario, self.table())

    def model(self) -> DesignModel:
        """The design model carrying this bug, at its killing configuration."""
        return DesignModel(
            DesignParams(**small(**self.params)), tables=self.tables(), name=f"design[{self.name}]"
        )


def small(**overrides: Any) -> dict[str, Any]:
    """A small configuration: one sibling of one turn, one trigger, the optimizer step that
    trains it, nothing else unless asked (the other parameters at their defaults)."""
    return {
        "siblings": 1,
        "turns": 1,
        "attempts": 1,
        "triggers": 1,
        "optimizer_steps": 1,  # the trainer consumes the group (I9)
        "weight_sync": 0,
        "train_switch": 0,
        "faults": 0,
        "crashes": False,
        **overrides,
    }


_BASE = DesignTables()
_SLOTS = {getattr(_BASE, f.name).name: f.name for f in fields(DesignTables) if f.name != "variant"}
"""The `DesignTables` field that plays each machine, by the machine's table name."""


def design_tables(variant: str, table: Table[Any, Any]) -> DesignTables:
    """The design's tables, as `variant`, with `table` in the place of the machine of its
    name."""
    return _BASE.derive(variant, **{_SLOTS[table.name]: table})


DESIGN_MUTANTS: Mapping[str, DesignMutant] = {
    bug.name: DesignMutant.of(bug) for bug in bugs.KNOWN_BUGS.values() if bug.design is not None
}
"""Every design mutant by name (`quiesce check design --mutant NAME`)."""


def _build(params: Mapping[str, Any], faults: int | None, mutant: str | None) -> DesignModel:
    assert mutant is not None  # the registry calls it for these mutants only
    chosen = DesignParams(**with_faults(params, faults))
    return DesignModel(chosen, tables=DESIGN_MUTANTS[mutant].tables(), name=f"design[{mutant}]")


add_mutants("design", {name: m.doc for name, m in DESIGN_MUTANTS.items()}, _build)
