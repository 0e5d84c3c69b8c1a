"""A simulated training run on the in-memory fleet, on the virtual clock (`quiesce simulate`).

What lives here: the *environment* of one controller -- a dataloader that opens prompt
groups of G siblings, a trainer that takes finished groups in batches, a periodic
trigger, injected faults, an optional controller crash and restart -- and an oracle that
judges the run. What it does not know: the protocol. The coordinator decides; the driver
executes; this module only plays the world around them and counts. The world itself
(`_World`) runs on any clock and any participants -- `quiesce chaos` plays it on the real
clock over HTTP; `_Run` plays it on the in-memory fleet and the virtual clock.

The run:
1. a fleet of P policies, A agents and R resources servers (`InMemoryFleet`), every control
   call faulted with probability `fault_rate` (kind drawn from the seeded RNG; a restart of
   the participant is one of the kinds unless `restart_rate` gives restarts a rate of their
   own);
2. the dataloader keeps `3 * groups_per_step` groups in flight while admission is open;
   each rollout runs 1..`max_turns` turns through policy and resources on its agent;
3. the trainer takes `groups_per_step` finished groups per optimizer step (and any
   remainder once the dataloader is exhausted); a step ends with the trainer's own
   checkpoint (`latency.trainer_save_s` more, every step, with checkpointing on or off);
   every trainer boundary triggers a checkpoint (`save_period` 1), and the periodic
   trigger runs beside it;
4. with `crash_at_step=k`, the controller crashes right after the first checkpoint at or
   after step k that published a snapshot matching the trainer anchor while rollouts are
   in flight (so the snapshot holds unfinished work); the next controller starts from the
   durable store alone: intent, restore, redispatch;
5. after the last prompt is consumed, the run drains: every group still in flight
   finishes and is trained, so the oracle sees the whole data;
6. once the data is used up, the faults stop and the controller gets a bounded while to
   settle (a lost ACK sent again, an orphan retired), because I9 is a goal "with no further
   faults"; a run that has settled already does not wait, so its figures are the run's.

The oracle (PROTOCOL.md §8 and §5 I9), independent of the coordinator: the trainer's final
lineage (after rollbacks to the restored anchor) and the dataloader's consumption.
`duplicated` counts `(prompt, sibling)` items trained more than once; `lost` counts items
of consumed prompts that are neither trained nor still in flight (a prompt is in flight when
it is consumed in the final timeline and not yet trained: only a run that ended early
leaves any); `untrained` names every consumed prompt group the trainer does not have in
full, with its reason (`_progress`). I9 is violated when a group ended untrained without a
counted reason, when any group did although no fault was injected, or when an agent still
holds an execution after the run finished.

Refinement (PROTOCOL.md §8, "Two levels of model"): with `validate_fences` (the default)
every request a participant handles is judged as it is logged (`quiesce.models`
`JudgingFenceLog`), and the run is `violated` if a fence moved in a way no step of the
design model does; `refinement` reports the counts. `fence_log` writes the log to a file
(docs/validate.md) for `quiesce validate`.

The verdict: `violated` if any invariant was (an unfinished run within the time limit is
one: I7), else `stopped` if the controller stopped before the data was used up (`stop`
says why: `_stop_cause`), else `ok`. `quiesce simulate` exits 1, 3 and 0 for them.

A controller with a planted bug runs through the same world: `coordinator_factory` builds
each controller process's `Coordinator` (a subclass, or one built with derived tables), so
a test can check that the oracle catches it.

The result is a `SimulationResult` (pydantic); the same seed gives the same JSON (virtual
time only: no wall-clock figure is in it).
"""

from __future__ import annotations

import contextlib
import functools
import statistics
import tempfile
import zlib
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import anyio
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from quiesce.adapters import (
    CALL_FAULTS,
    Clock,
    ClockEvent,
    ControllerJournal,
    Driver,
    Faults,
    FileFenceLog,
    FinishedGroup,
    HostStopped,
    InMemoryDataPlane,
    InMemoryFleet,
    InMemoryTrainer,
    MetricHook,
    Observer,
    Participant,
    RestoreReport,
    SnapshotStore,
    TeeFenceLog,
    VirtualClock,
    WorkConfig,
    parse_checkpoint_id,
)
from quiesce.fsm import RowLog, recording
from quiesce.harness._latency import LATENCY_PROFILES, LatencyProfile
from quiesce.harness._progress import (
    HeldExecution,
    Untrained,
    group_id,
    live_execution_violations,
    progress_violations,
    untrained_groups,
)
from quiesce.harness._recorder import RunRecorder
from quiesce.harness._scenarios import (
    RunCoverage,
    ScenarioFault,
    ScenarioWatch,
    TamperingParticipant,
    corrupt_one_staged_artifact,
)
from quiesce.harness._stop_cause import StopCause, StopWitness
from quiesce.models import JudgingFenceLog, LogVerdict
from quiesce.models.oracles import Candidate
from quiesce.protocol import OpId, QuiesceConfig, RecoveryLevel
from quiesce.protocol.controller import (
    ControllerEffect,
    ControllerInput,
    ControllerState,
    Coordinator,
    GroupOpened,
    GroupTrained,
    Ledger,
    OptimizerStepBegin,
    OptimizerStepEnd,
    Outcome,
    PeriodElapsed,
    TrainerBoundary,
)
from quiesce.protocol.controller.lowlevel import (
    Dispatch,
    GroupRecord,
    LocalDone,
    LocalOp,
    Metric,
    Redispatch,
    Reply,
    RestoreOutcome,
    RolloutCompleted,
    Validate,
)
from quiesce.protocol.machines import CheckpointState, ExecState, GateState, GroupState
from quiesce.protocol.participant import AgentRole, ParticipantOp
from quiesce.protocol.wire import AckRequest, ControlRequest, PrepareReply, Receipt, Role

__all__ = [
    "CheckpointCounts",
    "CoordinatorFactory",
    "RolloutCounts",
    "SimulationConfig",
    "SimulationResult",
    "run_simulation",
    "simulate",
]

CoordinatorFactory = Callable[[QuiesceConfig], Coordinator]
"""Builds the `Coordinator` of each controller process from its configuration (called once
per process: a crashed controller's successor gets a fresh one)."""

