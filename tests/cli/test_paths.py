"""The path types every path option uses: what each refuses, and the message it gives."""

from __future__ import annotations

from pathlib import Path

import click
import pytest

from quiesce.cli._paths import InputFile, OutputDir, OutputFile

UNWRITABLE = Path("/proc/quiesce-test")  # no new file there, even for root


def refusal(kind: click.ParamType, value: str | Path) -> str:
    with pytest.raises(click.BadParameter) as caught:
        kind.convert(str(value), None, None)
    return caught.value.message


@pytest.fixture
def a_file(tmp_path: Path) -> Path:
    path = tmp_path / "a-file"
    path.write_text("x")
    return path


def test_an_empty_path_is_refused_everywhere() -> None:
    for kind in (InputFile(), OutputFile(), OutputDir()):
        assert "an empty path" in refusal(kind, "")


def test_input_file(tmp_path: Path, a_file: Path) -> None:
    assert InputFile().convert(str(a_file), None, None) == a_file
    assert refusal(InputFile(), tmp_path / "nope").endswith("does not exist; check the path")
    assert refusal(InputFile(), tmp_path).endswith("is a directory; name a file")


def test_output_file_needs_an_existing_writable_directory(tmp_path: Path, a_file: Path) -> None:
    fresh = tmp_path / "new.txt"
    assert OutputFile().convert(str(fresh), None, None) == fresh
    assert OutputFile().convert(str(a_file), None, None) == a_file  # overwritten
    missing = tmp_path / "typo" / "deep"
    assert refusal(OutputFile(), missing / "x.txt").endswith(
        f"is in a directory that does not exist: create it first (mkdir -p '{missing}')"
    )
    assert not (tmp_path / "typo").exists()
    assert refusal(OutputFile(), a_file / "x.txt").endswith(
        f"is in '{a_file}', which is a file, not a directory"
    )
    assert refusal(OutputFile(), tmp_path).endswith("is a directory; name a file in it")
    assert "cannot be written: creating a file in '/proc' failed" in refusal(
        OutputFile(), UNWRITABLE.parent / "x.txt"
    )


def test_output_dir_may_be_created_with_its_parents(tmp_path: Path, a_file: Path) -> None:
    deep = tmp_path / "a" / "b" / "c"
    assert OutputDir().convert(str(deep), None, None) == deep
    assert not deep.exists()  # checked, not created: the command creates it
    assert OutputDir().convert(str(tmp_path), None, None) == tmp_path
    assert refusal(OutputDir(), a_file).endswith("is a file, not a directory")
    assert refusal(OutputDir(), a_file / "sub" / "deeper").endswith(
        f"cannot be created: '{a_file}' is a file, not a directory"
    )
    assert "cannot be written" in refusal(OutputDir(), UNWRITABLE / "sub")


@pytest.mark.parametrize("kind", [InputFile(), OutputFile(), OutputDir()])
def test_a_path_the_system_cannot_look_up_is_refused_in_short(
    tmp_path: Path, kind: click.ParamType
) -> None:
    too_long = refusal(kind, tmp_path / ("x" * 3_000) / "y")
    assert too_long.endswith("cannot be used (File name too long)")
    assert len(too_long) < 200 and "(3," in too_long  # the value is abbreviated
    assert refusal(kind, "a\x00b") == "'a\\x00b' cannot be used (a NUL byte)"
