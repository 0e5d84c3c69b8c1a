"""Path options, checked before a command starts: `InputFile`, `OutputFile`, `OutputDir`.

Every path option of `quiesce` uses one of these types, so a path that cannot work fails
at once as a usage error (exit 2) with one line naming the option, the value and the fix,
instead of a traceback minutes into a run. One rule for every output option:

- an output *file* (`diagram --out`) is written into an existing directory: a missing
  parent is an error naming it (usually a typo), never created silently;
- an output *directory* (`--out-dir`, `--trace-out`, `--workdir`, `--state-dir`,
  `--snapshot-dir`) is created with its missing parents, like `git clone DIR`: the
  command owns that tree. Its nearest existing ancestor must be a writable directory.

Writability is probed by creating (and removing) a temporary file: permission bits say
nothing to root, and a read-only mount or `/proc` refuses what `os.access` allows.
"""

from __future__ import annotations

import abc
import os
import tempfile
from pathlib import Path
from typing import Any

import click

from quiesce.cli._output import abbreviated

__all__ = ["InputFile", "OutputDir", "OutputFile"]


class _PathType(click.ParamType[Path], abc.ABC):
    """Common part: an empty value is refused (it would silently mean `.`), and so is a
    path the system cannot even look up (too long, a NUL byte)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Path:
        if isinstance(value, Path):
            path = value
        else:
            text = os.fsdecode(value) if isinstance(value, bytes) else str(value)
            if not text:
                self.fail("an empty path; name a file or directory", param, ctx)
            path = Path(text)
        if "\x00" in str(path):  # no system call takes it (and `exists()` says False)
            problem: str | None = "cannot be used (a NUL byte)"
        else:
            try:
                problem = self.problem(path)
            except OSError as error:
                problem = f"cannot be used ({error.strerror})"
        if problem is not None:
            self.fail(f"{abbreviated(path)} {problem}", param, ctx)
        return path

    @abc.abstractmethod
    def problem(self, path: Path) -> str | None:
        """Why `path` cannot serve this option, or None when it can."""


class InputFile(_PathType):
    """An existing, readable file (its content is checked by whoever reads it)."""

    name = "file"

    def problem(self, path: Path) -> str | None:
        if not path.exists():
            return "does not exist; check the path"
        if path.is_dir():
            return "is a directory; name a file"
        try:
            path.open("rb").close()
        except OSError as error:
            return f"cannot be read ({error.strerror})"
        return None


class OutputFile(_PathType):
    """A file to (over)write in an existing, writable directory."""

    name = "file"

    def problem(self, path: Path) -> str | None:
        if path.is_dir():
            return "is a directory; name a file in it"
        parent = path.parent
        if not parent.exists():
            shown = abbreviated(parent)
            return f"is in a directory that does not exist: create it first (mkdir -p {shown})"
        if not parent.is_dir():
            return f"is in {abbreviated(parent)}, which is a file, not a directory"
        if path.exists() and not os.access(path, os.W_OK):
            return "exists and is not writable"
        return _unwritable(parent)


class OutputDir(_PathType):
    """A directory to write into; created (with missing parents) by the command."""

    name = "directory"

    def problem(self, path: Path) -> str | None:
        existing = path
        while not existing.exists():  # ends at `.` or `/` at the latest
            existing = existing.parent
        if not existing.is_dir():
            where = "is" if existing == path else f"cannot be created: {abbreviated(existing)} is"
            return f"{where} a file, not a directory"
        return _unwritable(existing)


def _unwritable(directory: Path) -> str | None:
    """Why nothing can be created in `directory`, or None if a file can."""
    try:
        with tempfile.TemporaryFile(dir=directory):
            return None
    except OSError as error:
        where = abbreviated(directory)
        return f"cannot be written: creating a file in {where} failed ({error.strerror})"
