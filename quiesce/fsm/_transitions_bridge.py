"""Export a `Table` to a `transitions` machine: the oracle of the differential test.

What lives here: the translation of a table into the keyword arguments of
`transitions.Machine`, and a model object that binds the table's named callables as the
methods that config names. What it does not do: run anything in production. Execution
uses the compiled `Table.step` (pure, no per-object machine, and over an order of
magnitude faster: `benchmarks/bench_engine.py`); a `transitions.Machine` exists only to
check the compiled step against an independent implementation and to reuse `transitions`
tooling on the same declaration.

The mapping, row by row:
- a row becomes a transition `{trigger: input, source: state, dest: target}`, its guard a
  `conditions` entry naming the model method `guard_<name>`, its update a `before`
  callback `update_<name>` and its effects `after` callbacks `effect_<name>` (so a guard
  runs first, then the update, then the state changes, then effects see the new value:
  the order of the compiled step);
- a row that holds its state becomes an internal transition (`dest=None`);
- an ignored pair becomes an internal transition with no conditions (accepted, no change);
- a forbidden or unmapped pair has no transition, so `transitions` raises `MachineError`
  (`ignore_invalid_triggers=False`) where the compiled step raises `TransitionNotAllowed`.
Declared order is kept: `transitions` tries a trigger's transitions in the order added,
and the first whose conditions hold fires, as in the table.
"""

from __future__ import annotations

from typing import Any, Literal

from quiesce.fsm._errors import QuiesceError
from quiesce.fsm._table import Effect, Table, Value, label

__all__ = ["TransitionsExportError", "TransitionsModel", "method_name", "transitions_config"]


class TransitionsExportError(QuiesceError):
    """A table cannot be exported: a callback's method name collides with the model's names.

    `names` lists the colliding method names (`guard_<name>`, `update_<name>`,
    `effect_<name>`); rename the guard, update or effect (or the input) in the table.
    """

    def __init__(self, table: str, names: list[str]) -> None:
        self.table = table
        self.names = names
        super().__init__(
            f"table {table!r} cannot be exported to transitions: the methods {names} collide "
            "with a trigger or an attribute of the model; rename them in the table"
        )


def method_name(kind: Literal["guard", "update", "effect"], name: str) -> str:
    """The model method that stands for a table's guard, update or effect `name`.

    Prefixed by kind, because a table keeps the three in separate namespaces (an update
    and an effect may share a name, as `owe_ack` does in the recovery ledger).
    """
    return f"{kind}_{name}"


def transitions_config(table: Table[Any, Any]) -> dict[str, Any]:
    """The keyword arguments of `transitions.Machine` for `table` (JSON-ready data).

    States and triggers are the spec's names (`quiesce.fsm.label`); the callbacks name
    methods of the model (see `TransitionsModel`).

    >>> from transitions import Machine  # doctest: +SKIP
    >>> model = TransitionsModel(table)  # doctest: +SKIP
    >>> Machine(model=model, **transitions_config(table))  # doctest: +SKIP
    """
    transitions: list[dict[str, Any]] = []
    for row in table.rows:
        for source in row.sources:
            entry: dict[str, Any] = {
                "trigger": label(row.input),
                "source": label(source),
                "dest": None if row.target is None else label(row.target),
            }
            if row.guard is not None:
                entry["conditions"] = [method_name("guard", row.guard)]
            if row.update is not None:
                entry["before"] = [method_name("update", row.update)]
            if row.effects:
                entry["after"] = [method_name("effect", name) for name in row.effects]
            transitions.append(entry)
    # Sorted so the exported config is stable whatever order the set iterates in.
    for state, input in sorted(table.ignored, key=lambda p: (label(p[0]), label(p[1]))):
        transitions.append({"trigger": label(input), "source": label(state), "dest": None})
    return {
        "name": table.name,
        "states": [label(s) for s in table.states],
        "initial": label(table.initial),
        "transitions": transitions,
        "auto_transitions": False,
        "ignore_invalid_triggers": False,
    }


class TransitionsModel:
    """The model object for `transitions_config(table)`: binds the table's callables.

    It keeps the machine's data in `data` and the effects of the last `fire` in
    `effects`; `value` gives the `Value` the compiled step would hold. Every trigger is
    called with one positional argument, the input's argument, as in `Table.step`.

    >>> model = TransitionsModel.machine(ADMISSION_GATE)  # doctest: +SKIP
    >>> model.fire("hold", "checkpoint")  # doctest: +SKIP
    True
    >>> model.value.state  # doctest: +SKIP
    <GateState.CLOSED: 'closed'>
    """

    state: str

    def __init__(self, table: Table[Any, Any], data: Any = None) -> None:
        self.table = table
        self.data: Any = table.initial_data if data is None else data
        self.effects: list[Any] = []
        self._states = {label(s): s for s in table.states}
        methods = _methods(table)
        reserved = _reserved_names(table) | set(vars(self)) | set(dir(type(self)))
        clashes = sorted(set(methods) & reserved)
        if clashes:
            raise TransitionsExportError(table.name, clashes)
        for method, (kind, name) in sorted(methods.items()):
            setattr(self, method, self._bind(kind, name))

    @classmethod
    def machine(cls, table: Table[Any, Any], data: Any = None) -> TransitionsModel:
        """A model driven by a fresh `transitions.Machine` built from `table`'s config."""
        from transitions import Machine  # the oracle is optional at import time

        model = cls(table, data)
        Machine(model=model, **transitions_config(table))
        return model

    def fire(self, input: str, arg: Any = None) -> bool:
        """Trigger `input` (its spec name) with `arg`; `effects` then holds its effects.

        Returns what `transitions` returns: `True` when a transition fired, `False` when
        every condition was false; a pair with no transition raises `MachineError`.
        """
        self.effects = []
        return bool(self.trigger(input, arg))  # type: ignore[attr-defined]

    @property
    def value(self) -> Value[Any, Any]:
        """The model's state as the compiled step's `Value`."""
        return Value(self._states[self.state], self.data)

    def _bind(self, kind: str, name: str) -> Any:
        table = self.table
        if kind == "guard":
            guard = table.guards[name]
            return lambda arg=None: guard(self.value, arg)
        if kind == "update":
            update = table.updates[name]

            def run_update(arg: Any = None) -> None:
                self.data = update(self.data, arg)

            return run_update
        effect = table.effect_fns.get(name)

        def run_effect(arg: Any = None) -> None:
            value = self.value
            self.effects.append(
                Effect(table.name, name, arg) if effect is None else effect(value, arg)
            )

        return run_effect


def _methods(table: Table[Any, Any]) -> dict[str, tuple[str, str]]:
    """Every model method the config names: method name -> (kind, table name)."""
    methods: dict[str, tuple[str, str]] = {}
    for row in table.rows:
        if row.guard is not None:
            methods[method_name("guard", row.guard)] = ("guard", row.guard)
        if row.update is not None:
            methods[method_name("update", row.update)] = ("update", row.update)
        for effect in row.effects:
            methods[method_name("effect", effect)] = ("effect", effect)
    return methods


def _reserved_names(table: Table[Any, Any]) -> set[str]:
    # What `transitions.Machine` binds on the model: the trigger methods, `may_<trigger>`,
    # `is_<state>`, `trigger`, `state`, plus the model's own attributes.
    inputs = [label(i) for i in table.inputs]
    return (
        {"state", "trigger", "machine", "to_state", "get_triggers"}
        | set(inputs)
        | {f"may_{i}" for i in inputs}
        | {f"is_{label(s)}" for s in table.states}
    )
