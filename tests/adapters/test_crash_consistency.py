"""Crash consistency of the snapshot store and the controller journal (ALICE, OSDI'14).

For each update protocol -- publish, prune, writing the intent record, bumping the epoch --
`FsRecorder` records the file-system operations it performs, then the protocol is run again
and again, crashed after each operation in turn; the directory is reopened through the public
API by a fresh `SnapshotStore` / `ControllerJournal`, and the state it shows is checked
against what PROTOCOL.md §6 and the store's contract allow, written here from the promise and
never from the store's code:

- nothing unverified is ever published: every snapshot in `published/` holds exactly the
  bytes that were staged, and a manifest describing them;
- nothing previously published is lost (prune may remove only what it was asked to remove,
  whole or not at all, and keeps the evidence of a corrupt snapshot);
- the intent record reads as the old record or the new one, never a torn one, never an error;
- the epoch never goes backwards, and an epoch handed out is never handed out again;
- an operation that returned is durable; and the store still works after recovery.

The crash model. A crash after operation k leaves one of these states:

- `process crash`: every operation up to k is on disk (the process died, the kernel did not);
- `power loss`: a namespace operation (create, mkdir, rename, unlink, rmdir) survives only
  if the directory holding its new (or removed) entry was fsynced after it; every other one
  is undone, newest first. Directories are fsynced as a whole, not per entry;
- `torn <how>`: a file whose data was written but not yet fsynced keeps nothing, its first
  half, or its full length with the second half zeroed.

The model does not reorder data writes against each other, nor tear a write that was
fsynced; `power loss` keeps unsynced file data whole (the torn states cover losing it).
"""

from __future__ import annotations

import builtins
import hashlib
import io
import itertools
import json
import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from quiesce.adapters import (
    MANIFEST_NAME,
    ControllerJournal,
    CorruptIntent,
    CorruptSnapshot,
    Inspection,
    IntentPhase,
    Manifest,
    SnapshotStore,
    _intent,
)
from quiesce.adapters._durable import fsync_dir, tmp_path_for
from quiesce.protocol.controller.lowlevel import SnapshotCondition

MIN_CRASH_STATES = 20
TORN = ("empty", "half", "zeroed tail")

# The functions intercepted, captured before any test patches them.
_PATCHED = ("open", "write", "fsync", "close", "replace", "rename", "unlink", "rmdir", "mkdir")
_REAL: dict[str, Callable[..., Any]] = {name: getattr(os, name) for name in _PATCHED}
_REAL_IO_OPEN = io.open

Variant = tuple[str, str | None]  # ("torn half", file) or ("power loss", None)


class SimulatedCrash(BaseException):
    """The process dies here: raised by `FsRecorder` in place of the next fs operation.

    A BaseException, so no `except OSError` / `except Exception` in the code under test
    takes it for an error it handles."""


@dataclass(frozen=True, slots=True)
class _Pending:
    """A namespace operation not yet durable: `directory` must be fsynced first."""

    directory: Path
    undo: Callable[[], None]


