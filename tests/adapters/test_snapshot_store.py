"""The snapshot store on a real filesystem: publish, verify, list candidates, prune, crash
leftovers. Which candidate a restore takes is the coordinator's `select_snapshot` (M9); the
tests here hand it the store's listing, as the driver does."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from quiesce.adapters import (
    MANIFEST_NAME,
    AlreadyPublished,
    ArtifactMismatch,
    BadArtifactName,
    BadCheckpointId,
    CorruptSnapshot,
    Inspection,
    NotStaged,
    PublishConflict,
    SnapshotNotFound,
    SnapshotStore,
    StoreUnreadable,
    parse_checkpoint_id,
)
from quiesce.protocol.controller.lowlevel import (
    Selection,
    SnapshotCondition,
    TrainerAnchor,
    select_snapshot,
)

TOPO = "topo-a"
ANCHOR = TrainerAnchor(step=3, version="3")


def _stage(
    store: SnapshotStore,
    checkpoint_id: str,
    *,
    step: int = 3,
    version: int = 3,
    topology: str = TOPO,
    anchor: bool = False,
    payload: bytes = b"agent state",
) -> None:
    staging = store.open_staging(checkpoint_id)
    entry = staging.write("agent-0", payload)
    staging.write("cut", b'{"queue": []}')
    staging.write_manifest(
        trainer_step=step,
        trainer_version=version,
        topology_fingerprint=topology,
        created_at=12.5,
        participant_digests={"agent-0": entry.sha256},
        at_trainer_anchor=anchor,
    )


def _publish(store: SnapshotStore, checkpoint_id: str, **kwargs: object) -> None:
    _stage(store, checkpoint_id, **kwargs)  # type: ignore[arg-type]
    store.publish(checkpoint_id)


def _select(store: SnapshotStore, mode: str = "latest") -> Selection:
    """What a restore at `ANCHOR` on topology `TOPO` chooses from the store's listing."""
    return select_snapshot(ANCHOR, store.candidates(), mode=mode, fingerprint=TOPO)


def _chosen(store: SnapshotStore, mode: str = "latest") -> str | None:
    chosen = _select(store, mode).snapshot
    return None if chosen is None else str(chosen.snapshot_id)


def _ids(store: SnapshotStore, mode: str = "latest") -> list[str]:
    """Every snapshot a restore could use, newest first: the chosen one, then the ones
    passed over only because a newer one was chosen."""
    selection = _select(store, mode)
    older = [str(r.snapshot_id) for r in selection.rejected if r.reason == "older_than_selected"]
    return ([] if selection.snapshot is None else [str(selection.snapshot.snapshot_id)]) + older


# -- ids ------------------------------------------------------------------------


def test_ids_order_by_epoch_then_seq_not_lexically() -> None:
    assert parse_checkpoint_id("ck-1-10-step0") > parse_checkpoint_id("ck-1-9-step5")
    assert parse_checkpoint_id("ck-2-1-step0") > parse_checkpoint_id("ck-1-99-step9")


@pytest.mark.parametrize(
    "text",
    [
        "ck-01-2-step3",
        "ck-1-2",
        "rs-1-2-step3",
        " ck-1-2-step3",
        "ck-1-2-step3\n",
        "ck--1-2-step3",
        7,
    ],
)
def test_bad_ids_are_typed_errors(text: object) -> None:
    with pytest.raises(BadCheckpointId) as caught:
        parse_checkpoint_id(text)
    assert caught.value.text == text


def test_selection_picks_the_newest_by_epoch_and_seq(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path)
    for checkpoint_id in ("ck-1-9-step3", "ck-1-10-step3", "ck-1-2-step3"):
        _publish(store, checkpoint_id)
    assert _ids(store) == ["ck-1-10-step3", "ck-1-9-step3", "ck-1-2-step3"]
    assert store.published() == ("ck-1-10-step3", "ck-1-9-step3", "ck-1-2-step3")


# -- publish ----------------------------------------------------------------------


def test_publish_then_load_round_trips_and_staging_is_gone(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path)
    _stage(store, "ck-1-1-step3", payload=b"\x00\x01payload")
    manifest = store.publish("ck-1-1-step3")
    assert not (tmp_path / "staging" / "ck-1-1-step3").exists()
    loaded = store.load("ck-1-1-step3")
    assert loaded.manifest == manifest
    assert loaded.artifacts == {"agent-0": b"\x00\x01payload", "cut": b'{"queue": []}'}
    assert manifest.created_at == 12.5 and manifest.format_version == 1
    assert manifest.artifacts["agent-0"].size == 9
    assert store.inspect("ck-1-1-step3") is Inspection.PUBLISHED_VERIFIED


