"""The pure coordinator: the controller's side of the protocol as one function.

    Coordinator(config).step(state, now, input) -> (state, effects)

Rules of this module (h11's, for a controller):
- everything the controller knows is in `ControllerState`, a frozen, hashable value: M1
  (`checkpoint`), M6 (`admission_gate`), M7 (`deadline_registry`), the M8 ledger, the
  discovered fleet, the id counter and the trainer's position. No dict, no list, no float
  but timestamps computed from `now`;
- `step` is pure: no I/O, no clock, no randomness. Time is `now`; every timing decision is
  an `ArmTimer` now and a `TimerDue` later;
- M1 is the spine. An input is translated into M1 inputs; each M1 row names the work it
  starts (`write_intent`, `call_prepare`, ...) and `_WORK` below does exactly that work,
  nothing else. Sub-steps that are not M1 transitions (one role of a phase answered, a
  not-ready participant asked again) live in `_Run`'s reply handlers;
- this module does not know how a call is carried, how the store writes, or what a
  participant does with a call: effects go out, outcomes come back as inputs;
- M9 (`restore`) runs at controller start: `Recovered` starts it and `_restore_flow`
  does the work its rows name, exactly as `_WORK` does for M1 (the in-flight id is still
  finished by M1's rows; M9 tells M1 which verdict the intent got). While it runs,
  admission is held by `restore`, checkpoint triggers wait, and new groups are queued.

Phase order (§3), within one role all calls at once, the next role when all replied:

    prepare  policy -> agent -> resources      (deadline: admission closed + prepare_timeout_s)
    commit   agent -> policy -> resources      (deadline: now + control_timeout_s)
    release  resources -> policy -> agent      (deadline: now + control_timeout_s)
    abort    conflicting ids first, then the attempted id, each resources -> policy -> agent
             (deadline: max(the attempt's latest deadline, now + control_timeout_s))

Public API:
- `Coordinator(config, *, checkpoint=CHECKPOINT, gate=ADMISSION_GATE,
  deadlines=DEADLINE_REGISTRY, restore=RESTORE)`: the tables are parameters so a mutant (a
  derived table) runs through the same code; the object holds no state.
- `Coordinator.initial(epoch) -> ControllerState`: a controller at start (`epoch` from the
  persisted counter, one more than last run's).
- `Coordinator.step(state, now, input) -> (ControllerState, tuple[ControllerEffect, ...])`.
- `ControllerState` (fields below), `Fleet`, `Member`, `PHASES`, and the timer names
  `prepare_deadline_timer(id)`, `prepare_retry_timer(id)`, `retry_timer(id)` (deadline
  timers: `_deadline_registry.deadline_timer(group)`; restore retries:
  `_restore_flow.restore_retry_timer(id)`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

from quiesce.fsm import Effect, Table, TransitionNotAllowed, label
from quiesce.protocol._causes import Cause, Classification, Disposition, cause_of_refusal, classify
from quiesce.protocol._config import QuiesceConfig
from quiesce.protocol._errors import LocalProtocolError
from quiesce.protocol._ids import OpId, OpKind
from quiesce.protocol._levels import RecoveryLevel
from quiesce.protocol._messages import (
    AckReply,
    CommitReply,
    ErrorReply,
    PrepareReply,
    ResumeReply,
    RetireReply,
)
from quiesce.protocol._timers import ArmTimer, CancelTimer
from quiesce.protocol.controller._effects import (
    Call,
    CaptureCut,
    ClearIntent,
    CloseAdmission,
    ControllerEffect,
    DiscardStaging,
    Dispatch,
    InspectPublished,
    LocalOp,
    Log,
    Metric,
    Op,
    OpenAdmission,
    Outcome,
    Publish,
    Quarantine,
    Redispatch,
    Stopped,
    Validate,
    WriteIntent,
    WriteStaging,
)
from quiesce.protocol.controller._inputs import (
    CallFailed,
    ControllerInput,
    Discovered,
    GroupOpened,
    GroupTrained,
    LocalDone,
    LocalFailed,
    OptimizerStepBegin,
    OptimizerStepEnd,
    PeriodElapsed,
    PublishInspected,
    Recovered,
    Reply,
    RolloutCompleted,
    RolloutFailed,
    SnapshotLoaded,
    SnapshotLoadFailed,
    SnapshotsListed,
    TimerDue,
    TrainerBoundary,
    TrainSwitchBegin,
    TrainSwitchEnd,
    WeightSyncBegin,
    WeightSyncEnd,
)
from quiesce.protocol.controller._ledger import AttemptKey, OwedAck, UnknownGroup
from quiesce.protocol.controller._recovery_levels import (
    lower_levels,
    validate_discovery,
)
from quiesce.protocol.controller._restore_flow import RestoreFlow
from quiesce.protocol.controller._state import (
    ControllerState,
    Fleet,
    Member,
    restore_active,
    restore_failed,
)
from quiesce.protocol.machines import (
    ADMISSION_GATE,
    CHECKPOINT,
    DEADLINE_REGISTRY,
    RESTORE,
    Attempt,
    AttemptState,
    CheckpointData,
    CheckpointInput,
    CheckpointState,
    DeadlineArg,
    DeadlineExpired,
    GateInput,
    GateState,
    GroupState,
    RegistryInput,
    RegistryState,
    RestoreInput,
    RestoreState,
    Trigger,
    group_of_timer,
)

__all__ = [
    "CHECKPOINT_HOLDER",
    "PHASES",
    "Coordinator",
    "prepare_deadline_timer",
    "prepare_retry_timer",
    "retry_timer",
]

CHECKPOINT_HOLDER = "checkpoint"
_TRAIN_SWITCH = "train_switch"
_WEIGHT_SYNC = "weight_sync"

_PREPARE_ORDER = ("policy", "agent", "resources")
_COMMIT_ORDER = ("agent", "policy", "resources")  # policy needs the agents' continuations
_RESUME_ORDER = ("resources", "policy", "agent")

PHASES: dict[str, tuple[Op, tuple[tuple[str, str], ...]]] = {
    "prepare": (Op.PREPARE, tuple(("attempt", r) for r in _PREPARE_ORDER)),
    "commit": (Op.COMMIT, tuple(("attempt", r) for r in _COMMIT_ORDER)),
    "release": (Op.RESUME, tuple(("attempt", r) for r in _RESUME_ORDER)),
    # A participant fenced to another id refuses resume(X) until that id is resumed (S5).
    "abort": (
        Op.RESUME,
        tuple(("conflict", r) for r in _RESUME_ORDER)
        + tuple(("attempt", r) for r in _RESUME_ORDER),
    ),
}
"""Remote phases: their op and their slots `(which ids, role)`, called in this order."""

# The M1 states in which the controller waits on participants (participant_seconds).
_PARTICIPANT_PHASES = frozenset({"preparing", "committing", "releasing", "aborting"})


def prepare_deadline_timer(op_id: OpId) -> str:
    """The timer that ends the prepare phase of `op_id`."""
    return f"prepare_deadline:{op_id}"


def prepare_retry_timer(op_id: OpId) -> str:
    """The timer that asks not-ready participants of `op_id` again."""
    return f"prepare_retry:{op_id}"


def retry_timer(op_id: OpId) -> str:
    """The timer that retries the pending abort or release of `op_id`."""
    return f"retry:{op_id}"


# ============================================================================ the state


# ============================================================================ the coordinator


class Coordinator:
    """The controller's protocol logic; holds only its configuration and tables.

    >>> coordinator = Coordinator(QuiesceConfig())
    >>> state = coordinator.initial(epoch=1)
    >>> state, effects = coordinator.step(state, 0.0, PeriodElapsed())
    >>> effects[0].result, effects[0].reason
    ('skipped', 'not_discovered')
    """

    def __init__(
        self,
        config: QuiesceConfig,
        *,
        checkpoint: Table[CheckpointState, CheckpointInput] = CHECKPOINT,
        gate: Table[GateState, GateInput] = ADMISSION_GATE,
        deadlines: Table[RegistryState, RegistryInput] = DEADLINE_REGISTRY,
        restore: Table[RestoreState, RestoreInput] = RESTORE,
    ) -> None:
        self.config = config
        self.checkpoint = checkpoint
        self.gate = gate
        self.deadlines = deadlines
        self.restore = restore

    def initial(self, epoch: int) -> ControllerState:
        """A controller at start; `epoch` must grow at every start (it is persisted)."""
        data = CheckpointData(failure_budget=self.config.max_consecutive_failures)
        return ControllerState(
            epoch=epoch,
            checkpoint=self.checkpoint.start(data),
            gate=self.gate.start(),
            deadlines=self.deadlines.start(),
        )

    def step(
        self, state: ControllerState, now: float, input: ControllerInput
    ) -> tuple[ControllerState, tuple[ControllerEffect, ...]]:
        """Apply one input at time `now`: the next state and the effects, in order.

        Raises the setup refusals of discovery (`DiscoveryRefused`, `OverrideRefines`,
        ...) with the state unchanged; every other input is accepted (a stale reply or a
        stale timer is logged and changes nothing).
        """
        run = _Run(self, state, now)
        run.handle(input)
        return run.state, tuple(run.effects)


# ============================================================================ one step


class _Run:
    """The scratch space of one `step`: local, thrown away afterwards (step stays pure)."""

    def __init__(self, coordinator: Coordinator, state: ControllerState, now: float) -> None:
        self.c = coordinator
        self.config = coordinator.config
        self.state = state
        self.now = now
        self.effects: list[ControllerEffect] = []
        self._queue: deque[tuple[CheckpointInput, Any]] = deque()
        self._draining = False
        # The attempt a row just finished (M1 data no longer holds it in idle).
        self._last: Attempt | None = state.attempt
        self._intent_cleared = False
        self.restore_table = coordinator.restore
        self.m9 = RestoreFlow(self)

    # ------------------------------------------------------------------ plumbing

    @property
    def attempt(self) -> Attempt:
        attempt = self.state.attempt or self._last
        if attempt is None:
            raise LocalProtocolError(f"no checkpoint attempt in {label(self.state.phase)}")
        return attempt

    def set_attempt(self, attempt: Attempt) -> None:
        self._last = attempt
        if self.state.attempt is not None:
            data = replace(self.state.checkpoint.data, attempt=attempt)
            self.state = replace(self.state, checkpoint=replace(self.state.checkpoint, data=data))

    def emit(self, *effects: ControllerEffect) -> None:
        self.effects.extend(effects)

    def log(self, event: str, level: str = "info", **fields: Any) -> None:
        self.effects.append(Log(event, level, tuple(sorted(fields.items()))))  # type: ignore[arg-type]

    def fire(self, event: CheckpointInput, arg: Any = None) -> None:
        """Feed M1; its named work runs in row order (queued if fired from inside work)."""
        self._queue.append((event, arg))
        if self._draining:
            return
        self._draining = True
        try:
            while self._queue:
                self._fire_one(*self._queue.popleft())
        finally:
            self._draining = False

    def _fire_one(self, event: CheckpointInput, arg: Any) -> None:
        before = self.state.checkpoint
        after, named = self.c.checkpoint.step(before, event, arg)
        self._last = after.data.attempt or before.data.attempt or self._last
        if isinstance(arg, Trigger) and before.state is CheckpointState.IDLE:
            self._last = arg.attempt
        self.state = replace(self.state, checkpoint=after)
        if after.state is not before.state and self._last is not None:
            # Charge the time spent in the state just left to that state.
            spent = self.now - self._last.phase_started_at
            self.set_attempt(
                replace(
                    self._last,
                    phase_started_at=self.now,
                    phase_seconds=_add_seconds(
                        self._last.phase_seconds, label(before.state), spent
                    ),
                )
            )
        for effect in named:
            if isinstance(effect, Effect):
                _WORK[effect.name](self, arg)
            else:  # a derived table may bind its own effect values
                self.emit(effect)

    def fail(self, cause: Cause) -> None:
        self.fire(CheckpointInput.FAILED, classify(cause))

    @property
    def intent_cleared(self) -> bool:
        """Did an M1 row clear the intent record in this step?"""
        return self._intent_cleared

    def mint_id(self, kind: OpKind) -> OpId:
        """A fresh op id of `kind`; checkpoint and restore ids share one ordered counter."""
        op_id = OpId(self.state.epoch, self.state.seq + 1, self.state.trainer_step, kind)
        self.state = replace(self.state, seq=op_id.seq)
        return op_id

    def start_deadline(self, group_id: str) -> None:
        """Start (or restart) group `group_id`'s rollout deadline (M7)."""
        self._registry(
            RegistryInput.START, DeadlineArg(group_id, self.now, self.config.rollout_timeout_s)
        )

    def mint(self) -> Attempt:
        op_id = self.mint_id("ck")
        return Attempt(
            op_id=op_id,
            trainer_step=self.state.trainer_step,
            started_at=self.now,
            phase_started_at=self.now,
        )

    # ------------------------------------------------------------------ gate and registry

    def hold(self, owner: str, *, deadlines: bool) -> None:
        gate, effects = self.c.gate.step(self.state.gate, GateInput.HOLD, owner)
        self.state = replace(self.state, gate=gate)
        if effects:
            self.emit(CloseAdmission(owner))
        if deadlines:
            self._registry(RegistryInput.SUSPEND, DeadlineArg(owner, self.now))

    def release(self, owner: str, *, deadlines: bool) -> None:
        gate, effects = self.c.gate.step(self.state.gate, GateInput.RELEASE, owner)
        self.state = replace(self.state, gate=gate)
        if effects:
            self.emit(OpenAdmission(owner))
        if deadlines:
            self._registry(RegistryInput.RESUME, DeadlineArg(owner, self.now))
        self.dispatch_reserved()

    def _registry(self, event: RegistryInput, arg: DeadlineArg) -> None:
        registry, effects = self.c.deadlines.step(self.state.deadlines, event, arg)
        self.state = replace(self.state, deadlines=registry)
        for produced in _flatten(effects):
            if isinstance(produced, DeadlineExpired):
                self.expire_group(produced.group)
            else:
                self.emit(produced)

    # ------------------------------------------------------------------ inputs

    def handle(self, event: ControllerInput) -> None:
        stopped = self.state.phase is CheckpointState.STOPPED or restore_failed(self.state)
        if stopped and not isinstance(event, Discovered):
            self.log("ignored_while_stopped", input=type(event).__name__)
            return
        handler = _HANDLERS.get(type(event))
        if handler is None:
            raise TypeError(f"the coordinator has no input {type(event).__name__}")
        handler(self, event)
        self.m9.after_input()

    def on_timer(self, event: TimerDue) -> None:
        group = group_of_timer(event.name)
        if group is not None:
            self._registry(RegistryInput.TIMER_DUE, DeadlineArg(group, self.now))
            return
        if self.m9.on_timer(event.name):
            return
        attempt = self.state.attempt
        phase = self.state.phase
        if attempt is None:
            self.log("stale_timer", timer=event.name)
        elif event.name == retry_timer(attempt.op_id):
            self.fire(CheckpointInput.RETRY_DUE)
        elif phase is CheckpointState.PREPARING and event.name == prepare_deadline_timer(
            attempt.op_id
        ):
            # S10: ready by the deadline, or the attempt fails as not_ready.
            self.fail(Cause.NOT_READY_UNTIL_DEADLINE if attempt.not_ready else Cause.TIMEOUT)
        elif phase is CheckpointState.PREPARING and event.name == prepare_retry_timer(
            attempt.op_id
        ):
            self.set_attempt(replace(attempt, not_ready=frozenset()))
            for name in sorted(attempt.not_ready):
                self.emit(Call(name, Op.PREPARE, attempt.op_id, attempt.prepare_deadline_at))
        else:
            self.log("stale_timer", timer=event.name)

    def on_trigger(self, event: PeriodElapsed | TrainerBoundary | None = None) -> None:
        phase = self.state.phase
        if phase is CheckpointState.IDLE and restore_active(self.state):
            # M9 runs at start: no snapshot of a state that is being restored.
            self.log("trigger_during_restore")
        elif phase is CheckpointState.IDLE:
            attempt = self.mint()
            skip = self.skip_reason()
            if isinstance(event, TrainerBoundary) and skip is None:
                # Taken at the trainer anchor: `restore_mode: trainer_checkpoint` wants it.
                self.state = replace(self.state, anchor_checkpoint=attempt.op_id)
            self.fire(CheckpointInput.TRIGGER, Trigger(attempt, skip))
        elif phase in (CheckpointState.ABORT_PENDING, CheckpointState.RELEASE_PENDING):
            self.fire(CheckpointInput.TRIGGER, Trigger(self.attempt))
        else:
            self.log("trigger_coalesced", checkpoint_id=str(self.attempt.op_id))
            self.fire(CheckpointInput.TRIGGER, Trigger(self.attempt))

    def skip_reason(self) -> Classification | None:
        if self.state.fleet is None:
            return classify(Cause.NOT_DISCOVERED)
        if self.state.anchor_step is None:
            return classify(Cause.NO_TRAINER_ANCHOR)
        if self.state.optimizer_busy:
            return classify(Cause.OPTIMIZER_COMMIT_IN_PROGRESS)
        in_flight = any(a.state is AttemptState.DISPATCHED for a in self.state.ledger.attempts)
        if not self.state.mutated and not in_flight:
            return classify(Cause.NOTHING_MUTATED)
        return None

    def on_trainer_boundary(self, event: TrainerBoundary) -> None:
        changed = event.step != self.state.trainer_step
        self.state = replace(
            self.state, trainer_step=event.step, mutated=self.state.mutated or changed
        )
        if event.step % self.config.save_period == 0:
            self.state = replace(self.state, anchor_step=event.step)
            self.on_trigger(event)

    def on_optimizer_begin(self, _event: OptimizerStepBegin) -> None:
        self.state = replace(self.state, optimizer_busy=True)

    def on_optimizer_end(self, event: OptimizerStepEnd) -> None:
        self.state = replace(
            self.state, optimizer_busy=False, trainer_step=event.step, mutated=True
        )

    def on_train_switch(self, event: TrainSwitchBegin | TrainSwitchEnd) -> None:
        if isinstance(event, TrainSwitchBegin):
            self.hold(_TRAIN_SWITCH, deadlines=True)
        else:
            self.release(_TRAIN_SWITCH, deadlines=True)

    def on_weight_sync(self, event: WeightSyncBegin | WeightSyncEnd) -> None:
        if isinstance(event, WeightSyncBegin):
            self.hold(_WEIGHT_SYNC, deadlines=False)
        else:
            self.release(_WEIGHT_SYNC, deadlines=False)

    def on_discovered(self, event: Discovered) -> None:
        if self.state.phase is not CheckpointState.IDLE:
            self.log("discovery_ignored", level="warning", phase=label(self.state.phase))
            return
        topology = validate_discovery(event.capabilities)  # S13, S14: refused here
        depends = None if event.depends_on is None else dict(event.depends_on)
        recovery = self.config.rollout_recovery
        plan = lower_levels(
            recovery.target_level, topology.environments(depends), recovery.overrides
        )
        for warning in plan.warnings:
            self.log(
                "recovery_level_lowered",
                level="warning",
                environment=warning.environment,
                reason=warning.reason,
                message=warning.message(),
            )
        members = tuple(Member(p.participant, p.role, p.incarnation) for p in topology.fenced())
        scored = frozenset(e.name for e in topology.environments(depends) if e.group_scored)
        fleet = Fleet(members, topology.fingerprint, plan.levels, scored)
        self.state = replace(self.state, fleet=fleet)

    def on_recovered(self, event: Recovered) -> None:
        self.state = replace(
            self.state,
            anchor_step=event.anchor_step,
            trainer_step=event.anchor_step or 0,
            ledger=self.state.ledger.controller_restarted(),
        )
        # M9 starts here: selection waits until the in-flight id (if any) is finished.
        self.m9.begin(event.intent)
        if event.intent is None:
            return
        # §6: finish the id the last run left, with the same id, on every participant.
        attempt = replace(self.mint(), op_id=event.intent, attempted=self._fleet_names())
        self.state = replace(self.state, seq=self.state.seq - 1)  # nothing new was minted
        self.fire(CheckpointInput.RECOVERED, attempt)

    # ------------------------------------------------------------------ store outcomes

    def on_local_done(self, event: LocalDone) -> None:
        attempt = self.state.attempt
        if attempt is None or attempt.op_id != event.checkpoint_id:
            self.log("stale_store_reply", op=event.op.value, checkpoint_id=str(event.checkpoint_id))
            return
        expected = _LOCAL_DONE.get((self.state.phase, event.op))
        if expected is None:
            self.log("store_done", op=event.op.value, checkpoint_id=str(event.checkpoint_id))
            return
        self.fire(expected)

    def on_local_failed(self, event: LocalFailed) -> None:
        attempt = self.state.attempt
        phase = self.state.phase
        if attempt is None or attempt.op_id != event.checkpoint_id:
            self.log("stale_store_reply", op=event.op.value, checkpoint_id=str(event.checkpoint_id))
        elif phase is CheckpointState.PUBLISHING and event.op is LocalOp.PUBLISH:
            # Ambiguous: the rename may or may not have happened.
            self.fire(CheckpointInput.PUBLISH_FAILED)
        elif (phase, event.op) in _LOCAL_DONE:
            self.fail(event.cause)
        else:
            # The intent update at publish: a restart inspects the published path anyway.
            self.log("store_failed", level="warning", op=event.op.value, cause=event.cause.value)

    def on_inspected(self, event: PublishInspected) -> None:
        attempt = self.state.attempt
        if (
            attempt is None
            or attempt.op_id != event.checkpoint_id
            or self.state.phase is not CheckpointState.PUBLISHING
        ):
            self.log("stale_inspection", checkpoint_id=str(event.checkpoint_id))
            return
        if self.m9.finishing_intent(event.checkpoint_id):
            # At restart M9 decides (decide_intent) and its row hands the verdict to M1.
            self.m9.on_inspected(event.verdict)
            return
        self.fire(_VERDICTS[event.verdict])

    # ------------------------------------------------------------------ participant replies

    def on_reply(self, event: Reply) -> None:
        result = event.result
        incarnation = getattr(result, "incarnation", None)
        if incarnation is not None and self.restarted(event.participant, incarnation):
            return
        if event.op is Op.ACK:
            self.on_ack_reply(event.participant, event.op_id, result)
            return
        if event.op is Op.RETIRE:
            self.on_retire_reply(event.participant, event, result)
            return
        if self.m9.owns(event.op_id):
            self.m9.on_result(event.participant, event.op, event.op_id, result, None)
            return
        attempt = self.state.attempt
        key = (event.participant, event.op_id)
        if attempt is None or attempt.phase is None or key not in attempt.waiting:
            self.log("stale_reply", participant=event.participant, op=event.op.value)
            return
        if PHASES[attempt.phase][0] is not event.op:
            self.log("stale_reply", participant=event.participant, op=event.op.value)
            return
        if isinstance(result, ErrorReply):
            cause = cause_of_refusal(result.code)
            if cause is Cause.CHECKPOINT_CONFLICT and result.active_id is not None:
                # S5: abort the id the participant is fenced to before anything else.
                conflict = (event.participant, result.active_id)
                self.set_attempt(replace(attempt, conflicts=attempt.conflicts | {conflict}))
            self.fail(cause)
            return
        if getattr(result, "op_id", None) != event.op_id:
            self.fail(Cause.WRONG_ID)
            return
        if isinstance(result, PrepareReply):
            if result.status == "not_ready":
                # S10: ask again later, until the prepare deadline.
                self.set_attempt(
                    replace(attempt, not_ready=attempt.not_ready | {event.participant})
                )
                self.emit(
                    ArmTimer(
                        prepare_retry_timer(attempt.op_id),
                        self.now + self.config.prepare_retry_interval_s,
                    )
                )
                return
            attempt = replace(
                attempt,
                parked=attempt.parked + result.parked,
                frozen=attempt.frozen + result.frozen,
            )
        elif isinstance(result, CommitReply):
            if result.status != "committed":
                self.fail(Cause.COMMIT_FAILED)
                return
            attempt = replace(
                attempt,
                digests=tuple(sorted({*attempt.digests, (event.participant, result.digest)})),
            )
            self.emit(
                WriteStaging(attempt.op_id, event.participant, result.digest, result.artifact)
            )
        elif not isinstance(result, ResumeReply):
            self.fail(Cause.MALFORMED_REPLY)
            return
        self.set_attempt(
            replace(attempt, waiting=attempt.waiting - {key}, done=attempt.done | {key})
        )
        if not self.attempt.waiting:
            self.set_attempt(replace(self.attempt, role=self.attempt.role + 1))
            self.call_role()

    def on_call_failed(self, event: CallFailed) -> None:
        if event.op is Op.ACK:
            self.on_ack_failed(event)
            return
        if self.m9.owns(event.op_id):
            self.m9.on_result(event.participant, event.op, event.op_id, None, event.cause)
            return
        attempt = self.state.attempt
        key = (event.participant, event.op_id)
        if (
            attempt is None
            or attempt.phase is None
            or key not in attempt.waiting
            or PHASES[attempt.phase][0] is not event.op
        ):
            self.log("stale_call_failure", participant=event.participant, op=event.op.value)
            return
        self.fail(event.cause)

    def restarted(self, participant: str, incarnation: str) -> bool:
        """Note `participant`'s incarnation; True if the reply must not be used (S19)."""
        fleet = self.state.fleet
        if fleet is None:
            return False
        known = fleet.incarnation(participant)
        if known is None or known == incarnation:
            return False
        self.state = replace(self.state, fleet=fleet.with_incarnation(participant, incarnation))
        self.log("participant_restarted", level="warning", participant=participant)
        if fleet.role_of(participant) == "agent":
            # Its running executions died with the old process: retry them at the live level.
            for group in self.state.ledger.unfinished_groups():
                if group.environment == participant:
                    self.expire_group(group.group_id, retire=False)
        if self.state.phase in _TOUCHED:
            self.fail(Cause.PARTICIPANT_RESTARTED)
            return True
        return False

    # ------------------------------------------------------------------ phases (named work)

    def start_phase(self, phase: str) -> None:
        attempt = self.attempt
        keep_done = attempt.phase == phase  # a retried abort/release skips who answered
        self.set_attempt(
            replace(
                attempt,
                phase=phase,
                role=0,
                waiting=frozenset(),
                not_ready=frozenset(),
                done=attempt.done if keep_done else frozenset(),
            )
        )
        self.call_role()

    def call_role(self) -> None:
        """Call every participant of the next role that has someone to call."""
        attempt = self.attempt
        assert attempt.phase is not None
        op, slots = PHASES[attempt.phase]
        role = attempt.role
        while role < len(slots):
            calls = sorted(self._targets(attempt, *slots[role]) - attempt.done)
            if calls:
                deadline = self._deadline(attempt.phase)
                names = frozenset(name for name, _ in calls)
                attempted = attempt.attempted | names if op is Op.PREPARE else attempt.attempted
                # S6: marked attempted in the same step that sends the call.
                self.set_attempt(
                    replace(
                        attempt,
                        role=role,
                        waiting=frozenset(calls),
                        attempted=attempted,
                        deadline_at=max(attempt.deadline_at, deadline),
                    )
                )
                self.emit(*(Call(name, op, op_id, deadline) for name, op_id in calls))
                return
            role += 1
        self.set_attempt(replace(attempt, role=role))
        self.fire(CheckpointInput.ROLES_DONE)

    def _targets(self, attempt: Attempt, which: str, role: str) -> frozenset[tuple[str, OpId]]:
        fleet = self.state.fleet
        if which == "conflict":
            return frozenset(
                (name, other)
                for name, other in attempt.conflicts
                if fleet is None or fleet.role_of(name) == role
            )
        if fleet is None:
            return frozenset()
        names = attempt.attempted if attempt.phase == "abort" else fleet.names
        return frozenset(
            (m.name, attempt.op_id) for m in fleet.members if m.role == role and m.name in names
        )

    def _deadline(self, phase: str) -> float:
        control = self.now + self.config.control_timeout_s
        if phase == "prepare":
            return self.attempt.prepare_deadline_at
        if phase == "abort":
            return max(self.attempt.deadline_at, control)
        return control

    def _fleet_names(self) -> frozenset[str]:
        return frozenset() if self.state.fleet is None else self.state.fleet.names

    # ------------------------------------------------------------------ ACKs

    def send_acks(self, flush: OpId | None = None) -> frozenset[str]:
        """Send the whole ACK outbox, one batch per agent; the agents called.

        `flush` is the attempt whose strict flush (or re-flush inside the cut) this is: its
        calls carry that id, so only their own replies and failures settle the flush; a
        background drain (`flush=None`) is answered under None and never does (S8)."""
        by_agent: dict[str, list[OwedAck]] = {}
        for owed in self.state.ledger.pending_acks():
            agent = self._agent_of(owed.rollout_id)
            if agent is not None:
                by_agent.setdefault(agent, []).append(owed)
        for agent, owed in self.state.unowned_acks:
            by_agent.setdefault(agent, []).append(owed)
        deadline = self.now + self.config.control_timeout_s
        for agent in sorted(by_agent):
            self.emit(Call(agent, Op.ACK, flush, deadline, tuple(by_agent[agent])))
        return frozenset(by_agent)

    def on_ack_reply(self, participant: str, op_id: OpId | None, result: Any) -> None:
        if isinstance(result, AckReply):
            released = (*result.acknowledged, *result.unknown)
            self.state = replace(self.state, ledger=self.state.ledger.ack_flushed(released))
            if self.state.unowned_acks:
                gone = {(r.rollout_id, r.attempt, r.receipt) for r in released}
                kept = tuple(
                    (agent, owed)
                    for agent, owed in self.state.unowned_acks
                    if agent != participant
                    or (owed.rollout_id, owed.attempt, owed.receipt) not in gone
                )
                self.state = replace(self.state, unowned_acks=kept)
        self._ack_settled(participant, op_id, ok=isinstance(result, AckReply))

    def on_ack_failed(self, event: CallFailed) -> None:
        self.log(
            "ack_failed", level="warning", participant=event.participant, cause=event.cause.value
        )
        self._ack_settled(event.participant, event.op_id, ok=False, cause=event.cause)

    def _ack_settled(
        self,
        agent: str,
        op_id: OpId | None,
        *,
        ok: bool,
        cause: Cause = Cause.PARTICIPANT_ERROR,
    ) -> None:
        attempt = self.state.attempt
        if attempt is None or op_id != attempt.op_id or agent not in attempt.acking:
            # A background drain's answer (or a stale flush's): it never settles the flush
            # in progress; the strict flush of the next attempt catches up (S8).
            return
        self.set_attempt(replace(attempt, acking=attempt.acking - {agent}))
        phase = self.state.phase
        if phase is CheckpointState.FLUSHING_ACKS:
            if not ok:
                self.fail(cause)  # S8: strict, the attempt fails now, not at the deadline
            elif not self.attempt.acking:
                self.fire(CheckpointInput.ACKS_FLUSHED)
        elif phase is CheckpointState.CAPTURING:
            if not ok:
                self.fail(Cause.ACKS_PENDING)
            elif not self.attempt.acking:
                self.capture()

    def capture(self) -> None:
        attempt = self.attempt
        if self.state.trainer_step != attempt.trainer_step or self.state.optimizer_busy:
            self.fail(Cause.TRAINER_STATE_CHANGED)  # S9: abort the same id
            return
        if self.state.ledger.pending_acks():
            if attempt.reflushed:
                self.fail(Cause.ACKS_PENDING)
                return
            # S7: an ACK accepted but not yet recorded; flush again, inside the cut.
            self.set_attempt(replace(attempt, reflushed=True))
            self.set_attempt(replace(self.attempt, acking=self.send_acks(attempt.op_id)))
            return
        self.emit(CaptureCut(attempt.op_id, attempt.trainer_step, self.state.ledger))

    # ------------------------------------------------------------------ rollouts

    def _agent_of(self, rollout_id: str) -> str | None:
        """The agent that runs `rollout_id`'s group (None: the ledger has no such group)."""
        try:
            return self.state.ledger.group(rollout_id.rpartition("/")[0]).environment
        except UnknownGroup:
            return None

    def dispatch_reserved(self) -> None:
        """While admission is open, dispatch every reserved attempt (oldest group first,
        so unfinished groups go out before new work)."""
        if self.state.gate.state is not GateState.OPEN:
            return
        ledger = self.state.ledger
        for record in ledger.attempts:
            if record.state is not AttemptState.RESERVED:
                continue
            group = ledger.group(record.group_id)
            if group.generation != record.generation or group.state is not GroupState.GENERATING:
                continue
            ledger = ledger.dispatch(record.key)
            self.emit(
                Dispatch(
                    group.environment,
                    record.group_id,
                    record.rollout_id,
                    record.attempt,
                    record.resume_from_turn,
                )
            )
            self.state = replace(self.state, mutated=True)
        self.state = replace(self.state, ledger=ledger)

    def on_group_opened(self, event: GroupOpened) -> None:
        if restore_active(self.state):
            self.m9.queue_group(event)
            return
        try:
            ledger, _ = self.state.ledger.open_group(
                event.group_id, event.size, prompt=event.prompt, environment=event.environment
            )
        except (ValueError, TransitionNotAllowed, LocalProtocolError) as error:
            self.log("group_refused", level="warning", group=event.group_id, error=str(error))
            return
        self.state = replace(self.state, ledger=ledger, mutated=True)
        self._registry(
            RegistryInput.START,
            DeadlineArg(event.group_id, self.now, self.config.rollout_timeout_s),
        )
        self.dispatch_reserved()

    def on_completed(self, event: RolloutCompleted) -> None:
        key: AttemptKey = (event.rollout_id, event.attempt)
        if not self.state.ledger.owns(*key):
            self.drop_unowned(event)
            return
        try:
            ledger = self.state.ledger.seal(key, event.receipt)
        except (ValueError, TransitionNotAllowed, LocalProtocolError) as error:
            self.log(
                "completion_refused", level="warning", rollout=event.rollout_id, error=str(error)
            )
            return
        self.state = replace(self.state, ledger=ledger, mutated=True)
        group_id = event.rollout_id.rpartition("/")[0]
        if ledger.group(group_id).state is GroupState.READY_TO_FINALIZE:
            self._registry(RegistryInput.STOP, DeadlineArg(group_id, self.now))
        # The background ACK drain; the strict flush of the next attempt backs it up (S8).
        self.send_acks()

    def drop_unowned(self, event: RolloutCompleted) -> None:
        """A completion the ledger does not own (I1: its interval was rolled back by a
        restore, its prompt is in flight again or back in the dataloader): never trained,
        but ACKed, or its agent holds it unACKed and is never ready for a prepare again.
        It joins the ACK outbox until the agent accepts it (strict flushes retry it)."""
        agent = event.agent or self._agent_of(event.rollout_id)
        if agent is None:
            self.log(
                "unowned_completion_unroutable",
                level="warning",
                rollout=event.rollout_id,
                attempt=event.attempt,
            )
            return
        owed = (agent, OwedAck(event.rollout_id, event.attempt, event.receipt))
        if owed not in self.state.unowned_acks:
            self.state = replace(
                self.state,
                unowned_acks=(*self.state.unowned_acks, owed),
                unowned_dropped=self.state.unowned_dropped + 1,
            )
            self.log(
                "unowned_completion_dropped",
                participant=agent,
                rollout=event.rollout_id,
                attempt=event.attempt,
            )
            self.emit(
                Metric("rollouts.unowned_completions_dropped", float(self.state.unowned_dropped))
            )
        self.send_acks()

    def on_rollout_failed(self, event: RolloutFailed) -> None:
        key: AttemptKey = (event.rollout_id, event.attempt)
        try:
            ledger = self.state.ledger.fail(key)
        except (ValueError, TransitionNotAllowed, LocalProtocolError) as error:
            self.log("failure_ignored", rollout=event.rollout_id, error=str(error))
            return
        group_id = event.rollout_id.rpartition("/")[0]
        refused = self.state.refused_groups
        self.state = replace(
            self.state, ledger=ledger, mutated=True, refused_groups=refused | {group_id}
        )
        if group_id in refused:
            # Failed again right after its immediate retry: its deadline retries it (M7).
            self.log("redispatch_deferred", group=group_id, rollout=event.rollout_id)
            return
        self.retry_group(group_id)

    def on_group_trained(self, event: GroupTrained) -> None:
        try:
            ledger = self.state.ledger.begin_finalize(event.group_id).finalized(event.group_id)
        except (ValueError, TransitionNotAllowed, LocalProtocolError) as error:
            self.log("trained_ignored", group=event.group_id, error=str(error))
            return
        self.state = replace(self.state, ledger=ledger.compact(), mutated=True)

    def expire_group(self, group_id: str, *, retire: bool = True) -> None:
        """M7 expiry (or the agent restarted): fail the group's unfinished attempts, retire
        them at their agent (a late finish is then ACKed and dropped), retry the group."""
        try:
            ledger, keys = self.state.ledger.fail_group(group_id)
        except (ValueError, TransitionNotAllowed, LocalProtocolError) as error:
            self.log("expiry_ignored", group=group_id, error=str(error))
            return
        self.state = replace(
            self.state,
            ledger=ledger,
            mutated=True,
            refused_groups=self.state.refused_groups - {group_id},
        )
        agent = ledger.group(group_id).environment
        deadline = self.now + self.config.control_timeout_s
        if retire:
            self.emit(*(Call(agent, Op.RETIRE, None, deadline, key) for key in keys))
        self._registry(RegistryInput.STOP, DeadlineArg(group_id, self.now))
        self.retry_group(group_id)

    def retry_group(self, group_id: str) -> None:
        """Retry a group's failed siblings at its environment's live level (M8, S11)."""
        ledger = self.state.ledger
        group = ledger.group(group_id)
        target = self.config.rollout_recovery.target_level
        level = (
            target
            if self.state.fleet is None
            else self.state.fleet.live_level(group.environment, target)
        )
        if level is RecoveryLevel.PROMPT_GROUP:
            ledger, _ = ledger.rerun_group(group_id)
        else:
            for record in ledger.siblings(group_id):
                if record.state in (AttemptState.FAILED, AttemptState.ABANDONED):
                    ledger, _ = ledger.retry_sibling(group_id, record.sibling)
        self.state = replace(self.state, ledger=ledger)
        self.emit(Redispatch(group_id, level.value))
        self._registry(
            RegistryInput.START, DeadlineArg(group_id, self.now, self.config.rollout_timeout_s)
        )
        self.dispatch_reserved()

    def on_retire_reply(self, participant: str, event: Reply, result: Any) -> None:
        if isinstance(result, RetireReply) and result.receipt is not None:
            # S17: a completed execution is only released by an ACK: seal it late, ACK it.
            receipt = result.receipt
            try:
                ledger = self.state.ledger.seal(
                    (receipt.rollout_id, receipt.attempt), receipt.receipt
                )
            except (ValueError, TransitionNotAllowed, LocalProtocolError) as error:
                self.log("late_completion_refused", participant=participant, error=str(error))
                return
            self.state = replace(self.state, ledger=ledger)
            self.send_acks()

    # ------------------------------------------------------------------ outcome and metrics

    def outcome(self, arg: Any) -> None:
        attempt = self.attempt
        data = self.state.checkpoint.data
        if isinstance(arg, Classification):
            cause: Classification | None = arg
        elif isinstance(arg, Trigger):
            cause = arg.skip
        else:
            cause = attempt.cause
        if attempt.published and self.state.phase is CheckpointState.IDLE:
            result, reason, retryable = "completed", "completed", False
        elif cause is None:
            result, reason, retryable = "failed", "invariant_error", False
        else:
            skipped = cause.disposition is Disposition.SKIPPED
            result = "skipped" if skipped else "failed"
            reason, retryable = cause.reason, cause.retryable
        self.emit(
            Outcome(attempt.op_id, result, reason, retryable, data.failures, data.skips)  # type: ignore[arg-type]
        )
        if result == "skipped" and data.skips >= self.config.max_consecutive_skips:
            self.log("consecutive_skips", level="warning", skips=data.skips, reason=reason)
        self.metrics(attempt)

    def metrics(self, attempt: Attempt) -> None:
        seconds = _add_seconds(
            attempt.phase_seconds, label(self.state.phase), self.now - attempt.phase_started_at
        )
        seconds = tuple((p, s) for p, s in seconds if p not in ("idle", "stopped"))
        total = sum(s for _, s in seconds)
        waiting = sum(s for p, s in seconds if p in _PARTICIPANT_PHASES)
        for phase, spent in seconds:
            self.emit(Metric("checkpoint.phase_seconds", spent, (("phase", phase),)))
        self.emit(
            Metric("checkpoint.total_seconds", total),
            Metric("checkpoint.participant_seconds", waiting),
            Metric("checkpoint.controller_seconds", total - waiting),
            Metric("checkpoint.rollouts_parked", float(attempt.parked)),
            Metric("checkpoint.rollouts_frozen", float(attempt.frozen)),
        )