@dataclass
class FsRecorder:
    """Records the fs operations made under `root` through `os` (which `pathlib` and
    `shutil` call too), and crashes the process after `crash_after` of them.

    Only operations that change the disk count: creating, truncating or writing a file,
    fsync, rename/replace, unlink, mkdir, rmdir. Opening, reading and closing do not. A
    file opened for writing through `open` (which bypasses `os`) fails the test, so a write
    the recorder cannot see never goes unnoticed.
    """

    root: Path
    crash_after: int | None = None
    ops: list[str] = field(default_factory=list)
    pending: list[_Pending] = field(default_factory=list)
    unsynced: set[Path] = field(default_factory=set)
    _fds: dict[int, Path] = field(default_factory=dict)

    @contextmanager
    def active(self) -> Iterator[None]:
        for name in _PATCHED:
            setattr(os, name, getattr(self, f"_{name}"))
        io.open = builtins.open = self._io_open
        try:
            yield
        finally:
            for name, real in _REAL.items():
                setattr(os, name, real)
            io.open = builtins.open = _REAL_IO_OPEN

    def crash_variants(self) -> list[Variant]:
        """The states a crash at this point may leave besides `process crash`."""
        variants: list[Variant] = []
        if self.pending:
            variants.append(("power loss", None))
        for path in sorted(self.unsynced):
            if path.is_file() and path.stat().st_size > 0:
                variants += [(f"torn {how}", self._rel(path)) for how in TORN]
        return variants

    def power_loss(self) -> None:
        """Undo every namespace operation whose directory was not fsynced since."""
        for pending in reversed(self.pending):
            pending.undo()

    # -- bookkeeping ------------------------------------------------------------------

    def _rel(self, path: Path) -> str:
        return str(path.relative_to(self.root))

    def _mine(self, path: Path) -> bool:
        return path.is_relative_to(self.root)

    def _path(self, path: Any, dir_fd: int | None = None) -> Path:
        resolved = Path(os.fsdecode(path))
        if dir_fd is not None:
            resolved = self._fds.get(dir_fd, Path("/nonexistent")) / resolved
        return resolved

    def _step(self, label: str) -> None:
        if self.crash_after is not None and len(self.ops) >= self.crash_after:
            raise SimulatedCrash(f"crashed instead of: {label}")
        self.ops.append(label)

    def _pend(self, directory: Path, undo: Callable[[], None]) -> None:
        self.pending.append(_Pending(directory, undo))

    # -- the intercepted functions -----------------------------------------------------

    def _open(self, path: Any, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
        target = self._path(path, dir_fd)
        mine = self._mine(target)
        creates = mine and bool(flags & os.O_CREAT) and not os.path.lexists(target)
        truncates = mine and bool(flags & os.O_TRUNC) and not creates
        if creates or truncates:
            self._step(f"{'create' if creates else 'truncate'} {self._rel(target)}")
        fd: int = _REAL["open"](path, flags, mode, dir_fd=dir_fd)
        if mine:
            self._fds[fd] = target
        if creates:
            self._pend(target.parent, lambda: target.unlink(missing_ok=True))
        if truncates:
            self.unsynced.add(target)
        return fd

    def _io_open(self, file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if not isinstance(file, int) and set(mode) & set("wax+") and self._mine(Path(file)):
            raise AssertionError(f"{file} opened for writing around the recorder ({mode!r})")
        return _REAL_IO_OPEN(file, mode, *args, **kwargs)

    def _write(self, fd: int, data: bytes) -> int:
        target = self._fds.get(fd)
        if target is not None:
            self._step(f"write {self._rel(target)} ({len(data)} bytes)")
            self.unsynced.add(target)
        written: int = _REAL["write"](fd, data)
        return written

    def _fsync(self, fd: int) -> None:
        target = self._fds.get(fd)
        if target is not None:
            self._step(f"fsync {self._rel(target) or '.'}")
        _REAL["fsync"](fd)
        if target is None:
            return
        if target.is_dir():
            self.pending = [p for p in self.pending if p.directory != target]
        else:
            self.unsynced.discard(target)

    def _close(self, fd: int) -> None:
        _REAL["close"](fd)
        self._fds.pop(fd, None)

    def _rename_like(self, name: str, src: Any, dst: Any, **dir_fds: int | None) -> None:
        source, target = self._path(src), self._path(dst)
        if not (self._mine(source) and os.path.lexists(source)):
            _REAL[name](src, dst, **dir_fds)
            return
        self._step(f"{name} {self._rel(source)} -> {self._rel(target)}")
        replaced = target.read_bytes() if target.is_file() else None
        _REAL[name](src, dst, **dir_fds)
        self.unsynced = {
            target / p.relative_to(source) if p.is_relative_to(source) else p for p in self.unsynced
        }

        def undo() -> None:
            if target.exists() and source.parent.is_dir():
                _REAL["rename"](target, source)
                if replaced is not None:
                    target.write_bytes(replaced)

        self._pend(target.parent, undo)

    def _replace(self, src: Any, dst: Any, **dir_fds: int | None) -> None:
        self._rename_like("replace", src, dst, **dir_fds)

    def _rename(self, src: Any, dst: Any, **dir_fds: int | None) -> None:
        self._rename_like("rename", src, dst, **dir_fds)

    def _unlink(self, path: Any, *, dir_fd: int | None = None) -> None:
        target = self._path(path, dir_fd)
        if not (self._mine(target) and target.is_file()):
            _REAL["unlink"](path, dir_fd=dir_fd)
            return
        self._step(f"unlink {self._rel(target)}")
        data = target.read_bytes()
        _REAL["unlink"](path, dir_fd=dir_fd)
        self.unsynced.discard(target)

        def undo() -> None:
            if target.parent.is_dir():
                target.write_bytes(data)

        self._pend(target.parent, undo)

    def _rmdir(self, path: Any, *, dir_fd: int | None = None) -> None:
        target = self._path(path, dir_fd)
        if not (self._mine(target) and target.is_dir()):
            _REAL["rmdir"](path, dir_fd=dir_fd)
            return
        self._step(f"rmdir {self._rel(target)}")
        _REAL["rmdir"](path, dir_fd=dir_fd)

        def undo() -> None:
            if target.parent.is_dir():
                target.mkdir()

        self._pend(target.parent, undo)

    def _mkdir(self, path: Any, mode: int = 0o777, *, dir_fd: int | None = None) -> None:
        target = self._path(path, dir_fd)
        if not self._mine(target) or os.path.lexists(target):
            _REAL["mkdir"](path, mode, dir_fd=dir_fd)  # raises FileExistsError, or not ours
            return
        self._step(f"mkdir {self._rel(target)}")
        _REAL["mkdir"](path, mode, dir_fd=dir_fd)
        self._pend(target.parent, lambda: shutil.rmtree(target, ignore_errors=True))


# ------------------------------------------------------------------------ the sweep


@dataclass(frozen=True, slots=True)
class Scenario:
    """One update protocol from one starting state.

    `setup` builds the state before it under a fresh root (not recorded) and returns what
    the oracle needs to know about it; `act` is the operation, run with fresh process-level
    objects; `check(root, before, returned)` reopens the directory and lists violations.
    """

    name: str
    setup: Callable[[Path], Any]
    act: Callable[[Path], object]
    check: Callable[[Path, Any, bool], list[str]]


@dataclass
class Sweep:
    """What a sweep checked (`states`: crash states, or corrupted stagings) and found."""

    states: int = 0
    violations: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Outcome:
    """One run: the operations done before the crash, the other crash states this point
    allows (seen before the oracle's recovery touches the disk), and the violations."""

    ops: list[str]
    variants: list[Variant]
    violations: list[str]


def _run(scenario: Scenario, root: Path, after: int | None, variant: Variant) -> Outcome:
    root.mkdir()
    before = scenario.setup(root)
    recorder = FsRecorder(root, crash_after=after)
    returned = False
    with recorder.active():
        try:
            scenario.act(root)
            returned = True
        except SimulatedCrash:
            pass
    variants = recorder.crash_variants()
    kind, file = variant
    if kind == "power loss":
        recorder.power_loss()
    elif kind.startswith("torn"):
        assert file is not None
        _tear(root / file, kind.removeprefix("torn "))
    return Outcome(recorder.ops, variants, scenario.check(root, before, returned))


def _tear(path: Path, how: str) -> None:
    data = path.read_bytes()
    half = len(data) // 2
    torn = {"empty": b"", "half": data[:half], "zeroed tail": data[:half] + bytes(len(data) - half)}
    path.write_bytes(torn[how])


def sweep(scenario: Scenario, base: Path) -> Sweep:
    """Crash `scenario` after each of its fs operations, in every state the model allows."""
    base.mkdir(parents=True)
    runs = itertools.count()
    dry = _run(scenario, base / "dry", None, ("process crash", None))
    result = Sweep(violations=[f"{scenario.name}, no crash: {p}" for p in dry.violations])
    total = len(dry.ops)
    for after in range(total + 1):
        where = f"crash after op {after}/{total}" + (
            f" ({dry.ops[after - 1]})" if after else " (before any)"
        )
        process = _run(scenario, base / str(next(runs)), after, ("process crash", None))
        assert process.ops == dry.ops[:after], f"{scenario.name} is not deterministic"
        states = [(("process crash", None), process.violations)]
        for variant in process.variants:
            states.append(
                (variant, _run(scenario, base / str(next(runs)), after, variant).violations)
            )
        for (kind, file), found in states:
            label = kind if file is None else f"{kind} {file}"
            result.violations += [f"{scenario.name}, {where}, {label}: {p}" for p in found]
        result.states += len(states)
    return result


def sweep_all(scenarios: list[Scenario], base: Path) -> Sweep:
    total = Sweep()
    for index, scenario in enumerate(scenarios):
        one = sweep(scenario, base / f"scenario{index}")
        total.states += one.states
        total.violations += one.violations
    return total


def _checked(
    check: Callable[[Path, Any, bool], list[str]],
) -> Callable[[Path, Any, bool], list[str]]:
    """An oracle that also reports any error raised while reopening or recovering."""

    def guarded(root: Path, before: Any, returned: bool) -> list[str]:
        try:
            return check(root, before, returned)
        except Exception as error:
            return [f"reopening or recovering raised {error!r}"]

    return guarded


# ------------------------------------------------------------------------ publish

OLD, NEW, NEXT = "ck-1-1-step3", "ck-1-2-step3", "ck-2-1-step3"


def _artifacts(checkpoint_id: str) -> dict[str, bytes]:
    return {"agent-0": f"agent state of {checkpoint_id}".encode(), "cut": b'{"queue": []}'}


def _stage(store: SnapshotStore, checkpoint_id: str) -> None:
    staging = store.open_staging(checkpoint_id)
    digests = {
        name: staging.write(name, data).sha256 for name, data in _artifacts(checkpoint_id).items()
    }
    staging.write_manifest(
        trainer_step=3,
        trainer_version=3,
        topology_fingerprint="topo-a",
        created_at=12.5,
        participant_digests={"agent-0": digests["agent-0"]},
    )


def _intact(directory: Path, checkpoint_id: str) -> str | None:
    """None if `directory` holds exactly the artifacts staged for `checkpoint_id` and a
    manifest naming that id and describing them (names, sizes, SHA-256); else what differs."""
    artifacts = _artifacts(checkpoint_id)
    names = sorted(p.name for p in directory.iterdir())
    if names != sorted([*artifacts, MANIFEST_NAME]):
        return f"holds {names}"
    for name, data in artifacts.items():
        if (directory / name).read_bytes() != data:
            return f"{name} differs from what was staged"
    try:
        manifest = json.loads((directory / MANIFEST_NAME).read_bytes())
    except ValueError:
        return "its manifest is not JSON"
    described = {
        name: {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
        for name, data in artifacts.items()
    }
    if not isinstance(manifest, dict) or (
        manifest.get("checkpoint_id"),
        manifest.get("artifacts"),
    ) != (checkpoint_id, described):
        return "its manifest does not describe the staged artifacts"
    return None


def _check_publish(root: Path, before: tuple[str, ...], returned: bool) -> list[str]:
    """`before` were published before the operation; it publishes NEW."""
    problems: list[str] = []
    store = SnapshotStore(root / "store")
    visible = set(store.published())
    for name in sorted(visible):
        if name not in (*before, NEW):
            problems.append(f"{name} is published but was never staged")
        elif why := _intact(store.published_dir / name, name):
            problems.append(f"{name} is published but unverified: {why}")
    verified = {
        str(c.snapshot_id) for c in store.candidates() if c.condition is SnapshotCondition.VERIFIED
    }
    if problems == [] and verified != visible:
        problems.append(f"restore sees {sorted(verified)} verified, published is {sorted(visible)}")
    problems += [f"previously published {name} was lost" for name in before if name not in visible]
    if returned and NEW not in visible:
        problems.append(f"publish returned, yet {NEW} is not published after the crash")
    # The ambiguous-publish rule (M1), then abort and clean up as a restart does.
    found = store.inspect(NEW)
    if found is not (Inspection.PUBLISHED_VERIFIED if NEW in visible else Inspection.ABSENT):
        problems.append(f"inspect({NEW}) says {found.value}")
    if found is Inspection.ABSENT:
        store.discard_staging(NEW)
    store.clean_staging()
    _stage(store, NEXT)
    store.publish(NEXT)
    if store.leftover_staging() or store.load(NEXT).manifest.checkpoint_id != NEXT:
        problems.append("the store does not publish again after recovery")
    return problems


def _publish_scenarios(store_class: type[SnapshotStore]) -> list[Scenario]:
    def with_old(root: Path) -> tuple[str, ...]:
        store = store_class(root / "store")
        _stage(store, OLD)
        store.publish(OLD)
        return (OLD,)

    def act(root: Path) -> None:
        store = store_class(root / "store")
        _stage(store, NEW)
        store.publish(NEW)

    check = _checked(_check_publish)
    return [
        Scenario("publish into a fresh store", lambda root: (), act, check),
        Scenario("publish next to a published snapshot", with_old, act, check),
    ]


def _corrupt(staged: Path, how: str) -> None:
    """Damage the staged set as a disk or a stray writer might, before publish verifies it."""
    if how == "unlisted file":
        (staged / "stray").write_bytes(b"not in the manifest")
        return
    file, damage = how.split(": ")
    path = staged / file
    data = path.read_bytes()
    if damage == "missing":
        path.unlink()
    elif damage == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "flipped":
        path.write_bytes(data[:-2] + bytes([data[-2] ^ 0x01]) + data[-1:])
    else:
        path.write_bytes(b"")


CORRUPTIONS = (
    *(
        f"{file}: {damage}"
        for file in ("agent-0", "cut", MANIFEST_NAME)
        for damage in ("truncated", "flipped", "empty")
    ),
    "agent-0: missing",
    "unlisted file",
)


def corruption_sweep(store_class: type[SnapshotStore], base: Path) -> Sweep:
    """Corrupt each staged file in each way just before `publish`, then reopen and check."""
    result = Sweep()
    for index, how in enumerate(CORRUPTIONS):
        root = base / f"corrupt{index}"
        root.mkdir(parents=True)
        store = store_class(root / "store")
        _stage(store, OLD)
        store.publish(OLD)
        _stage(store, NEW)
        _corrupt(store.staging_dir / NEW, how)
        problems: list[str] = []
        try:
            store_class(root / "store").publish(NEW)
            problems.append("publish accepted it")
        except CorruptSnapshot:
            pass
        problems += _checked(_check_publish)(root, (OLD,), False)
        result.violations += [f"publish, staged {how}: {p}" for p in problems]
        result.states += 1
    return result


def test_publish_is_crash_consistent(tmp_path: Path) -> None:
    """Publishing (open the store, stage two artifacts and a manifest, publish) crashed
    after every fs operation, in every crash state, and with each staged file corrupted
    before publish verifies it: nothing unverified is ever published, the earlier
    snapshot survives, a returned publish is durable, and the store publishes again."""
    crashes = sweep_all(_publish_scenarios(SnapshotStore), tmp_path / "crash")
    corruptions = corruption_sweep(SnapshotStore, tmp_path / "corrupt")
    assert crashes.violations + corruptions.violations == []
    assert crashes.states >= MIN_CRASH_STATES
    assert corruptions.states == len(CORRUPTIONS) == 11


class _RenameBeforeVerify(SnapshotStore):
    """A planted bug (test only): `publish` makes the staging visible, then verifies it."""

    def publish(self, checkpoint_id: str) -> Manifest:
        os.rename(self.staging_dir / checkpoint_id, self.published_dir / checkpoint_id)
        fsync_dir(self.published_dir)
        fsync_dir(self.staging_dir)
        return self.verify(checkpoint_id)


def test_the_check_catches_a_publish_that_renames_before_verifying(tmp_path: Path) -> None:
    """The oracle is not vacuous: the same corruption sweep that the real store passes
    reports, for every corruption, a snapshot published unverified when publish renames
    the staging into `published/` before verifying it."""
    assert corruption_sweep(SnapshotStore, tmp_path / "real").violations == []
    planted = corruption_sweep(_RenameBeforeVerify, tmp_path / "planted").violations
    for how in CORRUPTIONS:
        assert any(
            v.startswith(f"publish, staged {how}: {NEW} is published but unverified")
            for v in planted
        ), (how, planted)


# ------------------------------------------------------------------------ prune

SNAPSHOTS = tuple(f"ck-1-{seq}-step3" for seq in range(1, 6))
KEEP = ("ck-1-4-step3", "ck-1-3-step3")  # the two newest verified ones
DAMAGED = "ck-1-5-step3"  # the newest, corrupt: quarantined, never deleted


def _prune_setup(root: Path) -> dict[str, bytes]:
    """Five published snapshots, the newest one damaged; returns the damaged one's files."""
    store = SnapshotStore(root / "store")
    for checkpoint_id in SNAPSHOTS:
        _stage(store, checkpoint_id)
        store.publish(checkpoint_id)
    (store.published_dir / DAMAGED / "cut").write_bytes(b"bad")
    return _files(store.published_dir / DAMAGED)


def _files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def _check_prune(root: Path, damaged: dict[str, bytes], returned: bool) -> list[str]:
    problems: list[str] = []
    store = SnapshotStore(root / "store")
    if list(store.trash_dir.iterdir()):
        problems.append("trash is not emptied when the store is opened")
    visible = store.published()
    for name in visible:
        if name not in SNAPSHOTS:
            problems.append(f"{name} is published but was never staged")
        elif name != DAMAGED and (why := _intact(store.published_dir / name, name)):
            problems.append(f"{name} is half-deleted or altered in published/: {why}")
    problems += [f"kept snapshot {name} was lost" for name in KEEP if name not in visible]
    evidence = [c.condition for c in store.candidates() if str(c.snapshot_id) == DAMAGED]
    places = {
        SnapshotCondition.CORRUPT: [store.published_dir / DAMAGED],
        SnapshotCondition.QUARANTINED: sorted(store.quarantine_dir.glob(f"{DAMAGED}.*")),
    }
    if len(evidence) != 1 or evidence[0] not in places:
        problems.append(f"the damaged snapshot is listed as {evidence}")
    elif [_files(place) for place in places[evidence[0]]] != [damaged]:
        problems.append("the damaged snapshot's files were not kept as evidence")
    if returned and (visible, evidence) != (KEEP, [SnapshotCondition.QUARANTINED]):
        problems.append(f"prune returned, yet published is {visible}, damaged {evidence}")
    # Pruning again finishes the job.
    store.prune(keep_latest_k=2)
    final = (store.published(), [str(c.snapshot_id) for c in store.candidates()])
    if final != (KEEP, [*KEEP, DAMAGED]):
        problems.append(f"pruning again after recovery leaves {final}")
    return problems


def test_prune_is_crash_consistent(tmp_path: Path) -> None:
    """Pruning five snapshots to two (the newest one damaged, so it is quarantined; two old
    ones removed) crashed after every fs operation: the kept ones are never lost, a removed
    one is in `published/` whole or not at all, the damaged one is kept (in place or in
    quarantine, once), and pruning again converges."""
    scenario = Scenario(
        "prune",
        _prune_setup,
        lambda root: SnapshotStore(root / "store").prune(keep_latest_k=2),
        _checked(_check_prune),
    )
    result = sweep(scenario, tmp_path / "prune")
    assert result.violations == []
    assert result.states >= MIN_CRASH_STATES


# ------------------------------------------------------------------------ intent record

Record = tuple[str, IntentPhase] | None
A, B = "ck-3-7-step9", "ck-3-8-step9"


def _intent_scenario(before: Record, after: Record) -> Scenario:
    state = Path("controller")

    def setup(root: Path) -> Record:
        journal = ControllerJournal(root / state)
        if before is not None:
            journal.write_intent(*before)
        return before

    def act(root: Path) -> None:
        journal = ControllerJournal(root / state)
        if after is None:
            journal.clear_intent()
        else:
            journal.write_intent(*after)

    def check(root: Path, old: Record, returned: bool) -> list[str]:
        journal = ControllerJournal(root / state)
        try:
            record = journal.read_intent()
        except CorruptIntent as error:
            return [f"the intent record cannot be read: {error}"]
        seen = None if record is None else (record.checkpoint_id, record.phase)
        problems = []
        if seen not in (old, after):
            problems.append(f"the intent is {seen}, neither the old {old} nor the new {after}")
        elif returned and seen != after:
            problems.append(f"the write returned, yet the intent is still {seen}")
        journal.write_intent(B, IntentPhase.PREPARING)
        if ControllerJournal(root / state).read_intent() != journal.read_intent():
            problems.append("the next intent written after recovery does not read back")
        return problems

    name = " -> ".join("none" if r is None else r[1].value for r in (before, after))
    return Scenario(f"intent {name}", setup, act, _checked(check))


INTENT_TRANSITIONS = [
    (None, (A, IntentPhase.PREPARING)),
    ((A, IntentPhase.PREPARING), (A, IntentPhase.PUBLISHING)),
    ((A, IntentPhase.PUBLISHING), (A, IntentPhase.RELEASING)),
    ((A, IntentPhase.RELEASING), None),
]


def test_intent_record_is_crash_consistent(tmp_path: Path) -> None:
    """Every transition of the intent record (first write, two updates, clear) crashed
    after every fs operation: the record reads as the old one or the new one, never torn or
    unreadable, and a returned write is durable."""
    scenarios = [_intent_scenario(before, after) for before, after in INTENT_TRANSITIONS]
    result = sweep_all(scenarios, tmp_path)
    assert result.violations == []
    assert result.states >= MIN_CRASH_STATES


# ------------------------------------------------------------------------ epoch


def _epoch_scenario(starts_before: int) -> Scenario:
    # The first start creates the state directory and its parent too.
    state = Path("run") / "controller"

    def setup(root: Path) -> int:
        for _ in range(starts_before):
            ControllerJournal(root / state).next_epoch()
        return starts_before

    def act(root: Path) -> None:
        ControllerJournal(root / state).next_epoch()

    def check(root: Path, old: int, returned: bool) -> list[str]:
        journal = ControllerJournal(root / state)
        try:
            epoch = journal.epoch()
        except CorruptIntent as error:
            return [f"the epoch cannot be read: {error}"]
        problems = []
        if epoch < old:
            problems.append(f"the epoch went backwards from {old} to {epoch}")
        elif epoch > old + 1:
            problems.append(f"the epoch jumped from {old} to {epoch}")
        elif returned and epoch != old + 1:
            problems.append(f"next_epoch returned {old + 1}, yet the epoch reads {epoch}")
        handed_out = journal.next_epoch()
        if handed_out <= (old + 1 if returned else old):
            problems.append(f"epoch {handed_out} is handed out again after recovery")
        return problems

    return Scenario(f"epoch at start {starts_before + 1}", setup, act, _checked(check))


def test_epoch_is_crash_consistent(tmp_path: Path) -> None:
    """Bumping the epoch at the first start (which creates the state directory) and at a
    later one, crashed after every fs operation: the epoch never goes backwards, is never
    unreadable, and an epoch handed out is never handed out again."""
    result = sweep_all([_epoch_scenario(0), _epoch_scenario(1)], tmp_path)
    assert result.violations == []
    assert result.states >= MIN_CRASH_STATES


@pytest.mark.parametrize("name", ["intent.json", "epoch.json"])
def test_a_torn_record_at_its_final_name_is_refused_never_misread(
    tmp_path: Path, name: str
) -> None:
    """Should a file system tear a record under its final name anyway, every prefix reads
    as the whole record or is refused as corrupt: never another intent, never epoch 0."""
    journal = ControllerJournal(tmp_path)
    intent = journal.write_intent(A, IntentPhase.PUBLISHING)
    journal.next_epoch()
    epoch = journal.next_epoch()
    reader, record = {
        "intent.json": (journal.read_intent, intent),
        "epoch.json": (journal.epoch, epoch),
    }[name]
    whole = (tmp_path / name).read_bytes()
    for end in range(len(whole)):
        (tmp_path / name).write_bytes(whole[:end])
        try:
            read = reader()
        except CorruptIntent:
            continue
        # Only the prefix that lacks just the final newline reads, and reads as the record.
        assert (end, read) == (len(whole) - 1, record)


def _atomic_write_without_dir_fsync(path: Path, data: bytes) -> None:
    tmp = tmp_path_for(path)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.write(fd, data)
    os.fsync(fd)
    os.close(fd)
    os.replace(tmp, path)


def _write_in_place(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.write(fd, data)
    os.fsync(fd)
    os.close(fd)
    fsync_dir(path.parent)


@pytest.mark.parametrize(
    ("writer", "symptom"),
    [
        (_atomic_write_without_dir_fsync, "the write returned, yet the intent is still"),
        (_write_in_place, "the intent record cannot be read"),
    ],
)
def test_the_crash_model_catches_a_journal_write_that_is_not_atomic_and_durable(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    writer: Callable[[Path, bytes], None],
    symptom: str,
) -> None:
    """The power-loss and torn states are not vacuous: a write that skips the directory
    fsync loses a returned intent on power loss, and a write in place (no tmp + rename)
    leaves a torn, unreadable record."""
    monkeypatch.setattr(_intent, "atomic_write", writer)
    scenario = _intent_scenario(*INTENT_TRANSITIONS[1])
    violations = sweep(scenario, tmp_path / "planted").violations
    assert any(symptom in v for v in violations), violations


def test_the_recorder_sees_the_publish_protocol_in_order(tmp_path: Path) -> None:
    """The interception is real: publishing records the staging writes (data fsynced before
    its rename, the directory after), then the rename into `published/` and its fsync."""
    store = SnapshotStore(tmp_path / "store")
    _stage(store, OLD)
    recorder = FsRecorder(tmp_path)
    with recorder.active():
        store.publish(OLD)
    assert recorder.ops == [
        f"fsync store/staging/{OLD}",
        f"rename store/staging/{OLD} -> store/published/{OLD}",
        "fsync store/published",
        "fsync store/staging",
    ]
    journal = ControllerJournal(tmp_path / "controller")
    recorder = FsRecorder(tmp_path)
    with recorder.active():
        journal.write_intent(A, IntentPhase.PREPARING)
    size = (tmp_path / "controller" / "intent.json").stat().st_size
    assert recorder.ops == [
        "create controller/.intent.json.tmp",
        f"write controller/.intent.json.tmp ({size} bytes)",
        "fsync controller/.intent.json.tmp",
        "replace controller/.intent.json.tmp -> controller/intent.json",
        "fsync controller",
    ]
    with recorder.active(), pytest.raises(AssertionError, match="around the recorder"):
        (tmp_path / "controller" / "intent.json").write_bytes(b"{}")