def test_publish_is_idempotent_for_the_same_contents(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path)
    _stage(store, "ck-1-1-step3")
    first = store.publish("ck-1-1-step3")
    assert store.publish("ck-1-1-step3") == first  # a retried publish after success


def test_publishing_different_contents_under_a_published_id_conflicts(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path)
    _publish(store, "ck-1-1-step3")
    with pytest.raises(AlreadyPublished):
        store.open_staging("ck-1-1-step3")
    # Forge a staging dir for the published id, as a confused writer would.
    forged = SnapshotStore(tmp_path / "other")
    _stage(forged, "ck-1-1-step3", payload=b"different")
    os.rename(
        tmp_path / "other" / "staging" / "ck-1-1-step3", tmp_path / "staging" / "ck-1-1-step3"
    )
    with pytest.raises(PublishConflict):
        store.publish("ck-1-1-step3")


def test_publish_without_staging_is_refused(tmp_path: Path) -> None:
    with pytest.raises(NotStaged):
        SnapshotStore(tmp_path).publish("ck-1-1-step3")


def test_abort_discards_staging(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path)
    _stage(store, "ck-1-1-step3")
    assert store.discard_staging("ck-1-1-step3")
    assert store.leftover_staging() == ()
    assert not store.discard_staging("ck-1-1-step3")
    assert store.inspect("ck-1-1-step3") is Inspection.ABSENT


def test_artifact_names_that_could_escape_or_clash_are_refused(tmp_path: Path) -> None:
    staging = SnapshotStore(tmp_path).open_staging("ck-1-1-step0")
    for name in ("../x", "a/b", MANIFEST_NAME, ".hidden.tmp", "", "x" * 200):
        with pytest.raises(BadArtifactName):
            staging.write(name, b"")
    assert list(staging.path.iterdir()) == []


def test_reported_digest_must_match_the_staged_artifact(tmp_path: Path) -> None:
    staging = SnapshotStore(tmp_path).open_staging("ck-1-1-step0")
    entry = staging.write("policy-0", b"weights")
    staging.expect_digest("policy-0", entry.sha256)
    with pytest.raises(ArtifactMismatch) as caught:
        staging.expect_digest("policy-0", "0" * 64)
    assert caught.value.actual == entry.sha256 and caught.value.name == "policy-0"
    with pytest.raises(ArtifactMismatch):
        staging.expect_digest("never-written", "0" * 64)


# -- verify -----------------------------------------------------------------------


def test_a_flipped_byte_in_an_artifact_names_the_file(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path)
    _publish(store, "ck-1-1-step3")
    path = tmp_path / "published" / "ck-1-1-step3" / "agent-0"
    data = bytearray(path.read_bytes())
    data[0] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptSnapshot) as caught:
        store.verify("ck-1-1-step3")
    assert caught.value.path == path
    assert caught.value.field == "artifacts.agent-0.sha256"
    with pytest.raises(CorruptSnapshot):
        store.load("ck-1-1-step3")
    assert store.inspect("ck-1-1-step3") is Inspection.PUBLISHED_UNVERIFIABLE


def test_a_truncated_manifest_is_a_typed_error_naming_the_manifest(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path)
    _publish(store, "ck-1-1-step3")
    manifest = tmp_path / "published" / "ck-1-1-step3" / MANIFEST_NAME
    manifest.write_bytes(manifest.read_bytes()[:40])
    with pytest.raises(CorruptSnapshot) as caught:
        store.verify("ck-1-1-step3")
    assert caught.value.path == manifest and caught.value.field == "document"


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (lambda m: m.update(surprise=1), "surprise"),
        (lambda m: m.pop("trainer_step"), "trainer_step"),
        (lambda m: m.update(format_version=2), "format_version"),
        (lambda m: m.update(checkpoint_id="ck-1-2-step3"), "checkpoint_id"),
        (lambda m: m["artifacts"]["agent-0"].update(sha256="zz"), "artifacts.agent-0.sha256"),
        (lambda m: m["artifacts"]["agent-0"].update(size=1), "artifacts.agent-0.size"),
        (lambda m: m["artifacts"].update({"ghost": m["artifacts"]["cut"]}), "artifacts.ghost"),
    ],
)
def test_manifest_tampering_is_reported_with_the_field(
    tmp_path: Path, edit: object, field: str
) -> None:
    store = SnapshotStore(tmp_path)
    _publish(store, "ck-1-1-step3")
    path = tmp_path / "published" / "ck-1-1-step3" / MANIFEST_NAME
    document = json.loads(path.read_bytes())
    edit(document)  # type: ignore[operator]
    path.write_text(json.dumps(document))
    with pytest.raises(CorruptSnapshot) as caught:
        store.verify("ck-1-1-step3")
    assert caught.value.field == field
    assert _chosen(store) is None


