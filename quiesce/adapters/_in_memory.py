"""The embedded in-memory fleet: `Participant` clients over `ParticipantHost`s, with faults.

What lives here: a client that carries each call to a host in the same process, after a
latency drawn from the clock's seeded RNG, and that can suffer the faults of PROTOCOL.md §8
(request lost, reply lost, 5xx, timeout, a stale request redelivered later, the server
crashing and restarting with exactly its §6 journal); and `InMemoryFleet`, which builds and
runs N policy, M agent and K resources hosts wired together. What it does not know: the
protocol. Hosts answer with the pure participant; the driver decides nothing either.

Faults come from two places:
- `Faults(rate=p)`: every control call (prepare, commit, resume, restore, discard, ack,
  retire) suffers a fault with probability `p`, its kind drawn from `kinds`, both from
  `clock.rng`; so a seeded virtual run is reproducible. `Faults(rate=p, kinds=CALL_FAULTS,
  restart_rate=r)` keeps process restarts apart: a call's faults are transient ones, and
  each call also restarts its participant with probability `r` (a restart is no property
  of one call, and §4 never retries it inside an attempt: measured apart, its cost shows);
- `client.inject(kind, op=..., times=n)`: the next `n` matching calls suffer `kind` (the
  scenario tests script faults this way).

How each fault looks to the caller (one `Cause` each, never an exception class):

| fault | the host | the caller |
|---|---|---|
| `DROP_REQUEST` | never sees it | `CallFailedError(REQUEST_LOST)` after the request leg |
| `DROP_REPLY` | handles it | `CallFailedError(REPLY_LOST)` after the round trip |
| `SERVER_ERROR` | never sees it | `CallFailedError(PARTICIPANT_ERROR)` (a 5xx) |
| `TIMEOUT` | never sees it | blocks until the caller's deadline (`TimeoutError` there) |
| `REDELIVER` | handles it, and again after `redelivery_delay_s` | the first reply |
| `CRASH_RESTART` | restarts from its journal (new incarnation) | `CallFailedError(IO_ERROR)` |

>>> import anyio
>>> from quiesce.adapters import VirtualClock, configure_logging
>>> configure_logging("error")
>>> from quiesce.protocol._ids import OpId
>>> from quiesce.protocol._messages import ControlRequest
>>> clock = VirtualClock(seed=1)
>>> async def main() -> str:
...     fleet = InMemoryFleet(clock, policies=1, agents=1, resources=1)
...     async with clock.task_group() as tg:
...         tg.start_soon(fleet.run)
...         request = ControlRequest(op_id=OpId(1, 1, 0), deadline_at=clock.now() + 5)
...         reply = await fleet.clients["policy-0"].prepare(request)
...         fleet.stop()
...     return reply.status
>>> anyio.run(clock.run, main)
'ready'
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import anyio
import structlog

from quiesce.adapters._clock import Clock, ClockEvent, TaskGroup
from quiesce.adapters._fence_log import FenceLogSink
from quiesce.adapters._host_journal import MemoryJournal
from quiesce.adapters._participant_api import CallFailedError, CompletionsReply, Participant
from quiesce.adapters._participant_host import (
    HostRef,
    HostStopped,
    ParticipantHost,
    WorkConfig,
    random_incarnation,
)
from quiesce.fsm import QuiesceError
from quiesce.protocol import Cause
from quiesce.protocol.participant import (
    PARTICIPANT_RULES,
    ParticipantConfig,
    ParticipantOp,
    ParticipantRules,
)
from quiesce.protocol.wire import Message, Receipt, Role

__all__ = [
    "CALL_FAULTS",
    "CONTROL_OPS",
    "FaultKind",
    "Faults",
    "InMemoryFleet",
    "InMemoryParticipant",
]

log = structlog.get_logger("quiesce.in_memory")

CONTROL_OPS: frozenset[ParticipantOp] = frozenset(
    {
        ParticipantOp.PREPARE,
        ParticipantOp.COMMIT,
        ParticipantOp.RESUME,
        ParticipantOp.RESTORE,
        ParticipantOp.DISCARD,
        ParticipantOp.ACK,
        ParticipantOp.RETIRE,
    }
)
"""The calls `Faults.rate` applies to: the controller's control calls."""

