"""The `protocol` model: the composed checkpoint protocol, explored exhaustively.

What lives here: `ProtocolModel`, a `Model` over the pure composed system of
`quiesce.models._system` (the real coordinator and the real participants, built from the
same tables the runtime executes) plus an *environment* that plays everything else of
PROTOCOL.md §8: the rollouts' turns and finishes, deadline expiry, the periodic and
trainer-boundary triggers, the optimizer step, the train switch and the weight sync, the
trainer, and the faults (request lost, reply lost, 5xx, timeout, a stale delayed request
redelivered, controller crash, participant crash) under a budget. What it does not know:
how any of those machines decide; it only offers the moves and watches.

The environment keeps its own ledger (`Env`): what completed, what it trained, what a
controller crash rolled back, which ids a participant committed, which calls were sent in
which order, what the controller reported. The properties of §5 (I1-I6, I8 as `always`, I7
as the explorer's must-style `no_stall`) are judged against that ledger and the
participants' own states, never against the coordinator's bookkeeping alone, so a
coordinator that lies to itself is still caught.

How the state stays small (the explorer's notes):
- time is abstract. `now` stays 0: every timer may fire at any moment (that *is* the
  timing nondeterminism), so absolute timestamps carry no information and the per-phase
  seconds of an attempt are dropped from the state (they feed metrics only);
- in-flight messages are a multiset (sorted), since any one may be delivered next;
- every loop is bounded by the environment: triggers, prepare retries, attempts, faults,
  the optimizer step, the train switch and the weight sync are counted, so the fault-free
  graph is acyclic except through goal states;
- ids are already by order of creation (`ck-{epoch}-{seq}`), incarnations are
  `{name}-{n}`; a state hashes once (`PState` caches its hash).

A controller crash restarts the real coordinator: it finishes its intent (§6) and runs the
M9 restore from the published snapshots, whose restore calls are ordered by I5 and can be
corrupted by the wrong-digest fault; the environment counts everything dispatched and not
trained as rolled back then (the restore's own planning is tested in
`tests/protocol/test_restore.py`). Not expressed here: the policy calls that freeze an
execution (§8's environment has none) and the S13/S14 setup refusals. The mutant catalog
names the check that covers each.

>>> model = ProtocolModel()  # doctest: +SKIP
>>> check(model).distinct_states  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import functools
import signal
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from quiesce.fsm import Table, label
from quiesce.models._explorer import Action, Always, Model, Trace, always
from quiesce.models._system import InFlight, System, SystemState
from quiesce.protocol import Cause, OpId, QuiesceConfig
from quiesce.protocol.controller import (
    PHASE_OPS,
    CallFailed,
    CaptureCut,
    Coordinator,
    CoordinatorPolicy,
    Dispatch,
    GroupOpened,
    GroupTrained,
    Op,
    OptimizerStepBegin,
    OptimizerStepEnd,
    Outcome,
    PeriodElapsed,
    Publish,
    Stopped,
    TimerDue,
    TimerKind,
    TrainerBoundary,
    TrainSwitchBegin,
    TrainSwitchEnd,
    WeightSyncBegin,
    WeightSyncEnd,
    WriteStaging,
    call_retry_timer,
)
from quiesce.protocol.machines import (
    ADMISSION_GATE,
    CALL,
    CHECKPOINT,
    CONTROL_FENCE,
    DEADLINE_REGISTRY,
    AttemptState,
    CheckpointState,
    ExecState,
    FenceOp,
    FenceState,
    GroupState,
    RegistryState,
    group_of_timer,
)
from quiesce.protocol.participant import ParticipantState, new_participant
from quiesce.protocol.wire import CommitReply, ErrorReply, Message

__all__ = [
    "GROUP",
    "Env",
    "Hooks",
    "PState",
    "ProtocolModel",
    "ProtocolParams",
]

GROUP = "g0"
"""The prompt group of the model (one group at the reference size)."""

_ROLES = ("policy", "agent", "resources")
_PHASE_ORDER = {
    Op.PREPARE: ("policy", "agent", "resources"),
    Op.COMMIT: ("agent", "policy", "resources"),
    Op.RESUME: ("resources", "policy", "agent"),
    Op.RESTORE: ("policy", "agent", "resources"),
}
_CONTROL_OPS = frozenset({Op.PREPARE, Op.COMMIT, Op.RESUME, Op.RESTORE, Op.DISCARD})
_COMMITTED_STATES = frozenset({FenceState.COMMITTED_PAUSED})
_WAITING_PHASES = frozenset(
    {
        CheckpointState.PREPARING,
        CheckpointState.COMMITTING,
        CheckpointState.RELEASING,
        CheckpointState.ABORTING,
    }
)


@dataclass(frozen=True)
class ProtocolParams:
    """The sizes of the model (`--set key=value`); the defaults are PROTOCOL.md §8's
    reference size.

    >>> ProtocolParams().siblings
    2
    """

    siblings: int = 2
    turns: int = 2
    attempts: int = 2
    triggers: int = 2
    optimizer_steps: int = 1
    weight_sync: int = 1
    train_switch: int = 1
    prepare_retries: int = 2
    faults: int = 1
    agents: int = 1
    max_consecutive_failures: int = 3
    call_retries: int = 0  # §4 retries inside an attempt (the pinned sizes run without)
    group_scored: bool = False
    recovery_mode: str = "restart_only"
    crashes: bool = True

    def describe(self) -> dict[str, Any]:
        """The parameters as a JSON-ready mapping."""
        return {
            "siblings": self.siblings,
            "turns": self.turns,
            "attempts": self.attempts,
            "triggers": self.triggers,
            "optimizer_steps": self.optimizer_steps,
            "weight_sync": self.weight_sync,
            "train_switch": self.train_switch,
            "prepare_retries": self.prepare_retries,
            "faults": self.faults,
            "agents": self.agents,
            "max_consecutive_failures": self.max_consecutive_failures,
            "call_retries": self.call_retries,
            "group_scored": self.group_scored,
            "recovery_mode": self.recovery_mode,
            "crashes": self.crashes,
        }


@dataclass(frozen=True, slots=True)
class Env:
    """The environment's own state and its independent ledger (all small, all hashable).

    Budgets: `triggers`, `faults`, `optimizer` (0 not begun, 1 busy, 2 done),
    `weight_sync`/`train_switch` (same encoding), `retries` (prepare retries left for the
    attempt `retry_for`). Ledger: `completed` (attempt keys the agent completed, with
    whether the controller kept it and the rerun count then), `trained`, `rolled_back`,
    `dispatched` (every begin the controller sent), `committed` (ids any participant
    committed), `reported` (ids the controller reported `completed`), `failures`
    (consecutive retryable failures the controller reported), `bad` (violations seen on a
    transition: property name -> why), `delayed` (a request held back in the network).
    """

    triggers: int
    faults: int
    optimizer: int = 0
    weight_sync: int = 0
    train_switch: int = 0
    trainer_step: int = 0
    announced: int = 0
    retries: int = 0
    retry_for: OpId | None = None
    epoch: int = 1
    crashed: tuple[tuple[str, int], ...] = ()
    completed: frozenset[tuple[str, int, bool, int]] = frozenset()
    trained: frozenset[tuple[str, int]] = frozenset()
    rolled_back: frozenset[tuple[str, int]] = frozenset()
    dispatched: frozenset[tuple[str, int]] = frozenset()
    committed: frozenset[OpId] = frozenset()
    commit_steps: frozenset[tuple[OpId, int]] = frozenset()
    reported: frozenset[OpId] = frozenset()
    failures: int = 0
    stops: tuple[str, ...] = ()
    bad: tuple[tuple[str, str], ...] = ()
    delayed: tuple[str, Op, Any] | None = None
    raised: str | None = None


class PState:
    """One model state: the composed system and the environment, hashed once.

    Equality and hash are those of `key`, the system with the parts that carry no
    information removed (timestamps, per-phase seconds) plus the environment.
    """

    __slots__ = ("_hash", "env", "key", "system")

    def __init__(self, system: SystemState, env: Env) -> None:
        self.system = system
        self.env = env
        self.key = (system, env)
        self._hash = hash(self.key)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, PState):
            return NotImplemented
        return self._hash == other._hash and self.key == other.key

    def __repr__(self) -> str:
        return f"PState(phase={label(self.system.controller.phase)}, env={self.env!r})"


@dataclass(frozen=True)
class Hooks:
    """What a mutant swaps, so it runs through the very same model.

    `checkpoint`, `gate`, `deadlines`, `call`: the controller's tables, and `policy`: the
    pure functions it decides with (the coordinator takes all of them as parameters, see
    `coordinator`). `patches`: `(module, attribute) -> value` pairs set while the model
    steps and restored after, for behaviour that lives in module-level tables or functions
    (the participant's `control_fence` and `agent_execution`). The unmutated model has no
    patches.
    """

    checkpoint: Table[Any, Any] = CHECKPOINT
    gate: Table[Any, Any] = ADMISSION_GATE
    deadlines: Table[Any, Any] = DEADLINE_REGISTRY
    call: Table[Any, Any] = CALL
    policy: CoordinatorPolicy = field(default_factory=CoordinatorPolicy)
    patches: tuple[tuple[Any, Any, Any], ...] = ()

    def coordinator(self, config: QuiesceConfig) -> Coordinator:
        """The coordinator of this variant, with `config`."""
        return Coordinator(
            config,
            checkpoint=self.checkpoint,
            gate=self.gate,
            deadlines=self.deadlines,
            call=self.call,
            policy=self.policy,
        )


class _Patched:
    """Set a mutant's module attributes for the duration of a `with` block."""

    __slots__ = ("_patches", "_saved")

    def __init__(self, patches: tuple[tuple[Any, Any, Any], ...]) -> None:
        self._patches = patches
        self._saved: list[tuple[Any, Any, Any]] = []

    def __enter__(self) -> None:
        for owner, attribute, value in self._patches:
            if isinstance(owner, dict):  # a table of named work, e.g. the coordinator's _WORK
                self._saved.append((owner, attribute, owner[attribute]))
                owner[attribute] = value
            else:
                self._saved.append((owner, attribute, getattr(owner, attribute)))
                setattr(owner, attribute, value)

    def __exit__(self, *exc: object) -> None:
        while self._saved:
            owner, attribute, value = self._saved.pop()
            if isinstance(owner, dict):
                owner[attribute] = value
            else:
                setattr(owner, attribute, value)


class ProtocolModel(Model[PState]):
    """The composed protocol at a configurable size (PROTOCOL.md §8 by default).

    `hooks` lets a mutant run a derived table or a patched coordinator through the very
    same model; `name` names the variant in results.
    """

    liveness = True
    stutter_stalls = True

    def __init__(
        self,
        params: ProtocolParams | None = None,
        *,
        hooks: Hooks | None = None,
        name: str = "protocol",
    ) -> None:
        self.p = params or ProtocolParams()
        # Seconds one step may take before it counts as a hang (set by `verify`).
        self.step_timeout: float | None = None
        self.hooks = hooks or Hooks()
        self.name = name
        self.params = self.p.describe()
        self.config = QuiesceConfig(
            max_consecutive_failures=self.p.max_consecutive_failures,
            call_retries=self.p.call_retries,
        )
        self.system = System(self.hooks.coordinator(self.config), turns=self.p.turns)
        self.agents = tuple(
            "agent" if self.p.agents == 1 else f"agent{i}" for i in range(self.p.agents)
        )
        self.names = ("policy", *self.agents, "resources")
        self._roles = {"policy": "policy", "resources": "resources"}
        self._roles.update({a: "agent" for a in self.agents})
        self._actions: dict[tuple[Any, ...], Action] = {}

    # ------------------------------------------------------------------ setup

    def _participants(self, incarnation: Mapping[str, int]) -> list[ParticipantState]:
        out = [new_participant({"name": "policy", "role": "policy"}, "policy-1")]
        for agent in self.agents:
            config: dict[str, Any] = {"name": agent, "role": "agent"}
            if self.p.group_scored:
                config.update(group_scored=True, group_size=self.p.siblings)
            out.append(new_participant(config, f"{agent}-1"))
        out.append(
            new_participant(
                {"name": "resources", "role": "resources", "recovery_mode": self.p.recovery_mode},
                "resources-1",
            )
        )
        return out

    def init_states(self) -> Iterable[PState]:
        if self.hooks.patches:
            with _Patched(self.hooks.patches):
                return list(self._init_states())
        return list(self._init_states())

    def _init_states(self) -> Iterable[PState]:
        state, _ = self.system.start(self._participants({}))
        env = Env(triggers=self.p.triggers, faults=self.p.faults)
        opened = GroupOpened(GROUP, self.p.siblings, self.agents[0])
        try:
            with self._watchdog():
                after, effects = self.system.input(state, opened)
        except Exception as error:  # a mutant's core raised or looped opening the group
            yield PState(state, replace(env, raised=f"{type(error).__name__}: {error}"))
            return
        env = self._observe(after, after, effects, env)
        yield self._make(after, env)

    # ------------------------------------------------------------------ actions

    def _action(self, text: str, payload: tuple[Any, ...], fault: bool = False) -> Action:
        key = (text, payload, fault)
        found = self._actions.get(key)
        if found is None:
            found = self._actions[key] = Action(text, fault, payload)
        return found

    def actions(self, state: PState) -> Iterable[Action]:
        if state.env.raised:
            return []  # the core raised: the run is over (a bug, reported as a stall)
        return self._enabled(state)

    def next_state(self, state: PState, action: Action) -> PState | None:
        if state.env.raised:
            return None
        if self.hooks.patches:
            with _Patched(self.hooks.patches):
                return self._apply(state, action)
        return self._apply(state, action)

    def successors(self, state: PState) -> list[tuple[Action, PState]]:
        if state.env.raised:
            return []  # the core raised: the run is over (a bug, reported as a stall)
        if self.hooks.patches:
            with _Patched(self.hooks.patches):
                return self._successors(state)
        return self._successors(state)

    def _successors(self, state: PState) -> list[tuple[Action, PState]]:
        out: list[tuple[Action, PState]] = []
        for action in self._enabled(state):
            following = self._apply(state, action)
            if following is not None:
                out.append((action, following))
        return out

    def _enabled(self, state: PState) -> list[Action]:
        sys, env, p = state.system, state.env, self.p
        act = self._action
        enabled: list[Action] = []
        # Messages: delivery, and the faults that may strike each one.
        for index, message in enumerate(sys.messages):
            text = _describe_message(message)
            enabled.append(act(f"deliver {text}", ("deliver", index)))
        # Rollouts: each live execution on an agent ends a turn or finishes.
        for agent in self.agents:
            for execution in _executions(sys.participant(agent)):
                if execution.state not in (ExecState.RUNNING, ExecState.PARK_REQUESTED):
                    continue
                data = execution.data
                rid, attempt = data.rollout_id, data.attempt
                if data.turn + 1 < data.turns:
                    enabled.append(
                        act(
                            f"turn {rid}#{attempt} ends turn {data.turn + 1}",
                            ("turn", agent, rid, attempt, data.turn + 1),
                        )
                    )
                else:
                    enabled.append(act(f"finish {rid}#{attempt}", ("finish", agent, rid, attempt)))
        # Timers: any armed timer may fire (time is abstract), within the loop bounds.
        for name, _at in sys.timers:
            group = group_of_timer(name)
            if group is not None:
                if not self._may_expire(sys, group):
                    continue
                enabled.append(act(f"deadline of {group} expires", ("timer", name)))
            elif name.kind is TimerKind.PREPARE_RETRY:
                if self._retries_left(sys, env) <= 0:
                    continue
                enabled.append(act(f"timer {name}", ("timer", name)))
            else:
                enabled.append(act(f"timer {name}", ("timer", name)))
        # Trainer, schedule, switches.
        if env.triggers > 0:
            # One trigger action (§8: "periodic or trainer-boundary trigger"): the trainer's
            # boundary when it reached a step it has not announced yet, else the period.
            if env.trainer_step > env.announced:
                enabled.append(
                    act(
                        f"trainer boundary at step {env.trainer_step}",
                        ("trigger", "boundary", env.trainer_step),
                    )
                )
            else:
                enabled.append(act("periodic trigger", ("trigger", "period")))
        if env.optimizer == 0 and p.optimizer_steps > 0:
            enabled.append(act("optimizer step begins", ("optimizer", 1)))
        elif env.optimizer == 1:
            enabled.append(act(f"optimizer step ends at {env.trainer_step + 1}", ("optimizer", 2)))
        if p.weight_sync and env.weight_sync < 2:
            which = "begins" if env.weight_sync == 0 else "ends"
            enabled.append(act(f"weight sync {which}", ("weight_sync", env.weight_sync + 1)))
        if p.train_switch and env.train_switch < 2:
            which = "begins" if env.train_switch == 0 else "ends"
            enabled.append(act(f"train switch {which}", ("train_switch", env.train_switch + 1)))
        ledger = sys.controller.ledger
        for record in ledger.groups:
            if record.state is GroupState.READY_TO_FINALIZE:
                gid = record.group_id
                enabled.append(act(f"trainer trains {gid}", ("train", gid)))
        if env.delayed is not None:
            who, op, _ = env.delayed
            enabled.append(act(f"stale {op.value} redelivered to {who}", ("redeliver",)))
        if env.faults > 0:
            for index, message in enumerate(sys.messages):
                text = _describe_message(message)
                if message.reply is None:
                    enabled.append(act(f"request lost: {text}", ("drop", index), True))
                    enabled.append(
                        act(f"5xx: {text}", ("fail", index, Cause.PARTICIPANT_ERROR), True)
                    )
                    enabled.append(act(f"timeout: {text}", ("fail", index, Cause.TIMEOUT), True))
                    if env.delayed is None and message.call.op in _CONTROL_OPS:
                        enabled.append(act(f"delayed: {text}", ("delay", index), True))
                else:
                    enabled.append(act(f"reply lost: {text}", ("drop", index), True))
            for index in self.system.restore_replies(sys):
                text = _describe_message(sys.messages[index])
                enabled.append(
                    act(f"wrong digest at restore: {text}", ("wrong_digest", index), True)
                )
            if p.crashes:
                enabled.append(act("controller crashes", ("crash_controller",), True))
                for who in self.names:
                    enabled.append(act(f"{who} crashes", ("crash_participant", who), True))
        return enabled

    def _may_expire(self, sys: SystemState, group_id: str) -> bool:
        """Deadline expiry within the attempt bound: every sibling it would retry must
        still have an attempt left."""
        ledger = sys.controller.ledger
        try:
            siblings = ledger.siblings(group_id)
        except Exception:
            return True
        return all(
            a.state is AttemptState.SEALED or a.attempt + 1 < self.p.attempts for a in siblings
        )

    def _retries_left(self, sys: SystemState, env: Env) -> int:
        attempt = sys.controller.attempt
        if attempt is None or attempt.op_id != env.retry_for:
            return self.p.prepare_retries
        return env.retries

    # ------------------------------------------------------------------ next state

    def _apply(self, state: PState, action: Action) -> PState | None:
        try:
            with self._watchdog():
                return self._step(state, action)
        except Exception as error:
            # The pure core must accept every input: an exception is a bug (or a mutant).
            why = f"{type(error).__name__}: {error}"
            return PState(state.system, replace(state.env, raised=why))

    @contextlib.contextmanager
    def _watchdog(self) -> Iterator[None]:
        """Arm `step_timeout`: a derived table can make one controller step loop forever
        (a row that re-fires itself, a refusal retried at once); the SIGALRM handler the
        caller installed turns that hang into an exception."""
        watchdog = self.step_timeout
        if watchdog is None:
            yield
            return
        signal.setitimer(signal.ITIMER_REAL, watchdog)
        try:
            yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)

    def _step(self, state: PState, action: Action) -> PState:
        sys, env = state.system, state.env
        kind = action.payload[0]
        system = self.system
        before = sys
        effects: tuple[Any, ...] = ()
        if kind == "deliver":
            sys, effects = system.deliver(sys, action.payload[1])
        elif kind == "turn":
            _, agent, rid, attempt, turn = action.payload
            sys, _, effects = system.turn(sys, agent, rid, attempt, turn)
        elif kind == "finish":
            _, agent, rid, attempt = action.payload
            sys, _, effects = system.finish(sys, agent, rid, attempt)
        elif kind == "timer":
            name = action.payload[1]
            if name.kind is TimerKind.PREPARE_RETRY:
                left = self._retries_left(sys, env) - 1
                env = replace(
                    env,
                    retries=left,
                    retry_for=sys.controller.attempt.op_id if sys.controller.attempt else None,
                )
            timers = tuple(t for t in sys.timers if t[0] != name)
            sys, effects = system.input(replace(sys, timers=timers), TimerDue(name))
        elif kind == "trigger":
            env = replace(env, triggers=env.triggers - 1, announced=env.trainer_step)
            event = (
                PeriodElapsed()
                if action.payload[1] == "period"
                else TrainerBoundary(action.payload[2])
            )
            sys, effects = system.input(sys, event)
        elif kind == "optimizer":
            if action.payload[1] == 1:
                env = replace(env, optimizer=1)
                sys, effects = system.input(sys, OptimizerStepBegin())
            else:
                step = env.trainer_step + 1
                env = replace(env, optimizer=2, trainer_step=step)
                sys, effects = system.input(sys, OptimizerStepEnd(step))
        elif kind == "weight_sync":
            env = replace(env, weight_sync=action.payload[1])
            sync = WeightSyncBegin() if action.payload[1] == 1 else WeightSyncEnd()
            sys, effects = system.input(sys, sync)
        elif kind == "train_switch":
            env = replace(env, train_switch=action.payload[1])
            switch = TrainSwitchBegin() if action.payload[1] == 1 else TrainSwitchEnd()
            sys, effects = system.input(sys, switch)
        elif kind == "train":
            group_id = action.payload[1]
            ledger = sys.controller.ledger
            record = ledger.group(group_id)
            keys = frozenset(
                a.key
                for a in ledger.attempts
                if a.group_id == group_id
                and a.generation == record.generation
                and a.state is AttemptState.SEALED
            )
            env = replace(env, trained=env.trained | keys)
            sys, effects = system.input(sys, GroupTrained(group_id))
        elif kind == "redeliver":
            assert env.delayed is not None
            who, op, request = env.delayed
            env = replace(env, delayed=None)
            sys, _ = system.redeliver(sys, who, op, request)
        elif kind == "drop":
            env = replace(env, faults=env.faults - 1)
            sys, effects = system.drop(sys, action.payload[1])
        elif kind == "fail":
            env = replace(env, faults=env.faults - 1)
            sys, effects = system.fail(sys, action.payload[1], action.payload[2])
        elif kind == "delay":
            index = action.payload[1]
            call = sys.messages[index].call
            sys, request = system.delay(sys, index)
            env = replace(env, faults=env.faults - 1, delayed=(call.participant, call.op, request))
            # The call itself times out at its deadline (I6): the controller hears that.
            sys, effects = system.input(sys, _call_failed(call, Cause.TIMEOUT))
        elif kind == "wrong_digest":
            env = replace(env, faults=env.faults - 1)
            sys = system.wrong_digest_at_restore(sys, action.payload[1])
        elif kind == "crash_controller":
            epoch = env.epoch + 1
            # The restore goes back to a snapshot taken before any of this work finished:
            # everything dispatched and not trained is rolled back (its prompt reruns).
            lost = (frozenset((k[0], k[1]) for k in env.completed) | env.dispatched) - env.trained
            # The trainer's switches and an uncommitted optimizer step live in the
            # controller's process: they die with it.
            env = replace(
                env,
                faults=env.faults - 1,
                epoch=epoch,
                rolled_back=env.rolled_back | lost,
                failures=0,
                weight_sync=2 if env.weight_sync == 1 else env.weight_sync,
                train_switch=2 if env.train_switch == 1 else env.train_switch,
                optimizer=2 if env.optimizer == 1 else env.optimizer,
            )
            sys, effects = system.crash_controller(sys, epoch=epoch)
        elif kind == "crash_participant":
            name = action.payload[1]
            counts = dict(env.crashed)
            counts[name] = counts.get(name, 1) + 1
            env = replace(env, faults=env.faults - 1, crashed=tuple(sorted(counts.items())))
            sys, effects = system.crash_participant(sys, name, f"{name}-{counts[name]}")
        else:  # pragma: no cover - every payload kind is listed above
            raise ValueError(f"unknown action {action.label!r}")
        env = self._observe(before, sys, effects, env, delivered=kind == "deliver")
        return self._make(sys, env)

    def _make(self, sys: SystemState, env: Env) -> PState:
        return PState(_normalise(sys), env)

    # ------------------------------------------------------------------ observation

    def _observe(
        self,
        before: SystemState,
        after: SystemState,
        effects: Sequence[Any],
        env: Env,
        delivered: bool = False,
    ) -> Env:
        """Update the environment's ledger from what a step did (effects and the
        participants' states), and note any violation only a transition can show."""
        bad = list(env.bad)
        completed = set(env.completed)
        dispatched = set(env.dispatched)
        committed = set(env.committed)
        commit_steps = set(env.commit_steps)
        reported = set(env.reported)
        failures = env.failures
        stops = list(env.stops)
        ledger = after.controller.ledger
        reruns = ledger.counters.group_reruns
        # Completions: an agent execution that became `completed` in this step.
        for agent in self.agents:
            was = {e.data.key: e.state for e in _executions(before.participant(agent))}
            for execution in _executions(after.participant(agent)):
                key = execution.data.key
                if (
                    execution.state is ExecState.COMPLETED
                    and was.get(key) is not ExecState.COMPLETED
                ):
                    if any(c[:2] == key for c in completed):
                        continue
                    kept = _kept(after, key)
                    completed.add((key[0], key[1], kept, reruns))
        # The receipts of the ACK batches delivered in this step (their requests left).
        remaining = {id(m) for m in after.messages}
        delivered_acks = {
            (owed.rollout_id, owed.attempt, owed.receipt)
            for m in before.messages
            if delivered and m.call.op is Op.ACK and m.reply is None and id(m) not in remaining
            for owed in m.call.payload or ()
        }
        # Only an ACK releases a result (M3, S17): a completed execution that leaves its
        # agent must leave an acked refusal key behind (a crash keeps it in the journal).
        for agent in self.agents:
            now_held = {e.data.key for e in _executions(after.participant(agent))}
            role = after.participant(agent).role
            for execution in _executions(before.participant(agent)):
                key = execution.data.key
                if execution.state is not ExecState.COMPLETED or key in now_held:
                    continue
                keys = getattr(role, "refusal_keys", ())
                receipt = (key[0], key[1], execution.data.receipt)
                acked = receipt in keys or receipt in delivered_acks
                if not acked:
                    bad.append(("I1", f"{key[0]}#{key[1]} released by its agent without an ACK"))
        # Commits: a participant whose fence reached committed_paused with an id.
        for participant in after.participants:
            fence = participant.fence
            active = fence.data.active
            if fence.state in _COMMITTED_STATES and active is not None and active not in committed:
                committed.add(active)
                commit_steps.add((active, env.trainer_step))
        staged: dict[OpId, set[tuple[str, str]]] = {}
        for effect in effects:
            if isinstance(effect, Dispatch):
                key = (effect.rollout_id, effect.attempt)
                if key in dispatched:
                    bad.append(("I2", f"attempt {key[0]}#{key[1]} dispatched twice"))
                dispatched.add(key)
                self._check_redispatch(after, env, key, completed, bad, effects)
            elif isinstance(effect, Outcome):
                if effect.result == "completed":
                    reported.add(effect.checkpoint_id)
                    failures = 0
                elif effect.result == "failed" and effect.retryable:
                    failures += 1
            elif isinstance(effect, Stopped):
                stops.append(effect.reason)
            elif isinstance(effect, WriteStaging):
                staged.setdefault(effect.checkpoint_id, set()).add(
                    (effect.participant, effect.digest)
                )
            elif isinstance(effect, CaptureCut):
                steps = {s for x, s in commit_steps if x == effect.checkpoint_id}
                if env.optimizer == 1 or any(s != env.trainer_step for s in steps):
                    bad.append(("I8", f"cut of {effect.checkpoint_id} after the trainer moved"))
                if effect.ledger is not None and effect.ledger.pending_acks():
                    bad.append(("I8", f"cut of {effect.checkpoint_id} with ACKs pending"))
            elif isinstance(effect, Publish):
                self._check_publish(before, after, effect.checkpoint_id, committed, bad)
        self._check_order(before, after, bad)
        if len(bad) > len(env.bad):
            bad = sorted(set(bad))
        return replace(
            env,
            completed=frozenset(completed),
            dispatched=frozenset(dispatched),
            committed=frozenset(committed),
            commit_steps=frozenset(commit_steps),
            reported=frozenset(reported),
            failures=failures,
            stops=tuple(stops),
            bad=tuple(bad),
        )

    def _check_redispatch(
        self,
        after: SystemState,
        env: Env,
        key: tuple[str, int],
        completed: set[tuple[str, int, bool, int]],
        bad: list[tuple[str, str]],
        effects: Sequence[Any],
    ) -> None:
        rollout, attempt = key
        reruns = after.controller.ledger.counters.group_reruns
        for done_rollout, done_attempt, kept, reruns_then in completed:
            if done_rollout != rollout or done_attempt >= attempt or not kept:
                continue
            if (done_rollout, done_attempt) in env.rolled_back:
                continue
            if reruns <= reruns_then:
                bad.append(("I2", f"sealed {rollout}#{done_attempt} run again as #{attempt}"))
        if self.p.group_scored and attempt > 0:
            group = rollout.rpartition("/")[0]
            together = {e.rollout_id for e in effects if isinstance(e, Dispatch)}
            siblings = {f"{group}/{s}" for s in range(self.p.siblings)}
            if not siblings <= together:
                bad.append(("I2", f"group-scored sibling {rollout} retried alone"))

    def _check_publish(
        self,
        before: SystemState,
        after: SystemState,
        op_id: OpId,
        committed: set[OpId],
        bad: list[tuple[str, str]],
    ) -> None:
        for participant in after.participants:
            fence = participant.fence
            if fence.data.active != op_id or fence.state is not FenceState.COMMITTED_PAUSED:
                bad.append(
                    (
                        "I8",
                        f"{op_id} published while {participant.config.name} is not committed to it",
                    )
                )
                continue
            reply = fence.data.result(op_id, _COMMIT_OP)
            if not isinstance(reply, CommitReply):
                bad.append(("I8", f"{op_id} published without {participant.config.name}'s commit"))
        attempt = after.controller.attempt
        if attempt is not None and attempt.op_id == op_id:
            recorded = {
                p.config.name: r.digest
                for p in after.participants
                if isinstance(r := p.fence.data.result(op_id, _COMMIT_OP), CommitReply)
            }
            if dict(attempt.digests) != recorded:
                bad.append(("I8", f"{op_id} staged digests differ from the participants'"))

    def _check_order(
        self, before: SystemState, after: SystemState, bad: list[tuple[str, str]]
    ) -> None:
        """I5: a control call to a role goes out only when every earlier role of the phase
        has done that op for that id (checked at the moment the call is sent)."""
        old = {id(m.call) for m in before.messages}
        for message in after.messages:
            call = message.call
            if message.reply is not None or id(call) in old or call.op not in _CONTROL_OPS:
                continue
            if call.op_id is None:
                continue
            order = _PHASE_ORDER.get(call.op)
            if order is None:
                continue
            role = self._roles.get(call.participant)
            if role is None:
                continue
            for earlier in order[: order.index(role)]:
                for participant in after.participants:
                    if self._roles.get(participant.config.name) != earlier:
                        continue
                    if not _done(participant, call.op, call.op_id):
                        bad.append(
                            (
                                "I5",
                                f"{call.op.value}({call.op_id}) to {call.participant}"
                                f" before {participant.config.name}",
                            )
                        )

    # ------------------------------------------------------------------ properties

    def properties(self) -> Sequence[Always]:
        return (
            always("I1", self._i1, "nothing completed is lost"),
            always("I2", lambda s: not _flags(s, "I2"), "nothing runs twice"),
            always("I3", self._i3, "publish-or-abort"),
            always("I4", self._i4, "gates: held iff some owner holds"),
            always("I5", lambda s: not _flags(s, "I5"), "phase order (§3)"),
            always("I6", self._i6, "bounded calls: the controller waits only on live calls"),
            always("I8", lambda s: not _flags(s, "I8"), "consistent snapshot"),
        )

    def _i1(self, state: PState) -> bool:
        if _flags(state, "I1"):
            return False
        sys, env = state.system, state.env
        ledger = sys.controller.ledger
        held = {
            e.data.key
            for agent in self.agents
            for e in _executions(sys.participant(agent))
            if e.state is ExecState.COMPLETED
        }
        waiting = {a.key for a in ledger.sealed_untrained()}
        discarded = 0
        for rollout, attempt, _kept, _ in env.completed:
            key = (rollout, attempt)
            if key in env.trained or key in env.rolled_back or key in held or key in waiting:
                continue
            # Neither trained, nor waiting, nor held, nor rolled back: it must have been
            # discarded on purpose (a late completion after its deadline, or a sealed
            # sibling of a whole-group rerun), and the ledger must have counted it.
            discarded += 1
        counters = ledger.counters
        # Completions the controller no longer owns (compacted, or from before a restart)
        # are ACKed and counted apart from the ledger.
        unowned = getattr(sys.controller, "unowned_dropped", 0)
        counted = counters.discarded_siblings + counters.late_completions_dropped + unowned
        return discarded <= counted

    def _i3(self, state: PState) -> bool:
        sys, env = state.system, state.env
        if sys.controller.phase is not CheckpointState.IDLE:
            return True
        if any(m.call.op in _CONTROL_OPS for m in sys.messages):
            return True
        for participant in sys.participants:
            if participant.fence.state is not FenceState.IDLE:
                return False
        for op_id in env.committed:
            if op_id in sys.store.staging:
                return False
            if (op_id in sys.store.published) != (op_id in env.reported):
                return False
        return True

    def _i4(self, state: PState) -> bool:
        sys, env = state.system, state.env
        controller = sys.controller
        phase = controller.phase
        checkpoint = phase is not CheckpointState.IDLE
        gate = {"checkpoint"} if checkpoint else set()
        if env.weight_sync == 1:
            gate.add("weight_sync")
        if env.train_switch == 1:
            gate.add("train_switch")
        deadlines = {"checkpoint"} if checkpoint else set()
        if env.train_switch == 1:
            deadlines.add("train_switch")
        # A restarted controller's restore (M9) holds both while it runs, and only then.
        restore = controller.restore
        if restore is not None and label(restore.state) not in ("idle", "restore_failed"):
            gate.add("restore")
            if "restore" in controller.deadlines.data.holders:
                deadlines.add("restore")
        if set(controller.gate.data) != gate or (label(controller.gate.state) == "open") != (
            not gate
        ):
            return False
        registry = controller.deadlines
        if set(registry.data.holders) != deadlines:
            return False
        running = registry.state is RegistryState.RUNNING
        if running == bool(deadlines):
            return False
        armed = any(group_of_timer(name) is not None for name, _ in sys.timers)
        return not (armed and not running)

    def _i6(self, state: PState) -> bool:
        sys = state.system
        attempt = sys.controller.attempt
        if attempt is None or sys.controller.phase is CheckpointState.STOPPED:
            return True
        flying = {(m.call.participant, m.call.op, m.call.op_id) for m in sys.messages}
        phase = sys.controller.phase
        # In abort_pending/release_pending the controller waits on its retry timer, not on
        # the calls of the failed round.
        if attempt.phase is not None and phase in _WAITING_PHASES:
            op = PHASE_OPS[attempt.phase]
            timers = {name for name, _ in sys.timers}
            # A not-ready participant is asked again by the retry timer, and the prepare
            # deadline bounds the whole phase: both are the controller's own timers.
            paced = any(
                t.kind in (TimerKind.PREPARE_RETRY, TimerKind.PREPARE_DEADLINE) for t in timers
            )
            for participant, op_id in attempt.waiting:
                if (participant, op, op_id) in flying:
                    continue
                # A call backing off is sent again by its own timer, before its deadline.
                if (participant, op_id) in attempt.backing_off:
                    if call_retry_timer(op_id, participant) in timers:
                        continue
                    return False
                if not (participant in attempt.not_ready and paced):
                    return False
        if phase not in (CheckpointState.FLUSHING_ACKS, CheckpointState.CAPTURING):
            return True
        acking = {m.call.participant for m in sys.messages if m.call.op is Op.ACK}
        return attempt.acking <= acking

    def is_goal(self, state: PState) -> bool:
        sys, env = state.system, state.env
        if env.raised:
            return False
        phase = sys.controller.phase
        if phase is CheckpointState.STOPPED:
            # Legitimate only after more than max_consecutive_failures retryable failures.
            return env.failures > self.p.max_consecutive_failures
        if phase is not CheckpointState.IDLE or sys.controller.gate.data:
            return False
        if any(m.call.op in _CONTROL_OPS for m in sys.messages):
            return False
        return all(p.fence.state is FenceState.IDLE for p in sys.participants)

    # ------------------------------------------------------------------ symmetry

    def canonical(self, state: PState) -> Any:
        return _canonical(self, state)

    # ------------------------------------------------------------------ traces

    def describe_state(self, state: PState) -> dict[str, Any]:
        sys, env = state.system, state.env
        controller = sys.controller
        attempt = controller.attempt
        return {
            "checkpoint": label(controller.phase),
            "attempt": None if attempt is None else str(attempt.op_id),
            "admission_gate": sorted(controller.gate.data),
            "deadline_registry": [
                label(controller.deadlines.state),
                sorted(controller.deadlines.data.holders),
            ],
            "fences": {
                p.config.name: [
                    label(p.fence.state),
                    _text(p.fence.data.active),
                    _text(p.fence.data.high_watermark),
                ]
                for p in sys.participants
            },
            "executions": {
                f"{e.data.rollout_id}#{e.data.attempt}": [label(e.state), e.data.turn]
                for agent in self.agents
                for e in _executions(sys.participant(agent))
            },
            "ledger": {
                f"{a.rollout_id}#{a.attempt}": label(a.state) for a in controller.ledger.attempts
            },
            "messages": [_describe_message(m) for m in sys.messages],
            "timers": [name for name, _ in sys.timers],
            "store": {
                "intent": None if sys.store.intent is None else str(sys.store.intent[0]),
                "published": sorted(str(x) for x in sys.store.published),
            },
            "env": {
                "triggers_left": env.triggers,
                "faults_left": env.faults,
                "trainer_step": env.trainer_step,
                "completed": sorted(f"{r}#{a}" for r, a, _, _ in env.completed),
                "trained": sorted(f"{r}#{a}" for r, a in env.trained),
                "violations": [f"{p}: {why}" for p, why in env.bad],
                "raised": env.raised,
            },
        }

    def tables(self) -> Sequence[str]:
        names = ["checkpoint", "admission_gate", "deadline_registry"]
        names += [f"control_fence[{n}]" for n in self.names]
        for sibling in range(self.p.siblings):
            for attempt in range(self.p.attempts + 1):
                # `/` would not survive as a file name (`--trace-out`): g0/1#0 is g0-1#0.
                names.append(f"agent_execution[{GROUP}-{sibling}#{attempt}]")
        return names

    def project(self, trace: Trace[PState], table: str) -> list[dict[str, str]]:
        if table not in self.tables():
            return super().project(trace, table)
        view = _VIEWS[table.partition("[")[0]]
        target = table.partition("[")[2].rstrip("]")
        steps: list[dict[str, str]] = []
        initial = label(_table_of(table).initial)
        for before, _action, after in trace.transitions():
            old, new = view(self, before, target), view(self, after, target)
            if new is None or old == new:
                continue
            steps.extend(_table_steps(table, initial if old is None else old, new))
        return steps

    def participants(self) -> Sequence[str]:
        return ("environment", "controller", *self.names)

    def message(self, before: PState, action: Action, after: PState) -> tuple[str, str, str] | None:
        kind = action.payload[0]
        if kind in ("deliver", "drop", "fail", "delay", "wrong_digest"):
            message = before.system.messages[action.payload[1]]
            call = message.call
            what = f"{call.op.value}({_text(call.op_id) or ''})"
            if kind == "fail":
                what += f" {action.payload[2].value}"
            if message.reply is None:
                return ("controller", call.participant, what)
            return (call.participant, "controller", f"{what} -> {_reply_text(message.reply)}")
        if kind in ("turn", "finish"):
            return (
                action.payload[1],
                "controller" if kind == "finish" else action.payload[1],
                action.label,
            )
        if kind == "redeliver":
            who = before.env.delayed[0] if before.env.delayed else "controller"
            return ("environment", who, action.label)
        if kind == "crash_participant":
            return (action.payload[1], action.payload[1], action.label)
        return ("environment", "controller", action.label)


