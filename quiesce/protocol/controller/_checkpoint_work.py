"""M1's named work: what each effect name of the `checkpoint` table's rows does.

What lives here: `CHECKPOINT_WORK`, one function per effect name of M1's rows
(`write_intent`, `call_prepare`, `capture_cut`, `publish`, `outcome`, `stop`, ...), each
doing exactly that work and nothing else; `AttemptCalls`, M1's side of its remote phases
(who is called, with which deadline and retry budget, what a reply or a failure does to
the attempt); the capture and the outcome with its metrics; and M1's timers. What it does
not know: which row fires when (the table decides), how a call is carried or retried (the
phase runner and the `call` table), the ledger's bookkeeping (`_rollouts`).

Deadlines (§3): prepare calls share `admission closed + prepare_timeout_s`; commit and
release calls get `now + control_timeout_s`; an abort gets `max(the attempt's latest
deadline, now + control_timeout_s)`. Prepare and commit calls are retried inside the
attempt (`call_retries`, §4), and so are release and abort calls: a resume of the same id
is idempotent (M2), so a transient fault there is retried before the attempt waits on its
own timer (`release_pending`, `abort_pending`) with admission closed. One try of a call
waits at most `call_try_timeout_s` of the call's deadline (`try_deadline`), so a try that
times out leaves its retries time to run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any, Protocol

from quiesce.fsm import label, work
from quiesce.protocol._causes import Cause, Classification, Disposition
from quiesce.protocol._ids import OpId
from quiesce.protocol._messages import CommitReply, PrepareReply
from quiesce.protocol._timers import ArmTimer, CancelTimer, TimerKey, TimerKind
from quiesce.protocol.controller._capture import CaptureFacts, CaptureVerdict
from quiesce.protocol.controller._effects import (
    CaptureCut,
    ClearIntent,
    DiscardStaging,
    InspectPublished,
    Metric,
    Outcome,
    Publish,
    Quarantine,
    Stopped,
    Validate,
    WriteIntent,
    WriteStaging,
)
from quiesce.protocol.controller._host import StepHost
from quiesce.protocol.controller._phase_runner import (
    PhaseRunner,
    conflict_targets,
    prepare_retry_timer,
    with_conflict,
)
from quiesce.protocol.machines import (
    CHECKPOINT,
    Attempt,
    CallData,
    CallKey,
    CheckpointInput,
    CheckpointState,
    Holder,
    Phase,
    PhaseCalls,
    Restart,
    Slot,
    Trigger,
)

__all__ = [
    "CHECKPOINT_WORK",
    "AttemptCalls",
    "CheckpointHost",
    "add_seconds",
    "capture",
    "prepare_deadline_timer",
    "retry_timer",
]

# The M1 states in which the controller waits on participants (participant_seconds).
_PARTICIPANT_PHASES = frozenset({"preparing", "committing", "releasing", "aborting"})


def prepare_deadline_timer(op_id: OpId) -> TimerKey:
    """The timer that ends the prepare phase of `op_id`."""
    return TimerKey(TimerKind.PREPARE_DEADLINE, str(op_id))


def retry_timer(op_id: OpId) -> TimerKey:
    """The timer that retries the pending abort or release of `op_id`."""
    return TimerKey(TimerKind.ATTEMPT_RETRY, str(op_id))


class CheckpointHost(StepHost, Protocol):
    """The step as M1's work sees it: the step, and the runner of the attempt's phases."""

    phases: PhaseRunner


# ============================================================================ the calls


class AttemptCalls:
    """M1's side of its phases (a `PhaseOwner`): the attempt holds the phase in progress."""

    def __init__(self, host: StepHost) -> None:
        self.h = host

    def progress(self) -> PhaseCalls | None:
        attempt = self.h.state.attempt
        return None if attempt is None else attempt.calls

    def save(self, calls: PhaseCalls | None) -> None:
        self.h.set_attempt(replace(self.h.attempt, calls=calls))

    def targets(self, slot: Slot) -> frozenset[CallKey]:
        attempt = self.h.attempt
        fleet = self.h.state.fleet
        if slot.conflicting:
            return conflict_targets(attempt.conflicts, slot, fleet)
        if fleet is None:
            return frozenset()
        # An abort resumes only who may hold the id (S6); the other phases call everyone.
        names = attempt.attempted if attempt.phase is Phase.ABORT else fleet.names
        return frozenset(
            (m.name, attempt.op_id)
            for m in fleet.members
            if m.role == slot.role and m.name in names
        )

    def plan(self, phase: Phase, key: CallKey) -> CallData:
        attempt = self.h.attempt
        control = self.h.now + self.h.config.control_timeout_s
        if phase is Phase.PREPARE:
            deadline = attempt.prepare_deadline_at
        elif phase is Phase.ABORT:
            deadline = max(attempt.deadline_at, control)
        else:
            deadline = control
        self.h.set_attempt(replace(attempt, deadline_at=max(attempt.deadline_at, deadline)))
        # Every M1 call is retried inside the attempt (§4), release and abort too: the
        # pending states' timer (`snapshot_attempt_interval_s`) takes over only once the
        # retries are spent, so one lost resume does not hold admission closed that long.
        return CallData(deadline_at=deadline, budget=self.h.config.call_retries)

    def payload(self, phase: Phase, key: CallKey) -> Any:
        return None

    def mark_attempted(self, key: CallKey) -> None:
        name, op_id = key
        attempt = self.h.attempt
        # S6: may hold the attempt's id from the moment the call goes out.
        if op_id == attempt.op_id and name not in attempt.attempted:
            self.h.set_attempt(replace(attempt, attempted=attempt.attempted | {name}))

    def record_answer(self, key: CallKey, result: Any) -> None:
        name = key[0]
        attempt = self.h.attempt
        if isinstance(result, PrepareReply):
            attempt = replace(
                attempt,
                parked=attempt.parked + result.parked,
                frozen=attempt.frozen + result.frozen,
            )
        elif isinstance(result, CommitReply):
            attempt = replace(
                attempt, digests=tuple(sorted({*attempt.digests, (name, result.digest)}))
            )
            self.h.emit(WriteStaging(attempt.op_id, name, result.digest, result.artifact))
        self.h.set_attempt(attempt)

    def note_conflict(self, key: CallKey, active_id: OpId) -> None:
        # S5: the id the participant is fenced to is aborted before anything else.
        attempt = self.h.attempt
        self.h.set_attempt(
            replace(attempt, conflicts=with_conflict(attempt.conflicts, key, active_id))
        )

    def call_failed(self, key: CallKey, cause: Cause, *, refused: bool) -> None:
        # §4: the attempt fails with the call's cause (after the call's own retries).
        self.h.fail(cause, key[0])

    def role_settled(self, failed: frozenset[CallKey]) -> bool:
        # A failed call already failed the attempt: nothing moves on.
        return not failed

    def phase_done(self) -> None:
        self.h.fire(CheckpointInput.ROLES_DONE)


