"""Lamport's two-phase commit (TLA+ `TwoPhase.tla`) written as two quiesce tables.

What lives here: the resource-manager table (`rm`), the transaction-manager table (`tm`),
and `TwoPhase`, the model that composes one TM and `rms` RMs over a shared message set,
exactly as the published specification does. It is the yardstick every model checker
reports on: with 3 RMs TLC finds 288 distinct states (so does stateright's `2pc.rs`), and
the tests pin quiesce's counts against that and against a hand-written BFS.

What it does not know: the explorer. The tables decide every move (guards read the message
set passed as the input's argument; effects name the message to send); the model only
routes arguments in and effects out.

    rm:  working --prepare / send_prepared--> prepared
         working --choose_to_abort--> aborted
         (any) --recv_commit [commit_sent]--> committed
         (any) --recv_abort [abort_sent]--> aborted

    tm:  init --recv_prepared(rm) [prepared_received] / record--> init
         init --commit [all_prepared] / send_commit--> committed
         init --abort / send_abort--> aborted

The `(any)` sources are the spec's: `RMRcvCommitMsg` and `RMRcvAbortMsg` have no
precondition on the RM's own state, so a decided RM may receive the decision again (a
stuttering step). Message set semantics: messages are never consumed or lost.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from enum import Enum
from typing import Any, TypeAlias

from quiesce.check._explorer import Action, Always, Model, TableStepper, Trace, always
from quiesce.check._registry import ModelSpec, Param, register_model
from quiesce.fsm import Table, Value, label, on

__all__ = [
    "MUTANTS",
    "RM_TABLE",
    "TM_TABLE",
    "TWO_PHASE_SPEC",
    "RmInput",
    "RmState",
    "TmInput",
    "TmState",
    "TwoPhase",
    "TwoPhaseState",
    "mutant_tables",
    "prepared_msg",
]


class RmState(Enum):
    WORKING = "working"
    PREPARED = "prepared"
    COMMITTED = "committed"
    ABORTED = "aborted"


class RmInput(Enum):
    PREPARE = "prepare"  # RMPrepare: the RM is ready and tells the TM
    CHOOSE_TO_ABORT = "choose_to_abort"  # RMChooseToAbort: the RM gives up on its own
    RECV_COMMIT = "recv_commit"  # RMRcvCommitMsg
    RECV_ABORT = "recv_abort"  # RMRcvAbortMsg


class TmState(Enum):
    INIT = "init"
    COMMITTED = "committed"
    ABORTED = "aborted"


class TmInput(Enum):
    RECV_PREPARED = "recv_prepared"  # TMRcvPrepared(rm)
    COMMIT = "commit"  # TMCommit
    ABORT = "abort"  # TMAbort


COMMIT_MSG = "Commit"
ABORT_MSG = "Abort"

Msgs: TypeAlias = frozenset[str]


def prepared_msg(rm: int) -> str:
    """The message `[type |-> "Prepared", rm |-> rm]`."""
    return f"Prepared(rm{rm})"


_ANY_RM = tuple(RmState)

RM_TABLE: Table[RmState, RmInput] = Table(
    "rm",
    doc="TwoPhase resource manager; every input's argument is the message set.",
    states=RmState,
    inputs=RmInput,
    initial=RmState.WORKING,
    finals=(RmState.COMMITTED, RmState.ABORTED),
    rows=[
        on(RmState.WORKING, RmInput.PREPARE, RmState.PREPARED, effects="send_prepared"),
        on(RmState.WORKING, RmInput.CHOOSE_TO_ABORT, RmState.ABORTED),
        on(_ANY_RM, RmInput.RECV_COMMIT, RmState.COMMITTED, guard="commit_sent"),
        on(_ANY_RM, RmInput.RECV_ABORT, RmState.ABORTED, guard="abort_sent"),
    ],
    # A decided or prepared RM cannot prepare or choose to abort: the spec requires working.
    unmapped="forbidden",
    guards={
        "commit_sent": lambda _value, msgs: COMMIT_MSG in msgs,
        "abort_sent": lambda _value, msgs: ABORT_MSG in msgs,
    },
)


def _prepared_received(value: Value[Any, frozenset[int]], arg: tuple[int, Msgs]) -> bool:
    rm, msgs = arg
    return prepared_msg(rm) in msgs


def _record_prepared(prepared: frozenset[int], arg: tuple[int, Msgs]) -> frozenset[int]:
    return prepared | {arg[0]}


TM_TABLE: Table[TmState, TmInput] = Table(
    "tm",
    doc="TwoPhase transaction manager; data is tmPrepared, the RMs heard from.",
    states=TmState,
    inputs=TmInput,
    initial=TmState.INIT,
    initial_data=frozenset(),
    finals=(TmState.COMMITTED, TmState.ABORTED),
    rows=[
        # Argument: (rm, msgs). Receiving the same Prepared again changes nothing.
        on(
            TmState.INIT,
            TmInput.RECV_PREPARED,
            None,
            guard="prepared_received",
            update="record_prepared",
        ),
        # Argument: the set of every RM; commit only once all of them prepared.
        on(
            TmState.INIT,
            TmInput.COMMIT,
            TmState.COMMITTED,
            guard="all_prepared",
            effects="send_commit",
        ),
        # The TM may abort at any time before it decides (a timeout, in a real system).
        on(TmState.INIT, TmInput.ABORT, TmState.ABORTED, effects="send_abort"),
    ],
    unmapped="forbidden",
    guards={
        "prepared_received": _prepared_received,
        "all_prepared": lambda value, everyone: value.data == everyone,
    },
    updates={"record_prepared": _record_prepared},
)

# The message each effect name puts into the set; `send_prepared` is per RM.
_SENDS = {"send_commit": COMMIT_MSG, "send_abort": ABORT_MSG}

TwoPhaseState: TypeAlias = tuple[tuple[str, ...], str, frozenset[int], Msgs]
"""`(rmState, tmState, tmPrepared, msgs)`: RM control states by RM (labels), the TM's
control state, the RMs the TM heard from (1-based), and the message set."""

# One RM's or the TM's precomputed moves in one local view: (action, local result, msgs').
_RmMove: TypeAlias = tuple[Action, str, Msgs]
_TmMove: TypeAlias = tuple[Action, str, frozenset[int], Msgs]

_RM_ACTION_NAMES = {
    RmInput.PREPARE: "RMPrepare",
    RmInput.CHOOSE_TO_ABORT: "RMChooseToAbort",
    RmInput.RECV_COMMIT: "RMRcvCommitMsg",
    RmInput.RECV_ABORT: "RMRcvAbortMsg",
}


class TwoPhase(Model[TwoPhaseState]):
    """TwoPhase with `rms` resource managers, composed from `rm_table` and `tm_table`.

    Properties: `TypeOK` and `TCConsistent` (no RM committed while another aborted), and
    `no_stall`: every fault-free path reaches a state where the TM and every RM decided.
    The spec's receive actions may repeat (a stuttering step), so self-loops are not
    stalls here (`stutter_stalls = False`), as in TLA+.

    >>> check(TwoPhase(3)).distinct_states  # doctest: +SKIP
    288
    """

    liveness = True
    stutter_stalls = False

    def __init__(
        self,
        rms: int = 3,
        *,
        rm_table: Table[RmState, RmInput] = RM_TABLE,
        tm_table: Table[TmState, TmInput] = TM_TABLE,
        name: str = "two-phase",
    ) -> None:
        if rms < 1:
            raise ValueError(f"two-phase needs at least one RM, not {rms}")
        self.name = name
        self.params = {"rms": rms}
        self.rms = rms
        self.rm_table = rm_table
        self.tm_table = tm_table
        self._rm = TableStepper(rm_table)
        self._tm = TableStepper(tm_table)
        self._everyone = frozenset(range(1, rms + 1))
        self._prepared_msgs = tuple(prepared_msg(r) for r in range(1, rms + 1))
        self._messages = frozenset((*self._prepared_msgs, COMMIT_MSG, ABORT_MSG))
        self._rm_actions: list[dict[Enum, Action]] = [
            {i: Action(f"{_RM_ACTION_NAMES[i]}(rm{r})", payload=("rm", r, i)) for i in RmInput}
            for r in range(1, rms + 1)
        ]
        self._recv_prepared = [
            Action(f"TMRcvPrepared(rm{r})", payload=("tm", r, TmInput.RECV_PREPARED))
            for r in range(1, rms + 1)
        ]
        self._tm_commit = Action("TMCommit", payload=("tm", 0, TmInput.COMMIT))
        self._tm_abort = Action("TMAbort", payload=("tm", 0, TmInput.ABORT))
        self._all_actions = (
            *self._recv_prepared,
            self._tm_commit,
            self._tm_abort,
            *(a for per_rm in self._rm_actions for a in per_rm.values()),
        )
        # The tables are pure, so one local view always has the same moves: memoise them
        # (and intern the message sets, whose hashes are then computed once).
        self._rm_moves: dict[Msgs, list[dict[str, tuple[_RmMove, ...]]]] = {}
        self._tm_moves: dict[tuple[str, frozenset[int], Msgs], tuple[_TmMove, ...]] = {}
        self._interned: dict[Msgs, Msgs] = {}
        self._decided = frozenset({label(RmState.COMMITTED), label(RmState.ABORTED)})
        self._tm_init = label(tm_table.initial)
        self._rm_labels = frozenset(label(s) for s in RmState)
        self._tm_labels = frozenset(label(s) for s in TmState)

    # ------------------------------------------------------------------ the model

    def init_states(self) -> Iterable[TwoPhaseState]:
        rm0 = label(self.rm_table.initial)
        tm0 = self.tm_table.start()
        yield ((rm0,) * self.rms, label(tm0.state), tm0.data, self._intern(frozenset()))

    def actions(self, state: TwoPhaseState) -> Iterable[Action]:
        return self._all_actions

    def next_state(self, state: TwoPhaseState, action: Action) -> TwoPhaseState | None:
        for candidate, following in self.successors(state):
            if candidate is action:
                return following
        return None

    def successors(self, state: TwoPhaseState) -> list[tuple[Action, TwoPhaseState]]:
        rm, tm, prepared, msgs = state
        tm_moves = self._tm_moves.get((tm, prepared, msgs))
        if tm_moves is None:
            tm_moves = self._tm_local(tm, prepared, msgs)
        out: list[tuple[Action, TwoPhaseState]] = []
        append = out.append
        for action, tm_next, prepared_next, msgs_next in tm_moves:
            append((action, (rm, tm_next, prepared_next, msgs_next)))
        per_rm = self._rm_moves.get(msgs)
        if per_rm is None:
            per_rm = self._rm_local(msgs)
        for r, local in enumerate(rm):
            moves = per_rm[r][local]
            if moves:
                head, tail = rm[:r], rm[r + 1 :]
                for action, local_next, msgs_next in moves:
                    # Concatenation beats unpacking here by a third (profiled, hot path).
                    state_next = head + (local_next,) + tail  # noqa: RUF005
                    append((action, (state_next, tm, prepared, msgs_next)))
        return out

    def properties(self) -> Sequence[Always]:
        return (
            always("TypeOK", self._type_ok, "every variable holds a value of its type"),
            always(
                "TCConsistent",
                _tc_consistent,
                "no RM has committed while another has aborted",
                reads=("rmState",),
            ),
        )

    def is_goal(self, state: TwoPhaseState) -> bool:
        return state[1] != self._tm_init and self._decided.issuperset(state[0])

    def canonical(self, state: TwoPhaseState) -> Any:
        # RMs are interchangeable: an RM is seen as (its state, heard by the TM, its
        # Prepared message sent); sorting those views forgets which RM is which.
        rm, tm, prepared, msgs = state
        views = sorted(
            (local, r + 1 in prepared, self._prepared_msgs[r] in msgs) for r, local in enumerate(rm)
        )
        return (tuple(views), tm, COMMIT_MSG in msgs, ABORT_MSG in msgs)

    def describe_state(self, state: TwoPhaseState) -> dict[str, Any]:
        rm, tm, prepared, msgs = state
        return {
            "rmState": {f"rm{r}": local for r, local in enumerate(rm, 1)},
            "tmState": tm,
            "tmPrepared": [f"rm{r}" for r in sorted(prepared)],
            "msgs": sorted(msgs),
        }

    # ------------------------------------------------------------------ traces

    def tables(self) -> Sequence[str]:
        return ("tm", *(f"rm{r}" for r in range(1, self.rms + 1)))

    def table_of(self, instance: str) -> Table[Any, Any] | None:
        if instance not in self.tables():
            return None
        return self.tm_table if instance == "tm" else self.rm_table

    def project(self, trace: Trace[TwoPhaseState], table: str) -> list[dict[str, str]]:
        if table not in self.tables():
            return super().project(trace, table)
        steps = []
        for before, action, after in trace.transitions():
            kind, r, input = action.payload
            if table == "tm" and kind == "tm":
                source, target = before[1], after[1]
            elif kind == "rm" and table == f"rm{r}":
                source, target = before[0][r - 1], after[0][r - 1]
            else:
                continue
            steps.append({"state": source, "input": label(input), "target": target})
        return steps

    def participants(self) -> Sequence[str]:
        return ("TM", *(f"rm{r}" for r in range(1, self.rms + 1)))

    def message(
        self, before: TwoPhaseState, action: Action, after: TwoPhaseState
    ) -> tuple[str, str, str] | None:
        kind, r, input = action.payload
        rm = f"rm{r}"
        if input is TmInput.RECV_PREPARED:
            return (rm, "TM", "Prepared")
        if input is RmInput.RECV_COMMIT:
            return ("TM", rm, "Commit")
        if input is RmInput.RECV_ABORT:
            return ("TM", rm, "Abort")
        actor = "TM" if kind == "tm" else rm
        return (actor, actor, action.label)

    # ------------------------------------------------------------------ internals

    def _intern(self, msgs: Msgs) -> Msgs:
        return self._interned.setdefault(msgs, msgs)

    def _sent(self, msgs: Msgs, effects: tuple[Any, ...], rm: int) -> Msgs:
        if not effects:
            return msgs
        added = {
            self._prepared_msgs[rm - 1] if e.name == "send_prepared" else _SENDS[e.name]
            for e in effects
        }
        return self._intern(msgs | added)

    def _rm_local(self, msgs: Msgs) -> list[dict[str, tuple[_RmMove, ...]]]:
        # The RM table does not know which RM it is: step each control state once against
        # this message set, then name the action and the message per RM.
        local_moves = {}
        for local in self._rm_labels:
            inputs = self._rm.inputs_in(local)
            stepped = self._rm.steps(local, None, ((input, msgs) for input in inputs))
            local_moves[local] = [
                (input, result[0], result[2])
                for input, result in zip(inputs, stepped, strict=True)
                if result is not None
            ]
        per_rm = [
            {
                local: tuple(
                    (actions[input], target, self._sent(msgs, effects, index))
                    for input, target, effects in results
                )
                for local, results in local_moves.items()
            }
            for index, actions in enumerate(self._rm_actions, 1)
        ]
        self._rm_moves[msgs] = per_rm
        return per_rm

    def _tm_local(self, tm: str, prepared: frozenset[int], msgs: Msgs) -> tuple[_TmMove, ...]:
        calls: list[tuple[Action, Enum, Any]] = []
        for input in self._tm.inputs_in(tm):
            if input is TmInput.RECV_PREPARED:
                calls.extend(
                    (self._recv_prepared[r - 1], input, (r, msgs)) for r in range(1, self.rms + 1)
                )
            elif input is TmInput.COMMIT:
                calls.append((self._tm_commit, input, self._everyone))
            else:
                calls.append((self._tm_abort, input, None))
        moves = []
        results = self._tm.steps(tm, prepared, ((input, arg) for _, input, arg in calls))
        for (action, _, _), result in zip(calls, results, strict=True):
            if result is not None:
                target, data, effects = result
                moves.append((action, target, data, self._sent(msgs, effects, 0)))
        self._tm_moves[(tm, prepared, msgs)] = found = tuple(moves)
        return found

    def _type_ok(self, state: TwoPhaseState) -> bool:
        rm, tm, prepared, msgs = state
        return (
            len(rm) == self.rms
            and self._rm_labels.issuperset(rm)
            and tm in self._tm_labels
            and prepared <= self._everyone
            and msgs <= self._messages
        )


def _tc_consistent(state: TwoPhaseState) -> bool:
    rm = state[0]
    return not ("committed" in rm and "aborted" in rm)


MUTANTS: Mapping[str, str] = {
    "commit_without_message": "an RM may commit without having received the Commit message",
}
"""The two-phase variants `--mutant` accepts, with what each breaks."""


def mutant_tables(name: str) -> tuple[Table[RmState, RmInput], Table[TmState, TmInput]]:
    """The `(rm, tm)` tables of the named variant, derived with the engine's API."""
    if name == "commit_without_message":
        row = next(i for i, r in enumerate(RM_TABLE.rows) if r.input is RmInput.RECV_COMMIT)
        return RM_TABLE.without_guard(row), TM_TABLE
    raise KeyError(name)


def _build(params: Mapping[str, Any], faults: int | None, mutant: str | None) -> TwoPhase:
    if mutant is None:
        return TwoPhase(params["rms"])
    rm_table, tm_table = mutant_tables(mutant)
    return TwoPhase(params["rms"], rm_table=rm_table, tm_table=tm_table)


TWO_PHASE_SPEC = register_model(
    ModelSpec(
        name="two-phase",
        factory=_build,
        doc="Lamport's TwoPhase commit (TLA+): 288 distinct states with 3 RMs.",
        params=(Param("rms", int, 3, "number of resource managers", minimum=1, maximum=12),),
        mutants=MUTANTS,
    )
)