# A request without a deadline (discovery, queries) that times out waits this long.
_DEFAULT_TIMEOUT_S = 30.0


class FaultKind(Enum):
    """One injectable fault (see the module docstring for what each does)."""

    DROP_REQUEST = "drop_request"
    DROP_REPLY = "drop_reply"
    SERVER_ERROR = "server_error"
    TIMEOUT = "timeout"
    REDELIVER = "redeliver"
    CRASH_RESTART = "crash_restart"


CALL_FAULTS: tuple[FaultKind, ...] = tuple(k for k in FaultKind if k is not FaultKind.CRASH_RESTART)
"""The faults of one call (lost, 5xx, timed out, redelivered): every kind but a restart."""


@dataclass(frozen=True, slots=True)
class Faults:
    """Random faults: each call of `ops` restarts its participant with probability
    `restart_rate`, else suffers a fault with probability `rate`, of a kind drawn uniformly
    from `kinds` (all from `clock.rng`).

    >>> Faults(rate=0.1).rate
    0.1
    >>> Faults(rate=0.1, kinds=CALL_FAULTS, restart_rate=0.01).restart_rate
    0.01
    """

    rate: float = 0.0
    kinds: tuple[FaultKind, ...] = tuple(FaultKind)
    ops: frozenset[ParticipantOp] = CONTROL_OPS
    redelivery_delay_s: tuple[float, float] = (0.5, 5.0)
    restart_rate: float = 0.0

    def __post_init__(self) -> None:
        for what, value in (("fault rate", self.rate), ("restart rate", self.restart_rate)):
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{what} must be within [0, 1], got {value}")
        if self.rate > 0 and not self.kinds:
            raise ValueError("a positive fault rate needs at least one fault kind")


@dataclass(slots=True)
class _Scripted:
    kind: FaultKind
    op: ParticipantOp | None
    times: int


class UnknownParticipant(QuiesceError, KeyError):
    """The fleet has no participant called `name`."""

    def __init__(self, name: str, known: Sequence[str]) -> None:
        self.name = name
        self.known = tuple(known)
        super().__init__(f"no in-memory participant {name!r}; the fleet has {list(self.known)}")


