"""`quiesce diagram NAME` and `quiesce diagrams --out-dir DIR`."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from quiesce.cli import main
from quiesce.fsm import render_dot, render_mermaid
from quiesce.protocol.machines import ADMISSION_GATE
from quiesce.protocol.machines import TABLES as REGISTERED

TRACE = [
    {"state": "open", "input": "hold", "target": "closed"},
    {"state": "closed", "input": "release", "target": "open"},
]


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_every_command_has_help() -> None:
    for command in ([], ["diagram"], ["diagrams"], ["tables"], ["simulate"]):
        code, out, _ = run(*command, "--help")
        assert code == 0 and out.startswith("Usage: "), command


def test_an_unknown_table_exits_2_naming_the_known_ones() -> None:
    code, out, err = run("diagram", "no_such_table")
    assert code == 2 and out == ""
    assert "no table named 'no_such_table'" in err and "admission_gate" in err


def test_diagram_writes_dot_to_a_file(tmp_path: Path) -> None:
    out = tmp_path / "gate.dot"
    code, stdout, err = run("diagram", "admission_gate", "--format", "dot", "--out", str(out))
    assert code == 0 and stdout == ""
    assert out.read_text() == render_dot(ADMISSION_GATE)
    assert f"wrote {out}" in err


def test_diagram_out_never_creates_a_missing_directory(tmp_path: Path) -> None:
    out = tmp_path / "typo" / "deep" / "gate.dot"
    code, stdout, err = run("diagram", "admission_gate", "--out", str(out))
    assert code == 2 and stdout == ""
    assert f"create it first (mkdir -p '{out.parent}')" in err
    assert not (tmp_path / "typo").exists()


def test_diagram_out_into_a_directory_is_refused(tmp_path: Path) -> None:
    code, _, err = run("diagram", "admission_gate", "--out", str(tmp_path))
    assert code == 2 and "is a directory; name a file in it" in err


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"\xff\xfe[]", "is not UTF-8 text (byte 0xff at offset 0)"),
        (b"", "is empty"),
        (b" \n", "is empty"),
        (b"[]", "has no steps"),
        (b"[{", "is not JSON"),
    ],
)
def test_a_trace_file_that_is_no_trace_exits_2_in_one_line(
    tmp_path: Path, content: bytes, expected: str
) -> None:
    trace = tmp_path / "trace.json"
    trace.write_bytes(content)
    code, out, err = run("diagram", "admission_gate", "--trace", str(trace))
    assert code == 2 and out == ""
    assert expected in err and err.count("\n") == 1, err


def test_a_missing_trace_file_is_a_usage_error(tmp_path: Path) -> None:
    code, _, err = run("diagram", "admission_gate", "--trace", str(tmp_path / "nope.json"))
    assert code == 2 and "does not exist" in err


def test_a_file_system_error_mid_command_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "gate.mmd"

    def disk_full(self: Path, *args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device", str(self))

    monkeypatch.setattr(Path, "write_text", disk_full)
    code, _, err = run("diagram", "admission_gate", "--out", str(out))
    assert code == 1
    assert err == f"error: {out}: No space left on device\n"


def test_diagram_draws_a_trace(tmp_path: Path) -> None:
    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps(TRACE))
    code, out, _ = run("diagram", "admission_gate", "--trace", str(trace))
    assert code == 0
    assert "    open --> closed : 1. hold / close_admission\n" in out
    assert "    class open,closed traced\n" in out


def test_a_bad_trace_exits_2_naming_the_step(tmp_path: Path) -> None:
    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps([TRACE[0], {"state": "closed", "input": "x", "target": "open"}]))
    code, out, err = run("diagram", "admission_gate", "--trace", str(trace))
    assert code == 2 and out == ""
    assert "trace step 1" in err and "input 'x'" in err


def test_svg_without_graphviz_exits_1_naming_the_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("shutil.which", lambda name: None)
    code, out, err = run("diagram", "admission_gate", "--format", "svg")
    assert code == 1 and out == ""
    assert "apt-get install graphviz" in err


@pytest.mark.skipif(
    shutil.which("dot") is None, reason="Graphviz `dot` not installed: apt-get install graphviz"
)
def test_svg_goes_to_stdout() -> None:
    code, out, _ = run("diagram", "admission_gate", "--format", "svg")
    assert code == 0 and "<svg" in out and "last_holder" in out


def test_diagrams_regenerates_every_table_and_reports_orphans(tmp_path: Path) -> None:
    (tmp_path / "gone.mmd").write_text("stale")
    code, out, err = run("diagrams", "--out-dir", str(tmp_path), "--json")
    assert code == 0
    document = json.loads(out)
    names = dict(REGISTERED)
    assert len(document["written"]) == 2 * len(names)
    assert document["orphans"] == [str(tmp_path / "gone.mmd")]
    assert (tmp_path / "gone.mmd").exists() and "use --prune" in err
    assert (tmp_path / "admission_gate.mmd").read_text() == render_mermaid(ADMISSION_GATE)

    code, _, err = run("diagrams", "--out-dir", str(tmp_path), "--prune")
    assert code == 0 and not (tmp_path / "gone.mmd").exists()
    assert "deleted" in err


def test_diagrams_creates_its_directory_with_parents_but_not_under_a_file(tmp_path: Path) -> None:
    fresh = tmp_path / "a" / "b"
    code, _, _ = run("diagrams", "--out-dir", str(fresh))
    assert code == 0 and (fresh / "admission_gate.mmd").is_file()
    (tmp_path / "file").write_text("x")
    code, out, err = run("diagrams", "--out-dir", str(tmp_path / "file" / "sub"))
    assert code == 2 and out == ""
    assert f"cannot be created: '{tmp_path / 'file'}' is a file, not a directory" in err