def test_missing_and_unlisted_files_are_corrupt(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path)
    _publish(store, "ck-1-1-step3")
    _publish(store, "ck-1-2-step3")
    (tmp_path / "published" / "ck-1-1-step3" / "cut").unlink()
    (tmp_path / "published" / "ck-1-2-step3" / "stray").write_bytes(b"?")
    with pytest.raises(CorruptSnapshot) as missing:
        store.verify("ck-1-1-step3")
    assert missing.value.field == "artifacts.cut" and missing.value.reason == "missing"
    with pytest.raises(CorruptSnapshot) as stray:
        store.verify("ck-1-2-step3")
    assert stray.value.path.name == "stray"
    with pytest.raises(SnapshotNotFound):
        store.verify("ck-1-3-step3")


# -- candidates and selection ----------------------------------------------------


def test_candidates_carry_the_manifest_and_the_condition_of_every_snapshot(
    tmp_path: Path,
) -> None:
    store = SnapshotStore(tmp_path)
    _publish(store, "ck-1-1-step3", anchor=True)
    _publish(store, "ck-1-2-step4", step=4, version=5, topology="topo-b")
    _publish(store, "ck-1-3-step3")  # corrupted below
    _publish(store, "ck-1-4-step3")  # quarantined below
    _stage(store, "ck-1-5-step3")  # half-written: crash before the rename
    (tmp_path / "published" / "not-an-id").mkdir()
    (tmp_path / "staging" / "not-an-id-either").mkdir()
    (tmp_path / "published" / "ck-1-3-step3" / "cut").write_bytes(b"tampered")
    store.quarantine("ck-1-4-step3")

    listed = [
        (str(c.snapshot_id), c.condition, c.trainer_step, c.trainer_version, c.fingerprint)
        for c in store.candidates()
    ]
    assert listed == [
        ("ck-1-3-step3", SnapshotCondition.CORRUPT, -1, "", ""),
        ("ck-1-2-step4", SnapshotCondition.VERIFIED, 4, "5", "topo-b"),
        ("ck-1-1-step3", SnapshotCondition.VERIFIED, 3, "3", TOPO),
        ("ck-1-4-step3", SnapshotCondition.QUARANTINED, -1, "", ""),
        ("ck-1-5-step3", SnapshotCondition.HALF_WRITTEN, -1, "", ""),
    ]
    boundary = {str(c.snapshot_id): c.trainer_boundary for c in store.candidates()}
    assert boundary["ck-1-1-step3"] and not boundary["ck-1-2-step4"]


def test_selection_reports_every_rejected_candidate_with_its_reason(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path)
    _publish(store, "ck-1-1-step3")  # compatible, older
    _publish(store, "ck-1-2-step3")  # compatible, newest good
    _publish(store, "ck-1-3-step4", step=4)
    _publish(store, "ck-1-4-step3", version=9)
    _publish(store, "ck-1-5-step3", topology="topo-b")
    _publish(store, "ck-1-6-step3")  # corrupted below
    _publish(store, "ck-1-7-step3")  # quarantined below
    _stage(store, "ck-1-8-step3")  # half-written: crash before the rename
    (tmp_path / "published" / "not-an-id").mkdir()  # not a snapshot: never a candidate
    (tmp_path / "published" / "ck-1-6-step3" / "cut").write_bytes(b"tampered")
    store.quarantine("ck-1-7-step3")

    selection = _select(store)
    assert selection.snapshot is not None
    assert str(selection.snapshot.snapshot_id) == "ck-1-2-step3"
    assert _ids(store) == ["ck-1-2-step3", "ck-1-1-step3"]
    reasons = {(str(r.snapshot_id), r.reason) for r in selection.rejected}
    assert reasons == {
        ("ck-1-1-step3", "older_than_selected"),
        ("ck-1-3-step4", "trainer_step_mismatch"),
        ("ck-1-4-step3", "trainer_version_mismatch"),
        ("ck-1-5-step3", "fingerprint_mismatch"),
        ("ck-1-6-step3", "corrupt"),
        ("ck-1-7-step3", "quarantined"),
        ("ck-1-8-step3", "half_written"),
    }


def test_trainer_checkpoint_mode_takes_only_the_snapshot_at_the_anchor(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path)
    _publish(store, "ck-1-1-step3", anchor=True)
    _publish(store, "ck-1-2-step3")
    assert _ids(store) == ["ck-1-2-step3", "ck-1-1-step3"]
    selection = _select(store, mode="trainer_checkpoint")
    assert selection.snapshot is not None
    assert str(selection.snapshot.snapshot_id) == "ck-1-1-step3"
    assert [(str(r.snapshot_id), r.reason) for r in selection.rejected] == [
        ("ck-1-2-step3", "not_at_trainer_anchor")
    ]


