"""Row coverage of a conformance run: which rows of the participant's tables -- M2, the
control fence, and the role's own (M3 agent execution, M4 policy admission or M5
resources) -- the run fired.

Whose rows: the kit cannot see inside a server, but its oracle steps the reference
participant through every request the run sent, and the run fails unless the server's reply
matched the oracle's; so a row the oracle fired is a row of the protocol the server was
driven through and checked on. The oracle steps recording tables (`kit_rules`).

Some rows cannot fire over the control routes, whatever the requests: the reference
participant runs an operation's start and outcome in one call (so nothing is ever in flight
between two requests, and no outcome arrives late), and the data plane (policy calls,
resource mutations) is not what the kit drives. Those rows are dead by design for the role
(`dead_reason` says why) and are listed apart, not counted. What it does not know: which
requests reach the rows (`_machine`'s rules).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from quiesce.fsm import Row, RowLog, Table, recording
from quiesce.protocol.machines import (
    AGENT_EXECUTION,
    CONTROL_FENCE,
    POLICY_ADMISSION,
    RESOURCES,
    AgentInput,
    ExecState,
    FenceInput,
    FenceState,
    PolicyInput,
    PolicyState,
    ResourcesInput,
    ResourcesState,
)
from quiesce.protocol.participant import ParticipantRules, ParticipantState, handle
from quiesce.protocol.wire import Role

__all__ = [
    "RunCoverage",
    "TableCoverage",
    "coverage_of",
    "dead_reason",
    "kit_rules",
    "row_text",
    "rows_fired",
]

_MACHINES = {
    CONTROL_FENCE.name: "M2",
    AGENT_EXECUTION.name: "M3",
    POLICY_ADMISSION.name: "M4",
    RESOURCES.name: "M5",
}
_ROLE_TABLE: dict[Role, Table[Any, Any]] = {
    Role.AGENT: AGENT_EXECUTION,
    Role.POLICY: POLICY_ADMISSION,
    Role.RESOURCES: RESOURCES,
}

_ONE_CALL = (
    "the reference participant runs an operation's start and outcome in one call, so the "
    "fence is never committing or restoring between two requests"
)
_DATA_PLANE = (
    "arrives on the data plane, which the kit does not drive (it checks the control routes)"
)
_NOTHING_IN_FLIGHT = (
    "needs a policy call or mutation in flight, which only the data plane starts; over the "
    "control routes a prepare finds the role idle and is ready at once"
)


def kit_rules() -> tuple[ParticipantRules, RowLog]:
    """The participant rules the oracle steps (the protocol's tables, recording) and the
    log they record into (one per run)."""
    log = RowLog()
    rules = ParticipantRules(
        fence=recording(CONTROL_FENCE, log),
        agent=recording(AGENT_EXECUTION, log),
        policy=recording(POLICY_ADMISSION, log),
        resources=recording(RESOURCES, log),
    )
    return rules, log


def dead_reason(role: Role, fenced: bool, table: Table[Any, Any], row: Row) -> str:
    """Why `row` of `table` cannot fire over the control routes on a `role` participant
    (`fenced`: False for an auxiliary policy), or "" if it can."""
    if table is CONTROL_FENCE:
        return _dead_fence_row(role, fenced, row)
    if table is AGENT_EXECUTION and _answered_from_ledger(row):
        return (
            "the reference participant forgets an execution once it is acked or "
            "tombstoned, and answers a later begin, ACK or retire of it from its refusal "
            "keys and ACK record, without stepping this row"
        )
    if row.input in (AgentInput.POLICY_CALL_HELD, AgentInput.POLICY_RESUMED):
        return f"an execution's policy call {_DATA_PLANE}"
    if row.input in (PolicyInput.CALL_STARTED, PolicyInput.CALL_FINISHED):
        return f"a policy call {_DATA_PLANE}"
    if row.input in (ResourcesInput.MUTATION_STARTED, ResourcesInput.MUTATION_FINISHED):
        return f"a mutation {_DATA_PLANE}"
    if _draining(row):
        return f"draining {_NOTHING_IN_FLIGHT}"
    if _prepared_again(row):
        return (
            "a prepare reaches a closed role again only while the fence stays preparing, "
            "which it never does here: over the control routes the first prepare is ready"
        )
    return ""


def _dead_fence_row(role: Role, fenced: bool, row: Row) -> str:
    if not fenced:
        return "an auxiliary policy has no fence: it answers discovery only"
    if "drop_late_outcome" in row.effects:
        return f"a late outcome: {_ONE_CALL}, and no outcome arrives after the fence moved on"
    if "join_in_flight" in row.effects:
        return f"joining an operation in flight: {_ONE_CALL}"
    if row.input is FenceInput.RECV_STATUS:
        return "the reference participant answers status from its state, without this row"
    if row.input is FenceInput.COMMIT_FAILED:
        return (
            "the reference participant fails a commit only when its role is not quiescent, "
            "which a prepared fence rules out (a server's own failed commit is accepted "
            "without stepping this row)"
        )
    stays_preparing = row.input is FenceInput.PREPARE_NOT_READY or (
        row.input is FenceInput.RECV_PREPARE and row.sources == (FenceState.PREPARING,)
    )
    if role is not Role.AGENT and stays_preparing:
        return f"a prepare that is not ready {_NOTHING_IN_FLIGHT}"
    return ""


def _answered_from_ledger(row: Row) -> bool:
    """An agent row of a begin, ACK or retire of an execution that has ended."""
    ended = (ExecState.ACKED, ExecState.TOMBSTONED)
    answered = (AgentInput.BEGIN, AgentInput.RECV_ACK, AgentInput.RETIRE)
    return row.input in answered and all(s in ended for s in row.sources)


def _prepared_again(row: Row) -> bool:
    """A policy or resources row of a prepare arriving at a role it already closed."""
    open_states = (PolicyState.ACCEPTING, ResourcesState.ACCEPTING)
    prepare = row.input in (PolicyInput.FENCE_PREPARE, ResourcesInput.FENCE_PREPARE)
    return prepare and not any(s in open_states for s in row.sources)


def _draining(row: Row) -> bool:
    draining = (PolicyState.DRAINING, ResourcesState.DRAINING)
    goes_draining = row.target in draining
    only_draining = all(s in draining for s in row.sources)
    return goes_draining or only_draining


def row_text(table: Table[Any, Any], index: int) -> str:
    """A row as the coverage report names it: `#index sources + INPUT [guard] -> target`."""
    row = table.rows[index]
    every = len(set(row.sources)) == len(table.states.__members__)
    sources = "*" if every else "|".join(str(s.value) for s in row.sources)
    target = "(holds)" if row.target is None else str(row.target.value)
    return f"#{index} {sources} + {row.label()} -> {target}"


_TABLES: dict[str, Table[Any, Any]] = {
    t.name: t for t in (CONTROL_FENCE, AGENT_EXECUTION, POLICY_ADMISSION, RESOURCES)
}


def rows_fired(state: ParticipantState, op: str, body: Any) -> tuple[str, ...]:
    """The rows the reference participant fires for `op(body)` in `state`, each as
    `M3 agent_execution #23 completed + retire -> (holds)` (machine, table, the row's index,
    the state it fired in, its input and target): what a report names as the row a
    differing reply broke. M2 first; the state the row fired in, not all its sources."""
    rules, log = kit_rules()
    handle(state, op, body, rules=rules)
    order = list(_TABLES)
    named = []
    for table_name, index, source in sorted(log.fired, key=lambda e: (order.index(e[0]), e[1])):
        table = _TABLES[table_name]
        row = table.rows[index]
        target = "(holds)" if row.target is None else str(row.target.value)
        state_name = table.states[source].value
        where = f"{_MACHINES[table_name]} {table_name} #{index}"
        named.append(f"{where} {state_name} + {row.label()} -> {target}")
    return tuple(named)


@dataclass(frozen=True)
class TableCoverage:
    """One table's rows in one run: `fired`, `unfired` (live rows the run did not reach) and
    `dead` (rows that cannot fire over the control routes, each with its reason)."""

    table: str
    machine: str
    fired: tuple[str, ...]
    unfired: tuple[str, ...]
    dead: tuple[tuple[str, str], ...]

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict of this table's coverage."""
        return {
            "table": self.table,
            "machine": self.machine,
            "fired": list(self.fired),
            "unfired": list(self.unfired),
            "dead_by_design": [{"row": row, "reason": why} for row, why in self.dead],
        }


@dataclass(frozen=True)
class RunCoverage:
    """The rows of a role's tables one run fired (`TableCoverage` each, M2 first)."""

    role: Role
    tables: tuple[TableCoverage, ...]

    @property
    def fired(self) -> int:
        """Live rows fired."""
        return sum(len(t.fired) for t in self.tables)

    @property
    def live(self) -> int:
        """Rows that can fire over the control routes (dead-by-design ones left out)."""
        return sum(len(t.fired) + len(t.unfired) for t in self.tables)

    @property
    def percent(self) -> float:
        """Fired live rows, in percent of the live rows."""
        return 100.0 * self.fired / self.live if self.live else 100.0

    def summary(self) -> str:
        """One line: the percentage and the count per table."""
        per_table = ", ".join(
            f"{t.machine} {t.table} {len(t.fired)}/{len(t.fired) + len(t.unfired)}"
            for t in self.tables
        )
        dead = sum(len(t.dead) for t in self.tables)
        return (
            f"row coverage ({self.role}): {self.percent:.0f}% ({self.fired}/{self.live} live "
            f"rows: {per_table}; {dead} rows dead by design)"
        )

    def unfired(self) -> list[str]:
        """The live rows not fired, each named with its table."""
        return [f"{t.machine} {t.table} {row}" for t in self.tables for row in t.unfired]

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (the `coverage` of `quiesce conform --json`)."""
        return {
            "role": self.role,
            "percent": round(self.percent, 1),
            "fired": self.fired,
            "live": self.live,
            "tables": [t.to_json() for t in self.tables],
        }


def coverage_of(role: Role, fenced: bool, log: RowLog) -> RunCoverage:
    """What the run whose oracle recorded into `log` covered of `role`'s tables."""
    tables = []
    for table in (CONTROL_FENCE, _ROLE_TABLE[role]):
        fired_rows = log.rows(table.name)
        fired, unfired, dead = [], [], []
        for index, row in enumerate(table.rows):
            text = row_text(table, index)
            why = dead_reason(role, fenced, table, row)
            if why:
                dead.append((text, why))
            elif index in fired_rows:
                fired.append(text)
            else:
                unfired.append(text)
        tables.append(
            TableCoverage(
                table.name, _MACHINES[table.name], tuple(fired), tuple(unfired), tuple(dead)
            )
        )
    return RunCoverage(role, tuple(tables))
