"""Work by effect name: the coordinator and the design model look up the work of M1's and
M9's effects in registries built against the same tables, and no name falls through."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from quiesce.fsm import Table, UnknownEffect
from quiesce.models.design._step import _M1_WORK, _M9_WORK
from quiesce.mutants import DESIGN_MUTANTS, MUTANTS
from quiesce.protocol.controller.lowlevel import CALL_WORK, CHECKPOINT_WORK, RESTORE_WORK
from quiesce.protocol.machines import CHECKPOINT, RESTORE

LEVELS: dict[str, tuple[Table[Any, Any], Mapping[str, Any], Mapping[str, Any]]] = {
    "checkpoint": (CHECKPOINT, CHECKPOINT_WORK, _M1_WORK),
    "restore": (RESTORE, RESTORE_WORK, _M9_WORK),
}


@pytest.mark.parametrize("machine", sorted(LEVELS))
def test_every_effect_name_has_work_on_both_levels(machine: str) -> None:
    table, coordinator, design = LEVELS[machine]
    assert set(coordinator) == set(table.effect_names) == set(design)


@pytest.mark.parametrize("work", [CHECKPOINT_WORK, RESTORE_WORK, CALL_WORK, _M1_WORK, _M9_WORK])
def test_an_unknown_effect_name_raises_naming_the_effect_and_the_table(
    work: Mapping[str, Any],
) -> None:
    with pytest.raises(KeyError) as raised:
        work["no_such_effect"]
    error = raised.value
    assert isinstance(error, UnknownEffect) and error.effect == "no_such_effect"
    assert error.machine in ("checkpoint", "restore", "call")
    assert "no_such_effect" in str(error) and error.machine in str(error)
    assert work.get("no_such_effect") is None  # `get` is a question, never a silent no-op


def _effect_names(table: Table[Any, Any]) -> set[str]:
    return set(table.effect_names)


def test_every_table_a_mutant_derives_names_only_effects_with_work() -> None:
    # Mutants drop, move and re-guard rows; none invents an effect name, so the registries
    # never meet a name they lack (an unknown one would raise, never do nothing).
    for name, mutant in MUTANTS.items():
        hooks = mutant.hooks()
        assert _effect_names(hooks.checkpoint) <= set(CHECKPOINT_WORK) & set(_M1_WORK), name
        assert _effect_names(hooks.call) <= set(CALL_WORK), name
    for name, design in DESIGN_MUTANTS.items():
        tables = design.tables()
        assert _effect_names(tables.checkpoint) <= set(_M1_WORK), name
        assert _effect_names(tables.restore) <= set(_M9_WORK), name