# ============================================================================ helpers

_COMMIT_OP = FenceOp.COMMIT


def _executions(participant: ParticipantState) -> tuple[Any, ...]:
    return getattr(participant.role, "executions", ())


def _kept(sys: SystemState, key: tuple[str, int]) -> bool:
    """Did the controller keep this completion (seal it), rather than drop it late?"""
    try:
        return sys.controller.ledger.attempt(key).state is AttemptState.SEALED
    except Exception:
        return False


def _done(participant: ParticipantState, op: Op, op_id: OpId) -> bool:
    """Has `participant` finished `op` for `op_id` (for the I5 order check)?"""
    fence = participant.fence
    if op is Op.PREPARE:
        return fence.data.active == op_id and fence.state in (
            FenceState.PREPARED,
            FenceState.COMMITTING,
            FenceState.COMMITTED_PAUSED,
        )
    if op is Op.COMMIT:
        return fence.data.active == op_id and fence.state is FenceState.COMMITTED_PAUSED
    if op is Op.RESTORE:
        return fence.data.active == op_id and fence.state is FenceState.RESTORED_PAUSED
    return fence.data.active != op_id


def _flags(state: PState, prop: str) -> bool:
    return any(name == prop for name, _ in state.env.bad)


def _call_failed(call: Any, cause: Cause) -> CallFailed:
    return CallFailed(call.participant, call.op, call.op_id, cause)


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def _reply_text(reply: Message) -> str:
    if isinstance(reply, ErrorReply):
        return reply.code
    status = getattr(reply, "status", None)
    return status or type(reply).__name__


