"""Judging overlapping operations: linearizability of a participant against the reference,
and a kill overlapping a request (§6).

What lives here: the judge of the races the kit starts (their shapes are generated from
the tables, `_shapes`). Operations that overlap in time may take effect in any order;
operations that do not (one was answered before the other was sent) in real-time order. The server
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
    "RACE_DEADLINE_S",
    "Explanation",
    "explanations",
    "order_free",
    "race_note",
    "recoveries",
]

RACE_DEADLINE_S = 0.5
"""A raced prepare's `deadline_at` is this many seconds from when it is sent: a server that
long-polls a not-ready prepare answers by then (the reference answers at once)."""


@dataclass(frozen=True, slots=True)
class Explanation:
    """An order of the raced requests (indexes into the request list; a prepare named twice
    ran again, long-polled) that explains every reply: the oracle's `expected` projection
    per request, and the `state` it ends in."""

    order: tuple[int, ...]
    expected: tuple[dict[str, Any], ...]
    state: ParticipantState
    before: tuple[ParticipantState, ...]
    """The state each request (by index) was run on in this order."""


def explanations(
    state: ParticipantState,
    requests: Sequence[tuple[str, Any]],
    answers: Sequence[Timed],
    actual: Sequence[dict[str, Any]],
    expect: Callable[[str, Message], dict[str, Any]],
    failure: Callable[[ParticipantState, str, Any, dict[str, Any], dict[str, Any]], Any],
) -> tuple[tuple[Explanation, ...], tuple[Explanation, ...]]:
    """The orders (allowed by real time) whose replies, run through the reference one at a
    time from `state`, equal the server's `actual` projections; and every order tried, the
    send order first (what to show when none does). `failure(state, op, body, expected,
    actual)` is the state after an allowed failure of the server's own (a commit answered
    `failed`), else None."""
    tried: list[Explanation] = []
    indexes = range(len(requests))
    for schedule in _schedules(requests, answers):
        current = state
        expected: dict[int, dict[str, Any]] = {}
        before: dict[int, ParticipantState] = {}
        for index, again in schedule:
            op, body = requests[index]
            if again and expected[index].get("status") != "not_ready":
                break  # a long poll goes on only while the prepare is not ready
            before[index] = current
            after, reply, _ = handle(current, op, body)
            expected[index] = expect(op, reply)
            failed = failure(current, op, body, expected[index], actual[index])
            if failed is not None:
                after, expected[index] = failed, actual[index]
            current = after
        else:
            tried.append(
                Explanation(
                    tuple(index for index, _ in schedule),
                    tuple(expected[i] for i in indexes),
                    current,
                    tuple(before[i] for i in indexes),
                )
            )
    found = tuple(e for e in tried if all(e.expected[i] == actual[i] for i in indexes))
    return found, tuple(tried)


def _schedules(
    requests: Sequence[tuple[str, Any]], answers: Sequence[Timed]
) -> Iterator[tuple[tuple[int, bool], ...]]:
    """Every order in which the raced requests may run through the reference, the sending
    order first: request i before j whenever i was answered before j was sent. A prepare
    may also run a second time, later (`True`): a server may long-poll a prepare that is
    not ready and ask again when something changed (an execution reached a boundary), so
    its reply is that of the later run (M2: preparing + prepare of the same id)."""
    polls = [i for i, (op, _) in enumerate(requests) if op == "prepare"]
    for again in ((), *((i,) for i in polls)):
        events = [(i, False) for i in range(len(requests))] + [(i, True) for i in again]
        for schedule in permutations(events):
            first = {i: at for at, (i, later) in enumerate(schedule) if not later}
            last = {i: at for at, (i, _) in enumerate(schedule)}
            if all(first[i] < last[i] for i in again) and all(
                last[i] < first[j]
                for i, a in enumerate(answers)
                for j, b in enumerate(answers)
                if a.answered < b.sent
            ):
                yield schedule


def order_free(
    tried: Sequence[Explanation], actual: Sequence[dict[str, Any]], answers: Sequence[Timed]
) -> int | None:
    """The first raced request whose reply differs from the reference's although no order
    changes what it must answer (every order tried expects the same of it) and nothing was
    in flight with it (it overlapped no other raced request, so no interleaving can have
    disturbed it): a sequential difference reached inside a race; None if there is none."""
    for index, got in enumerate(actual):
        mine = answers[index]
        if any(
            j != index and other.sent < mine.answered and mine.sent < other.answered
            for j, other in enumerate(answers)
        ):
            continue
        wanted = {repr(sorted(e.expected[index].items())) for e in tried}
        if len(wanted) == 1 and tried[0].expected[index] != got:
            return index
    return None


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


def race_note(index: int, answers: Sequence[Timed]) -> str:
    """How raced request `index` (in send order) overlapped the others: when it was sent and
    answered, in milliseconds from the first send, and which requests were in flight with it."""
    start = min(t.sent for t in answers)
    mine = answers[index]
    overlapped = [
        str(j + 1)
        for j, other in enumerate(answers)
        if j != index and other.sent < mine.answered and mine.sent < other.answered
    ]
    with_whom = f"overlapping {', '.join(overlapped)}" if overlapped else "overlapping none"
    return (
        f"raced: request {index + 1} of {len(answers)} in send order, sent at "
        f"+{(mine.sent - start) * 1000:.0f} ms, answered at +{(mine.answered - start) * 1000:.0f}"
        f" ms, {with_whom}"
    )
