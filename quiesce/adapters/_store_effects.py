"""`StoreEffects`: the coordinator's durable effects, carried out one at a time, synchronously.

What lives here: what each store effect does to the `SnapshotStore` and the
`ControllerJournal`, and the input it answers the coordinator with -- the intent record
(`WriteIntent`, `ClearIntent`), staging (`WriteStaging`, the controller cut of
`CaptureCut`), `Validate`, `Publish` and its pruning, `InspectPublished`, `Quarantine`,
`DiscardStaging`, and a restore's `ListSnapshots` and `LoadSnapshot`. What it does not
know: threads, the event loop or time (the driver decides where and when each runs, and
passes `now`), or any protocol rule: a failure is reported as the input M1/M9 expect
(`LocalFailed` with a `Cause`, `SnapshotLoadFailed`, `SourceUnreadable`), never decided on.

`execute(effect, now)` carries out any `StoreEffect`; `write_cut` (the second half of
`CaptureCut`, whose cut the driver takes from the data plane), `prune` (after a publication)
and the snapshot reads (for RESTORE calls and `RestoreCut`) serve the driver's own steps
around them. A failure the protocol has an answer for (a disk error, a corrupt, missing or
half-written snapshot) is logged and becomes that answer, or nothing for an unanswered
effect; the snapshot reads raise it instead, for the driver to report.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping
from typing import TypeAlias

import structlog
from pydantic import ValidationError

from quiesce.adapters._intent import ControllerJournal, IntentPhase
from quiesce.adapters._ledger_codec import CorruptLedger, ledger_from_json
from quiesce.adapters._snapshot_store import Inspection, SnapshotStore, SnapshotStoreError, Staging
from quiesce.adapters._trainer import ControllerCut, Trainer
from quiesce.protocol import Cause, OpId
from quiesce.protocol.controller import ControllerInput
from quiesce.protocol.controller.lowlevel import (
    ClearIntent,
    DiscardStaging,
    GroupRecord,
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
from quiesce.protocol.machines import GroupState, PublishedState

__all__ = ["CUT_ARTIFACT", "StoreEffect", "StoreEffects", "artifact_name"]

CUT_ARTIFACT = "controller_cut"
"""The staged artifact holding the controller cut (queue, dataloader, ledger)."""

StoreEffect: TypeAlias = (
    WriteIntent
    | ClearIntent
    | WriteStaging
    | Validate
    | Publish
    | InspectPublished
    | Quarantine
    | DiscardStaging
    | ListSnapshots
    | LoadSnapshot
)
"""The coordinator's effects `StoreEffects.execute` carries out."""

_INTENT_PHASES = {"preparing": IntentPhase.PREPARING, "published": IntentPhase.RELEASING}
_VERDICTS: dict[Inspection, PublishedState] = {
    Inspection.PUBLISHED_VERIFIED: PublishedState.VERIFIED,
    Inspection.PUBLISHED_UNVERIFIABLE: PublishedState.UNVERIFIABLE,
    Inspection.ABSENT: PublishedState.ABSENT,
}


def artifact_name(participant: str) -> str:
    """The staged artifact name of `participant`'s committed state."""
    return f"p.{participant}"


