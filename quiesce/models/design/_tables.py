"""The design model's view of the ten tables of M1-M9: compact values in, compact out.

What lives here: `DesignTables` (which table plays each machine: the real ones, or a
mutant's) and `Steppers`, which fires an input on a compact value (`_state`) by building
the table's own `Value`, calling the compiled pure `table.step` and reading the result
back, memoised (the same local value meets the same input in a great many states). A
refusal (a pair the table forbids, or every guard false) is `None`: the caller decides what
it means there. What it does not know: when an input fires or what its effects make happen
(`_step` reads effect *names*, as the coordinator does, and M3's bound answers).
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any, TypeVar, cast

from quiesce.fsm import Effect, Table, TransitionNotAllowed, Value
from quiesce.models.design._labels import (
    AttemptLabel,
    ExecLabel,
    FenceAnswer,
    FenceLabel,
    GateLabel,
    GroupLabel,
    M1Label,
    M9Label,
    PolicyLabel,
    RegistryLabel,
    ResourcesLabel,
)
from quiesce.models.design._state import (
    M1,
    M9,
    Attempt,
    Fence,
    Gate,
    Group,
    Key,
    Policy,
    Registry,
)
from quiesce.protocol import Cause, Disposition, OpId, classify
from quiesce.protocol.controller.lowlevel import ArmTimer, CancelTimer
from quiesce.protocol.machines import (
    ADMISSION_GATE,
    AGENT_EXECUTION,
    CHECKPOINT,
    CONTROL_FENCE,
    DEADLINE_REGISTRY,
    POLICY_ADMISSION,
    PROMPT_GROUP,
    RESOURCES,
    RESTORE,
    ROLLOUT_ATTEMPT,
    Admission,
    AdmissionData,
    AttemptData,
    CheckpointData,
    Completion,
    DeadlineArg,
    DeadlineExpired,
    Deadlines,
    ExecAnswer,
    ExecutionData,
    FenceCall,
    FenceData,
    FenceJoin,
    FenceLateOutcome,
    FenceOp,
    FenceRefusal,
    FenceReplay,
    FenceRetire,
    FenceStart,
    GroupData,
    Holder,
    IntentAction,
    IntentDecision,
    Mutation,
    RestoreData,
    Trigger,
    deadline_timer,
)
from quiesce.protocol.machines import Attempt as CheckpointAttempt

__all__ = ["GROUP", "DesignTables", "Steppers"]

GROUP = "g0"
"""The one prompt group of the design model."""
_RESULT_HELD = (ExecLabel.COMPLETED, ExecLabel.ACKED)
"""The execution states whose value holds the result (its receipt)."""
_TIMER = deadline_timer(GROUP)
_ANSWERS = {
    FenceStart: FenceAnswer.START,
    FenceRetire: FenceAnswer.RETIRE,
    FenceJoin: FenceAnswer.JOIN,
    FenceLateOutcome: FenceAnswer.LATE,
}
"""The compact answer of each of M2's bound answers that carries nothing else."""
_BUDGET = DeadlineArg(GROUP, 0.0, 1.0)


@dataclass(frozen=True)
class DesignTables:
    """The table that plays each machine; `derive(...)` swaps some for a mutant."""

    checkpoint: Table[Any, Any] = CHECKPOINT
    fence: Table[Any, Any] = CONTROL_FENCE
    execution: Table[Any, Any] = AGENT_EXECUTION
    policy: Table[Any, Any] = POLICY_ADMISSION
    resources: Table[Any, Any] = RESOURCES
    gate: Table[Any, Any] = ADMISSION_GATE
    deadlines: Table[Any, Any] = DEADLINE_REGISTRY
    attempt: Table[Any, Any] = ROLLOUT_ATTEMPT
    group: Table[Any, Any] = PROMPT_GROUP
    restore: Table[Any, Any] = RESTORE
    variant: str = field(default="", compare=False)

    def derive(self, variant: str, **tables: Table[Any, Any]) -> DesignTables:
        """These tables with some replaced (by field name), named `variant`."""
        return replace(self, variant=variant, **tables)


