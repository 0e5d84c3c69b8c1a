"""The `design` model: the tables of M1-M9 alone, composed with atomic calls, exhausted.

What lives here: `DesignModel`, the first of PROTOCOL.md §8's two levels of model. It
composes the machines' compiled pure tables (never the coordinator or the participants'
code) with the controller's phase walk of §3, and checks §5's invariants at the §8
reference size with fault budget 1. What it does not know: how a table decides (`_tables`),
how a move is carried out (`_step`), or the implementation (the `protocol` model).

Moves, each one atomic step: the controller's next call of its walk (alone or with a
fault), the prepare deadline, the abort/release retry timer; the background ACK and retire
calls; §8's environment (a rollout turn or finish, the group's deadline, a checkpoint
trigger, the optimizer step, the weight sync, the train switch, a delayed request
redelivered); faults, each charged to the budget (see `_call_faults`, and the crashes).
The trainer's events happen only between two phases of a walk, with which they commute
(`_between_phases`): a partial-order reduction that keeps every order that matters.

Properties (§5): I1-I6 and I8 are `always`; I7 and I9 are goals every fault-free path
reaches. With calls atomic, I6 reads: a busy controller always has a move of its own, so
no call outlives its deadline unnoticed. Siblings are interchangeable, so states are
compared by their sibling-canonical form (`Reached.key`, `_symmetry`) but kept as reached:
a counterexample names each sibling the same way from its first step to its last.

Sizes (this 2-core machine): fault budget 1, 215,432 states in 35-45 s (pinned in
`tests/models/design/test_design_model.py`); budget 2, 1,774,928 states in 340 s CPU and
3.2 GB (measured before issue 23's change at budget 1: not re-run since).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from quiesce.check import Action, Always, Model, Trace, always
from quiesce.fsm import Table
from quiesce.models.design._labels import (
    AttemptLabel,
    ExecLabel,
    FenceLabel,
    GateLabel,
    GroupLabel,
    M1Label,
    M9Label,
    RegistryLabel,
)
from quiesce.models.design._state import (
    AGENT,
    LIVE_ATTEMPTS,
    NAMES,
    Controller,
    DesignParams,
    DesignState,
)
from quiesce.models.design._step import (
    DELAYABLE,
    Step,
    ack_batch,
    initial_state,
    next_call,
    walk_active,
)
from quiesce.models.design._symmetry import canonical
from quiesce.models.design._tables import GROUP, DesignTables, Steppers
from quiesce.models.projection import (
    SPEC_TABLES,
    execution_key,
    instance_names,
    project_table,
    split_instance,
)
from quiesce.protocol import Cause
from quiesce.protocol.machines import CheckpointInput, GroupInput, RegistryInput

__all__ = ["DesignModel", "Reached"]

_PENDING = (M1Label.ABORT_PENDING, M1Label.RELEASE_PENDING)
_TRIGGERED = (M1Label.IDLE, *_PENDING)  # where a checkpoint trigger fires
_AT_REST = (M1Label.IDLE, M1Label.STOPPED)  # no checkpoint holds the gate or the registry
_RUNNING = (ExecLabel.RUNNING, ExecLabel.PARK_REQUESTED)  # its turns go on
_LEFT_LIVE = (*_RUNNING, ExecLabel.PARKED, ExecLabel.FROZEN, ExecLabel.COMPLETED)  # I9
_TRAINED = (GroupLabel.FINALIZED, GroupLabel.ABANDONED)  # I9
_SEALED = AttemptLabel.SEALED
_CONTROLLER_TABLES = ("checkpoint", "admission_gate", "deadline_registry", "restore")
_FIELDS = {
    "checkpoint": "checkpoint",
    "admission_gate": "gate",
    "deadline_registry": "deadlines",
    "restore": "restore",
    "control_fence": "fence",
    "agent_execution": "execution",
}
"""The `DesignTables` field of each table a trace projects onto."""
_BACKGROUND = {
    "ack": "ACK outbox retried",
    "retire": "pending retires retried",
    "expire": "the group's deadline expires",
}


class Reached:
    """A state as the explorer keeps it: `state` exactly as the moves reached it (so a trace
    reads step by step, sibling names and all), compared and hashed by `key`, its canonical
    form when siblings are identified (`_design_symmetry`)."""

    __slots__ = ("_hash", "key", "state")

    def __init__(self, state: DesignState, key: DesignState) -> None:
        self.state = state
        self.key = key
        self._hash = hash(key)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, Reached):
            return NotImplemented
        return self._hash == other._hash and self.key == other.key

    def __repr__(self) -> str:
        return f"Reached({self.state!r})"


class DesignModel(Model[Reached]):
    """The design model at a configurable size (PROTOCOL.md §8 by default).

    `tables` swaps machines for derived ones (a design mutant runs through the very same
    composition); `name` names the variant in results.
    """

    liveness = True
    stutter_stalls = True

    def __init__(
        self,
        params: DesignParams | None = None,
        *,
        tables: DesignTables | None = None,
        name: str = "design",
    ) -> None:
        self.p = params or DesignParams()
        _validate(self.p)
        self.machines = tables or DesignTables()
        self.steppers = Steppers(
            self.machines, failure_budget=self.p.max_consecutive_failures, turns=self.p.turns
        )
        self.name = name
        self.params = self.p.describe()
        # Actions, and groups of them by what labels them, are built once (labels are costly
        # strings) and reused.
        self._action = functools.cache(Action)
        self._call_moves = functools.cache(self._new_call_moves)
        self._background_moves = functools.cache(self._new_background_moves)
        self._rollout_moves = functools.cache(self._new_rollout_moves)
        self._crashes = (
            Action("controller crashes", True, ("crash_controller",)),
            *(Action(f"{name} crashes", True, ("crash", i)) for i, name in enumerate(NAMES)),
        )

    # ------------------------------------------------------------------ the model

    def init_states(self) -> Iterable[Reached]:
        yield self._reached(initial_state(self.p, self.steppers))

    def actions(self, state: Reached) -> list[Action]:
        return [*self._controller_moves(state.state), *self._other_moves(state.state)]

    def next_state(self, state: Reached, action: Action) -> Reached | None:
        step = Step(self.p, self.steppers, state.state)
        if _APPLY[action.payload[0]](step, action.payload) is False:
            return None
        return self._reached(step.result())

    def _reached(self, state: DesignState) -> Reached:
        return Reached(state, canonical(state) if self.p.symmetry else state)

    def _controller_moves(self, state: DesignState) -> list[Action]:
        """The moves the controller makes on its own: its walk's next call (and the faults
        that may strike it), the prepare deadline, the abort/release retry timer."""
        c = state.controller
        if c.stopped:
            return []
        moves: list[Action] = []
        found = self._next_call(c)
        if found is not None:
            p, op, op_id, _ = found
            delay = state.world.delayed is None
            moves += self._call_moves(p, op, op_id, c.walk.not_ready, state.world.faults, delay)
        m1 = c.m1
        if m1.state == M1Label.PREPARING and c.deadline and c.deadline == m1.attempt:
            moves.append(
                self._action(f"prepare deadline of {m1.attempt} fires", payload=("deadline",))
            )
        if m1.state in _PENDING and c.retry and c.retry == m1.attempt:
            moves.append(self._action(f"retry timer of {m1.attempt} fires", payload=("retry",)))
        return moves

    def _next_call(self, c: Controller) -> tuple[int, str, int, Any] | None:
        """The call the walk makes next, if it may make one now (not-ready retries left)."""
        if not walk_active(c):
            return None
        if c.walk.not_ready and c.walk.nr_retries >= self.p.prepare_retries:
            return None
        return next_call(c, self.p.recovery_mode)

    def _new_call_moves(
        self, p: int, op: str, op_id: int, not_ready: bool, budget: int, delay: bool
    ) -> tuple[Action, ...]:
        text = f"{op}({op_id or ''}) -> {NAMES[p]}"
        if not_ready:
            text = f"prepare retry timer: {text}"
        faults = self._call_faults(op, budget, delay)
        return (
            Action(text, payload=("call", "")),
            *(Action(f"{text} [{f}]", True, ("call", f)) for f in faults),
        )

    def _other_moves(self, state: DesignState) -> list[Action]:
        """Background calls, the environment, and the faults that are not call faults."""
        c, parts, w, p = state.controller, state.parts, state.world, self.p
        moves: list[Action] = []
        budget = w.faults
        if not c.stopped:
            if ack_batch(c):
                moves += self._background_moves("ack", budget)
            if c.retires:
                moves += self._background_moves("retire", budget)
            if c.registry[3]:
                live = c.ledger is not None and any(
                    a.state == AttemptLabel.DISPATCHED for a in c.ledger.attempts
                )
                moves += self._background_moves("expire", budget if live else 0)
            if self._between_phases(state):
                moves += self._trainer_moves(state)
        for e in parts.executions:
            if e.state in _RUNNING:
                moves += self._rollout_moves(e.sibling, e.attempt, e.turn, budget)
        if w.delayed is not None:
            who, op, op_id, _ = w.delayed
            text = f"delayed {op}({op_id}) reaches {NAMES[who]}"
            moves.append(self._action(text, payload=("redeliver",)))
        if budget and p.crashes:
            moves += self._crashes
        return moves

    def _new_background_moves(self, kind: str, budget: int) -> tuple[Action, ...]:
        text = _BACKGROUND[kind]
        which = "retire " if kind == "expire" else ""
        return (
            Action(text, payload=(kind, "")),
            *(
                Action(f"{text} [{which}{f}]", True, (kind, f))
                for f in self._background_faults(budget)
            ),
        )

    def _new_rollout_moves(
        self, sibling: int, attempt: int, turn: int, budget: int
    ) -> tuple[Action, ...]:
        name, rollout = f"s{sibling}#{attempt}", (sibling, attempt)
        if turn + 1 < self.p.turns:
            return (Action(f"{name} ends turn {turn + 1}", payload=("turn", rollout)),)
        faults = ["report_lost"] if budget else []
        faults += [f"ack_{f}" for f in self._background_faults(budget)]
        return (
            Action(f"{name} finishes", payload=("finish", rollout, "")),
            *(Action(f"{name} finishes [{f}]", True, ("finish", rollout, f)) for f in faults),
        )

    def _call_faults(self, op: str, budget: int, delay: bool) -> list[str]:
        """The faults that may strike a call of `op` (see `Step.call`), within the budget;
        `delay`: the network holds no delayed request yet."""
        retries = self.p.call_retries
        delay = delay and op in DELAYABLE
        faults = []
        if budget >= 1:
            if retries:
                faults += ["reply_lost", "timeout"] if delay else ["reply_lost"]
            faults.append("duplicate")
            if op == "restore":
                faults += ["wrong_digest", "restore_failure"]
        if budget >= retries + 1:
            faults += ["request_lost*", "reply_lost*"]
            if delay:
                faults.append("timeout*")
        return faults

    def _background_faults(self, budget: int) -> list[str]:
        """The faults that may strike a background call (ACK, retire), within the budget:
        a reply lost and answered again on the retry, or every try failing."""
        retries = self.p.call_retries
        faults = ["reply_lost"] if budget >= 1 and retries else []
        if budget >= retries + 1:
            faults += ["request_lost*", "reply_lost*"]
        return faults

    def _between_phases(self, state: DesignState) -> bool:
        """Is the controller at rest, or between two phases (no call of the phase made)?

        The trainer's events (trigger, optimizer step, weight sync, train switch) read and
        write only the gate, the registry, the trainer and the ledger's group, which no call
        of a walk reads; each commutes with every call. So they happen only here: every
        order relative to the checkpoint's holds, its capture and its releases is still
        explored, without repeating each one at every call (a partial-order reduction).
        """
        walk = state.controller.walk
        if not walk_active(state.controller):
            return True
        return not (walk.done or walk.not_ready)

    def _trainer_moves(self, state: DesignState) -> list[Action]:
        """The checkpoint trigger, the optimizer step, the weight sync, the train switch."""
        c, w, p, act = state.controller, state.world, self.p, self._action
        moves = []
        if w.triggers > 0 and c.m9 is None and c.m1.state in _TRIGGERED:
            moves.append(act("checkpoint trigger", payload=("trigger",)))
        ledger = c.ledger
        if w.optimizer == 0 and p.optimizer_steps and c.m9 is None and ledger is not None:
            if ledger.group.state == GroupLabel.READY_TO_FINALIZE:
                moves.append(
                    act("optimizer step begins (trains the group)", payload=("optimizer", 1))
                )
        elif w.optimizer == 1:
            moves.append(act("optimizer step ends", payload=("optimizer", 2)))
        # A weight sync pushes the weights of the optimizer step to the policy servers, so it
        # follows that step (when the model has one).
        synced = w.optimizer == 2 or not p.optimizer_steps
        for kind, budget in (("weight_sync", p.weight_sync), ("train_switch", p.train_switch)):
            now = getattr(w, kind)
            if budget and now < 2 and (kind == "train_switch" or synced):
                which = "begins" if now == 0 else "ends"
                moves.append(act(f"{kind.replace('_', ' ')} {which}", payload=(kind, now + 1)))
        return moves

    # ------------------------------------------------------------------ properties

    def properties(self) -> Sequence[Always]:
        return (
            always("I1", lambda r: self._i1(r.state), "nothing completed is lost"),
            always("I2", lambda r: not _flagged(r.state, "I2"), "nothing runs twice"),
            always("I3", lambda r: self._i3(r.state), "publish-or-abort"),
            always("I4", lambda r: self._i4(r.state), "gates: held iff some owner holds"),
            always("I5", lambda r: not _flagged(r.state, "I5"), "phase order (§3), restore too"),
            always("I6", lambda r: self._i6(r.state), "bounded calls: never waits on the world"),
            always("I8", lambda r: not _flagged(r.state, "I8"), "consistent snapshot"),
        )

    def liveness_goals(self) -> Sequence[tuple[str, Callable[[Reached], bool]]]:
        return (("I7", self.is_goal), ("I9", lambda r: self._i9(r.state)))

    def is_goal(self, state: Reached) -> bool:
        return self._i7(state.state)

    def _i7(self, state: DesignState) -> bool:
        """I7: the controller is idle with admission open and no participant fenced, or it
        stopped after more than `max_consecutive_failures` retryable failed attempts, as
        the world counts them from the attempts' outcomes (`World.failed_attempts`): M1's
        own counter is what this judges, so it is never read here.

        PROTOCOL.md also lets a fatal cause stop the run: in the design model every cause
        is a modelled fault or a rule of the design, so a fatal one means the design let the
        controller's view and a participant's diverge, and is reported as a stall here.
        """
        c = state.controller
        if c.stopped:
            return self._stopped_by_budget(state)
        return (
            c.m1.state == M1Label.IDLE
            and c.m9 is None
            and c.gate[0] == GateLabel.OPEN
            and all(f.state == FenceLabel.IDLE for f in state.parts.fences)
        )

    def _stopped_by_budget(self, state: DesignState) -> bool:
        """Did M1 stop after more than `max_consecutive_failures` attempts in a row failed
        (the world's count, §4)?"""
        failed = state.world.failed_attempts
        stopped = state.controller.m1.state == M1Label.STOPPED
        return stopped and failed > self.p.max_consecutive_failures

    def _i9(self, state: DesignState) -> bool:
        """I9: the group is trained or counted abandoned, nothing is dispatched, and no
        execution is left live on the agent (running, parked, frozen, completed-unACKed)."""
        c = state.controller
        if c.stopped:
            return self._stopped_by_budget(state)
        ledger = c.ledger
        return (
            c.m1.state == M1Label.IDLE
            and c.m9 is None
            and ledger is not None
            and ledger.group.state in _TRAINED
            and not any(a.state in LIVE_ATTEMPTS for a in ledger.attempts)
            and not any(e.state in _LEFT_LIVE for e in state.parts.executions)
        )

    def _i1(self, state: DesignState) -> bool:
        """Every completed attempt is trained, sealed awaiting training, held un-ACKed by
        the agent, or counted: discarded (late, unowned, whole group) or rolled back."""
        w, ledger = state.world, state.controller.ledger
        if not w.unaccounted:
            return True
        waiting = set()
        if ledger is not None:
            waiting = {
                (a.sibling, a.attempt) for a in ledger.attempts if a.state == AttemptLabel.SEALED
            }
        held = {
            (e.sibling, e.attempt) for e in state.parts.executions if e.state == ExecLabel.COMPLETED
        }
        return w.unaccounted <= waiting | held

    def _i3(self, state: DesignState) -> bool:
        """Once the controller is idle, no participant is fenced and every committed id is
        resolved: published and released, or not published and aborted (`resolved` flags
        the wrong one of the two as it completes)."""
        c = state.controller
        if _flagged(state, "I3"):
            return False
        if c.m1.state != M1Label.IDLE or c.m9 is not None or c.stopped:
            return True
        fences = state.parts.fences
        return not state.world.unresolved and all(f.state == FenceLabel.IDLE for f in fences)

    def _i4(self, state: DesignState) -> bool:
        """The gate is open iff nobody holds it and the deadlines run iff nobody suspends
        them; the holders are exactly the owners whose work is in progress."""
        c, w = state.controller, state.world
        gate, holders = c.gate
        if (gate == GateLabel.OPEN) != (not holders):
            return False
        label, suspenders, _, armed = c.registry
        running = label == RegistryLabel.RUNNING
        if running != (not suspenders) or (armed and not running):
            return False
        expected_registry = {"checkpoint"} if c.m1.state not in _AT_REST else set()
        if c.m9 is not None:
            expected_registry.add("restore")
        if w.train_switch == 1:
            expected_registry.add("train_switch")
        expected_gate = set(expected_registry)
        if w.weight_sync == 1:
            expected_gate.add("weight_sync")  # the one owner that holds only the gate
        ignore = {"checkpoint"} if c.m1.state == M1Label.STOPPED else set()
        return (
            set(holders) - ignore == expected_gate - ignore
            and set(suspenders) - ignore == expected_registry - ignore
        )

    def _i6(self, state: DesignState) -> bool:
        """A busy controller (an attempt or a restore in progress) has a move of its own."""
        c = state.controller
        if c.stopped or (c.m1.state == M1Label.IDLE and c.m9 is None):
            return True
        if self._next_call(c) is not None:
            return True
        return bool(self._controller_moves(state))

    # ------------------------------------------------------------------ traces

    def describe_state(self, state: Reached) -> Any:
        return _plain(state.state)

    def tables(self) -> Sequence[str]:
        """The table instances a trace projects onto (those the `protocol` model projects
        onto, plus M9): the controller's, one fence per participant, one agent execution
        per attempt number of each sibling. Attempt numbers stay below `attempts` (one past
        it abandons the group), except that each fresh start after a controller crash
        numbers its attempts above every one still remembered: at most `faults` more."""
        p = self.p
        numbers = range(p.attempts + (p.faults if p.crashes else 0))
        return instance_names(_CONTROLLER_TABLES, NAMES, GROUP, p.siblings, numbers)

    def project(self, trace: Trace[Reached], table: str) -> list[dict[str, str]]:
        """`trace` as steps of `table`; a move of a mutant's table the protocol's has no row
        for carries `"variant"`."""
        if table not in self.tables():
            return super().project(trace, table)
        control = functools.partial(self.control, table=table)
        return project_table(
            trace, control, SPEC_TABLES[split_instance(table)[0]], self.table_of(table)
        )

    def control(self, state: Reached, table: str) -> str | None:
        """The control state of table instance `table` (one of `tables()`) in `state`
        (None: the instance does not exist there, e.g. an attempt not begun yet)."""
        base, key = split_instance(table)
        c, parts = state.state.controller, state.state.parts
        if base == "checkpoint":
            return c.m1.state.value
        if base == "admission_gate":
            return c.gate[0].value
        if base == "deadline_registry":
            return c.registry[0].value
        if base == "restore":
            # The design drops M9's value once it reaches `idle` (and has none before a crash).
            return (M9Label.IDLE if c.m9 is None else c.m9[0]).value
        if base == "control_fence":
            return parts.fences[NAMES.index(key)].state.value
        _group, sibling, attempt = execution_key(key)
        for execution in parts.executions:
            if (execution.sibling, execution.attempt) == (sibling, attempt):
                return execution.state.value
        # An ended execution leaves only the agent's refusal key for its rollout: the highest
        # retired attempt and whether that one was ACKed. How an older attempt ended is no
        # longer told, so it shows as nothing (its trace keeps the end it was seen to take).
        highest, acked = parts.refusals[sibling]
        if attempt != highest:
            return None
        return ExecLabel.ACKED.value if acked else ExecLabel.TOMBSTONED.value

    def table_of(self, table: str) -> Table[Any, Any]:
        """The table instance `table` (one of `tables()`) steps: a mutant's variant, or
        the protocol's own."""
        running: Table[Any, Any] = getattr(self.machines, _FIELDS[split_instance(table)[0]])
        return running

    def participants(self) -> Sequence[str]:
        return ("environment", "controller", *NAMES)

    def message(
        self, before: Reached, action: Action, after: Reached
    ) -> tuple[str, str, str] | None:
        kind = action.payload[0]
        if kind == "call":
            target = next((n for n in NAMES if f"-> {n}" in action.label), "controller")
            return ("controller", target, action.label)
        if kind in ("ack", "retire"):
            return ("controller", NAMES[AGENT], action.label)
        if kind in ("turn", "finish"):
            return (NAMES[AGENT], NAMES[AGENT], action.label)
        if kind in ("deadline", "retry", "crash_controller"):
            return ("controller", "controller", action.label)
        if kind == "crash":
            name = NAMES[action.payload[1]]
            return (name, name, action.label)
        return ("environment", "controller", action.label)


# ============================================================================ moves
# Each applies one kind of move to a step; False: the move cannot happen after all.


def _apply_call(step: Step, payload: tuple[Any, ...]) -> None:
    step.call(payload[1])


def _apply_deadline(step: Step, payload: tuple[Any, ...]) -> None:
    step.fail(Cause.NOT_READY_UNTIL_DEADLINE if step.walk.not_ready else Cause.TIMEOUT)


def _apply_retry(step: Step, payload: tuple[Any, ...]) -> None:
    step.retry = 0
    step.fire(CheckpointInput.RETRY_DUE)


def _apply_background(step: Step, payload: tuple[Any, ...]) -> None:
    kind, fault = payload
    step.spend_fault(step.cost(fault))
    if kind == "ack":
        step.drain(fault)
    elif kind == "retire":
        step.deliver_retires(fault)
    else:
        step.registry_input(RegistryInput.TIMER_DUE, GROUP, fault)


def _apply_trigger(step: Step, payload: tuple[Any, ...]) -> None:
    w = step.w
    step.w = w._replace(triggers=w.triggers - 1)
    if step.m1.state != M1Label.IDLE:
        step.fire(CheckpointInput.TRIGGER, (step.m1.attempt, step.m1.step, None))
        return
    # A trigger skipped because nothing mutated leaves the controller as if it never came
    # (triggers are "at most 2"), so only the optimizer's skip is modelled.
    skip = Cause.OPTIMIZER_COMMIT_IN_PROGRESS if w.optimizer == 1 else None
    step.fire(CheckpointInput.TRIGGER, (step.mint(), w.trainer_step, skip))


def _apply_optimizer(step: Step, payload: tuple[Any, ...]) -> None:
    if payload[1] == 1:
        step.w = step.w._replace(optimizer=1)
        step.group_input(GroupInput.FINALIZE_BEGIN)
        return
    ledger, w = step.ledger, step.w
    step.w = w._replace(optimizer=2, trainer_step=w.trainer_step + 1)
    if ledger is not None and step.group_input(GroupInput.TRAINER_ACCEPTED) is not None:
        step.account(*((a.sibling, a.attempt) for a in ledger.attempts if a.state == _SEALED))


def _apply_switch(owner: str, deadlines: bool) -> Callable[[Step, tuple[Any, ...]], None]:
    def apply(step: Step, payload: tuple[Any, ...]) -> None:
        step.w = step.w._replace(**{owner: payload[1]})
        if payload[1] == 1:
            step.hold(owner, deadlines)
        else:
            step.release(owner, deadlines)

    return apply


def _apply_turn(step: Step, payload: tuple[Any, ...]) -> bool:
    return step.turn(payload[1])


def _apply_finish(step: Step, payload: tuple[Any, ...]) -> bool:
    step.spend_fault(step.cost(payload[2].removeprefix("ack_")))
    return step.finish(payload[1], payload[2])


def _apply_redeliver(step: Step, payload: tuple[Any, ...]) -> None:
    assert step.w.delayed is not None
    who, op, op_id, snapshot = step.w.delayed
    step.w = step.w._replace(delayed=None)
    step.serve(who, op, op_id, snapshot, "")  # its reply goes to a call long timed out


def _apply_crash_controller(step: Step, payload: tuple[Any, ...]) -> None:
    step.crash_controller()


def _apply_crash(step: Step, payload: tuple[Any, ...]) -> None:
    step.spend_fault()
    step.crash_participant(payload[1])
    step.stale |= 1 << payload[1]  # the controller sees the new incarnation at its next reply


_APPLY: dict[str, Callable[[Step, tuple[Any, ...]], bool | None]] = {
    "call": _apply_call,
    "deadline": _apply_deadline,
    "retry": _apply_retry,
    "ack": _apply_background,
    "retire": _apply_background,
    "expire": _apply_background,
    "trigger": _apply_trigger,
    "optimizer": _apply_optimizer,
    "weight_sync": _apply_switch("weight_sync", deadlines=False),
    "train_switch": _apply_switch("train_switch", deadlines=True),
    "turn": _apply_turn,
    "finish": _apply_finish,
    "redeliver": _apply_redeliver,
    "crash_controller": _apply_crash_controller,
    "crash": _apply_crash,
}


# ============================================================================ helpers


def _flagged(state: DesignState, prop: str) -> bool:
    return any(name == prop for name, _ in state.world.bad)


def _plain(value: Any) -> Any:
    """A state as JSON-ready data: named tuples become objects, sets sorted lists."""
    if hasattr(value, "_asdict"):
        return {k: _plain(v) for k, v in value._asdict().items()}
    if isinstance(value, frozenset):
        return sorted(_plain(v) for v in value)
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    return value


def _validate(p: DesignParams) -> None:
    if p.siblings < 1 or p.turns < 1 or p.attempts < 1:
        raise ValueError(
            f"the design model needs siblings, turns and attempts >= 1, not {p.siblings}, "
            f"{p.turns}, {p.attempts}"
        )
    if p.recovery_mode not in ("restart_only", "stateless", "export_restore"):
        raise ValueError(
            f"unknown recovery_mode {p.recovery_mode!r}: restart_only, stateless or export_restore"
        )