# ============================================================================ named work
#
# One function per effect name of M1's rows. `arg` is the M1 input's argument.


def _w_write_intent(run: _Run, _arg: Any) -> None:
    run.emit(WriteIntent(run.attempt.op_id, "preparing"))


def _w_hold(run: _Run, _arg: Any) -> None:
    run.hold(CHECKPOINT_HOLDER, deadlines=True)


def _w_flush_acks(run: _Run, _arg: Any) -> None:
    # S8: strict, every attempt, even if a background drain died.
    agents = run.send_acks(run.attempt.op_id)
    run.set_attempt(replace(run.attempt, acking=agents))
    if not agents:
        run.fire(CheckpointInput.ACKS_FLUSHED)


def _w_arm_prepare_deadline(run: _Run, _arg: Any) -> None:
    attempt = run.attempt
    # Prepare calls share one deadline, counted from when admission closed.
    at = attempt.started_at + run.config.prepare_timeout_s
    run.set_attempt(replace(attempt, prepare_deadline_at=at))
    run.emit(ArmTimer(prepare_deadline_timer(attempt.op_id), at))


def _w_cancel_prepare_timers(run: _Run, _arg: Any) -> None:
    attempt = run.attempt
    if attempt.phase == "prepare":
        run.emit(
            CancelTimer(prepare_deadline_timer(attempt.op_id)),
            CancelTimer(prepare_retry_timer(attempt.op_id)),
        )


