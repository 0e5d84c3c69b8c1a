"""One list of known bugs for both model levels: every scenario mutant of the protocol
model and every design mutant is a known bug under its one name, every known bug is
carried by some level, and a bug that lives in a table runs the very same table on both."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import pytest

from quiesce.fsm import Table
from quiesce.models import Hooks
from quiesce.mutants import DESIGN_MUTANTS, KNOWN_BUGS, MUTANTS, KnownBug

SCENARIO = {name: m for name, m in MUTANTS.items() if m.kind == "scenario"}


def _tables(*holders: Any) -> dict[str, Table[Any, Any]]:
    """The tables among the fields of `holders` (hooks, participant rules, design tables),
    by table name."""
    found = [getattr(holder, f.name) for holder in holders for f in fields(holder)]
    return {t.name: t for t in found if isinstance(t, Table)}


def _protocol_tables(hooks: Hooks) -> dict[str, Table[Any, Any]]:
    return _tables(hooks, hooks.participant)


def test_every_mutant_of_either_level_is_a_known_bug_under_its_one_name() -> None:
    for mutant in [*SCENARIO.values(), *DESIGN_MUTANTS.values()]:
        bug = KNOWN_BUGS[mutant.name]
        assert (mutant.scenario, mutant.doc) == (bug.scenario, bug.doc), mutant.name


def test_every_known_bug_is_carried_by_some_level() -> None:
    assert set(KNOWN_BUGS) == set(SCENARIO) | set(DESIGN_MUTANTS)
    # Only a bug in a table is a design bug: the design model composes tables.
    assert all(KNOWN_BUGS[name].table is not None for name in DESIGN_MUTANTS)


@pytest.mark.parametrize(
    "bug",
    [KNOWN_BUGS[n] for n in sorted(set(SCENARIO) & set(DESIGN_MUTANTS))],
    ids=lambda bug: bug.name,
)
def test_a_bug_both_levels_carry_runs_one_derived_table_on_both(bug: KnownBug) -> None:
    assert bug.table is not None
    derived = bug.table()
    design = _tables(DESIGN_MUTANTS[bug.name].tables())[derived.name]
    assert (design.rows, design.variant) == (derived.rows, derived.variant)
    assert derived.variant is not None
    if derived.name not in _protocol_tables(Hooks()):
        # A table the protocol model does not run (S12's M9: it plans a restore's discards
        # in the coordinator's policy), so its mutant is built another way.
        return
    protocol = _protocol_tables(SCENARIO[bug.name].hooks())[derived.name]
    assert (protocol.rows, protocol.variant) == (design.rows, design.variant)