_S = CheckpointState
_BUSY = frozenset(
    {
        _S.CLOSING_ADMISSION,
        _S.FLUSHING_ACKS,
        _S.PREPARING,
        _S.COMMITTING,
        _S.CAPTURING,
        _S.VALIDATING,
        _S.PUBLISHING,
        _S.RELEASING,
        _S.ABORTING,
    }
)


_FAST = LATENCY_PROFILES["fast"]


def _latency_profile(value: object) -> object:
    """A profile's name stands for the profile."""
    return LatencyProfile.named(value) if isinstance(value, str) else value


class SimulationConfig(BaseModel):
    """Every knob of `quiesce simulate` (defaults finish in a few seconds)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    steps: int = Field(default=8, ge=1)
    groups_per_step: int = Field(default=4, ge=1)
    group_size: int = Field(default=4, ge=1)
    agents: int = Field(default=2, ge=1)
    policies: int = Field(default=1, ge=1)
    resources: int = Field(default=1, ge=0)
    resources_mode: Literal["export_restore", "stateless", "restart_only"] = "export_restore"
    fault_rate: float = Field(default=0.0, ge=0.0, le=1.0, allow_inf_nan=False)
    restart_rate: float | None = Field(default=None, ge=0.0, le=1.0, allow_inf_nan=False)
    """Process restarts apart from `fault_rate`: each control call restarts its participant
    with this probability, and `fault_rate` draws only the faults of one call (lost, 5xx,
    timed out, redelivered). None: a restart is one of the kinds `fault_rate` draws."""
    crash_at_step: int | None = Field(default=None, ge=1)
    target_level: RecoveryLevel = RecoveryLevel.TURN
    group_scored: bool = False
    max_turns: int = Field(default=5, ge=1)
    seed: int = 0
    snapshot_dir: Path | None = None
    time_limit_s: float | None = Field(default=None, gt=0)
    """Virtual seconds after which an unfinished run gives up (`stop_reason` says so).
    None: `time_limit` (20,000 s, more for a long run of slow steps)."""
    validate_fences: bool = True
    """Check every participant's fence moves against the design model (refinement)."""
    fence_log: Path | None = None
    """Write the run's fence log (docs/validate.md) to this file, replacing it."""
    latency: Annotated[LatencyProfile, BeforeValidator(_latency_profile)] = _FAST
    """How long the world's work takes (`LatencyProfile`, or a name of `LATENCY_PROFILES`):
    `fast` (the default) or `review`."""
    checkpointing: bool = True
    """False: no trigger ever reaches the controller (no trainer boundary, no periodic
    attempt), so it never checkpoints: the baseline `benchmarks/bench_overhead.py` measures
    checkpointing against."""
    inject: tuple[ScenarioFault, ...] = ()
    """Opt-in scenario faults (`ScenarioFault`, or their names: `conflict`,
    `duplicate-snapshot`, `restore-digest-mismatch`, `preparing-intent-crash`,
    `staging-corruption`, `forged-receipt`, `optimizer-race`), each played once,
    deterministically from the seed."""
    coverage: bool = False
    """Report which §7 scenarios the run reached and which controller table rows fired
    (`SimulationResult.coverage`)."""

    @property
    def restarts(self) -> bool:
        """Does the run restart its controller (a crash asked for, or needed by a fault)?"""
        return self.crash_at_step is not None or bool(
            {
                ScenarioFault.PREPARING_INTENT_CRASH,
                ScenarioFault.RESTORE_DIGEST_MISMATCH,
                ScenarioFault.DUPLICATE_SNAPSHOT,
            }
            & set(self.inject)
        )

    @property
    def time_limit(self) -> float:
        """The time limit in force: `time_limit_s`, or 20,000 virtual seconds, raised to four
        times what `steps` training steps (each saving the trainer's checkpoint) and as many
        periodic intervals take."""
        if self.time_limit_s is not None:
            return self.time_limit_s
        latency = self.latency
        per_step = latency.train_step(0, saves=True) + latency.snapshot_attempt_interval_s
        return max(20_000.0, 4 * self.steps * per_step)

    @model_validator(mode="after")
    def _crash_within_the_run(self) -> SimulationConfig:
        if self.crash_at_step is not None and self.crash_at_step > self.steps:
            raise ValueError(
                f"crash_at_step {self.crash_at_step} is beyond steps {self.steps}: the run "
                f"never reaches that step; crash at a step from 1 to {self.steps}"
            )
        if self.crash_at_step is not None and not self.checkpointing:
            raise ValueError(
                "crash_at_step needs checkpointing: the controller crashes right after a "
                "published snapshot, and with checkpointing off none is ever taken"
            )
        if self.inject and not self.checkpointing:
            raise ValueError(
                "inject needs checkpointing: every scenario fault strikes a checkpoint or "
                "the restore of one, and with checkpointing off none is ever taken"
            )
        return self


class CheckpointCounts(BaseModel):
    """Checkpoint attempts by outcome; `aborted`, `release_retried`, `abort_retried` count
    attempts (entries into `aborting` / retries of a pending release or abort)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    completed: int
    skipped: int
    failed: int
    aborted: int
    release_retried: int
    abort_retried: int


class RolloutCounts(BaseModel):
    """Rollouts: dispatched and completed attempts, trained items, the oracle's lost and
    duplicated items, and what restores redispatched (resumed at a turn or rerun)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    dispatched: int
    completed: int
    trained: int
    lost: int
    duplicated: int
    redispatched: int
    resumed_from_turn: int
    rerun_from_scratch: int
    retried_live: int


