"""The *real* runtime stepped one command at a time: driver, in-memory fleet, virtual clock.

What lives here: `SystemRun`, one running controller (the anyio `Driver` over the pure
coordinator) on an `InMemoryFleet`, a `SnapshotStore`, a `ControllerJournal` and an
in-memory trainer and data plane, all on one `VirtualClock`, stepped *synchronously* one
command at a time (the environment actions of PROTOCOL.md §8: open groups, let time run,
triggers, optimizer steps, train switch and weight sync, faults on the next control call,
participant and controller crashes with restore), and the checks of every run: §5's
invariants and refinement. What it does not know: which commands to run
(`_system_machine`'s Hypothesis rules draw them; a test may script them).

The bridge (Hypothesis has no async stateful machines). The whole anyio program runs as one
task of a private asyncio loop that nobody else drives; its first managed task is a
*director* that waits for commands on an `asyncio.Queue`. Awaiting a non-clock primitive
counts as *running* for the virtual kernel, so while the director waits every other task
is frozen and virtual time stands still. A command (a machine's rule) goes on the queue and
the loop runs until that command's future resolves (`loop.run_until_complete`): the director
executes it (e.g. `await clock.sleep(dt)`, during which the kernel runs every task due
before `now + dt`), and parks again. No thread, no real timer: given the drawn seed and
rules, every run is identical, so Hypothesis can shrink and replay it.

The invariants (PROTOCOL.md §5) are checked by `check()` (the machine calls it after every
rule) against an *independent* ledger: what the world itself recorded (the trainer's
lineage, the dataloader's consumption, the sizes of the groups it opened, the train switch
and weight sync it began),
the participants' own records (fences, high-watermarks), the durable stores (intent
record, published snapshots), a log of every control call as the participants' clients
saw it, and the inputs and effects at the coordinator's boundary (the records are
`quiesce.models.refinement._system_ledger`'s). The coordinator's own
bookkeeping (its ledger, gate, registry) is never the evidence; its phase only says *when*
a property is due ("once the controller is idle").

- I1 nothing completed lost: after the final drain, every consumed `(prompt, sibling)` is
  in the trainer's lineage.
- I2 nothing trained twice: no `(prompt, sibling)` in two batches of the lineage; no
  `(rollout, attempt)` begun twice successfully by one controller.
- I3 publish-or-abort: whenever the controller is idle, the intent record is clear, every
  fence is idle, and every participant a `prepare(X)` was sent to retired X
  (high-watermark >= X): X was released or aborted, never left hanging.
- I4 gates: no `Dispatch` while an owner holds admission (the world's train switch or
  weight sync, or a checkpoint: the durable intent record); no deadline expiry (a deadline
  `TimerDue` that retries a group) while a holder holds the deadlines.
- I5 phase order (§3): within one controller, one id and one op, no call to a later role
  starts before the first call to an earlier role, nor while one is still in flight.
- I6 bounded calls: every call ended by its deadline, and no deadline lies further than
  `max(prepare_timeout_s, control_timeout_s)` past the call's start.
- I7 progress: at the end (`drain()`) the faults stop and the world drains; the controller
  must reach `idle` with admission open and every consumed prompt trained, or stop with
  `max_consecutive_failures` (no fault here is fatal), within a virtual time limit.
- I8 consistent snapshot: every published snapshot verifies, and its id, manifest and
  controller cut name one trainer step.

Refinement (PROTOCOL.md §8, "Two levels of model"), on by default (`refine=False` turns it
off): every request a participant handles, in every incarnation, is judged as it happens
against the design model by the fence-log validator (`_log_validation.JudgingFenceLog`,
the very check `quiesce validate` and `simulate` run), so each fence move must map to one
design step or stutter. At the next `check()`, the first move that maps to none breaks
`refinement`, named with its participant, request and both fences. It catches what no
invariant above sees: a fence move the design never makes (a resume left unrecorded, a
watermark lowered) on a run whose records all still add up.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from quiesce.adapters import (
    CUT_ARTIFACT,
    ControllerCut,
    ControllerJournal,
    Driver,
    FaultKind,
    FinishedGroup,
    InMemoryDataPlane,
    InMemoryFleet,
    InMemoryTrainer,
    Participant,
    SnapshotStore,
    SnapshotStoreError,
    TaskGroup,
    VirtualClock,
    WorkConfig,
    parse_checkpoint_id,
)
from quiesce.check import UnsupportedOption
from quiesce.fsm import QuiesceError
from quiesce.models.implementation import Hooks
from quiesce.models.oracles import SPEC_PHASE_ORDER
from quiesce.models.refinement._log_validation import JudgingFenceLog
from quiesce.models.refinement._refined_model import REFINEMENT
from quiesce.models.refinement._system_ledger import (
    CallLog,
    CallRecord,
    LoggedParticipant,
    SystemViolation,
    World,
)
from quiesce.protocol import OpId, QuiesceConfig
from quiesce.protocol.controller import (
    ControllerEffect,
    ControllerInput,
    ControllerState,
    GroupOpened,
    GroupTrained,
    OptimizerStepBegin,
    OptimizerStepEnd,
    TrainerBoundary,
    TrainSwitchBegin,
    TrainSwitchEnd,
    WeightSyncBegin,
    WeightSyncEnd,
)
from quiesce.protocol.controller.lowlevel import (
    Dispatch,
    GroupRecord,
    Redispatch,
    TimerDue,
    restore_active,
)
from quiesce.protocol.machines import (
    CheckpointState,
    GateState,
    GroupState,
    group_of_timer,
)
from quiesce.protocol.participant import ParticipantOp, from_journal
from quiesce.protocol.wire import Role

__all__ = ["SystemRun", "system_config"]

T = TypeVar("T")

_EPSILON = 1e-9


def _scratch_dir() -> str | None:
    """A RAM-backed directory when there is one: the machine checks the protocol, not
    the disk, and fsyncs to a real disk would cost most of its time."""
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None


def system_config(rollout_timeout_s: float) -> QuiesceConfig:
    """The protocol's configuration in a `SystemRun`, its rollout deadline `rollout_timeout_s`."""
    return QuiesceConfig(
        rollout_timeout_s=rollout_timeout_s,
        prepare_timeout_s=5.0,
        control_timeout_s=2.0,
        prepare_retry_interval_s=0.2,
        snapshot_attempt_interval_s=4.0,
        save_period=1,
        max_consecutive_failures=3,
        keep_latest_k=1000,  # I3 and I8 look at every snapshot ever published
    )