class StoreEffects:
    """Carries out store effects against `store` and `journal`, returning the coordinator's
    answer (None when the effect is not answered). Not thread-safe: run one call at a time,
    except `write_staging` calls, which may overlap each other once `open_staging` ran.

    >>> import tempfile
    >>> from quiesce.adapters import ControllerJournal, InMemoryTrainer, SnapshotStore
    >>> from quiesce.protocol.controller.lowlevel import ListSnapshots
    >>> effects = StoreEffects(SnapshotStore(tempfile.mkdtemp()),
    ...     ControllerJournal(tempfile.mkdtemp()), InMemoryTrainer(), keep_latest_k=2)
    >>> effects.execute(ListSnapshots(), now=0.0).candidates
    ()
    """

    def __init__(
        self,
        store: SnapshotStore,
        journal: ControllerJournal,
        trainer: Trainer,
        *,
        keep_latest_k: int,
        has_group: Callable[[GroupRecord], bool] | None = None,
    ) -> None:
        self.store = store
        self.journal = journal
        self.trainer = trainer
        self.keep_latest_k = keep_latest_k
        self.has_group = has_group
        self._staging: dict[str, Staging] = {}
        self._cuts: dict[str, tuple[int, int]] = {}  # checkpoint id -> (trainer step, version)
        self._loaded: tuple[str, Mapping[str, bytes]] | None = None
        self._log = structlog.get_logger("quiesce.driver")

    def execute(self, effect: StoreEffect, now: float) -> ControllerInput | None:
        """Carry out `effect` (`now`: the controller's time, for a manifest's `created_at`)."""
        if isinstance(effect, WriteIntent | ClearIntent):
            return self._intent(effect)
        if isinstance(effect, WriteStaging):
            self.write_staging(effect)
            return None
        if isinstance(effect, Validate):
            return self._validate(effect, now)
        if isinstance(effect, Publish):
            return self._publish(effect)
        if isinstance(effect, InspectPublished):
            verdict = _VERDICTS[self.store.inspect(str(effect.checkpoint_id))]
            return PublishInspected(effect.checkpoint_id, verdict)
        if isinstance(effect, Quarantine):
            self._quietly(self.store.quarantine, effect.checkpoint_id)
            return None
        if isinstance(effect, DiscardStaging):
            self._staging.pop(str(effect.checkpoint_id), None)
            self._quietly(self.store.discard_staging, effect.checkpoint_id)
            return None
        if isinstance(effect, ListSnapshots):
            return self._list_snapshots()
        return self._load_snapshot(effect)

    # ------------------------------------------------------------------ checkpoint (M1)

    def _intent(self, effect: WriteIntent | ClearIntent) -> ControllerInput | None:
        try:
            if isinstance(effect, WriteIntent):
                self.journal.write_intent(str(effect.checkpoint_id), _INTENT_PHASES[effect.phase])
            else:
                self.journal.clear_intent()
        except OSError as error:
            self._log.warning(
                "intent_io_error", checkpoint_id=str(effect.checkpoint_id), error=str(error)
            )
            if isinstance(effect, WriteIntent):
                return LocalFailed(LocalOp.INTENT, effect.checkpoint_id, Cause.IO_ERROR)
        if isinstance(effect, WriteIntent):
            return LocalDone(LocalOp.INTENT, effect.checkpoint_id)
        return None

    def open_staging(self, checkpoint_id: OpId) -> Staging:
        """The staging of `checkpoint_id`, opened on first use (raises the store's errors)."""
        key = str(checkpoint_id)
        staging = self._staging.get(key)
        if staging is None:
            staging = self._staging[key] = self.store.open_staging(key)
        return staging

    def write_staging(self, effect: WriteStaging) -> None:
        """One participant's committed artifact into staging. Not answered: an artifact
        that could not be written fails validation (`artifact_mismatch`)."""
        try:
            data = base64.b64decode(effect.artifact, validate=True)
        except ValueError:
            data = effect.artifact.encode()  # kept as sent: validation reports the mismatch
        try:
            self.open_staging(effect.checkpoint_id).write(artifact_name(effect.participant), data)
        except (SnapshotStoreError, OSError) as error:
            self._log.warning(
                "staging_error",
                checkpoint_id=str(effect.checkpoint_id),
                participant=effect.participant,
                error=str(error),
            )

    def write_cut(self, checkpoint_id: OpId, cut: ControllerCut) -> ControllerInput:
        """Stage the controller cut captured for `checkpoint_id` (its trainer step and
        version go into the manifest `Validate` writes) -> `LocalDone(CUT)` or `LocalFailed`."""
        self._cuts[str(checkpoint_id)] = (cut.trainer_step, cut.trainer_version)
        try:
            self.open_staging(checkpoint_id).write(CUT_ARTIFACT, cut.to_bytes())
        except (SnapshotStoreError, OSError) as error:
            self._log.warning("capture_failed", checkpoint_id=str(checkpoint_id), error=str(error))
            return LocalFailed(LocalOp.CUT, checkpoint_id, Cause.IO_ERROR)
        return LocalDone(LocalOp.CUT, checkpoint_id)

    def _validate(self, effect: Validate, now: float) -> ControllerInput:
        cid = effect.checkpoint_id
        try:
            staging = self.open_staging(cid)
            for participant, digest in effect.manifest:
                staging.expect_digest(artifact_name(participant), digest)
            step, version = self._cuts.pop(str(cid))
            staging.write_manifest(
                trainer_step=step,
                trainer_version=version,
                topology_fingerprint=effect.fingerprint,
                created_at=now,
                participant_digests=dict(effect.manifest),
                at_trainer_anchor=effect.at_trainer_anchor,
            )
        except SnapshotStoreError as error:
            self._log.warning("validation_failed", checkpoint_id=str(cid), error=str(error))
            return LocalFailed(LocalOp.VALIDATE, cid, Cause.ARTIFACT_MISMATCH)
        except (OSError, KeyError) as error:  # KeyError: no cut was captured for this id
            self._log.warning("validation_failed", checkpoint_id=str(cid), error=str(error))
            return LocalFailed(LocalOp.VALIDATE, cid, Cause.IO_ERROR)
        return LocalDone(LocalOp.VALIDATE, cid)

    def _publish(self, effect: Publish) -> ControllerInput:
        cid = str(effect.checkpoint_id)
        try:
            self.store.publish(cid)
        except (SnapshotStoreError, OSError) as error:
            self._log.warning("publish_failed", checkpoint_id=cid, error=str(error))
            return LocalFailed(LocalOp.PUBLISH, effect.checkpoint_id, Cause.IO_ERROR)
        self._staging.pop(cid, None)
        return LocalDone(LocalOp.PUBLISH, effect.checkpoint_id)

    def prune(self) -> None:
        """Keep the newest `keep_latest_k` snapshots (after a publication; not answered)."""
        try:
            self.store.prune(self.keep_latest_k)
        except (SnapshotStoreError, OSError) as error:
            self._log.warning("prune_failed", error=str(error))

    def _quietly(self, fn: Callable[[str], object], checkpoint_id: OpId) -> None:
        try:
            fn(str(checkpoint_id))
        except (SnapshotStoreError, OSError) as error:
            self._log.warning("store_error", checkpoint_id=str(checkpoint_id), error=str(error))

    # ------------------------------------------------------------------ restore (M9)

    def _list_snapshots(self) -> ControllerInput:
        anchor = self.trainer.anchor()
        listed_anchor = (
            None
            if anchor is None
            else TrainerAnchor(anchor.step, str(anchor.version), anchor.dataloader_position)
        )
        try:
            candidates = self.store.candidates()
        except (SnapshotStoreError, OSError) as error:
            return SnapshotsListed(listed_anchor, SourceUnreadable("snapshot_store", str(error)))
        return SnapshotsListed(listed_anchor, candidates)

    def _load_snapshot(self, effect: LoadSnapshot) -> ControllerInput:
        name = str(effect.snapshot_id)
        try:
            loaded = self.store.load(name)
            cut = ControllerCut.model_validate_json(loaded.artifacts[CUT_ARTIFACT])
            ledger = ledger_from_json(cut.ledger)
        except (SnapshotStoreError, OSError, KeyError, CorruptLedger, ValidationError) as error:
            self._log.warning("snapshot_unreadable", snapshot=name, error=str(error))
            return SnapshotLoadFailed(effect.snapshot_id, "corrupt")
        self._loaded = (name, loaded.artifacts)
        trained = tuple(
            g.group_id
            for g in ledger.groups
            if g.state is GroupState.FINALIZING and self.has_group is not None and self.has_group(g)
        )
        digests = tuple(sorted(loaded.manifest.participant_digests.items()))
        return SnapshotLoaded(effect.snapshot_id, digests, ledger, trained)

    def snapshot_files(self, snapshot_id: OpId) -> Mapping[str, bytes]:
        """The artifacts of `snapshot_id` (the one being restored is kept in memory);
        raises the store's errors."""
        if self._loaded is None or self._loaded[0] != str(snapshot_id):
            self._loaded = (str(snapshot_id), self.store.load(str(snapshot_id)).artifacts)
        return self._loaded[1]

    def artifact(self, snapshot_id: OpId, participant: str) -> bytes:
        """`participant`'s artifact in `snapshot_id` (empty if it has none)."""
        return self.snapshot_files(snapshot_id).get(artifact_name(participant), b"")
