"""Scenario faults and scenario coverage of a simulated run (PROTOCOL.md §7).

What lives here: the opt-in faults `quiesce simulate --inject KIND` plays (each one puts the
run into one §7 scenario the random call faults never produce), the participant wrapper
that tampers with a restore reply, and `ScenarioWatch`, which notes which §7 scenarios a
run reached and which rows of the controller's tables fired -- from what actually happened
(a conflict answered and the reported id resumed; a digest mismatch rejected at restore),
never from what was injected. What it does not know: the protocol's decisions (the
coordinator makes them) or how the world runs (`_simulate`).

The kinds (`ScenarioFault`), each drawn from the seed (its own `random.Random`, so the
clock's draws, and every run without `--inject`, stay as they were):
- `conflict` (S5): at the run's first checkpoint attempt, a prepare from a controller of an
  earlier epoch (an id below every id this controller mints, above every id the
  participant retired) fences one policy server; the controller's prepare meets
  `checkpoint_conflict` and must abort that id first;
- `preparing-intent-crash` (S18): the controller crashes once a prepare of a checkpoint at
  or after the crash step was answered, its intent record saying `preparing`; the next
  controller must abort that id on every participant;
- `restore-digest-mismatch` (S16): the first restore call of a restart that installs a
  snapshot's artifact reports a digest other than the committed one; the controller must
  reject that snapshot and fall back. Needs a restart: without `crash_at_step` or
  `preparing-intent-crash`, the controller crashes as `crash_at_step` at mid-run would;
- `duplicate-snapshot`: right after the snapshot the crash would follow, the world fires a
  periodic trigger at the same trainer step, so two snapshots match the anchor, and the
  crash waits for the second; the restore must take the newest (and, with
  `restore-digest-mismatch`, fall back to the older one);
- `staging-corruption`: once a checkpoint's artifacts are validated, the world flips a byte
  of one staged artifact; publication must verify the staged set and refuse it (I8);
- `forged-receipt` (M3, S17's rule "only an ACK releases"): right after an agent announces
  a completion, the world sends that agent an ACK quoting the execution's key with a
  receipt one character off; the agent must keep the result (the receipt is `unknown`)
  until the controller's ACK quotes the exact one;
- `optimizer-race` (S9): once a checkpoint's commit calls go out, the trainer begins its
  next optimizer step (if it has groups to train) instead of waiting for the snapshot, as
  a periodic trigger racing a step would let it; the controller must see the trainer moved
  at capture, skip `trainer_state_changed` and abort the same id. The world knows it
  moved the trainer during that checkpoint: its publication is a violation (I8).

The oracle keeps facts of its own here, independent of the coordinator: a restore that
ended on a snapshot whose restore reply the world had tampered with is a violation (S16:
silent divergence); and, with `duplicate-snapshot`, every snapshot a restore starts to
install must be the one `quiesce.models.oracles.newest_match` names from the store's
published snapshots and the trainer's anchor, skipping only those this restore already
sent restore calls for (M9: the newest match; a restore that took the older of two
matching snapshots is consistent and loses nothing, so only this check sees it). A restore
that starts fresh although a snapshot it never tried matches is a violation too. With
`forged-receipt`, an agent that no longer holds the result right after the forged ACK (the
only ACK that can have reached it by then) released it on a receipt that was not its own
(`quiesce.models.oracles.released_by_ack`): a violation, checked on the release itself,
because end to end an early release costs nothing here (the controller sealed the result
when the completion was announced), so no lineage count would show it.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

from quiesce.adapters import (
    CompletionsReply,
    FaultKind,
    FenceLogLine,
    FenceLogSink,
    Participant,
    RestoreReport,
)
from quiesce.models.oracles import Candidate, newest_match, released_by_ack
from quiesce.protocol import Cause, OpId
from quiesce.protocol.controller import ControllerEffect, ControllerInput, ControllerState, Outcome
from quiesce.protocol.controller.lowlevel import (
    Call,
    CallFailed,
    Op,
    Redispatch,
    Reply,
    RestoreOutcome,
    RestoreTarget,
)
from quiesce.protocol.machines import CheckpointState, RegistryState
from quiesce.protocol.participant import ParticipantOp
from quiesce.protocol.wire import ErrorReply, Message, PrepareReply, RestoreReply, RetireReply

if TYPE_CHECKING:
    from quiesce.fsm import RowLog

__all__ = [
    "FAILURE_SCENARIOS",
    "NOT_SIMULATED",
    "RunCoverage",
    "ScenarioFault",
    "ScenarioWatch",
    "TamperingParticipant",
    "corrupt_one_staged_artifact",
]


class ScenarioFault(Enum):
    """One opt-in fault of `quiesce simulate --inject` (the module docstring says what)."""

    CONFLICT = "conflict"
    DUPLICATE_SNAPSHOT = "duplicate-snapshot"
    RESTORE_DIGEST_MISMATCH = "restore-digest-mismatch"
    PREPARING_INTENT_CRASH = "preparing-intent-crash"
    STAGING_CORRUPTION = "staging-corruption"
    FORGED_RECEIPT = "forged-receipt"
    OPTIMIZER_RACE = "optimizer-race"


FAILURE_SCENARIOS: tuple[str, ...] = tuple(f"S{n}" for n in range(1, 20))
"""Every failure scenario of PROTOCOL.md §7."""

NOT_SIMULATED: dict[str, str] = {
    "S2": "the simulated world has no train switch (and no weight sync): nothing but a "
    "checkpoint ever holds the deadline registry",
    "S13": "a recovery mode the controller does not know is refused at setup: the run never "
    "starts (tests/protocol covers the refusal)",
    "S14": "an unmanaged multi-worker server is refused at setup: the run never starts "
    "(tests/protocol covers the refusal)",
}
"""The §7 scenarios `simulate` cannot produce, each with why."""


class RunCoverage(BaseModel):
    """What a run reached: `scenarios` (the §7 ids, in order), `evidence` (per scenario, what
    happened the first time), and `rows` (per controller table, the indices of the rows
    that fired)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    scenarios: list[str]
    evidence: dict[str, str]
    rows: dict[str, list[int]]


