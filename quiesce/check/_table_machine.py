"""Any `Table` as a hypothesis `RuleBasedStateMachine`: random walks over the real table.

What lives here: a generator that reads a table and writes a state machine class for it.
The class holds the table's current `Value`; each input of the table is a rule named after
the input; each named invariant of the table is an `@invariant` named after it. What it
does not know: what the table means. It checks only what the table itself declares, plus
the engine's contract (a refused step changes nothing; the row that fires is the first
declared row whose guard holds).

How a step is judged (for the current state `s`, an input `i` and its drawn argument `a`):

    pair (s, i) forbidden       -> rule `i` is not enabled; rule `refused(input=i)` is,
                                   and step must raise TransitionNotAllowed, value unchanged
    pair mapped, no guard holds -> step must raise GuardRejected, value unchanged
    pair mapped, a guard holds  -> step must land where the first such declared row says
    pair ignored                -> step must change nothing and emit nothing

Hypothesis preconditions see the machine but not the drawn argument, so the precondition
of rule `i` is "(s, i) is not forbidden"; guards, which read the argument, are judged
inside the rule. Rejected steps are kept (not `assume`d away, which would throw out the
whole run): a refusal is behaviour worth checking too.

Arguments: an input whose rows read their argument needs a strategy for it. They come
from `args=` if given, else from `ARG_EXAMPLES` of the module that defines the table's
inputs, drawn with `sampled_from` (see `arg_examples` for its one shape: plain data, so the
pure protocol modules need not import hypothesis); an input with neither gets a rule
without an argument, stepped with `None`.
"""

from __future__ import annotations

import copy
import keyword
import re
import sys
from collections.abc import Callable, Mapping
from enum import Enum
from typing import Any, ClassVar

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from quiesce.fsm import GuardRejected, Table, TransitionNotAllowed, Value, label

__all__ = [
    "ARG_EXAMPLES_HOOK",
    "TableMachine",
    "arg_examples",
    "arg_strategies",
    "table_state_machine",
]

ARG_EXAMPLES_HOOK = "ARG_EXAMPLES"
"""The attribute of a table's inputs module that gives its inputs example arguments."""


class TableMachine(RuleBasedStateMachine):
    """Base of the machines `table_state_machine` generates; `value` is the table's value."""

    table: ClassVar[Table[Any, Any]]

    def __init__(self) -> None:
        super().__init__()
        self.value: Value[Any, Any] = self.table.start()

    def _fire(self, input: Enum, arg: Any) -> None:
        """Step `input` and judge the outcome against the declared rows."""
        table, before = self.table, self.value
        snapshot = copy.deepcopy(before)
        try:
            predicted = table.enabled(before, input, arg)
            outcome = table.step(before, input, arg)
        except GuardRejected:
            outcome = None
        except TransitionNotAllowed as err:
            raise AssertionError(
                f"{table.name}: {label(input)} is mapped in {label(before.state)} but step() "
                f"refused it as forbidden: {err}"
            ) from err
        except Exception as err:
            _hint_at_arguments(err, table, input)
            raise
        if outcome is None:
            if predicted:
                raise AssertionError(
                    f"{table.name}: enabled() said {label(input)}({arg!r}) fires in "
                    f"{label(before.state)}, but step() rejected it"
                )
            _expect_unchanged(table, before, snapshot, input)
            return
        if not predicted:
            raise AssertionError(
                f"{table.name}: enabled() said {label(input)}({arg!r}) is rejected in "
                f"{label(before.state)}, but step() accepted it"
            )
        after, effects = outcome
        expected = _declared_outcome(table, before, input, arg)
        if (after.state, after.data, len(effects)) != expected:
            raise AssertionError(
                f"{table.name}: {label(input)}({arg!r}) in {label(before.state)} gave "
                f"{after!r} with {len(effects)} effects; the declared rows say "
                f"{Value(expected[0], expected[1])!r} with {expected[2]}"
            )
        self.value = after

    def _refuse(self, input: Enum) -> None:
        """Step a forbidden `input` and require a plain refusal that changes nothing."""
        table, before = self.table, self.value
        if table.disposition(before.state, input) != "forbidden":
            # Drawn before the state was known: another input is forbidden here, not this one.
            return
        snapshot = copy.deepcopy(before)
        try:
            table.step(before, input, None)
        except GuardRejected as err:
            raise AssertionError(
                f"{table.name}: {label(input)} is forbidden in {label(before.state)} but was "
                f"refused by guards, as if mapped: {err}"
            ) from err
        except TransitionNotAllowed:
            _expect_unchanged(table, before, snapshot, input)
            return
        raise AssertionError(
            f"{table.name}: {label(input)} is forbidden in {label(before.state)} but step() "
            "accepted it"
        )