def _w_phase(phase: str) -> Callable[[_Run, Any], None]:
    def work(run: _Run, _arg: Any) -> None:
        run.start_phase(phase)

    return work


def _w_capture_cut(run: _Run, _arg: Any) -> None:
    run.capture()


def _w_validate(run: _Run, _arg: Any) -> None:
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


def _w_publish(run: _Run, _arg: Any) -> None:
    run.emit(Publish(run.attempt.op_id))


def _w_update_intent(run: _Run, _arg: Any) -> None:
    run.state = replace(run.state, mutated=False)
    run.emit(WriteIntent(run.attempt.op_id, "published"))


def _w_inspect(run: _Run, _arg: Any) -> None:
    run.emit(InspectPublished(run.attempt.op_id))


def _w_quarantine(run: _Run, _arg: Any) -> None:
    run.emit(Quarantine(run.attempt.op_id))


def _w_clear_intent(run: _Run, _arg: Any) -> None:
    run._intent_cleared = True
    run.emit(ClearIntent(run.attempt.op_id))


def _w_discard_staging(run: _Run, _arg: Any) -> None:
    run.emit(DiscardStaging(run.attempt.op_id))


def _w_drop_holds(run: _Run, _arg: Any) -> None:
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
    run.release(CHECKPOINT_HOLDER, deadlines=True)


