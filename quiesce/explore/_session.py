"""The data behind the explorer's page: a model, the path shown, every state met, numbered.

`Session.document()` is the JSON the page is built from (embedded in the HTML in both
modes); `Session.step(state, action)` is the one question the served page asks, to step
by hand. Everything the page shows is computed here, so it is tested in Python:

    document = {
      "title", "model", "params", "mutant", "origin", "served",
      "properties": [{"name", "doc"}],          # the always properties, then no_stall
      "violation": {"property", "kind", "step", "loop_from"} | null,
      "diagrams": {table: svg},                # one per table, shared by its instances
      "rows": {table: [row text]},             # `table.rows` in order, for the coverage
      "instances": [{"name", "table", "shown"}],  # the model's table instances; "shown" is
                                               # the name the page uses (`shown_name`)
      "frames": [frame, ...],                  # the path: frames[0] is the initial state
    }
    frame = {
      "id",                                    # the state's number, to step from it
      "action", "fault", "via",                # the step into it: label, fault, and its
                                               # index in the previous frame's "actions"
      "state", "changes": [{"field", "before", "after"}],
      "controls": {instance: control state | null},
      "fired": {instance: [row index]},        # the rows the step into it fired
      "holds": {property: bool}, "stall": "goal" | "deadlock" | "moving" | null,
      "actions": [{"label", "fault"}],         # every enabled action, in model order
    }

Without a server (`--html`) the page can only follow the path: actions off it need a
`next_state` the file does not carry, so only the states of the path are precomputed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Generic, TypeVar

from quiesce.check import NO_STALL, Action, Model, Trace, Violation
from quiesce.explore._layout import table_svg
from quiesce.explore._tables import controls, fired, shown_name, table_instances
from quiesce.explore._traces import described
from quiesce.fsm import QuiesceError, Row, label

__all__ = ["BadStep", "Session", "changes"]

St = TypeVar("St")

_NO_STALL_DOC = "every fault-free path reaches a goal state (PROTOCOL.md I7)"


class BadStep(QuiesceError):
    """A step asked of the session names a state or an action it does not know."""

    def __init__(self, what: str, value: int, count: int) -> None:
        self.what = what
        self.value = value
        super().__init__(f"no {what} {value}: there are {count} (numbered from 0)")


class Session(Generic[St]):
    """One exploration of `model`, starting on `path`: a violation (its trace, the
    property highlighted at its last step), a bare trace, or `None` (the initial state).

    `mutant` and `origin` only label the page (what was explored, where the path is from).
    """

    def __init__(
        self,
        model: Model[St],
        path: Trace[St] | Violation[St] | None = None,
        *,
        mutant: str | None = None,
        origin: str = "",
    ) -> None:
        self.model = model
        self.violation = path if isinstance(path, Violation) else None
        trace = path.trace if isinstance(path, Violation) else path
        self.trace = trace if trace is not None else Trace(next(iter(model.init_states())))
        self.mutant = mutant
        self.origin = origin
        self.instances = table_instances(model)
        self._properties = tuple(model.properties())
        self._states: list[St] = []
        self._numbers: dict[St, int] = {}
        self._controls: dict[int, dict[str, str | None]] = {}  # by state number

    def document(self, *, served: bool) -> dict[str, Any]:
        """The page's data (module doc), the frames of the path included."""
        tables = {i.table.name: i.table for i in self.instances}
        properties = [{"name": p.name, "doc": p.doc} for p in self._properties]
        if self.model.liveness:
            properties.append({"name": NO_STALL, "doc": _NO_STALL_DOC})
        violation = None
        if self.violation is not None:
            violation = {
                "property": self.violation.property,
                "kind": self.violation.kind,
                "step": len(self.trace),
                "loop_from": self.trace.loop_from,
            }
        name = self.model.name
        # A mutated protocol model already names its mutant: `protocol[S17_...]`.
        named = self.mutant is None or self.mutant in name
        return {
            "title": name if named else f"{name} [{self.mutant}]",
            "model": name,
            "params": dict(self.model.params),
            "mutant": self.mutant,
            "origin": self.origin,
            "served": served,
            "properties": properties,
            "violation": violation,
            "diagrams": {table_name: table_svg(table) for table_name, table in tables.items()},
            "rows": {
                table_name: [_row_text(row) for row in table.rows]
                for table_name, table in tables.items()
            },
            "instances": [
                {"name": i.name, "table": i.table.name, "shown": shown_name(self.model, i.name)}
                for i in self.instances
            ],
            "frames": self._path_frames(),
        }

    def step(self, state: int, action: int) -> dict[str, Any]:
        """The frame after taking the `action`-th enabled action of state number `state`."""
        if not 0 <= state < len(self._states):
            raise BadStep("state", state, len(self._states))
        before = self._states[state]
        moves = list(self.model.successors(before))
        if not 0 <= action < len(moves):
            raise BadStep(f"action of state {state}", action, len(moves))
        chosen, after = moves[action]
        return self._frame(after, (before, chosen), via=action)

    def _path_frames(self) -> list[dict[str, Any]]:
        frames = [self._frame(self.trace.initial, None, via=None)]
        for before, action, after in self.trace.transitions():
            moves = list(self.model.successors(before))
            via = next(i for i, move in enumerate(moves) if move == (action, after))
            frames.append(self._frame(after, (before, action), via=via))
        return frames

    def _frame(
        self, state: St, step: tuple[St, Action] | None, *, via: int | None
    ) -> dict[str, Any]:
        model = self.model
        number = self._number(state)
        shown = described(model, state)
        moves = list(model.successors(state))
        if step is None:
            action, moved, diff = None, {}, []
            now = controls(model, state, self.instances)
        else:
            before, action = step
            moved = fired(model, before, action, state, self.instances)
            now = controls(model, state, self.instances, (self._controls_of(before), moved))
            diff = changes(described(model, before), shown)
        return {
            "id": number,
            "action": None if action is None else action.label,
            "fault": action is not None and action.fault,
            "via": via,
            "state": shown,
            "changes": diff,
            # A state's control states are the same whichever path reached it: keep the first.
            "controls": self._controls.setdefault(number, now),
            "fired": {name: list(one.rows) for name, one in moved.items()},
            "holds": {p.name: bool(p.holds(state)) for p in self._properties},
            "stall": _stall(model, state, moves),
            "actions": [{"label": a.label, "fault": a.fault} for a, _ in moves],
        }

    def _number(self, state: St) -> int:
        number = self._numbers.get(state)
        if number is None:
            number = self._numbers[state] = len(self._states)
            self._states.append(state)
        return number

    def _controls_of(self, state: St) -> dict[str, str | None]:
        return self._controls[self._numbers[state]]


