"""A malformed table is refused when built, with every problem listed in one error.

Each test starts from one well-formed table and breaks exactly one thing, so the error
must carry exactly that one kind of problem (and name the offending value).
"""

from __future__ import annotations

from enum import Enum
from typing import Any

import pytest

from quiesce.fsm import DefinitionError, QuiesceError, Row, Table, each, on


class S(Enum):
    IDLE = "idle"
    BUSY = "busy"
    DONE = "done"


class I(Enum):  # noqa: E742
    START = "start"
    FINISH = "finish"


class Other(Enum):
    STRAY = "stray"


GOOD_ROWS = [
    on(S.IDLE, I.START, S.BUSY, guard="ready"),
    on(S.BUSY, I.FINISH, S.DONE),
]


def build(rows: list[Row] | None = None, **changes: Any) -> Table[S, I]:
    """The well-formed table, with `changes` applied to its keyword arguments."""
    arguments: dict[str, Any] = {
        "states": S,
        "inputs": I,
        "initial": S.IDLE,
        "finals": [S.DONE],
        "rows": GOOD_ROWS if rows is None else rows,
        "ignored": [(S.IDLE, I.FINISH), (S.BUSY, I.START)],
        "forbidden": each(S.DONE, I),
        "guards": {"ready": lambda value, arg: True},
    }
    arguments.update(changes)
    return Table("broken", **arguments)


def problems_of(**changes: Any) -> DefinitionError:
    with pytest.raises(DefinitionError) as caught:
        build(**changes)
    return caught.value


def test_the_starting_table_is_well_formed() -> None:
    table = build()
    assert table.problems == ()


def test_unknown_state_names_the_stray_member() -> None:
    error = problems_of(rows=[*GOOD_ROWS, on(Other.STRAY, I.START, S.BUSY)])
    assert error.kinds == {"unknown_state"}
    assert "Other.STRAY" in str(error) and "row 2" in str(error)


def test_unknown_state_as_initial() -> None:
    error = problems_of(initial=Other.STRAY)
    assert error.kinds == {"unknown_state"}
    assert "initial" in str(error)


def test_unknown_input_names_the_stray_member() -> None:
    error = problems_of(rows=[*GOOD_ROWS, on(S.BUSY, Other.STRAY, S.IDLE)])
    assert error.kinds == {"unknown_input"}
    assert "Other.STRAY" in str(error)


def test_unknown_name_of_an_unbound_guard() -> None:
    error = problems_of(guards={})
    assert error.kinds == {"unknown_name"}
    assert "'ready'" in str(error)


def test_unknown_name_of_an_unbound_update() -> None:
    rows = [on(S.IDLE, I.START, S.BUSY, guard="ready", update="count"), GOOD_ROWS[1]]
    error = problems_of(rows=rows)
    assert error.kinds == {"unknown_name"}
    assert "update 'count'" in str(error)


def test_unreachable_state() -> None:
    class Extra(Enum):
        IDLE = "idle"
        BUSY = "busy"
        DONE = "done"
        LIMBO = "limbo"

    error = problems_of(
        states=Extra,
        initial=Extra.IDLE,
        finals=[Extra.DONE, Extra.LIMBO],
        rows=[on(Extra.IDLE, I.START, Extra.BUSY), on(Extra.BUSY, I.FINISH, Extra.DONE)],
        ignored=[(Extra.IDLE, I.FINISH), (Extra.BUSY, I.START)],
        forbidden=each([Extra.DONE, Extra.LIMBO], I),
        guards={},
    )
    assert error.kinds == {"unreachable_state"}
    assert "limbo cannot be reached from idle" in str(error)


def test_dead_end_is_a_non_final_state_without_a_way_out() -> None:
    error = problems_of(finals=[])
    assert error.kinds == {"dead_end"}
    assert "done is not final" in str(error)


def test_a_self_loop_is_not_a_way_out() -> None:
    rows = [*GOOD_ROWS, on(S.DONE, I.START, S.DONE)]
    forbidden = [(S.DONE, I.FINISH)]
    error = problems_of(rows=rows, finals=[], forbidden=forbidden)
    assert error.kinds == {"dead_end"}


def test_unhandled_input() -> None:
    class More(Enum):
        START = "start"
        FINISH = "finish"
        PING = "ping"

    error = problems_of(
        inputs=More,
        rows=[on(S.IDLE, More.START, S.BUSY), on(S.BUSY, More.FINISH, S.DONE)],
        ignored=[(S.IDLE, More.FINISH), (S.BUSY, More.START), *each([S.IDLE, S.BUSY], More.PING)],
        forbidden=each(S.DONE, More),
        guards={},
    )
    assert error.kinds == {"unhandled_input"}
    assert "no state handles ping" in str(error)