def _w_outcome(run: _Run, arg: Any) -> None:
    run.outcome(arg)


def _w_arm_retry(run: _Run, _arg: Any) -> None:
    attempt = run.attempt
    run.emit(ArmTimer(retry_timer(attempt.op_id), run.now + run.config.snapshot_attempt_interval_s))


def _w_cancel_retry(run: _Run, _arg: Any) -> None:
    run.emit(CancelTimer(retry_timer(run.attempt.op_id)))


def _w_stop(run: _Run, arg: Any) -> None:
    cause = arg if isinstance(arg, Classification) else run.attempt.cause
    reason = "invariant_error" if cause is None else cause.reason
    if isinstance(cause, Classification) and cause.disposition is Disposition.RETRYABLE:
        reason = "max_consecutive_failures"
    kept = None if run._intent_cleared else run.attempt.op_id
    run.emit(Stopped(reason, kept))


_WORK: dict[str, Callable[[_Run, Any], None]] = {
    "write_intent": _w_write_intent,
    "hold": _w_hold,
    "flush_acks": _w_flush_acks,
    "arm_prepare_deadline": _w_arm_prepare_deadline,
    "call_prepare": _w_phase("prepare"),
    "cancel_prepare_timers": _w_cancel_prepare_timers,
    "call_commit": _w_phase("commit"),
    "capture_cut": _w_capture_cut,
    "validate": _w_validate,
    "publish": _w_publish,
    "update_intent": _w_update_intent,
    "call_release": _w_phase("release"),
    "call_abort": _w_phase("abort"),
    "inspect_published": _w_inspect,
    "quarantine": _w_quarantine,
    "clear_intent": _w_clear_intent,
    "discard_staging": _w_discard_staging,
    "drop_holds": _w_drop_holds,
    "outcome": _w_outcome,
    "arm_retry": _w_arm_retry,
    "cancel_retry": _w_cancel_retry,
    "stop": _w_stop,
}
"""The work each M1 effect name stands for (every name of CHECKPOINT's rows is here)."""