class SystemRun:
    """One controller and its world on a virtual clock, stepped one command at a time.

    Every public method runs to completion before it returns (virtual time advances only
    inside `advance` and the waits of `start`, `restart_controller` and `drain`). Call
    `check()` to test I2-I6, I8 and refinement now, `drain()` at the end for I1 and I7,
    and `close()`. `refine=False` leaves the participants' fence moves unjudged.

    >>> from quiesce.adapters import configure_logging
    >>> configure_logging("critical")
    >>> run = SystemRun(seed=1)
    >>> run.open_group(2); run.advance(3.0); run.check()
    >>> run.drain()
    >>> sorted(run.trainer.trained_items())
    [(0, 0), (0, 1)]
    >>> run.close()
    """

    def __init__(
        self,
        seed: int = 0,
        *,
        config: QuiesceConfig | None = None,
        hooks: Hooks | None = None,
        turns: int = 3,
        agents: int = 1,
        refine: bool = True,
    ) -> None:
        self.config = config or system_config(30.0)
        self.hooks = hooks or Hooks()
        if self.hooks.recover is not from_journal:
            # The in-memory hosts recover from their journal by the protocol's own code.
            raise UnsupportedOption(
                "system_machine",
                "mutant",
                "journal recovery runs in the protocol model only "
                "(quiesce check --mutant NAME); give this machine table hooks",
            )
        self.turns = turns
        self.clock = VirtualClock(seed=seed)
        self.fence_log = JudgingFenceLog("the machine's fence log") if refine else None
        self.root = Path(tempfile.mkdtemp(prefix="quiesce-machine-", dir=_scratch_dir()))
        self.fleet = InMemoryFleet(
            self.clock,
            policies=1,
            agents=agents,
            resources=1,
            latency_s=(0.001, 0.004),
            work=WorkConfig(policy_latency_s=(0.05, 0.2), max_service_retries=100_000),
            fence_log=self.fence_log,
            rules=self.hooks.participant,
        )
        self.log = CallLog(self.clock.now)
        self.participants: dict[str, Participant] = {
            name: LoggedParticipant(client, self.fleet.configs[name].role, self.log)
            for name, client in self.fleet.clients.items()
        }
        self.trainer = InMemoryTrainer()
        self.plane = InMemoryDataPlane(self.trainer)
        self.store = SnapshotStore(self.root / "snapshots")
        self.journal = ControllerJournal(self.root / "controller")
        self.world = World()
        self.driver: Driver | None = None
        self._verified: set[str] = set()
        self._tg: TaskGroup | None = None
        self._loop = asyncio.new_event_loop()
        self._commands: asyncio.Queue[
            tuple[Callable[[], Awaitable[Any]] | None, asyncio.Future[Any]]
        ] = asyncio.Queue()
        self._main = self._loop.create_task(self.clock.run(self._director))
        self._closed = False
        self._do(self._start_controller)

    @property
    def calls(self) -> list[CallRecord]:
        """Every control call so far, as the participants' clients saw it (the call log)."""
        return self.log.calls

    @property
    def generation(self) -> int:
        """The running controller's number: 1 for the first, +1 per restart."""
        return self.log.generation

    # ------------------------------------------------------------------ the bridge

    async def _director(self) -> None:
        async with self.clock.task_group() as tg:
            self._tg = tg
            tg.start_soon(self.fleet.run, name="fleet")
            while True:
                command, future = await self._commands.get()
                if command is None:
                    future.set_result(None)
                    break
                try:
                    result = await command()
                except Exception as error:  # handed to the rule that sent the command
                    future.set_exception(error)
                else:
                    future.set_result(result)
            if self.driver is not None:
                self.driver.stop()
            self.fleet.stop()

    def _do(self, command: Callable[[], Awaitable[T]]) -> T:
        """Run one command in the director and return its result (or raise its error)."""
        if self._closed:
            raise QuiesceError("this SystemRun is closed; create a new one")
        future: asyncio.Future[T] = self._loop.create_future()
        self._commands.put_nowait((command, future))
        waited: set[asyncio.Future[Any]] = {future, self._main}
        done, _ = self._loop.run_until_complete(
            asyncio.wait(waited, return_when=asyncio.FIRST_COMPLETED)
        )
        if future not in done:
            # The clock stopped under the command (a task failed, or a virtual deadlock).
            self._main.result()
            raise QuiesceError("the virtual clock ended before the command finished")
        return future.result()

    def close(self) -> None:
        """Stop every task, close the loop and delete the run's files."""
        if self._closed:
            return
        try:
            if not self._main.done():
                future: asyncio.Future[None] = self._loop.create_future()
                self._commands.put_nowait((None, future))
                self._loop.run_until_complete(asyncio.wait({self._main}))
            if not self._main.cancelled():
                self._main.exception()  # retrieved: a failed clock is reported by its rule
        finally:
            self._closed = True
            self._loop.close()
            shutil.rmtree(self.root, ignore_errors=True)

    # ------------------------------------------------------------------ controller life

    def _new_driver(self) -> Driver:
        driver = Driver(
            self.hooks.coordinator(self.config),
            self.clock,
            self.participants,
            store=self.store,
            journal=self.journal,
            trainer=self.trainer,
            data_plane=self.plane,
            depends_on=self.fleet.depends_on(),
            turns=lambda _dispatch: self.turns,
            has_group=self._trainer_has,
            observers=[self._observe],
        )
        self.fleet.on_completed = driver.completed
        return driver

    def _trainer_has(self, group: GroupRecord) -> bool:
        return any(item[0] == int(group.prompt) for item in self.trainer.trained_items())

    async def _start_controller(self) -> None:
        assert self._tg is not None
        self.log.generation += 1
        # The trainer lives in the controller's process: a switch or sync in progress
        # dies with it, and the new controller starts with none.
        world = self.world
        world.training = None
        world.train_switch = world.weight_sync = world.switch_on = world.sync_on = False
        self.trainer.rollback_to_anchor()  # a (re)starting trainer loads its checkpoint
        driver = self.driver = self._new_driver()
        self._tg.start_soon(driver.run, name=f"driver:{self.generation}")
        with self.clock.move_on_at(self.clock.now() + 600.0):
            await driver.start()
        if driver.restore_report is None:
            self._fail("I7", "the controller did not finish its start within 600 virtual s")
        # The world after a start: what the restored queue and lineage hold is accounted.
        trained = {prompt for prompt, _ in self.trainer.trained_items()}
        self.world.pushed = trained | {g.prompt_id for g in self.plane.queued()}

    def _observe(
        self, event: ControllerInput, effects: tuple[ControllerEffect, ...], state: ControllerState
    ) -> None:
        world = self.world
        if isinstance(event, TrainSwitchBegin | TrainSwitchEnd):
            world.train_switch = isinstance(event, TrainSwitchBegin)
        elif isinstance(event, WeightSyncBegin | WeightSyncEnd):
            world.weight_sync = isinstance(event, WeightSyncBegin)
        starting = self.driver is None or self.driver.restore_report is None
        if not starting:
            self._check_gates(event, effects)
        # The world's trainer side: sealed groups go to the finished queue (the controller
        # publishes them; which prompt they are is the world's own record).
        for group in state.ledger.groups:
            if group.state is GroupState.READY_TO_FINALIZE:
                prompt = int(group.prompt)
                if prompt not in world.pushed and not starting:
                    world.pushed.add(prompt)
                    self.plane.push_finished(
                        FinishedGroup(prompt_id=prompt, siblings=tuple(range(group.size)))
                    )

    def _holders(self) -> list[str]:
        holders = []
        if self.world.train_switch:
            holders.append("train_switch")
        if self.world.weight_sync:
            holders.append("weight_sync")
        if self.journal.read_intent() is not None:
            holders.append("checkpoint")
        return holders

    def _check_gates(self, event: ControllerInput, effects: tuple[ControllerEffect, ...]) -> None:
        """I4, at the coordinator's boundary, against who the world knows holds what."""
        holders = self._holders()
        if not holders:
            return
        dispatched = [e for e in effects if isinstance(e, Dispatch)]
        if dispatched:
            self._fail(
                "I4",
                f"{dispatched[0].rollout_id}#{dispatched[0].attempt} dispatched at "
                f"t={self.clock.now():.3f} while {holders} hold admission",
            )
        deadline_holders = [h for h in holders if h != "weight_sync"]
        if (
            deadline_holders
            and isinstance(event, TimerDue)
            and group_of_timer(event.name) is not None
            and any(isinstance(e, Redispatch) for e in effects)
        ):
            self._fail(
                "I4",
                f"the deadline of {group_of_timer(event.name)} expired at "
                f"t={self.clock.now():.3f} while {deadline_holders} hold the deadlines",
            )

    def _fail(self, invariant: str, detail: str) -> None:
        self.world.violations.append(SystemViolation(invariant, detail))

    # ------------------------------------------------------------------ the world's actions

    @property
    def state(self) -> ControllerState:
        """The controller's state now (for preconditions and reports only)."""
        assert self.driver is not None
        return self.driver.state

    def _submit(self, event: ControllerInput) -> None:
        assert self.driver is not None
        self.driver.submit(event)

    def _open_next(self, size: int) -> None:
        prompt = self.plane.next_prompt()
        size = self.world.sizes.setdefault(prompt, size)
        self.world.budget = max(self.world.budget, prompt + 1)
        agents = self.fleet.names(Role.AGENT)
        agent = agents[prompt % len(agents)]
        self._submit(GroupOpened(f"p{prompt}", size, agent, str(prompt)))

    def _now(self, act: Callable[..., T], *args: Any) -> T:
        """Run the plain `act(*args)` as one command in the director."""

        async def command() -> T:
            return act(*args)

        return self._do(command)

    def open_group(self, size: int) -> None:
        """The dataloader opens the next prompt as a group of `size` siblings."""
        self._now(self._open_next, size)

    def advance(self, seconds: float) -> None:
        """Let `seconds` of virtual time pass: rollouts run turns, timers fire."""
        self._do(lambda: self.clock.sleep(seconds))

    def submit(self, event: ControllerInput) -> None:
        """Hand `event` (a trigger, a switch, a sync) to the controller."""
        self._now(self._submit, event)

    def toggle_train_switch(self) -> None:
        """The trainer begins a train switch, or ends the one it began."""
        self.world.switch_on = not self.world.switch_on
        self.submit(TrainSwitchBegin() if self.world.switch_on else TrainSwitchEnd())

    def toggle_weight_sync(self) -> None:
        """The trainer begins a weight sync, or ends the one it began."""
        self.world.sync_on = not self.world.sync_on
        self.submit(WeightSyncBegin() if self.world.sync_on else WeightSyncEnd())

    def optimizer_begin(self, max_groups: int = 2) -> bool:
        """The trainer starts an optimizer step over the queued groups (False if none)."""
        return self._now(self._optimizer_begin, max_groups)

    def _optimizer_begin(self, max_groups: int) -> bool:
        if self.world.training is not None or not self.plane.queued():
            return False
        groups = self.plane.take_finished(max_groups)
        self.trainer.begin_optimizer_step(groups)
        self.world.training = groups
        self._submit(OptimizerStepBegin())
        return True

    def optimizer_end(self) -> bool:
        """The trainer commits its step (anchor moves), then the boundary trigger."""
        return self._now(self._optimizer_end)

    def _optimizer_end(self) -> bool:
        groups = self.world.training
        if groups is None:
            return False
        done = {g.prompt_id for g in groups}
        trained = {prompt for prompt, _ in self.trainer.trained_items()}
        in_flight = [p for p in set(self.plane.consumed) if p not in trained and p not in done] + [
            g.prompt_id for g in self.plane.queued()
        ]
        position = min(in_flight, default=self.plane.position)
        batch = self.trainer.finish_optimizer_step(dataloader_position=position)
        self.world.training = None
        self._submit(OptimizerStepEnd(batch.step))
        for group in groups:
            self._submit(GroupTrained(f"p{group.prompt_id}"))
        self._submit(TrainerBoundary(batch.step))
        return True

    def inject(self, participant: str, kind: FaultKind, op: ParticipantOp) -> None:
        """The next `op` call to `participant` suffers `kind`."""
        self.world.faults += 1
        self.fleet.client(participant).inject(kind, op=op)

    def crash_participant(self, participant: str) -> None:
        """`participant` crashes and restarts from its journal (§6)."""
        self.world.crashes += 1
        self._now(self.fleet.crash_restart, participant)

    def restart_controller(self) -> None:
        """The controller crashes now; a new one starts from the durable store (§6, M9)."""

        async def command() -> None:
            assert self.driver is not None
            self.driver.crash()
            self.fleet.on_completed = None
            await self._start_controller()

        self.world.restarts += 1
        self._do(command)

    # ------------------------------------------------------------------ the checks

    def check(self) -> None:
        """Raise the first `SystemViolation` of I2-I6, I8 or refinement seen so far (I3
        when idle)."""
        if self.world.violations:
            raise self.world.violations[0]
        self._check_refinement()
        self._check_lineage()
        self._check_calls()
        self._check_snapshots()
        if self._idle():
            self._check_settled()
        if self.world.violations:
            raise self.world.violations[0]

    def _idle(self) -> bool:
        driver = self.driver
        if driver is None or not driver.alive or driver.restore_report is None:
            return False
        state = driver.state
        return state.phase is CheckpointState.IDLE and not restore_active(state)

    def _check_refinement(self) -> None:
        if self.fence_log is None:
            return
        unmapped = self.fence_log.judge.verdict().unmapped
        if unmapped is not None:
            self._fail(REFINEMENT, unmapped.explain())

    def _check_lineage(self) -> None:
        counts = Counter(item for batch in self.trainer.lineage() for item in batch.items)
        twice = sorted(item for item, n in counts.items() if n > 1)
        if twice:
            self._fail("I2", f"items trained more than once: {twice}")
        # Within one controller a key is dispatched once. Across a restart a bootstrap
        # legitimately reruns the lost interval's work from the dataloader under the same
        # group ids, so a key whose first execution died with its agent may begin again.
        begun = Counter(
            (c.generation, c.key)
            for c in self.calls
            if c.op is ParticipantOp.BEGIN and c.outcome == "reply" and c.key is not None
        )
        again = sorted(key for key, n in begun.items() if n > 1)
        if again:
            generation, key = again[0]
            self._fail("I2", f"controller {generation} began {key} twice (of {again})")

    def _check_calls(self) -> None:
        longest = max(self.config.prepare_timeout_s, self.config.control_timeout_s)
        groups: dict[tuple[int, OpId, ParticipantOp], list[CallRecord]] = {}
        for call in self.calls:
            if call.deadline is not None:
                if call.ended is not None and call.ended > call.deadline + _EPSILON:
                    self._fail(
                        "I6",
                        f"{call.op.value}({call.op_id}) to {call.participant} ended at "
                        f"{call.ended:.3f}, after its deadline {call.deadline:.3f}",
                    )
                if call.deadline > call.started + longest + _EPSILON:
                    self._fail(
                        "I6",
                        f"{call.op.value}({call.op_id}) to {call.participant} got deadline "
                        f"{call.deadline:.3f}, more than {longest}s after its start",
                    )
            # I5 judges by §3 as the oracle states it, never by the coordinator's injectable
            # `policy.phase_order`, so it catches a coordinator that swaps it.
            if call.op.value in SPEC_PHASE_ORDER and call.op_id is not None:
                groups.setdefault((call.generation, call.op_id, call.op), []).append(call)
        for (_, op_id, op), calls in groups.items():
            self._check_order(op_id, op, calls)

    def _check_order(self, op_id: OpId, op: ParticipantOp, calls: list[CallRecord]) -> None:
        """I5 for one (controller, id, op): calls are recorded in the order they started."""
        rank = {role: i for i, role in enumerate(SPEC_PHASE_ORDER[op.value])}
        first: dict[str, float] = {}
        for call in calls:
            first.setdefault(call.role, call.started)
        for later in calls:
            for earlier_role, started in first.items():
                if rank[earlier_role] < rank[later.role] and later.started < started:
                    self._fail(
                        "I5",
                        f"{op.value}({op_id}) reached {later.role} at {later.started:.3f}, "
                        f"before {earlier_role} at {started:.3f}",
                    )
            for other in calls:
                overlapping = other.started <= later.started and (
                    other.ended is None or other.ended > later.started
                )
                if rank[other.role] < rank[later.role] and overlapping and other is not later:
                    self._fail(
                        "I5",
                        f"{op.value}({op_id}) reached {later.role} at {later.started:.3f} "
                        f"while {other.role}'s call was still in flight",
                    )

    def _check_snapshots(self) -> None:
        for name in self.store.published():
            if name in self._verified:
                continue
            self._verified.add(name)
            try:
                manifest = self.store.verify(name)
                cut = ControllerCut.model_validate_json(
                    self.store.load(name).artifacts[CUT_ARTIFACT]
                )
                op_id = parse_checkpoint_id(name)
            except (SnapshotStoreError, KeyError, ValueError) as error:
                self._fail("I8", f"published snapshot {name} does not verify: {error}")
                continue
            steps = {op_id.step, manifest.trainer_step, cut.trainer_step}
            if len(steps) != 1 or cut.trainer_version != manifest.trainer_version:
                self._fail(
                    "I8",
                    f"snapshot {name} mixes instants: id step {op_id.step}, manifest "
                    f"step {manifest.trainer_step}, cut step {cut.trainer_step}",
                )

    def _check_settled(self) -> None:
        """I3: the controller is idle, so every id it ever prepared is retired everywhere."""
        intent = self.journal.read_intent()
        if intent is not None:
            self._fail("I3", f"the controller is idle but intent {intent.checkpoint_id} remains")
        for name, host in self.fleet.hosts.items():
            fence = host.state.fence
            if fence.state.value != "idle":
                self._fail(
                    "I3", f"the controller is idle but {name} is fenced ({fence.state.value})"
                )
        for call in self.calls:
            if call.op is not ParticipantOp.PREPARE or call.op_id is None:
                continue
            watermark = self.fleet.hosts[call.participant].state.fence.data.high_watermark
            if watermark is None or watermark < call.op_id:
                self._fail(
                    "I3",
                    f"{call.participant} was prepared for {call.op_id} but never resumed "
                    f"(high-watermark {watermark})",
                )

    def drain(self, limit_s: float | None = None) -> None:
        """I7 and I1: the world stops faulting, ends its switches and trains everything;
        the controller must reach idle with admission open and every consumed prompt
        trained (or stop after `max_consecutive_failures`) within `limit_s` virtual s."""
        limit = limit_s if limit_s is not None else 300.0 + 10 * self.config.rollout_timeout_s

        async def command() -> str | None:
            if self.world.switch_on:
                self.world.switch_on = False
                self._submit(TrainSwitchEnd())
            if self.world.sync_on:
                self.world.sync_on = False
                self._submit(WeightSyncEnd())
            end = self.clock.now() + limit
            while self.clock.now() < end:
                driver = self.driver
                assert driver is not None
                if driver.stopped is not None:
                    return driver.stopped.reason
                while self.plane.position < self.world.budget:
                    self._open_next(1)  # re-consumed after a rewind: its recorded size
                if not self._optimizer_end():
                    self._optimizer_begin(2)
                if self._drained():
                    return None
                await self.clock.sleep(1.0)
            return "time_limit"

        reason = self._do(command)
        self.check()
        if reason is None:
            self._check_nothing_lost()
        elif reason != "max_consecutive_failures":
            raise SystemViolation(
                "I7", f"the run did not settle after the faults stopped: {reason}"
            )

    def _drained(self) -> bool:
        if not self._idle() or self.world.training is not None or self.plane.queued():
            return False
        if self.state.gate.state is not GateState.OPEN:
            return False
        trained = {prompt for prompt, _ in self.trainer.trained_items()}
        return all(p in trained for p in range(self.world.budget))

    def _check_nothing_lost(self) -> None:
        trained = self.trainer.trained_items()
        lost = sorted(
            (prompt, sibling)
            for prompt in set(self.plane.consumed)
            for sibling in range(self.world.sizes.get(prompt, 1))
            if (prompt, sibling) not in trained
        )
        if lost:
            raise SystemViolation("I1", f"consumed items never trained: {lost}")