def _describe_message(message: InFlight) -> str:
    call = message.call
    if call.op_id is not None:
        what = f"{call.op.value}({call.op_id})"
    elif call.op is Op.RETIRE:
        what = f"retire({call.payload[0]}#{call.payload[1]})"
    else:
        what = f"{call.op.value}({len(call.payload or ())})"
    if message.reply is None:
        return f"{what} -> {call.participant}"
    return f"{what} <- {call.participant}: {_reply_text(message.reply)}"


@functools.lru_cache(maxsize=1 << 16)
def _message_order(message: InFlight) -> tuple[Any, ...]:
    """The sort key of an in-flight message (cached: `repr` of a payload is costly and the
    same messages sit in many states)."""
    call = message.call
    op_id = call.op_id
    return (
        call.participant,
        call.op.value,
        (-1, -1) if op_id is None else (op_id.epoch, op_id.seq),
        repr(call.payload),
        message.reply is not None,
        repr(message.reply),
    )


def _normalise(sys: SystemState) -> SystemState:
    """Drop what carries no information: per-phase seconds (time is abstract) and the
    arrival order of in-flight messages (any one may be delivered next)."""
    controller = sys.controller
    attempt = controller.attempt
    if attempt is not None and attempt.phase_seconds:
        data = replace(controller.checkpoint.data, attempt=replace(attempt, phase_seconds=()))
        controller = replace(controller, checkpoint=replace(controller.checkpoint, data=data))
        sys = replace(sys, controller=controller)
    messages = sys.messages
    if len(messages) > 1:
        ordered = tuple(sorted(messages, key=_message_order))
        if ordered != messages:
            sys = replace(sys, messages=ordered)
    return sys


