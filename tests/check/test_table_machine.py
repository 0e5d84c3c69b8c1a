"""The table-to-`RuleBasedStateMachine` generator: run on every registered table, and shown
to fail on mutants, on a bug four steps deep, and on an engine contract broken by a table.

Arguments for inputs come from the examples the table's module declares (`ARG_EXAMPLES`,
read by `quiesce.check.arg_strategies`); a table registered later whose inputs read their
argument must declare them: without them the machine steps with `None` and its failure
says so.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from enum import Enum
from typing import Any

import pytest
from hypothesis import find, settings
from hypothesis import strategies as st
from hypothesis.stateful import run_state_machine_as_test

from quiesce.check import arg_examples, arg_strategies, table_state_machine
from quiesce.fsm import Table, on
from quiesce.protocol.machines import ADMISSION_GATE, GateInput
from quiesce.protocol.machines import TABLES as REGISTERED

# Checks of the generator itself, not bug hunts: a short run shows every rule working.
SHALLOW = settings(settings.default, max_examples=100)
# Row 3 is `closed + release [last_holder] -> open`: without the guard, any release reopens.
LAST_HOLDER_ROW = 3


def failure_of(machine: type[Any], profile: settings | None = None) -> AssertionError:
    """Run `machine` expecting a failure; return it (its notes hold the printed program)."""
    with pytest.raises(AssertionError) as caught:
        run_state_machine_as_test(machine, settings=profile or settings.get_profile("hunt"))
    return caught.value


def program(error: BaseException, table: Table[Any, Any]) -> list[str]:
    """The rule steps of hypothesis's printed program, without the invariant checks."""
    checks = {f"state.{name}()" for name in [*table.invariants, "control_state_is_declared"]}
    notes: list[str] = getattr(error, "__notes__", [])
    return [line for line in notes if line.startswith("state.") and line not in checks]


# ---------------------------------------------------------------------- every registered table


@pytest.mark.parametrize("name", list(dict(REGISTERED)))
def test_every_registered_table_survives_its_machine(name: str) -> None:
    table = dict(REGISTERED)[name]
    run_state_machine_as_test(table_state_machine(table))


# ---------------------------------------------------------------------- what is generated


def test_rules_and_invariants_are_named_after_inputs_and_invariants() -> None:
    machine = table_state_machine(ADMISSION_GATE)
    assert machine.__name__ == "AdmissionGateMachine"
    members = {n for n in vars(machine) if not n.startswith("_")}
    assert members == {
        "table",
        "hold",
        "release",
        "open_iff_no_holder",
        "control_state_is_declared",
    }


def test_a_table_with_forbidden_pairs_gets_a_refused_rule_and_passes() -> None:
    # Without row 0, `open + hold` is refused: the machine must step it and see the refusal.
    no_hold_from_open = ADMISSION_GATE.without_row(0)
    machine = table_state_machine(no_hold_from_open)
    assert "refused" in vars(machine)
    run_state_machine_as_test(machine, settings=SHALLOW)


def test_names_that_clash_with_the_machine_get_a_suffix() -> None:
    class In(Enum):
        TEARDOWN = "teardown"
        GO = "go"

    class St(Enum):
        A = "a"
        B = "b"

    table = Table(
        "clash",
        states=St,
        inputs=In,
        initial=St.A,
        rows=[on(St.A, In.GO, St.B), on(St.B, In.TEARDOWN, St.A)],
        unmapped="forbidden",
        invariants={"go": lambda v: True},
    )
    machine = table_state_machine(table)
    assert {"teardown_2", "go", "go_2", "refused"} <= set(vars(machine))
    run_state_machine_as_test(machine, settings=SHALLOW)


def test_args_for_another_tables_inputs_are_refused() -> None:
    class Other(Enum):
        X = "x"

    with pytest.raises(ValueError, match="not members of GateInput"):
        table_state_machine(ADMISSION_GATE, {Other.X: st.none()})


def fake_gate(
    monkeypatch: pytest.MonkeyPatch, declare: Callable[[Any], object]
) -> tuple[Table[Any, Any], Any]:
    """A two-input table whose inputs live in a fresh module; its `ARG_EXAMPLES` is
    `declare(inputs)`."""
    module = types.ModuleType("quiesce_test_fake_gate_module")
    Holds = Enum("Holds", {"HOLD": "hold", "RELEASE": "release"})
    Holds.__module__ = module.__name__
    module.ARG_EXAMPLES = declare(Holds)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module.__name__, module)
    table = Table(
        "fake_gate",
        states=GateStateLike,
        inputs=Holds,
        initial=GateStateLike.OPEN,
        rows=[
            on(GateStateLike.OPEN, Holds.HOLD, GateStateLike.CLOSED),
            on(GateStateLike.CLOSED, Holds.RELEASE, GateStateLike.OPEN),
        ],
        unmapped="forbidden",
    )
    return table, Holds


def test_arg_examples_of_the_inputs_module_are_picked_up(monkeypatch: pytest.MonkeyPatch) -> None:
    # Keys of another enum (a second table of the same module) are not this table's.
    table, Holds = fake_gate(
        monkeypatch, lambda holds: {holds.HOLD: ("checkpoint",), GateInput.HOLD: ("x",)}
    )
    assert arg_examples(table) == {Holds.HOLD: ("checkpoint",)}
    assert arg_examples(table.without_row(1)) == {Holds.HOLD: ("checkpoint",)}
    given = st.just("weight_sync")
    strategies = arg_strategies(table, {Holds.RELEASE: given})
    assert strategies[Holds.RELEASE] is given  # `args=` wins over the module's examples
    assert find(strategies[Holds.HOLD], lambda _: True) == "checkpoint"