def test_shadowed_row_behind_an_unguarded_one() -> None:
    rows = [
        on(S.IDLE, I.START, S.BUSY),
        on(S.IDLE, I.START, S.DONE, guard="ready"),
        GOOD_ROWS[1],
    ]
    error = problems_of(rows=rows)
    assert error.kinds == {"shadowed_row"}
    assert "row 1 (idle + start) never fires: unguarded row 0 comes first" in str(error)


def test_a_guarded_row_first_shadows_nothing() -> None:
    rows = [
        on(S.IDLE, I.START, S.BUSY, guard="ready"),
        on(S.IDLE, I.START, S.DONE),
        GOOD_ROWS[1],
    ]
    assert build(rows=rows).problems == ()


def test_unmapped_pair() -> None:
    error = problems_of(ignored=[(S.IDLE, I.FINISH)])
    assert error.kinds == {"unmapped_pair"}
    assert "busy + start is neither mapped nor ignored nor forbidden" in str(error)


def test_unmapped_forbidden_declares_the_rest_refused() -> None:
    table = build(ignored=[], forbidden=[], unmapped="forbidden")
    assert table.disposition(S.BUSY, I.START) == "forbidden"


def test_conflicting_pair_mapped_and_ignored() -> None:
    error = problems_of(ignored=[(S.IDLE, I.FINISH), (S.BUSY, I.START), (S.IDLE, I.START)])
    assert error.kinds == {"conflicting_pair"}
    assert "idle + start is mapped and also declared ignored/forbidden" in str(error)


def test_conflicting_pair_ignored_and_forbidden() -> None:
    error = problems_of(forbidden=[*each(S.DONE, I), (S.BUSY, I.START)])
    assert error.kinds == {"conflicting_pair"}
    assert "busy + start is both ignored and forbidden" in str(error)


def test_every_structural_problem_is_listed_in_one_error() -> None:
    class Many(Enum):
        IDLE = "idle"
        BUSY = "busy"
        DONE = "done"
        LIMBO = "limbo"

    class Inputs(Enum):
        START = "start"
        FINISH = "finish"
        PING = "ping"

    with pytest.raises(DefinitionError) as caught:
        Table(
            "many",
            states=Many,
            inputs=Inputs,
            initial=Many.IDLE,
            rows=[
                on(Many.IDLE, Inputs.START, Many.BUSY),
                on(Many.IDLE, Inputs.START, Many.DONE),  # shadowed
                on(Many.BUSY, Inputs.FINISH, Many.DONE),
            ],
            # done is not final: a dead end; limbo is unreachable; nobody handles ping;
            # (busy, finish) is mapped and ignored; most other pairs are unmapped.
            ignored=[(Many.BUSY, Inputs.FINISH)],
        )
    error = caught.value
    assert error.kinds == {
        "shadowed_row",
        "dead_end",
        "unreachable_state",
        "unhandled_input",
        "conflicting_pair",
        "unmapped_pair",
    }
    assert error.table == "many"
    # Every unmapped pair is listed, not just the first: 4 states x 3 inputs minus the 2
    # mapped pairs (idle + start, busy + finish) leaves 10.
    assert sum(kind == "unmapped_pair" for kind, _ in error.problems) == 10
    assert f"({len(error.problems)} problems)" in str(error)
    assert isinstance(error, QuiesceError)


def test_every_fatal_problem_is_listed_in_one_error() -> None:
    with pytest.raises(DefinitionError) as caught:
        build(
            rows=[
                on(Other.STRAY, I.START, S.BUSY),
                on(S.BUSY, Other.STRAY, S.DONE),
                on(S.IDLE, I.START, S.BUSY, guard="missing"),
            ],
        )
    assert caught.value.kinds == {"unknown_state", "unknown_input", "unknown_name"}


def test_structural_problems_are_kept_when_not_strict() -> None:
    # `strict=False` is how derived tables (mutants) are built: compiled, problems kept.
    table = build(finals=[], strict=False)
    assert [kind for kind, _ in table.problems] == ["dead_end"]


def test_fatal_problems_refuse_even_when_not_strict() -> None:
    with pytest.raises(DefinitionError) as caught:
        build(guards={}, strict=False)
    assert caught.value.kinds == {"unknown_name"}
