"""The `protocol` model: the composed checkpoint protocol, explored exhaustively.

What lives here: `ProtocolModel`, a `Model` over the pure composed `System` (the real
coordinator and participants, built from the tables the runtime executes) plus an
*environment* that plays everything else of PROTOCOL.md §8: the rollouts' turns and
finishes, deadline expiry, the periodic and trainer-boundary triggers, the optimizer step,
the train switch and the weight sync, the trainer, and the faults (request lost, reply
lost, 5xx, timeout, a stale delayed request redelivered, controller crash, participant
crash) under a budget; and `Hooks`, what a mutant swaps to run through this very model.
What it does not know: how any of those machines decide; it only offers the moves and
watches. The properties are judged against the environment's own ledger (`Env`), never the
coordinator's bookkeeping alone, so a coordinator that lies to itself is still caught.

How the state stays small (the explorer's notes):
- time is abstract. `now` stays 0: every timer may fire at any moment (that *is* the
  timing nondeterminism), so the per-phase seconds of an attempt are dropped (metrics only);
- in-flight messages are a multiset (sorted), since any one may be delivered next;
- every loop is bounded by the environment: triggers, prepare retries, attempts, faults,
  the optimizer step, the train switch and the weight sync are counted, so the fault-free
  graph is acyclic except through goal states;
- a state hashes once (`PState`), and a system is one object per distinct value
  (`CanonicalSystems`), so its moves are remembered by its identity.

A controller crash restarts the real coordinator: it finishes its intent (§6) and runs the
M9 restore from the published snapshots; the environment counts everything dispatched and
not trained as rolled back then. Not expressed here: the policy calls that freeze an
execution (§8's environment has none) and the S13/S14 setup refusals; the mutant catalog
names the check that covers each.

>>> model = ProtocolModel()  # doctest: +SKIP
>>> check(model).distinct_states  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from quiesce.check import Action, Always, Model, Trace, replace
from quiesce.fsm import Table
from quiesce.models.implementation._memo import (
    CanonicalSystems,
    Interner,
    MemoCoordinator,
    MemoSystem,
)
from quiesce.models.implementation._properties import Judge
from quiesce.models.implementation._state import (
    CONTROL_OPS,
    GROUP,
    Cast,
    Env,
    ProtocolParams,
    PState,
    executions,
)
from quiesce.models.implementation._symmetry import canonical_key
from quiesce.models.implementation._system import InFlight, SystemState
from quiesce.models.implementation._traces import (
    describe_message,
    describe_state,
    project,
    sequence_arrow,
    table_names,
)
from quiesce.protocol import Cause, QuiesceConfig
from quiesce.protocol.controller import (
    ControllerInput,
    Coordinator,
    GroupOpened,
    GroupTrained,
    OptimizerStepBegin,
    OptimizerStepEnd,
    PeriodElapsed,
    TrainerBoundary,
    TrainSwitchBegin,
    TrainSwitchEnd,
    WeightSyncBegin,
    WeightSyncEnd,
)
from quiesce.protocol.controller.lowlevel import CallFailed, CoordinatorPolicy, TimerDue, TimerKind
from quiesce.protocol.machines import (
    ADMISSION_GATE,
    CALL,
    CHECKPOINT,
    DEADLINE_REGISTRY,
    TABLES,
    AttemptState,
    ExecState,
    GroupState,
    group_of_timer,
)
from quiesce.protocol.participant import (
    PARTICIPANT_RULES,
    ParticipantRules,
    ParticipantState,
    Recovery,
    from_journal,
    new_participant,
)

__all__ = ["UNREACHED_INPUTS", "Hooks", "ProtocolModel"]


@dataclass(frozen=True)
class Hooks:
    """What a mutant swaps, so it runs through the very same model.

    `checkpoint`, `gate`, `deadlines`, `call`: the controller's tables, and `policy`: the
    pure functions it decides with (the coordinator takes all of them as parameters, see
    `coordinator`). `participant`: the participants' tables (`ParticipantRules`, which
    `System` passes to every participant step) and `recover`: how a crashed participant
    comes back from its journal (`System` calls it).
    """

    checkpoint: Table[Any, Any] = CHECKPOINT
    gate: Table[Any, Any] = ADMISSION_GATE
    deadlines: Table[Any, Any] = DEADLINE_REGISTRY
    call: Table[Any, Any] = CALL
    policy: CoordinatorPolicy = field(default_factory=CoordinatorPolicy)
    participant: ParticipantRules = PARTICIPANT_RULES
    recover: Recovery = from_journal

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


class ProtocolModel(Model[PState]):
    """The composed protocol at a configurable size (PROTOCOL.md §8 by default).

    `hooks` lets a mutant run a derived table or a patched coordinator through the very
    same model; `name` names the variant in results; `memoise=False` computes every
    coordinator and participant step (for a model recording the table rows each step fires).
    """

    liveness = True
    stutter_stalls = True
    # Its states are big (~8 KB kept whole): the explorer keeps 64-bit fingerprints.
    fingerprints = True

    def __init__(
        self,
        params: ProtocolParams | None = None,
        *,
        hooks: Hooks | None = None,
        name: str = "protocol",
        memoise: bool = True,
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
        # Every part of every state is interned: states are keyed by the parts' identities,
        # and the coordinator's and participants' steps are memoised on them (unless
        # `memoise` is False: a model recording which table rows each step fires must run
        # every step, since a remembered step fires none).
        self._intern = Interner()
        # The canonical systems (every action of the system ends in one), and the system's
        # move from one (by its identity), per action and the environment values the move
        # reads.
        self._systems = CanonicalSystems(self._intern)
        self._moves: dict[tuple[int, int, Any], tuple[SystemState, Action, _Move]] = {}
        coordinator = MemoCoordinator(
            self.hooks.coordinator(self.config), self._intern, remember=memoise
        )
        self.system = MemoSystem(
            coordinator,
            self._intern,
            self._systems,
            remember=memoise,
            turns=self.p.turns,
            rules=self.hooks.participant,
            recover=self.hooks.recover,
        )
        self._memoise = memoise
        self.cast = Cast.of(self.p)
        self.judge = Judge(self.cast)
        self._actions: dict[tuple[Any, ...], Action] = {}
        self._on_messages: dict[tuple[int, int], _MessageMoves] = {}

    # ------------------------------------------------------------------ setup

    def _participants(self) -> list[ParticipantState]:
        out = [new_participant({"name": "policy", "role": "policy"}, "policy-1")]
        for agent in self.cast.agents:
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
        state, _ = self.system.start(self._participants())
        env = Env(
            triggers=self.p.triggers, faults=self.p.faults, digest_faults=self.p.digest_faults
        )
        opened = GroupOpened(GROUP, self.p.siblings, self.cast.agents[0])
        try:
            with self._watchdog():
                after, effects = self.system.input(state, opened)
        except Exception as error:  # a mutant's core raised or looped opening the group
            raised = replace(env, raised=f"{type(error).__name__}: {error}")
            return [self._make(self._systems(state), raised)]
        after = self._systems(after)
        return [self._make(after, self.judge.observe(after, after, effects, env))]

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
        return self._apply(state, action)

    def successors(self, state: PState) -> list[tuple[Action, PState]]:
        if state.env.raised:
            return []  # the core raised: the run is over (a bug, reported as a stall)
        moves = [(action, self._apply(state, action)) for action in self._enabled(state)]
        return [(action, following) for action, following in moves if following is not None]

    def _enabled(self, state: PState) -> list[Action]:
        sys, env, p = state.system, state.env, self.p
        act = self._action
        enabled: list[Action] = []
        # Messages: delivery, and the faults that may strike each one.
        on_messages = [self._message_moves(i, m) for i, m in enumerate(sys.messages)]
        enabled.extend(moves.deliver for moves in on_messages)
        # Rollouts: each live execution on an agent ends a turn or finishes.
        for agent in self.cast.agents:
            for execution in executions(sys.participant(agent)):
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
                if self._may_expire(sys, group):
                    enabled.append(act(f"deadline of {group} expires", ("timer", name)))
            elif name.kind is not TimerKind.PREPARE_RETRY or self._retries_left(sys, env) > 0:
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
            for moves in on_messages:
                enabled.extend(moves.faults)
                if moves.delay is not None and env.delayed is None:
                    enabled.append(moves.delay)
        if env.faults > 0 or env.digest_faults > 0:
            for index in self.system.restore_replies(sys):
                text = describe_message(sys.messages[index])
                enabled.append(
                    act(f"wrong digest at restore: {text}", ("wrong_digest", index), True)
                )
        if env.faults > 0 and p.crashes:
            enabled.append(act("controller crashes", ("crash_controller",), True))
            for who in self.cast.names:
                enabled.append(act(f"{who} crashes", ("crash_participant", who), True))
        return enabled

    def _message_moves(self, index: int, message: InFlight) -> _MessageMoves:
        """The actions on in-flight message `index`, labelled once per `(index, message)`."""
        key = (index, id(message))
        found = self._on_messages.get(key)
        if found is None:
            act = self._action
            text = describe_message(message)
            delay = None
            faults: tuple[Action, ...]
            if message.reply is None:
                faults = (
                    act(f"request lost: {text}", ("drop", index), True),
                    act(f"5xx: {text}", ("fail", index, Cause.PARTICIPANT_ERROR), True),
                    act(f"timeout: {text}", ("fail", index, Cause.TIMEOUT), True),
                )
                if message.call.op in CONTROL_OPS:
                    delay = act(f"delayed: {text}", ("delay", index), True)
            else:
                faults = (act(f"reply lost: {text}", ("drop", index), True),)
            deliver = act(f"deliver {text}", ("deliver", index))
            found = self._on_messages[key] = _MessageMoves(message, deliver, faults, delay)
        return found

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
            return self._make(state.system, replace(state.env, raised=why))

    def _watchdog(self) -> contextlib.AbstractContextManager[None]:
        """Arm `step_timeout`: a derived table can make one controller step loop forever
        (a row that re-fires itself, a refusal retried at once); the SIGALRM handler the
        caller installed turns that hang into an exception."""
        if self.step_timeout is None:
            return _UNWATCHED  # every step passes here: no generator to build and run
        return _alarm(self.step_timeout)

    def _step(self, state: PState, action: Action) -> PState:
        before, env = state.system, state.env
        # The system's move depends on the system and on the few environment values
        # `_reads` names: it is computed once per distinct (canonical system, action,
        # those values). The environment's own bookkeeping is redone every time.
        reads = _reads(env, action)
        if self._memoise and reads is not _UNKEYED:
            # By identity (hashing an action's payload costs more than the lookup): the
            # entry holds `before` and `action` themselves, so while it is kept no other
            # object can take an `id` its key names.
            key = (id(before), id(action), reads)
            remembered = self._moves.get(key)
            if remembered is None:
                if len(self._moves) >= _MOVES_KEPT:
                    # Drop the moves and the canonical systems with them (a hash goes with
                    # the system that keeps its `id` from being reused).
                    self._moves.clear()
                    self._systems.forget()
                move = self._system_step(before, env, action)
                remembered = self._moves[key] = (before, action, move)
            move = remembered[2]
        else:
            move = self._system_step(before, env, action)
        after, effects, delivered, request = move
        env = self._environment_step(before, env, action, request)
        env = self.judge.observe(before, after, effects, env, delivered=delivered)
        return self._make(after, env)

    def _system_step(self, sys: SystemState, env: Env, action: Action) -> _Move:
        """The composed system's move on `action` (canonical after), reading from `env`
        only what `_reads` names."""
        kind = action.payload[0]
        system = self.system
        before = sys
        effects: tuple[Any, ...] = ()
        delivered: InFlight | None = None
        request: Any = None
        if kind == "deliver":
            delivered = sys.messages[action.payload[1]]
            sys, effects = system.deliver(sys, action.payload[1])
        elif kind == "turn":
            _, agent, rid, attempt, turn = action.payload
            sys, _, effects = system.turn(sys, agent, rid, attempt, turn)
        elif kind == "finish":
            _, agent, rid, attempt = action.payload
            sys, _, effects = system.finish(sys, agent, rid, attempt)
        elif kind == "timer":
            name = action.payload[1]
            timers = tuple(t for t in sys.timers if t[0] != name)
            sys, effects = system.input(replace(sys, timers=timers), TimerDue(name))
        elif kind == "trigger":
            period = action.payload[1] == "period"
            event = PeriodElapsed() if period else TrainerBoundary(action.payload[2])
            sys, effects = system.input(sys, event)
        elif kind == "optimizer" and action.payload[1] == 2:
            sys, effects = system.input(sys, OptimizerStepEnd(env.trainer_step + 1))
        elif kind == "train":
            sys, effects = system.input(sys, GroupTrained(action.payload[1]))
        elif action.payload[:2] in _SWITCHES:
            sys, effects = system.input(sys, _SWITCHES[action.payload[:2]]())
        elif kind == "redeliver":
            assert env.delayed is not None
            who, op, delayed = env.delayed
            sys, _ = system.redeliver(sys, who, op, delayed)
        elif kind == "drop":
            sys, effects = system.drop(sys, action.payload[1])
        elif kind == "fail":
            sys, effects = system.fail(sys, action.payload[1], action.payload[2])
        elif kind == "delay":
            call = sys.messages[action.payload[1]].call
            sys, request = system.delay(sys, action.payload[1])
            # The call itself times out at its deadline (I6): the controller hears that.
            timeout = CallFailed(call.participant, call.op, call.op_id, Cause.TIMEOUT, call.payload)
            sys, effects = system.input(sys, timeout)
        elif kind == "wrong_digest":
            sys = system.wrong_digest_at_restore(sys, action.payload[1])
        elif kind == "crash_controller":
            sys, effects = system.crash_controller(sys, epoch=env.epoch + 1)
        elif kind == "crash_participant":
            name = action.payload[1]
            sys, effects = system.crash_participant(sys, name, f"{name}-{_crashes(env, name)}")
        else:  # pragma: no cover - every payload kind is listed above
            raise ValueError(f"unknown action {action.label!r}")
        return self._systems(sys, before), effects, delivered, request

    def _environment_step(self, sys: SystemState, env: Env, action: Action, request: Any) -> Env:
        """The environment's budgets and ledger after `action` from `sys` (before the
        step's effects are observed); `request` is what a delay fault held back."""
        kind = action.payload[0]
        if kind == "timer":
            if action.payload[1].kind is TimerKind.PREPARE_RETRY:
                left = self._retries_left(sys, env) - 1
                attempt = sys.controller.attempt
                return replace(env, retries=left, retry_for=attempt.op_id if attempt else None)
        elif kind == "trigger":
            return replace(env, triggers=env.triggers - 1, announced=env.trainer_step)
        elif kind == "optimizer":
            if action.payload[1] == 1:
                return replace(env, optimizer=1)
            return replace(env, optimizer=2, trainer_step=env.trainer_step + 1)
        elif kind in ("weight_sync", "train_switch"):
            return replace(env, **{kind: action.payload[1]})
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
            return replace(env, trained=env.trained | keys)
        elif kind == "redeliver":
            return replace(env, delayed=None)
        elif kind == "wrong_digest" and env.digest_faults > 0:
            return replace(env, digest_faults=env.digest_faults - 1)
        elif kind in ("drop", "fail", "wrong_digest"):
            return replace(env, faults=env.faults - 1)
        elif kind == "delay":
            call = sys.messages[action.payload[1]].call
            return replace(env, faults=env.faults - 1, delayed=(call.participant, call.op, request))
        elif kind == "crash_controller":
            # The restore goes back to a snapshot taken before any of this work finished:
            # everything dispatched and not trained is rolled back (its prompt reruns).
            lost = (frozenset((k[0], k[1]) for k in env.completed) | env.dispatched) - env.trained
            # The trainer's switches and an uncommitted optimizer step live in the
            # controller's process: they die with it.
            return replace(
                env,
                faults=env.faults - 1,
                epoch=env.epoch + 1,
                rolled_back=env.rolled_back | lost,
                failures=0,
                conflicts=frozenset(),  # the new process never heard them
                weight_sync=2 if env.weight_sync == 1 else env.weight_sync,
                train_switch=2 if env.train_switch == 1 else env.train_switch,
                optimizer=2 if env.optimizer == 1 else env.optimizer,
            )
        elif kind == "crash_participant":
            name = action.payload[1]
            counts = dict(env.crashed)
            counts[name] = _crashes(env, name)
            return replace(env, faults=env.faults - 1, crashed=tuple(sorted(counts.items())))
        return env

    # ------------------------------------------------------------------ canonical states

    def _make(self, sys: SystemState, env: Env) -> PState:
        """The model state of canonical `sys` and `env`. Its hash combines the system's
        hash (computed once per canonical system, from the hashes the interner computed
        once per canonical part) with the environment's; equality stays the values' own
        `==` (one canonical system is one object, so a repeat compares by identity)."""
        return PState(sys, env, hash((self._systems.digest(sys), env)))

    # ------------------------------------------------------------------ properties

    def properties(self) -> Sequence[Always]:
        return self.judge.properties()

    def is_goal(self, state: PState) -> bool:
        return self.judge.is_goal(state)

    # ------------------------------------------------------------------ symmetry

    def canonical(self, state: PState) -> Any:
        return canonical_key(self.p, state)

    # ------------------------------------------------------------------ traces

    def describe_state(self, state: PState) -> dict[str, Any]:
        return describe_state(self.cast, state)

    def tables(self) -> Sequence[str]:
        return table_names(self.cast)

    def table_of(self, instance: str) -> Table[Any, Any] | None:
        # `agent_execution[g0-0#0]` steps the protocol's `agent_execution` table; a
        # mutant's hooks may replace the controller's own three.
        base = instance.partition("[")[0]
        return self._controller_tables().get(base) or TABLES.get(base)

    def project(self, trace: Trace[PState], table: str) -> list[dict[str, str]]:
        if table not in self.tables():
            return super().project(trace, table)
        machines = {
            **self._controller_tables(),
            "control_fence": self.hooks.participant.fence,
            "agent_execution": self.hooks.participant.agent,
        }
        return project(self.cast, trace, table, machines)

    def _controller_tables(self) -> dict[str, Table[Any, Any]]:
        hooks = self.hooks
        return {
            "checkpoint": hooks.checkpoint,
            "admission_gate": hooks.gate,
            "deadline_registry": hooks.deadlines,
        }

    def participants(self) -> Sequence[str]:
        return ("environment", "controller", *self.cast.names)

    def message(self, before: PState, action: Action, after: PState) -> tuple[str, str, str] | None:
        return sequence_arrow(before, action)