class Quantiles(BaseModel):
    """Median and max of a sample (0.0 when empty)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    median: float
    max: float


class SimulationResult(BaseModel):
    """The JSON of `quiesce simulate --json`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    seed: int
    steps: int
    checkpoints: CheckpointCounts
    rollouts: RolloutCounts
    admission_closed_s: Quantiles
    restores: list[dict[str, Any]]
    faults_injected: int
    participant_restarts: int
    crashed_at_step: int | None
    virtual_seconds: float
    invariants_ok: bool
    violations: list[str]
    untrained: Untrained
    stopped: bool
    stop_reason: str | None
    stop: StopCause | None
    """Why the controller stopped (None: it did not)."""
    refinement: dict[str, Any] | None
    """The fence log judged against the design model (`LogVerdict.describe()`; None when
    not validated)."""
    verdict: Literal["ok", "violated", "stopped"]
    """`violated` if an invariant was, else `stopped` if the controller stopped before the
    data was used up, else `ok`."""
    coverage: RunCoverage | None = None
    """The §7 scenarios reached and the controller table rows fired (None unless
    `SimulationConfig.coverage`)."""


@dataclass
class _Tally:
    completed: int = 0
    skipped: int = 0
    failed: int = 0
    aborted: int = 0
    release_retried: int = 0
    abort_retried: int = 0
    dispatched: int = 0
    completions: int = 0
    retried_live: int = 0
    admission_closed: list[float] = field(default_factory=list)
    restores: list[RestoreReport] = field(default_factory=list)


def _turns(max_turns: int) -> Callable[[Dispatch], int]:
    def turns(dispatch: Dispatch) -> int:
        # Stable per rollout (not per attempt): a rerun does the same work again.
        return 1 + zlib.crc32(dispatch.rollout_id.encode()) % max_turns

    return turns


def _prompt(group: GroupRecord) -> int:
    return int(group.prompt)