def test_nothing_compatible_selects_nothing(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path)
    _publish(store, "ck-1-1-step2", step=2)
    selection = _select(store)
    assert selection.snapshot is None and _ids(store) == []
    assert [(str(r.snapshot_id), r.reason) for r in selection.rejected] == [
        ("ck-1-1-step2", "trainer_step_mismatch")
    ]


def test_an_unlistable_store_is_a_typed_error(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path)
    _publish(store, "ck-1-1-step3")
    (tmp_path / "quarantine").rmdir()
    (tmp_path / "quarantine").write_bytes(b"not a directory")
    with pytest.raises(StoreUnreadable) as caught:
        store.candidates()
    assert caught.value.path == tmp_path


# -- ambiguous publish and quarantine ---------------------------------------------


def test_quarantined_snapshot_is_never_selected_again(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path)
    _publish(store, "ck-1-1-step3")
    (tmp_path / "published" / "ck-1-1-step3" / MANIFEST_NAME).write_bytes(b"{")
    assert store.inspect("ck-1-1-step3") is Inspection.PUBLISHED_UNVERIFIABLE
    target = store.quarantine("ck-1-1-step3")
    assert target.parent == tmp_path / "quarantine"
    assert store.inspect("ck-1-1-step3") is Inspection.ABSENT
    assert _chosen(store) is None
    assert [(str(r.snapshot_id), r.reason) for r in _select(store).rejected] == [
        ("ck-1-1-step3", "quarantined")
    ]
    assert store.prune(keep_latest_k=1).kept == ()
    assert target.exists()


# -- crash leftovers --------------------------------------------------------------


def test_crash_between_fsync_and_rename_leaves_staging_that_is_never_selected(
    tmp_path: Path,
) -> None:
    store = SnapshotStore(tmp_path)
    _publish(store, "ck-1-1-step3")
    _stage(store, "ck-1-2-step3")  # fully written and fsynced, never renamed
    reopened = SnapshotStore(tmp_path)  # "after the crash"
    assert reopened.leftover_staging() == ("ck-1-2-step3",)
    assert _chosen(reopened) == "ck-1-1-step3"
    assert reopened.inspect("ck-1-2-step3") is Inspection.ABSENT
    assert reopened.clean_staging() == ("ck-1-2-step3",)
    assert reopened.leftover_staging() == ()


def test_crash_mid_artifact_write_leaves_a_tmp_file_that_is_ignored(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path)
    _stage(store, "ck-1-1-step3")
    (tmp_path / "staging" / "ck-1-1-step3" / ".agent-1.tmp").write_bytes(b"half")
    store.publish("ck-1-1-step3")
    published = tmp_path / "published" / "ck-1-1-step3"
    assert not (published / ".agent-1.tmp").exists()
    store.verify("ck-1-1-step3")


def test_crash_mid_prune_leaves_trash_that_is_cleaned_at_open(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path)
    _publish(store, "ck-1-1-step3")
    # The rename into trash happened, the delete did not.
    os.rename(tmp_path / "published" / "ck-1-1-step3", tmp_path / "trash" / "ck-1-1-step3.0")
    (tmp_path / "trash" / "stray-file").write_bytes(b"x")
    reopened = SnapshotStore(tmp_path)
    assert list((tmp_path / "trash").iterdir()) == []
    assert reopened.candidates() == ()


# -- prune ------------------------------------------------------------------------


def test_prune_keeps_the_k_newest_verified_snapshots(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path)
    for seq in range(1, 7):
        _publish(store, f"ck-1-{seq}-step3")
    # The newest one is corrupt: it must not count toward k, and it is kept as evidence.
    (tmp_path / "published" / "ck-1-6-step3" / "cut").write_bytes(b"bad")
    result = store.prune(keep_latest_k=2)
    assert result.kept == ("ck-1-5-step3", "ck-1-4-step3")
    assert result.quarantined == ("ck-1-6-step3",)
    assert result.removed == ("ck-1-3-step3", "ck-1-2-step3", "ck-1-1-step3")
    assert store.published() == ("ck-1-5-step3", "ck-1-4-step3")
    assert list((tmp_path / "trash").iterdir()) == []
    assert _ids(store) == ["ck-1-5-step3", "ck-1-4-step3"]
    with pytest.raises(ValueError, match="keep_latest_k"):
        store.prune(keep_latest_k=0)


def test_prune_orders_ids_numerically(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path)
    for checkpoint_id in ("ck-1-9-step3", "ck-1-10-step3", "ck-2-1-step3"):
        _publish(store, checkpoint_id)
    assert store.prune(keep_latest_k=2).removed == ("ck-1-9-step3",)
