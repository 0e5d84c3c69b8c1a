"""The snapshot store: staged, digested, atomically published checkpoints on a filesystem.

What lives here: where snapshot bytes go, how they become durable, how a published one is
proven intact, and what the store holds, each snapshot with its condition. What it does not
know: the protocol's phases, or which snapshot a restore should use (the coordinator's
`select_snapshot` chooses, M9). The driver calls `open_staging` while committing, `publish`
while publishing, `inspect` for the ambiguous-publish rule and `candidates` at restore
(PROTOCOL.md M1, M9).

Layout under `root`:

    staging/<checkpoint_id>/      artifacts being written; never selected
    published/<checkpoint_id>/    immutable: manifest.json + artifacts, renamed in whole
    quarantine/<checkpoint_id>.N/ published but unverifiable; never selected again
    trash/<checkpoint_id>.N/      renamed here first when pruned, then deleted

Crash safety comes from one rule: a snapshot is in `published/` whole or not at all. Every
file is written through a temporary name, fsynced and renamed, and its directory fsynced
(so `publish` need not fsync the files again); `publish` verifies the staged set against
the manifest, fsyncs the staging directory, renames it into `published/` in one
`os.rename` and fsyncs both parents. A crash before the rename leaves a staging directory
(listed as half-written by `candidates`, removed by `clean_staging`); a crash mid-write
leaves a `.*.tmp` file nobody reads; a crash mid-prune leaves `trash/` entries, deleted when
the store is opened.

`candidates` re-hashes every published snapshot, so a corrupt one is listed as corrupt and
never offered as verified; half-written and quarantined ones are listed by their condition.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from quiesce.adapters._durable import atomic_write, fsync_dir, is_tmp, make_dirs
from quiesce.fsm import QuiesceError
from quiesce.protocol import InvalidOpId, OpId
from quiesce.protocol.controller.lowlevel import SnapshotCandidate, SnapshotCondition

__all__ = [
    "FORMAT_VERSION",
    "MANIFEST_NAME",
    "AlreadyPublished",
    "ArtifactEntry",
    "ArtifactMismatch",
    "BadArtifactName",
    "BadCheckpointId",
    "CorruptSnapshot",
    "Inspection",
    "LoadedSnapshot",
    "Manifest",
    "NotStaged",
    "PruneResult",
    "PublishConflict",
    "SnapshotNotFound",
    "SnapshotStore",
    "SnapshotStoreError",
    "Staging",
    "StoreUnreadable",
    "parse_checkpoint_id",
]

FORMAT_VERSION = 1
MANIFEST_NAME = "manifest.json"
_ARTIFACT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_CHUNK = 1 << 20


# --------------------------------------------------------------------------- errors


class SnapshotStoreError(QuiesceError):
    """Base of the snapshot store's errors."""


class BadCheckpointId(SnapshotStoreError, ValueError):
    """`text` is not a canonical checkpoint id `ck-{epoch}-{seq}-step{N}`."""

    def __init__(self, text: object, reason: str) -> None:
        self.text = text
        self.reason = reason
        super().__init__(
            f"{text!r} is not a checkpoint id ({reason}); expected 'ck-<epoch>-<seq>-step<N>' "
            "with no leading zeros, e.g. 'ck-1-3-step7'"
        )


class BadArtifactName(SnapshotStoreError, ValueError):
    """`name` cannot be an artifact file name inside a snapshot."""

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(
            f"artifact name {name!r} is refused: use 1-128 characters from [A-Za-z0-9._-], "
            f"starting with a letter or digit, and not {MANIFEST_NAME!r}"
        )


class CorruptSnapshot(SnapshotStoreError):
    """A snapshot failed verification: `path` is the bad file, `field` what was wrong in it.

    `field` is a manifest field path (`artifacts.agent-0.sha256`, `trainer_step`) or
    `document` when the manifest is not valid JSON at all.
    """

    def __init__(self, checkpoint_id: str, path: Path, field: str, reason: str) -> None:
        self.checkpoint_id = checkpoint_id
        self.path = path
        self.field = field
        self.reason = reason
        super().__init__(f"snapshot {checkpoint_id} is corrupt: {path} [{field}]: {reason}")


