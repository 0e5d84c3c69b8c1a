"""`StoreEffects` without an event loop: each store effect against a real snapshot store and
controller journal, and the input it answers the coordinator with (M1 checkpoint, M9
restore). The driver only decides where these run (inline or in worker threads)."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

import pytest

from quiesce.adapters import (
    CUT_ARTIFACT,
    ControllerCut,
    ControllerJournal,
    InMemoryTrainer,
    IntentPhase,
    SnapshotStore,
    artifact_name,
    ledger_to_text,
)
from quiesce.adapters._store_effects import StoreEffects
from quiesce.protocol import Cause, OpId
from quiesce.protocol.controller import Ledger
from quiesce.protocol.controller.lowlevel import (
    ClearIntent,
    DiscardStaging,
    InspectPublished,
    ListSnapshots,
    LoadSnapshot,
    LocalDone,
    LocalFailed,
    LocalOp,
    Publish,
    PublishInspected,
    Quarantine,
    SnapshotLoaded,
    SnapshotLoadFailed,
    SnapshotsListed,
    SourceUnreadable,
    TrainerAnchor,
    Validate,
    WriteIntent,
    WriteStaging,
)
from quiesce.protocol.machines import PublishedState

CK = OpId.parse("ck-1-1-step3")
NEWER = OpId.parse("ck-1-2-step3")
STATE = b"agent state"
DIGEST = hashlib.sha256(STATE).hexdigest()
TOPO = "topo-a"


@pytest.fixture
def effects(tmp_path: Path) -> StoreEffects:
    return StoreEffects(
        SnapshotStore(tmp_path / "store"),
        ControllerJournal(tmp_path / "journal"),
        InMemoryTrainer(),
        keep_latest_k=1,
    )


def _cut() -> ControllerCut:
    return ControllerCut(
        trainer_step=3, trainer_version=4, dataloader_position=5, ledger=ledger_to_text(Ledger())
    )


def _stage(effects: StoreEffects, cid: OpId, artifact: str | None = None) -> None:
    encoded = base64.b64encode(STATE).decode() if artifact is None else artifact
    assert effects.execute(WriteStaging(cid, "agent-0", DIGEST, encoded), now=0.0) is None
    assert effects.write_cut(cid, _cut()) == LocalDone(LocalOp.CUT, cid)


def _validate(effects: StoreEffects, cid: OpId, digest: str = DIGEST) -> object:
    return effects.execute(Validate(cid, (("agent-0", digest),), TOPO), now=12.5)


def _checkpoint(effects: StoreEffects, cid: OpId) -> None:
    _stage(effects, cid)
    assert _validate(effects, cid) == LocalDone(LocalOp.VALIDATE, cid)
    assert effects.execute(Publish(cid), now=0.0) == LocalDone(LocalOp.PUBLISH, cid)


# -- the intent record (§6) ---------------------------------------------------------


def test_the_intent_is_written_then_cleared(effects: StoreEffects) -> None:
    assert effects.execute(WriteIntent(CK, "preparing"), now=0.0) == LocalDone(LocalOp.INTENT, CK)
    intent = effects.journal.read_intent()
    assert intent is not None and intent.checkpoint_id == str(CK)
    assert intent.phase is IntentPhase.PREPARING
    effects.execute(WriteIntent(CK, "published"), now=0.0)
    intent = effects.journal.read_intent()
    assert intent is not None and intent.phase is IntentPhase.RELEASING
    assert effects.execute(ClearIntent(CK), now=0.0) is None
    assert effects.journal.read_intent() is None


def test_an_intent_the_disk_refuses_fails_with_io_error(effects: StoreEffects) -> None:
    (effects.journal.intent_path / "in-the-way").mkdir(parents=True)
    answer = effects.execute(WriteIntent(CK, "preparing"), now=0.0)
    assert answer == LocalFailed(LocalOp.INTENT, CK, Cause.IO_ERROR)


# -- checkpoint (M1) ------------------------------------------------------------------


def test_a_checkpoint_is_staged_validated_published_and_inspected(effects: StoreEffects) -> None:
    _checkpoint(effects, CK)
    store = effects.store
    assert store.published() == (str(CK),) and store.leftover_staging() == ()
    manifest = store.verify(str(CK))
    assert (manifest.trainer_step, manifest.trainer_version) == (3, 4)  # from the cut
    assert manifest.topology_fingerprint == TOPO and manifest.created_at == 12.5
    assert manifest.participant_digests == {"agent-0": DIGEST}
    assert store.load(str(CK)).artifacts[artifact_name("agent-0")] == STATE
    inspected = effects.execute(InspectPublished(CK), now=0.0)
    assert inspected == PublishInspected(CK, PublishedState.VERIFIED)


def test_a_digest_other_than_the_staged_one_fails_validation(effects: StoreEffects) -> None:
    _stage(effects, CK)
    answer = _validate(effects, CK, digest="0" * 64)
    assert answer == LocalFailed(LocalOp.VALIDATE, CK, Cause.ARTIFACT_MISMATCH)


def test_an_artifact_that_is_not_base64_is_kept_as_sent_and_fails_validation(
    effects: StoreEffects,
) -> None:
    _stage(effects, CK, artifact="not base64!")
    answer = _validate(effects, CK)
    assert answer == LocalFailed(LocalOp.VALIDATE, CK, Cause.ARTIFACT_MISMATCH)


def test_validation_without_a_captured_cut_is_an_io_error(effects: StoreEffects) -> None:
    encoded = base64.b64encode(STATE).decode()
    effects.execute(WriteStaging(CK, "agent-0", DIGEST, encoded), now=0.0)
    assert _validate(effects, CK) == LocalFailed(LocalOp.VALIDATE, CK, Cause.IO_ERROR)


def test_publishing_what_was_never_staged_fails_with_io_error(effects: StoreEffects) -> None:
    answer = effects.execute(Publish(CK), now=0.0)
    assert answer == LocalFailed(LocalOp.PUBLISH, CK, Cause.IO_ERROR)


def test_an_unverifiable_publication_is_quarantined(effects: StoreEffects) -> None:
    _checkpoint(effects, CK)
    (effects.store.published_dir / str(CK) / CUT_ARTIFACT).write_bytes(b"tampered")
    assert effects.execute(InspectPublished(CK), now=0.0) == PublishInspected(
        CK, PublishedState.UNVERIFIABLE
    )
    assert effects.execute(Quarantine(CK), now=0.0) is None
    assert effects.store.published() == ()
    assert effects.execute(InspectPublished(CK), now=0.0) == PublishInspected(
        CK, PublishedState.ABSENT
    )
    assert effects.execute(Quarantine(CK), now=0.0) is None  # nothing left: logged, not raised


def test_an_aborted_attempt_discards_its_staging(effects: StoreEffects) -> None:
    _stage(effects, CK)
    assert effects.execute(DiscardStaging(CK), now=0.0) is None
    assert effects.store.leftover_staging() == ()
    _stage(effects, CK)  # a staging discarded is opened afresh, not reused
    assert effects.store.leftover_staging() == (str(CK),)


def test_prune_keeps_the_newest_snapshots(effects: StoreEffects) -> None:
    _checkpoint(effects, CK)
    _checkpoint(effects, NEWER)
    effects.prune()
    assert effects.store.published() == (str(NEWER),)


# -- restore (M9) ---------------------------------------------------------------------


def test_listing_gives_the_trainer_anchor_and_the_stores_candidates(
    effects: StoreEffects,
) -> None:
    _checkpoint(effects, CK)
    _stage(effects, NEWER)  # half-written
    listed = effects.execute(ListSnapshots(), now=0.0)
    assert listed == SnapshotsListed(TrainerAnchor(0, "0", 0), effects.store.candidates())
    assert isinstance(listed, SnapshotsListed) and len(listed.candidates) == 2


def test_a_store_that_cannot_be_listed_is_a_source_unreadable(effects: StoreEffects) -> None:
    quarantine = effects.store.quarantine_dir
    quarantine.rmdir()
    quarantine.write_bytes(b"not a directory")
    listed = effects.execute(ListSnapshots(), now=0.0)
    assert isinstance(listed, SnapshotsListed)
    assert isinstance(listed.candidates, SourceUnreadable)
    assert listed.candidates.source == "snapshot_store"
    assert str(effects.store.root) in listed.candidates.detail


def test_loading_a_snapshot_gives_its_digests_and_ledger_and_keeps_its_files(
    effects: StoreEffects,
) -> None:
    _checkpoint(effects, CK)
    loaded = effects.execute(LoadSnapshot(CK), now=0.0)
    assert loaded == SnapshotLoaded(CK, (("agent-0", DIGEST),), Ledger(), ())
    (effects.store.published_dir / str(CK) / artifact_name("agent-0")).unlink()
    # The snapshot being restored is served from memory from now on.
    assert effects.artifact(CK, "agent-0") == STATE
    assert effects.artifact(CK, "policy-0") == b""
    assert effects.snapshot_files(CK)[CUT_ARTIFACT] == _cut().to_bytes()


def test_a_corrupt_snapshot_fails_to_load(effects: StoreEffects) -> None:
    _checkpoint(effects, CK)
    (effects.store.published_dir / str(CK) / CUT_ARTIFACT).write_bytes(b"tampered")
    assert effects.execute(LoadSnapshot(CK), now=0.0) == SnapshotLoadFailed(CK, "corrupt")