# ============================================================================ helpers


class _MessageMoves(NamedTuple):
    """The actions on one in-flight message: its delivery, the faults that may strike it
    and the delay fault (enabled only while no other request is held back). It keeps
    `message` alive: its `id` names it in the model's table of these."""

    message: InFlight
    deliver: Action
    faults: tuple[Action, ...]
    delay: Action | None


_Move = tuple[SystemState, tuple[Any, ...], InFlight | None, Any]
"""A system's move: the canonical system after it, the controller's effects, the message
a delivery took out of flight, the request a delay fault held back."""

_MOVES_KEPT = 1 << 18
"""The most system moves remembered (~500 bytes each with what they keep alive, so at most
~130 MB): past it the memo starts over. Measured on a 30,000-state prefix of the reference
size: the memo saves ~12% of the CPU (a quarter of the moves are repeats)."""

_UNKEYED = object()
"""`_reads` of a move not to remember: it reads a value `==` does not tell apart."""


def _reads(env: Env, action: Action) -> Any:
    """What the system's move on `action` reads from `env` (part of its memo key)."""
    kind = action.payload[0]
    if kind == "optimizer":
        return env.trainer_step  # the step the optimizer ends at
    if kind == "crash_controller":
        return env.epoch  # the restarted controller's epoch
    if kind == "crash_participant":
        return _crashes(env, action.payload[1])  # the restarted participant's incarnation
    if kind == "redeliver":
        return _UNKEYED  # the delayed request: its id compares by epoch and seq only
    return None


