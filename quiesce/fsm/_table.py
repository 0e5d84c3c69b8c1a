"""Transition tables as data: declared once, checked at definition, compiled to a pure step.

Rules of this module:
- a table is *data*: rows name their guard, update and effects; the Python callables are
  bound separately, so a table can be printed, diffed, mutated and drawn;
- a table is *checked when built*: every problem is collected into one `DefinitionError`;
- the compiled step is *pure*: `(value, input, arg) -> (next_value, effects)`, no I/O, no
  clock, no awaits. It does not know which process runs it.

Vocabulary: a machine's full state is a `Value` (its control state, an `Enum` member, plus
its data, any frozen value). A `Row` maps `source(s) + input [+ guard]` to a `target`
(`None`: the row holds the state) with an optional data `update` and named `effects`.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any, Generic, Literal, TypeAlias, TypeVar

from quiesce.fsm._errors import DefinitionError, GuardRejected, TransitionNotAllowed

__all__ = [
    "Effect",
    "EffectFn",
    "GuardFn",
    "Invariant",
    "Row",
    "Table",
    "UpdateFn",
    "Value",
    "each",
    "label",
    "on",
]

S = TypeVar("S", bound=Enum)
I = TypeVar("I", bound=Enum)  # noqa: E741  (I for "input", as in h2's StreamInputs)
D = TypeVar("D")


@dataclass(frozen=True, slots=True)
class Value(Generic[S, D]):
    """A machine's full state: the control `state` and its `data` (both immutable)."""

    state: S
    data: D = None  # type: ignore[assignment]


@dataclass(frozen=True, slots=True)
class Effect:
    """The default value of an effect whose name has no bound callable."""

    machine: str
    name: str
    arg: Any = None


GuardFn: TypeAlias = Callable[[Value[Any, Any], Any], bool]
"""`guard(value, arg) -> bool`: may the row fire for this value and input argument?"""
UpdateFn: TypeAlias = Callable[[Any, Any], Any]
"""`update(data, arg) -> new data`: must return a new value, never mutate."""
EffectFn: TypeAlias = Callable[[Value[Any, Any], Any], Any]
"""`effect(next_value, arg) -> effect value`: describes work; never performs it."""
Invariant: TypeAlias = Callable[[Value[Any, Any]], bool]
"""`invariant(value) -> bool`: must hold in every reachable value."""


@dataclass(frozen=True, slots=True)
class Row:
    """One declared transition: `sources + input [+ guard] -> target [+ update] / effects`.

    `target=None` means the row holds its source state (an internal transition).
    """

    sources: tuple[Enum, ...]
    input: Enum
    target: Enum | None
    guard: str | None = None
    update: str | None = None
    effects: tuple[str, ...] = ()

    def label(self) -> str:
        """The edge label used by diagrams: `INPUT [guard] / effect, effect`."""
        text = label(self.input)
        if self.guard:
            text += f" [{self.guard}]"
        if self.effects:
            text += " / " + ", ".join(self.effects)
        return text


def on(
    sources: Enum | Iterable[Enum],
    input: Enum,
    target: Enum | None,
    *,
    guard: str | None = None,
    update: str | None = None,
    effects: str | Sequence[str] = (),
) -> Row:
    """Build a `Row`; `sources` may be one state or several, `target=None` holds.

    >>> on(S.RUNNING, I.RETIRE, S.TOMBSTONED, effects="drop_late_finish")  # doctest: +SKIP
    """
    source_tuple = (sources,) if isinstance(sources, Enum) else tuple(sources)
    effect_tuple = (effects,) if isinstance(effects, str) else tuple(effects)
    return Row(source_tuple, input, target, guard, update, effect_tuple)


def each(states: Enum | Iterable[Enum], inputs: Enum | Iterable[Enum]) -> list[tuple[Enum, Enum]]:
    """Every `(state, input)` pair of the product, for `ignored=` and `forbidden=`."""
    state_list = [states] if isinstance(states, Enum) else list(states)
    input_list = [inputs] if isinstance(inputs, Enum) else list(inputs)
    return list(itertools.product(state_list, input_list))


