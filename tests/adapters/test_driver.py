"""The driver end to end on in-memory participants: every failure scenario S1-S19 of
PROTOCOL.md §7 with the fixed behaviour asserted, plus how effects are carried (calls of
one role concurrent, every call bounded by its deadline, one cause per fault, timers).

Every test runs on the virtual clock on both anyio backends (asyncio and trio); one test
runs the driver on the real clock on both backends.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from quiesce.adapters import (
    ControllerJournal,
    Driver,
    FaultKind,
    Faults,
    InMemoryDataPlane,
    InMemoryFleet,
    InMemoryTrainer,
    Participant,
    RealClock,
    RestoreReport,
    SnapshotStore,
    VirtualClock,
    WorkConfig,
)
from quiesce.adapters._clock import Clock, TaskGroup
from quiesce.protocol import Coordinator, OpId, QuiesceConfig
from quiesce.protocol.controller import (
    GroupOpened,
    OptimizerStepBegin,
    OptimizerStepEnd,
    Outcome,
    PeriodElapsed,
    TrainSwitchBegin,
    TrainSwitchEnd,
    UnknownRecoveryMode,
    UnmanagedMultiProcess,
)
from quiesce.protocol.controller.lowlevel import (
    Call,
    CallFailed,
    ClearIntent,
    Metric,
    NewGroup,
    Op,
    Publish,
    Redispatch,
    Reply,
)
from quiesce.protocol.machines import (
    AttemptState,
    CheckpointState,
    ExecState,
    FenceState,
    GroupState,
    RegistryState,
)
from quiesce.protocol.participant import AgentRole, ParticipantOp
from quiesce.protocol.wire import (
    BoundaryRequest,
    ControlRequest,
    ErrorReply,
    FinishRequest,
    Message,
    PrepareReply,
    RestoreReply,
)

pytestmark = pytest.mark.anyio

S = CheckpointState
Effects = list[tuple[Any, tuple[Any, ...], CheckpointState]]

FAST = {
    "control_timeout_s": 2.0,
    "prepare_timeout_s": 5.0,
    "prepare_retry_interval_s": 0.2,
    "snapshot_attempt_interval_s": 3.0,
    "rollout_timeout_s": 100.0,
}


@dataclass
class Rig:
    """One controller on an in-memory fleet, on one clock, with everything recorded."""

    clock: Clock
    fleet: InMemoryFleet
    config: QuiesceConfig
    root: Path
    turns: int
    trainer: InMemoryTrainer = field(default_factory=InMemoryTrainer)
    seen: Effects = field(default_factory=list)
    tg: TaskGroup | None = None
    driver: Driver = field(init=False)

    def __post_init__(self) -> None:
        self.plane = InMemoryDataPlane(self.trainer)
        self.store = SnapshotStore(self.root / "snapshots")
        self.journal = ControllerJournal(self.root / "controller")
        self.driver = self.new_driver()

    def new_driver(self, participants: dict[str, Participant] | None = None) -> Driver:
        driver = Driver(
            Coordinator(self.config),
            self.clock,
            participants or self.fleet.participants,
            store=self.store,
            journal=self.journal,
            trainer=self.trainer,
            data_plane=self.plane,
            depends_on=self.fleet.depends_on(),
            turns=lambda _dispatch: self.turns,
            observers=[
                lambda event, effects, state: self.seen.append((event, effects, state.phase))
            ],
        )
        self.fleet.on_completed = driver.completed
        return driver

    # -------------------------------------------------------------- helpers

    @property
    def state(self) -> Any:
        return self.driver.state

    def effects(self, kind: type) -> list[Any]:
        return [e for _, effects, _ in self.seen for e in effects if isinstance(e, kind)]

    def emitted_in(self, kind: type, phase: CheckpointState) -> list[Any]:
        """Effects of `kind` emitted by steps that ended in `phase`."""
        return [
            e for _, effects, p in self.seen if p is phase for e in effects if isinstance(e, kind)
        ]

    def inputs(self, kind: type) -> list[Any]:
        return [event for event, _, _ in self.seen if isinstance(event, kind)]

    def host(self, name: str) -> Any:
        return self.fleet.hosts[name]

    def agent(self, name: str = "agent-0") -> AgentRole:
        role = self.host(name).state.role
        assert isinstance(role, AgentRole)
        return role

    def fences_idle(self) -> bool:
        return all(h.state.fence.state is FenceState.IDLE for h in self.fleet.hosts.values())

    def open(self, group_id: str, size: int = 2, agent: str = "agent-0") -> None:
        self.driver.submit(GroupOpened(group_id, size, agent, prompt=group_id))

    async def until(self, predicate: Callable[[Any], bool]) -> Any:
        return await self.driver.wait_for(predicate)

    async def settle(self) -> Any:
        return await self.until(lambda s: s.phase in (S.IDLE, S.STOPPED))

    async def checkpoint(self) -> Outcome:
        """Trigger one attempt and return its first outcome."""
        count = len(self.driver.outcomes)
        self.driver.submit(PeriodElapsed())
        await self.until(lambda _s: len(self.driver.outcomes) > count)
        return self.driver.outcomes[count]

    async def work(self, group_id: str) -> None:
        """Run one small group to its seal (so the next checkpoint has something new)."""
        self.open(group_id, size=1)
        await self.sealed(group_id)

    async def sealed(self, group_id: str) -> None:
        await self.until(lambda s: _group_state(s, group_id) is GroupState.READY_TO_FINALIZE)

    async def poll(self, predicate: Callable[[], bool]) -> None:
        """Wait until `predicate()` holds for participant state (not driver steps)."""
        while not predicate():
            await self.clock.sleep(0.01)

    async def running(self, rollout_id: str, attempt: int = 0, name: str = "agent-0") -> None:
        await self.poll(lambda: self.agent(name).find((rollout_id, attempt)) is not None)

    async def restart(self, participants: dict[str, Participant] | None = None) -> RestoreReport:
        """The controller process dies now; a new one starts from the durable store."""
        self.driver.crash()
        self.driver = self.new_driver(participants)
        assert self.tg is not None
        self.tg.start_soon(self.driver.run)
        return await self.driver.start()


def _runs(roles: list[str]) -> list[str]:
    """Consecutive equal roles collapsed: the order in which roles were called."""
    return [r for i, r in enumerate(roles) if i == 0 or roles[i - 1] != r]


def _group_state(state: Any, group_id: str) -> GroupState | None:
    for group in reversed(state.ledger.groups):
        if group.group_id == group_id:
            return group.state
    return None


async def run_rig(
    tmp_path: Path,
    body: Callable[[Rig], Awaitable[None]],
    *,
    seed: int = 1,
    turns: int = 2,
    config: dict[str, Any] | None = None,
    clock: Clock | None = None,
    work: WorkConfig | None = None,
    start: bool = True,
    **fleet: Any,
) -> None:
    clock = clock or VirtualClock(seed=seed)
    settings = {**FAST, **(config or {})}

    async def main() -> None:
        rig = Rig(
            clock,
            InMemoryFleet(clock, work=work or WorkConfig(), **fleet),
            QuiesceConfig.load(settings),
            tmp_path,
            turns,
        )
        async with clock.task_group() as tg:
            rig.tg = tg
            tg.start_soon(rig.fleet.run)
            tg.start_soon(rig.driver.run)
            try:
                # A scenario that never converges fails here instead of running forever.
                with clock.fail_at(clock.now() + 600.0):
                    if start:
                        await rig.driver.start()
                    await body(rig)
            finally:
                rig.driver.stop()
                rig.fleet.stop()

    await clock.run(main)


# ================================================================= carrying effects


async def test_a_checkpoint_goes_through_the_phases_in_order(
    anyio_backend: str, tmp_path: Path
) -> None:
    async def body(rig: Rig) -> None:
        rig.open("g0")
        await rig.sealed("g0")
        outcome = await rig.checkpoint()
        assert (outcome.result, outcome.reason) == ("completed", "completed")
        calls = [
            (c.op, c.participant) for c in rig.effects(Call) if c.op_id == outcome.checkpoint_id
        ]
        roles = [(op, name.split("-")[0]) for op, name in calls]
        prepare = _runs([r for op, r in roles if op is Op.PREPARE])
        commit = _runs([r for op, r in roles if op is Op.COMMIT])
        release = _runs([r for op, r in roles if op is Op.RESUME])
        assert prepare == ["policy", "agent", "resources"]
        assert commit == ["agent", "policy", "resources"]
        assert release == ["resources", "policy", "agent"]
        assert rig.store.published() == (str(outcome.checkpoint_id),)
        assert rig.journal.read_intent() is None
        assert rig.fences_idle()

    await run_rig(tmp_path, body)


async def test_calls_of_one_role_run_concurrently(anyio_backend: str, tmp_path: Path) -> None:
    async def body(rig: Rig) -> None:
        for client in rig.fleet.clients.values():
            client.latency_s = (0.5, 0.5)
        started = rig.clock.now()
        outcome = await rig.checkpoint()
        assert outcome.result == "completed"
        # 4 agents: sequential calls would cost 4 x 1 s per agent phase.
        elapsed = rig.clock.now() - started
        assert elapsed < 3 * 3 * 1.0 + 1.0, elapsed

    await run_rig(tmp_path, body, agents=4)


async def test_every_fault_becomes_its_own_cause(anyio_backend: str, tmp_path: Path) -> None:
    expected = {
        FaultKind.DROP_REQUEST: "request_lost",
        FaultKind.DROP_REPLY: "reply_lost",
        FaultKind.SERVER_ERROR: "participant_error",
        FaultKind.TIMEOUT: "timeout",
        FaultKind.CRASH_RESTART: "io_error",
    }

    async def body(rig: Rig) -> None:
        request = ControlRequest(op_id=OpId(9, 1, 0), deadline_at=0.0)
        for kind, cause in expected.items():
            rig.fleet.client("resources-0").inject(kind, op=ParticipantOp.STATUS)
            deadline = rig.clock.now() + 2.0
            before = rig.clock.now()
            result = await rig.driver.send("resources-0", ParticipantOp.STATUS, None, deadline)
            assert getattr(result, "value", None) == cause, kind
            # I6: a call never outlives its deadline.
            assert rig.clock.now() <= deadline
            if kind is FaultKind.TIMEOUT:
                assert rig.clock.now() == pytest.approx(before + 2.0)
        assert request.op_id.epoch == 9
        assert rig.fleet.restarts == {"resources-0": 1}

    await run_rig(tmp_path, body)


async def test_timers_rearm_and_cancel(anyio_backend: str, tmp_path: Path) -> None:
    from quiesce.protocol.controller.lowlevel import ArmTimer, CancelTimer

    async def body(rig: Rig) -> None:
        fired: list[str] = []
        rig.driver.submit = lambda event: fired.append(getattr(event, "name", ""))  # type: ignore[method-assign]
        now = rig.clock.now()
        rig.driver._execute(ArmTimer("a", now + 1))
        rig.driver._execute(ArmTimer("a", now + 3))  # re-arming replaces
        rig.driver._execute(ArmTimer("b", now + 2))
        rig.driver._execute(CancelTimer("b"))
        await rig.clock.sleep(5)
        assert fired == ["a"]

    await run_rig(tmp_path, body)


async def test_an_input_that_is_not_one_is_logged_and_the_driver_keeps_running(
    anyio_backend: str, tmp_path: Path
) -> None:
    # `NewGroup` is a restore-plan value, not an input: the coordinator refuses it with the
    # typed `UnknownInput`; the driver logs it (`input_refused`), leaves the state as it
    # was, shows observers the input with no effects, and goes on.
    async def body(rig: Rig) -> None:
        before = rig.state
        rig.driver.submit(NewGroup("g-new", 2))  # type: ignore[arg-type]
        await rig.clock.sleep(0.1)
        assert [(effects, phase) for _, effects, phase in rig.seen[-1:]] == [((), S.IDLE)]
        assert isinstance(rig.seen[-1][0], NewGroup)
        assert rig.state is before
        await rig.work("g0")
        outcome = await rig.checkpoint()
        assert outcome.result == "completed"

    await run_rig(tmp_path, body)


async def run_real_rig(tmp_path: Path, body: Callable[[Rig], Awaitable[None]]) -> None:
    """`run_rig` on the real clock, with latencies of a millisecond or so."""
    fast = WorkConfig(policy_latency_s=(0.001, 0.002), mutation_latency_s=(0.0, 0.001))
    await run_rig(tmp_path, body, clock=RealClock(seed=1), work=fast, latency_s=(0.0, 0.001))


async def test_real_clock_checkpoint_and_restore(anyio_backend: str, tmp_path: Path) -> None:
    async def body(rig: Rig) -> None:
        rig.open("g0")
        await rig.sealed("g0")
        outcome = await rig.checkpoint()
        assert outcome.result == "completed"
        report = await rig.restart()
        assert (report.kind, report.snapshot_id) == ("snapshot", str(outcome.checkpoint_id))
        assert rig.fences_idle()

    await run_real_rig(tmp_path, body)


ON_DISK: dict[type, Callable[[Rig, OpId], bool]] = {
    Publish: lambda rig, cid: str(cid) in rig.store.published(),
    ClearIntent: lambda rig, _cid: rig.journal.read_intent() is None,
}


@pytest.mark.parametrize("how", ["stop", "crash"])
@pytest.mark.parametrize("effect", [Publish, ClearIntent], ids=lambda kind: kind.__name__)
async def test_stop_runs_every_queued_store_job_before_it_returns(
    anyio_backend: str, tmp_path: Path, effect: type, how: str
) -> None:
    # On the real clock store jobs wait in a worker-thread lane. Stopped by an observer of
    # the step that queued the job (the lane cannot have run it yet), `stop()` must return
    # with the job's effect on disk; `crash()` must not run it (a dead process writes
    # nothing more).
    found: list[bool] = []

    async def body(rig: Rig) -> None:
        def halt_at_effect(_event: Any, effects: tuple[Any, ...], _state: Any) -> None:
            for e in effects:
                if isinstance(e, effect) and rig.driver.alive:
                    getattr(rig.driver, how)()
                    found.append(ON_DISK[effect](rig, e.checkpoint_id))

        rig.open("g0")
        await rig.sealed("g0")
        rig.driver.observers.append(halt_at_effect)
        rig.driver.submit(PeriodElapsed())
        await rig.poll(lambda: not rig.driver.alive)

    await run_real_rig(tmp_path, body)
    assert found == [how == "stop"]


class _SlowPublish(SnapshotStore):
    """A store whose `publish` takes a while (in the lane's worker thread)."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.publishing = threading.Event()
        self.calls: list[str] = []

    def publish(self, checkpoint_id: str) -> Any:
        self.publishing.set()
        time.sleep(0.2)
        manifest = super().publish(checkpoint_id)
        self.calls.append("publish")
        return manifest

    def prune(self, keep_latest_k: int) -> Any:
        self.calls.append("prune")
        return super().prune(keep_latest_k)


async def test_stop_waits_for_the_running_store_job_then_runs_the_queued_ones(
    anyio_backend: str, tmp_path: Path
) -> None:
    async def body(rig: Rig) -> None:
        store = rig.driver.store = _SlowPublish(rig.root / "snapshots")
        rig.open("g0")
        await rig.sealed("g0")
        rig.driver.submit(PeriodElapsed())
        await rig.poll(store.publishing.is_set)
        rig.driver.stop()  # publish is running in a worker thread; prune is queued
        assert store.calls == ["publish", "prune"]
        assert len(store.published()) == 1

    await run_real_rig(tmp_path, body)


# ================================================================= S1 - S19


async def test_s1_deadline_does_not_fire_while_parked_and_expiry_retires(
    anyio_backend: str, tmp_path: Path
) -> None:
    async def body(rig: Rig) -> None:
        rig.open("g0", size=1)  # ~2 s of work against a 3 s deadline
        await rig.running("g0/0")
        # The commit of resources hangs until its deadline, so the rollout stays parked for
        # 2 s more: without the checkpoint hold (M7) the group would expire.
        rig.fleet.client("resources-0").inject(FaultKind.TIMEOUT, op=ParticipantOp.COMMIT)
        outcome = await rig.checkpoint()
        await rig.settle()
        assert outcome.reason == "timeout"
        await rig.sealed("g0")
        assert rig.clock.now() > 3.0
        assert not [r for r in rig.effects(Redispatch) if r.group_id == "g0"]
        # Outside a checkpoint the deadline does fire: the attempt is retired at its agent.
        rig.turns = 100  # ~5 s of work
        rig.open("g1", size=1)
        await rig.running("g1/0")
        await rig.until(lambda _s: any(r.group_id == "g1" for r in rig.effects(Redispatch)))
        retire = [c for c in rig.effects(Call) if c.op is Op.RETIRE]
        assert [c.payload for c in retire] == [("g1/0", 0)]
        await rig.poll(lambda: rig.agent().highest_retired("g1/0") >= 0)
        # Nothing is left un-ACKed or stuck: the next prepare is ready.
        assert (await rig.checkpoint()).result == "completed"

    await run_rig(
        tmp_path,
        body,
        turns=40,
        config={"rollout_timeout_s": 3.0},
        work=WorkConfig(policy_latency_s=(0.05, 0.05)),
    )


async def test_s2_train_switch_ending_first_keeps_deadlines_suspended(
    anyio_backend: str, tmp_path: Path
) -> None:
    async def body(rig: Rig) -> None:
        rig.open("g0", size=1)
        await rig.running("g0/0")
        rig.driver.submit(TrainSwitchBegin())
        rig.fleet.client("resources-0").inject(FaultKind.TIMEOUT, op=ParticipantOp.COMMIT)
        rig.driver.submit(PeriodElapsed())
        await rig.until(lambda s: s.phase is S.COMMITTING)
        rig.driver.submit(TrainSwitchEnd())
        await rig.until(lambda s: rig.inputs(TrainSwitchEnd))
        # The switch released only its own hold: the checkpoint still suspends the clocks.
        assert rig.state.deadlines.state is RegistryState.SUSPENDED
        await rig.settle()
        assert rig.state.deadlines.state is RegistryState.RUNNING
        assert not [r for r in rig.effects(Redispatch) if r.group_id == "g0"]

    await run_rig(
        tmp_path,
        body,
        turns=40,
        config={"rollout_timeout_s": 3.0},
        work=WorkConfig(policy_latency_s=(0.05, 0.05)),
    )


@pytest.mark.parametrize("fault", [FaultKind.SERVER_ERROR, FaultKind.TIMEOUT])
async def test_s3_commit_5xx_or_timeout_is_retryable_and_retried(
    anyio_backend: str, tmp_path: Path, fault: FaultKind
) -> None:
    async def body(rig: Rig) -> None:
        rig.fleet.client("resources-0").inject(fault, op=ParticipantOp.COMMIT)
        outcome = await rig.checkpoint()
        await rig.settle()
        reason = "participant_error" if fault is FaultKind.SERVER_ERROR else "timeout"
        assert (outcome.result, outcome.reason, outcome.retryable) == ("failed", reason, True)
        assert rig.state.phase is S.IDLE and rig.fences_idle()
        assert not rig.store.published()
        assert (await rig.checkpoint()).result == "completed"

    # Without retries inside the attempt (§4) the attempt fails, and the next one completes.
    await run_rig(tmp_path, body, config={"call_retries": 0})


async def test_s3_a_commit_5xx_is_retried_inside_the_attempt_with_the_same_id(
    anyio_backend: str, tmp_path: Path
) -> None:
    async def body(rig: Rig) -> None:
        rig.fleet.client("resources-0").inject(FaultKind.SERVER_ERROR, op=ParticipantOp.COMMIT)
        outcome = await rig.checkpoint()
        assert outcome.result == "completed"
        commits = [
            c for c in rig.effects(Call) if c.op is Op.COMMIT and c.participant == "resources-0"
        ]
        # The same call twice: same id, same deadline; the retry was counted.
        assert len(commits) == 2 and {(c.op_id, c.deadline_at) for c in commits} == {
            (outcome.checkpoint_id, commits[0].deadline_at)
        }
        assert len([m for m in rig.effects(Metric) if m.name == "call_retries"]) == 1

    await run_rig(tmp_path, body)


async def test_s4_release_and_abort_failures_are_retried_with_the_same_id(
    anyio_backend: str, tmp_path: Path
) -> None:
    async def body(rig: Rig) -> None:
        resources = rig.fleet.client("resources-0")
        resources.inject(FaultKind.SERVER_ERROR, op=ParticipantOp.RESUME)
        outcome = await rig.checkpoint()
        x = outcome.checkpoint_id
        assert rig.state.phase is S.RELEASE_PENDING
        await rig.settle()
        assert rig.state.phase is S.IDLE
        resumes = [
            c for c in rig.effects(Call) if c.op is Op.RESUME and c.participant == "resources-0"
        ]
        assert {c.op_id for c in resumes} == {x} and len(resumes) == 2
        assert rig.host("resources-0").state.fence.data.high_watermark == x
        # An abort that fails: abort_pending, retried with the same id, nothing new minted.
        await rig.work("g1")
        resources.inject(FaultKind.SERVER_ERROR, op=ParticipantOp.COMMIT)
        resources.inject(FaultKind.DROP_REQUEST, op=ParticipantOp.RESUME)
        failed = await rig.checkpoint()
        y = failed.checkpoint_id
        assert rig.state.phase is S.ABORT_PENDING
        rig.driver.submit(PeriodElapsed())  # a trigger retries the abort of y
        await rig.settle()
        assert rig.state.phase is S.IDLE and rig.state.seq == y.seq
        assert rig.host("resources-0").state.fence.data.high_watermark == y
        assert str(y) not in rig.store.published()
        assert rig.journal.read_intent() is None

    # Without retries inside the attempt (§4), so that the commit's 5xx aborts the attempt.
    await run_rig(tmp_path, body, config={"call_retries": 0})


async def test_s5_a_participant_fenced_to_another_id_is_aborted_first(
    anyio_backend: str, tmp_path: Path
) -> None:
    async def body(rig: Rig) -> None:
        # A leftover prepare(X) from an earlier controller fences the policy to X.
        x = OpId(0, 7, 0)
        stale = ControlRequest(op_id=x, deadline_at=rig.clock.now() + 100)
        assert isinstance(await rig.host("policy-0").handle("prepare", stale), PrepareReply)
        outcome = await rig.checkpoint()
        await rig.settle()
        assert (outcome.result, outcome.reason) == ("failed", "participant_error")
        # The reported active id was aborted with its own id before anything else.
        resumes = [
            c for c in rig.effects(Call) if c.op is Op.RESUME and c.participant == "policy-0"
        ]
        assert resumes[0].op_id == x
        assert rig.host("policy-0").state.fence.state is FenceState.IDLE
        assert (await rig.checkpoint()).result == "completed"

    await run_rig(tmp_path, body)


async def test_s6_prepare_applied_reply_lost_is_aborted(anyio_backend: str, tmp_path: Path) -> None:
    async def body(rig: Rig) -> None:
        rig.fleet.client("agent-0").inject(FaultKind.DROP_REPLY, op=ParticipantOp.PREPARE)
        outcome = await rig.checkpoint()
        await rig.settle()
        assert (outcome.result, outcome.reason) == ("failed", "timeout")
        agent = rig.host("agent-0").state
        # Attempted before the call was sent, so its abort reached it.
        assert agent.fence.state is FenceState.IDLE
        assert agent.fence.data.high_watermark == outcome.checkpoint_id
        assert (await rig.checkpoint()).result == "completed"

    # Without retries inside the attempt (§4): the lost reply fails the attempt, which aborts.
    await run_rig(tmp_path, body, config={"call_retries": 0})


class _SlowAcks(Participant):
    """A client whose next ACK request (or reply) is delayed by `delay_s`."""

    def __init__(self, inner: Participant, clock: Clock) -> None:
        self.inner = inner
        self.name = inner.name
        self.clock = clock
        self.request_delay_s = 0.0
        self.reply_delay_s = 0.0

    async def send(
        self, op: ParticipantOp, request: Message | None, deadline_at: float | None
    ) -> Message:
        if op is not ParticipantOp.ACK:
            return await self.inner.call(op, request, deadline_at)
        before, self.request_delay_s = self.request_delay_s, 0.0
        after, self.reply_delay_s = self.reply_delay_s, 0.0
        await self.clock.sleep(before)
        reply = await self.inner.call(op, request, deadline_at)
        await self.clock.sleep(after)
        return reply

    async def completions(self, *, deadline_at: float | None = None) -> Any:
        return await self.inner.completions(deadline_at=deadline_at)


async def _finish_when_preparing(rig: Rig, slow: _SlowAcks) -> None:
    """Trigger a checkpoint; as soon as it prepares, g0/0 finishes (after the flush)."""
    host = rig.host("agent-0")
    started: list[bool] = []

    async def complete() -> None:
        reply = await host.handle("finish", FinishRequest(rollout_id="g0/0", attempt=0))
        assert reply.receipt is not None
        rig.driver.completed("agent-0", reply.receipt)

    def at_prepare(_event: Any, _effects: Any, state: Any) -> None:
        if state.phase is S.PREPARING and not started:
            started.append(True)
            assert rig.tg is not None
            rig.tg.start_soon(complete)

    rig.driver.observers.append(at_prepare)
    outcome = await rig.checkpoint()
    assert outcome.result == "completed"
    assert started


async def _slow_rig(rig: Rig) -> _SlowAcks:
    slow = _SlowAcks(rig.fleet.clients["agent-0"], rig.clock)
    await rig.restart({**rig.fleet.participants, "agent-0": slow})
    rig.open("g0", size=1)
    await rig.running("g0/0")
    return slow


async def test_s7_acks_pending_at_capture_are_reflushed_inside_the_cut(
    anyio_backend: str, tmp_path: Path
) -> None:
    async def body(rig: Rig) -> None:
        slow = await _slow_rig(rig)
        slow.reply_delay_s = 1.0  # the agent accepts the ACK; the ledger hears of it late
        await _finish_when_preparing(rig, slow)
        # Capture found the ACK still owed and flushed it again inside the cut.
        assert rig.emitted_in(Call, S.CAPTURING)
        assert all(c.op is Op.ACK for c in rig.emitted_in(Call, S.CAPTURING))
        assert not rig.state.ledger.pending_acks() and rig.agent().completed() == ()

    await run_rig(tmp_path, body, run_work=False)


async def test_s8_a_dead_background_ack_drain_is_caught_by_the_strict_flush(
    anyio_backend: str, tmp_path: Path
) -> None:
    async def body(rig: Rig) -> None:
        slow = await _slow_rig(rig)
        # The background drain of g0/0's seal dies (request lost) one second after it...
        rig.fleet.client("agent-0").inject(FaultKind.DROP_REQUEST, op=ParticipantOp.ACK)
        slow.request_delay_s = 1.0
        reply = await rig.host("agent-0").handle(
            "finish", FinishRequest(rollout_id="g0/0", attempt=0)
        )
        assert reply.receipt is not None
        rig.driver.completed("agent-0", reply.receipt)
        await rig.sealed("g0")
        await rig.poll(lambda: slow.request_delay_s == 0.0)  # the drain is on its way
        # ...while the strict flush of a checkpoint triggered now takes 1.5 s: the drain's
        # failure lands during flushing_acks, and must not fail the flush.
        slow.request_delay_s = 1.5
        outcome = await rig.checkpoint()
        assert outcome.result == "completed"
        died = [
            event
            for event, _, phase in rig.seen
            if isinstance(event, CallFailed) and event.op is Op.ACK and phase is S.FLUSHING_ACKS
        ]
        assert [event.op_id for event in died] == [None]  # the background drain's
        assert rig.agent().completed() == ()
        assert not rig.state.ledger.pending_acks()

    await run_rig(tmp_path, body, run_work=False)


async def test_s9_optimizer_step_between_commit_and_capture_skips(
    anyio_backend: str, tmp_path: Path
) -> None:
    async def body(rig: Rig) -> None:
        for client in rig.fleet.clients.values():
            client.latency_s = (0.2, 0.2)
        rig.driver.submit(PeriodElapsed())
        await rig.until(lambda s: s.phase is S.COMMITTING)
        rig.driver.submit(OptimizerStepBegin())
        rig.driver.submit(OptimizerStepEnd(1))
        await rig.settle()
        outcome = rig.driver.outcomes[-1]
        assert (outcome.result, outcome.reason) == ("skipped", "trainer_state_changed")
        assert rig.fences_idle()
        for host in rig.fleet.hosts.values():
            assert host.state.fence.data.high_watermark == outcome.checkpoint_id
        assert rig.store.published() == () and rig.store.leftover_staging() == ()

    await run_rig(tmp_path, body)


async def test_s10_a_completion_after_the_flush_makes_prepare_retry_until_ready(
    anyio_backend: str, tmp_path: Path
) -> None:
    async def body(rig: Rig) -> None:
        slow = await _slow_rig(rig)
        slow.request_delay_s = 1.0  # the completion's ACK reaches the agent 1 s later
        await _finish_when_preparing(rig, slow)
        not_ready = [
            e.result
            for e in rig.inputs(Reply)
            if isinstance(e.result, PrepareReply) and e.result.status == "not_ready"
        ]
        # Not ready while the completion was un-ACKed, then ready: never a deadline failure.
        assert len(not_ready) >= 2
        assert all(r.participant == "agent-0" for r in not_ready)
        assert rig.agent().completed() == ()
        assert _group_state(rig.state, "g0") is GroupState.READY_TO_FINALIZE

    await run_rig(tmp_path, body, run_work=False)


async def test_s11_a_group_scored_sibling_is_never_retried_alone(
    anyio_backend: str, tmp_path: Path
) -> None:
    async def body(rig: Rig) -> None:
        rig.fleet.client("agent-0").inject(FaultKind.DROP_REQUEST, op=ParticipantOp.BEGIN)
        rig.open("g0", size=2)
        await rig.sealed("g0")
        [redispatch] = [r for r in rig.effects(Redispatch) if r.group_id == "g0"]
        assert redispatch.level == "prompt_group"
        attempts = [a for a in rig.state.ledger.attempts if a.group_id == "g0"]
        # Both siblings ran again, as a new generation of the whole group.
        assert {(a.sibling, a.attempt) for a in attempts if a.generation == 1} == {(0, 1), (1, 1)}
        assert rig.state.ledger.counters.group_reruns == 1

    await run_rig(tmp_path, body, group_scored=True, group_size=2)


async def test_s12_restart_only_continuations_are_discarded_before_resume(
    anyio_backend: str, tmp_path: Path
) -> None:
    async def body(rig: Rig) -> None:
        rig.open("g0", size=2)
        await rig.running("g0/1")
        await rig.poll(lambda: any(e.data.turn >= 1 for e in rig.agent().executions))
        outcome = await rig.checkpoint()
        assert outcome.result == "completed"
        report = await rig.restart()
        assert report.kind == "snapshot" and report.discarded >= 1
        assert report.metrics.continuations_discarded_restart_only == report.discarded
        assert report.metrics.siblings_resumed_from_turn == 0
        assert rig.agent().restored == ()
        await rig.sealed("g0")

    await run_rig(tmp_path, body, turns=30, resources_modes=("restart_only",))


@pytest.mark.parametrize(
    ("server", "refusal"),
    [
        # S13: an unknown recovery mode
        (
            {"name": "odd-0", "role": "resources", "recovery_mode": "snapshotting"},
            UnknownRecoveryMode,
        ),
        # S14: an unmanaged multi-worker server
        (
            {"name": "multi-0", "role": "policy", "multi_process": "unmanaged"},
            UnmanagedMultiProcess,
        ),
    ],
    ids=["s13_unknown_recovery_mode", "s14_unmanaged_multi_worker"],
)
async def test_a_bad_server_is_refused_at_setup_naming_it(
    anyio_backend: str, tmp_path: Path, server: dict[str, str], refusal: type[Exception]
) -> None:
    async def body(rig: Rig) -> None:
        with pytest.raises(refusal) as refused:
            await rig.driver.start()
        assert server["name"] in str(refused.value)

    await run_rig(tmp_path, body, start=False, extra=[server])


async def test_s15_a_delayed_prepare_after_resume_is_refused_as_stale(
    anyio_backend: str, tmp_path: Path
) -> None:
    async def body(rig: Rig) -> None:
        policy = rig.fleet.client("policy-0")
        policy.faults = Faults(redelivery_delay_s=(2.0, 2.0))
        policy.inject(FaultKind.REDELIVER, op=ParticipantOp.PREPARE)
        outcome = await rig.checkpoint()
        assert outcome.result == "completed"
        await rig.clock.sleep(3.0)  # the stale copy of prepare(X) arrives now
        state = rig.host("policy-0").state
        assert state.fence.state is FenceState.IDLE
        assert state.fence.data.high_watermark == outcome.checkpoint_id
        stale = ControlRequest(op_id=outcome.checkpoint_id, deadline_at=rig.clock.now() + 1)
        reply = await rig.host("policy-0").handle("prepare", stale)
        assert isinstance(reply, ErrorReply) and reply.code == "stale_checkpoint"
        await rig.work("g1")
        assert (await rig.checkpoint()).result == "completed"

    await run_rig(tmp_path, body)


class _LyingRestore(Participant):
    """A client whose participant reports a restored digest that differs (S16)."""

    def __init__(self, inner: Participant) -> None:
        self.inner = inner
        self.name = inner.name
        self.lies = 1

    async def send(
        self, op: ParticipantOp, request: Message | None, deadline_at: float | None
    ) -> Message:
        reply = await self.inner.call(op, request, deadline_at)
        if isinstance(reply, RestoreReply) and op is ParticipantOp.RESTORE and self.lies:
            self.lies -= 1
            return reply.model_copy(update={"digest": "0" * 64})
        return reply

    async def completions(self, *, deadline_at: float | None = None) -> Any:
        return await self.inner.completions(deadline_at=deadline_at)


async def test_s16_a_restored_digest_mismatch_falls_back_to_an_older_snapshot(
    anyio_backend: str, tmp_path: Path
) -> None:
    async def body(rig: Rig) -> None:
        first = await rig.checkpoint()
        rig.open("g0", size=1)
        await rig.sealed("g0")
        second = await rig.checkpoint()
        assert first.result == second.result == "completed"
        liar = _LyingRestore(rig.fleet.clients["agent-0"])
        report = await rig.restart({**rig.fleet.participants, "agent-0": liar})
        assert report.rejected == ((str(second.checkpoint_id), "digest_mismatch"),)
        assert report.snapshot_id == str(first.checkpoint_id)
        assert rig.fences_idle()

    await run_rig(tmp_path, body)


async def test_s17_retire_of_a_completed_unacked_execution_waits_for_the_ack(
    anyio_backend: str, tmp_path: Path
) -> None:
    async def body(rig: Rig) -> None:
        rig.open("g0", size=1)
        await rig.running("g0/0")
        host = rig.host("agent-0")
        await host.handle("boundary", BoundaryRequest(rollout_id="g0/0", attempt=0, turn=1))
        reply = await host.handle("finish", FinishRequest(rollout_id="g0/0", attempt=0))
        receipt = reply.receipt
        assert receipt is not None  # completed, but the controller never heard of it
        await rig.until(lambda _s: rig.effects(Redispatch))  # the deadline expired: retire
        await rig.poll(lambda: rig.agent().completed() == ())
        # Only the ACK released it: acked (refusal key with its receipt), never tombstoned.
        assert ("g0/0", 0, receipt.receipt) in rig.agent().refusal_keys
        assert rig.state.ledger.counters.late_completions_dropped == 1

    await run_rig(tmp_path, body, run_work=False, config={"rollout_timeout_s": 1.0})


async def test_a_completion_of_the_rolled_back_interval_is_acked_and_dropped_on_restart(
    anyio_backend: str, tmp_path: Path
) -> None:
    async def body(rig: Rig) -> None:
        assert (await rig.checkpoint()).result == "completed"  # the snapshot: no g0 yet
        rig.open("g0", size=1)
        await rig.running("g0/0")
        reply = await rig.host("agent-0").handle(
            "finish", FinishRequest(rollout_id="g0/0", attempt=0)
        )
        assert reply.receipt is not None  # held unACKed; the controller dies before hearing
        report = await rig.restart()
        # The restored ledger does not own g0/0: the coordinator ACKs and drops it.
        assert report.kind == "snapshot" and report.released_orphans == 1
        assert rig.state.unowned_dropped == 1 and not rig.state.ledger.sealed_untrained()
        await rig.poll(lambda: rig.agent().completed() == ())
        assert ("g0/0", 0, reply.receipt.receipt) in rig.agent().refusal_keys  # acked
        assert (await rig.checkpoint()).result == "completed"  # the agent is ready again

    await run_rig(tmp_path, body, run_work=False)


async def test_s18_a_controller_crash_mid_checkpoint_is_aborted_on_restart(
    anyio_backend: str, tmp_path: Path
) -> None:
    async def body(rig: Rig) -> None:
        rig.driver.submit(PeriodElapsed())
        await rig.until(lambda s: s.phase is S.COMMITTING)
        x = rig.state.attempt.op_id
        assert rig.journal.read_intent() is not None
        report = await rig.restart()
        assert report.intent == str(x)
        assert rig.journal.read_intent() is None
        for host in rig.fleet.hosts.values():
            assert host.state.fence.state is FenceState.IDLE
            assert host.state.fence.data.high_watermark >= x
        assert str(x) not in rig.store.published()
        outcome = await rig.checkpoint()
        assert outcome.result == "completed" and outcome.checkpoint_id.epoch == x.epoch + 1

    await run_rig(tmp_path, body)


async def test_s19_a_participant_restart_mid_checkpoint_keeps_its_journal(
    anyio_backend: str, tmp_path: Path
) -> None:
    async def body(rig: Rig) -> None:
        old = rig.host("agent-0").incarnation
        crashed: list[bool] = []

        def crash_in_commit(_event: Any, _effects: Any, state: Any) -> None:
            if state.phase is S.COMMITTING and not crashed:
                crashed.append(True)
                rig.fleet.crash_restart("agent-0")

        rig.driver.observers.append(crash_in_commit)
        outcome = await rig.checkpoint()
        await rig.settle()
        assert (outcome.result, outcome.reason) == ("failed", "participant_restarted")
        new = rig.host("agent-0")
        assert new.incarnation != old
        # The journal kept the fence: the abort of X reached the new incarnation, and a
        # stale prepare(X) is still refused after the restart.
        assert new.state.fence.data.high_watermark == outcome.checkpoint_id
        stale = ControlRequest(op_id=outcome.checkpoint_id, deadline_at=rig.clock.now() + 1)
        reply = await new.handle("prepare", stale)
        assert isinstance(reply, ErrorReply) and reply.code == "stale_checkpoint"
        assert (await rig.checkpoint()).result == "completed"

    await run_rig(tmp_path, body, agents=1)


async def test_a_restore_resumes_parked_rollouts_from_their_turn(
    anyio_backend: str, tmp_path: Path
) -> None:
    async def body(rig: Rig) -> None:
        rig.open("g0", size=2)
        await rig.poll(
            lambda: (
                len(rig.agent().executions) == 2
                and all(e.data.turn >= 1 for e in rig.agent().executions)
            )
        )
        outcome = await rig.checkpoint()
        assert outcome.result == "completed"
        report = await rig.restart()
        assert report.kind == "snapshot"
        assert report.metrics.siblings_resumed_from_turn == 2 and report.redispatched == 2
        keys = {
            (a.rollout_id, a.attempt, a.resume_from_turn)
            for a in rig.state.ledger.attempts
            if a.state is AttemptState.DISPATCHED
        }
        assert {(r, n) for r, n, _ in keys} == {("g0/0", 1), ("g0/1", 1)}
        assert all(turn >= 1 for _, _, turn in keys)
        await rig.sealed("g0")
        assert all(e.state is not ExecState.TOMBSTONED for e in rig.agent().executions)

    await run_rig(tmp_path, body, turns=30)
