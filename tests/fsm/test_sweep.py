"""A sweep over every `(state, input)` pair of every registered table (h2-style).

Two layers:
- statically, every pair of every table: a forbidden pair raises exactly
  `TransitionNotAllowed` (not `GuardRejected`) carrying machine, state and input, and an
  ignored pair returns the value unchanged with no effects; data plays no part in either;
- dynamically, hypothesis walks each table from its initial value with random inputs and
  arguments; at every reachable value it fires *every* input and checks the step against
  the table: success exactly when the table maps or ignores the pair and (for a mapped
  pair) some guard holds, the target of the first row whose guard holds, refusal as
  `TransitionNotAllowed` exactly when the table says forbidden, `GuardRejected` exactly
  when no guard holds, never any other exception; and the table's invariants hold in
  every value a step produces.

Arguments: `quiesce.check.arg_strategies` draws each input's argument from the examples
its table's module declares in `ARG_EXAMPLES` (inputs not named there get `None`). A table
whose guards or updates read an argument must declare its examples there (a guard raising
on `None` fails the sweep, pointing at that mapping).
"""

from __future__ import annotations

import itertools
from enum import Enum
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from quiesce.check import arg_strategies
from quiesce.fsm import GuardRejected, Table, TransitionNotAllowed, Value, label
from quiesce.protocol.machines import ADMISSION_GATE, GateInput
from quiesce.protocol.machines import TABLES as REGISTERED

TABLES = dict(REGISTERED)
ARGS = {name: arg_strategies(table) for name, table in TABLES.items()}
"""Per table name, per input: the strategy of its argument (from the module's examples)."""


def arg_strategy(table: Table[Any, Any], input: Enum) -> st.SearchStrategy[Any]:
    return ARGS[table.name][input]


def first_firing_row_target(
    table: Table[Any, Any], value: Value[Any, Any], input: Enum, arg: Any
) -> Enum | None:
    """The table's own answer, read from its rows: target of the first row whose guard holds."""
    for row in table.rows_for(value.state, input):
        if row.guard is None or table.guards[row.guard](value, arg):
            return row.target or value.state
    return None


def check_step(table: Table[Any, Any], value: Value[Any, Any], input: Enum, arg: Any) -> None:
    """Fire `input` on `value` and check the outcome against what the table declares."""
    disposition = table.disposition(value.state, input)
    where = f"{table.name}: {label(input)}({arg!r}) in {value}"
    try:
        next_value, effects = table.step(value, input, arg)
    except GuardRejected as error:
        assert disposition == "mapped", where
        assert first_firing_row_target(table, value, input, arg) is None, where
        assert (error.state, error.input) == (value.state, input), where
        return
    except TransitionNotAllowed as error:
        assert disposition == "forbidden", where
        assert type(error) is TransitionNotAllowed, where
        assert (error.machine, error.state, error.input) == (table.name, value.state, input)
        return
    except Exception as error:
        error.add_note(
            f"{where} raised {type(error).__name__}; if the argument has the wrong type, "
            f"give {label(input)} examples in {table.inputs.__module__}.ARG_EXAMPLES"
        )
        raise
    assert disposition != "forbidden", where
    if disposition == "ignored":
        assert next_value is value and effects == (), where
    else:
        assert next_value.state is first_firing_row_target(table, value, input, arg), where
    assert table.check_invariants(next_value) == [], f"{where} -> {next_value}"


@pytest.mark.parametrize("name", list(TABLES))
def test_every_pair_without_rows_is_decided_without_the_data(name: str) -> None:
    table = TABLES[name]
    seen = {"mapped": 0, "ignored": 0, "forbidden": 0}
    for state, input in itertools.product(table.states, table.inputs):
        disposition = table.disposition(state, input)
        seen[disposition] += 1
        value = Value(state, table.initial_data)
        where = f"{name}: {label(input)} in {label(state)}"
        if disposition == "forbidden":
            with pytest.raises(TransitionNotAllowed) as caught:
                table.step(value, input)
            error = caught.value
            assert type(error) is TransitionNotAllowed, where
            assert (error.machine, error.state, error.input) == (name, state, input), where
            assert not table.enabled(value, input), where
        elif disposition == "ignored":
            assert table.step(value, input) == (value, ()), where
            assert table.enabled(value, input), where
        else:
            assert table.rows_for(state, input), where
    assert sum(seen.values()) == len(table.states) * len(table.inputs)
    assert seen["mapped"] >= len(table.inputs), "every input is handled by some row"


@pytest.mark.parametrize("name", list(TABLES))
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_walks_sweep_every_input_from_every_reached_value(
    name: str, data: st.DataObject
) -> None:
    table = TABLES[name]
    inputs = list(table.inputs)
    value = table.start()
    assert table.check_invariants(value) == []
    for _ in range(data.draw(st.integers(min_value=0, max_value=25), label="walk length")):
        event(f"reached {label(value.state)}")
        for input in inputs:
            check_step(table, value, input, data.draw(arg_strategy(table, input)))
        input = data.draw(st.sampled_from(inputs), label="next input")
        arg = data.draw(arg_strategy(table, input), label="its argument")
        if table.enabled(value, input, arg):
            value, _ = table.step(value, input, arg)


def test_every_registered_table_is_swept() -> None:
    # A table registered after collection would escape the sweep.
    assert list(dict(REGISTERED)) == list(TABLES)
    assert TABLES, "no table is registered"


def test_the_sweep_catches_a_table_that_breaks_its_invariant() -> None:
    broken = ADMISSION_GATE.without_guard(3)  # any release reopens the gate
    value = ADMISSION_GATE.start()
    for owner in ("checkpoint", "weight_sync"):
        value, _ = broken.step(value, GateInput.HOLD, owner)
    with pytest.raises(AssertionError, match="release"):
        check_step(broken, value, GateInput.RELEASE, "checkpoint")
    check_step(ADMISSION_GATE, value, GateInput.RELEASE, "checkpoint")