# M1 counts an attempt's failure once, when it notes the attempt's first cause, so the
# compact M1 must keep that a cause was noted (dropping it recounted every failed abort).
# It keeps the cause's disposition, the most a table's update reads of it, and a cause of
# that disposition stands for it: keeping the cause itself would split states by a reason
# no table reads.
_NOTED = {
    d.value: next(c for c in (classify(cause) for cause in Cause) if c.disposition is d)
    for d in Disposition
}


def _op_id(rank: int) -> OpId | None:
    """The `OpId` a rank stands for (0: none). Only `(epoch, seq)` order is ever read."""
    return OpId(0, rank, 0) if rank else None


def _rank(value: OpId | None) -> int:
    return 0 if value is None else value.seq


def _receipt(key: Key) -> str:
    """The exact receipt of attempt `key` (one per key: results are deterministic here)."""
    return f"s{key[0]}#{key[1]}"


def _step(
    table: Table[Any, Any], label: Enum, data: Any, input: Enum, arg: Any
) -> tuple[Value[Any, Any], tuple[Any, ...]]:
    """`table` steps from the state `label` stands for (a label equals its state's value)."""
    return table.step(Value(type(table.initial)(label), data), input, arg)


def _names(effects: tuple[Any, ...]) -> tuple[str, ...]:
    return tuple(e.name for e in effects if isinstance(e, Effect))


F = TypeVar("F", bound=Callable[..., Any])


def _memo(fn: F) -> F:
    """Memoise a pure method of `Steppers` on its (hashable) arguments, per instance; a
    step the table refuses (`TransitionNotAllowed`) is None, memoised too."""
    name = fn.__name__

    @functools.wraps(fn)
    def wrapped(self: Steppers, *args: Hashable) -> Any:
        cache = self._caches[name]
        try:
            return cache[args]
        except KeyError:
            try:
                found = fn(self, *args)
            except TransitionNotAllowed:
                found = None
            cache[args] = found
            return found

    return cast(F, wrapped)