# ------------------------------------------------------------------ projections


def _view_checkpoint(model: ProtocolModel, state: PState, _target: str) -> str | None:
    return label(state.system.controller.phase)


def _view_gate(model: ProtocolModel, state: PState, _target: str) -> str | None:
    return label(state.system.controller.gate.state)


def _view_registry(model: ProtocolModel, state: PState, _target: str) -> str | None:
    return label(state.system.controller.deadlines.state)


def _view_fence(model: ProtocolModel, state: PState, target: str) -> str | None:
    return label(state.system.participant(target).fence.state)


def _view_execution(model: ProtocolModel, state: PState, target: str) -> str | None:
    rollout, _, attempt = target.rpartition("#")
    group, _, sibling = rollout.rpartition("-")
    rollout = f"{group}/{sibling}"
    key = (rollout, int(attempt))
    for agent in model.agents:
        participant = state.system.participant(agent)
        for execution in _executions(participant):
            if execution.data.key == key:
                return label(execution.state)
        role = participant.role
        highest = getattr(role, "highest_retired", None)
        if highest is not None and key[1] <= highest(rollout):
            for r, a, receipt in getattr(role, "refusal_keys", ()):
                if r == rollout and a == key[1]:
                    return "acked" if receipt else "tombstoned"
            return "tombstoned"
    return None


