"""`quiesce tables` and `quiesce diagram` through click's runner."""

from __future__ import annotations

import json

from click.testing import CliRunner

from quiesce.cli import main
from quiesce.fsm import render_mermaid
from quiesce.protocol.machines import ADMISSION_GATE
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