class _World:
    """The world around one controller process, on any `Clock`: the dataloader, the
    trainer loop, the periodic trigger, and how they react to the controller's state.

    A subclass hands `__init__` its participants, protocol, trainer and data plane, and
    says how a process runs (`main`, which runs `_controller` once per controller
    process); `restored` is its hook into a controller's start, `settle` into a clean end.
    """

    def __init__(
        self,
        config: SimulationConfig,
        clock: Clock,
        root: Path,
        *,
        protocol: QuiesceConfig,
        participants: Mapping[str, Participant],
        depends_on: tuple[tuple[str, tuple[str, ...]], ...],
        trainer: InMemoryTrainer,
        plane: InMemoryDataPlane,
        observers: Sequence[Observer] = (),
        metrics: Sequence[MetricHook] = (),
        progress: Callable[[int], None] | None = None,
        coordinator_factory: CoordinatorFactory = Coordinator,
    ) -> None:
        self.cfg = config
        self.clock = clock
        self.protocol = protocol
        self.participants = dict(participants)
        self.depends_on = depends_on
        self.agents = tuple(agent for agent, _ in depends_on)
        self.trainer = trainer
        self.plane = plane
        self.store = SnapshotStore(root / "snapshots")
        self.journal = ControllerJournal(root / "controller")
        self.observers = tuple(observers)
        self.metrics = tuple(metrics)
        self.progress = progress
        self.coordinator_factory = coordinator_factory
        self.budget = config.steps * config.groups_per_step
        self.window = 3 * config.groups_per_step
        self.tally = _Tally()
        self.pushed: set[int] = set()
        self.open: set[int] = set()
        self.phase = _S.IDLE
        self.driver: Driver | None = None
        self.witness = StopWitness()  # the current controller's
        self.crashed_at: int | None = None
        self.crash_step = config.crash_at_step
        self.crash_pending = config.crash_at_step is not None
        self.stop_reason: str | None = None
        self.deadline_at: float | None = None
        self.done: ClockEvent = clock.event()
        self.wake_trainer: ClockEvent = clock.event()
        self.training = False
        self.boundaries = 0
        # The controller whose restore `pushed` and `open` were rebuilt for: the world
        # reacts to that controller's state only.
        self._view_of: Driver | None = None

    # ------------------------------------------------------------------ controller life

    def _new_driver(self) -> Driver:
        self.witness = StopWitness()
        return Driver(
            self.coordinator_factory(self.protocol),
            self.clock,
            self.participants,
            store=self.store,
            journal=self.journal,
            trainer=self.trainer,
            data_plane=self.plane,
            depends_on=self.depends_on,
            turns=_turns(self.cfg.max_turns),
            has_group=self._trainer_has,
            observers=[self._observe, self.witness, *self.observers],
            metrics=self.metrics,
        )

    def _trainer_has(self, group: GroupRecord) -> bool:
        prompt = _prompt(group)
        return any(item[0] == prompt for item in self.trainer.trained_items())

    async def _controller(self) -> bool:
        """One controller process: start (restore), then play the world until done or a
        crash. True if it crashed (a successor starts)."""
        driver = self.driver = self._new_driver()
        self.phase = _S.IDLE
        self.trainer.rollback_to_anchor()  # a (re)starting trainer loads its checkpoint
        if self.deadline_at is None:  # the time limit counts from the first start
            self.deadline_at = self.clock.now() + self.cfg.time_limit
        async with self.clock.task_group() as tg:
            tg.start_soon(driver.run, name="driver")
            report = await driver.start()
            self.tally.restores.append(report)
            if report.kind == "stopped":
                self._finish("stopped", driver)
            else:
                self._after_restore(driver)
                self.restored(report)
                tg.start_soon(self._trainer_loop, driver, name="trainer")
                if self.cfg.checkpointing:
                    tg.start_soon(self._periodic, driver, name="periodic")
                tg.start_soon(self._time_limit, self.deadline_at, name="time-limit")
                self._react(driver.state)
            await self._until_done_or_crash(driver)
            if self.done.is_set() and self.stop_reason is None and driver.alive:
                await self.settle(driver)
            crashed = self.crashed_at is not None and not self.done.is_set()
            driver.stop()  # a clean stop: every store job queued (ClearIntent) runs first
            tg.cancel()
        return crashed

    async def _until_done_or_crash(self, driver: Driver) -> None:
        while not self.done.is_set() and driver.alive:
            await driver.wait_for(lambda _s: self.done.is_set() or not driver.alive)

    def _after_restore(self, driver: Driver) -> None:
        """The world's own view after `driver` started: what is consumed and not trained is
        in flight (the dataloader and the trainer were restored; the coordinator is not
        read). From now on the world reacts to `driver`'s state."""
        trained = {prompt for prompt, _ in self.trainer.trained_items()}
        queued = {g.prompt_id for g in self.plane.queued()}
        consumed = {p for p in range(self.plane.position) if p not in trained}
        self.open = consumed
        self.pushed = trained | queued
        self._view_of = driver

    def restored(self, report: RestoreReport) -> None:
        """Hook, called once per controller start that restored (`report`): the world has
        rebuilt its view of what is in flight and queued, and reacts to the controller's
        state right after this returns. Nothing here; a subclass may report it."""

    async def settle(self, driver: Driver) -> None:
        """Hook, awaited once the data is used up and before `driver` stops cleanly: the
        world no longer reacts (the periodic trigger still runs). Nothing here; a subclass
        may give the controller time to finish what it still owes."""

    def crashed(self) -> None:
        """Hook, called right after the world crashed the controller (`crash_at_step`).
        Nothing here; a subclass may report it."""

    def _finish(self, reason: str | None, driver: Driver) -> None:
        if self.done.is_set():
            return
        self.stop_reason = reason
        self.done.set()
        driver.recheck()  # wake `_until_done_or_crash`

    async def _time_limit(self, deadline_at: float) -> None:
        await self.clock.sleep_until(deadline_at)
        if self.driver is not None:
            self._finish("time_limit", self.driver)

    # ------------------------------------------------------------------ the world

    def _observe(
        self, event: ControllerInput, effects: tuple[ControllerEffect, ...], state: ControllerState
    ) -> None:
        tally = self.tally
        if isinstance(event, RolloutCompleted):
            tally.completions += 1
        elif isinstance(event, TrainerBoundary):
            self.boundaries -= 1
        restoring = any(isinstance(e, RestoreOutcome) for e in effects)
        for effect in effects:
            if isinstance(effect, Dispatch):
                tally.dispatched += 1
            elif isinstance(effect, Redispatch) and not restoring:
                tally.retried_live += 1
            elif isinstance(effect, Metric) and effect.name == "checkpoint.admission_closed_s":
                tally.admission_closed.append(round(effect.value, 6))
            elif isinstance(effect, Outcome):
                if effect.result == "completed":
                    tally.completed += 1
                elif effect.result == "skipped":
                    tally.skipped += 1
                else:
                    tally.failed += 1
        before, after = self.phase, state.phase
        if after is not before:
            if after is _S.ABORTING:
                if before is _S.ABORT_PENDING:
                    tally.abort_retried += 1
                else:
                    tally.aborted += 1
            elif after is _S.RELEASING and before is _S.RELEASE_PENDING:
                tally.release_retried += 1
        self.phase = after
        if self.driver is not None and self.driver.alive:
            self._maybe_crash(effects, state)
            if self.driver.alive:
                self._react(state)

    def _react(self, state: ControllerState) -> None:
        driver = self.driver
        if driver is None or not driver.alive or self.done.is_set():
            return
        if driver is not self._view_of:
            # Still starting: until `_after_restore` rebuilt the view for this controller,
            # `pushed` and `open` describe a previous one, and pushing a finished group the
            # restored queue holds already would train it twice. `_controller` catches up.
            return
        if state.phase is _S.STOPPED:
            self._finish(driver.stopped.reason if driver.stopped else "stopped", driver)
            return
        for group in state.ledger.groups:
            if group.state is GroupState.READY_TO_FINALIZE:
                prompt = _prompt(group)
                if prompt not in self.pushed:
                    self.pushed.add(prompt)
                    size = group.size
                    self.plane.push_finished(
                        FinishedGroup(prompt_id=prompt, siblings=tuple(range(size)))
                    )
        if self._trainable():
            self.wake_trainer.set()
        # The dataloader produces only while admission is open (the gate is closed for
        # checkpoints, weight syncs and train switches).
        if state.gate.state is GateState.OPEN:
            while len(self.open) < self.window and self.plane.position < self.budget:
                prompt = self.plane.next_prompt()
                self.open.add(prompt)
                agent = self.agents[prompt % len(self.agents)]
                driver.submit(
                    GroupOpened(group_id(prompt), self.cfg.group_size, agent, str(prompt))
                )
        if (
            self.plane.position >= self.budget
            and not self.open
            and not self.plane.queued()
            and not self.training
            and self.boundaries == 0
            and state.phase is _S.IDLE
        ):
            self._finish(None, driver)

    def _trainable(self) -> bool:
        queued = len(self.plane.queued())
        exhausted = self.plane.position >= self.budget
        # Full batches; the remainder once nothing else can join it.
        return queued >= self.cfg.groups_per_step or (exhausted and 0 < queued == len(self.open))

    async def _trainer_loop(self, driver: Driver) -> None:
        while driver.alive and not self.done.is_set():
            if not self._trainable():
                self.wake_trainer = self.clock.event()
                await self.wake_trainer.wait()
                continue
            if (self.phase in _BUSY or self.boundaries) and not self.races(self.phase):
                # The trainer checkpoints at its boundary: the next optimizer step waits
                # for the snapshot of this one (a periodic one may still race it: S9).
                await driver.wait_for(
                    lambda s: (
                        (s.phase not in _BUSY and not self.boundaries)
                        or self.races(s.phase)
                        or not driver.alive
                    )
                )
                continue
            if self.phase in _BUSY:
                self.raced()
            groups = self.plane.take_finished(self.cfg.groups_per_step)
            self.training = True
            # A step that moves the trainer's anchor ends with its own checkpoint write
            # (every step at save_period 1, checkpointing on or off), before the boundary:
            # nothing of it overlaps the participants' snapshot.
            saves = (self.trainer.step + 1) % self.trainer.checkpoint_every == 0
            self.trainer.begin_optimizer_step(groups)
            driver.submit(OptimizerStepBegin())
            await self.clock.sleep(self.cfg.latency.train_step(len(groups), saves=saves))
            if not driver.alive:
                return
            in_flight = self.open - {g.prompt_id for g in groups}
            batch = self.trainer.finish_optimizer_step(
                dataloader_position=self.plane.low_watermark(in_flight)
            )
            for group in groups:
                self.open.discard(group.prompt_id)
            self.training = False
            driver.submit(OptimizerStepEnd(batch.step))
            if self.progress is not None:
                self.progress(batch.step)
            for group in groups:
                driver.submit(GroupTrained(group_id(group.prompt_id)))
            if self.cfg.checkpointing:
                self.boundaries += 1
                driver.submit(TrainerBoundary(batch.step))

    async def _periodic(self, driver: Driver) -> None:
        interval = self.protocol.snapshot_attempt_interval_s
        while driver.alive:
            await self.clock.sleep(interval)
            driver.submit(PeriodElapsed())

    def _maybe_crash(self, effects: tuple[ControllerEffect, ...], state: ControllerState) -> None:
        """Crash right after a completed checkpoint at or after `crash_at_step` whose
        snapshot matches the trainer anchor while rollouts are in flight."""
        target = self.crash_step
        if not self.crash_pending or target is None:
            return
        for effect in effects:
            if not isinstance(effect, Outcome) or effect.result != "completed":
                continue
            step = effect.checkpoint_id.step
            anchor = self.trainer.anchor()
            in_flight = bool(state.ledger.unfinished_groups())
            if step >= target and step == anchor.step and in_flight:
                if self.defer_crash():
                    return
                self.crash_pending = False
                self.crash_now()
                return

    def races(self, phase: CheckpointState) -> bool:
        """Hook, asked while a checkpoint is in `phase`: True lets the trainer begin an
        optimizer step now rather than wait for the checkpoint to end. Never, here."""
        return False

    def raced(self) -> None:
        """Hook, called when the trainer begins an optimizer step during a checkpoint."""

    def defer_crash(self) -> bool:
        """Hook, asked when the crash is due: True puts it off to the next checkpoint that
        qualifies. Nothing here; a subclass may take one more snapshot first."""
        return False

    def crash_now(self) -> None:
        """The controller process dies now (the first crash's step is `crashed_at`)."""
        if self.crashed_at is None:
            self.crashed_at = self.trainer.step
        assert self.driver is not None
        self.driver.crash()
        self.crashed()