class InMemoryParticipant(Participant):
    """A `Participant` client for one in-process host (followed across restarts).

    `latency_s` is the `(low, high)` range of each leg (request, reply), drawn uniformly
    from `clock.rng`. `service_s` maps an op to the `(low, high)` range of the server's own
    work on it (a commit writing a snapshot artifact), waited between the request leg and
    the server's answer; an op not in it costs only its legs (and draws nothing). Counters:
    `calls`, `faults` (by kind).
    """

    def __init__(
        self,
        fleet: InMemoryFleet,
        name: str,
        *,
        latency_s: tuple[float, float] = (0.001, 0.005),
        faults: Faults | None = None,
    ) -> None:
        self.name = name
        self._fleet = fleet
        self.latency_s = latency_s
        self.service_s: Mapping[ParticipantOp, tuple[float, float]] = {}
        self.faults = faults or Faults()
        self._scripted: list[_Scripted] = []
        self.calls = 0
        self.fault_counts: dict[FaultKind, int] = {}

    @property
    def host(self) -> ParticipantHost:
        """The host this client talks to now (a restart replaces it)."""
        return self._fleet.hosts[self.name]

    def inject(self, kind: FaultKind, *, op: ParticipantOp | None = None, times: int = 1) -> None:
        """Make the next `times` calls (of `op`, or any op) suffer `kind`."""
        self._scripted.append(_Scripted(kind, op, times))

    def _fault(self, op: ParticipantOp) -> FaultKind | None:
        for scripted in self._scripted:
            if scripted.op is None or scripted.op is op:
                scripted.times -= 1
                if scripted.times <= 0:
                    self._scripted.remove(scripted)
                return scripted.kind
        faults = self.faults
        if op not in faults.ops:
            return None
        rng = self._fleet.clock.rng
        # Drawn only when asked for: a run without restarts draws what it always drew.
        if faults.restart_rate > 0 and rng.random() < faults.restart_rate:
            return FaultKind.CRASH_RESTART
        if faults.rate > 0 and rng.random() < faults.rate:
            return faults.kinds[rng.randrange(len(faults.kinds))]
        return None

    async def _leg(self) -> None:
        low, high = self.latency_s
        if high > 0:
            await self._fleet.clock.sleep(self._fleet.clock.rng.uniform(low, high))

    async def _deliver(self, op: ParticipantOp, request: Message | None) -> Message:
        # A request that reached the server is served whatever the caller does meanwhile:
        # the caller's deadline cancels its wait, never the server's work.
        reply: Message | None = None
        with anyio.CancelScope(shield=True):
            try:
                reply = await self.host.handle(op, request)
            except HostStopped:
                raise CallFailedError(self.name, op, Cause.IO_ERROR, "connection refused") from None
            except OSError as error:
                raise CallFailedError(self.name, op, Cause.PARTICIPANT_ERROR, str(error)) from None
        assert reply is not None
        return reply

    async def send(
        self, op: ParticipantOp, request: Message | None, deadline_at: float | None
    ) -> Message:
        self.calls += 1
        fault = self._fault(op)
        if fault is not None:
            self.fault_counts[fault] = self.fault_counts.get(fault, 0) + 1
            log.debug("fault_injected", participant=self.name, op=op.value, fault=fault.value)
            if self._fleet.on_fault is not None:
                self._fleet.on_fault(self.name, op.value, fault)
        clock = self._fleet.clock
        if fault is FaultKind.TIMEOUT:
            at = deadline_at if deadline_at is not None else clock.now() + _DEFAULT_TIMEOUT_S
            await clock.sleep_until(at)
            raise CallFailedError(self.name, op, Cause.TIMEOUT, "no reply before the deadline")
        await self._leg()
        if fault is FaultKind.DROP_REQUEST:
            raise CallFailedError(self.name, op, Cause.REQUEST_LOST, "request lost")
        if fault is FaultKind.SERVER_ERROR:
            raise CallFailedError(self.name, op, Cause.PARTICIPANT_ERROR, "HTTP 503")
        if fault is FaultKind.CRASH_RESTART:
            self._fleet.crash_restart(self.name)
            raise CallFailedError(self.name, op, Cause.IO_ERROR, "connection reset")
        service = self.service_s.get(op)
        if service is not None:
            await clock.sleep(clock.rng.uniform(*service))
        reply = await self._deliver(op, request)
        if fault is FaultKind.REDELIVER:
            delay = clock.rng.uniform(*self.faults.redelivery_delay_s)
            self._fleet.later(delay, self._redeliver, op, request)
        await self._leg()
        if fault is FaultKind.DROP_REPLY:
            raise CallFailedError(self.name, op, Cause.REPLY_LOST, "reply lost")
        return reply

    async def _redeliver(self, op: ParticipantOp, request: Message | None) -> None:
        # The stale copy's reply goes nowhere: the call it answered is long over.
        try:
            reply = await self.host.handle(op, request)
        except (HostStopped, OSError):
            return
        log.debug("redelivered", participant=self.name, op=op.value, reply=type(reply).__name__)

    async def completions(self, *, deadline_at: float | None = None) -> CompletionsReply:
        """The host's completed-but-unACKed receipts (a query: never faulted)."""
        await self._leg()
        host = self.host
        if not host.alive:
            raise CallFailedError(
                self.name, ParticipantOp.STATUS, Cause.IO_ERROR, "connection refused"
            )
        return host.completions()


