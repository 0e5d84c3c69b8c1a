"""`quiesce tables` (rows, plain or rich; `--matrix` grids) and `quiesce diagram` through
click's runner."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from quiesce.cli import _tables as tables_cli
from quiesce.cli import main
from quiesce.fsm import render_matrix, render_mermaid
from quiesce.protocol.machines import ADMISSION_GATE, CHECKPOINT
from quiesce.protocol.machines import TABLES as REGISTERED

ROW_KEYS = {"source", "input", "guard", "target", "effects"}


def test_tables_json_describes_every_registered_table() -> None:
    result = CliRunner().invoke(main, ["tables", "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    tables = {table["name"]: table for table in document["tables"]}
    assert list(tables) == list(dict(REGISTERED))
    for table in tables.values():
        assert {"name", "states", "inputs", "initial", "finals", "rows"} <= set(table)
        assert table["initial"] in table["states"]
        assert set(table["finals"]) <= set(table["states"])
        assert table["rows"], f"{table['name']} has no rows"
        for row in table["rows"]:
            assert set(row) >= ROW_KEYS
            assert row["source"] in table["states"] and row["target"] in table["states"]
            assert row["input"] in table["inputs"]
            assert isinstance(row["effects"], list)


def test_tables_json_gives_the_admission_gate_row_by_row() -> None:
    document = json.loads(CliRunner().invoke(main, ["tables", "--json"]).stdout)
    gate = next(t for t in document["tables"] if t["name"] == "admission_gate")
    assert gate["states"] == ["open", "closed"]
    assert gate["inputs"] == ["hold", "release"]
    assert (gate["initial"], gate["finals"]) == ("open", [])
    reopen = gate["rows"][3]
    assert {k: reopen[k] for k in ROW_KEYS} == {
        "source": "closed",
        "input": "release",
        "guard": "last_holder",
        "target": "open",
        "effects": ["open_admission"],
    }


def test_tables_without_json_prints_the_rows() -> None:
    result = CliRunner().invoke(main, ["tables"])
    assert result.exit_code == 0
    assert "admission_gate" in result.stdout and "last_holder" in result.stdout


def test_diagram_prints_mermaid_on_stdout() -> None:
    result = CliRunner().invoke(main, ["diagram", "admission_gate", "--format", "mermaid"])
    assert result.exit_code == 0, result.output
    assert result.stdout == render_mermaid(ADMISSION_GATE)
    assert "    closed --> open : release [last_holder] / open_admission\n" in result.stdout


# --------------------------------------------------------------------------- plain rows


def test_tables_in_a_pipe_prints_every_row_at_full_width() -> None:
    # CliRunner's stdout is not a terminal: plain text, never cut to 80 columns with "…".
    result = CliRunner().invoke(main, ["tables"])
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "…" not in out and "┃" not in out and "│" not in out
    lines = out.splitlines()
    assert lines[0] == "checkpoint: M1: one snapshot attempt, publish-or-abort with the same id."
    assert lines[1].split() == ["#", "source", "input", "guard", "target", "update", "effects"]
    # Row 20 of M1, whole on one line (rich cut and wrapped it in a pipe).
    (row,) = [line for line in lines if line.startswith("20  aborting")]
    assert row.split(maxsplit=6) == [
        "20",
        "aborting",
        "roles_done",
        "over_budget",
        "stopped",
        "finished",
        "discard_staging, clear_intent, outcome, stop",
    ]
    for name, table in REGISTERED.items():
        assert f"{name}: {table.doc}" in lines
    assert sum(line.startswith("states: ") for line in lines) == len(REGISTERED)


def test_tables_name_lists_one_table() -> None:
    result = CliRunner().invoke(main, ["tables", "admission_gate"])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[:3] == [
        "admission_gate: M6: admission is open iff no owner holds it.",
        "#  source  input    guard        target   update         effects",
        "0  open    hold                  closed   add_holder     close_admission",
    ]
    assert "checkpoint" not in result.stdout


def test_tables_on_a_terminal_keeps_the_rich_table(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tables_cli, "_is_terminal", lambda: True)
    result = CliRunner().invoke(main, ["tables", "admission_gate"])
    assert result.exit_code == 0, result.output
    assert "┃ # ┃ source" in result.stdout


# --------------------------------------------------------------------------- matrix


def grid_of(markdown: str) -> dict[tuple[str, str], str]:
    """`(state label, input) -> cell text` from a Markdown grid."""
    rows = [
        [cell.strip() for cell in line.strip("|").split(" | ")]
        for line in markdown.splitlines()
        if line.startswith("| ")
    ]
    header, _rule, *body = rows
    return {
        (row[0], input): cell
        for row in body
        for input, cell in zip(header[1:], row[1:], strict=True)
    }


def test_matrix_checkpoint_answers_what_each_input_does_in_each_state() -> None:
    result = CliRunner().invoke(main, ["tables", "--matrix", "checkpoint"])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("# M1 checkpoint\n")
    assert result.stdout == render_matrix(CHECKPOINT)
    grid = grid_of(result.stdout)
    assert len(grid) == len(CHECKPOINT.states) * len(CHECKPOINT.inputs)
    # A guarded skip that holds, then the unguarded start.
    assert grid["idle (initial)", "trigger"] == "(holds) [skip]<br>closing_admission"
    assert grid["aborting", "roles_done"] == "stopped [over_budget]<br>idle"
    assert grid["releasing", "failed"] == "stopped [fatal]<br>release_pending"
    assert grid["publishing", "publish_failed"] == "(holds)"
    assert grid["preparing", "trigger"] == "ignored"  # coalesced into the attempt
    assert grid["idle (initial)", "intent_written"] == "forbidden"  # unmapped="forbidden"
    assert grid["stopped (final)", "retry_due"] == "ignored"


def test_matrix_without_a_name_prints_every_table() -> None:
    result = CliRunner().invoke(main, ["tables", "--matrix"])
    assert result.exit_code == 0, result.output
    assert result.stdout == "\n".join(render_matrix(t) for t in REGISTERED.values())
    titles = [line for line in result.stdout.splitlines() if line.startswith("# ")]
    assert titles == [
        "# M1 checkpoint",
        "# M2 control_fence",
        "# M3 agent_execution",
        "# M4 policy_admission",
        "# M5 resources",
        "# M6 admission_gate",
        "# M7 deadline_registry",
        "# M8 rollout_attempt",
        "# M8 prompt_group",
        "# M9 restore",
        "# M1/M9 call",
    ]


def test_matrix_json_is_a_grid_keyed_by_state_then_input() -> None:
    result = CliRunner().invoke(main, ["tables", "--matrix", "checkpoint", "--json"])
    assert result.exit_code == 0, result.output
    (grid,) = json.loads(result.stdout)["tables"]
    assert grid["name"] == "checkpoint" and grid["states"][0] == "idle"
    trigger = grid["grid"]["idle"]["trigger"]
    assert trigger["text"] == ["(holds) [skip]", "closing_admission"]
    assert [(m["row"], m["guard"], m["target"], m["holds"]) for m in trigger["moves"]] == [
        (0, "skip", "idle", True),
        (1, None, "closing_admission", False),
    ]
    assert grid["grid"]["preparing"]["trigger"]["disposition"] == "ignored"
    unmapped = grid["grid"]["idle"]["intent_written"]
    assert (unmapped["disposition"], unmapped["declared"]) == ("forbidden", False)


def test_matrix_of_an_unknown_table_exits_2_naming_the_known_ones() -> None:
    result = CliRunner().invoke(main, ["tables", "--matrix", "no_such_table"])
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr == (
        f"error: no table named 'no_such_table'; known tables: {', '.join(REGISTERED)}\n"
    )
    assert "Traceback" not in result.output


def test_out_dir_needs_matrix() -> None:
    result = CliRunner().invoke(main, ["tables", "--out-dir", "somewhere"])
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr == "error: --out-dir writes the grids: add --matrix\n"


def test_matrix_out_dir_writes_every_grid_and_reports_orphans(tmp_path: Path) -> None:
    (tmp_path / "gone.md").write_text("old")
    result = CliRunner().invoke(main, ["tables", "--matrix", "--out-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [str(tmp_path / f"{name}.md") for name in REGISTERED]
    for name, table in REGISTERED.items():
        assert (tmp_path / f"{name}.md").read_text(encoding="utf-8") == render_matrix(table)
    assert f"stale: {tmp_path / 'gone.md'} has no registered table (use --prune)" in result.stderr
    pruned = CliRunner().invoke(
        main, ["tables", "--matrix", "--out-dir", str(tmp_path), "--prune", "--json"]
    )
    assert pruned.exit_code == 0, pruned.output
    assert json.loads(pruned.stdout)["orphans"] == [str(tmp_path / "gone.md")]
    assert not (tmp_path / "gone.md").exists()
