"""Differential test: the compiled step agrees with `transitions.Machine` on every table.

For every registered table, every `(state, input)` pair and every combination of outcomes
of the guards on that pair's rows, both implementations are driven from the same value:
- they reach the same target and emit the same effects, in the same order;
- a forbidden (or unmapped) pair is `MachineError` there and `TransitionNotAllowed` here;
- all guards false is `False` there and `GuardRejected` here, with nothing changed.

Guard outcomes are forced: the compiled side is `table.derive(...)` with each guard bound
to a constant, and the `transitions` model calls the same constants by name. Updates are
bound to the identity and effects to their own names, so no table code runs on data it
was not written for (the value's data is the table's initial data in every state).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from enum import Enum
from typing import Any

import pytest
from transitions import Machine, MachineError

from quiesce.fsm import (
    Effect,
    GuardRejected,
    Table,
    TransitionNotAllowed,
    TransitionsExportError,
    TransitionsModel,
    Value,
    label,
    on,
    transitions_config,
)
from quiesce.protocol.machines import TABLES as REGISTERED

TABLES = dict(REGISTERED)


def forced(table: Table[Any, Any], outcomes: dict[str, bool]) -> Table[Any, Any]:
    """`table` with guards fixed to `outcomes`, identity updates and named effects."""
    return table.derive(
        "oracle",
        guards={name: (lambda v, arg, out=out: out) for name, out in outcomes.items()},
        updates={name: (lambda data, arg: data) for name in table.updates},
        effects={name: (lambda v, arg, name=name: name) for name in _effect_names(table)},
    )


def _effect_names(table: Table[Any, Any]) -> set[str]:
    return {name for row in table.rows for name in row.effects}


def cases(table: Table[Any, Any]) -> Iterator[tuple[Enum, Enum, dict[str, bool]]]:
    """Every pair, with every combination of its rows' guard outcomes."""
    for state, input in itertools.product(table.states, table.inputs):
        names = sorted({r.guard for r in table.rows_for(state, input) if r.guard is not None})
        for outcome in itertools.product((True, False), repeat=len(names)):
            yield state, input, dict(zip(names, outcome, strict=True))


def oracle(table: Table[Any, Any], state: Enum) -> TransitionsModel:
    """A `transitions.Machine` from the exported config, put in `state`."""
    model = TransitionsModel(table)
    Machine(model=model, **{**transitions_config(table), "initial": label(state)})
    return model


@pytest.mark.parametrize("name", list(TABLES))
def test_compiled_step_agrees_with_transitions(name: str) -> None:
    table = TABLES[name]
    checked = {"fired": 0, "refused": 0, "rejected": 0}
    for state, input, outcomes in cases(table):
        # Guards not on this pair keep a value too, so every name stays bound.
        all_outcomes = dict.fromkeys(table.guards, False) | outcomes
        compiled = forced(table, all_outcomes)
        value = Value(state, table.initial_data)
        model = oracle(compiled, state)
        where = f"{name}: {label(state)} + {label(input)} with guards {outcomes}"

        if table.disposition(state, input) == "forbidden":
            with pytest.raises(TransitionNotAllowed) as caught:
                compiled.step(value, input)
            assert type(caught.value) is TransitionNotAllowed, where
            with pytest.raises(MachineError):
                model.fire(label(input))
            assert model.value == value, where
            checked["refused"] += 1
            continue

        try:
            next_value, effects = compiled.step(value, input)
        except GuardRejected:
            assert model.fire(label(input)) is False, where
            assert model.value == value and model.effects == [], where
            checked["rejected"] += 1
            continue
        assert model.fire(label(input)) is True, where
        assert model.value == next_value, where
        assert tuple(model.effects) == effects, where
        checked["fired"] += 1

    # The table predicts the tally: each forbidden pair is refused once, and each pair
    # whose rows are all guarded is rejected exactly once (all its guards false).
    pairs = list(itertools.product(table.states, table.inputs))
    forbidden = [p for p in pairs if table.disposition(*p) == "forbidden"]
    all_guarded = [
        p for p in pairs if (rows := table.rows_for(*p)) and all(r.guard is not None for r in rows)
    ]
    assert checked["refused"] == len(forbidden)
    assert checked["rejected"] == len(all_guarded)
    assert checked["fired"] == sum(1 for _ in cases(table)) - len(forbidden) - len(all_guarded)
    assert checked["fired"] > 0


@pytest.mark.parametrize("name", list(TABLES))
def test_the_exported_config_is_complete_data(name: str) -> None:
    table = TABLES[name]
    config = transitions_config(table)
    assert config["auto_transitions"] is False
    assert config["ignore_invalid_triggers"] is False
    assert config["states"] == [label(s) for s in table.states]
    assert config["initial"] == label(table.initial)
    sources = sum(len(row.sources) for row in table.rows)
    assert len(config["transitions"]) == sources + len(table.ignored)
    for entry in config["transitions"][sources:]:
        # Ignored pairs: internal transitions with nothing attached.
        assert set(entry) == {"trigger", "source", "dest"} and entry["dest"] is None


def test_a_callback_method_that_collides_with_a_trigger_is_refused() -> None:
    class Lamp(Enum):
        OFF = "off"
        ON = "on"

    class Press(Enum):
        TOGGLE = "toggle"
        EFFECT_LOG = "effect_log"  # the method name of the effect `log`

    table = Table(
        "lamp",
        states=Lamp,
        inputs=Press,
        initial=Lamp.OFF,
        unmapped="forbidden",
        rows=[
            on(Lamp.OFF, Press.TOGGLE, Lamp.ON, effects="log"),
            on(Lamp.ON, Press.TOGGLE, Lamp.OFF),
            on(Lamp.ON, Press.EFFECT_LOG, None),
        ],
    )
    with pytest.raises(TransitionsExportError) as caught:
        TransitionsModel(table)
    assert caught.value.names == ["effect_log"]


def test_an_update_and_an_effect_may_share_a_name() -> None:
    class Box(Enum):
        EMPTY = "empty"
        FULL = "full"

    class Act(Enum):
        PUT = "put"
        TAKE = "take"

    table = Table(
        "box",
        states=Box,
        inputs=Act,
        initial=Box.EMPTY,
        initial_data=0,
        unmapped="forbidden",
        rows=[
            on(Box.EMPTY, Act.PUT, Box.FULL, update="record", effects="record"),
            on(Box.FULL, Act.TAKE, Box.EMPTY),
        ],
        updates={"record": lambda data, arg: data + 1},
    )
    config = transitions_config(table)
    assert config["transitions"][0]["before"] == ["update_record"]
    assert config["transitions"][0]["after"] == ["effect_record"]
    model = TransitionsModel.machine(table)
    assert model.fire("put", "x") is True
    assert model.value == Value(Box.FULL, 1)
    assert model.effects == [Effect("box", "record", "x")]
    assert (model.value, tuple(model.effects)) == table.step(table.start(), Act.PUT, "x")