def changes(before: Any, after: Any) -> list[dict[str, Any]]:
    """The fields that differ between two described states, by dotted path; lists are
    compared whole (a queue that shifts is one change, not one per element)."""
    old, new = _flatten(before), _flatten(after)
    return [
        {"field": field, "before": old.get(field), "after": new.get(field)}
        for field in dict.fromkeys([*old, *new])
        if old.get(field) != new.get(field)
    ]


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, Mapping) and value:
        out: dict[str, Any] = {}
        for key, inner in value.items():
            out.update(_flatten(inner, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix or "(state)": value}


def _stall(model: Model[Any], state: Any, moves: list[tuple[Action, Any]]) -> str | None:
    """Where `state` stands for no_stall: a goal, a deadlock (no fault-free move out of a
    non-goal state), or moving on; `None` when the model checks no liveness."""
    if not model.liveness:
        return None
    if model.is_goal(state):
        return "goal"
    # Where self-loops are stuttering (TLA+), only a move to another state counts.
    moving = any(
        not action.fault and (model.stutter_stalls or following != state)
        for action, following in moves
    )
    return "moving" if moving else "deadlock"


def _row_text(row: Row) -> str:
    sources = [label(s) for s in row.sources]
    where = ", ".join(sources) if len(sources) <= 3 else f"any of {len(sources)} states"
    target = "(stays)" if row.target is None else label(row.target)
    return f"{where} --{row.label()}--> {target}"
