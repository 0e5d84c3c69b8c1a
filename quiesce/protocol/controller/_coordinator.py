"""The pure coordinator: the controller's side of the protocol as one function.

    Coordinator(config).step(state, now, input) -> (state, effects)

Rules of this module (h11's, for a controller):
- everything the controller knows is in `ControllerState`, a frozen, hashable value: M1
  (`checkpoint`), M6 (`admission_gate`), M7 (`deadline_registry`), the M8 ledger, the
  discovered fleet, the id counter and the trainer's position. No dict, no list, no float
  but timestamps computed from `now`;
- `step` is pure: no I/O, no clock, no randomness. Time is `now`; every timing decision is
  an `ArmTimer` now and a `TimerDue` later;
- tables decide, named work acts. M1 is the spine: an input is translated into M1 inputs,
  each M1 row names the work it starts and `_checkpoint_work.CHECKPOINT_WORK` does exactly
  that work. Every call of a remote phase is a value of the `call` table, walked in §3
  order by the shared phase runner (`_phase_runner`), whose rows name the work of a reply,
  a failure and a retry. M9 (`restore`) runs at controller start the same way
  (`_restore_flow`): `Recovered` starts it (the in-flight id is still finished by M1's
  rows; M9 tells M1 which verdict the intent got); while it runs, admission is held by
  `Holder.RESTORE`, checkpoint triggers wait and new groups are queued;
- the decisions that are functions, not rows (classification, discovery, levels, capture,
  restore judging, the phase order) come from one `CoordinatorPolicy`;
- this module only composes: it routes each input to the part that owns it (the attempt,
  the restore, the ledger's `Rollouts`), and gives those parts the plumbing they share
  (`StepHost`). It does not know how a call is carried, how the store writes, or what a
  participant does with a call: effects go out, outcomes come back as inputs.

Public API:
- `Coordinator(config, *, checkpoint=CHECKPOINT, gate=ADMISSION_GATE,
  deadlines=DEADLINE_REGISTRY, restore=RESTORE, call=CALL, policy=CoordinatorPolicy())`:
  the tables and the policy are parameters, so a variant (a mutant: a derived table, a
  swapped function) runs through the same code; the object holds no state.
- `Coordinator.initial(epoch) -> ControllerState`: a controller at start (`epoch` from the
  persisted counter, one more than last run's).
- `Coordinator.step(state, now, input) -> (ControllerState, tuple[ControllerEffect, ...])`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from types import MappingProxyType
from typing import Any

from quiesce.fsm import Effect, Table, label
from quiesce.protocol._causes import Cause, Classification
from quiesce.protocol._config import QuiesceConfig
from quiesce.protocol._errors import LocalProtocolError
from quiesce.protocol._ids import OpId, OpKind
from quiesce.protocol._messages import ErrorReply, Role
from quiesce.protocol._timers import TimerKey, TimerKind
from quiesce.protocol.controller._background import BackgroundCalls
from quiesce.protocol.controller._checkpoint_work import (
    CHECKPOINT_WORK,
    AttemptCalls,
    add_seconds,
    capture,
    prepare_deadline_timer,
    retry_timer,
)
from quiesce.protocol.controller._effects import (
    CloseAdmission,
    ControllerEffect,
    LocalOp,
    Log,
    Op,
    OpenAdmission,
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
    UnknownInput,
    WeightSyncBegin,
    WeightSyncEnd,
)
from quiesce.protocol.controller._ledger import AttemptKey
from quiesce.protocol.controller._phase_runner import PhaseRunner, prepare_retry_timer
from quiesce.protocol.controller._policy import CoordinatorPolicy
from quiesce.protocol.controller._restore_flow import RestoreFlow
from quiesce.protocol.controller._rollouts import Rollouts
from quiesce.protocol.controller._run_to_completion import RunToCompletion
from quiesce.protocol.controller._state import (
    ControllerState,
    Fleet,
    Member,
    restore_active,
    restore_failed,
)
from quiesce.protocol.machines import (
    ADMISSION_GATE,
    CALL,
    CHECKPOINT,
    DEADLINE_REGISTRY,
    RESTORE,
    Attempt,
    AttemptState,
    CallInput,
    CallState,
    CheckpointData,
    CheckpointInput,
    CheckpointState,
    DeadlineArg,
    DeadlineExpired,
    GateInput,
    GateState,
    Holder,
    PublishedState,
    RegistryInput,
    RegistryState,
    Restart,
    RestoreInput,
    RestoreState,
    Trigger,
    stops_the_run,
)

__all__ = ["Coordinator"]


class Coordinator:
    """The controller's protocol logic; holds only its configuration, tables and policy.

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
        call: Table[CallState, CallInput] = CALL,
        policy: CoordinatorPolicy | None = None,
    ) -> None:
        self.config = config
        self.checkpoint = checkpoint
        self.gate = gate
        self.deadlines = deadlines
        self.restore = restore
        self.call = call
        self.policy = policy or CoordinatorPolicy()

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
        ...) with the state unchanged, and `UnknownInput` for a value that is not a
        `ControllerInput`; every input is accepted (a stale reply or a stale timer is logged
        and changes nothing).
        """
        run = _Run(self, state, now)
        run.handle(input)
        return run.state, tuple(run.effects)


# ============================================================================ one step


class _Run:
    """The scratch space of one `step` (a `StepHost`): local, thrown away afterwards."""

    def __init__(self, coordinator: Coordinator, state: ControllerState, now: float) -> None:
        self.c = coordinator
        self.config = coordinator.config
        self.state = state
        self.now = now
        self.effects: list[ControllerEffect] = []
        self.intent_cleared = False
        self._events = RunToCompletion[CheckpointInput](self._fire_one)
        # The attempt a row just finished (M1 data no longer holds it in idle).
        self._last: Attempt | None = state.attempt
        self.phases = PhaseRunner(self, AttemptCalls(self))
        self.rollouts = Rollouts(self)
        self.background = BackgroundCalls(self, self.rollouts.seal_late)
        self.m9 = RestoreFlow(self)

    # ------------------------------------------------------------------ plumbing

    @property
    def policy(self) -> CoordinatorPolicy:
        return self.c.policy

    @property
    def call_table(self) -> Table[CallState, CallInput]:
        return self.c.call

    @property
    def restore_table(self) -> Table[RestoreState, RestoreInput]:
        return self.c.restore

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
        self._events.fire(event, arg)

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
                    phase_seconds=add_seconds(self._last.phase_seconds, label(before.state), spent),
                )
            )
        for effect in named:
            if isinstance(effect, Effect):
                CHECKPOINT_WORK[effect.name](self, arg)
            else:  # a derived table may bind its own effect values
                self.emit(effect)

    def fail(self, cause: Cause, participant: str | None = None) -> None:
        classification = self.policy.classify(cause)
        if participant is not None and stops_the_run(self.state.checkpoint.data, classification):
            # §4: a stop names the participant of the last failure (maybe only once the
            # attempt's abort ended, so the attempt keeps it).
            self.set_attempt(replace(self.attempt, failed_by=participant))
        self.fire(CheckpointInput.FAILED, classification)

    def mint_id(self, kind: OpKind) -> OpId:
        """A fresh op id of `kind`; checkpoint and restore ids share one ordered counter."""
        op_id = OpId(self.state.epoch, self.state.seq + 1, self.state.trainer_step, kind)
        self.state = replace(self.state, seq=op_id.seq)
        return op_id

    def mint(self) -> Attempt:
        op_id = self.mint_id("ck")
        return Attempt(
            op_id=op_id,
            trainer_step=self.state.trainer_step,
            started_at=self.now,
            phase_started_at=self.now,
        )

    # ------------------------------------------------------------------ the parts

    def send_acks(self, flush: OpId | None = None) -> frozenset[str]:
        if flush is not None:
            return self.background.flush(flush)
        self.background.drain()
        return frozenset()

    def retire(self, agent: str, key: AttemptKey) -> None:
        self.background.retire(agent, key)

    def dispatch_reserved(self) -> None:
        self.rollouts.dispatch_reserved()

    def capture(self) -> None:
        capture(self)

    # ------------------------------------------------------------------ gate and registry

    def hold(self, owner: Holder, *, deadlines: bool) -> None:
        gate, effects = self.c.gate.step(self.state.gate, GateInput.HOLD, owner)
        self.state = replace(self.state, gate=gate)
        if effects:
            self.emit(CloseAdmission(owner))
        if deadlines:
            self._registry(RegistryInput.SUSPEND, DeadlineArg(owner, self.now))

    def release(self, owner: Holder, *, deadlines: bool) -> None:
        gate, effects = self.c.gate.step(self.state.gate, GateInput.RELEASE, owner)
        self.state = replace(self.state, gate=gate)
        if effects:
            self.emit(OpenAdmission(owner))
        if deadlines:
            self._registry(RegistryInput.RESUME, DeadlineArg(owner, self.now))
        self.dispatch_reserved()

    def start_deadline(self, group_id: str) -> None:
        self._registry(
            RegistryInput.START, DeadlineArg(group_id, self.now, self.config.rollout_timeout_s)
        )

    def stop_deadline(self, group_id: str) -> None:
        self._registry(RegistryInput.STOP, DeadlineArg(group_id, self.now))

    def _registry(self, event: RegistryInput, arg: DeadlineArg) -> None:
        registry, effects = self.c.deadlines.step(self.state.deadlines, event, arg)
        self.state = replace(self.state, deadlines=registry)
        for produced in _flatten(effects):
            if isinstance(produced, DeadlineExpired):
                self.rollouts.expire_group(produced.group)
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
            raise UnknownInput(event)
        handler(self, event)
        self.m9.after_input()

    def on_timer(self, event: TimerDue) -> None:
        timer = event.name
        kind = timer.kind
        if kind is TimerKind.DEADLINE:
            self._registry(RegistryInput.TIMER_DUE, DeadlineArg(timer.subject, self.now))
        elif kind is TimerKind.RESTORE_RETRY:
            self.m9.on_retry_timer(timer)
        elif kind is TimerKind.CALL_RETRY:
            self._phases_of(OpId.parse(timer.subject)).on_retry_due(timer)
        elif kind is TimerKind.BACKGROUND_RETRY:
            self.background.on_timer(timer)
        else:
            self._attempt_timer(timer)

    def _attempt_timer(self, timer: TimerKey) -> None:
        attempt = self.state.attempt
        preparing = self.state.phase is CheckpointState.PREPARING
        if attempt is None:
            self.log("stale_timer", timer=str(timer))
        elif timer == retry_timer(attempt.op_id):
            self.fire(CheckpointInput.RETRY_DUE)
        elif preparing and timer == prepare_deadline_timer(attempt.op_id):
            # S10: ready by the deadline, or the attempt fails as not_ready.
            self.fail(Cause.NOT_READY_UNTIL_DEADLINE if attempt.not_ready else Cause.TIMEOUT)
        elif preparing and timer == prepare_retry_timer(attempt.op_id):
            self.phases.ask_again()
        else:
            self.log("stale_timer", timer=str(timer))

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
        classify = self.policy.classify
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
            self.hold(Holder.TRAIN_SWITCH, deadlines=True)
        else:
            self.release(Holder.TRAIN_SWITCH, deadlines=True)

    def on_weight_sync(self, event: WeightSyncBegin | WeightSyncEnd) -> None:
        if isinstance(event, WeightSyncBegin):
            self.hold(Holder.WEIGHT_SYNC, deadlines=False)
        else:
            self.release(Holder.WEIGHT_SYNC, deadlines=False)

    def on_discovered(self, event: Discovered) -> None:
        if self.state.phase is not CheckpointState.IDLE:
            self.log("discovery_ignored", level="warning", phase=label(self.state.phase))
            return
        topology = self.policy.validate_discovery(event.capabilities)  # S13, S14: refused
        depends = None if event.depends_on is None else dict(event.depends_on)
        recovery = self.config.rollout_recovery
        plan = self.policy.lower_levels(
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
        fleet = self.state.fleet
        attempted = frozenset() if fleet is None else fleet.names
        attempt = replace(self.mint(), op_id=event.intent, attempted=attempted)
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

    # ------------------------------------------------------------------ participants

    def on_reply(self, event: Reply) -> None:
        result = event.result
        incarnation = getattr(result, "incarnation", None)
        if incarnation is not None and self.restarted(event.participant, incarnation):
            if event.op in _BACKGROUND_OPS:
                self.background.on_unused(event)
            return
        if event.op in _BACKGROUND_OPS:
            self.background.on_reply(event)
        else:
            self._phases_of(event.op_id).on_reply(event.participant, event.op, event.op_id, result)
        if not isinstance(result, ErrorReply):
            # Reachable again: its background calls that spent their retries go again.
            self.background.on_answered(event.participant)

    def on_call_failed(self, event: CallFailed) -> None:
        if event.op in _BACKGROUND_OPS:
            self.background.on_failed(event)
        else:
            self._phases_of(event.op_id).on_failure(
                event.participant, event.op, event.op_id, event.cause
            )

    def _phases_of(self, op_id: OpId | None) -> PhaseRunner:
        # A restore's calls carry its `rs-` id; every other call is the attempt's.
        return self.m9.phases if self.m9.owns(op_id) else self.phases

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
        if fleet.role_of(participant) is Role.AGENT:
            # Its running executions died with the old process: retry them at the live level.
            for group in self.state.ledger.unfinished_groups():
                if group.environment == participant:
                    self.rollouts.expire_group(group.group_id, retire=False)
        # M1 decides what the restart costs the attempt (S19): nothing if it never touched
        # the participant, a prepare again if its role is being prepared, else the attempt;
        # if it fails, the reply must not be used.
        attempt = self.state.attempt
        touched = attempt is not None and participant in attempt.attempted
        cause = self.policy.classify(Cause.PARTICIPANT_RESTARTED)
        in_turn = self.phases.calling(fleet.role_of(participant))
        before = self.state.phase
        self.fire(CheckpointInput.RESTARTED, Restart(participant, touched, cause, in_turn))
        return self.state.phase is not before

    # ------------------------------------------------------------------ rollouts

    def on_group_opened(self, event: GroupOpened) -> None:
        if restore_active(self.state):
            self.m9.queue_group(event)
        else:
            self.rollouts.on_group_opened(event)


# ============================================================================ tables


_S = CheckpointState

# Which store completion moves M1 on, in which state.
_LOCAL_DONE: Mapping[tuple[CheckpointState, LocalOp], CheckpointInput] = MappingProxyType(
    {
        (_S.CLOSING_ADMISSION, LocalOp.INTENT): CheckpointInput.INTENT_WRITTEN,
        (_S.CAPTURING, LocalOp.CUT): CheckpointInput.CUT_CAPTURED,
        (_S.VALIDATING, LocalOp.VALIDATE): CheckpointInput.VALIDATED,
        (_S.PUBLISHING, LocalOp.PUBLISH): CheckpointInput.PUBLISHED,
    }
)

# The ops of no remote phase (`_background`): ACK batches (background, or the strict flush)
# and retires.
_BACKGROUND_OPS = (Op.ACK, Op.RETIRE)

_VERDICTS: Mapping[PublishedState, CheckpointInput] = MappingProxyType(
    {
        PublishedState.VERIFIED: CheckpointInput.INSPECTED_VERIFIED,
        PublishedState.UNVERIFIABLE: CheckpointInput.INSPECTED_UNVERIFIABLE,
        PublishedState.ABSENT: CheckpointInput.INSPECTED_ABSENT,
    }
)

_HANDLERS: Mapping[type, Callable[[_Run, Any], None]] = MappingProxyType(
    {
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
        RolloutCompleted: lambda run, event: run.rollouts.on_completed(event),
        RolloutFailed: lambda run, event: run.rollouts.on_rollout_failed(event),
        GroupTrained: lambda run, event: run.rollouts.on_group_trained(event),
        Discovered: _Run.on_discovered,
        Recovered: _Run.on_recovered,
        SnapshotsListed: lambda run, event: run.m9.on_listed(event),
        SnapshotLoaded: lambda run, event: run.m9.on_loaded(event),
        SnapshotLoadFailed: lambda run, event: run.m9.on_load_failed(event),
    }
)
"""The part of a step each input goes to."""


def _flatten(effects: Iterable[Any]) -> Iterable[Any]:
    # M7's effects are tuples (a resume re-arms one timer per group).
    for effect in effects:
        if isinstance(effect, tuple):
            yield from effect
        else:
            yield effect