class Steppers:
    """Memoised compact steps of every table of one `DesignTables`.

    Each method takes a compact value and an input (plus its compact argument) and
    returns the compact value after the step with what the caller needs of the effects,
    or `None` when the table refuses the input.
    """

    def __init__(self, tables: DesignTables, *, failure_budget: int, turns: int) -> None:
        self.tables = tables
        self.failure_budget = failure_budget
        self.turns = turns
        self._caches: defaultdict[str, dict[tuple[Hashable, ...], Any]] = defaultdict(dict)

    @_memo
    def checkpoint(self, m1: M1, input: Enum, arg: Hashable) -> tuple[M1, tuple[str, ...]] | None:
        """Fire M1 `input`. `arg`: TRIGGER `(id, step, skip Cause | None)`, RECOVERED
        `(id, step)`, FAILED a `Cause`, RESTARTED a `Restart`; the other inputs take none."""
        attempt = None
        if m1.attempt:
            cause = _NOTED[m1.noted] if m1.noted else None
            attempt = CheckpointAttempt(
                OpId(0, m1.attempt, 0), m1.step, 0.0, 0.0, cause=cause, published=m1.published
            )
        data = CheckpointData(attempt, m1.failures, 0, self.failure_budget)
        real: Any = arg
        if isinstance(arg, Cause):
            real = classify(arg)
        elif isinstance(arg, tuple):
            fresh = CheckpointAttempt(OpId(0, arg[0], 0), arg[1], 0.0, 0.0)
            skip = None if len(arg) == 2 or arg[2] is None else classify(arg[2])
            real = fresh if len(arg) == 2 else Trigger(fresh, skip)
        after, effects = _step(self.tables.checkpoint, m1.state, data, input, real)
        kept, failures = after.data.attempt, after.data.failures
        label = M1Label(after.state.value)
        if kept is None:
            return M1(label, 0, 0, False, "", failures), _names(effects)
        noted = "" if kept.cause is None else kept.cause.disposition.value
        m1 = M1(label, _rank(kept.op_id), kept.trainer_step, kept.published, noted, failures)
        return m1, _names(effects)

    @_memo
    def fence(
        self, fence: Fence, input: Enum, op: FenceOp, rank: int, result: Hashable
    ) -> tuple[Fence, tuple[Any, ...]] | None:
        """Fire M2 `input` with `FenceCall(op, rank, result)`. Effects come back compact, a
        `FenceAnswer` first: `(START,)`, `(REPLAY, result)`, `(RETIRE,)`, `(REFUSE, code,
        active)`, `(JOIN,)`, `(LATE,)`."""
        recorded = tuple((OpId(0, r, 0), FenceOp(o), x) for r, o, x in fence.recorded)
        data = FenceData(_op_id(fence.active), _op_id(fence.hwm), recorded)
        call = FenceCall(op, _op_id(rank), result)
        after, effects = _step(self.tables.fence, fence.state, data, input, call)
        compact: list[tuple[Any, ...]] = []
        for effect in effects:
            if isinstance(effect, FenceReplay):
                compact.append((FenceAnswer.REPLAY, effect.result))
            elif isinstance(effect, FenceRefusal):
                compact.append((FenceAnswer.REFUSE, effect.code, _rank(effect.active_id)))
            elif type(effect) in _ANSWERS:
                compact.append((_ANSWERS[type(effect)],))
        d = after.data
        back = tuple((_rank(r), o.value, x) for r, o, x in d.recorded)
        label = FenceLabel(after.state.value)
        return Fence(label, _rank(d.active), _rank(d.high_watermark), back), tuple(compact)

    @_memo
    def execution(
        self, state: ExecLabel, key: Key, turn: int, input: Enum, arg: Hashable
    ) -> tuple[ExecLabel, int, tuple[ExecAnswer, ...]] | None:
        """Fire M3 `input` on execution `key`; its answers come back as the rows bind them.
        `arg`: BEGIN `(fence idle, retired)`, TURN_BOUNDARY the turn, POLICY_RESUMED the
        agent's fence idle; RUN_FINISHED and RECV_ACK take the key's receipt (given here)."""
        receipt = _receipt(key)
        held = (receipt, "{}") if state in _RESULT_HELD else ("", "")  # receipt, result
        # (`False`: the field's default, `restart_only_dependency`, which no row here reads)
        data = ExecutionData(f"s{key[0]}", key[1], GROUP, self.turns, turn, False, *held)
        real: Any = arg
        if input.value == "begin":
            real = Admission(*arg)  # type: ignore[misc]
        elif input.value == "run_finished":
            real = Completion(receipt, "{}")
        elif input.value == "recv_ack":
            real = receipt
        after, answers = _step(self.tables.execution, state, data, input, real)
        return ExecLabel(after.state.value), after.data.turn, answers

    @_memo
    def policy(
        self, policy: Policy, input: Enum, call: Key | None
    ) -> tuple[Policy, tuple[str, ...]] | None:
        """Fire M4 `input` (calls are named by the execution that makes them). Calls are
        atomic: an admitted call has finished by the end of the step, so in-flight is 0
        between steps; `release_waiters` admits the waiters, whose calls then finish."""
        label, waiters = policy
        data = AdmissionData(0, tuple(_receipt(w) for w in waiters))
        arg = None if call is None else _receipt(call)
        table = self.tables.policy
        after, effects = _step(table, label, data, input, arg)
        names = _names(effects)
        # The admitted calls (one started now, or the released waiters) finish in this step.
        finished = type(input)("call_finished")
        while after.data.in_flight and table.enabled(after, finished, arg):
            after = table.step(after, finished, arg)[0]
        left = tuple(w for w in waiters if _receipt(w) in after.data.waiters)
        if "hold_as_waiter" in names and call is not None:
            left = tuple(sorted((*left, call)))  # released all at once: order is irrelevant
        return (PolicyLabel(after.state.value), left), names

    @_memo
    def resources(
        self, label: ResourcesLabel, input: Enum
    ) -> tuple[ResourcesLabel, tuple[str, ...]] | None:
        """Fire M5 `input`. A mutation (one turn's resource call) is atomic too: admitted,
        it finishes in the same step; revisions are abstracted away (nothing reads them)."""
        table = self.tables.resources
        arg: Any = Mutation("turn", "rollout") if "mutation" in input.value else ()
        after, effects = _step(table, label, table.initial_data, input, arg)
        finished = type(input)("mutation_finished")
        if after.data.in_flight and table.enabled(after, finished, arg):
            after = table.step(after, finished, arg)[0]
        return ResourcesLabel(after.state.value), _names(effects)

    @_memo
    def gate(self, gate: Gate, input: Enum, owner: str) -> Gate | None:
        """Fire M6 `input` for `owner`; the holders come back sorted."""
        holders = frozenset(map(Holder, gate[1]))
        after = _step(self.tables.gate, gate[0], holders, input, owner)[0]
        return GateLabel(after.state.value), tuple(sorted(after.data))

    @_memo
    def registry(self, registry: Registry, input: Enum, key: str) -> tuple[Registry, bool] | None:
        """Fire M7 `input` for `key` (a holder, or the group). Returns the registry (its
        group deadline's timer armed or not, from the arm/cancel effects) and whether the
        group's deadline expired."""
        label, holders, has_budget, armed = registry
        budgets = ((GROUP, 1.0),) if has_budget else ()
        data = Deadlines(frozenset(map(Holder, holders)), budgets, 0.0)
        arg = _BUDGET if key == GROUP else DeadlineArg(key, 0.0)
        after, effects = _step(self.tables.deadlines, label, data, input, arg)
        expired = False
        for effect in (e for fx in effects for e in (fx if isinstance(fx, tuple) else (fx,))):
            # (M7's effects may be tuples: a resume re-arms one timer per group.)
            if isinstance(effect, DeadlineExpired):
                expired = True
            elif isinstance(effect, ArmTimer | CancelTimer) and effect.name == _TIMER:
                armed = isinstance(effect, ArmTimer)
        d = after.data
        has_budget = d.remaining(GROUP) is not None
        label = RegistryLabel(after.state.value)
        return (label, tuple(sorted(d.holders)), has_budget, armed), expired

    @_memo
    def attempt(self, attempt: Attempt, input: Enum) -> tuple[Attempt, tuple[str, ...]] | None:
        """Fire M8 `rollout_attempt` `input` (receipt inputs take the attempt's own)."""
        receipt = _receipt((attempt.sibling, attempt.attempt))
        data = AttemptData(
            receipt if attempt.receipt else None, attempt.ack_owed, attempt.superseded
        )
        after, effects = _step(self.tables.attempt, attempt.state, data, input, receipt)
        d = after.data
        return (
            attempt._replace(
                state=AttemptLabel(after.state.value),
                receipt=d.receipt is not None,
                ack_owed=d.ack_owed,
                superseded=d.superseded,
            ),
            _names(effects),
        )

    @_memo
    def group(
        self, group: Group, size: int, input: Enum, sibling: int | None
    ) -> tuple[Group, tuple[str, ...]] | None:
        """Fire M8 `prompt_group` `input` on a group of `size` siblings."""
        sealed = frozenset(s for s in range(size) if group.sealed >> s & 1)
        data = GroupData(size, sealed, group.reopened)
        after, effects = _step(self.tables.group, group.state, data, input, sibling)
        bits = sum(1 << s for s in after.data.sealed)
        return Group(GroupLabel(after.state.value), bits, after.data.reopened), _names(effects)

    @_memo
    def restore(self, m9: M9, input: Enum, arg: Hashable) -> tuple[M9, tuple[str, ...]] | None:
        """Fire M9 `input`. `arg`: INTENT_READ the `IntentAction`, SNAPSHOT_SELECTED a
        snapshot id, DISCARD_BEGIN a count, RESTORE_REJECTED a reason."""
        label, snapshot, retries, rejected = m9
        rejections = tuple((str(r), "rejected") for r in rejected)
        data = RestoreData(str(snapshot) if snapshot else None, retries, rejected=rejections)
        real: Any = arg
        if isinstance(arg, IntentAction):
            real = IntentDecision(arg, None, arg.value)
        elif input.value == "snapshot_selected":
            real = str(arg)
        after, effects = _step(self.tables.restore, label, data, input, real)
        d = after.data
        snapshot = int(d.snapshot) if d.snapshot else 0
        kept = tuple(int(r) for r, _ in d.rejected)
        return (M9Label(after.state.value), snapshot, d.retries, kept), _names(effects)