# ============================================================================ tables


_S = CheckpointState
_TOUCHED = (_S.PREPARING, _S.COMMITTING, _S.CAPTURING, _S.VALIDATING)

# Which store completion moves M1 on, in which state.
_LOCAL_DONE: dict[tuple[CheckpointState, LocalOp], CheckpointInput] = {
    (_S.CLOSING_ADMISSION, LocalOp.INTENT): CheckpointInput.INTENT_WRITTEN,
    (_S.CAPTURING, LocalOp.CUT): CheckpointInput.CUT_CAPTURED,
    (_S.VALIDATING, LocalOp.VALIDATE): CheckpointInput.VALIDATED,
    (_S.PUBLISHING, LocalOp.PUBLISH): CheckpointInput.PUBLISHED,
}

_VERDICTS = {
    "verified": CheckpointInput.INSPECTED_VERIFIED,
    "unverifiable": CheckpointInput.INSPECTED_UNVERIFIABLE,
    "absent": CheckpointInput.INSPECTED_ABSENT,
}

_HANDLERS: dict[type, Callable[[_Run, Any], None]] = {
    TimerDue: _Run.on_timer,
    PeriodElapsed: _Run.on_trigger,
    TrainerBoundary: _Run.on_trainer_boundary,
    OptimizerStepBegin: _Run.on_optimizer_begin,
    OptimizerStepEnd: _Run.on_optimizer_end,
    TrainSwitchBegin: _Run.on_train_switch,
    TrainSwitchEnd: _Run.on_train_switch,
    WeightSyncBegin: _Run.on_weight_sync,
    WeightSyncEnd: _Run.on_weight_sync,
    Reply: _Run.on_reply,
    CallFailed: _Run.on_call_failed,
    LocalDone: _Run.on_local_done,
    LocalFailed: _Run.on_local_failed,
    PublishInspected: _Run.on_inspected,
    GroupOpened: _Run.on_group_opened,
    RolloutCompleted: _Run.on_completed,
    RolloutFailed: _Run.on_rollout_failed,
    GroupTrained: _Run.on_group_trained,
    Discovered: _Run.on_discovered,
    Recovered: _Run.on_recovered,
    SnapshotsListed: lambda run, event: run.m9.on_listed(event),
    SnapshotLoaded: lambda run, event: run.m9.on_loaded(event),
    SnapshotLoadFailed: lambda run, event: run.m9.on_load_failed(event),
}


def _add_seconds(
    seconds: tuple[tuple[str, float], ...], phase: str, spent: float
) -> tuple[tuple[str, float], ...]:
    merged = dict(seconds)
    merged[phase] = merged.get(phase, 0.0) + spent
    return tuple(sorted(merged.items()))


def _flatten(effects: Iterable[Any]) -> Iterable[Any]:
    # M7's effects are tuples (a resume re-arms one timer per group).
    for effect in effects:
        if isinstance(effect, tuple):
            yield from effect
        else:
            yield effect