def _number(scenario: str) -> int:
    return int(scenario[1:])


class TamperingParticipant(Participant):
    """A participant client that reports a wrong digest for the restore `watch` picks
    (`restore-digest-mismatch`); every other call goes through unchanged."""

    def __init__(self, inner: Participant, watch: ScenarioWatch) -> None:
        self.name = inner.name
        self.inner = inner
        self.watch = watch

    async def send(
        self, op: ParticipantOp, request: Message | None, deadline_at: float | None
    ) -> Message:
        reply = await self.inner.send(op, request, deadline_at)
        if (
            op is ParticipantOp.RESTORE
            and isinstance(reply, RestoreReply)
            and reply.status == "restored"
            and reply.digest
            and self.watch.tamper_restore(self.name, getattr(request, "snapshot_id", None))
        ):
            return reply.model_copy(update={"digest": "0" * 64})
        return reply

    async def completions(self, *, deadline_at: float | None = None) -> CompletionsReply:
        return await self.inner.completions(deadline_at=deadline_at)


@dataclass
class _Pending:
    """Facts the detectors wait on, between two steps."""

    conflicts: set[OpId] = field(default_factory=set)
    prepare_replies_lost: set[tuple[str, OpId]] = field(default_factory=set)
    not_ready: set[tuple[str, OpId]] = field(default_factory=set)
    background_ack_failed: bool = False
    suspended_at: float | None = None
    smallest_budget: float = 0.0


