"""Where a participant keeps its journal (§6): `JournalSink`, on disk or in memory.

What lives here: how a journal becomes durable before its reply is released, and how a
journal file that cannot be trusted is refused (`JournalCorrupt`) instead of recovering a
different, valid-looking state, and how a sound journal of another participant is told
apart from a corrupt one (`ForeignJournal`). What it does not know: what the journal means (the pure
participant writes it, `from_journal` reads it) or when it is written (the host decides).
"""

from __future__ import annotations

import hashlib
import re
from abc import ABC, abstractmethod
from pathlib import Path

import anyio.to_thread
from pydantic import ValidationError

from quiesce.adapters._durable import atomic_write, make_dirs
from quiesce.fsm import QuiesceError
from quiesce.protocol.participant import Journal
from quiesce.protocol.wire import Role

__all__ = ["FileJournal", "ForeignJournal", "JournalCorrupt", "JournalSink", "MemoryJournal"]


class JournalCorrupt(QuiesceError):
    """The journal file `path` cannot be trusted: `field` names what is wrong (`header`,
    `sha256`, or the first bad field of the journal) and `detail` how. The file is left
    exactly as it was found."""

    def __init__(self, path: Path, field: str, detail: str) -> None:
        self.path = path
        self.field = field
        self.detail = detail
        super().__init__(
            f"participant journal {path} is corrupt at {field!r}: {detail}; "
            "restore it from a backup, or move it aside and start this participant fresh "
            "with ParticipantHost.start (its fence state will be lost)"
        )


class ForeignJournal(QuiesceError):
    """The journal at `where` is sound but was written by another participant: it records
    `recorded_role` `recorded_name`, and the host was opened as `given_role` `given_name`.
    Recovering it would impersonate that participant, so it is refused, and left as it is.
    """

    def __init__(
        self,
        where: str,
        *,
        recorded_name: str,
        recorded_role: Role,
        given_name: str,
        given_role: Role,
    ) -> None:
        self.where = where
        self.recorded_name = recorded_name
        self.recorded_role = recorded_role
        self.given_name = given_name
        self.given_role = given_role
        super().__init__(
            f"participant journal {where} belongs to {self.recorded}, not {self.given}: "
            f"open it with name {recorded_name!r} and role '{recorded_role}' to recover that "
            "participant, or give this one a journal of its own"
        )

    @property
    def recorded(self) -> str:
        """The participant the journal was written by, as `<role> '<name>'`."""
        return f"{self.recorded_role} {self.recorded_name!r}"

    @property
    def given(self) -> str:
        """The participant the host was opened as, as `<role> '<name>'`."""
        return f"{self.given_role} {self.given_name!r}"


class JournalSink(ABC):
    """Where a host keeps its journal (§6). `write` returns only once it is durable."""

    @abstractmethod
    async def write(self, journal: Journal) -> None:
        """Persist `journal`, replacing the previous one; durable when this returns."""

    @abstractmethod
    def load(self) -> Journal | None:
        """The last journal written, or None if there is none."""

    def describe(self) -> str:
        """Where the journal lives, for messages."""
        return type(self).__name__


class MemoryJournal(JournalSink):
    """The in-memory fleet's "disk": exactly the last journal written, nothing else.

    `fail_writes` makes every write raise `OSError` (a disk failure, for tests).

    >>> MemoryJournal().load() is None
    True
    """

    def __init__(self, journal: Journal | None = None) -> None:
        self.journal = journal
        self.writes = 0
        self.fail_writes = False

    async def write(self, journal: Journal) -> None:
        """Keep `journal` (raises `OSError` while `fail_writes`)."""
        if self.fail_writes:
            raise OSError("injected journal write failure")
        self.journal = journal
        self.writes += 1

    def load(self) -> Journal | None:
        """The last journal written."""
        return self.journal


class FileJournal(JournalSink):
    """`<state_dir>/journal.json`, written atomically and fsynced (file and directory)
    before `write` returns; the write runs in a worker thread so the event loop keeps
    serving other requests' reads.

    File format 2 (`encode`): one header line, then the journal's JSON, byte for byte:

        quiesce-journal 2 sha256=<hex sha256 of every byte after the header's newline>
        {"format":1,"config":{...},...}

    The `2` is the file layout's version; the `format` inside the JSON is the journal
    schema's. `load` checks the header and the digest before it parses the JSON, so a
    flipped bit or a truncation is refused (`JournalCorrupt`) instead of recovering a
    different, valid-looking state. Format 1 (the bare JSON, without checksum) is refused
    as unknown. A refused file is never modified.

    >>> import tempfile
    >>> FileJournal(Path(tempfile.mkdtemp())).load() is None
    True
    """

    FILE_NAME = "journal.json"
    FILE_FORMAT = 2
    _HEADER = re.compile(rb"quiesce-journal (\d+) sha256=([0-9a-f]{64})")

    def __init__(self, state_dir: Path | str) -> None:
        self.state_dir = Path(state_dir)
        self.path = self.state_dir / self.FILE_NAME

    @classmethod
    def encode(cls, journal: Journal) -> bytes:
        """The file's bytes for `journal`: the checksum header, then the journal's JSON."""
        body = journal.model_dump_json().encode()
        digest = hashlib.sha256(body).hexdigest()
        return f"quiesce-journal {cls.FILE_FORMAT} sha256={digest}\n".encode() + body

    async def write(self, journal: Journal) -> None:
        """Atomic write + fsync (`_durable.atomic_write`) of `encode(journal)`."""
        data = self.encode(journal)
        await anyio.to_thread.run_sync(self._write_file, data)

    def _write_file(self, data: bytes) -> None:
        make_dirs(self.state_dir)  # a first write creates it, durably
        atomic_write(self.path, data)

    def load(self) -> Journal | None:
        """The journal on disk, its checksum verified; raises `JournalCorrupt` naming the
        file and what is wrong (header, digest, or the first bad field)."""
        if not self.path.exists():
            return None
        header, _, body = self.path.read_bytes().partition(b"\n")
        match = self._HEADER.fullmatch(header)
        if match is None:
            raise JournalCorrupt(
                self.path,
                "header",
                "line 1 is not a 'quiesce-journal <format> sha256=<digest>' header, so the "
                "file carries no checksum (an old format-1 journal, or not a journal)",
            )
        if int(match[1]) != self.FILE_FORMAT:
            raise JournalCorrupt(
                self.path,
                "header",
                f"unknown journal file format {int(match[1])} "
                f"(this quiesce reads format {self.FILE_FORMAT})",
            )
        expected, found = match[2].decode(), hashlib.sha256(body).hexdigest()
        if found != expected:
            raise JournalCorrupt(
                self.path,
                "sha256",
                f"the header expects sha256 {expected} but the journal has sha256 {found} "
                "(the file changed after it was written)",
            )
        try:
            return Journal.model_validate_json(body)
        except ValidationError as error:
            first = error.errors()[0]
            where = ".".join(str(part) for part in first["loc"]) or "<file>"
            raise JournalCorrupt(self.path, where, first["msg"]) from None

    def describe(self) -> str:
        """The journal's path."""
        return str(self.path)
