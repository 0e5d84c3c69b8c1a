"""The traces of the `protocol` model: what a counterexample shows and how it is drawn.

What lives here: `describe_state` (a model state as JSON: every table's state, the
messages, timers, store and environment), `table_names` and `project` (a trace as steps of
one engine table, rows its `--trace` accepts, so `quiesce diagram` draws it),
`sequence_arrow` (the arrow one action draws in a sequence diagram) and the texts of
messages and replies. What it does not know: which actions exist or which properties hold
(the model's and the judge's).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from quiesce.check import Action, Trace
from quiesce.fsm import Table, label
from quiesce.models.implementation._state import GROUP, Cast, PState, executions
from quiesce.models.implementation._system import InFlight
from quiesce.models.projection import (
    SPEC_TABLES,
    execution_key,
    instance_names,
    project_table,
    split_instance,
)
from quiesce.protocol import rollout_id
from quiesce.protocol.controller.lowlevel import Op
from quiesce.protocol.wire import ErrorReply, Message

__all__ = [
    "describe_message",
    "describe_state",
    "project",
    "reply_text",
    "sequence_arrow",
    "table_names",
    "text",
]


_CONTROLLER_TABLES = ("checkpoint", "admission_gate", "deadline_registry")
"""The controller's tables a protocol trace projects onto (its restore is not modelled)."""


def describe_state(cast: Cast, state: PState) -> dict[str, Any]:
    """Every table's state, the messages, timers, store and environment of `state` (JSON)."""
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
        # M9, the restore at controller start (`idle` once it ended).
        "restore": None if controller.restore is None else label(controller.restore.state),
        "fences": {
            p.config.name: [
                label(p.fence.state),
                text(p.fence.data.active),
                text(p.fence.data.high_watermark),
            ]
            for p in sys.participants
        },
        "executions": {
            f"{e.data.rollout_id}#{e.data.attempt}": [label(e.state), e.data.turn]
            for agent in cast.agents
            for e in executions(sys.participant(agent))
        },
        "ledger": {
            f"{a.rollout_id}#{a.attempt}": label(a.state) for a in controller.ledger.attempts
        },
        "messages": [describe_message(m) for m in sys.messages],
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


def table_names(cast: Cast) -> list[str]:
    """The tables a trace projects onto: the controller's, one fence per participant, one
    agent execution per possible attempt of each sibling."""
    return instance_names(
        _CONTROLLER_TABLES,
        cast.names,
        GROUP,
        cast.params.siblings,
        range(cast.params.attempts + 1),
    )


def project(
    cast: Cast, trace: Trace[PState], table: str, machines: Mapping[str, Table[Any, Any]]
) -> list[dict[str, str]]:
    """`trace` as steps of `table` (one of `table_names(cast)`), rows the engine accepts.

    `machines` are the tables the model runs, by base name (a mutant's variant in place of
    the protocol's own): its moves the protocol's table has no row for carry `"variant"`
    (`project_table`).
    """
    base, key = split_instance(table)
    view = _VIEWS[base]
    spec = SPEC_TABLES[base]
    return project_table(
        trace, lambda state: view(cast, state, key), spec, machines.get(base, spec)
    )


def sequence_arrow(before: PState, action: Action) -> tuple[str, str, str]:
    """`(sender, receiver, text)` of the arrow `action` draws from `before` in a sequence
    diagram."""
    kind = action.payload[0]
    if kind in ("deliver", "drop", "fail", "delay", "wrong_digest"):
        flying = before.system.messages[action.payload[1]]
        call = flying.call
        what = f"{call.op.value}({text(call.op_id) or ''})"
        if kind == "fail":
            what += f" {action.payload[2].value}"
        if flying.reply is None:
            return ("controller", call.participant, what)
        return (call.participant, "controller", f"{what} -> {reply_text(flying.reply)}")
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


def text(value: Any) -> str | None:
    """`str(value)`, or None for None (ids in a JSON trace)."""
    return None if value is None else str(value)


def reply_text(reply: Message) -> str:
    """A reply in a word: its error code, its status, or its type."""
    if isinstance(reply, ErrorReply):
        return reply.code
    status = getattr(reply, "status", None)
    return status or type(reply).__name__


def describe_message(message: InFlight) -> str:
    """One in-flight message as a line of text (action labels, traces)."""
    call = message.call
    if call.op_id is not None:
        what = f"{call.op.value}({call.op_id})"
    elif call.op is Op.RETIRE:
        what = f"retire({call.payload[0]}#{call.payload[1]})"
    else:
        what = f"{call.op.value}({len(call.payload or ())})"
    if message.reply is None:
        return f"{what} -> {call.participant}"
    return f"{what} <- {call.participant}: {reply_text(message.reply)}"


# ------------------------------------------------------------------ projections


def _view_checkpoint(cast: Cast, state: PState, _target: str) -> str | None:
    return label(state.system.controller.phase)


def _view_gate(cast: Cast, state: PState, _target: str) -> str | None:
    return label(state.system.controller.gate.state)


def _view_registry(cast: Cast, state: PState, _target: str) -> str | None:
    return label(state.system.controller.deadlines.state)


def _view_fence(cast: Cast, state: PState, target: str) -> str | None:
    return label(state.system.participant(target).fence.state)


def _view_execution(cast: Cast, state: PState, target: str) -> str | None:
    group, sibling, attempt = execution_key(target)
    rollout = rollout_id(group, sibling)
    key = (rollout, attempt)
    for agent in cast.agents:
        participant = state.system.participant(agent)
        for execution in executions(participant):
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


_VIEWS: dict[str, Callable[[Cast, PState, str], str | None]] = {
    "checkpoint": _view_checkpoint,
    "admission_gate": _view_gate,
    "deadline_registry": _view_registry,
    "control_fence": _view_fence,
    "agent_execution": _view_execution,
}
