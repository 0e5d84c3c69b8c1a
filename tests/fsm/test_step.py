"""The compiled step: refusals, priority, ignored pairs, effects, invariants, derivation."""

from __future__ import annotations

import dataclasses
from enum import Enum
from typing import Any

import pytest

from quiesce.fsm import (
    Effect,
    GuardRejected,
    Table,
    TransitionNotAllowed,
    Value,
    each,
    on,
)

LIMIT = 3


class Counter(Enum):
    IDLE = "idle"
    RUNNING = "running"
    STOPPED = "stopped"


class Cmd(Enum):
    START = "start"
    TICK = "tick"
    STOP = "stop"


# Same member names and values as the real enums: the step must still refuse them.
class CounterClone(Enum):
    IDLE = "idle"
    RUNNING = "running"
    STOPPED = "stopped"


class CmdClone(Enum):
    START = "start"
    TICK = "tick"
    STOP = "stop"


COUNTER: Table[Counter, Cmd] = Table(
    "counter",
    states=Counter,
    inputs=Cmd,
    initial=Counter.IDLE,
    finals=[Counter.STOPPED],
    initial_data=0,
    rows=[
        on(Counter.IDLE, Cmd.START, Counter.RUNNING, update="reset", effects=("started", "log")),
        on(Counter.RUNNING, Cmd.TICK, None, guard="below_limit", update="count", effects="tick"),
        on(Counter.RUNNING, Cmd.TICK, Counter.STOPPED, guard="at_limit", effects="limit"),
        on(Counter.RUNNING, Cmd.STOP, Counter.STOPPED, guard="graceful", effects="drain"),
        on(Counter.RUNNING, Cmd.STOP, Counter.IDLE),
    ],
    ignored=[(Counter.IDLE, Cmd.TICK)],
    forbidden=[(Counter.IDLE, Cmd.STOP), (Counter.RUNNING, Cmd.START), *each(Counter.STOPPED, Cmd)],
    guards={
        "below_limit": lambda v, arg: v.data < LIMIT,
        "at_limit": lambda v, arg: v.data == LIMIT,
        "graceful": lambda v, arg: arg == "graceful",
    },
    updates={"reset": lambda data, arg: 0, "count": lambda data, arg: data + 1},
    effects={"started": lambda v, arg: ("started", v.state, v.data, arg)},
    invariants={"count_bounded": lambda v: 0 <= v.data <= LIMIT},
)


def running(count: int = 0) -> Value[Counter, int]:
    return Value(Counter.RUNNING, count)


def snapshot(table: Table[Any, Any]) -> tuple[Any, ...]:
    """Everything a derivation must leave untouched on the original."""
    return (
        table.rows,
        dict(table.guards),
        dict(table.updates),
        dict(table.effect_fns),
        table.variant,
        table.ignored,
        table.forbidden,
    )


ORIGINAL = snapshot(COUNTER)


# --------------------------------------------------------------------------- refusals


def test_a_forbidden_pair_is_refused_with_machine_state_and_input() -> None:
    value = COUNTER.start()
    with pytest.raises(TransitionNotAllowed) as caught:
        COUNTER.step(value, Cmd.STOP)
    error = caught.value
    assert type(error) is TransitionNotAllowed
    assert (error.machine, error.state, error.input) == ("counter", Counter.IDLE, Cmd.STOP)
    assert error.reason == "forbidden"
    assert str(error) == "counter: stop is forbidden in state idle"
    assert value == Value(Counter.IDLE, 0)


def test_every_pair_of_a_final_state_is_refused() -> None:
    for command in Cmd:
        with pytest.raises(TransitionNotAllowed):
            COUNTER.step(Value(Counter.STOPPED, 1), command)


def test_all_guards_false_is_guard_rejected_and_nothing_changes() -> None:
    # A count above the limit makes both guards of (running, tick) false.
    value = running(LIMIT + 1)
    with pytest.raises(GuardRejected) as caught:
        COUNTER.step(value, Cmd.TICK)
    error = caught.value
    assert isinstance(error, TransitionNotAllowed)
    assert (error.machine, error.state, error.input) == ("counter", Counter.RUNNING, Cmd.TICK)
    assert error.guards == ("below_limit", "at_limit")
    assert "rejected by guards" in str(error)
    assert value == running(LIMIT + 1)
    assert not COUNTER.enabled(value, Cmd.TICK)


def test_members_of_another_enum_are_refused_even_with_the_same_names() -> None:
    with pytest.raises(TransitionNotAllowed):
        COUNTER.step(Value(CounterClone.IDLE, 0), Cmd.START)  # type: ignore[arg-type]
    with pytest.raises(TransitionNotAllowed):
        COUNTER.step(COUNTER.start(), CmdClone.START)  # type: ignore[arg-type]
    assert not COUNTER.enabled(Value(CounterClone.IDLE, 0), Cmd.START)  # type: ignore[arg-type]


