"""Durable file primitives shared by the snapshot store and the intent record.

What lives here: the three moves every crash-safe write in quiesce is built from -- write a
temporary file and fsync it, rename it over the target, fsync the directory so the rename
itself survives a power cut -- and `make_dirs`, which creates a directory so that it too
survives one. What it does not know: what the bytes mean.

Temporary files are named `.<target>.tmp`: a crash mid-write leaves at most one, which no
reader ever opens (readers look only at final names) and the next write replaces.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["TMP_SUFFIX", "atomic_write", "fsync_dir", "is_tmp", "make_dirs", "tmp_path_for"]

TMP_SUFFIX = ".tmp"


def tmp_path_for(path: Path) -> Path:
    """The temporary sibling `path` is written through."""
    return path.with_name(f".{path.name}{TMP_SUFFIX}")


def is_tmp(name: str) -> bool:
    """Whether `name` is a temporary file left by an interrupted `atomic_write`."""
    return name.startswith(".") and name.endswith(TMP_SUFFIX)


def fsync_dir(path: Path) -> None:
    """Flush a directory, so the renames and unlinks inside it are durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_dirs(path: Path) -> None:
    """Create directory `path` and its missing parents, each flushed into its parent.

    `mkdir(parents=True)` alone is not durable: until its parent is fsynced, a power cut
    may take back a new directory with everything written into it since, fsynced or not.

    >>> import tempfile
    >>> target = Path(tempfile.mkdtemp()) / "a" / "b"
    >>> make_dirs(target); make_dirs(target); target.is_dir()
    True
    """
    missing: list[Path] = []
    ancestor = path
    while not ancestor.exists():  # a file on the way stops here: mkdir names it below
        missing.append(ancestor)
        ancestor = ancestor.parent
    for directory in reversed(missing):
        directory.mkdir(exist_ok=True)
        fsync_dir(directory.parent)
    path.mkdir(exist_ok=True)  # raises as `mkdir` does if `path` is not a directory


def atomic_write(path: Path, data: bytes) -> None:
    """Replace `path` with `data` so that a reader (or a crash) sees old or new, never half.

    >>> import tempfile
    >>> target = Path(tempfile.mkdtemp()) / "x.json"
    >>> atomic_write(target, b"{}")
    >>> target.read_bytes()
    b'{}'
    """
    tmp = tmp_path_for(path)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)
