"""Judging overlapping operations: linearizability of a participant against the reference,
and a kill overlapping a request (§6).

What lives here: the shapes of the races the kit starts (`RACES`: a prepare long-polling,
then a resume, commit, retire, ACK or the next checkpoint's prepare arriving while it is in
flight), and
the judge. Operations that overlap in time may take effect in any order; operations that
do not (one was answered before the other was sent) in real-time order. The server
conforms iff some such order, run one at a time through the reference participant,
explains every reply and the state read after (`explanations` lists the orders that
explain the replies; the caller picks the one whose state matches). What it does not know:
how requests are sent or replies projected (`_machine` passes `expect`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from itertools import permutations
from typing import Any

from quiesce.protocol.participant import (
    PARTICIPANT_RULES,
    ParticipantRules,
    ParticipantState,
    from_journal,
    handle,
    journal_of,
)
from quiesce.protocol.wire import Message
from quiesce.testing._wire import Timed

__all__ = [
    "EXECUTION_TARGETS",
    "RACES",
    "RACE_DEADLINE_S",
    "Explanation",
    "explanations",
    "recoveries",
]

EXECUTION_TARGETS = frozenset({"running", "completed"})
"""Targets of a raced `retire` or `ack`: the kit first begins a fresh execution (and, for
`completed`, finishes it), and the raced request names it (an ACK with its exact receipt)."""

_OVERTAKEN = (("prepare", "next"), ("resume", "same"))
_NEXT_ARRIVES = (("prepare", "next"), ("resume", "same"), ("prepare", "next"))
RACES: tuple[tuple[tuple[str, str], ...], ...] = (
    _OVERTAKEN,
    _NEXT_ARRIVES,
    # again while an execution runs: it bites only when the first prepare is not ready, and
    # for an agent that needs a live execution (a policy or resources: `_NEXT_ARRIVES`)
    (("prepare", "running"), ("resume", "same"), ("prepare", "next")),
    (("prepare", "active"), ("commit", "same")),
    (("commit", "active"), ("resume", "same")),
    # retire and ACK racing a long-polling prepare (agents; refused elsewhere): the prepare
    # is ready only once the result is released, and only an ACK releases it (S17)
    (("prepare", "next"), ("retire", "completed")),
    (("prepare", "next"), ("ack", "completed")),
    (("prepare", "next"), ("retire", "completed"), ("ack", "completed")),
    (("prepare", "next"), ("ack", "running"), ("resume", "same")),
    (("prepare", "next"), ("retire", "running")),
)
"""The races the kit starts, as `(op, target)` in the order they are sent (each while the
earlier ones are in flight): `next` is a fresh id, `same` the first request's id, `active`
the fence's active id, `running` and `completed` an execution (`EXECUTION_TARGETS`; a
prepare at one is a fresh id, sent while that execution runs or holds its result). The
first three are the races of issue 13: a resume overtaking a long-polling prepare, and the
next checkpoint's prepare arriving before the stale one ends."""

RACE_DEADLINE_S = 0.5
"""A raced prepare's `deadline_at` is this many seconds from when it is sent: a server that
long-polls a not-ready prepare answers by then (the reference answers at once)."""


@dataclass(frozen=True, slots=True)
class Explanation:
    """An order of the raced requests (indexes into the request list) that explains every
    reply: the oracle's `expected` projection per request, and the `state` it ends in."""

    order: tuple[int, ...]
    expected: tuple[dict[str, Any], ...]
    state: ParticipantState


def explanations(
    state: ParticipantState,
    requests: Sequence[tuple[str, Any]],
    answers: Sequence[Timed],
    actual: Sequence[dict[str, Any]],
    expect: Callable[[str, Message], dict[str, Any]],
    failure: Callable[[ParticipantState, str, Any, dict[str, Any], dict[str, Any]], Any],
) -> tuple[tuple[Explanation, ...], Explanation]:
    """The orders (allowed by real time) whose replies, run through the reference one at a
    time from `state`, equal the server's `actual` projections; and the first order tried
    (what to show when none does). `failure(state, op, body, expected, actual)` is the state
    after an allowed failure of the server's own (a commit answered `failed`), else None."""
    found: list[Explanation] = []
    first: Explanation | None = None
    for order in _real_time_orders(answers):
        current = state
        expected: dict[int, dict[str, Any]] = {}
        for index in order:
            op, body = requests[index]
            after, reply, _ = handle(current, op, body)
            expected[index] = expect(op, reply)
            failed = failure(current, op, body, expected[index], actual[index])
            if failed is not None:
                after, expected[index] = failed, actual[index]
            current = after
        explanation = Explanation(order, tuple(expected[i] for i in range(len(requests))), current)
        first = first or explanation
        if all(expected[i] == actual[i] for i in range(len(requests))):
            found.append(explanation)
    assert first is not None
    return tuple(found), first


def _real_time_orders(answers: Sequence[Timed]) -> Iterator[tuple[int, ...]]:
    """Every order in which request i precedes j whenever i was answered before j was sent;
    the sending order first."""
    for order in permutations(range(len(answers))):
        position = {index: at for at, index in enumerate(order)}
        if all(
            position[i] < position[j]
            for i, a in enumerate(answers)
            for j, b in enumerate(answers)
            if a.answered < b.sent
        ):
            yield order


def recoveries(
    before: ParticipantState,
    after: ParticipantState,
    answered: bool,
    incarnation: str,
    rules: ParticipantRules = PARTICIPANT_RULES,
) -> tuple[ParticipantState, ...]:
    """The states a participant killed while a request was in flight may come back in under
    `incarnation` (§6), each recovered from its journal: the request's `after` state if it
    was `answered` (what a reply reported must be durable), else `before` (it never took
    effect) or `after` (it did; a replay then gets the recorded reply)."""
    states = (after,) if answered else (before, after)
    return tuple(from_journal(journal_of(state), incarnation, rules) for state in states)