class SnapshotNotFound(SnapshotStoreError):
    """No snapshot `checkpoint_id` is published."""

    def __init__(self, checkpoint_id: str, path: Path) -> None:
        self.checkpoint_id = checkpoint_id
        self.path = path
        super().__init__(f"no published snapshot {checkpoint_id} (looked at {path})")


class NotStaged(SnapshotStoreError):
    """`publish` was asked for an id with neither a staging nor a published directory."""

    def __init__(self, checkpoint_id: str) -> None:
        self.checkpoint_id = checkpoint_id
        super().__init__(f"{checkpoint_id} has no staging directory: open_staging it first")


class AlreadyPublished(SnapshotStoreError):
    """`open_staging` was asked for an id that is already published (ids are never reused)."""

    def __init__(self, checkpoint_id: str) -> None:
        self.checkpoint_id = checkpoint_id
        super().__init__(f"{checkpoint_id} is already published; mint a fresh id")


class PublishConflict(SnapshotStoreError):
    """`checkpoint_id` is published with different contents than the staging now holds."""

    def __init__(self, checkpoint_id: str, reason: str) -> None:
        self.checkpoint_id = checkpoint_id
        self.reason = reason
        super().__init__(f"{checkpoint_id} is already published and differs: {reason}")


class ArtifactMismatch(SnapshotStoreError):
    """A staged artifact's digest differs from what its participant reported (§4)."""

    def __init__(self, checkpoint_id: str, name: str, expected: str, actual: str | None) -> None:
        self.checkpoint_id = checkpoint_id
        self.name = name
        self.expected = expected
        self.actual = actual
        super().__init__(
            f"{checkpoint_id}: artifact {name!r} has sha256 {actual} but the participant "
            f"reported {expected}; abort and let the next attempt write afresh"
        )


class StoreUnreadable(SnapshotStoreError):
    """The store's root cannot be created or listed (M9 `restore_failed`)."""

    def __init__(self, path: Path, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"snapshot store at {path} cannot be read: {reason}")


# --------------------------------------------------------------------------- ids


def parse_checkpoint_id(text: object) -> OpId:
    """Parse a canonical checkpoint id; anything else raises `BadCheckpointId`.

    `OpId.parse` accepts only the canonical spelling (no leading zeros), so two
    directory names never denote one id.

    >>> parse_checkpoint_id("ck-1-10-step4") > parse_checkpoint_id("ck-1-9-step3")
    True
    """
    try:
        op_id = OpId.parse(text)
    except InvalidOpId:
        raise BadCheckpointId(text, "does not match the pattern") from None
    if op_id.kind != "ck":
        raise BadCheckpointId(text, f"is a {op_id.kind!r} operation id, not a checkpoint id")
    return op_id


def _check_id(text: str) -> str:
    parse_checkpoint_id(text)
    return text


CheckpointIdText = Annotated[str, AfterValidator(_check_id)]


# --------------------------------------------------------------------------- manifest