def table_state_machine(
    table: Table[Any, Any],
    args: Mapping[Enum, st.SearchStrategy[Any]] | None = None,
    *,
    initial_data: st.SearchStrategy[Any] | None = None,
) -> type[TableMachine]:
    """A `RuleBasedStateMachine` class that random-walks `table` and checks it.

    Rules: one per input, named after it (`hold`, `release`), drawing its argument from
    `args[input]` (else `arg_examples(table)[input]`, else no argument), enabled when the
    pair is not forbidden; plus `refused(input=...)`, enabled when some input is forbidden
    in the current state. Invariants: one per named invariant of the table, named after it,
    plus `control_state_is_declared`. `initial_data` draws the start data (it must be valid
    for the initial state). A failure prints the steps as a program, e.g.
    `state.hold(arg='checkpoint')`. pytest and unittest collect `Machine.TestCase`.

    >>> from quiesce.protocol.machines import ADMISSION_GATE, GateInput
    >>> Machine = table_state_machine(ADMISSION_GATE)  # owners: the module's ARG_EXAMPLES
    >>> Only = table_state_machine(ADMISSION_GATE, {GateInput.HOLD: st.just("checkpoint")})
    >>> Machine.TestCase  # doctest: +SKIP
    """
    strategies = _given_strategies(table, args)
    namer = _Namer()
    body: dict[str, Any] = {
        "table": table,
        "__doc__": f"Random walks over the {table.name!r} table"
        + (f" (variant {table.variant!r})." if table.variant else "."),
        "__module__": __name__,
    }
    # Pairs the table maps or ignores: computed once, since preconditions run every step.
    allowed = frozenset(
        (s, i) for s in table.states for i in table.inputs if table.disposition(s, i) != "forbidden"
    )

    for input in table.inputs:
        name = namer.claim(label(input))
        body[name] = _input_rule(name, input, strategies[input], allowed)

    refusable = [i for i in table.inputs if any((s, i) not in allowed for s in table.states)]
    if refusable:
        name = namer.claim("refused")
        body[name] = _refused_rule(name, refusable, allowed)

    for inv_name, check in table.invariants.items():
        name = namer.claim(inv_name)
        body[name] = _invariant(name, inv_name, check)

    name = namer.claim("control_state_is_declared")
    body[name] = _invariant(
        name,
        "control_state_is_declared",
        lambda value: isinstance(value.state, table.states),
    )

    if initial_data is not None:
        name = namer.claim("start")
        body[name] = _start_rule(name, initial_data)

    class_name = _camel(table.name) + "Machine"
    machine = type(class_name, (TableMachine,), body)
    machine.__qualname__ = class_name
    return machine


def arg_strategies(
    table: Table[Any, Any], args: Mapping[Enum, st.SearchStrategy[Any]] | None = None
) -> dict[Enum, st.SearchStrategy[Any]]:
    """The argument strategy of every input: `args`, else its `arg_examples`, else `st.none()`.

    A key of `args` that is not an input of the table is refused with `ValueError`, so a
    typo cannot go unnoticed.

    >>> from quiesce.protocol.machines import ADMISSION_GATE, GateInput
    >>> arg_strategies(ADMISSION_GATE)[GateInput.HOLD]  # doctest: +SKIP
    sampled_from(('checkpoint', 'train_switch', 'weight_sync'))
    """
    return {i: st.none() if s is None else s for i, s in _given_strategies(table, args).items()}


def arg_examples(table: Table[Any, Any]) -> dict[Enum, tuple[Any, ...]]:
    """The example arguments the table's inputs module declares, by input.

    The one place looked at is `ARG_EXAMPLES` of the module that defines `table.inputs`
    (so a derived table, such as a mutant, has the examples of its original), in one shape:
    a mapping from input member to a non-empty tuple of example arguments, e.g.
    `{GateInput.HOLD: ("checkpoint", "weight_sync"), ...}`. Inputs that take no argument
    are left out (they are stepped with `None`); keys of another enum are skipped, so a
    module declaring several tables keeps their examples in one mapping. Any other shape
    is refused with `TypeError`, naming the module.
    """
    module = table.inputs.__module__
    declared = getattr(sys.modules.get(module), ARG_EXAMPLES_HOOK, None)
    if declared is None:
        return {}
    bad = (
        [declared]
        if not isinstance(declared, Mapping)
        else [
            (key, examples)
            for key, examples in declared.items()
            if not isinstance(key, Enum) or not isinstance(examples, tuple) or not examples
        ]
    )
    if bad:
        raise TypeError(
            f"{module}.{ARG_EXAMPLES_HOOK} must map input members to non-empty tuples of "
            f"example arguments, e.g. {{Input.HOLD: ('checkpoint',)}}; got {bad[0]!r}"
        )
    return {input: declared[input] for input in table.inputs if input in declared}