@dataclass(slots=True)
class _Later:
    at: float
    fn: Callable[..., Any]
    args: tuple[Any, ...] = field(default_factory=tuple)


class InMemoryFleet:
    """N policies, M agents and K resources servers in one process, wired together.

    Names are `policy-i`, `agent-i`, `resources-i`. Every agent's rollouts use every
    policy and every resources server. `resources_modes` gives the recovery mode of each
    resources server, cycled (`export_restore`, `stateless`, `restart_only`);
    `group_scored` marks every agent's environment group-scored with `group_size` G.
    `run_work=False`: hosts run no executions (a test reports `boundary`/`finish` itself).
    `fence_log`: every host, restarted ones included, records its requests there.
    `rules`: the tables every participant's pure step fires, restarted ones included (the
    protocol's own by default; a model checker passes a derived table).

    Run it in a clock task group (`tg.start_soon(fleet.run)`) until `stop()`; completions
    of agent executions go to `on_completed(participant, receipt)` (set it with
    `fleet.on_completed = ...`; it may be swapped, e.g. across controller restarts);
    `on_fault(participant, op, kind)`, if set, hears of every fault as it is injected.
    """

    def __init__(
        self,
        clock: Clock,
        *,
        policies: int = 1,
        agents: int = 2,
        resources: int = 1,
        resources_modes: Sequence[str] = ("export_restore",),
        group_scored: bool = False,
        group_size: int | None = None,
        latency_s: tuple[float, float] = (0.001, 0.005),
        faults: Faults | None = None,
        work: WorkConfig | None = None,
        run_work: bool = True,
        extra: Sequence[ParticipantConfig | Mapping[str, Any]] = (),
        fence_log: FenceLogSink | None = None,
        rules: ParticipantRules = PARTICIPANT_RULES,
    ) -> None:
        if policies < 0 or agents < 0 or resources < 0:
            raise ValueError("participant counts must be >= 0")
        if not resources_modes:
            raise ValueError("resources_modes needs at least one recovery mode")
        self.clock = clock
        self.work = work or WorkConfig()
        self.run_work = run_work
        self.fence_log = fence_log
        self.rules = rules
        self.on_completed: Callable[[str, Receipt], None] | None = None
        self.on_fault: Callable[[str, str, FaultKind], None] | None = None
        self.restarts: dict[str, int] = {}
        configs: list[ParticipantConfig] = []
        for i in range(policies):
            configs.append(
                ParticipantConfig(name=f"policy-{i}", role=Role.POLICY, recovery_mode="stateless")
            )
        for i in range(agents):
            configs.append(
                ParticipantConfig(
                    name=f"agent-{i}",
                    role=Role.AGENT,
                    recovery_mode="export_restore",
                    group_scored=group_scored,
                    group_size=group_size if group_scored else None,
                )
            )
        for i in range(resources):
            mode = resources_modes[i % len(resources_modes)]
            configs.append(
                ParticipantConfig(name=f"resources-{i}", role=Role.RESOURCES, recovery_mode=mode)
            )
        for cfg in extra:
            configs.append(
                cfg if isinstance(cfg, ParticipantConfig) else ParticipantConfig.model_validate(cfg)
            )
        self.configs: dict[str, ParticipantConfig] = {c.name: c for c in configs}
        self.journals: dict[str, MemoryJournal] = {name: MemoryJournal() for name in self.configs}
        self.hosts: dict[str, ParticipantHost] = {}
        self.refs: dict[str, HostRef] = {}
        for name, cfg in self.configs.items():
            host = ParticipantHost.start(
                cfg,
                clock=clock,
                journal=self.journals[name],
                work=self.work,
                run_work=run_work,
                fence_log=fence_log,
                rules=rules,
            )
            self.hosts[name] = host
            self.refs[name] = HostRef(host)
        self.clients: dict[str, InMemoryParticipant] = {
            name: InMemoryParticipant(self, name, latency_s=latency_s, faults=faults)
            for name in self.configs
        }
        for name in self.configs:
            self._wire(self.hosts[name])
        self._tg: TaskGroup | None = None
        self._pending: list[_Later] = []
        self._stopped: ClockEvent = clock.event()

    # ------------------------------------------------------------------ views

    @property
    def participants(self) -> Mapping[str, Participant]:
        """Every client, by participant name (what the driver takes)."""
        return dict(self.clients)

    def names(self, role: Role) -> tuple[str, ...]:
        """Participants of `role`, by name."""
        return tuple(n for n, c in self.configs.items() if c.role == role)

    def depends_on(self) -> tuple[tuple[str, tuple[str, ...]], ...]:
        """Which resources each agent's rollouts use (all of them), for discovery."""
        resources = self.names(Role.RESOURCES)
        return tuple((agent, resources) for agent in self.names(Role.AGENT))

    def client(self, name: str) -> InMemoryParticipant:
        """The client of participant `name`."""
        try:
            return self.clients[name]
        except KeyError:
            raise UnknownParticipant(name, list(self.clients)) from None

    # ------------------------------------------------------------------ lifecycle

    async def run(self) -> None:
        """Run every host's work until `stop()`."""
        async with self.clock.task_group() as tg:
            self._tg = tg
            for host in self.hosts.values():
                tg.start_soon(host.run, name=f"host:{host.name}")
            for later in self._pending:
                tg.start_soon(self._run_later, later)
            self._pending.clear()
            await self._stopped.wait()
            for host in self.hosts.values():
                host.stop()
            tg.cancel()
        self._tg = None

    def stop(self) -> None:
        """Stop every host and the fleet's tasks."""
        self._stopped.set()

    def later(self, delay_s: float, fn: Callable[..., Any], *args: Any) -> None:
        """Run `fn(*args)` (a coroutine function) `delay_s` from now, in the fleet's group."""
        item = _Later(self.clock.now() + delay_s, fn, args)
        if self._tg is None:
            self._pending.append(item)
        else:
            self._tg.start_soon(self._run_later, item)

    async def _run_later(self, item: _Later) -> None:
        await self.clock.sleep_until(item.at)
        await item.fn(*item.args)

    def crash_restart(self, name: str) -> ParticipantHost:
        """Participant `name` crashes and restarts at once from its journal (§6): its
        executions die, its fence and results survive, its incarnation changes."""
        old = self.hosts[name]
        old.crash()
        journal = self.journals[name]
        if journal.load() is None:
            host = ParticipantHost.start(
                self.configs[name],
                clock=self.clock,
                journal=journal,
                work=self.work,
                run_work=self.run_work,
                fence_log=self.fence_log,
                rules=self.rules,
            )
        else:
            host = ParticipantHost.recover(
                journal,
                random_incarnation(self.clock),
                clock=self.clock,
                work=self.work,
                run_work=self.run_work,
                fence_log=self.fence_log,
                rules=self.rules,
            )
        self.hosts[name] = host
        self.refs[name].host = host
        self.restarts[name] = self.restarts.get(name, 0) + 1
        self._wire(host)
        if self._tg is not None:
            self._tg.start_soon(host.run, name=f"host:{name}")
        log.info("participant_restarted", participant=name, incarnation=host.incarnation)
        return host

    def _wire(self, host: ParticipantHost) -> None:
        if host.config.role is not Role.AGENT:
            return
        host.connect(
            policies=[self.refs[n] for n in self.names(Role.POLICY)],
            resources=[self.refs[n] for n in self.names(Role.RESOURCES)],
            on_completed=self._completed,
        )

    def _completed(self, participant: str, receipt: Receipt) -> None:
        if self.on_completed is not None:
            self.on_completed(participant, receipt)