def test_values_are_frozen() -> None:
    value = COUNTER.start()
    with pytest.raises(dataclasses.FrozenInstanceError):
        value.state = Counter.RUNNING  # type: ignore[misc]


# --------------------------------------------------------------------------- firing


def test_a_row_fires_its_update_and_effects_in_order() -> None:
    value, effects = COUNTER.step(Value(Counter.IDLE, 7), Cmd.START, "go")
    assert value == running(0)
    # A bound effect sees the *next* value; an unbound one is an `Effect` record.
    assert effects == (("started", Counter.RUNNING, 0, "go"), Effect("counter", "log", "go"))


def test_a_holding_row_keeps_the_state_and_updates_the_data() -> None:
    value, effects = COUNTER.step(running(1), Cmd.TICK)
    assert value == running(2)
    assert effects == (Effect("counter", "tick", None),)


def test_a_row_without_effects_returns_no_effects() -> None:
    value, effects = COUNTER.step(running(2), Cmd.STOP, "abrupt")
    assert value == Value(Counter.IDLE, 2)
    assert effects == ()


def test_declared_order_is_priority() -> None:
    # (running, stop): the guarded row comes first and wins when it holds ...
    value, effects = COUNTER.step(running(2), Cmd.STOP, "graceful")
    assert value.state is Counter.STOPPED
    assert effects == (Effect("counter", "drain", "graceful"),)
    # ... and when two guards hold at once, the first declared one fires.
    both = COUNTER.derive("both_hold", guards={"at_limit": lambda v, arg: True})
    value, effects = both.step(running(1), Cmd.TICK)
    assert value == running(2)
    assert [e.name for e in effects] == ["tick"]


def test_the_second_row_fires_when_the_first_guard_is_false() -> None:
    value, effects = COUNTER.step(running(LIMIT), Cmd.TICK)
    assert value == Value(Counter.STOPPED, LIMIT)
    assert [e.name for e in effects] == ["limit"]


def test_an_ignored_pair_changes_nothing_and_emits_nothing() -> None:
    value = COUNTER.start()
    after, effects = COUNTER.step(value, Cmd.TICK)
    assert after is value
    assert effects == ()
    assert COUNTER.enabled(value, Cmd.TICK)


def test_enabled_agrees_with_step() -> None:
    values = [COUNTER.start(), running(0), running(LIMIT), running(LIMIT + 1)]
    for value in values:
        for command in Cmd:
            for arg in (None, "graceful"):
                try:
                    COUNTER.step(value, command, arg)
                    stepped = True
                except TransitionNotAllowed:
                    stepped = False
                assert COUNTER.enabled(value, command, arg) is stepped, (value, command, arg)


def test_disposition_and_rows_for() -> None:
    assert COUNTER.disposition(Counter.RUNNING, Cmd.TICK) == "mapped"
    assert COUNTER.disposition(Counter.IDLE, Cmd.TICK) == "ignored"
    assert COUNTER.disposition(Counter.IDLE, Cmd.STOP) == "forbidden"
    assert [r.guard for r in COUNTER.rows_for(Counter.RUNNING, Cmd.TICK)] == [
        "below_limit",
        "at_limit",
    ]
    assert COUNTER.rows_for(Counter.STOPPED, Cmd.TICK) == ()


# --------------------------------------------------------------------------- invariants


def test_invariants_name_what_a_value_violates() -> None:
    assert COUNTER.check_invariants(running(LIMIT)) == []
    assert COUNTER.check_invariants(running(LIMIT + 1)) == ["count_bounded"]


def test_invariants_hold_along_a_run() -> None:
    value = COUNTER.start()
    for command in (Cmd.START, Cmd.TICK, Cmd.TICK, Cmd.TICK, Cmd.TICK):
        value, _ = COUNTER.step(value, command)
        assert COUNTER.check_invariants(value) == []
    assert value == Value(Counter.STOPPED, LIMIT)


# --------------------------------------------------------------------------- derivation


def test_without_row_drops_exactly_that_row() -> None:
    mutant = COUNTER.without_row(3)
    assert mutant.rows == COUNTER.rows[:3] + COUNTER.rows[4:]
    assert mutant.variant == "drop_row[3]"
    # The graceful stop now falls through to the next row.
    value, _ = mutant.step(running(1), Cmd.STOP, "graceful")
    assert value.state is Counter.IDLE
    assert snapshot(COUNTER) == ORIGINAL
    assert COUNTER.step(running(1), Cmd.STOP, "graceful")[0].state is Counter.STOPPED