_VIEWS: dict[str, Callable[[ProtocolModel, PState, str], str | None]] = {
    "checkpoint": _view_checkpoint,
    "admission_gate": _view_gate,
    "deadline_registry": _view_registry,
    "control_fence": _view_fence,
    "agent_execution": _view_execution,
}


def _table_of(table: str) -> Table[Any, Any]:
    from quiesce.protocol.machines import AGENT_EXECUTION

    tables: dict[str, Table[Any, Any]] = {
        "checkpoint": CHECKPOINT,
        "admission_gate": ADMISSION_GATE,
        "deadline_registry": DEADLINE_REGISTRY,
        "control_fence": CONTROL_FENCE,
        "agent_execution": AGENT_EXECUTION,
    }
    return tables[table.partition("[")[0]]


def _table_steps(table: str, old: str, new: str) -> list[dict[str, str]]:
    """The table steps of one model step that moved `table` from `old` to `new`.

    One model step may run several transitions of a table at once (a trigger runs
    `idle -> closing_admission -> flushing_acks -> preparing` in one controller step), so
    the steps are the shortest chain of the table's own rows from `old` to `new`; each one
    is a row of the table, so the engine's `--trace` accepts it.
    """
    found = _table_of(table)
    edges: dict[str, list[tuple[str, str]]] = {}
    for row in found.rows:
        if row.target is None:
            continue
        for source in row.sources:
            edges.setdefault(label(source), []).append((label(row.input), label(row.target)))
    previous: dict[str, tuple[str, str]] = {}
    frontier = [old]
    seen = {old}
    while frontier and new not in seen:
        following = []
        for here in frontier:
            for name, target in edges.get(here, ()):
                if target not in seen:
                    seen.add(target)
                    previous[target] = (here, name)
                    following.append(target)
        frontier = following
    if new not in previous:
        return []
    chain: list[dict[str, str]] = []
    at = new
    while at != old:
        came_from, via = previous[at]
        chain.append({"state": came_from, "input": via, "target": at})
        at = came_from
    chain.reverse()
    return chain


def _canonical(model: ProtocolModel, state: PState) -> Any:
    from quiesce.models._protocol_symmetry import canonical_key

    return canonical_key(model, state)
