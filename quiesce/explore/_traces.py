"""The trace file the explorer opens, replayed on a model.

The trace file is what `quiesce check ... --json` prints, so a counterexample found by any
check can be opened as it is (`quiesce check two-phase --mutant commit_without_message
--json > cex.json`, then `quiesce explore --trace cex.json`). Three shapes are accepted:

- the whole `check --json` document: its first violation is loaded, and its `model`,
  `params` and `mutant` say which model to build when the command line does not;
- one violation, `{"property", "kind", "trace", "loop_from"}` (`Violation.to_json`);
- a bare trace, `[{"step", "action", "fault", "state"}, ...]` (`Trace.to_json`).

A trace stores labels and described states, not model states, so it is *replayed*: from
the initial state whose description matches step 0, each step takes the enabled action
with the recorded label (and fault flag) whose next state is described as recorded.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from quiesce.check import Model, Step, Trace, Violation
from quiesce.fsm import QuiesceError

__all__ = ["TraceFile", "TraceFileError", "TraceMismatch", "described", "read_trace", "replay"]


class TraceFileError(QuiesceError):
    """The trace file cannot be read or has none of the accepted shapes."""

    def __init__(self, path: Path, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(
            f"trace file {str(path)!r} {reason}; expected the JSON of `quiesce check --json`, "
            "one of its violations, or a list of steps"
        )


class TraceMismatch(QuiesceError):
    """A recorded step cannot be replayed on the model: `step` (0 is the initial state)
    names it, `enabled` the labels the model offers there."""

    def __init__(self, step: int, action: str | None, reason: str, enabled: Sequence[str]):
        self.step = step
        self.action = action
        self.enabled = tuple(enabled)
        where = "the initial state" if action is None else f"step {step} ({action!r})"
        offered = ", ".join(repr(label) for label in self.enabled[:12]) or "(none)"
        more = ", ..." if len(self.enabled) > 12 else ""
        listed = "" if action is None else f"; enabled there: {offered}{more}"
        super().__init__(
            f"trace does not replay at {where}: {reason}{listed}. "
            "Is it from another model, size or mutant (pass MODEL, --set and --mutant)?"
        )


@dataclass(frozen=True)
class TraceFile:
    """A parsed trace file: its steps, the violation they show (if any), and the model
    that produced them (when the file says so: a `check --json` document)."""

    steps: tuple[Mapping[str, Any], ...]
    property: str | None = None
    kind: Literal["always", "deadlock", "cycle"] = "always"
    loop_from: int | None = None
    model: str | None = None
    params: Mapping[str, Any] | None = None
    mutant: str | None = None

    def replay(self, model: Model[Any]) -> Trace[Any] | Violation[Any]:
        """The recorded path on `model`: a `Violation` when the file names a property."""
        trace = replay(model, self.steps)
        if self.property is None:
            return trace
        lasso = Trace(trace.initial, trace.steps, self.loop_from)
        return Violation(self.property, self.kind, lasso)


_KINDS = ("always", "deadlock", "cycle")  # `Violation.kind`


def read_trace(path: Path) -> TraceFile:
    """Parse the trace file at `path` (see the module doc for the shapes)."""
    try:
        document: Any = json.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise TraceFileError(path, f"cannot be read ({error.strerror})") from error
    except UnicodeDecodeError as error:
        detail = f"byte {error.object[error.start]:#04x} at offset {error.start}"
        raise TraceFileError(path, f"is not UTF-8 text ({detail})") from error
    except json.JSONDecodeError as error:
        raise TraceFileError(path, f"is not JSON ({error})") from error
    origin: dict[str, Any] = {}
    if isinstance(document, dict) and "violations" in document:
        if not document["violations"]:
            raise TraceFileError(path, "has no violation (the check passed)")
        origin = {
            "model": document.get("model"),
            "params": document.get("params"),
            "mutant": document.get("mutant"),
        }
        document = document["violations"][0]
    if isinstance(document, dict) and "trace" in document:
        violation = {
            "property": document.get("property"),
            "kind": document.get("kind", "always"),
            "loop_from": document.get("loop_from"),
        }
        if violation["kind"] not in _KINDS:
            raise TraceFileError(path, f"names an unknown violation kind {violation['kind']!r}")
        document = document["trace"]
    else:
        violation = {}
    if not (isinstance(document, list) and document and all(_is_step(s) for s in document)):
        raise TraceFileError(path, "holds no list of steps with 'action' and 'state'")
    return TraceFile(steps=tuple(document), **violation, **origin)


def _is_step(step: Any) -> bool:
    return isinstance(step, dict) and "action" in step and "state" in step


def replay(model: Model[Any], steps: Sequence[Mapping[str, Any]]) -> Trace[Any]:
    """The model trace whose labels and described states are the recorded `steps`."""
    first = steps[0]["state"]
    starts = list(model.init_states())
    initial = next((s for s in starts if described(model, s) == first), None)
    if initial is None:
        raise TraceMismatch(0, None, "no initial state of the model is described as recorded", ())
    current, taken = initial, []
    for number, recorded in enumerate(steps[1:], 1):
        moves = list(model.successors(current))
        same = [
            (action, following)
            for action, following in moves
            if action.label == recorded["action"] and action.fault == recorded.get("fault", False)
        ]
        if not same:
            reason = "no enabled action has that label"
            raise TraceMismatch(number, recorded["action"], reason, [a.label for a, _ in moves])
        matching = [m for m in same if described(model, m[1]) == recorded["state"]]
        if not matching:
            reason = "the action leads to a state other than the recorded one"
            raise TraceMismatch(number, recorded["action"], reason, [a.label for a, _ in moves])
        action, current = matching[0]
        taken.append(Step(action, current))
    return Trace(initial, tuple(taken))


def described(model: Model[Any], state: Any) -> Any:
    """`describe_state` as it reads back from JSON (tuples become lists): what a trace
    file records, and what the page shows."""
    return json.loads(json.dumps(model.describe_state(state), default=str))
