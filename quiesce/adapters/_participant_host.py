"""`ParticipantHost`: one pure participant running in a process, and the role's work.

What lives here: the glue between the pure participant (`quiesce.protocol`
`new_participant` / `handle` / `from_journal`) and a runtime. The host serialises every
operation on the state, writes the journal (§6) *before* a reply is released, carries out
the role effects the pure core returns, and runs the role's work for the simulation. What
it does not know: the transport (the in-memory, HTTP and Ray adapters call `handle`), or any
protocol rule: every decision (refusals, replays, readiness, what a resume releases) is the
pure core's; the host only executes it.

API (stable; the in-memory client and the driver build on it):

    host = ParticipantHost.start(config, clock=clock, journal=MemoryJournal())
    host = ParticipantHost.recover(journal, "inc-2", clock=clock)   # restart (§6)
    host = ParticipantHost.open(config, journal, clock=clock)       # recover if journal
    host.connect(policies=[...], resources=[...])                   # agent's services
    async with clock.task_group() as tg:
        tg.start_soon(host.run)          # the role's work (executions); returns on stop
        reply = await host.handle("prepare", ControlRequest(...))  # any ParticipantOp
        host.crash()                     # executions die; only the journal survives
    host.state / host.incarnation / host.name / host.alive / host.completions()

- `handle(op, request)` answers every `ParticipantOp` with the pure core's reply (an
  `ErrorReply` for a refusal, including `malformed_request`). It raises `HostStopped` once
  the host crashed or stopped, and lets a journal write's `OSError` through (state and
  reply are then *not* released: a failure records nothing).
- Operations are serialised by one clock `Lock`. A concurrent duplicate of an in-flight
  `(op, op_id)` (prepare, commit, resume, restore) waits for the first and gets the same
  reply; if the first failed, the duplicate runs on its own.
- Journal (`_host_journal`): `JournalSink` with `FileJournal(state_dir)` (a sha256 header
  line, verified on load, then the journal's JSON; atomic write + fsync of file and
  directory via `_durable.atomic_write`, in a worker thread) and `MemoryJournal` (keeps
  exactly the last journal written: what would be on disk). The incarnation is picked at
  start by `incarnation_factory` (default: 64 bits from `clock.rng`, so a seeded virtual
  run is reproducible; `quiesce serve` passes `secrets.token_hex`).
- Rules: `rules=` (a `ParticipantRules`; every constructor takes it, and `recover` rebuilds
  the journal by it too) names the tables every pure call of the host fires. The default is
  the protocol's own (`PARTICIPANT_RULES`); a model checker passes derived tables to run a
  mutant participant through this very runtime (`quiesce mutants`' participant stage).
- Fence log (`_fence_log`): with `fence_log=` a `FenceLogSink`, every request `handle`
  applied is recorded as one `FenceLogLine` (the fence before and after it), in the order
  requests are applied; `quiesce validate` checks such a log against the design model.
- Role effects: `ReleaseWaiters` wakes the held policy calls / resources mutations,
  `WakeExecutions` wakes parked executions, `CancelExecution` stops a tombstoned one.

The role's work (simulation; every sleep is on the injected `Clock`, every draw from
`clock.rng`):
- **agent**: a successful `begin` starts an execution task that goes turn by turn: at a
  boundary it starts the turn's policy call only if `may_start_outbound_call` (else it
  reports the boundary, parks, and waits to be woken), then makes `mutations_per_turn`
  resources mutations, then reports `boundary(turn+1)`; after the last turn (again parked
  first if the fence is closed) it reports `finish`, and a completion is announced to
  `on_completed(participant, receipt)`. A policy call held as a waiter makes the
  execution `frozen` (`agent_policy_call_held`) until the policy releases it
  (`agent_policy_call_resumed`). A crash cancels every execution.
- **policy**: `generate(call_id, held=..., released=...)` admits the call or holds it as a
  waiter (`policy_call_started`), sleeps the generation latency, then
  `policy_call_finished` (the last call of a drain pauses the server).
- **resources**: `mutate(mutation_id, rollout_id)` admits or holds the mutation
  (`mutation_started`), sleeps, then `mutation_finished` (the last one freezes the server).
- A call whose caller goes away (its agent crashed: the call is cancelled) still ends on
  the server: an admitted one is finished at once, a held one as soon as a resume admits
  it. Otherwise the server would count it in flight forever and never be ready again.
- A service call on a crashed host raises `HostStopped`; an agent retries it after
  `retry_backoff_s` (up to `max_service_retries`), since a restarted server answers again.
  `HostRef` is a stable handle on "the current host named X" for such wiring.

A host that is not `run()` still answers every request, but runs no work (useful for
conformance tests, or when an external runtime reports `boundary` / `finish` itself; pass
`run_work=False` to disable the executions of a running host).

Hooks for a service's own rollout code (`run_work=False`; docs/adopting.md): `begin`,
`boundary` and `finish` are the M3 operations as keyword calls (each returns the
`ExecutionReply` or the `ErrorReply` refusal, exactly what the HTTP route would answer);
`at_boundary(rollout_id, attempt)` waits, before a turn's first outbound call (and before
`finish`), until the fence lets the execution go on, parking it if a checkpoint asked
(False: it was retired, drop it); `async with host.mutation(mutation_id, rollout_id)` wraps
one state change of a resources server (admitted, or held while the server is frozen).
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio
import structlog

from quiesce.adapters._clock import Clock, ClockEvent, Lock, TaskGroup
from quiesce.adapters._fence_log import FenceLogLine, FenceLogSink
from quiesce.adapters._host_journal import ForeignJournal, JournalSink, MemoryJournal
from quiesce.adapters._participant_api import CompletionsReply
from quiesce.fsm import QuiesceError, TransitionNotAllowed
from quiesce.protocol import Refusal
from quiesce.protocol.machines import ExecState, FenceState
from quiesce.protocol.participant import (
    PARTICIPANT_RULES,
    AgentRole,
    Answer,
    CancelExecution,
    JournalWrite,
    ParticipantConfig,
    ParticipantEffect,
    ParticipantOp,
    ParticipantRules,
    ParticipantState,
    ReleaseWaiters,
    WakeExecutions,
    agent_policy_call_held,
    agent_policy_call_resumed,
    from_journal,
    handle,
    may_start_outbound_call,
    mutation_finished,
    mutation_started,
    new_participant,
    policy_call_finished,
    policy_call_started,
)
from quiesce.protocol.wire import (
    BeginRequest,
    BoundaryRequest,
    ErrorReply,
    ExecutionReply,
    FinishRequest,
    Message,
    Receipt,
)

__all__ = [
    "DEDUPED_OPS",
    "HostRef",
    "HostStopped",
    "NoJournal",
    "ParticipantHost",
    "PolicyService",
    "ResourcesService",
    "WorkConfig",
    "dedupe_key",
    "random_incarnation",
    "secret_incarnation",
]

log = structlog.get_logger("quiesce.host")

Key = tuple[str, int]
Hook = Callable[[], Awaitable[None]]

DEDUPED_OPS = (
    ParticipantOp.PREPARE,
    ParticipantOp.COMMIT,
    ParticipantOp.RESUME,
    ParticipantOp.RESTORE,
)
"""The operations whose concurrent duplicates are one operation (M2: "a concurrent
duplicate waits for the first and gets its reply"); see `dedupe_key`."""


# ---------------------------------------------------------------------------- errors


class HostStopped(QuiesceError):
    """Participant `participant` crashed or was stopped: this host answers nothing more
    (a restarted participant is a new host, with a new incarnation)."""

    def __init__(self, participant: str) -> None:
        self.participant = participant
        super().__init__(
            f"participant {participant!r} is not running (crashed or stopped); "
            "restart it with ParticipantHost.recover(journal, new_incarnation)"
        )


class NoJournal(QuiesceError):
    """`recover` found no journal in `where`: there is nothing to restart from."""

    def __init__(self, where: str) -> None:
        self.where = where
        super().__init__(f"no participant journal in {where}; use ParticipantHost.start")


# ---------------------------------------------------------------------------- services


class PolicyService(Protocol):
    """What an agent execution needs from a policy server (one generation call)."""

    async def generate(
        self, call_id: str, *, held: Hook | None = None, released: Hook | None = None
    ) -> None:
        """Run generation call `call_id`. If the server holds it as a waiter, `held()` is
        awaited first and `released()` once it proceeds. Raises `HostStopped` if the
        server is down."""


class ResourcesService(Protocol):
    """What an agent execution needs from a resources server (state mutations)."""

    @property
    def restart_only(self) -> bool:
        """Whether this server's state cannot be restored (`restart_only` recovery mode)."""

    async def mutate(self, mutation_id: str, rollout_id: str) -> None:
        """Change `rollout_id`'s state (waits while the server is frozen). Raises
        `HostStopped` if the server is down."""


@dataclass(frozen=True, slots=True)
class WorkConfig:
    """How the simulated work behaves: latencies are drawn uniformly from `(low, high)`
    seconds on the host's clock."""

    policy_latency_s: tuple[float, float] = (0.02, 0.1)
    mutation_latency_s: tuple[float, float] = (0.005, 0.02)
    step_latency_s: tuple[float, float] = (0.01, 0.05)  # a turn with no policy wired
    mutations_per_turn: int = 1
    retry_backoff_s: float = 0.05
    max_service_retries: int = 200


def random_incarnation(clock: Clock) -> str:
    """A 64-bit incarnation token drawn from `clock.rng` (reproducible under a seed)."""
    return f"inc-{clock.rng.getrandbits(64):016x}"


def secret_incarnation() -> str:
    """A 64-bit incarnation token from the OS's CSPRNG (real servers)."""
    return f"inc-{secrets.token_hex(8)}"


@dataclass(eq=False, slots=True)
class _Pending:
    done: ClockEvent
    reply: Message | None = None


@dataclass(eq=False, slots=True)
class _Waiter:
    event: ClockEvent
    dead: bool = False
    # Set when the caller went away while held: the call is finished as soon as released.
    abandoned: Callable[[ParticipantState], ParticipantState] | None = None


@dataclass(slots=True)
class _Wiring:
    policies: tuple[PolicyService, ...] = ()
    resources: tuple[ResourcesService, ...] = ()
    on_completed: Callable[[str, Receipt], None] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


# ---------------------------------------------------------------------------- the host


class ParticipantHost:
    """Runs one pure participant: see the module docstring for the whole API."""

    def __init__(
        self,
        state: ParticipantState,
        *,
        clock: Clock,
        journal: JournalSink,
        work: WorkConfig | None = None,
        run_work: bool = True,
        on_completed: Callable[[str, Receipt], None] | None = None,
        fence_log: FenceLogSink | None = None,
        rules: ParticipantRules = PARTICIPANT_RULES,
    ) -> None:
        self.clock = clock
        self.rules = rules
        self.journal = journal
        self.fence_log = fence_log
        self.work = work or WorkConfig()
        self.run_work = run_work
        self._state = state
        self._lock = Lock(clock)
        self._alive = True
        self._inflight: dict[tuple[str, str], _Pending] = {}
        self._waiters: dict[str, _Waiter] = {}
        self._wakes: dict[Key, ClockEvent] = {}
        self._turns: dict[Key, int] = {}
        self._tg: TaskGroup | None = None
        self._pending_starts: list[Key] = []
        self._stopped = clock.event()
        self._wiring = _Wiring(on_completed=on_completed)
        self._log = log.bind(participant=state.config.name, incarnation=state.incarnation)

    # ------------------------------------------------------------------ construction

    @classmethod
    def start(
        cls,
        config: ParticipantConfig | Mapping[str, Any],
        *,
        clock: Clock,
        journal: JournalSink | None = None,
        incarnation: str | None = None,
        incarnation_factory: Callable[[], str] | None = None,
        **options: Any,
    ) -> ParticipantHost:
        """A fresh participant (fence idle, nothing journaled yet).

        The incarnation is `incarnation`, else `incarnation_factory()`, else drawn from
        `clock.rng` (`random_incarnation`)."""
        chosen = incarnation or (
            incarnation_factory() if incarnation_factory else random_incarnation(clock)
        )
        state = new_participant(config, chosen)
        return cls(state, clock=clock, journal=journal or MemoryJournal(), **options)

    @classmethod
    def recover(
        cls,
        journal: JournalSink,
        new_incarnation: str,
        *,
        clock: Clock,
        rules: ParticipantRules = PARTICIPANT_RULES,
        **options: Any,
    ) -> ParticipantHost:
        """Restart after a crash (§6): rebuild from `journal` under `new_incarnation`
        (by `rules`, as the host then runs). Raises `NoJournal` if nothing was ever
        journaled, `JournalCorrupt` if it is bad."""
        saved = journal.load()
        if saved is None:
            raise NoJournal(journal.describe())
        state = from_journal(saved, new_incarnation, rules)
        return cls(state, clock=clock, journal=journal, rules=rules, **options)

    @classmethod
    def open(
        cls,
        config: ParticipantConfig | Mapping[str, Any],
        journal: JournalSink,
        *,
        clock: Clock,
        incarnation_factory: Callable[[], str] | None = None,
        **options: Any,
    ) -> ParticipantHost:
        """`recover` from `journal` if it holds one (with a new incarnation), else `start`.
        A journal written by another participant (name or role differ) is refused
        (`ForeignJournal`)."""
        cfg = (
            config
            if isinstance(config, ParticipantConfig)
            else ParticipantConfig.model_validate(config)
        )
        factory = incarnation_factory or (lambda: random_incarnation(clock))
        saved = journal.load()
        if saved is None:
            return cls.start(cfg, clock=clock, journal=journal, incarnation=factory(), **options)
        if (saved.config.name, saved.config.role) != (cfg.name, cfg.role):
            raise ForeignJournal(
                journal.describe(),
                recorded_name=saved.config.name,
                recorded_role=saved.config.role,
                given_name=cfg.name,
                given_role=cfg.role,
            )
        return cls.recover(journal, factory(), clock=clock, **options)

    def connect(
        self,
        *,
        policies: Sequence[PolicyService] = (),
        resources: Sequence[ResourcesService] = (),
        on_completed: Callable[[str, Receipt], None] | None = None,
    ) -> None:
        """Wire an agent's executions to the services they call (and the completion hook)."""
        self._wiring.policies = tuple(policies)
        self._wiring.resources = tuple(resources)
        if on_completed is not None:
            self._wiring.on_completed = on_completed

    # ------------------------------------------------------------------ views

    @property
    def state(self) -> ParticipantState:
        """The current pure state (a frozen value)."""
        return self._state

    @property
    def name(self) -> str:
        """The participant's name."""
        return self._state.config.name

    @property
    def config(self) -> ParticipantConfig:
        """The participant's configuration."""
        return self._state.config

    @property
    def incarnation(self) -> str:
        """This process's incarnation token (in every reply)."""
        return self._state.incarnation

    @property
    def alive(self) -> bool:
        """False once `crash()` or `stop()` was called."""
        return self._alive

    def completions(self) -> CompletionsReply:
        """Receipts of completed-but-unACKed executions (empty for policy and resources)."""
        return CompletionsReply.of(self._state)

    # ------------------------------------------------------------------ lifecycle

    async def run(self) -> None:
        """Run the role's work (agent executions) until `stop()` or `crash()`.

        Start it in a clock task group (`tg.start_soon(host.run)`)."""
        async with self.clock.task_group() as tg:
            self._tg = tg
            for key in self._pending_starts:
                tg.start_soon(self._execute, key, name=f"{self.name}:{key[0]}#{key[1]}")
            self._pending_starts.clear()
            await self._stopped.wait()
            tg.cancel()
        self._tg = None

    def stop(self) -> None:
        """Stop answering and cancel the work (a clean shutdown keeps the journal too)."""
        self.crash()

    def crash(self) -> None:
        """The process dies: every execution and held call dies with it; only the journal
        survives. Later calls raise `HostStopped`."""
        if not self._alive:
            return
        self._alive = False
        self._log.info("participant_stopped")
        for waiter in self._waiters.values():
            waiter.dead = True
            waiter.event.set()
        self._waiters.clear()
        for wake in self._wakes.values():
            wake.set()
        self._wakes.clear()
        for pending in self._inflight.values():
            pending.done.set()
        self._stopped.set()
        if self._tg is not None:
            self._tg.cancel()

    def _check_alive(self) -> None:
        if not self._alive:
            raise HostStopped(self.name)

    # ------------------------------------------------------------------ requests

    async def handle(self, op: ParticipantOp | str, request: Any = None) -> Message:
        """Answer one request (see the module docstring). Raises `HostStopped` when the
        host is down and `OSError` when the journal cannot be written."""
        self._check_alive()
        parsed = op if isinstance(op, ParticipantOp) else ParticipantOp.named(str(op))
        key = dedupe_key(parsed, request)
        if key is None:
            return await self._apply(op, request)
        while (pending := self._inflight.get(key)) is not None:
            await pending.done.wait()
            self._check_alive()
            if pending.reply is not None:
                return pending.reply
        entry = _Pending(self.clock.event())
        self._inflight[key] = entry
        try:
            entry.reply = await self._apply(op, request)
            return entry.reply
        finally:
            if self._inflight.get(key) is entry:
                del self._inflight[key]
            entry.done.set()

    async def _apply(self, op: ParticipantOp | str, request: Any) -> Message:
        async with self._lock:
            self._check_alive()
            before = self._state
            after, reply, effects = handle(before, op, request, self.clock.now(), rules=self.rules)
            await self._persist(effects)
            self._check_alive()  # died while writing: the reply is never released
            self._state = after
            self._carry(effects)
            if self.fence_log is not None:
                self.fence_log.record(
                    FenceLogLine.of(
                        _op_name(op), _op_id(request), before, self._state, self.clock.now()
                    )
                )
            if before.fence.state is not FenceState.IDLE and after.fence.state is FenceState.IDLE:
                self._wake_all()  # an execution waiting for the fence may go on
            if isinstance(reply, ExecutionReply) and _op_name(op) == "begin":
                self._started(request, reply)
        if isinstance(reply, ErrorReply):
            self._log.debug("refused", op=_op_name(op), code=reply.code)
        return reply

    async def _persist(self, effects: tuple[ParticipantEffect, ...]) -> None:
        for effect in effects:
            if isinstance(effect, JournalWrite):
                await self.journal.write(effect.journal)

    def _carry(self, effects: tuple[ParticipantEffect, ...]) -> None:
        for effect in effects:
            if isinstance(effect, ReleaseWaiters):
                for waiter_id in effect.ids:
                    waiter = self._waiters.pop(waiter_id, None)
                    if waiter is not None and waiter.abandoned is not None:
                        # Admitted by this very step with nobody left to run it: it ends now
                        # (we hold the lock, so this is the next state change).
                        self._state = waiter.abandoned(self._state)
                    elif waiter is not None:
                        waiter.event.set()
            elif isinstance(effect, WakeExecutions):
                for key in effect.keys:
                    self._wake(key)
            elif isinstance(effect, CancelExecution):
                # The execution sees `tombstoned` at its next step and ends there.
                self._wake((effect.rollout_id, effect.attempt))

    async def _internal(self, event: Callable[[ParticipantState], Answer]) -> None:
        """Apply an internal event of the role under the lock. A refusal or a machine
        rejection here is a late event (the execution was retired meanwhile): dropped."""
        async with self._lock:
            self._check_alive()
            try:
                state, _, effects = event(self._state)
            except (Refusal, TransitionNotAllowed) as late:
                self._log.debug("late_event_dropped", detail=str(late))
                return
            await self._persist(effects)
            self._check_alive()
            self._state = state
            self._carry(effects)

    async def _update(self, event: Callable[[ParticipantState], ParticipantState]) -> None:
        async with self._lock:
            self._check_alive()
            self._state = event(self._state)

    # ------------------------------------------------------------------ rollout hooks

    async def begin(
        self,
        rollout_id: str,
        attempt: int,
        *,
        group_id: str,
        turns: int,
        resume_from_turn: int = 0,
    ) -> ExecutionReply | ErrorReply:
        """Start execution `(rollout_id, attempt)` (M3 `begin`): `ExecutionReply` (state
        `running`), or the refusal: `admission_closed` (a checkpoint is under way: wait and
        try again), `stale_attempt` (acked or retired: drop it), `duplicate_execution`."""
        request = BeginRequest(
            rollout_id=rollout_id,
            attempt=attempt,
            group_id=group_id,
            turns=turns,
            resume_from_turn=resume_from_turn,
        )
        return _execution_answer(await self.handle(ParticipantOp.BEGIN, request))

    async def boundary(
        self, rollout_id: str, attempt: int, turn: int, *, restart_only_dependency: bool = False
    ) -> ExecutionReply | ErrorReply:
        """Report that the execution finished turn `turn - 1` (its state is durable up to
        `turn`): state `running`, `parked` (a checkpoint asked; `at_boundary` waits for the
        resume) or `tombstoned` (retired: drop the rollout). `restart_only_dependency`: the
        turn changed state on a `restart_only` resources server."""
        request = BoundaryRequest(
            rollout_id=rollout_id,
            attempt=attempt,
            turn=turn,
            restart_only_dependency=restart_only_dependency,
        )
        return _execution_answer(await self.handle(ParticipantOp.BOUNDARY, request))

    async def finish(
        self, rollout_id: str, attempt: int, result: Mapping[str, Any] | None = None
    ) -> ExecutionReply | ErrorReply:
        """The rollout finished with `result`: state `completed` and the `receipt` the
        controller ACKs (the result is held until then), or `tombstoned` (retired: the
        result is dropped, never reported)."""
        request = FinishRequest(rollout_id=rollout_id, attempt=attempt, result=dict(result or {}))
        return _execution_answer(await self.handle(ParticipantOp.FINISH, request))

    async def at_boundary(self, rollout_id: str, attempt: int) -> bool:
        """Wait at the execution's current boundary until a new outbound call may start
        (M3: none starts while the fence is not idle): True to go on with the next turn (or
        `finish`); False if the execution is gone (retired, or never begun): drop it. If a
        checkpoint asked it to park, the boundary is reported here (it parks) and the wait
        lasts until the fence resumes."""
        return await self._at_boundary((rollout_id, attempt))

    @contextlib.asynccontextmanager
    async def mutation(self, mutation_id: str, rollout_id: str) -> AsyncIterator[None]:
        """One state change of `rollout_id` on this resources server (M5): entered once the
        mutation is admitted (it waits while the server is frozen for a checkpoint), and
        counted in flight until the block ends, so a prepare waits for it."""
        waiter = await self._admit(
            lambda s: mutation_started(s, mutation_id, rollout_id, rules=self.rules), mutation_id
        )
        try:
            if waiter is not None:
                await self._held(waiter)
            yield
        finally:
            await self._finish(
                waiter, lambda s: mutation_finished(s, mutation_id, rollout_id, rules=self.rules)
            )

    # ------------------------------------------------------------------ agent work

    def _started(self, request: Any, reply: ExecutionReply) -> None:
        if reply.state != ExecState.RUNNING.value or not self.run_work:
            return
        begin = (
            request if isinstance(request, BeginRequest) else BeginRequest.model_validate(request)
        )
        key = (begin.rollout_id, begin.attempt)
        self._turns[key] = begin.turns
        if self._tg is None:
            self._pending_starts.append(key)
        else:
            self._tg.start_soon(self._execute, key, name=f"{self.name}:{key[0]}#{key[1]}")

    def _execution_state(self, key: Key) -> ExecState | None:
        role = self._state.role
        execution = role.find(key) if isinstance(role, AgentRole) else None
        return None if execution is None else execution.state

    def _turn(self, key: Key) -> int:
        role = self._state.role
        execution = role.find(key) if isinstance(role, AgentRole) else None
        return 0 if execution is None else execution.data.turn

    def _wake(self, key: Key) -> None:
        event = self._wakes.pop(key, None)
        if event is not None:
            event.set()

    def _wake_all(self) -> None:
        for key in list(self._wakes):
            self._wake(key)

    async def _wait_wake(self, key: Key) -> None:
        event = self._wakes.get(key)
        if event is None:
            event = self._wakes[key] = self.clock.event()
        await event.wait()
        self._check_alive()

    async def _execute(self, key: Key) -> None:
        try:
            await self._run_execution(key)
        except HostStopped:
            return  # this host, or a service with no more retries, is gone

    async def _run_execution(self, key: Key) -> None:
        rollout_id, attempt = key
        turns = self._turns[key]
        while True:
            if not await self._at_boundary(key):
                return
            turn = self._turn(key)
            if turn >= turns:
                break
            dependency = await self._one_turn(key, turn)
            boundary = BoundaryRequest(
                rollout_id=rollout_id,
                attempt=attempt,
                turn=turn + 1,
                restart_only_dependency=dependency,
            )
            reply = await self.handle(ParticipantOp.BOUNDARY, boundary)
            if not isinstance(reply, ExecutionReply) or reply.state == "tombstoned":
                return
        result = {"reward": round(self.clock.rng.random(), 6), "turns": turns}
        finish = FinishRequest(rollout_id=rollout_id, attempt=attempt, result=result)
        reply = await self.handle(ParticipantOp.FINISH, finish)
        self._turns.pop(key, None)
        if isinstance(reply, ExecutionReply) and reply.receipt is not None:
            self._log.debug("execution_completed", rollout_id=rollout_id, attempt=attempt)
            hook = self._wiring.on_completed
            if hook is not None:
                hook(self.name, reply.receipt)

    async def _at_boundary(self, key: Key) -> bool:
        """Wait at the current boundary until a new outbound call may start: True to go
        on, False if the execution is gone (tombstoned, or never started)."""
        while True:
            self._check_alive()
            state = self._execution_state(key)
            if state is None or state is ExecState.TOMBSTONED:
                return False
            if state is ExecState.RUNNING and may_start_outbound_call(self._state):
                return True
            if state is ExecState.PARK_REQUESTED:
                # The fence closed while we sit at a boundary: report it, which parks us.
                request = BoundaryRequest(rollout_id=key[0], attempt=key[1], turn=self._turn(key))
                reply = await self.handle(ParticipantOp.BOUNDARY, request)
                if isinstance(reply, ErrorReply):
                    return False
                continue
            # parked (or running behind a closed fence): wait for a wake or a resume.
            await self._wait_wake(key)

    async def _one_turn(self, key: Key, turn: int) -> bool:
        """One turn: the policy call, then the resources mutations. Returns whether it
        changed state on a `restart_only` resources server."""
        rollout_id, attempt = key
        call_id = f"{rollout_id}#{attempt}/t{turn}"
        rng = self.clock.rng
        policies, resources = self._wiring.policies, self._wiring.resources
        if policies:
            policy = policies[rng.randrange(len(policies))]

            async def held() -> None:
                await self._internal(
                    lambda s: agent_policy_call_held(s, rollout_id, attempt, rules=self.rules)
                )

            async def released() -> None:
                await self._internal(
                    lambda s: agent_policy_call_resumed(s, rollout_id, attempt, rules=self.rules)
                )

            await self._retrying(
                lambda n: policy.generate(f"{call_id}~{n}", held=held, released=released)
            )
        else:
            await self.clock.sleep(rng.uniform(*self.work.step_latency_s))
        dependency = False
        for index in range(self.work.mutations_per_turn if resources else 0):
            server = resources[rng.randrange(len(resources))]
            mutation_id = f"{call_id}/m{index}"
            await self._retrying(
                lambda n, s=server, m=mutation_id: s.mutate(f"{m}~{n}", rollout_id)  # type: ignore[misc]
            )
            dependency = dependency or server.restart_only
        return dependency

    async def _retrying(self, call: Callable[[int], Awaitable[None]]) -> None:
        for attempt in range(self.work.max_service_retries):
            self._check_alive()
            try:
                await call(attempt)
                return
            except HostStopped:
                await self.clock.sleep(self.work.retry_backoff_s)
        raise HostStopped(self.name)

    # ------------------------------------------------------------------ policy / resources

    async def generate(
        self, call_id: str, *, held: Hook | None = None, released: Hook | None = None
    ) -> None:
        """A generation call on this policy server (see `PolicyService`)."""
        waiter = await self._admit(
            lambda s: policy_call_started(s, call_id, rules=self.rules), call_id
        )
        try:
            if waiter is not None:
                if held is not None:
                    await held()
                await self._held(waiter)
                if released is not None:
                    await released()
            await self.clock.sleep(self.clock.rng.uniform(*self.work.policy_latency_s))
        finally:
            await self._finish(waiter, lambda s: policy_call_finished(s, call_id, rules=self.rules))

    @property
    def restart_only(self) -> bool:
        """Whether this (resources) server cannot restore its state."""
        return self._state.config.recovery_mode == "restart_only"

    async def mutate(self, mutation_id: str, rollout_id: str) -> None:
        """A state mutation on this resources server (see `ResourcesService`)."""
        async with self.mutation(mutation_id, rollout_id):
            await self.clock.sleep(self.clock.rng.uniform(*self.work.mutation_latency_s))

    async def _admit(
        self, event: Callable[[ParticipantState], tuple[ParticipantState, bool]], waiter_id: str
    ) -> _Waiter | None:
        """Start a call; None if admitted, else its waiter (registered under the lock, so
        the `ReleaseWaiters` of a resume can never be missed)."""
        async with self._lock:
            self._check_alive()
            state, admitted = event(self._state)
            self._state = state
            if admitted:
                return None
            waiter = self._waiters[waiter_id] = _Waiter(self.clock.event())
            return waiter

    async def _finish(
        self,
        waiter: _Waiter | None,
        finished: Callable[[ParticipantState], ParticipantState],
    ) -> None:
        """End a call that `_admit` started, however its caller left (returned, raised, or
        was cancelled because its agent died): the pure core's count must drain."""
        if waiter is not None and waiter.dead:
            return  # this server crashed: its state died with it
        if waiter is not None and not waiter.event.is_set():
            # Still held: the core counts it as a waiter, not in flight. It is finished
            # the moment a resume admits it (`_carry`).
            waiter.abandoned = finished
            return
        # Shielded: a cancelled caller must still get the lock and apply the finish.
        with anyio.CancelScope(shield=True), contextlib.suppress(HostStopped):
            await self._update(finished)

    async def _held(self, waiter: _Waiter) -> None:
        await waiter.event.wait()
        if waiter.dead:
            raise HostStopped(self.name)


def _execution_answer(reply: Message) -> ExecutionReply | ErrorReply:
    """An execution operation's reply, typed (the pure core answers nothing else)."""
    assert isinstance(reply, ExecutionReply | ErrorReply), type(reply).__name__
    return reply


def _op_name(op: ParticipantOp | str) -> str:
    return op.value if isinstance(op, ParticipantOp) else str(op)


def _op_id(request: Any) -> str | None:
    """The op id a request carries, as sent (None: it has none)."""
    op_id = getattr(request, "op_id", None)
    if op_id is None and isinstance(request, Mapping):
        op_id = request.get("op_id")
    return None if op_id is None else str(op_id)


def dedupe_key(op: ParticipantOp | None, request: Any) -> tuple[str, str] | None:
    """`(op, op_id)` for a fenced control request (M2: a concurrent duplicate waits for the
    first and gets its reply), None for any other request."""
    op_id = _op_id(request)
    if op not in DEDUPED_OPS or op is None or op_id is None:
        return None
    return op.value, op_id


class HostRef:
    """A stable handle on "the current host named X": a crash-restart swaps `host`, and
    wiring that holds the ref (an agent's policies and resources) follows it.

    Implements `PolicyService` and `ResourcesService` by delegation."""

    def __init__(self, host: ParticipantHost) -> None:
        self.host = host

    @property
    def restart_only(self) -> bool:
        """See `ParticipantHost.restart_only`."""
        return self.host.restart_only

    async def generate(
        self, call_id: str, *, held: Hook | None = None, released: Hook | None = None
    ) -> None:
        """See `ParticipantHost.generate`."""
        await self.host.generate(call_id, held=held, released=released)

    async def mutate(self, mutation_id: str, rollout_id: str) -> None:
        """See `ParticipantHost.mutate`."""
        await self.host.mutate(mutation_id, rollout_id)