OTHER_SHAPES: dict[str, Callable[[Any], object]] = {
    "pairs": lambda holds: ((holds.HOLD, "checkpoint"),),
    "by_table_then_label": lambda holds: {"fake_gate": {"hold": ("checkpoint",)}},
    "by_label": lambda holds: {"hold": ("checkpoint",)},
    "a_list": lambda holds: {holds.HOLD: ["checkpoint"]},
    "no_example": lambda holds: {holds.HOLD: ()},
}


@pytest.mark.parametrize("shape", list(OTHER_SHAPES))
def test_arg_examples_in_another_shape_are_refused(
    shape: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    table, _ = fake_gate(monkeypatch, OTHER_SHAPES[shape])
    with pytest.raises(TypeError, match=r"quiesce_test_fake_gate_module\.ARG_EXAMPLES must map"):
        table_state_machine(table)


def test_every_registered_tables_examples_have_the_one_shape_and_its_modules_inputs() -> None:
    # The reader skips keys of another enum; here each must be an input of a table of the same
    # module, so an example left behind by a renamed input cannot go unnoticed.
    inputs_by_module: dict[str, set[Enum]] = {}
    for table in dict(REGISTERED).values():
        arg_examples(table)  # TypeError unless the one shape
        members = table.inputs.__members__.values()
        inputs_by_module.setdefault(table.inputs.__module__, set()).update(members)
    for module, inputs in inputs_by_module.items():
        assert set(getattr(sys.modules[module], "ARG_EXAMPLES", {})) <= inputs, module


class GateStateLike(Enum):
    OPEN = "open"
    CLOSED = "closed"


# ---------------------------------------------------------------------- the machine can fail


def test_dropping_the_last_holder_guard_violates_open_iff_no_holder() -> None:
    mutant = ADMISSION_GATE.without_guard(LAST_HOLDER_ROW)
    error = failure_of(table_state_machine(mutant))
    assert "invariant 'open_iff_no_holder' violated" in str(error)
    # The shortest story: one owner holds, a release (by anyone) reopens the gate.
    assert [s.split("(")[0] for s in program(error, mutant)] == [
        "state.hold",
        "state.release",
        "state.teardown",
    ]


def test_initial_data_is_drawn_by_a_start_rule() -> None:
    # Open with a holder already in the set: the invariant must fail right after `start`.
    machine = table_state_machine(ADMISSION_GATE, initial_data=st.just(frozenset({"checkpoint"})))
    error = failure_of(machine)
    assert "invariant 'open_iff_no_holder' violated" in str(error)
    assert program(error, ADMISSION_GATE) == [
        "state.start(data=frozenset({'checkpoint'}))",
        "state.teardown()",
    ]


def test_a_refusal_that_changes_the_value_is_reported() -> None:
    class St(Enum):
        IDLE = "idle"
        BUSY = "busy"

    class In(Enum):
        START = "start"
        STOP = "stop"

    def sneaky_guard(value: Any, arg: Any) -> bool:
        value.data.append("touched")  # a guard must never mutate what it reads
        return False

    table = Table(
        "sneaky",
        states=St,
        inputs=In,
        initial=St.IDLE,
        initial_data=[],
        rows=[
            on(St.IDLE, In.START, St.BUSY, guard="never"),
            on(St.IDLE, In.STOP, None),
            on(St.BUSY, In.STOP, St.IDLE),
            on(St.BUSY, In.START, None),
        ],
        guards={"never": sneaky_guard},
        strict=False,
    )
    error = failure_of(table_state_machine(table))
    assert "refusing start changed the value" in str(error)


# ---------------------------------------------------------------------- a bug four steps deep


class Lock(Enum):
    S0 = "s0"
    S1 = "s1"
    S2 = "s2"
    S3 = "s3"
    OPENED = "opened"


class Press(Enum):
    D0 = "d0"
    D1 = "d1"
    D2 = "d2"
    D3 = "d3"
    SLAM = "slam"  # forbidden while nothing is entered yet


CODE = (Press.D1, Press.D3, Press.D0, Press.D2)


def combination_lock() -> Table[Lock, Press]:
    """Opens (breaking `stays_locked`) only after exactly `CODE`; any other press resets it."""
    rows = []
    steps = (Lock.S0, Lock.S1, Lock.S2, Lock.S3, Lock.OPENED)
    for here, there, right in zip(steps, steps[1:], CODE, strict=False):
        rows.append(on(here, right, there))
        rows += [on(here, wrong, Lock.S0) for wrong in Press if wrong not in (right, Press.SLAM)]
        if here is not Lock.S0:
            rows.append(on(here, Press.SLAM, Lock.S0))
    return Table(
        "combination_lock",
        states=Lock,
        inputs=Press,
        initial=Lock.S0,
        rows=rows,
        finals=[Lock.OPENED],
        unmapped="forbidden",
        invariants={"stays_locked": lambda v: v.state is not Lock.OPENED},
    )


def test_the_hunt_profile_catches_a_bug_four_steps_deep() -> None:
    # How often each max_examples catches this: benchmarks/hypothesis_examples.py, whose
    # figures are in tests/conftest.py next to the `hunt` profile.
    lock = combination_lock()
    error = failure_of(table_state_machine(lock), settings.get_profile("hunt"))
    assert "invariant 'stays_locked' violated" in str(error)
    assert program(error, lock) == [
        "state.d1()",
        "state.d3()",
        "state.d0()",
        "state.d2()",
        "state.teardown()",
    ]