# ============================================================================ capture


def capture(run: CheckpointHost) -> None:
    """`capturing`: the capture rule decides (S7, S9); the cut, a re-flush, or a skip."""
    attempt = run.attempt
    facts = CaptureFacts(
        trainer_moved=run.state.trainer_step != attempt.trainer_step or run.state.optimizer_busy,
        acks_pending=bool(run.state.ledger.pending_acks()),
        reflushed=attempt.reflushed,
    )
    verdict = run.policy.judge_capture(facts)
    if verdict is CaptureVerdict.TRAINER_MOVED:
        run.fail(Cause.TRAINER_STATE_CHANGED)  # S9: abort the same id
    elif verdict is CaptureVerdict.ACKS_PENDING:
        run.fail(Cause.ACKS_PENDING)
    elif verdict is CaptureVerdict.REFLUSH:
        # S7: an ACK accepted but not yet recorded; flush again, inside the cut.
        run.set_attempt(replace(attempt, reflushed=True))
        run.set_attempt(replace(run.attempt, acking=run.send_acks(attempt.op_id)))
    else:
        run.emit(CaptureCut(attempt.op_id, attempt.trainer_step, run.state.ledger))


# ============================================================================ outcome


def _outcome(run: CheckpointHost, arg: Any) -> None:
    attempt = run.attempt
    data = run.state.checkpoint.data
    if isinstance(arg, Classification):
        cause: Classification | None = arg
    elif isinstance(arg, Trigger):
        cause = arg.skip
    else:
        cause = attempt.cause
    if attempt.published and run.state.phase is CheckpointState.IDLE:
        result, reason, retryable = "completed", "completed", False
    elif cause is None:
        result, reason, retryable = "failed", "invariant_error", False
    else:
        skipped = cause.disposition is Disposition.SKIPPED
        result = "skipped" if skipped else "failed"
        reason, retryable = cause.reason, cause.retryable
    run.emit(
        Outcome(attempt.op_id, result, reason, retryable, data.failures, data.skips),  # type: ignore[arg-type]
        # Attempts by outcome and cause, counted where the outcome is decided.
        Metric(
            "checkpoint.attempts",
            1.0,
            (("cause", reason), ("outcome", result), ("retryable", str(retryable).lower())),
        ),
    )
    if result == "skipped" and data.skips >= run.config.max_consecutive_skips:
        run.log("consecutive_skips", level="warning", skips=data.skips, reason=reason)
    _metrics(run, attempt)