def _crashes(env: Env, name: str) -> int:
    """The incarnation number `name` restarts with at its next crash."""
    return dict(env.crashed).get(name, 1) + 1


_SWITCHES: Mapping[tuple[Any, ...], Callable[[], ControllerInput]] = {
    ("optimizer", 1): OptimizerStepBegin,
    ("weight_sync", 1): WeightSyncBegin,
    ("weight_sync", 2): WeightSyncEnd,
    ("train_switch", 1): TrainSwitchBegin,
    ("train_switch", 2): TrainSwitchEnd,
}
"""The trainer's inputs that take nothing from the action, by `payload[:2]`."""

_UNWATCHED = contextlib.nullcontext()


@contextlib.contextmanager
def _alarm(seconds: float) -> Iterator[None]:
    """SIGALRM after `seconds` unless the block ends first."""
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


UNREACHED_INPUTS: Mapping[tuple[str, str], str] = {
    ("agent_execution", "policy_call_held"): "the model has no policy call (§8)",
    ("agent_execution", "policy_resumed"): "the model has no policy call (§8)",
    ("checkpoint", "publish_failed"): "the model's snapshot store never fails to publish",
    ("checkpoint", "inspected_verified"): "the model's snapshot store never fails to publish",
    ("checkpoint", "inspected_unverifiable"): "the model's snapshot store never fails",
}
"""Inputs the implementation model never produces, and why (the swarm's coverage report
and the mutants' judgement read it). The design stage produces some of them (policy
calls, publish failures): a row it fires is not dead by design, whatever this says."""
