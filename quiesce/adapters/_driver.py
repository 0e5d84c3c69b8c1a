"""The anyio driver: carries out the coordinator's effects and feeds their outcomes back.

What lives here: the loop around `Coordinator.step`. One task takes inputs from an inbox,
one at a time, steps the pure coordinator and executes every effect it returns against the
adapter interfaces -- `Participant` clients, the `SnapshotStore`, the `ControllerJournal`
(intent record, epoch), the trainer and data plane, and the clock's timers. What it does
not know: the protocol. It never decides whether to retry, abort, publish, restore or
redispatch; the coordinator (M1, M6-M9) does. The driver only reports what happened.

How effects are carried (and what answers them):
- `Call`: one task per call; the calls of one role are emitted together, so they run
  concurrently; each is bounded by `clock.fail_at(deadline_at)` -> `Reply` or
  `CallFailedError(cause)`. RESTORE calls carry the participant's artifact loaded from the
  snapshot, DISCARD calls the continuation's key;
- `WriteIntent` / `ClearIntent`: the `ControllerJournal` (atomic, fsync) -> `LocalDone`;
- `WriteStaging`: the participant's artifact into `staging/<id>/`;
- `CaptureCut`: the data plane's cut (queue, dataloader, ledger as JSON) into staging;
- `Validate`: every committed digest is staged as reported, then the manifest is written
  -> `LocalDone` or `LocalFailed(artifact_mismatch)`;
- `Publish`: fsync + atomic rename, then `keep_latest_k` pruning;
- `InspectPublished` -> `PublishInspected`; `Quarantine`, `DiscardStaging`: the store;
- `ListSnapshots` -> `SnapshotsListed` (trainer anchor, every snapshot and its condition);
  `LoadSnapshot` -> `SnapshotLoaded` (digests, ledger) or `SnapshotLoadFailed`;
  `RestoreCut`, `RewindToAnchor`: the data plane;
- `ArmTimer` / `CancelTimer`: one clock sleep per timer; re-arming or cancelling makes the
  older sleep stale -> `TimerDue`;
- `Dispatch`: `begin` on the agent; a refusal or a failed call -> `RolloutFailed`;
- `Metric`: a debug log line, and the `MetricPoint` of `quiesce.adapters.METRICS` to every
  hook of `metrics` (`OpenTelemetryMetrics`, or any callable; docs/metrics.md);
- `Log`, `Outcome`, `RestoreOutcome`, `Stopped`, ...: structlog and observers.

Failures of a call become exactly one `Cause` each: the deadline passing is `timeout`, a
lost request or reply is `request_lost` / `reply_lost`, a transport error `io_error`, a 5xx
`participant_error` (the client says which: `CallFailedError.cause`); a refusal is an answer,
not a failure, and goes in as a `Reply`.

Clocks: with a `RealClock` deadlines are `anyio.fail_at` and the driver runs on asyncio or
trio; with a `VirtualClock` the whole run is a seeded discrete-event simulation, so the same
seed gives the same run on either backend. Store effects (`StoreEffects` does them) run
inline on the virtual clock and in worker threads (`StoreLane`) on the real one: there
`stop()` runs every store job still queued before it returns, while `crash()` abandons them
(a dead process writes nothing more).

Every transition is logged with structlog, bound to `checkpoint_id`, `participant` and
`rollout_id` where they apply, on stderr (`configure_logging`: JSON when not a TTY).
"""

from __future__ import annotations

import base64
import functools
import logging
import sys
from collections.abc import Awaitable, Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal, TextIO

import structlog