def _metrics(run: CheckpointHost, attempt: Attempt) -> None:
    seconds = add_seconds(
        attempt.phase_seconds, label(run.state.phase), run.now - attempt.phase_started_at
    )
    seconds = tuple((p, s) for p, s in seconds if p not in ("idle", "stopped"))
    total = sum(s for _, s in seconds)
    waiting = sum(s for p, s in seconds if p in _PARTICIPANT_PHASES)
    for phase, spent in seconds:
        run.emit(Metric("checkpoint.phase_seconds", spent, (("phase", phase),)))
    run.emit(
        Metric("checkpoint.total_seconds", total),
        Metric("checkpoint.participant_seconds", waiting),
        Metric("checkpoint.controller_seconds", total - waiting),
        Metric("checkpoint.rollouts_parked", float(attempt.parked)),
        Metric("checkpoint.rollouts_frozen", float(attempt.frozen)),
    )


def add_seconds(
    seconds: tuple[tuple[str, float], ...], phase: str, spent: float
) -> tuple[tuple[str, float], ...]:
    """`seconds` (per M1 state label) with `spent` more charged to `phase`."""
    merged = dict(seconds)
    merged[phase] = merged.get(phase, 0.0) + spent
    return tuple(sorted(merged.items()))


# ============================================================================ named work
#
# One function per effect name of M1's rows. `arg` is the M1 input's argument.


def _w_write_intent(run: CheckpointHost, _arg: Any) -> None:
    run.emit(WriteIntent(run.attempt.op_id, "preparing"))


def _w_hold(run: CheckpointHost, _arg: Any) -> None:
    run.hold(Holder.CHECKPOINT, deadlines=True)


def _w_flush_acks(run: CheckpointHost, _arg: Any) -> None:
    # S8: strict, every attempt, even if a background drain died.
    agents = run.send_acks(run.attempt.op_id)
    run.set_attempt(replace(run.attempt, acking=agents))
    if not agents:
        run.fire(CheckpointInput.ACKS_FLUSHED)


def _w_arm_prepare_deadline(run: CheckpointHost, _arg: Any) -> None:
    attempt = run.attempt
    # Prepare calls share one deadline, counted from when admission closed.
    at = attempt.started_at + run.config.prepare_timeout_s
    run.set_attempt(replace(attempt, prepare_deadline_at=at))
    run.emit(ArmTimer(prepare_deadline_timer(attempt.op_id), at))


def _w_call_prepare_again(run: CheckpointHost, arg: Restart) -> None:
    # S19 while its role is prepared: a call still in flight is answered by the new
    # incarnation anyway (its reply may be the very one that showed the restart); one its
    # old incarnation answered goes again, same id, and the role waits for it.
    key = (arg.participant, run.attempt.op_id)
    if key in run.phases.answered():
        run.phases.send_new([key])


def _w_cancel_prepare_timers(run: CheckpointHost, _arg: Any) -> None:
    attempt = run.attempt
    if attempt.phase is Phase.PREPARE:
        run.emit(
            CancelTimer(prepare_deadline_timer(attempt.op_id)),
            CancelTimer(prepare_retry_timer(attempt.op_id)),
        )


def _w_phase(phase: Phase) -> Callable[[CheckpointHost, Any], None]:
    def work(run: CheckpointHost, _arg: Any) -> None:
        run.phases.start(phase)

    return work


def _w_capture_cut(run: CheckpointHost, _arg: Any) -> None:
    run.capture()