def _given_strategies(
    table: Table[Any, Any], args: Mapping[Enum, st.SearchStrategy[Any]] | None
) -> dict[Enum, st.SearchStrategy[Any] | None]:
    # None marks an input nobody gave an argument for: its rule then takes no argument.
    strays = [key for key in args or {} if not isinstance(key, table.inputs)]
    if strays:
        raise ValueError(
            f"args for table {table.name!r} has keys {strays!r} that are not members of "
            f"{table.inputs.__name__}; use members of {[i.name for i in table.inputs]}"
        )
    examples = arg_examples(table)
    result: dict[Enum, st.SearchStrategy[Any] | None] = {}
    for input in table.inputs:
        if args and input in args:
            result[input] = args[input]
        elif input in examples:
            result[input] = st.sampled_from(examples[input])
        else:
            result[input] = None
    return result


# ---------------------------------------------------------------------- generated members
# Each factory returns a fresh function: hypothesis keys rules and invariants by function,
# and prints `__name__` in the failing program, so every member needs its own.


def _input_rule(
    name: str,
    input: Enum,
    strategy: st.SearchStrategy[Any] | None,
    allowed: frozenset[tuple[Enum, Enum]],
) -> Callable[..., None]:
    fire: Callable[..., None]
    if strategy is None:

        def fire(self: TableMachine) -> None:
            self._fire(input, None)

        decorate = rule()
    else:

        def fire(self: TableMachine, arg: Any) -> None:
            self._fire(input, arg)

        decorate = rule(arg=strategy)
    _name(fire, name, f"Step input {label(input)!r}.")
    return precondition(lambda self: (self.value.state, input) in allowed)(decorate(fire))


def _refused_rule(
    name: str, refusable: list[Enum], allowed: frozenset[tuple[Enum, Enum]]
) -> Callable[..., None]:
    inputs = tuple(refusable)

    def refuse(self: TableMachine, input: Enum) -> None:
        self._refuse(input)

    _name(refuse, name, "Step an input the current state forbids; it must be refused.")
    return precondition(lambda self: any((self.value.state, i) not in allowed for i in inputs))(
        rule(input=st.sampled_from(inputs))(refuse)
    )


def _start_rule(name: str, initial_data: st.SearchStrategy[Any]) -> Callable[..., None]:
    def start(self: TableMachine, data: Any) -> None:
        self.value = self.table.start(data)

    _name(start, name, "Start the table with drawn initial data.")
    return initialize(data=initial_data)(start)


def _invariant(
    name: str, invariant_name: str, check: Callable[[Value[Any, Any]], bool]
) -> Callable[[TableMachine], None]:
    def holds(self: TableMachine) -> None:
        if not check(self.value):
            raise AssertionError(
                f"{self.table.name}: invariant {invariant_name!r} violated by {self.value!r}"
            )

    _name(holds, name, f"The table's invariant {invariant_name!r}.")
    return invariant()(holds)


# ---------------------------------------------------------------------- helpers


def _expect_unchanged(table: Table[Any, Any], before: Any, snapshot: Any, input: Enum) -> None:
    # Values are frozen, but data may hold a mutable object a guard could have touched.
    if before != snapshot:
        raise AssertionError(
            f"{table.name}: refusing {label(input)} changed the value: {snapshot!r} -> {before!r}"
        )


def _declared_outcome(
    table: Table[Any, Any], value: Value[Any, Any], input: Enum, arg: Any
) -> tuple[Enum, Any, int]:
    # The reference semantics, read from the declared rows rather than the compiled index:
    # the first row whose guard holds fires; an ignored pair changes nothing.
    for row in table.rows_for(value.state, input):
        if row.guard is None or table.guards[row.guard](value, arg):
            data = value.data if row.update is None else table.updates[row.update](value.data, arg)
            return (row.target or value.state), data, len(row.effects)
    return value.state, value.data, 0


def _hint_at_arguments(err: Exception, table: Table[Any, Any], input: Enum) -> None:
    err.add_note(
        f"while stepping {label(input)!r} of table {table.name!r}: if this input needs an "
        f"argument, give examples in {table.inputs.__module__}.{ARG_EXAMPLES_HOOK} "
        f"({{{type(input).__name__}.{input.name}: (example, ...)}}) or pass args= to "
        "table_state_machine"
    )


def _name(fn: Callable[..., Any], name: str, doc: str) -> None:
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = doc


def _camel(name: str) -> str:
    return (
        "".join(part.capitalize() for part in re.split(r"[^0-9A-Za-z]+", name) if part) or "Table"
    )


class _Namer:
    """Hands out distinct Python identifiers, avoiding the machine's own attributes."""

    def __init__(self) -> None:
        self.taken: set[str] = set(dir(TableMachine)) | {"value", "table"}

    def claim(self, wanted: str) -> str:
        base = re.sub(r"\W", "_", wanted) or "_"
        if base[0].isdigit() or keyword.iskeyword(base):
            base = "_" + base
        name, n = base, 1
        while name in self.taken:
            n += 1
            name = f"{base}_{n}"
        self.taken.add(name)
        return name
