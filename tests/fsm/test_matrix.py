"""State x input grids: the builder, its Markdown and JSON, and the committed-grid check."""

from __future__ import annotations

from enum import Enum
from pathlib import Path

import pytest

from quiesce.fsm import (
    MATRIX_REGENERATE_COMMAND,
    MatrixCell,
    MatrixMove,
    Table,
    each,
    matrix,
    on,
    render_matrix,
    write_matrices,
)
from quiesce.protocol.machines import TABLES as REGISTERED

GRIDS = Path(__file__).resolve().parents[2] / "docs" / "tables"


class Lamp(Enum):
    OFF = "off"
    ON = "on"
    BROKEN = "broken"


class Press(Enum):
    FLIP = "flip"
    TAP = "tap"
    SURGE = "surge"


# Every kind of cell: a guarded row before an unguarded one, a row that holds, an explicit
# self-target, an ignored pair, declared forbidden pairs and a pair refused as unmapped.
LAMP: Table[Lamp, Press] = Table(
    "lamp",
    doc="L1: a lamp that a surge breaks.",
    states=Lamp,
    inputs=Press,
    initial=Lamp.OFF,
    finals=[Lamp.BROKEN],
    rows=[
        on(Lamp.OFF, Press.FLIP, Lamp.ON, guard="has_power", effects="light"),
        on(Lamp.OFF, Press.FLIP, None),
        on(Lamp.ON, Press.FLIP, Lamp.OFF),
        on(Lamp.ON, Press.TAP, Lamp.ON, update="count", effects=("blink", "log")),
        on((Lamp.OFF, Lamp.ON), Press.SURGE, Lamp.BROKEN),
    ],
    ignored=[(Lamp.OFF, Press.TAP)],
    forbidden=each(Lamp.BROKEN, (Press.FLIP, Press.TAP)),
    unmapped="forbidden",  # leaves broken + surge to the policy
    guards={"has_power": lambda value, arg: bool(arg)},
    updates={"count": lambda data, arg: data},
)


def test_every_pair_has_one_cell_in_enum_order() -> None:
    grid = matrix(LAMP)
    assert grid.states == ("off", "on", "broken")
    assert grid.inputs == ("flip", "tap", "surge")
    assert [[(c.state, c.input) for c in row] for row in grid.cells] == [
        [(s, i) for i in grid.inputs] for s in grid.states
    ]
    assert (grid.initial, grid.finals, grid.unmapped) == ("off", ("broken",), "forbidden")


def test_a_guarded_row_and_its_fallback_are_two_lines_in_priority_order() -> None:
    cell = matrix(LAMP).cell("off", "flip")
    assert cell.disposition == "mapped"
    assert cell.moves == (
        MatrixMove(row=0, target="on", holds=False, guard="has_power", effects=("light",)),
        MatrixMove(row=1, target="off", holds=True),
    )
    assert cell.lines() == ("on [has_power]", "(holds)")


def test_a_row_that_keeps_the_state_holds_whether_or_not_it_names_a_target() -> None:
    tap = matrix(LAMP).cell("on", "tap")
    assert tap.lines() == ("(holds)",)
    assert tap.moves[0] == MatrixMove(3, "on", True, None, "count", ("blink", "log"))


def test_one_row_with_several_sources_fills_each_of_their_cells() -> None:
    grid = matrix(LAMP)
    assert grid.cell("off", "surge").lines() == grid.cell("on", "surge").lines() == ("broken",)
    assert grid.cell("off", "surge").moves[0].row == grid.cell("on", "surge").moves[0].row == 4


def test_ignored_declared_forbidden_and_unmapped_pairs() -> None:
    grid = matrix(LAMP)
    assert grid.cell("off", "tap") == MatrixCell("off", "tap", "ignored")
    assert grid.cell("broken", "flip") == MatrixCell("broken", "flip", "forbidden", declared=True)
    assert grid.cell("broken", "surge") == MatrixCell(
        "broken", "surge", "forbidden", declared=False
    )
    assert grid.cell("broken", "surge").lines() == ("forbidden",)


def test_cells_agree_with_the_table_disposition_of_every_registered_pair() -> None:
    for table in REGISTERED.values():
        grid = matrix(table)
        for state in table.states:
            for input in table.inputs:
                cell = grid.cells[list(table.states).index(state)][list(table.inputs).index(input)]
                assert cell.disposition == table.disposition(state, input), (table.name, cell)
                assert [m.row for m in cell.moves] == [
                    table.rows.index(r) for r in table.rows_for(state, input)
                ]


def test_an_unknown_name_is_a_key_error_naming_the_known_ones() -> None:
    with pytest.raises(KeyError, match=r"no state 'lit'.*'off', 'on', 'broken'"):
        matrix(LAMP).cell("lit", "flip")
    with pytest.raises(KeyError, match=r"no input 'kick'"):
        matrix(LAMP).cell("off", "kick")