def test_dropping_the_only_row_of_a_pair_refuses_it() -> None:
    mutant = COUNTER.without_row(0)
    with pytest.raises(TransitionNotAllowed) as caught:
        mutant.step(mutant.start(), Cmd.START)
    assert type(caught.value) is TransitionNotAllowed
    assert snapshot(COUNTER) == ORIGINAL


def test_retarget_changes_only_the_target() -> None:
    mutant = COUNTER.retarget(4, Counter.STOPPED)
    assert mutant.rows[4] == dataclasses.replace(COUNTER.rows[4], target=Counter.STOPPED)
    assert mutant.rows[:4] == COUNTER.rows[:4]
    assert mutant.variant == "retarget[4]->stopped"
    assert mutant.step(running(1), Cmd.STOP)[0].state is Counter.STOPPED
    assert COUNTER.step(running(1), Cmd.STOP)[0].state is Counter.IDLE
    held = COUNTER.retarget(0, None)
    assert held.variant == "retarget[0]->HOLD"
    assert held.step(COUNTER.start(), Cmd.START)[0].state is Counter.IDLE
    assert snapshot(COUNTER) == ORIGINAL


def test_with_row_puts_the_row_in_that_place_only() -> None:
    stopping = dataclasses.replace(COUNTER.rows[4], target=Counter.STOPPED)
    mutant = COUNTER.with_row(4, stopping, "stop_stops")
    assert mutant.rows == (*COUNTER.rows[:4], stopping, *COUNTER.rows[5:])
    assert mutant.variant == "stop_stops"
    assert mutant.step(running(1), Cmd.STOP)[0].state is Counter.STOPPED
    with pytest.raises(IndexError, match="not 99"):
        COUNTER.with_row(99, stopping, "nowhere")
    assert snapshot(COUNTER) == ORIGINAL


def test_without_guard_makes_the_row_fire_always() -> None:
    mutant = COUNTER.without_guard(3)
    assert mutant.rows[3] == dataclasses.replace(COUNTER.rows[3], guard=None)
    assert mutant.variant == "drop_guard[3]"
    assert mutant.step(running(1), Cmd.STOP, "abrupt")[0].state is Counter.STOPPED
    assert COUNTER.step(running(1), Cmd.STOP, "abrupt")[0].state is Counter.IDLE
    # The mutant keeps its structural problem (row 4 is now shadowed) instead of refusing.
    assert [kind for kind, _ in mutant.problems] == ["shadowed_row"]
    assert snapshot(COUNTER) == ORIGINAL


def test_without_effect_drops_one_named_effect() -> None:
    mutant = COUNTER.without_effect(0, "started")
    assert mutant.rows[0].effects == ("log",)
    assert mutant.variant == "drop_effect[0]:started"
    _, effects = mutant.step(COUNTER.start(), Cmd.START)
    assert effects == (Effect("counter", "log", None),)
    assert len(COUNTER.step(COUNTER.start(), Cmd.START)[1]) == 2
    assert snapshot(COUNTER) == ORIGINAL


def test_derive_rebinds_callables_by_name() -> None:
    mutant = COUNTER.derive(
        "double_count",
        updates={"count": lambda data, arg: data + 2},
        effects={"tick": lambda v, arg: ("tick", v.data)},
    )
    assert mutant.rows == COUNTER.rows
    assert mutant.variant == "double_count"
    assert mutant.step(running(0), Cmd.TICK) == (running(2), (("tick", 2),))
    assert COUNTER.step(running(0), Cmd.TICK) == (running(1), (Effect("counter", "tick", None),))
    assert snapshot(COUNTER) == ORIGINAL


def test_derivations_chain_and_name_every_change() -> None:
    mutant = COUNTER.without_guard(3).without_effect(0, "log")
    assert mutant.variant == "drop_guard[3]+drop_effect[0]:log"
    assert mutant.rows[3].guard is None and mutant.rows[0].effects == ("started",)
    assert "variant='drop_guard[3]+drop_effect[0]:log'" in repr(mutant)


def test_derivation_refuses_a_row_or_effect_that_does_not_exist() -> None:
    with pytest.raises(IndexError, match=r"rows 0\.\.4, not 9"):
        COUNTER.without_row(9)
    with pytest.raises(IndexError):
        COUNTER.retarget(-1, Counter.IDLE)
    with pytest.raises(ValueError, match="no effect 'nope'"):
        COUNTER.without_effect(0, "nope")
    assert snapshot(COUNTER) == ORIGINAL