from quiesce.adapters._clock import Clock, ClockEvent, Queue, TaskGroup, VirtualClock
from quiesce.adapters._intent import ControllerJournal
from quiesce.adapters._ledger_codec import ledger_to_text
from quiesce.adapters._metrics import MetricHook, metric_point
from quiesce.adapters._participant_api import CallFailedError, Participant
from quiesce.adapters._snapshot_store import SnapshotStore, SnapshotStoreError
from quiesce.adapters._store_effects import CUT_ARTIFACT, StoreEffect, StoreEffects
from quiesce.adapters._store_lane import Job, StoreLane
from quiesce.adapters._trainer import ControllerCut, CorruptCut, CutMismatch, DataPlane, Trainer
from quiesce.fsm import QuiesceError, label
from quiesce.protocol import Cause, OpId
from quiesce.protocol.controller import (
    ControllerEffect,
    ControllerInput,
    ControllerState,
    Coordinator,
    Ledger,
    Outcome,
    Stopped,
)
from quiesce.protocol.controller.lowlevel import (
    ArmTimer,
    Call,
    CallFailed,
    CancelTimer,
    CaptureCut,
    CloseAdmission,
    Discovered,
    Dispatch,
    GroupRecord,
    Log,
    Metric,
    OpenAdmission,
    Publish,
    Recovered,
    Redispatch,
    Reply,
    RestoreCut,
    RestoreMetrics,
    RestoreOutcome,
    RewindToAnchor,
    RolloutCompleted,
    RolloutFailed,
    TimerDue,
    WriteStaging,
)
from quiesce.protocol.machines import CheckpointState
from quiesce.protocol.participant import ParticipantOp
from quiesce.protocol.wire import (
    BeginRequest,
    Capabilities,
    ErrorReply,
    Message,
    PrepareReply,
    Receipt,
    Role,
)

__all__ = [
    "Companion",
    "Driver",
    "DriverError",
    "Observer",
    "RestoreReport",
    "configure_logging",
]

Observer = Callable[[ControllerInput, tuple[ControllerEffect, ...], ControllerState], None]
"""Called after every coordinator step with the input, its effects and the new state."""

Companion = Callable[["Driver"], Awaitable[None]]
"""A task that runs beside the controller for as long as it runs (e.g. a completion poller)."""

_LOG_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "critical": logging.CRITICAL,
    "error": logging.ERROR,
}


def configure_logging(
    level: str = "info", *, json_logs: bool | None = None, stream: TextIO | None = None
) -> None:
    """Send structlog output to `stream` (stderr) at `level`; JSON lines when `json_logs`
    (default: when `stream` is not a TTY), a readable console format otherwise.

    Commands call this once; stdout stays for results.
    """
    out = stream or sys.stderr
    as_json = not out.isatty() if json_logs is None else json_logs
    renderer: Any = (
        structlog.processors.JSONRenderer(sort_keys=True)
        if as_json
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_LOG_LEVELS.get(level, logging.INFO)),
        logger_factory=structlog.PrintLoggerFactory(out),
        cache_logger_on_first_use=False,
    )


