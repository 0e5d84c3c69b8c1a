"""The typed error hierarchy of quiesce.

Every error quiesce raises derives from `QuiesceError` and keeps its facts in attributes,
so callers branch on data, never on message text. The engine's own errors live here;
the protocol and the adapters add theirs below the same base.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum

__all__ = [
    "DefinitionError",
    "GuardRejected",
    "QuiesceError",
    "TransitionNotAllowed",
    "UnknownEffect",
]


class QuiesceError(Exception):
    """Base of every error raised by quiesce."""


class DefinitionError(QuiesceError):
    """A table is malformed; `problems` lists every problem found, not just the first.

    Each problem is a `(kind, message)` pair; `kind` is one of `unknown_state`,
    `unknown_input`, `unknown_name`, `unreachable_state`, `dead_end`, `unhandled_input`,
    `shadowed_row`, `unmapped_pair`, `conflicting_pair`.
    """

    def __init__(self, table: str, problems: Sequence[tuple[str, str]]) -> None:
        self.table = table
        self.problems = tuple(problems)
        lines = "\n".join(f"  - [{kind}] {message}" for kind, message in self.problems)
        super().__init__(f"table {table!r} is malformed ({len(self.problems)} problems):\n{lines}")

    @property
    def kinds(self) -> frozenset[str]:
        """The distinct kinds of problem found."""
        return frozenset(kind for kind, _ in self.problems)


class TransitionNotAllowed(QuiesceError):
    """`input` is refused in `state` of `machine`; the machine's value is unchanged."""

    def __init__(self, machine: str, state: Enum, input: Enum, reason: str = "forbidden") -> None:
        self.machine = machine
        self.state = state
        self.input = input
        self.reason = reason
        super().__init__(f"{machine}: {_label(input)} is {reason} in state {_label(state)}")


class GuardRejected(TransitionNotAllowed):
    """Rows exist for `(state, input)` but every guard was false; nothing changed."""

    def __init__(self, machine: str, state: Enum, input: Enum, guards: Sequence[str]) -> None:
        self.guards = tuple(guards)
        super().__init__(machine, state, input, reason=f"rejected by guards {list(self.guards)}")


class UnknownEffect(QuiesceError, KeyError):
    """`machine` emitted `effect` and the `level` doing its work has none for that name."""

    def __init__(self, machine: str, effect: str, level: str) -> None:
        self.machine = machine
        self.effect = effect
        self.level = level
        super().__init__(f"{machine} has no effect {effect!r} ({level} level)")


def _label(member: Enum) -> str:
    return member.value if isinstance(member.value, str) else member.name.lower()