def test_json_grid_is_keyed_by_state_then_input() -> None:
    document = matrix(LAMP).to_json()
    assert document["states"] == ["off", "on", "broken"]
    assert document["grid"]["off"]["flip"] == {
        "disposition": "mapped",
        "text": ["on [has_power]", "(holds)"],
        "moves": [
            {
                "row": 0,
                "target": "on",
                "holds": False,
                "guard": "has_power",
                "update": None,
                "effects": ["light"],
            },
            {
                "row": 1,
                "target": "off",
                "holds": True,
                "guard": None,
                "update": None,
                "effects": [],
            },
        ],
    }
    assert document["grid"]["off"]["tap"] == {
        "disposition": "ignored",
        "text": ["ignored"],
        "declared": True,
    }
    assert document["grid"]["broken"]["surge"]["declared"] is False


def test_markdown_is_a_titled_pipe_table_with_initial_and_final_marked() -> None:
    assert render_matrix(LAMP) == (
        "# L1 lamp\n"
        "\n"
        f"<!-- generated from the table; regenerate with: {MATRIX_REGENERATE_COMMAND} -->\n"
        "\n"
        "L1: a lamp that a surge breaks.\n"
        "\n"
        "What happens when an input (column) arrives in a state (row): the target state,\n"
        "`(holds)` when the state does not change, `[guard]` when the row is guarded. Several\n"
        "rows are listed in priority order: the first whose guard holds fires; when every row\n"
        "is guarded and none holds, the input is refused with `GuardRejected`.\n"
        "`ignored`: accepted, nothing changes.\n"
        "`forbidden`: refused with `TransitionNotAllowed` (declared, or mapped by no row).\n"
        "\n"
        "| state \\ input  | flip                      | tap       | surge     |\n"
        "| -------------- | ------------------------- | --------- | --------- |\n"
        "| off (initial)  | on [has_power]<br>(holds) | ignored   | broken    |\n"
        "| on             | off                       | (holds)   | broken    |\n"
        "| broken (final) | forbidden                 | forbidden | forbidden |\n"
    )


def test_a_doc_without_a_tag_titles_the_name_and_a_variant_says_so() -> None:
    plain = Table(
        "switch",
        states=Lamp,
        inputs=Press,
        initial=Lamp.OFF,
        rows=[on(Lamp.OFF, Press.FLIP, Lamp.ON), on(Lamp.ON, Press.SURGE, Lamp.BROKEN)],
        finals=[Lamp.BROKEN],
        unmapped="forbidden",
        strict=False,
    )
    assert render_matrix(plain).startswith("# switch\n\n<!--")
    assert "(declared)" not in render_matrix(plain)  # unmapped pairs are refused too
    assert render_matrix(LAMP.without_row(1)).startswith("# L1 lamp (variant drop_row[1])\n")


def test_a_sub_machine_of_several_machines_is_titled_with_every_tag() -> None:
    shared = Table(
        "switch",
        doc="L1/L2: a switch both lamps use.",
        states=Lamp,
        inputs=Press,
        initial=Lamp.OFF,
        rows=[on(Lamp.OFF, Press.FLIP, Lamp.ON), on(Lamp.ON, Press.SURGE, Lamp.BROKEN)],
        finals=[Lamp.BROKEN],
        unmapped="forbidden",
        strict=False,
    )
    assert render_matrix(shared).startswith("# L1/L2 switch\n")


def test_a_pipe_in_a_name_cannot_break_the_row() -> None:
    class Odd(Enum):
        A = "a|b"

    class Go(Enum):
        GO = "go"

    odd = Table(
        "odd", states=Odd, inputs=Go, initial=Odd.A, finals=[Odd.A], rows=[on(Odd.A, Go.GO, None)]
    )
    assert "| a\\|b (initial, final) | (holds) |" in render_matrix(odd)


# --------------------------------------------------------------------------- committed


def test_write_matrices_writes_one_markdown_file_per_table(tmp_path: Path) -> None:
    written = write_matrices(tmp_path / "out", [LAMP])
    assert written == [tmp_path / "out" / "lamp.md"]
    assert written[0].read_text(encoding="utf-8") == render_matrix(LAMP)


def test_write_matrices_leaves_unchanged_files_alone(tmp_path: Path) -> None:
    (path,) = write_matrices(tmp_path, [LAMP])
    path.touch()
    touched = path.stat().st_mtime_ns
    write_matrices(tmp_path, [LAMP])
    assert path.stat().st_mtime_ns == touched
    path.write_text("stale")
    write_matrices(tmp_path, [LAMP])
    assert path.read_text(encoding="utf-8") == render_matrix(LAMP)


def test_committed_grids_match_their_tables() -> None:
    stale: list[str] = []
    for name, table in REGISTERED.items():
        path = GRIDS / f"{name}.md"
        if not path.exists():
            stale.append(f"{path.name} is missing")
        elif path.read_text(encoding="utf-8") != render_matrix(table):
            stale.append(f"{path.name} no longer matches table {name!r}")
    for path in sorted(GRIDS.glob("*.md")):
        if path.stem not in REGISTERED:
            stale.append(f"{path.name} has no registered table (delete it, or add --prune)")
    assert not stale, (
        "committed grids under docs/tables are stale:\n  "
        + "\n  ".join(stale)
        + f"\nregenerate them with: {MATRIX_REGENERATE_COMMAND}"
    )
