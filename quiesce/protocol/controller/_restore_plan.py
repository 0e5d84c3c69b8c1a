"""M9 restore: the `restore` table and the pure planning of a restore at controller start.

What lives here: the restore lifecycle as a table, and the decisions a restore makes, each
a pure function of values the driver supplies (the intent record and what the store says
about its published path, the candidate snapshots, the trainer anchor, the restore
replies, the restored continuations, the ledger, the effective levels). What it does not
know: how the store is read, how calls are sent, time. The coordinator fires the table's
inputs and turns the plans into its effects.

Public API (stable; the coordinator calls these):

- `RESTORE` table; `RestoreState`, `RestoreInput`, `RestoreData(snapshot, retries,
  max_retries, rejected)`; start it with `RESTORE.start(RestoreData(max_retries=2))`.
- The §3 order of the restore's and the resume's calls is `PHASE_ORDER` in
  `quiesce.protocol.machines` (roles called concurrently within).
- (a) `decide_intent(intent: IntentRecord | None, published: PublishedState | None)
  -> IntentDecision(action: IntentAction, checkpoint_id, reason)`: the ambiguous-publish
  rule. No intent -> `NONE`; published and verified -> `RELEASE`; published but not
  verifiable -> `QUARANTINE_AND_ABORT`; absent -> `ABORT` (same id on every participant).
- (b) `select_snapshot(anchor, candidates, *, mode, fingerprint, rejected=())
  -> Selection(kind, snapshot, anchor, rejected, failure)`. `anchor`: `TrainerAnchor`,
  `None` (no trainer checkpoint yet: step 0) or `SourceUnreadable`; `candidates`: a
  sequence of `SnapshotCandidate` or `SourceUnreadable`. `kind` is `SNAPSHOT`,
  `FRESH_START` (anchor step > 0), `BOOTSTRAP` (step 0) or `RESTORE_FAILED` (only when the
  anchor or the store cannot be read). Every candidate not chosen is in `rejected` with a
  reason (`Rejection.reason`: `corrupt`, `half_written`, `quarantined`,
  `fingerprint_mismatch`, `trainer_step_mismatch`, `trainer_version_mismatch`,
  `not_at_trainer_anchor`, `no_trainer_anchor`, `older_than_selected`, or an earlier
  rejection's reason such as `digest_mismatch`). `Selection.input` is the `RestoreInput`
  to fire.
- (c) `judge_restore(expected_digests, replies, failures, ledger=None) -> RestoreVerdict
  (action, reason, mismatches, unowned, retry)`: `DONE` (fire `RECV_RESTORED`), `RETRY`
  (fire `CALL_FAILED`: the table retries with the same op id while retries last, then
  falls back), `REJECT` (fire `RESTORE_REJECTED` with `verdict.reason`: a digest mismatch
  (S16), an execution the ledger does not own, a non-retryable failure), or `PENDING`.
- (d) `plan_discards(value, op_id, restored)` -> `tuple[DiscardContinuation, ...]`: the
  continuations that depend on a `restart_only` resource; legal only while the restore is
  `restored_paused` (S12), else `TransitionNotAllowed`.
  `plan_redispatch(ledger, continuations, levels, *, group_scored=(), new_work=(),
  discarded=0) -> RedispatchPlan(ledger, retire, dispatch, metrics)`: claim-once
  continuations, tombstones (`Retire`), counted whole-group reruns, unfinished groups
  before new dataloader work, and the per-restore `RestoreMetrics`.
- `ARG_EXAMPLES`: example input arguments of `restore`, for the hypothesis sweep.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any, Literal

from quiesce.fsm import TransitionNotAllowed, Value
from quiesce.protocol._errors import LocalProtocolError
from quiesce.protocol._ids import OpId
from quiesce.protocol._levels import RecoveryLevel
from quiesce.protocol._messages import Continuation, RestoreReply
from quiesce.protocol.controller._ledger import AttemptKey, Ledger
from quiesce.protocol.controller._recovery_levels import LevelPlan
from quiesce.protocol.machines import RESTORE, AttemptState, RestoreInput, RestoreState

__all__ = [
    "DiscardContinuation",
    "DispatchItem",
    "NewGroup",
    "RedispatchPlan",
    "Rejection",
    "RestoreMetrics",
    "RestoreMode",
    "RestoreVerdict",
    "Retire",
    "Selection",
    "SelectionKind",
    "SnapshotCandidate",
    "SnapshotCondition",
    "SourceUnreadable",
    "TrainerAnchor",
    "UnresolvedFinalization",
    "VerdictAction",
    "judge_restore",
    "plan_discards",
    "plan_redispatch",
    "select_snapshot",
]

# ========================================================================= (b) selection


class RestoreMode(Enum):
    LATEST = "latest"  # the newest snapshot matching the trainer anchor and topology
    TRAINER_CHECKPOINT = "trainer_checkpoint"  # only the snapshot taken at the trainer anchor


class SnapshotCondition(Enum):
    VERIFIED = "verified"
    CORRUPT = "corrupt"
    HALF_WRITTEN = "half_written"
    QUARANTINED = "quarantined"


@dataclass(frozen=True, slots=True)
class SnapshotCandidate:
    """One published snapshot as the driver describes it."""

    snapshot_id: OpId
    trainer_step: int
    trainer_version: str
    fingerprint: str
    condition: SnapshotCondition = SnapshotCondition.VERIFIED
    trainer_boundary: bool = False  # taken at a trainer checkpoint (the anchor's instant)


@dataclass(frozen=True, slots=True)
class TrainerAnchor:
    """The durable trainer checkpoint rollouts restart from."""

    step: int
    version: str
    dataloader_position: int = 0


@dataclass(frozen=True, slots=True)
class SourceUnreadable:
    """The trainer anchor or the snapshot store could not be read (the only way to fail)."""

    source: Literal["trainer_anchor", "snapshot_store"]
    detail: str = ""


class SelectionKind(Enum):
    SNAPSHOT = "snapshot"
    FRESH_START = "fresh_start"
    BOOTSTRAP = "bootstrap"
    RESTORE_FAILED = "restore_failed"


@dataclass(frozen=True, slots=True)
class Rejection:
    """A candidate not chosen, and why."""

    snapshot_id: OpId
    reason: str


@dataclass(frozen=True, slots=True)
class Selection:
    """The outcome of `select_snapshot`."""

    kind: SelectionKind
    snapshot: SnapshotCandidate | None
    anchor: TrainerAnchor | None
    rejected: tuple[Rejection, ...]
    failure: SourceUnreadable | None = None

    @property
    def input(self) -> RestoreInput:
        """The `restore` input to fire for this outcome (its arg: `str(snapshot_id)`)."""
        if self.kind is SelectionKind.SNAPSHOT:
            return RestoreInput.SNAPSHOT_SELECTED
        if self.kind is SelectionKind.RESTORE_FAILED:
            return RestoreInput.SOURCE_UNREADABLE
        return RestoreInput.FRESH_START


def _why_not(
    candidate: SnapshotCandidate,
    anchor: TrainerAnchor | None,
    mode: RestoreMode,
    fingerprint: str,
    earlier: Mapping[str, str],
) -> str | None:
    if str(candidate.snapshot_id) in earlier:
        return earlier[str(candidate.snapshot_id)]
    if candidate.condition is not SnapshotCondition.VERIFIED:
        return str(candidate.condition.value)
    if candidate.fingerprint != fingerprint:
        return "fingerprint_mismatch"
    if anchor is None:
        return "no_trainer_anchor"
    if candidate.trainer_step != anchor.step:
        return "trainer_step_mismatch"
    if candidate.trainer_version != anchor.version:
        return "trainer_version_mismatch"
    if mode is RestoreMode.TRAINER_CHECKPOINT and not candidate.trainer_boundary:
        return "not_at_trainer_anchor"
    return None


def select_snapshot(
    anchor: TrainerAnchor | SourceUnreadable | None,
    candidates: Sequence[SnapshotCandidate] | SourceUnreadable,
    *,
    mode: RestoreMode | str,
    fingerprint: str,
    rejected: Iterable[tuple[str, str]] = (),
) -> Selection:
    """Choose what to restore (M9). `rejected` holds `(snapshot id, reason)` pairs from
    earlier attempts of this restore (`RestoreData.rejected`); those are never chosen again.

    `restore_failed` only when the anchor or the store cannot be read; with no match, a
    fresh start at the anchor (`bootstrap` when it is at step 0 or there is none yet).
    """
    mode = RestoreMode(mode)
    for source in (anchor, candidates):
        if isinstance(source, SourceUnreadable):
            return Selection(SelectionKind.RESTORE_FAILED, None, None, (), source)
    assert not isinstance(anchor, SourceUnreadable)
    assert not isinstance(candidates, SourceUnreadable)
    earlier = dict(rejected)
    ordered = sorted(candidates, key=lambda c: c.snapshot_id, reverse=True)
    reasons = {c.snapshot_id: _why_not(c, anchor, mode, fingerprint, earlier) for c in ordered}
    chosen = next((c for c in ordered if reasons[c.snapshot_id] is None), None)
    rejections = tuple(
        Rejection(c.snapshot_id, reasons[c.snapshot_id] or "older_than_selected")
        for c in ordered
        if c is not chosen
    )
    if chosen is not None:
        return Selection(SelectionKind.SNAPSHOT, chosen, anchor, rejections)
    at_zero = anchor is None or anchor.step == 0
    kind = SelectionKind.BOOTSTRAP if at_zero else SelectionKind.FRESH_START
    return Selection(kind, None, anchor, rejections)


# ====================================================================== (c) verification


class VerdictAction(Enum):
    DONE = "done"
    RETRY = "retry"
    REJECT = "reject"
    PENDING = "pending"


@dataclass(frozen=True, slots=True)
class RestoreVerdict:
    """The judgement of one round of restore replies."""

    action: VerdictAction
    reason: str = ""
    mismatches: tuple[tuple[str, str, str], ...] = ()  # (participant, expected, reported)
    unowned: tuple[tuple[str, str, int], ...] = ()  # (participant, rollout_id, attempt)
    retry: tuple[str, ...] = ()  # participants to call again with the same op id

    @property
    def input(self) -> RestoreInput | None:
        """The `restore` input to fire (`None` while replies are still pending)."""
        return {
            VerdictAction.DONE: RestoreInput.RECV_RESTORED,
            VerdictAction.RETRY: RestoreInput.CALL_FAILED,
            VerdictAction.REJECT: RestoreInput.RESTORE_REJECTED,
            VerdictAction.PENDING: None,
        }[self.action]


def judge_restore(
    expected_digests: Mapping[str, str],
    replies: Mapping[str, RestoreReply],
    failures: Mapping[str, bool],
    ledger: Ledger | None = None,
) -> RestoreVerdict:
    """Judge the restore replies against the committed digests (S16) and the ledger.

    `expected_digests`: participant -> digest committed in the snapshot (every participant
    restored); `replies`: the parsed replies so far; `failures`: participant -> retryable,
    for calls that failed (classified by cause, §4). Order of precedence: a digest mismatch
    or an execution the ledger does not own rejects the snapshot; a non-retryable failure
    rejects it; a retryable failure (or a `failed` reply) is retried with the same op id;
    missing answers are pending; else done.
    """
    mismatches = tuple(
        (name, expected_digests[name], reply.digest)
        for name, reply in sorted(replies.items())
        if name in expected_digests
        and reply.status == "restored"
        and reply.digest != expected_digests[name]
    )
    if mismatches:
        return RestoreVerdict(VerdictAction.REJECT, "digest_mismatch", mismatches=mismatches)
    if ledger is not None:
        unowned = tuple(
            (name, c.rollout_id, c.attempt)
            for name, reply in sorted(replies.items())
            for c in reply.continuations
            if not ledger.owns(c.rollout_id, c.attempt)
        )
        if unowned:
            return RestoreVerdict(VerdictAction.REJECT, "unowned_execution", unowned=unowned)
    fatal = sorted(name for name, retryable in failures.items() if not retryable)
    if fatal:
        return RestoreVerdict(VerdictAction.REJECT, f"restore_failed:{','.join(fatal)}")
    retry = sorted(
        {name for name, retryable in failures.items() if retryable}
        | {name for name, reply in replies.items() if reply.status == "failed"}
    )
    if retry:
        return RestoreVerdict(VerdictAction.RETRY, "retryable_failure", retry=tuple(retry))
    if any(name not in replies for name in expected_digests):
        return RestoreVerdict(VerdictAction.PENDING)
    return RestoreVerdict(VerdictAction.DONE)


# ======================================================================= (d) redispatch


@dataclass(frozen=True, slots=True)
class DiscardContinuation:
    """`discard_restored_continuation(op_id, rollout)` to send to one agent (S12)."""

    participant: str
    op_id: OpId
    rollout_id: str
    attempt: int


@dataclass(frozen=True, slots=True)
class Retire:
    """Tombstone attempt `(rollout_id, attempt)` on every participant (M3 `retire`)."""

    rollout_id: str
    attempt: int


@dataclass(frozen=True, slots=True)
class DispatchItem:
    """One reserved attempt to dispatch, in plan order; `resume_from_turn > 0` continues a
    restored continuation."""

    group_id: str
    rollout_id: str
    attempt: int
    resume_from_turn: int
    level: RecoveryLevel | None  # the level it was recovered at; None for new work

    @property
    def key(self) -> AttemptKey:
        """`(rollout_id, attempt)` in the ledger."""
        return (self.rollout_id, self.attempt)


@dataclass(frozen=True, slots=True)
class NewGroup:
    """New dataloader work that `plan_redispatch` opens after every unfinished group.

    A value of the restore plan, not a `Coordinator` input: a running controller is told
    of a new prompt group with `GroupOpened` (queued while the restore runs)."""

    group_id: str
    size: int
    prompt: str = ""
    environment: str = ""


@dataclass(frozen=True, slots=True)
class RestoreMetrics:
    """Per-restore metrics (PROTOCOL.md, issue: per restore)."""

    groups_rerun_group_scored: int = 0  # retried whole because group-scored
    groups_rerun_whole: int = 0  # retried whole for another reason (level, reopened)
    sealed_siblings_discarded: int = 0
    siblings_resumed_from_turn: int = 0
    siblings_rerun_from_scratch: int = 0
    continuations_discarded_restart_only: int = 0

    def as_dict(self) -> dict[str, int]:
        """Name -> value, for `Metric` effects."""
        return {name: getattr(self, name) for name in self.__slots__}


@dataclass(frozen=True, slots=True)
class RedispatchPlan:
    """The ledger after the plan, what to tombstone, what to dispatch (in order), metrics."""

    ledger: Ledger
    retire: tuple[Retire, ...]
    dispatch: tuple[DispatchItem, ...]
    metrics: RestoreMetrics


class UnresolvedFinalization(LocalProtocolError):
    """`plan_redispatch` was called while groups are still `finalization_unknown`."""

    def __init__(self, group_ids: Iterable[str]) -> None:
        self.group_ids = tuple(group_ids)
        super().__init__(
            f"groups {', '.join(self.group_ids)} are finalization_unknown: ask the trainer and "
            "call Ledger.resolve_finalization() for each before planning the redispatch"
        )


def plan_discards(
    value: Value[RestoreState, Any],
    op_id: OpId,
    restored: Iterable[tuple[str, Continuation]],
) -> tuple[DiscardContinuation, ...]:
    """The discards of S12: every restored continuation that depends on a `restart_only`
    resource, from `(agent participant, continuation)` pairs. Legal only in
    `restored_paused` (the fences accept discards only there): else `TransitionNotAllowed`."""
    if value.state is not RestoreState.RESTORED_PAUSED:
        raise TransitionNotAllowed(
            RESTORE.name, value.state, RestoreInput.DISCARD_BEGIN, reason="only in restored_paused"
        )
    return tuple(
        DiscardContinuation(participant, op_id, c.rollout_id, c.attempt)
        for participant, c in restored
        if c.restart_only_dependency
    )


def plan_redispatch(
    ledger: Ledger,
    continuations: Iterable[Continuation],
    levels: LevelPlan,
    *,
    group_scored: Collection[str] = (),
    new_work: Iterable[NewGroup] = (),
    discarded: int = 0,
) -> RedispatchPlan:
    """Plan the redispatch after a restore (M8, M9); pure.

    `continuations`: the restored ones still valid (after `plan_discards`); `levels`: the
    effective levels (their `restore_level` is used); `group_scored`: names of group-scored
    environments; `new_work`: dataloader groups, opened after every unfinished group;
    `discarded`: how many continuations `plan_discards` removed (for the metrics).

    Per unfinished group, oldest first: a reopened group (its finalization was lost) or one
    at `prompt_group` is rerun whole (counted; sealed siblings discarded and counted); at
    `turn`, each unfinished sibling whose latest attempt N has a continuation is claimed
    once by N+1 (resumes from its turn), the others rerun from scratch; in a group-scored
    environment a sibling without a continuation makes the whole group rerun (S11); at
    `sibling`, unfinished siblings rerun from scratch. Sealed siblings are kept except in a
    whole-group rerun. Every replaced attempt is tombstoned (`Retire`).
    """
    unknown = ledger.finalization_unknown_groups()
    if unknown:
        raise UnresolvedFinalization(g.group_id for g in unknown)
    saved = {(c.rollout_id, c.attempt): c.turn for c in continuations}
    retire: list[Retire] = []
    dispatch: list[DispatchItem] = []
    m = RestoreMetrics(continuations_discarded_restart_only=discarded)
    for group in ledger.unfinished_groups():
        level = levels.level_of(group.environment).restore_level
        scored = group.environment in group_scored
        siblings = ledger.siblings(group.group_id)
        unfinished = [s for s in siblings if s.state is not AttemptState.SEALED]
        whole = group.value.data.reopened or level is RecoveryLevel.PROMPT_GROUP
        if scored and level is not RecoveryLevel.TURN:
            whole = True
        if scored and level is RecoveryLevel.TURN:
            whole = whole or any(s.key not in saved for s in unfinished)
        if whole:
            sealed = sum(1 for s in siblings if s.state is AttemptState.SEALED)
            retire += [Retire(*s.key) for s in unfinished]
            ledger, keys = ledger.rerun_group(group.group_id)
            dispatch += [DispatchItem(group.group_id, r, a, 0, level) for r, a in keys]
            m = replace(
                m,
                groups_rerun_group_scored=m.groups_rerun_group_scored + scored,
                groups_rerun_whole=m.groups_rerun_whole + (not scored),
                sealed_siblings_discarded=m.sealed_siblings_discarded + sealed,
            )
            continue
        for sibling in unfinished:
            retire.append(Retire(*sibling.key))
            turn = saved.get(sibling.key) if level is RecoveryLevel.TURN else None
            if turn is not None:
                ledger, key = ledger.claim_continuation(sibling.key, turn)
                m = replace(m, siblings_resumed_from_turn=m.siblings_resumed_from_turn + 1)
            else:
                if sibling.state in (AttemptState.RESERVED, AttemptState.DISPATCHED):
                    ledger = ledger.abandon(sibling.key)
                ledger, key = ledger.retry_sibling(group.group_id, sibling.sibling)
                turn = 0
                m = replace(m, siblings_rerun_from_scratch=m.siblings_rerun_from_scratch + 1)
            dispatch.append(DispatchItem(group.group_id, key[0], key[1], turn, level))
    for work in new_work:
        ledger, keys = ledger.open_group(
            work.group_id, work.size, prompt=work.prompt, environment=work.environment
        )
        dispatch += [DispatchItem(work.group_id, r, a, 0, None) for r, a in keys]
    return RedispatchPlan(ledger, tuple(retire), tuple(dispatch), m)