# A compiled row: (guard or None, target or None, update or None, effect callables).
_Compiled: TypeAlias = tuple[
    GuardFn | None, Enum | None, UpdateFn | None, tuple[Callable[[Any, Any], Any], ...]
]


# A compiled pair: its state and input members (checked by identity) and its rows.
_Entry: TypeAlias = tuple[Enum, Enum, tuple[_Compiled, ...]]


@dataclass(frozen=True)
class _Bindings:
    guards: Mapping[str, GuardFn] = field(default_factory=dict)
    updates: Mapping[str, UpdateFn] = field(default_factory=dict)
    effects: Mapping[str, EffectFn] = field(default_factory=dict)
    invariants: Mapping[str, Invariant] = field(default_factory=dict)


class Table(Generic[S, I]):
    """A machine declared as a transition table and compiled to a pure step.

    Declared order is priority: for one `(state, input)` the first row whose guard holds
    fires. Every `(state, input)` pair must be mapped by a row or declared `ignored`
    (accepted, nothing changes) or `forbidden` (refused with `TransitionNotAllowed`);
    `unmapped="forbidden"` declares that every pair no row maps is refused (h2's "anything
    not in this map is invalid").

    >>> table.step(table.start(), Inputs.BEGIN)  # doctest: +SKIP
    (Value(state=<States.RUNNING: ...>, data=...), ())
    """

    def __init__(
        self,
        name: str,
        *,
        states: type[S],
        inputs: type[I],
        initial: S,
        rows: Sequence[Row],
        finals: Iterable[S] = (),
        ignored: Iterable[tuple[Enum, Enum]] = (),
        forbidden: Iterable[tuple[Enum, Enum]] = (),
        unmapped: Literal["error", "forbidden"] = "error",
        initial_data: Any = None,
        guards: Mapping[str, GuardFn] | None = None,
        updates: Mapping[str, UpdateFn] | None = None,
        effects: Mapping[str, EffectFn] | None = None,
        invariants: Mapping[str, Invariant] | None = None,
        doc: str = "",
        variant: str | None = None,
        strict: bool = True,
    ) -> None:
        self.name = name
        self.states = states
        self.inputs = inputs
        self.initial = initial
        self.rows: tuple[Row, ...] = tuple(rows)
        self.finals: frozenset[Enum] = frozenset(finals)
        self.ignored: frozenset[tuple[Enum, Enum]] = frozenset(ignored)
        self.forbidden: frozenset[tuple[Enum, Enum]] = frozenset(forbidden)
        self.unmapped = unmapped
        self.initial_data = initial_data
        self.doc = doc
        self.variant = variant
        self._bindings = _Bindings(
            dict(guards or {}), dict(updates or {}), dict(effects or {}), dict(invariants or {})
        )
        fatal, structural = self._check()
        self.problems: tuple[tuple[str, str], ...] = tuple(fatal + structural)
        if fatal or (strict and structural):
            raise DefinitionError(name, self.problems)
        self._index = self._compile()

    # ------------------------------------------------------------------ public face

    @property
    def guards(self) -> Mapping[str, GuardFn]:
        """Guard callables by name."""
        return self._bindings.guards

    @property
    def updates(self) -> Mapping[str, UpdateFn]:
        """Update callables by name."""
        return self._bindings.updates

    @property
    def effect_fns(self) -> Mapping[str, EffectFn]:
        """Effect callables by name (unbound effect names emit an `Effect`)."""
        return self._bindings.effects

    @property
    def invariants(self) -> Mapping[str, Invariant]:
        """Named invariants that must hold in every reachable value."""
        return self._bindings.invariants

    def start(self, data: Any = None) -> Value[S, Any]:
        """The initial value, with `data` or the table's `initial_data`."""
        return Value(self.initial, self.initial_data if data is None else data)

    def step(
        self, value: Value[S, Any], input: I, arg: Any = None
    ) -> tuple[Value[S, Any], tuple[Any, ...]]:
        """Fire `input` (with its argument) on `value`: `(next_value, effects)`.

        Raises `TransitionNotAllowed` for a forbidden pair and `GuardRejected` when rows
        exist but no guard holds; in both cases nothing changed (values are immutable).
        """
        state = value.state
        try:
            entry = self._index.get((state._name_, input._name_))
        except AttributeError:  # not an Enum member at all
            entry = None
        # Keys are member names (`Enum.__hash__` is a Python-level call, too slow for the
        # hot path); the identity check refuses a same-named member of another enum.
        if entry is None or entry[0] is not state or entry[1] is not input:
            raise TransitionNotAllowed(self.name, state, input)
        rows = entry[2]
        if not rows:  # declared ignored
            return value, ()
        for guard, target, update, effect_fns in rows:
            if guard is None or guard(value, arg):
                # Built through the slot descriptors: the frozen dataclass `__init__` costs
                # twice as much, and this is a third of the step.
                next_value: Value[S, Any] = _new(Value)
                _set_state(next_value, state if target is None else target)
                _set_data(next_value, value.data if update is None else update(value.data, arg))
                if not effect_fns:
                    return next_value, ()
                return next_value, tuple(fn(next_value, arg) for fn in effect_fns)
        raise GuardRejected(
            self.name,
            state,
            input,
            [r.guard or "" for r in self.rows_for(state, input)],
        )

    @property
    def effect_names(self) -> tuple[str, ...]:
        """Every effect name a row emits, once each, in row order."""
        return tuple(dict.fromkeys(name for row in self.rows for name in row.effects))

    def rows_for(self, state: Enum, input: Enum) -> tuple[Row, ...]:
        """The declared rows for one pair, in priority order."""
        return tuple(r for r in self.rows if input is r.input and state in r.sources)

    def disposition(self, state: Enum, input: Enum) -> Literal["mapped", "ignored", "forbidden"]:
        """What the table says about one pair."""
        if self.rows_for(state, input):
            return "mapped"
        return "ignored" if (state, input) in self.ignored else "forbidden"

    def enabled(self, value: Value[S, Any], input: I, arg: Any = None) -> bool:
        """Would `step(value, input, arg)` succeed (including ignored pairs)?"""
        entry = self._entry(value.state, input)
        if entry is None:
            return False
        rows = entry[2]
        return not rows or any(g is None or g(value, arg) for g, _, _, _ in rows)

    def check_invariants(self, value: Value[S, Any]) -> list[str]:
        """Names of the table's invariants that `value` violates."""
        return [name for name, inv in self.invariants.items() if not inv(value)]

    def derive(
        self,
        variant: str,
        *,
        rows: Sequence[Row] | None = None,
        guards: Mapping[str, GuardFn] | None = None,
        updates: Mapping[str, UpdateFn] | None = None,
        effects: Mapping[str, EffectFn] | None = None,
    ) -> Table[S, I]:
        """A variant of this table (the original is untouched), named by `variant`.

        Derived tables are compiled without the completeness checks: a mutant may leave a
        state unreachable. A pair left without rows is refused, as if forbidden.
        """
        return Table(
            self.name,
            states=self.states,
            inputs=self.inputs,
            initial=self.initial,
            rows=self.rows if rows is None else rows,
            finals=self.finals,  # type: ignore[arg-type]
            ignored=self.ignored,
            forbidden=self.forbidden,
            unmapped="forbidden",
            initial_data=self.initial_data,
            guards={**self.guards, **(guards or {})},
            updates={**self.updates, **(updates or {})},
            effects={**self.effect_fns, **(effects or {})},
            invariants=self.invariants,
            doc=self.doc,
            variant=variant if self.variant is None else f"{self.variant}+{variant}",
            strict=False,
        )

    def without_row(self, index: int) -> Table[S, I]:
        """Drop row `index`: its pairs fall to the next row, or are refused."""
        self._row(index)
        return self.derive(f"drop_row[{index}]", rows=self.rows[:index] + self.rows[index + 1 :])

    def with_row(self, index: int, row: Row, variant: str) -> Table[S, I]:
        """Put `row` in the place of row `index` (a bug written as the row it puts there),
        the variant named `variant`."""
        self._row(index)
        return self.derive(variant, rows=(*self.rows[:index], row, *self.rows[index + 1 :]))

    def retarget(self, index: int, target: Enum | None) -> Table[S, I]:
        """Send row `index` to another `target` (`None`: hold the state)."""
        return self._replace_row(index, f"retarget[{index}]->{_name(target)}", target=target)

    def without_guard(self, index: int) -> Table[S, I]:
        """Drop the guard of row `index`, so it fires whenever its pair arrives."""
        return self._replace_row(index, f"drop_guard[{index}]", guard=None)

    def without_effect(self, index: int, effect: str) -> Table[S, I]:
        """Drop one named effect from row `index`."""
        row = self._row(index)
        if effect not in row.effects:
            raise ValueError(
                f"row {index} of {self.name!r} has no effect {effect!r}: {row.effects}"
            )
        kept = tuple(e for e in row.effects if e != effect)
        return self._replace_row(index, f"drop_effect[{index}]:{effect}", effects=kept)

    def describe(self) -> dict[str, Any]:
        """This table as one JSON-ready document (one entry per source of every row)."""
        return {
            "name": self.name,
            "doc": self.doc,
            "variant": self.variant,
            "states": [label(s) for s in self.states],
            "inputs": [label(i) for i in self.inputs],
            "initial": label(self.initial),
            "finals": sorted(label(s) for s in self.finals),
            "rows": [
                {
                    "index": index,
                    "source": label(source),
                    "input": label(row.input),
                    "guard": row.guard,
                    "target": label(row.target or source),
                    "holds": row.target is None,
                    "update": row.update,
                    "effects": list(row.effects),
                }
                for index, row in enumerate(self.rows)
                for source in row.sources
            ],
            "ignored": sorted(f"{label(s)}/{label(i)}" for s, i in self.ignored),
            "forbidden": sorted(f"{label(s)}/{label(i)}" for s, i in self.forbidden),
            "unmapped": self.unmapped,
            "invariants": sorted(self.invariants),
        }

    def __repr__(self) -> str:
        suffix = f" variant={self.variant!r}" if self.variant else ""
        return f"<Table {self.name!r}: {len(self.states)} states, {len(self.rows)} rows{suffix}>"

    # ------------------------------------------------------------------ internals

    def _row(self, index: int) -> Row:
        if not 0 <= index < len(self.rows):
            raise IndexError(f"{self.name!r} has rows 0..{len(self.rows) - 1}, not {index}")
        return self.rows[index]

    def _replace_row(self, index: int, variant: str, **changes: Any) -> Table[S, I]:
        return self.with_row(index, replace(self._row(index), **changes), variant)

    def _check(self) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
        """Collect problems: (fatal ones that prevent compiling, structural ones)."""
        fatal: list[tuple[str, str]] = []
        structural: list[tuple[str, str]] = []
        states, inputs = self.states, self.inputs

        def state_ok(s: object, where: str) -> bool:
            if isinstance(s, states):
                return True
            fatal.append(("unknown_state", f"{where}: {s!r} is not a member of {states.__name__}"))
            return False

        def input_ok(i: object, where: str) -> bool:
            if isinstance(i, inputs):
                return True
            fatal.append(("unknown_input", f"{where}: {i!r} is not a member of {inputs.__name__}"))
            return False

        state_ok(self.initial, "initial")
        for s in self.finals:
            state_ok(s, "finals")
        for index, row in enumerate(self.rows):
            where = f"row {index} ({row.label()})"
            for s in row.sources:
                state_ok(s, f"{where} source")
            if row.target is not None:
                state_ok(row.target, f"{where} target")
            input_ok(row.input, where)
            for kind, name, bound in (
                ("guard", row.guard, self._bindings.guards),
                ("update", row.update, self._bindings.updates),
            ):
                if name is not None and name not in bound:
                    fatal.append(("unknown_name", f"{where}: {kind} {name!r} is not bound"))
        for declared, pairs in (("ignored", self.ignored), ("forbidden", self.forbidden)):
            for s, i in pairs:
                state_ok(s, declared)
                input_ok(i, declared)
        if fatal:
            return fatal, structural

        mapped: dict[tuple[Enum, Enum], list[int]] = {}
        for index, row in enumerate(self.rows):
            for s in row.sources:
                mapped.setdefault((s, row.input), []).append(index)

        # Reachability over row targets, ignoring guards (a guard may be true some day).
        reached: set[Enum] = {self.initial}
        frontier: list[Enum] = [self.initial]
        while frontier:
            current = frontier.pop()
            for row in self.rows:
                if current in row.sources and row.target is not None and row.target not in reached:
                    reached.add(row.target)
                    frontier.append(row.target)
        for s in states:
            if s not in reached:
                structural.append(
                    (
                        "unreachable_state",
                        f"{label(s)} cannot be reached from {label(self.initial)}",
                    )
                )
            elif s not in self.finals and not any(
                s in r.sources and r.target is not None and r.target is not s for r in self.rows
            ):
                structural.append(("dead_end", f"{label(s)} is not final and has no way out"))

        for i in inputs:
            if not any(r.input is i for r in self.rows):
                structural.append(("unhandled_input", f"no state handles {label(i)}"))

        for (s, i), indexes in mapped.items():
            for earlier, later in itertools.pairwise(indexes):
                if self.rows[earlier].guard is None:
                    structural.append(
                        (
                            "shadowed_row",
                            f"row {later} ({label(s)} + {label(i)}) never fires: unguarded row "
                            f"{earlier} comes first",
                        )
                    )
            if (s, i) in self.ignored or (s, i) in self.forbidden:
                structural.append(
                    (
                        "conflicting_pair",
                        f"{label(s)} + {label(i)} is mapped and also declared ignored/forbidden",
                    )
                )
        both = self.ignored & self.forbidden
        for s, i in sorted(both, key=_pair_key):
            structural.append(
                ("conflicting_pair", f"{label(s)} + {label(i)} is both ignored and forbidden")
            )

        if self.unmapped == "error":
            for s, i in itertools.product(states, inputs):
                if (
                    (s, i) not in mapped
                    and (s, i) not in self.ignored
                    and (s, i) not in self.forbidden
                ):
                    structural.append(
                        (
                            "unmapped_pair",
                            f"{label(s)} + {label(i)} is neither mapped nor ignored nor forbidden",
                        )
                    )
        return fatal, structural

    def _compile(self) -> dict[tuple[str, str], _Entry]:
        """Index `(state name, input name) -> (state, input, compiled rows)`.

        Ignored pairs map to no rows; forbidden and unmapped pairs are absent.
        """
        index: dict[tuple[Enum, Enum], list[_Compiled]] = {}
        for row in self.rows:
            compiled: _Compiled = (
                None if row.guard is None else self._bindings.guards[row.guard],
                row.target,
                None if row.update is None else self._bindings.updates[row.update],
                tuple(self._effect_fn(name) for name in row.effects),
            )
            for s in row.sources:
                index.setdefault((s, row.input), []).append(compiled)
        for pair in self.ignored:
            index.setdefault(pair, [])
        return {(s.name, i.name): (s, i, tuple(rows)) for (s, i), rows in index.items()}

    def _entry(self, state: Enum, input: Enum) -> _Entry | None:
        """The compiled entry of one pair, or `None` when the pair is refused."""
        try:
            entry = self._index.get((state._name_, input._name_))
        except AttributeError:
            return None
        if entry is None or entry[0] is not state or entry[1] is not input:
            return None
        return entry

    def _effect_fn(self, name: str) -> Callable[[Any, Any], Any]:
        bound = self._bindings.effects.get(name)
        if bound is not None:
            return bound
        machine = self.name
        return lambda _value, arg: Effect(machine, name, arg)


# The step builds `Value`s without the frozen dataclass `__init__` (see `Table.step`).
_new = object.__new__
_set_state = vars(Value)["state"].__set__
_set_data = vars(Value)["data"].__set__


def label(member: Enum) -> str:
    """The display name of a state or input: its string value (the spec's name)."""
    return member.value if isinstance(member.value, str) else member.name.lower()


def _name(state: Enum | None) -> str:
    return "HOLD" if state is None else label(state)


def _pair_key(pair: tuple[Enum, Enum]) -> tuple[str, str]:
    return label(pair[0]), label(pair[1])