def _recording(factory: CoordinatorFactory, rows: RowLog) -> CoordinatorFactory:
    """`factory`, with every table of the coordinators it builds noting into `rows` the
    rows that fire (the same steps: a recording table re-selects the row it fires)."""

    def build(config: QuiesceConfig) -> Coordinator:
        coordinator = factory(config)
        coordinator.checkpoint = recording(coordinator.checkpoint, rows)
        coordinator.gate = recording(coordinator.gate, rows)
        coordinator.deadlines = recording(coordinator.deadlines, rows)
        coordinator.restore = recording(coordinator.restore, rows)
        coordinator.call = recording(coordinator.call, rows)
        return coordinator

    return build


def _faults(config: SimulationConfig) -> Faults:
    if config.restart_rate is None:
        return Faults(rate=config.fault_rate)
    return Faults(rate=config.fault_rate, kinds=CALL_FAULTS, restart_rate=config.restart_rate)


class _Run(_World):
    """One simulated run: the world around one controller (and its successor) on the
    in-memory fleet, and the oracle that judges it."""

    def __init__(
        self,
        config: SimulationConfig,
        clock: Clock,
        root: Path,
        progress: Callable[[int], None] | None = None,
        *,
        coordinator_factory: CoordinatorFactory = Coordinator,
        observers: Sequence[Observer] = (),
        metrics: Sequence[MetricHook] = (),
        fence_file: FileFenceLog | None = None,
        recorder: RunRecorder | None = None,
    ) -> None:
        where = "fence log" if config.fence_log is None else str(config.fence_log)
        self.judging = JudgingFenceLog(where) if config.validate_fences else None
        self.recorder = recorder
        # Scenario faults and coverage: nothing of them exists in a run that asks for
        # neither, so such a run draws and does exactly what it always did.
        self.rows = RowLog() if config.coverage else None
        self.watch = (
            ScenarioWatch(frozenset(config.inject), config.seed, clock.now, self.rows)
            if config.inject or config.coverage
            else None
        )
        watching = self.watch if config.coverage else None
        sinks = tuple(
            sink for sink in (fence_file, self.judging, recorder, watching) if sink is not None
        )
        latency = config.latency
        self.fleet = InMemoryFleet(
            clock,
            policies=config.policies,
            agents=config.agents,
            resources=config.resources,
            resources_modes=(config.resources_mode,),
            group_scored=config.group_scored,
            group_size=config.group_size,
            latency_s=latency.control_call_s,
            faults=_faults(config),
            work=WorkConfig(
                policy_latency_s=latency.policy_call_s,
                mutation_latency_s=latency.tool_call_s,
                retry_backoff_s=0.05,
                max_service_retries=10_000,
            ),
            fence_log=TeeFenceLog(*sinks) if sinks else None,
        )
        if latency.snapshot_write_s[1] > 0:
            # The participants that export their state write a snapshot artifact at commit.
            for name, client in self.fleet.clients.items():
                if self.fleet.configs[name].recovery_mode == "export_restore":
                    client.service_s = {ParticipantOp.COMMIT: latency.snapshot_write_s}
        trainer = InMemoryTrainer()
        if recorder is not None:
            recorder.attach(clock, self.fleet, config.group_size)
            observers = (*observers, recorder.observe)
        participants: Mapping[str, Participant] = self.fleet.participants
        watch = self.watch
        if watch is not None:
            heard = self.fleet.on_fault

            def on_fault(participant: str, op: str, kind: Any) -> None:
                if heard is not None:
                    heard(participant, op, kind)
                watch.fault(participant, op, kind)

            self.fleet.on_fault = on_fault
            if watch.injects(ScenarioFault.RESTORE_DIGEST_MISMATCH):
                participants = {
                    name: TamperingParticipant(client, watch)
                    for name, client in participants.items()
                }
            if self.rows is not None:
                coordinator_factory = _recording(coordinator_factory, self.rows)
        super().__init__(
            config,
            clock,
            root,
            protocol=QuiesceConfig(
                **latency.protocol(),  # the timers fitted to the profile's latencies
                save_period=1,
                max_consecutive_failures=3,
                keep_latest_k=2,
                rollout_recovery={"target_level": config.target_level},
            ),
            participants=participants,
            depends_on=self.fleet.depends_on(),
            trainer=trainer,
            plane=InMemoryDataPlane(trainer),
            observers=observers,
            metrics=metrics,
            progress=progress,
            coordinator_factory=coordinator_factory,
        )
        # Long enough for a group's deadline to retire an orphan and for two periodic
        # checkpoints to flush an ACK a fault lost.
        protocol = self.protocol
        self.settle_s = protocol.rollout_timeout_s + 2 * protocol.snapshot_attempt_interval_s
        if config.restarts and self.crash_step is None:
            # A fault that needs a restart and no crash asked for: crash at mid-run, as
            # `crash_at_step` would.
            self.crash_step = max(1, config.steps // 2)
            self.crash_pending = True
        self.conflict_pending = ScenarioFault.CONFLICT in config.inject
        self.intent_crash_pending = ScenarioFault.PREPARING_INTENT_CRASH in config.inject
        self.duplicate_pending = ScenarioFault.DUPLICATE_SNAPSHOT in config.inject
        self.corruption_pending = ScenarioFault.STAGING_CORRUPTION in config.inject
        self.forge_pending = ScenarioFault.FORGED_RECEIPT in config.inject
        self.race_pending = ScenarioFault.OPTIMIZER_RACE in config.inject
        # staging-corruption strikes the first or the second validated attempt (the seed's).
        self.corrupt_after = 0 if watch is None else watch.rng.randrange(2)
        if watch is not None:
            watch.published = self._published
            watch.anchor = self._anchor

    async def main(self) -> None:
        """Run the fleet and controllers until the run is done: a crashed controller's
        successor starts from the durable store alone."""
        async with self.clock.task_group() as tg:
            tg.start_soon(self.fleet.run, name="fleet")
            crashed = True
            while crashed:
                crashed = await self._controller()
            self.fleet.stop()

    def _new_driver(self) -> Driver:
        driver = super()._new_driver()
        self.fleet.on_completed = driver.completed
        if self.forge_pending:
            self.fleet.on_completed = functools.partial(self._completed_then_forge, driver)
        if self.recorder is not None:
            self.recorder.controller_started()
        if self.watch is not None:
            self.watch.starting()
            if self.crashed_at is not None:
                self.watch.arm_restore_tamper()
        return driver

    def restored(self, report: RestoreReport) -> None:
        if self.watch is not None:
            fleet = None if self.driver is None else self.driver.state.fleet
            self.watch.restored(report, "" if fleet is None else fleet.fingerprint)

    def _published(self) -> list[Candidate]:
        """The store's published snapshots as M9 matches them, read from their manifests
        (a snapshot that does not verify is no candidate)."""
        candidates: list[Candidate] = []
        for name in self.store.published():
            try:
                manifest = self.store.verify(name)
            except Exception:  # unverifiable or unparsable: never a candidate
                continue
            candidates.append(
                Candidate(
                    parse_checkpoint_id(name),
                    manifest.trainer_step,
                    str(manifest.trainer_version),
                    manifest.topology_fingerprint,
                )
            )
        return candidates

    def _anchor(self) -> tuple[int, str]:
        anchor = self.trainer.anchor()
        return anchor.step, str(anchor.version)

    # ------------------------------------------------------------------ scenario faults

    def _observe(
        self, event: ControllerInput, effects: tuple[ControllerEffect, ...], state: ControllerState
    ) -> None:
        before = self.phase
        super()._observe(event, effects, state)
        watch = self.watch
        if watch is None:
            return
        watch.observe(event, effects, state)
        if isinstance(event, LocalDone) and event.op is LocalOp.PUBLISH:
            # I8 at the moment of publication (a pruned snapshot is gone by the end).
            name = str(event.checkpoint_id)
            try:
                self.store.verify(name)
            except Exception as error:  # any failure to verify is the finding
                watch.unverified.append(f"snapshot {name} published but does not verify: {error}")
            if name == watch.raced:
                watch.unverified.append(
                    f"snapshot {name} published although the trainer began an optimizer step "
                    "between its commit and its capture: S9"
                )
        driver = self.driver
        if driver is None or not driver.alive:
            return
        if self.conflict_pending and before is _S.IDLE and state.phase is _S.CLOSING_ADMISSION:
            self.conflict_pending = False
            self._fence_by_a_ghost(state)
        if self.corruption_pending:
            for effect in effects:
                if isinstance(effect, Validate):
                    if self.corrupt_after:
                        self.corrupt_after -= 1
                        continue
                    staging = self.store.staging_dir / str(effect.checkpoint_id)
                    if corrupt_one_staged_artifact(staging, watch.rng) is not None:
                        self.corruption_pending = False
                        watch.injected += 1
        if (
            self.intent_crash_pending
            and self.crash_step is not None
            and state.phase is _S.PREPARING
            and isinstance(event, Reply)
            and isinstance(event.result, PrepareReply)
            and state.trainer_step >= self.crash_step
        ):
            # A participant is fenced to the attempt's id, and the intent record says
            # `preparing`: the controller dies here (S18).
            self.intent_crash_pending = False
            watch.injected += 1
            self.crash_now()

    def races(self, phase: CheckpointState) -> bool:
        # optimizer-race: once a checkpoint commits, the trainer's next step goes ahead.
        return self.race_pending and phase is _S.COMMITTING

    def raced(self) -> None:
        self.race_pending = False
        attempt = None if self.driver is None else self.driver.state.attempt
        if self.watch is not None and attempt is not None:
            self.watch.injected += 1
            self.watch.raced = str(attempt.op_id)

    def defer_crash(self) -> bool:
        if not self.duplicate_pending or self.driver is None:
            return False
        # One more snapshot at the same trainer step first: a periodic trigger now.
        self.duplicate_pending = False
        if self.watch is not None:
            self.watch.injected += 1
        self.driver.submit(PeriodElapsed())
        return True

    def _completed_then_forge(self, driver: Driver, participant: str, receipt: Receipt) -> None:
        """`forged-receipt`: the completion goes to the controller, and a forged ACK of it
        to its agent at the same instant (the controller's own ACK takes a call's latency
        to get there)."""
        driver.completed(participant, receipt)
        if self.forge_pending:
            self.fleet.later(0.0, self._forged_ack, participant, receipt, self.clock.now())

    async def _forged_ack(self, participant: str, receipt: Receipt, at: float) -> None:
        """Send the forged ACK; judge the agent's answer only if it came at the instant of
        the completion, when the forged ACK is the only one that can have reached it (a
        later answer is no evidence: the next completion gets the forgery)."""
        key = (receipt.rollout_id, receipt.attempt)
        if not self.forge_pending or self.clock.now() != at or not self._holds(participant, key):
            return
        # One character off: the execution's key, a receipt that is not its own.
        text = receipt.receipt
        forged = text[:-1] + ("0" if text[-1:] != "0" else "1")
        request = AckRequest(receipts=(receipt.model_copy(update={"receipt": forged}),))
        try:
            await self.fleet.hosts[participant].handle(ParticipantOp.ACK, request)
        except (HostStopped, OSError):
            return  # the agent restarted meanwhile
        if self.clock.now() != at:
            return
        self.forge_pending = False
        assert self.watch is not None
        self.watch.forged_ack_answered(
            participant, (*key, text), forged, held=self._holds(participant, key)
        )

    def _holds(self, participant: str, key: tuple[str, int]) -> bool:
        """Does `participant` hold `key`'s completed, un-ACKed result?"""
        role = self.fleet.hosts[participant].state.role
        execution = role.find(key) if isinstance(role, AgentRole) else None
        return execution is not None and execution.state is ExecState.COMPLETED

    def _fence_by_a_ghost(self, state: ControllerState) -> None:
        """`conflict`: a prepare from a controller of an earlier epoch fences one policy
        server, the role prepared first. (A resources server fenced so holds the agents'
        tool calls: the agents are never ready, the attempt fails before it asks resources,
        and the conflict is never seen -- a stall beyond §7 S5, whose fenced participant was
        one the controller had attempted.)"""
        targets = self.fleet.names(Role.POLICY)
        assert self.watch is not None
        self.watch.injected += 1
        name = targets[self.watch.rng.randrange(len(targets))]
        ghost = OpId(state.epoch - 1, 1_000_000, state.trainer_step)
        request = ControlRequest(op_id=ghost, deadline_at=self.clock.now() + 3600.0)
        self.fleet.later(0.0, self._ghost_prepare, name, request)

    async def _ghost_prepare(self, name: str, request: ControlRequest) -> None:
        with contextlib.suppress(HostStopped, OSError):
            await self.fleet.hosts[name].handle(ParticipantOp.PREPARE, request)

    def crashed(self) -> None:
        if self.recorder is not None:
            self.recorder.controller_crashed(self.trainer.step)

    async def settle(self, driver: Driver) -> None:
        """I9 is a goal "with no further faults": stop the faults and give the controller
        `settle_s` virtual seconds to be idle with nothing left on any agent. A run that is
        there already does not wait (its figures stay the run's); a controller that stops
        meanwhile ends the run as stopped."""

        def settled(state: ControllerState) -> bool:
            held = self._held_executions()
            return state.phase is _S.STOPPED or (state.phase is _S.IDLE and not held)

        if not settled(driver.state):
            for client in self.fleet.clients.values():
                client.faults = Faults()
            with self.clock.move_on_at(self.clock.now() + self.settle_s):
                await driver.wait_for(settled)
        if driver.stopped is not None:
            self.stop_reason = driver.stopped.reason

    def _held_executions(self) -> list[HeldExecution]:
        """Every execution an agent still holds (acked and tombstoned ones are gone)."""
        return [
            HeldExecution(name, execution.data.rollout_id, execution.data.attempt, execution.state)
            for name, host in sorted(self.fleet.hosts.items())
            if isinstance(role := host.state.role, AgentRole)
            for execution in role.executions
        ]

    # ------------------------------------------------------------------ the oracle

    def result(self, virtual_seconds: float) -> SimulationResult:
        lineage = self.trainer.lineage()
        counts = Counter(item for batch in lineage for item in batch.items)
        duplicated = sum(n - 1 for n in counts.values() if n > 1)
        trained = set(counts)
        size = self.cfg.group_size
        consumed = range(self.plane.position)
        in_flight = self.open if self.stop_reason is not None else set()
        lost = sum(
            1
            for prompt in consumed
            if prompt not in in_flight
            for sibling in range(size)
            if (prompt, sibling) not in trained
        )
        violations: list[str] = []
        if lost:
            violations.append(f"lost: {lost} consumed items neither trained nor in flight")
        if duplicated:
            violations.append(f"duplicated: {duplicated} items trained more than once")
        for name in self.store.published():
            try:
                self.store.verify(name)
            except Exception as error:  # a published snapshot must always verify (I8)
                violations.append(f"published snapshot {name} does not verify: {error}")
        stopped = self.stop_reason not in (None, "time_limit")
        held = self._held_executions()
        if self.stop_reason is None:
            if self.journal.read_intent() is not None:
                violations.append("the intent record was not cleared at the end (I3)")
            for name, host in self.fleet.hosts.items():
                if host.state.fence.state.value != "idle":
                    violations.append(f"{name} is still fenced at the end (I7)")
            violations.extend(live_execution_violations(held))
        if self.stop_reason == "time_limit":
            violations.append("the run did not finish within the virtual time limit (I7)")
        faults_injected = sum(sum(c.fault_counts.values()) for c in self.fleet.clients.values())
        untrained = untrained_groups(
            consumed=self.plane.position,
            group_size=size,
            trained=trained,
            ledger=self.driver.state.ledger if self.driver is not None else Ledger(),
            held=held,
            ended_early=self._ended_early(),
        )
        scenario_faults = 0 if self.watch is None else self.watch.injected
        violations.extend(
            progress_violations(untrained, faults=faults_injected + scenario_faults > 0)
        )
        if self.watch is not None:
            violations.extend(self.watch.violations(self.tally.restores))
        refinement = self._refinement()
        if refinement is not None and refinement.unmapped is not None:
            violations.append(f"refinement: {refinement.unmapped.explain()}")
        closed = self.tally.admission_closed
        tally = self.tally
        restores = [
            {
                "kind": r.kind,
                "snapshot_id": r.snapshot_id,
                "intent": r.intent,
                "rejected": [list(x) for x in r.rejected],
                "redispatched": r.redispatched,
                "released_orphans": r.released_orphans,
            }
            for r in tally.restores[1:]  # the first start restores nothing of this run
        ]
        metrics = [r.metrics for r in tally.restores]
        whole = sum(m.groups_rerun_whole + m.groups_rerun_group_scored for m in metrics)
        return SimulationResult(
            seed=self.cfg.seed,
            steps=self.trainer.step,
            checkpoints=CheckpointCounts(
                completed=tally.completed,
                skipped=tally.skipped,
                failed=tally.failed,
                aborted=tally.aborted,
                release_retried=tally.release_retried,
                abort_retried=tally.abort_retried,
            ),
            rollouts=RolloutCounts(
                dispatched=tally.dispatched,
                completed=tally.completions,
                trained=sum(counts.values()),
                lost=lost,
                duplicated=duplicated,
                redispatched=sum(r.redispatched for r in tally.restores),
                resumed_from_turn=sum(m.siblings_resumed_from_turn for m in metrics),
                rerun_from_scratch=sum(m.siblings_rerun_from_scratch for m in metrics)
                + whole * size,
                retried_live=tally.retried_live,
            ),
            admission_closed_s=Quantiles(
                median=round(statistics.median(closed), 6) if closed else 0.0,
                max=round(max(closed), 6) if closed else 0.0,
            ),
            restores=restores,
            faults_injected=faults_injected,
            participant_restarts=sum(self.fleet.restarts.values()),
            crashed_at_step=self.crashed_at,
            virtual_seconds=round(virtual_seconds, 6),
            invariants_ok=not violations,
            violations=violations,
            untrained=untrained,
            stopped=stopped,
            stop_reason=self.stop_reason,
            stop=self.witness.cause if stopped else None,
            refinement=None if refinement is None else refinement.describe(),
            verdict="violated" if violations else "stopped" if stopped else "ok",
            coverage=None if self.watch is None or not self.cfg.coverage else self.watch.coverage(),
        )

    def _refinement(self) -> LogVerdict | None:
        """The run's fence log judged against the design (None: not asked for)."""
        return None if self.judging is None else self.judging.judge.verdict()

    def _ended_early(self) -> str | None:
        """Why work may still be in flight at the end (None: the run used up its data)."""
        if self.stop_reason is None:
            return None
        if self.stop_reason == "time_limit":
            return f"the virtual time limit ({self.cfg.time_limit:g} s) ran out"
        return f"the controller stopped ({self.stop_reason})"


async def run_simulation(
    config: SimulationConfig,
    progress: Callable[[int], None] | None = None,
    *,
    coordinator_factory: CoordinatorFactory = Coordinator,
    observers: Sequence[Observer] = (),
    metrics: Sequence[MetricHook] = (),
    recorder: RunRecorder | None = None,
) -> SimulationResult:
    """Run one simulation inside a running anyio loop (asyncio or trio); `progress(step)`
    is called after every optimizer step; `coordinator_factory` builds each controller
    process's coordinator (a test plants a controller bug there); every `observers` entry
    sees each step of every controller process (a benchmark collects its figures there);
    every `metrics` hook gets each metric point (docs/metrics.md); `recorder` records the
    run's timeline for `render_report`."""
    clock = VirtualClock(seed=config.seed)
    run_in = functools.partial(
        _run_in,
        config,
        clock,
        progress=progress,
        factory=coordinator_factory,
        observers=observers,
        metrics=metrics,
        recorder=recorder,
    )
    if config.snapshot_dir is not None:
        config.snapshot_dir.mkdir(parents=True, exist_ok=True)
        return await run_in(config.snapshot_dir)
    with tempfile.TemporaryDirectory(prefix="quiesce-sim-") as tmp:
        return await run_in(Path(tmp))


async def _run_in(
    config: SimulationConfig,
    clock: VirtualClock,
    root: Path,
    *,
    progress: Callable[[int], None] | None,
    factory: CoordinatorFactory,
    observers: Sequence[Observer],
    metrics: Sequence[MetricHook],
    recorder: RunRecorder | None,
) -> SimulationResult:
    with contextlib.ExitStack() as closing:
        fence_file = (
            None
            if config.fence_log is None
            else closing.enter_context(FileFenceLog(config.fence_log, append=False))
        )
        run = _Run(
            config,
            clock,
            root,
            progress,
            coordinator_factory=factory,
            observers=observers,
            metrics=metrics,
            fence_file=fence_file,
            recorder=recorder,
        )
        await clock.run(run.main)
    result = run.result(clock.now())
    if recorder is not None:
        recorder.finish(result.model_dump(mode="json"))
    return result


def simulate(
    config: SimulationConfig | None = None,
    *,
    backend: Literal["asyncio", "trio"] = "asyncio",
    progress: Callable[[int], None] | None = None,
    coordinator_factory: CoordinatorFactory = Coordinator,
    observers: Sequence[Observer] = (),
    metrics: Sequence[MetricHook] = (),
    recorder: RunRecorder | None = None,
    **overrides: Any,
) -> SimulationResult:
    """Run a simulation to completion (blocking) and return its result.

    `config` and `overrides` are the `SimulationConfig`; `coordinator_factory` builds each
    controller process's `Coordinator` (default: the real one); `observers` see every step
    of every controller process (`Driver` observers); `metrics` hooks get every metric
    point (`OpenTelemetryMetrics`, docs/metrics.md); `recorder` (a `RunRecorder`) records
    the timeline `render_report` draws.

    >>> result = simulate(steps=2, groups_per_step=2, group_size=2, seed=1)
    >>> (result.verdict, result.rollouts.lost, result.rollouts.duplicated, result.untrained.count)
    ('ok', 0, 0, 0)
    """
    cfg = config or SimulationConfig(**overrides)
    if config is not None and overrides:
        cfg = config.model_copy(update=overrides)
    run = functools.partial(
        run_simulation,
        coordinator_factory=coordinator_factory,
        observers=observers,
        metrics=metrics,
        recorder=recorder,
    )
    result: SimulationResult = anyio.run(run, cfg, progress, backend=backend)
    return result
