"""Generated mutants are named by their row (table, sources, input, guard), never by its
index: the names are unique, as many as before, shell-safe, unchanged when a row is
inserted; two rows of one name, and a survivor note naming no generated mutant, raise."""

from __future__ import annotations

import re
import shlex
from enum import Enum
from typing import Any

import pytest

from quiesce.fsm import Table, on
from quiesce.mutants import MUTANTS
from quiesce.mutants._catalog import _GENERATED_TABLES
from quiesce.mutants._names import mutant_name, row_index, row_key, row_keys
from quiesce.mutants._notes import SURVIVOR_NOTES, _retarget, check_notes
from quiesce.protocol.machines import (
    CHECKPOINT,
    CONTROL_FENCE,
    DEADLINE_REGISTRY,
    CheckpointInput,
    CheckpointState,
    FenceInput,
    FenceState,
    RegistryInput,
    RegistryState,
)
from tests import pins

GENERATED = [m for m in MUTANTS.values() if m.kind == "generated"]
GENERATED_NAMES = {m.name for m in GENERATED}


def test_every_generated_mutant_has_its_own_name_and_none_was_lost() -> None:
    # A collision would have dropped one from the catalog.
    assert len(GENERATED) == len(GENERATED_NAMES) == pins.GENERATED_MUTANTS
    assert len(MUTANTS) == pins.MUTANTS


def test_a_generated_name_is_its_rows_key_and_its_change() -> None:
    for mutant in GENERATED:
        site = mutant.site
        assert site is not None
        change = "drop_guard" if site.operator == "drop_guard" else "retarget="
        assert mutant.name.startswith(f"{row_key(site.table, site.row)}.{change}")
        assert mutant.name.startswith(f"{site.table.name}:")
    assert "checkpoint:abort_pending:trigger.retarget=committing" in MUTANTS
    assert "agent_execution:new:begin:admission_closed.drop_guard" in MUTANTS


def test_a_generated_name_is_shell_safe() -> None:
    for name in GENERATED_NAMES:
        assert re.fullmatch(r"[a-z_]+(:[a-z_+-]+){2,3}\.(drop_guard|retarget=[a-z_]+)", name)
        assert shlex.quote(name) == name  # nothing a shell would expand or split


def test_sources_are_one_state_several_joined_every_state_or_every_state_but_some() -> None:
    def key(table: Table[Any, Any], source: Enum, input: Enum, guard: str | None = None) -> str:
        return row_key(table, row_index(table, source, input, guard))

    assert key(CHECKPOINT, CheckpointState.IDLE, CheckpointInput.TRIGGER) == (
        "checkpoint:idle:trigger"
    )
    assert key(CHECKPOINT, CheckpointState.CLOSING_ADMISSION, CheckpointInput.FAILED) == (
        "checkpoint:closing_admission+flushing_acks:failed"
    )
    assert key(DEADLINE_REGISTRY, RegistryState.RUNNING, RegistryInput.STOP) == (
        "deadline_registry:any:stop"
    )
    assert key(CONTROL_FENCE, FenceState.IDLE, FenceInput.RECV_PREPARE, "stale_id") == (
        "control_fence:any:recv_prepare:stale_id"
    )
    assert key(CONTROL_FENCE, FenceState.PREPARING, FenceInput.RECV_PREPARE, "other_id_active") == (
        "control_fence:any-idle:recv_prepare:other_id_active"
    )
    assert key(CHECKPOINT, CheckpointState.PREPARING, CheckpointInput.FAILED, "fatal") == (
        "checkpoint:any-idle-stopped:failed:fatal"
    )


def _never(value: object, arg: object) -> bool:
    return False


def test_inserting_a_row_renames_no_other_row() -> None:
    for table in _GENERATED_TABLES:
        state = list(table.states)[-1]
        new = on(state, table.rows[0].input, None, guard="inserted")
        grown = table.derive("grown", rows=[new, *table.rows], guards={"inserted": _never})
        assert row_keys(grown)[1:] == row_keys(table)


def test_two_rows_of_one_key_raise() -> None:
    twice = CHECKPOINT.derive("twice", rows=[*CHECKPOINT.rows, CHECKPOINT.rows[3]])
    with pytest.raises(ValueError, match="rows 3 and 32 of 'checkpoint' are both"):
        row_keys(twice)


def test_a_name_part_a_shell_would_split_raises() -> None:
    with pytest.raises(ValueError, match="not a name part"):
        mutant_name(CHECKPOINT, 1, "retarget", "two words")


def test_every_survivor_note_is_checked_against_the_generated_names() -> None:
    check_notes(SURVIVOR_NOTES, GENERATED_NAMES)  # what the import does
    # A holding row is never retargeted to its own single source: no such mutant.
    own = _retarget(
        CHECKPOINT, CheckpointState.PUBLISHING, CheckpointInput.PUBLISH_FAILED, to="publishing"
    )
    assert own not in GENERATED_NAMES
    with pytest.raises(LookupError, match=re.escape(own)):
        check_notes({**SURVIVOR_NOTES, own: "a stale note"}, GENERATED_NAMES)


def test_a_note_for_a_row_the_table_lacks_raises() -> None:
    with pytest.raises(LookupError, match="checkpoint has no row idle trigger"):
        _retarget(CHECKPOINT, CheckpointState.IDLE, CheckpointInput.TRIGGER, "gone", to="idle")
