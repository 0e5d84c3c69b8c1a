"""`load_trace` on input that is no trace: every case a `TraceError`, never another error."""

from __future__ import annotations

from pathlib import Path

import pytest

from quiesce.fsm import TraceError, load_trace
from quiesce.protocol.machines import ADMISSION_GATE


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"\xff\xfe[]", "is not UTF-8 text (byte 0xff at offset 0)"),
        ('[{"state": "caf\xe9"}]'.encode("latin-1"), "is not UTF-8 text (byte 0xe9 at offset 15)"),
        (b"", "is empty"),
        (b"\n\t ", "is empty"),
        (b"[", "is not JSON"),
    ],
)
def test_a_file_that_is_no_json_text_is_a_trace_error(
    tmp_path: Path, content: bytes, reason: str
) -> None:
    path = tmp_path / "trace.json"
    path.write_bytes(content)
    with pytest.raises(TraceError) as caught:
        load_trace(ADMISSION_GATE, path)
    error = caught.value
    assert (error.field, error.value, error.index) == ("trace", str(path), None)
    assert error.reason.startswith(reason), error.reason
    assert "\n" not in str(error)


@pytest.mark.parametrize("source", [[], "[]"])
def test_an_empty_trace_is_refused_not_drawn_as_no_trace(
    tmp_path: Path, source: list[object] | str
) -> None:
    if isinstance(source, str):
        path = tmp_path / "empty.json"
        path.write_text(source)
        source = str(path)
    with pytest.raises(TraceError, match="has no steps: a trace needs one or more"):
        load_trace(ADMISSION_GATE, source)


def test_a_directory_is_a_trace_error(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="cannot be read: Is a directory"):
        load_trace(ADMISSION_GATE, tmp_path)