class DriverError(QuiesceError):
    """The driver cannot go on: `reason` names what and the fix."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


@dataclass(frozen=True, slots=True)
class RestoreReport:
    """What a start-up did (the coordinator's `RestoreOutcome`, plus what the driver saw).

    `kind`: `snapshot` (restored `snapshot_id`), `fresh_start` / `bootstrap` (no snapshot
    matched the trainer anchor: rollouts restart at the anchor), `restore_failed`, or
    `stopped` (the controller stopped before the restore ended). `redispatched` counts the
    attempts the restore dispatched again; `released_orphans` the completions agents still
    held after the restore that the coordinator dropped and ACKed (work of the rolled-back
    interval, or of attempts the restore retired), so their agents can be ready again.
    """

    kind: Literal["snapshot", "fresh_start", "bootstrap", "restore_failed", "stopped"]
    snapshot_id: str | None = None
    intent: str | None = None
    intent_action: str = "none"
    rejected: tuple[tuple[str, str], ...] = ()
    redispatched: int = 0
    released_orphans: int = 0
    metrics: RestoreMetrics = field(default_factory=RestoreMetrics)

    @property
    def discarded(self) -> int:
        """Continuations discarded because they depend on a `restart_only` resource."""
        return self.metrics.continuations_discarded_restart_only


@dataclass(eq=False, slots=True)
class _Waiter:
    predicate: Callable[[ControllerState], bool]
    event: ClockEvent


class Driver:
    """Runs one controller: the coordinator's effects against the adapters.

    `build_controller` builds one with every piece wired (and refuses a missing one); built
    by hand, completions must reach `completed` -- an in-memory fleet's `on_completed`, or
    a poller among `companions` -- or every checkpoint with rollouts times out in prepare.

    >>> import anyio, tempfile
    >>> from quiesce.adapters import InMemoryDataPlane, InMemoryTrainer, VirtualClock
    >>> from quiesce.adapters import ControllerJournal, SnapshotStore, InMemoryFleet
    >>> from quiesce.protocol import Coordinator, QuiesceConfig
    >>> from quiesce.protocol.controller import PeriodElapsed
    >>> configure_logging("error")
    >>> clock = VirtualClock(seed=3)
    >>> async def main() -> str:
    ...     fleet = InMemoryFleet(clock, policies=1, agents=1, resources=1)
    ...     trainer = InMemoryTrainer()
    ...     driver = Driver(Coordinator(QuiesceConfig()), clock, fleet.participants,
    ...         store=SnapshotStore(tempfile.mkdtemp()),
    ...         journal=ControllerJournal(tempfile.mkdtemp()),
    ...         trainer=trainer, data_plane=InMemoryDataPlane(trainer))
    ...     fleet.on_completed = driver.completed
    ...     async with clock.task_group() as tg:
    ...         tg.start_soon(fleet.run)
    ...         tg.start_soon(driver.run)
    ...         await driver.start()
    ...         driver.submit(PeriodElapsed())
    ...         await driver.wait_for(lambda s: s.phase.value == "idle" and s.seq == 1)
    ...         driver.stop(); fleet.stop()
    ...     return driver.outcomes[-1].result
    >>> anyio.run(clock.run, main)
    'completed'
    """

    def __init__(
        self,
        coordinator: Coordinator,
        clock: Clock,
        participants: Mapping[str, Participant],
        *,
        store: SnapshotStore,
        journal: ControllerJournal,
        trainer: Trainer,
        data_plane: DataPlane,
        depends_on: tuple[tuple[str, tuple[str, ...]], ...] | None = None,
        turns: Callable[[Dispatch], int] | None = None,
        has_group: Callable[[GroupRecord], bool] | None = None,
        observers: Iterable[Observer] = (),
        metrics: Iterable[MetricHook] = (),
        companions: Iterable[Companion] = (),
        discovery_attempts: int = 20,
        retry_backoff_s: float = 0.5,
        store_in_thread: bool | None = None,
    ) -> None:
        self.coordinator = coordinator
        self.config = coordinator.config
        self.clock = clock
        self.participants = dict(participants)
        self._store_effects = StoreEffects(
            store, journal, trainer, keep_latest_k=self.config.keep_latest_k, has_group=has_group
        )
        self.data_plane = data_plane
        self.depends_on = depends_on
        self.turns = turns or (lambda _dispatch: 2)
        self.observers: list[Observer] = list(observers)
        self.metrics: list[MetricHook] = list(metrics)
        self._undocumented: set[str] = set()  # metric names already warned about
        self.companions: tuple[Companion, ...] = tuple(companions)
        self.discovery_attempts = discovery_attempts
        self.retry_backoff_s = retry_backoff_s
        self.state: ControllerState = coordinator.initial(epoch=0)
        self.outcomes: list[Outcome] = []
        self.stopped: Stopped | None = None
        self.restore_report: RestoreReport | None = None
        self.steps = 0
        self._inbox: Queue[ControllerInput] = Queue(clock)
        self._tg: TaskGroup | None = None
        self._started: ClockEvent = clock.event()
        self._halted: ClockEvent = clock.event()
        self._dead = False
        self._timers: dict[Hashable, int] = {}  # timer name -> its latest arming
        self._timer_seq = 0
        self._waiters: list[_Waiter] = []
        # The latest `not_ready` answer of each participant to the current prepare: a
        # checkpoint that fails names who was not ready and what still ran.
        self._not_ready: dict[str, PrepareReply] = {}
        threaded = (
            not isinstance(clock, VirtualClock) if store_in_thread is None else store_in_thread
        )
        self._lane = StoreLane(clock) if threaded else None
        self._log = structlog.get_logger("quiesce.driver")

    # ------------------------------------------------------------------ collaborators
    # The store effects use these too: replacing one here (a test wrapping the store)
    # replaces it there.

    @property
    def store(self) -> SnapshotStore:
        """The snapshot store."""
        return self._store_effects.store

    @store.setter
    def store(self, store: SnapshotStore) -> None:
        self._store_effects.store = store

    @property
    def journal(self) -> ControllerJournal:
        """The controller's intent record and epoch."""
        return self._store_effects.journal

    @journal.setter
    def journal(self, journal: ControllerJournal) -> None:
        self._store_effects.journal = journal

    @property
    def trainer(self) -> Trainer:
        """The trainer (its anchor is where a restore starts from)."""
        return self._store_effects.trainer

    @trainer.setter
    def trainer(self, trainer: Trainer) -> None:
        self._store_effects.trainer = trainer

    @property
    def has_group(self) -> Callable[[GroupRecord], bool] | None:
        """Whether the trainer already trained on a group (a restored ledger's finalizing
        groups it holds are reported `trained`)."""
        return self._store_effects.has_group

    @has_group.setter
    def has_group(self, has_group: Callable[[GroupRecord], bool] | None) -> None:
        self._store_effects.has_group = has_group

    # ------------------------------------------------------------------ lifecycle

    async def run(self) -> None:
        """Run the controller's tasks until `stop()` or `crash()`; start it in a clock task
        group (`tg.start_soon(driver.run)`), then `await driver.start()`."""
        async with self.clock.task_group() as tg:
            self._tg = tg
            tg.start_soon(self._loop, name="driver:loop")
            if self._lane is not None:
                tg.start_soon(self._lane.run, self.submit, name="driver:store")
            for companion in self.companions:
                tg.start_soon(companion, self, name=f"driver:{_name_of(companion)}")
            self._started.set()
            await self._halted.wait()
            tg.cancel()
        self._tg = None

    def stop(self) -> None:
        """Stop the controller cleanly: every store job queued so far (intent record,
        staging, validation, publication, ...) has run when this returns -- the ones a worker
        thread already runs end first, the others run here, in order, in the calling thread
        -- so a clean stop loses nothing the store was asked to keep. Then the controller's
        tasks stop (timers, calls in flight, the loop). A stopped or crashed controller stays
        as it is."""
        if self._dead:
            return
        self._halt()
        if self._lane is not None:
            self._lane.drain()

    def crash(self) -> None:
        """The controller process dies now: nothing more is stepped or sent, calls in
        flight are abandoned (requests already sent may still arrive), timers are gone,
        store jobs not yet started never run. Only the durable store (intent record,
        epoch, snapshots) survives."""
        self._log.warning("controller_crashed", epoch=self.state.epoch)
        self._halt()

    def _halt(self) -> None:
        self._dead = True
        self._halted.set()

    @property
    def alive(self) -> bool:
        """False once stopped or crashed."""
        return not self._dead

    def submit(self, event: ControllerInput) -> None:
        """Queue `event` for the coordinator (the trainer, the dataloader, completions)."""
        if not self._dead:
            self._inbox.put_nowait(event)

    async def wait_for(self, predicate: Callable[[ControllerState], bool]) -> ControllerState:
        """Return once `predicate(state)` holds (checked now and after every step)."""
        if predicate(self.state):
            return self.state
        waiter = _Waiter(predicate, self.clock.event())
        self._waiters.append(waiter)
        await waiter.event.wait()
        return self.state

    def completed(self, participant: str, receipt: Receipt) -> None:
        """An agent announced a completion: report it (the fleet's `on_completed` hook)."""
        self.submit(_completion(participant, receipt))

    # ------------------------------------------------------------------ the loop

    async def _loop(self) -> None:
        while True:
            event = await self._inbox.get()
            if self._dead:
                return
            self._step(event)

    def _step(self, event: ControllerInput) -> tuple[ControllerEffect, ...]:
        before = self.state
        try:
            self.state, effects = self.coordinator.step(before, self.clock.now(), event)
        except QuiesceError as error:
            if isinstance(event, Discovered):
                raise  # a setup refusal (S13, S14): the run cannot start
            # The core refused an input it should have ignored; the state is unchanged.
            self._log.warning("input_refused", input=type(event).__name__, error=str(error))
            self._after(event, ())
            return ()
        self.steps += 1
        if before.phase is not self.state.phase:
            attempt = self.state.attempt or before.attempt
            self._log.info(
                "transition",
                checkpoint_id=str(attempt.op_id) if attempt else None,
                source=label(before.phase),
                target=label(self.state.phase),
                input=type(event).__name__,
                **_input_fields(event),
            )
        for effect in effects:
            self._execute(effect)
            if isinstance(effect, RestoreOutcome):
                self._restored(effect, effects)
        self._after(event, effects)
        return effects

    def _after(self, event: ControllerInput, effects: tuple[ControllerEffect, ...]) -> None:
        for observer in self.observers:
            observer(event, effects, self.state)
        self.recheck()

    def recheck(self) -> None:
        """Re-check every `wait_for` predicate now (for predicates that read more than the
        controller state, after that other thing changed)."""
        if self._waiters:
            ready = [w for w in self._waiters if w.predicate(self.state)]
            for waiter in ready:
                self._waiters.remove(waiter)
                waiter.event.set()

    def _spawn(self, fn: Callable[..., Any], *args: Any, name: str) -> None:
        if self._tg is None or self._dead:
            return
        self._tg.start_soon(fn, *args, name=name)

    # ------------------------------------------------------------------ effects

    def _execute(self, effect: ControllerEffect) -> None:
        if isinstance(effect, Call):
            self._spawn(self._call, effect, name=f"call:{effect.op.value}:{effect.participant}")
        elif isinstance(effect, Dispatch):
            self._spawn(self._dispatch, effect, name=f"begin:{effect.rollout_id}#{effect.attempt}")
        elif isinstance(effect, ArmTimer):
            self._timer_seq += 1
            self._timers[effect.name] = self._timer_seq
            self._spawn(self._timer, effect, self._timer_seq, name=f"timer:{effect.name}")
        elif isinstance(effect, CancelTimer):
            self._timers.pop(effect.name, None)
        elif isinstance(effect, WriteStaging):
            self._stage(effect)
        elif isinstance(effect, CaptureCut):
            self._capture(effect)
        elif isinstance(effect, StoreEffect):
            now = self.clock.now()
            self._store(lambda: self._store_effects.execute(effect, now))
            if isinstance(effect, Publish):
                # Pruning re-verifies what it keeps: after the answer, off the release's path.
                self._store(self._store_effects.prune)
        elif isinstance(effect, RestoreCut):
            self._restore_cut(effect)
        elif isinstance(effect, RewindToAnchor):
            self._rewind(effect)
        else:
            self._report(effect)

    def _report(self, effect: ControllerEffect) -> None:
        if isinstance(effect, Outcome):
            self.outcomes.append(effect)
            self._log.info(
                "checkpoint_outcome",
                checkpoint_id=str(effect.checkpoint_id),
                result=effect.result,
                reason=effect.reason,
                consecutive_failures=effect.consecutive_failures,
            )
            self._report_not_ready(effect)
        elif isinstance(effect, Stopped):
            self.stopped = effect
            self._log.error(
                "controller_stopped",
                reason=effect.reason,
                checkpoint_id=_text(effect.checkpoint_id),
                participant=effect.participant,
                cause=effect.cause,
            )
        elif isinstance(effect, Log):
            getattr(self._log, effect.level)(effect.event, **dict(effect.fields))
        elif isinstance(effect, Metric):
            self._log.debug("metric", name=effect.name, value=effect.value, **dict(effect.tags))
            self._metric(effect)
        elif isinstance(effect, CloseAdmission | OpenAdmission):
            self._log.debug(type(effect).__name__, owner=effect.owner)
        elif isinstance(effect, Redispatch):
            self._log.info("redispatch", group_id=effect.group_id, level=effect.level)

    def _metric(self, metric: Metric) -> None:
        if not self.metrics:
            return
        fleet = self.state.fleet

        def role_of(name: str) -> str | None:
            role = fleet.role_of(name) if fleet is not None else None
            return None if role is None else role.value

        point = metric_point(metric, role_of)
        if point is None:
            if metric.name not in self._undocumented:
                self._undocumented.add(metric.name)
                self._log.warning("metric_undocumented", name=metric.name, see="docs/metrics.md")
            return
        for hook in self.metrics:
            try:
                hook(point)
            except Exception as error:  # a broken sink must not stop the controller
                self._log.error("metric_hook_failed", name=point.name, error=repr(error))

    # ------------------------------------------------------------------ remote calls

    async def _call(self, call: Call) -> None:
        try:
            request = self._request(call)
        except (SnapshotStoreError, OSError) as error:
            # The snapshot to restore from cannot be read now: the call cannot be made.
            self._log.warning(
                "restore_artifact_unreadable", participant=call.participant, error=str(error)
            )
            self.submit(
                CallFailed(call.participant, call.op, call.op_id, Cause.IO_ERROR, call.payload)
            )
            return
        result = await self.send(
            call.participant, ParticipantOp(call.op.value), request, call.deadline_at
        )
        if self._dead:
            return
        if isinstance(result, Cause):
            self._log.info(
                "call_failed",
                participant=call.participant,
                op=call.op.value,
                checkpoint_id=str(call.op_id) if call.op_id else None,
                cause=result.value,
            )
            self.submit(CallFailed(call.participant, call.op, call.op_id, result, call.payload))
        else:
            if isinstance(result, PrepareReply):
                self._prepared(call.participant, result)
            self.submit(Reply(call.participant, call.op, call.op_id, result, call.payload))

    def _prepared(self, participant: str, reply: PrepareReply) -> None:
        """Keep (and log) a `not_ready` answer: who is not ready, and why."""
        if reply.status == "ready":
            self._not_ready.pop(participant, None)
            return
        previous = self._not_ready.get(participant)
        self._not_ready[participant] = reply
        # A prepare retried against the same blockers says nothing new: once is enough.
        unchanged = previous is not None and (previous.op_id, previous.blockers) == (
            reply.op_id,
            reply.blockers,
        )
        (self._log.debug if unchanged else self._log.info)(
            "prepare_not_ready",
            participant=participant,
            checkpoint_id=str(reply.op_id),
            blockers=list(reply.blockers),
        )

    def _report_not_ready(self, outcome: Outcome) -> None:
        """A checkpoint that did not complete names the participants whose latest answer to
        its prepare was `not_ready`, and what kept each one (running executions,
        completions never ACKed -- the usual sign of unwired completions)."""
        held = {
            name: list(reply.blockers)
            for name, reply in sorted(self._not_ready.items())
            if reply.op_id == outcome.checkpoint_id
        }
        self._not_ready.clear()
        if held and outcome.result != "completed":
            self._log.warning(
                "checkpoint_not_ready",
                checkpoint_id=str(outcome.checkpoint_id),
                result=outcome.result,
                reason=outcome.reason,
                not_ready=held,
            )

    def _request(self, call: Call) -> Message:
        return call.request(self._artifact_text)

    def _artifact_text(self, snapshot_id: OpId, participant: str) -> str:
        """A stored artifact as a restore request carries it (base64)."""
        data = self._store_effects.artifact(snapshot_id, participant)
        return base64.b64encode(data).decode("ascii")

    async def send(
        self, participant: str, op: ParticipantOp, request: Message | None, deadline_at: float
    ) -> Message | Cause:
        """Send one call bounded by `deadline_at`: its reply, or the `Cause` it failed by."""
        client = self.participants.get(participant)
        if client is None:
            return Cause.IO_ERROR
        try:
            with self.clock.fail_at(deadline_at):
                return await client.call(op, request, deadline_at)
        except TimeoutError:
            return Cause.TIMEOUT
        except CallFailedError as failed:
            self._log.debug(
                "call_error",
                participant=participant,
                op=op.value,
                cause=failed.cause.value,
                detail=failed.detail,
            )
            return failed.cause
        except OSError:
            return Cause.IO_ERROR

    async def _dispatch(self, dispatch: Dispatch) -> None:
        request = BeginRequest(
            rollout_id=dispatch.rollout_id,
            attempt=dispatch.attempt,
            group_id=dispatch.group_id,
            turns=max(1, self.turns(dispatch)),
            resume_from_turn=dispatch.resume_from_turn,
        )
        deadline = self.clock.now() + self.config.control_timeout_s
        result = await self.send(dispatch.agent, ParticipantOp.BEGIN, request, deadline)
        if self._dead:
            return
        if isinstance(result, Cause | ErrorReply):
            why = result.value if isinstance(result, Cause) else result.code
            self._log.info(
                "begin_refused",
                participant=dispatch.agent,
                rollout_id=dispatch.rollout_id,
                attempt=dispatch.attempt,
                why=why,
            )
            self.submit(RolloutFailed(dispatch.rollout_id, dispatch.attempt))

    async def _timer(self, arm: ArmTimer, seq: int) -> None:
        await self.clock.sleep_until(arm.at)
        # Re-armed or cancelled meanwhile: this sleep is stale.
        if self._timers.get(arm.name) == seq and not self._dead:
            del self._timers[arm.name]
            self.submit(TimerDue(arm.name))

    # ------------------------------------------------------------------ the store

    def _capture(self, effect: CaptureCut) -> None:
        # The cut is taken now, at this instant of the controller; only its write waits.
        ledger = ledger_to_text(effect.ledger) if isinstance(effect.ledger, Ledger) else None
        cut: ControllerCut = self.data_plane.capture(ledger=ledger)
        self._store(lambda: self._store_effects.write_cut(effect.checkpoint_id, cut))

    def _store(self, job: Job) -> None:
        """Run a store job: inline on the virtual clock (deterministic), else in the store
        lane, one job at a time in FIFO order in a worker thread, so fsyncs never block the
        event loop while calls are in flight. The job's answer is submitted when it ends."""
        if self._lane is None:
            answer = job()
            if answer is not None:
                self.submit(answer)
        else:
            self._lane.put(job)

    def _stage(self, effect: WriteStaging) -> None:
        """One participant's artifact into staging: inline on the virtual clock, else in its
        own worker thread, so the fsyncs of many artifacts overlap each other and the calls
        still in flight (the store lane waits for all of them before its next job)."""
        if self._lane is None:
            self._store_effects.write_staging(effect)
            return
        try:
            self._store_effects.open_staging(effect.checkpoint_id)  # once, before any writer
        except (SnapshotStoreError, OSError) as error:
            self._log.warning(
                "staging_error", checkpoint_id=str(effect.checkpoint_id), error=str(error)
            )
            return
        write = functools.partial(self._store_effects.write_staging, effect)
        self._lane.add_write(write)
        self._spawn(self._lane.run_write, write, name=f"stage:{effect.participant}")

    # ------------------------------------------------------------------ start-up (§2, §6, M9)

    async def start(self) -> RestoreReport:
        """Start the controller: a new epoch, discovery (§2), then `Recovered` with the
        intent record (§6) and the trainer anchor, and the coordinator's restore (M9) until
        it ends. Call once `run()` is running. Raises the setup refusals of discovery
        (S13, S14) and `DriverError` if a participant never answers discovery."""
        await self._started.wait()
        epoch = self.journal.next_epoch()
        self.state = self.coordinator.initial(epoch)
        caps = await self._discover()
        self._step(Discovered(caps, self.depends_on))
        intent = self.journal.read_intent()
        anchor = self.trainer.anchor()
        intent_id = None if intent is None else OpId.parse(intent.checkpoint_id)
        self._step(Recovered(intent_id, None if anchor is None else anchor.step))
        await self.wait_for(
            lambda s: self.restore_report is not None or s.phase is CheckpointState.STOPPED
        )
        if self.restore_report is None:
            self.restore_report = RestoreReport("stopped", intent=_text(intent_id))
            return self.restore_report
        if self.restore_report.kind != "restore_failed":
            released = await self._report_held_completions()
            self.restore_report = replace(self.restore_report, released_orphans=released)
        return self.restore_report

    async def _discover(self) -> tuple[Capabilities, ...]:
        """Ask every participant for its capabilities (concurrently), retrying the ones
        that fail until `discovery_attempts` rounds are used up."""
        caps: dict[str, Capabilities] = {}

        async def ask(name: str, deadline: float) -> None:
            reply = await self.send(name, ParticipantOp.CAPABILITIES, None, deadline)
            if isinstance(reply, Capabilities):
                caps[name] = reply

        for attempt in range(self.discovery_attempts):
            missing = sorted(set(self.participants) - set(caps))
            if not missing:
                break
            if attempt:
                await self.clock.sleep(self.retry_backoff_s)
            deadline = self.clock.now() + self.config.control_timeout_s
            async with self.clock.task_group() as tg:
                for name in missing:
                    tg.start_soon(ask, name, deadline, name=f"discover:{name}")
        missing = sorted(set(self.participants) - set(caps))
        if missing:
            raise DriverError(
                f"discovery failed for {missing} after {self.discovery_attempts} attempts; "
                "check that every participant is up and reachable"
            )
        return tuple(caps[name] for name in sorted(caps))

    def _restore_cut(self, effect: RestoreCut) -> None:
        try:
            files = self._store_effects.snapshot_files(effect.snapshot_id)
            self.data_plane.restore_cut(files[CUT_ARTIFACT])
        except (SnapshotStoreError, OSError, KeyError, CorruptCut, CutMismatch) as error:
            # The coordinator already verified this snapshot: a cut that does not install
            # now means the trainer moved under the restore. Nothing to decide here: say so.
            self._log.error(
                "restore_cut_failed", snapshot=str(effect.snapshot_id), error=str(error)
            )

    def _rewind(self, effect: RewindToAnchor) -> None:
        rewind = getattr(self.data_plane, "rewind_to_anchor", None)
        if rewind is not None:
            rewind()
        self._log.info(
            "rewound_to_anchor", step=effect.step, dataloader_position=effect.dataloader_position
        )

    def _restored(self, outcome: RestoreOutcome, effects: tuple[ControllerEffect, ...]) -> None:
        metrics = dict(outcome.metrics)
        known = {name: metrics.get(name, 0) for name in RestoreMetrics.__slots__}
        self.restore_report = RestoreReport(
            outcome.result,
            snapshot_id=_text(outcome.snapshot_id),
            intent=_text(outcome.intent),
            intent_action=outcome.intent_action,
            rejected=outcome.rejected,
            redispatched=sum(1 for e in effects if isinstance(e, Dispatch) and e.attempt > 0),
            metrics=RestoreMetrics(**known),
        )
        self._log.info(
            "restore_outcome",
            result=outcome.result,
            snapshot=_text(outcome.snapshot_id),
            intent=_text(outcome.intent),
            intent_action=outcome.intent_action,
            rejected=[list(r) for r in outcome.rejected],
            redispatched=self.restore_report.redispatched,
        )

    async def _report_held_completions(self) -> int:
        """Report every completion an agent still holds unACKed after the restore: the
        announcements went to the dead controller. The coordinator decides what each one
        is (sealed, or dropped and ACKed); returns how many it dropped."""
        dropped = 0
        for agent in sorted(self.participants):
            fleet = self.state.fleet
            if fleet is None or fleet.role_of(agent) is not Role.AGENT:
                continue
            try:
                reply = await self.participants[agent].completions(
                    deadline_at=self.clock.now() + self.config.control_timeout_s
                )
            except CallFailedError:
                continue
            for receipt in reply.receipts:
                before = _dropped(self.state)
                self._step(_completion(agent, receipt))
                dropped += _dropped(self.state) - before
        return dropped


def _name_of(companion: Companion) -> str:
    return getattr(companion, "__name__", type(companion).__name__)


def _completion(agent: str, receipt: Receipt) -> RolloutCompleted:
    return RolloutCompleted(receipt.rollout_id, receipt.attempt, receipt.receipt, agent)


def _dropped(state: ControllerState) -> int:
    """Completions the coordinator dropped (and ACKed) so far."""
    return state.unowned_dropped + state.ledger.counters.late_completions_dropped


def _text(op_id: OpId | None) -> str | None:
    return None if op_id is None else str(op_id)


def _input_fields(event: ControllerInput) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    participant = getattr(event, "participant", None)
    if participant is not None:
        fields["participant"] = participant
    rollout = getattr(event, "rollout_id", None)
    if rollout is not None:
        fields["rollout_id"] = rollout
    cause = getattr(event, "cause", None)
    if isinstance(cause, Cause):
        fields["cause"] = cause.value
    return fields