class ArtifactEntry(BaseModel):
    """One artifact's size and SHA-256, as recorded in the manifest."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    sha256: Annotated[str, Field(pattern=_SHA256.pattern)]
    size: Annotated[int, Field(ge=0)]


class Manifest(BaseModel):
    """What a published snapshot claims to hold; `verify` checks the files against it.

    `created_at` is whatever time the caller passes (the driver's clock), never read here.
    `at_trainer_anchor` marks the snapshot taken at the trainer's checkpoint boundary, the
    only kind a restore in `trainer_checkpoint` mode accepts.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    format_version: Literal[1]
    checkpoint_id: CheckpointIdText
    trainer_step: Annotated[int, Field(ge=0)]
    trainer_version: Annotated[int, Field(ge=0)]
    topology_fingerprint: Annotated[str, Field(min_length=1)]
    created_at: float
    at_trainer_anchor: bool
    artifacts: dict[str, ArtifactEntry]
    participant_digests: dict[str, Annotated[str, Field(pattern=_SHA256.pattern)]]

    def to_bytes(self) -> bytes:
        """Canonical JSON (sorted keys) plus a newline."""
        return (json.dumps(self.model_dump(mode="json"), sort_keys=True, indent=2) + "\n").encode()


def _check_name(name: str) -> None:
    if name == MANIFEST_NAME or not _ARTIFACT_NAME.match(name) or is_tmp(name):
        raise BadArtifactName(name)


def _sha256_file(path: Path) -> tuple[str, int]:
    digest = hashlib.sha256()
    size = 0
    with path.open("rb") as stream:
        while chunk := stream.read(_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


# --------------------------------------------------------------------------- values


class Inspection(Enum):
    """What the ambiguous-publish rule (M1) finds at the published path."""

    PUBLISHED_VERIFIED = "published_verified"
    PUBLISHED_UNVERIFIABLE = "published_unverifiable"
    ABSENT = "absent"


@dataclass(frozen=True, slots=True)
class LoadedSnapshot:
    """A verified snapshot's manifest and artifact bytes."""

    manifest: Manifest
    artifacts: Mapping[str, bytes]


@dataclass(frozen=True, slots=True)
class PruneResult:
    """What `prune` kept, removed (via trash) and quarantined (failed verification)."""

    kept: tuple[str, ...]
    removed: tuple[str, ...]
    quarantined: tuple[str, ...]


# --------------------------------------------------------------------------- store


class Staging:
    """Artifacts of one checkpoint attempt, written into `staging/<checkpoint_id>/`.

    Each `write` is atomic on its own (tmp + fsync + rename + dir fsync); the set becomes
    visible to readers only through `SnapshotStore.publish`.
    """

    def __init__(self, store: SnapshotStore, checkpoint_id: str, path: Path) -> None:
        self.store = store
        self.checkpoint_id = checkpoint_id
        self.path = path
        self._artifacts: dict[str, ArtifactEntry] = {}

    @property
    def artifacts(self) -> Mapping[str, ArtifactEntry]:
        """What has been written so far, by name."""
        return dict(self._artifacts)

    def write(self, name: str, data: bytes) -> ArtifactEntry:
        """Write artifact `name` durably; writing a name again replaces it."""
        _check_name(name)
        atomic_write(self.path / name, data)
        entry = ArtifactEntry(sha256=hashlib.sha256(data).hexdigest(), size=len(data))
        self._artifacts[name] = entry
        return entry

    def expect_digest(self, name: str, sha256: str) -> None:
        """Raise `ArtifactMismatch` unless artifact `name` was staged with digest `sha256`."""
        entry = self._artifacts.get(name)
        if entry is None or entry.sha256 != sha256:
            raise ArtifactMismatch(
                self.checkpoint_id, name, sha256, entry.sha256 if entry else None
            )

    def write_manifest(
        self,
        *,
        trainer_step: int,
        trainer_version: int,
        topology_fingerprint: str,
        created_at: float,
        participant_digests: Mapping[str, str],
        at_trainer_anchor: bool = False,
    ) -> Manifest:
        """Seal the staged artifacts into `manifest.json` (written last, atomically)."""
        manifest = Manifest(
            format_version=FORMAT_VERSION,
            checkpoint_id=self.checkpoint_id,
            trainer_step=trainer_step,
            trainer_version=trainer_version,
            topology_fingerprint=topology_fingerprint,
            created_at=created_at,
            at_trainer_anchor=at_trainer_anchor,
            artifacts=dict(sorted(self._artifacts.items())),
            participant_digests=dict(sorted(participant_digests.items())),
        )
        atomic_write(self.path / MANIFEST_NAME, manifest.to_bytes())
        return manifest


class SnapshotStore:
    """Snapshots under `root` (see the module docstring for the layout and crash rules).

    >>> import tempfile
    >>> store = SnapshotStore(tempfile.mkdtemp())
    >>> staging = store.open_staging("ck-1-1-step0")
    >>> _ = staging.write("cut", b"queue+ledger")
    >>> _ = staging.write_manifest(trainer_step=0, trainer_version=0,
    ...     topology_fingerprint="t", created_at=0.0, participant_digests={})
    >>> store.publish("ck-1-1-step0").checkpoint_id
    'ck-1-1-step0'
    >>> [(str(c.snapshot_id), c.condition.value) for c in store.candidates()]
    [('ck-1-1-step0', 'verified')]
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.staging_dir = self.root / "staging"
        self.published_dir = self.root / "published"
        self.quarantine_dir = self.root / "quarantine"
        self.trash_dir = self.root / "trash"
        try:
            for path in (self.staging_dir, self.published_dir, self.quarantine_dir, self.trash_dir):
                make_dirs(path)
            # A prune interrupted after its rename: the snapshot is already out of
            # `published/`, so finishing the delete is always safe.
            for leftover in sorted(self.trash_dir.iterdir()):
                _remove(leftover)
            fsync_dir(self.trash_dir)
        except OSError as error:
            raise StoreUnreadable(self.root, str(error)) from error

    # -- writing ------------------------------------------------------------------

    def open_staging(self, checkpoint_id: str) -> Staging:
        """A fresh staging directory for `checkpoint_id` (an earlier one is discarded)."""
        parse_checkpoint_id(checkpoint_id)
        if (self.published_dir / checkpoint_id).exists():
            raise AlreadyPublished(checkpoint_id)
        path = self.staging_dir / checkpoint_id
        if path.exists():
            self.discard_staging(checkpoint_id)
        path.mkdir()
        fsync_dir(self.staging_dir)
        return Staging(self, checkpoint_id, path)

    def discard_staging(self, checkpoint_id: str) -> bool:
        """Delete `staging/<checkpoint_id>` (abort); True if there was one."""
        parse_checkpoint_id(checkpoint_id)
        path = self.staging_dir / checkpoint_id
        if not path.exists():
            return False
        self._delete_via_trash(path, checkpoint_id)
        return True

    def leftover_staging(self) -> tuple[str, ...]:
        """Staging directories present now (after a crash: attempts never published)."""
        return tuple(sorted(p.name for p in self.staging_dir.iterdir()))

    def clean_staging(self) -> tuple[str, ...]:
        """Delete every staging directory; call at start, once the intent is resolved."""
        names = self.leftover_staging()
        for name in names:
            self._delete_via_trash(self.staging_dir / name, name)
        return names

    def publish(self, checkpoint_id: str) -> Manifest:
        """Make staging `checkpoint_id` durable and rename it into `published/` atomically.

        Idempotent: publishing an id already published returns its manifest when the staging
        holds the same manifest (or is gone: a retried publish); different contents raise
        `PublishConflict`. The staged files are verified first, so a snapshot that would
        fail `verify` is never published.
        """
        parse_checkpoint_id(checkpoint_id)
        staged = self.staging_dir / checkpoint_id
        target = self.published_dir / checkpoint_id
        if target.exists():
            published = self.verify(checkpoint_id)
            if staged.exists():
                if self._verify_dir(checkpoint_id, staged) != published:
                    raise PublishConflict(checkpoint_id, "the staged manifest differs")
                self.discard_staging(checkpoint_id)
            return published
        if not staged.exists():
            raise NotStaged(checkpoint_id)
        for leftover in staged.iterdir():
            if is_tmp(leftover.name):
                leftover.unlink()
        manifest = self._verify_dir(checkpoint_id, staged)
        # No per-file fsync here: every file with a final name in staging got there through
        # `Staging.write` / `write_manifest` (`atomic_write`: data fsynced before its rename,
        # then the staging directory fsynced), and `_verify_dir` just proved the manifest
        # names exactly those files. One directory fsync covers the tmp leftovers unlinked
        # above; then the rename and both parents.
        fsync_dir(staged)
        os.rename(staged, target)
        fsync_dir(self.published_dir)
        fsync_dir(self.staging_dir)
        return manifest

    # -- reading ------------------------------------------------------------------

    def published(self) -> tuple[str, ...]:
        """Names in `published/`, newest first (unparsable names last, sorted)."""
        good: list[tuple[OpId, str]] = []
        bad: list[str] = []
        for path in self.published_dir.iterdir():
            try:
                good.append((parse_checkpoint_id(path.name), path.name))
            except BadCheckpointId:
                bad.append(path.name)
        good.sort(reverse=True)
        return tuple(name for _, name in good) + tuple(sorted(bad))

    def verify(self, checkpoint_id: str) -> Manifest:
        """Re-hash every artifact of published `checkpoint_id` against its manifest.

        Raises `SnapshotNotFound`, or `CorruptSnapshot` naming the file and field: a
        manifest that is truncated, not JSON, has unknown or missing keys or names another
        id; an artifact missing, resized or altered; a file the manifest does not list.
        """
        parse_checkpoint_id(checkpoint_id)
        path = self.published_dir / checkpoint_id
        if not path.is_dir():
            raise SnapshotNotFound(checkpoint_id, path)
        return self._verify_dir(checkpoint_id, path)

    def inspect(self, checkpoint_id: str) -> Inspection:
        """The ambiguous-publish rule's question: is `checkpoint_id` published and intact?"""
        try:
            self.verify(checkpoint_id)
        except SnapshotNotFound:
            return Inspection.ABSENT
        except CorruptSnapshot:
            return Inspection.PUBLISHED_UNVERIFIABLE
        return Inspection.PUBLISHED_VERIFIED

    def quarantine(self, checkpoint_id: str) -> Path:
        """Rename published `checkpoint_id` aside into `quarantine/`; it is never selected."""
        parse_checkpoint_id(checkpoint_id)
        source = self.published_dir / checkpoint_id
        if not source.exists():
            raise SnapshotNotFound(checkpoint_id, source)
        target = _fresh(self.quarantine_dir, checkpoint_id)
        os.rename(source, target)
        fsync_dir(self.quarantine_dir)
        fsync_dir(self.published_dir)
        return target

    def load(self, checkpoint_id: str) -> LoadedSnapshot:
        """The manifest and every artifact's bytes, each checked against its digest."""
        manifest = self.verify(checkpoint_id)
        path = self.published_dir / checkpoint_id
        artifacts: dict[str, bytes] = {}
        for name, entry in manifest.artifacts.items():
            data = (path / name).read_bytes()
            # Checked again on the bytes actually returned: the file may change after verify.
            if hashlib.sha256(data).hexdigest() != entry.sha256:
                raise CorruptSnapshot(
                    checkpoint_id, path / name, f"artifacts.{name}.sha256", "digest differs"
                )
            artifacts[name] = data
        return LoadedSnapshot(manifest, artifacts)

    def candidates(self) -> tuple[SnapshotCandidate, ...]:
        """Every snapshot in the store as a restore (M9) sees it, for `select_snapshot`.

        Published snapshots come newest first, each re-hashed: an intact one is `VERIFIED`
        with its manifest's trainer step, version, topology fingerprint and anchor flag, a
        corrupt one `CORRUPT`; then the `QUARANTINED` and the `HALF_WRITTEN` (staged, never
        published) ones. A directory whose name is no checkpoint id is not a snapshot and
        is left out. Raises `StoreUnreadable` when a directory or a file cannot be read.
        """
        try:
            return (
                *self._published_candidates(self.published()),
                *_unusable(self.quarantine_dir, SnapshotCondition.QUARANTINED),
                *_unusable(self.staging_dir, SnapshotCondition.HALF_WRITTEN),
            )
        except OSError as error:
            raise StoreUnreadable(self.root, str(error)) from error

    def _published_candidates(self, names: tuple[str, ...]) -> Iterator[SnapshotCandidate]:
        for name in names:
            try:
                op_id = parse_checkpoint_id(name)
            except BadCheckpointId:
                continue
            try:
                manifest = self.verify(name)
            except CorruptSnapshot:
                yield SnapshotCandidate(op_id, -1, "", "", SnapshotCondition.CORRUPT)
                continue
            yield SnapshotCandidate(
                op_id,
                manifest.trainer_step,
                str(manifest.trainer_version),
                manifest.topology_fingerprint,
                SnapshotCondition.VERIFIED,
                manifest.at_trainer_anchor,
            )

    # -- pruning ------------------------------------------------------------------

    def prune(self, keep_latest_k: int) -> PruneResult:
        """Keep the newest `keep_latest_k` verified snapshots; remove the other published ones.

        Removal renames into `trash/` (one atomic step out of `published/`) and then deletes,
        so a crash never leaves a half-deleted snapshot where a restore looks. A snapshot
        that fails verification is quarantined, not deleted: the evidence is kept.
        """
        if keep_latest_k < 1:
            raise ValueError(f"keep_latest_k must be >= 1, got {keep_latest_k}")
        kept: list[str] = []
        removed: list[str] = []
        quarantined: list[str] = []
        for name in self.published():
            if len(kept) < keep_latest_k:
                try:
                    parse_checkpoint_id(name)
                    self._verify_dir(name, self.published_dir / name)
                except (BadCheckpointId, CorruptSnapshot):
                    pass
                else:
                    kept.append(name)
                    continue
                target = _fresh(self.quarantine_dir, name)
                os.rename(self.published_dir / name, target)
                fsync_dir(self.quarantine_dir)
                fsync_dir(self.published_dir)
                quarantined.append(name)
                continue
            self._delete_via_trash(self.published_dir / name, name)
            removed.append(name)
        return PruneResult(tuple(kept), tuple(removed), tuple(quarantined))

    # -- internals ----------------------------------------------------------------

    def _delete_via_trash(self, path: Path, name: str) -> None:
        target = _fresh(self.trash_dir, name)
        os.rename(path, target)
        fsync_dir(self.trash_dir)
        fsync_dir(path.parent)
        _remove(target)
        fsync_dir(self.trash_dir)

    def _read_manifest(self, checkpoint_id: str, path: Path) -> Manifest:
        manifest_path = path / MANIFEST_NAME
        try:
            raw = manifest_path.read_bytes()
        except FileNotFoundError:
            raise CorruptSnapshot(checkpoint_id, manifest_path, "document", "missing") from None
        try:
            document = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise CorruptSnapshot(
                checkpoint_id, manifest_path, "document", f"not valid JSON ({error})"
            ) from None
        try:
            manifest = Manifest.model_validate(document)
        except ValidationError as error:
            first = error.errors()[0]
            field = ".".join(str(part) for part in first["loc"]) or "document"
            raise CorruptSnapshot(checkpoint_id, manifest_path, field, first["msg"]) from None
        if manifest.checkpoint_id != checkpoint_id:
            raise CorruptSnapshot(
                checkpoint_id,
                manifest_path,
                "checkpoint_id",
                f"names {manifest.checkpoint_id}, but lies in directory {checkpoint_id}",
            )
        for name in manifest.artifacts:
            try:
                _check_name(name)
            except BadArtifactName as error:
                raise CorruptSnapshot(
                    checkpoint_id, manifest_path, f"artifacts.{name}", str(error)
                ) from None
        return manifest

    def _verify_dir(self, checkpoint_id: str, path: Path) -> Manifest:
        manifest = self._read_manifest(checkpoint_id, path)
        for name, entry in manifest.artifacts.items():
            artifact = path / name
            if not artifact.is_file():
                raise CorruptSnapshot(checkpoint_id, artifact, f"artifacts.{name}", "missing")
            digest, size = _sha256_file(artifact)
            if size != entry.size:
                raise CorruptSnapshot(
                    checkpoint_id,
                    artifact,
                    f"artifacts.{name}.size",
                    f"{size} bytes on disk, {entry.size} in the manifest",
                )
            if digest != entry.sha256:
                raise CorruptSnapshot(
                    checkpoint_id,
                    artifact,
                    f"artifacts.{name}.sha256",
                    f"{digest} on disk, {entry.sha256} in the manifest",
                )
        listed = set(manifest.artifacts) | {MANIFEST_NAME}
        for child in sorted(path.iterdir()):
            if child.name not in listed:
                raise CorruptSnapshot(
                    checkpoint_id, child, "artifacts", "file is not listed in the manifest"
                )
        return manifest


def _unusable(directory: Path, condition: SnapshotCondition) -> Iterator[SnapshotCandidate]:
    """The snapshots in `directory`, which a restore must never use, by the id their names
    start with (`<id>` in staging, `<id>.<n>` in quarantine); other names are no snapshots."""
    for path in sorted(directory.iterdir()):
        try:
            op_id = parse_checkpoint_id(path.name.split(".")[0])
        except BadCheckpointId:
            continue
        yield SnapshotCandidate(op_id, -1, "", "", condition)


def _fresh(directory: Path, name: str) -> Path:
    # `<name>.<n>` with the first free n: a name can be quarantined or trashed repeatedly.
    n = 0
    while (candidate := directory / f"{name}.{n}").exists():
        n += 1
    return candidate


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()
