"""I9, rollout progress (PROTOCOL.md §5, amended): did the work a run handed out end trained?

What lives here: `untrained_groups`, which names every prompt group the dataloader handed
out that the trainer does not have in full, each with the reason it ended so; and the I9
violations of a run: any untrained group when no fault was injected, an untrained group
without a counted reason, an execution left live on an agent after the run finished.

What it does not know: the coordinator's decisions. A group is judged from the trainer's
final lineage and the dataloader's consumption (PROTOCOL.md §8), and from the one fact only
the ledger holds: that it abandoned the group for good (by its deadline and attempt limit),
which it must count. The ledger's view of a group and the executions its agent still holds
are quoted in the reason as evidence, never used to decide.

>>> from quiesce.protocol.controller import Ledger
>>> report = untrained_groups(
...     consumed=2, group_size=2, trained={(0, 0), (0, 1), (1, 0)}, ledger=Ledger(),
...     held=(), ended_early=None,
... )
>>> [(g.group, g.kind) for g in report.groups]
[('p1', 'unaccounted')]
>>> progress_violations(report, faults=True)
['I9: 1 prompt group ended untrained without a counted reason: p1']
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict

from quiesce.protocol import group_of
from quiesce.protocol.controller import Ledger
from quiesce.protocol.controller.lowlevel import UnknownGroup
from quiesce.protocol.machines import AttemptState, ExecState, GroupState

__all__ = [
    "HeldExecution",
    "Untrained",
    "UntrainedGroup",
    "group_id",
    "live_execution_violations",
    "progress_violations",
    "untrained_groups",
]

# How many names a one-line violation lists before it says how many more there are.
_NAMED = 5


def group_id(prompt: int) -> str:
    """The prompt group id the simulated dataloader gives prompt number `prompt`."""
    return f"p{prompt}"


class UntrainedGroup(BaseModel):
    """One consumed prompt group the trainer does not have in full, and why.

    `kind`: `abandoned` (the ledger counted it abandoned for good), `in_flight` (the run
    ended early: the controller stopped, or the time limit ran out), `unaccounted`
    (neither: the work was dropped).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    group: str
    kind: Literal["abandoned", "in_flight", "unaccounted"]
    reason: str


class Untrained(BaseModel):
    """Every untrained group of a run (`count` of them), oldest prompt first."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    count: int
    groups: list[UntrainedGroup]


@dataclass(frozen=True, slots=True)
class HeldExecution:
    """An execution an agent still holds: running, parked, frozen, or completed and not ACKed."""

    agent: str
    rollout_id: str
    attempt: int
    state: ExecState

    @property
    def group(self) -> str:
        """The prompt group the execution belongs to."""
        return group_of(self.rollout_id)

    def __str__(self) -> str:
        return f"{self.agent} holds {self.rollout_id}#{self.attempt} ({self.state.value})"


def untrained_groups(
    *,
    consumed: int,
    group_size: int,
    trained: Collection[tuple[int, int]],
    ledger: Ledger,
    held: Sequence[HeldExecution],
    ended_early: str | None,
) -> Untrained:
    """Every group of prompts `0 .. consumed-1` with a `(prompt, sibling)` item not in
    `trained`, with its reason.

    `ended_early` says why work may still be in flight ("the controller stopped (...)"), or
    is None for a run that used up its data; `ledger` is the last controller's, `held` what
    the agents hold at the end.
    """
    groups: list[UntrainedGroup] = []
    for prompt in range(consumed):
        done = sum((prompt, sibling) in trained for sibling in range(group_size))
        if done == group_size:
            continue
        name = group_id(prompt)
        if _abandoned_for_good(ledger, name):
            kind: Literal["abandoned", "in_flight", "unaccounted"] = "abandoned"
            why = "abandoned for good by its deadline and attempt limit (counted by the ledger)"
        elif ended_early is not None:
            kind, why = "in_flight", f"in flight when {ended_early}"
        else:
            kind, why = "unaccounted", "never trained, and not counted as abandoned"
        evidence = [
            f"{done} of {group_size} siblings trained",
            _ledger_view(ledger, name),
            *(_held_view(execution, ledger) for execution in held if execution.group == name),
        ]
        groups.append(UntrainedGroup(group=name, kind=kind, reason="; ".join([why, *evidence])))
    return Untrained(count=len(groups), groups=groups)


def progress_violations(untrained: Untrained, *, faults: bool) -> list[str]:
    """The I9 violations among `untrained`: with no fault injected (`faults` False) every
    consumed group must end trained; with faults, every one must end trained or counted."""
    if not faults and untrained.groups:
        return [
            f"I9: no fault was injected, yet {_groups(untrained.count)} ended untrained: "
            + _listed([g.group for g in untrained.groups])
        ]
    unaccounted = [g.group for g in untrained.groups if g.kind == "unaccounted"]
    if unaccounted:
        return [
            f"I9: {_groups(len(unaccounted))} ended untrained without a counted reason: "
            + _listed(unaccounted)
        ]
    return []


def live_execution_violations(held: Sequence[HeldExecution]) -> list[str]:
    """I9: once the controller is idle with nothing dispatched, no agent holds anything."""
    if not held:
        return []
    return [
        f"I9: {len(held)} executions left live on agents with the controller idle and "
        "nothing dispatched: " + _listed([str(execution) for execution in held])
    ]


def _abandoned_for_good(ledger: Ledger, name: str) -> bool:
    # A whole-group rerun abandons one generation and starts the next; only a newest
    # generation that is abandoned means the ledger gave the group up.
    try:
        return ledger.group(name).state is GroupState.ABANDONED
    except UnknownGroup:
        return False


def _ledger_view(ledger: Ledger, name: str) -> str:
    try:
        group = ledger.group(name)
    except UnknownGroup:
        return "not in the ledger"
    sealed = sum(a.state is AttemptState.SEALED for a in ledger.siblings(name))
    return (
        f"ledger: {group.state.value} (generation {group.generation}), "
        f"{sealed} of {group.size} siblings sealed"
    )


def _held_view(execution: HeldExecution, ledger: Ledger) -> str:
    if execution.state is ExecState.COMPLETED:
        key = (execution.rollout_id, execution.attempt)
        if ledger.owns(*key) and ledger.attempt(key).state is AttemptState.DISPATCHED:
            # The signature of a completion the controller dropped instead of sealing.
            return f"{execution}, which the ledger still has as dispatched"
    return str(execution)


def _groups(count: int) -> str:
    return f"{count} prompt group" + ("" if count == 1 else "s")


def _listed(names: Sequence[str]) -> str:
    shown = ", ".join(names[:_NAMED])
    more = len(names) - _NAMED
    return shown if more <= 0 else f"{shown} (and {more} more)"