class ScenarioWatch(FenceLogSink):
    """Notes the §7 scenarios a run reaches (`reached`) and plays the injected faults'
    decisions that need the seed (`rng`). A fence log sink too: a stale prepare refused by
    its high-watermark (S15) is seen only by the participant."""

    def __init__(
        self,
        faults: frozenset[ScenarioFault],
        seed: int,
        now: Callable[[], float],
        rows: RowLog | None = None,
    ) -> None:
        self.faults = faults
        self.rng = random.Random(f"scenario-faults:{seed}")
        self.now = now
        self.rows = rows
        self.evidence: dict[str, str] = {}
        self._pending = _Pending()
        self._phase = CheckpointState.IDLE
        # restore-digest-mismatch: tamper with the first restore call of a restart; the
        # snapshot it named (a restore that ends on it is a violation).
        self.restarts = 0
        self._tamper_armed = False
        self.tampered: set[str] = set()
        # Scenario faults played so far (faults, for the I9 rule "no fault, nothing
        # untrained"); a tampered restore reply counts when it is sent.
        self.injected = 0
        # Snapshots found unverifiable right after their publication (I8).
        self.unverified: list[str] = []
        # duplicate-snapshot: the world's view of the store and the trainer (`_Run` sets
        # it), the snapshots this controller start sent restore calls for, and every
        # selection that was not the newest match (M9).
        self.published: Callable[[], list[Candidate]] | None = None
        self.anchor: Callable[[], tuple[int, str]] | None = None
        self._tried: set[object] = set()
        self.misselected: list[str] = []
        # optimizer-race: the checkpoint during whose commit the trainer stepped (the world
        # moved it, so that snapshot may never be published: S9, I8).
        self.raced: str | None = None
        # forged-receipt: every result an agent released on a receipt that was not its own.
        self.wrongly_released: list[str] = []

    def injects(self, fault: ScenarioFault) -> bool:
        return fault in self.faults

    def reach(self, scenario: str, evidence: str) -> None:
        self.evidence.setdefault(scenario, evidence)

    # ------------------------------------------------------------------ tampering

    def arm_restore_tamper(self) -> None:
        """A controller (re)starts after a crash: its first snapshot restore call lies."""
        self.restarts += 1
        if self.injects(ScenarioFault.RESTORE_DIGEST_MISMATCH) and not self.tampered:
            self._tamper_armed = True

    def tamper_restore(self, participant: str, snapshot_id: object) -> bool:
        if not self._tamper_armed:
            return False
        self._tamper_armed = False
        self.tampered.add(str(snapshot_id))
        self.injected += 1
        return True

    def violations(self, restores: list[RestoreReport]) -> list[str]:
        """The oracle's own checks: no restore ends on a snapshot whose restore reply
        reported a digest other than the committed one (S16), every snapshot verified
        right after its publication (I8), (with `duplicate-snapshot`) every restore took
        the newest matching snapshot (M9), and (with `forged-receipt`) no agent released a
        result on a receipt that was not its own (M3)."""
        return (
            self.misselected
            + self.wrongly_released
            + [
                f"restored from snapshot {r.snapshot_id} although a participant reported a digest "
                "that differs from the committed one (S16)"
                for r in restores
                if r.kind == "snapshot" and r.snapshot_id in self.tampered
            ]
            + [f"{finding} (I8)" for finding in self.unverified]
        )

    # ------------------------------------------------------------------ M3 receipts

    def forged_ack_answered(
        self, participant: str, receipt: tuple[str, int, str], forged: str, held: bool
    ) -> None:
        """`participant` handled an ACK quoting `receipt`'s key with the `forged` text (the
        only ACK that reached it since the completion), and `held` says whether it still
        holds the completed result afterwards."""
        self.injected += 1
        if held or released_by_ack(receipt, {(*receipt[:2], forged)}):
            return
        self.wrongly_released.append(
            f"{participant} released {receipt[0]}#{receipt[1]} on an ACK quoting the forged "
            f"receipt {forged!r}, not its own (M3: only the exact receipt releases a result)"
        )

    # ------------------------------------------------------------------ M9 selection

    def starting(self) -> None:
        """A controller process starts: its restore has tried no snapshot yet."""
        self._tried = set()

    def _judges_selection(self) -> bool:
        return (
            self.injects(ScenarioFault.DUPLICATE_SNAPSHOT)
            and self.published is not None
            and self.anchor is not None
        )

    def _newest_untried(self, fingerprint: str) -> object | None:
        """The snapshot M9 says this restore must take next (`newest_match`), from the
        world's own view of the store and the trainer anchor."""
        assert self.published is not None and self.anchor is not None
        step, version = self.anchor()
        return newest_match(
            self.published(),
            step=step,
            version=version,
            fingerprint=fingerprint,
            tried=self._tried,
        )

    def _restore_called(self, target: RestoreTarget, fingerprint: str) -> None:
        """A restore call of `target`'s snapshot: the first one of a snapshot must name
        the newest match not tried yet."""
        snapshot = target.snapshot_id
        if snapshot in self._tried:
            return
        expected = self._newest_untried(fingerprint)
        if expected != snapshot:
            self.misselected.append(
                f"restore installs snapshot {snapshot}, not the newest matching snapshot "
                f"{expected} (M9)"
            )
        self._tried.add(snapshot)

    # ------------------------------------------------------------------ detectors

    def observe(
        self, event: ControllerInput, effects: tuple[ControllerEffect, ...], state: ControllerState
    ) -> None:
        """One controller step."""
        pending = self._pending
        phase = state.phase
        if isinstance(event, Reply):
            self._reply(event)
        elif isinstance(event, CallFailed):
            self._failed(event)
        for effect in effects:
            if isinstance(effect, Call):
                self._call(effect, phase)
                if (
                    effect.op is Op.RESTORE
                    and isinstance(effect.payload, RestoreTarget)
                    and self._judges_selection()
                ):
                    fleet = state.fleet
                    self._restore_called(effect.payload, "" if fleet is None else fleet.fingerprint)
            elif isinstance(effect, Outcome) and effect.result == "skipped":
                if effect.reason == "trainer_state_changed":
                    self.reach("S9", f"{effect.checkpoint_id} skipped: trainer_state_changed")
                elif effect.reason == "acks_pending":
                    self.reach("S7", f"{effect.checkpoint_id} skipped: acks_pending")
            elif isinstance(effect, Outcome) and effect.reason == "participant_restarted":
                self.reach("S19", f"{effect.checkpoint_id} failed: participant_restarted")
            elif (
                isinstance(effect, Redispatch)
                and effect.level == "prompt_group"
                and not any(isinstance(e, RestoreOutcome) for e in effects)
            ):
                self.reach("S11", f"group {effect.group_id} retried whole at prompt_group")
        if phase is not self._phase:
            if phase in (CheckpointState.ABORT_PENDING, CheckpointState.RELEASE_PENDING):
                self.reach("S4", f"an abort or release failed: {phase.value}, same-id retry")
            self._phase = phase
        registry = state.deadlines
        now = self.now()
        if registry.state is RegistryState.SUSPENDED and pending.suspended_at is None:
            budgets = [left for _, left in registry.data.budgets]
            pending.suspended_at = now
            pending.smallest_budget = min(budgets) if budgets else float("inf")
        elif registry.state is RegistryState.RUNNING and pending.suspended_at is not None:
            held = now - pending.suspended_at
            if held > pending.smallest_budget:
                self.reach(
                    "S1",
                    f"a group's deadline ({pending.smallest_budget:.3f} s left) came due "
                    f"during a {held:.3f} s park; the checkpoint's hold kept it",
                )
            pending.suspended_at = None

    def _reply(self, event: Reply) -> None:
        pending = self._pending
        result = event.result
        if isinstance(result, ErrorReply) and result.active_id is not None:
            if result.code == "checkpoint_conflict":
                pending.conflicts.add(result.active_id)
        elif isinstance(result, PrepareReply) and event.op_id is not None:
            key = (event.participant, event.op_id)
            if result.status == "not_ready":
                pending.not_ready.add(key)
            elif key in pending.not_ready:
                self.reach(
                    "S10",
                    f"{event.participant} answered prepare({event.op_id}) not ready, then "
                    "ready when asked again",
                )
        elif isinstance(result, RetireReply) and result.outcome == "completed_unacknowledged":
            self.reach("S17", f"{event.participant} kept a completed, un-ACKed result on retire")

    def _failed(self, event: CallFailed) -> None:
        pending = self._pending
        if event.op is Op.COMMIT and event.cause in (Cause.PARTICIPANT_ERROR, Cause.TIMEOUT):
            self.reach("S3", f"commit to {event.participant} failed: {event.cause.value}")
        elif event.op is Op.PREPARE and event.cause is Cause.REPLY_LOST and event.op_id:
            pending.prepare_replies_lost.add((event.participant, event.op_id))
        elif event.op is Op.ACK and self._phase is CheckpointState.IDLE:
            pending.background_ack_failed = True

    def _call(self, call: Call, phase: CheckpointState) -> None:
        pending = self._pending
        if call.op is Op.RESUME and call.op_id is not None:
            if call.op_id in pending.conflicts:
                pending.conflicts.discard(call.op_id)
                self.reach(
                    "S5",
                    f"{call.participant} answered checkpoint_conflict naming {call.op_id}; "
                    "the controller aborts that id first",
                )
            if (call.participant, call.op_id) in pending.prepare_replies_lost:
                self.reach(
                    "S6",
                    f"the reply to prepare({call.op_id}) at {call.participant} was lost; "
                    "it is resumed all the same",
                )
        elif call.op is Op.ACK:
            if phase is CheckpointState.CAPTURING:
                self.reach("S7", "ACKs still pending at capture are flushed inside the cut")
            elif phase is CheckpointState.FLUSHING_ACKS and pending.background_ack_failed:
                pending.background_ack_failed = False
                self.reach("S8", "a background ACK batch failed; the strict flush sends it")

    def fault(self, participant: str, op: str, kind: FaultKind) -> None:
        """A call fault the fleet injected (`InMemoryFleet.on_fault`)."""
        if kind is FaultKind.CRASH_RESTART and op in ("prepare", "commit", "resume"):
            self.reach("S19", f"{participant} restarted on {op}, mid-checkpoint")

    def restored(self, report: RestoreReport, fingerprint: str = "") -> None:
        """A controller start ended its restore (`fingerprint`: the fleet's topology)."""
        if report.kind in ("fresh_start", "bootstrap") and self._judges_selection():
            left = self._newest_untried(fingerprint)
            if left is not None:
                self.misselected.append(
                    f"restore started fresh although snapshot {left} matches the anchor (M9)"
                )
        if report.intent is not None:
            self.reach(
                "S18",
                f"a restart found the intent record of {report.intent} and chose to "
                f"{report.intent_action} it",
            )
        for snapshot, why in report.rejected:
            if "digest" in why:
                self.reach("S16", f"snapshot {snapshot} rejected at restore: {why}")
        if report.discarded:
            self.reach(
                "S12",
                f"{report.discarded} restored continuations depending on a restart_only "
                "resource discarded before resume",
            )

    def record(self, line: FenceLogLine) -> None:
        before, after = line.before, line.after
        if (
            line.op == "prepare"
            and line.op_id is not None
            and before.high_watermark is not None
            and OpId.parse(line.op_id) <= before.high_watermark
            and before == after
        ):
            self.reach(
                "S15",
                f"{line.participant} refused a delayed prepare({line.op_id}) at or below its "
                "high-watermark",
            )

    # ------------------------------------------------------------------ the result

    def coverage(self) -> RunCoverage:
        scenarios = sorted(self.evidence, key=_number)
        rows: dict[str, list[int]] = {}
        if self.rows is not None:
            for table, row, _source in self.rows.fired:
                rows.setdefault(table, []).append(row)
        return RunCoverage(
            scenarios=scenarios,
            evidence={s: self.evidence[s] for s in scenarios},
            rows={t: sorted(set(r)) for t, r in sorted(rows.items())},
        )


def corrupt_one_staged_artifact(staging: Path, rng: random.Random) -> str | None:
    """Flip one byte of one staged artifact under `staging` (a checkpoint's staging
    directory); the name of the file, or None if there was none to corrupt."""
    if not staging.is_dir():
        return None
    files = sorted(
        path
        for path in staging.iterdir()
        if path.is_file() and path.name != "manifest.json" and path.stat().st_size
    )
    if not files:
        return None
    target = files[rng.randrange(len(files))]
    data = bytearray(target.read_bytes())
    data[rng.randrange(len(data))] ^= 0xFF
    target.write_bytes(bytes(data))
    return target.name