def _w_validate(run: CheckpointHost, _arg: Any) -> None:
    attempt = run.attempt
    fleet = run.state.fleet
    committed = frozenset(name for name, _ in attempt.digests)
    if fleet is None or committed != fleet.names:
        run.fail(Cause.TOPOLOGY_MISMATCH)
        return
    at_anchor = attempt.op_id == run.state.anchor_checkpoint
    run.emit(
        Validate(attempt.op_id, attempt.digests, fleet.fingerprint, attempt.trainer_step, at_anchor)
    )


def _w_publish(run: CheckpointHost, _arg: Any) -> None:
    run.emit(Publish(run.attempt.op_id))


def _w_update_intent(run: CheckpointHost, _arg: Any) -> None:
    run.state = replace(run.state, mutated=False)
    run.emit(WriteIntent(run.attempt.op_id, "published"))


def _w_inspect(run: CheckpointHost, _arg: Any) -> None:
    run.emit(InspectPublished(run.attempt.op_id))


def _w_quarantine(run: CheckpointHost, _arg: Any) -> None:
    run.emit(Quarantine(run.attempt.op_id))


def _w_clear_intent(run: CheckpointHost, _arg: Any) -> None:
    run.intent_cleared = True
    run.emit(ClearIntent(run.attempt.op_id))


def _w_discard_staging(run: CheckpointHost, _arg: Any) -> None:
    run.emit(DiscardStaging(run.attempt.op_id))


def _w_drop_holds(run: CheckpointHost, _arg: Any) -> None:
    attempt = run.attempt
    closed_s = run.now - attempt.started_at
    run.emit(Metric("checkpoint.admission_closed_s", closed_s))
    if closed_s > run.config.snapshot_attempt_interval_s:
        run.log(
            "admission_closed_too_long",
            level="warning",
            checkpoint_id=str(attempt.op_id),
            admission_closed_s=closed_s,
            hint="raise snapshot_attempt_interval_s",
        )
    run.release(Holder.CHECKPOINT, deadlines=True)


def _w_outcome(run: CheckpointHost, arg: Any) -> None:
    _outcome(run, arg)


def _w_arm_retry(run: CheckpointHost, _arg: Any) -> None:
    attempt = run.attempt
    run.emit(ArmTimer(retry_timer(attempt.op_id), run.now + run.config.snapshot_attempt_interval_s))


def _w_cancel_retry(run: CheckpointHost, _arg: Any) -> None:
    run.emit(CancelTimer(retry_timer(run.attempt.op_id)))


def _w_stop(run: CheckpointHost, arg: Any) -> None:
    attempt = run.attempt
    cause = arg if isinstance(arg, Classification) else attempt.cause
    reason = "invariant_error" if cause is None else cause.reason
    if isinstance(cause, Classification) and cause.disposition is Disposition.RETRYABLE:
        reason = "max_consecutive_failures"
    kept = None if run.intent_cleared else attempt.op_id
    # The last failure: its participant (if a call failed) and its cause.
    last = None if cause is None else cause.cause.value
    run.emit(Stopped(reason, kept, participant=attempt.failed_by, cause=last))


CHECKPOINT_WORK: Mapping[str, Callable[[CheckpointHost, Any], None]] = work(
    CHECKPOINT,
    {
        "write_intent": _w_write_intent,
        "hold": _w_hold,
        "flush_acks": _w_flush_acks,
        "arm_prepare_deadline": _w_arm_prepare_deadline,
        "call_prepare": _w_phase(Phase.PREPARE),
        "cancel_prepare_timers": _w_cancel_prepare_timers,
        "call_prepare_again": _w_call_prepare_again,
        "call_commit": _w_phase(Phase.COMMIT),
        "capture_cut": _w_capture_cut,
        "validate": _w_validate,
        "publish": _w_publish,
        "update_intent": _w_update_intent,
        "call_release": _w_phase(Phase.RESUME),
        "call_abort": _w_phase(Phase.ABORT),
        "inspect_published": _w_inspect,
        "quarantine": _w_quarantine,
        "clear_intent": _w_clear_intent,
        "discard_staging": _w_discard_staging,
        "drop_holds": _w_drop_holds,
        "outcome": _w_outcome,
        "arm_retry": _w_arm_retry,
        "cancel_retry": _w_cancel_retry,
        "stop": _w_stop,
    },
    level="coordinator",
)
"""The work each M1 effect name stands for (every name of CHECKPOINT's rows is here)."""
