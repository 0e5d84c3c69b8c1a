"""The unmutated protocol's steps, reused by a generated mutant wherever it steps the same.

What lives here: `StepMemo` (every step one unmutated search of a stage computed, each with
the rows it touched), `RecordingModel` (the protocol model that fills a memo, its tables
recording) and `SharingModel` (a mutant's model that answers from a memo). What it does
not know: which searches to make, or which mutant to build (`_mutant_stages`).

Why it is exact. A model step is a pure function of the state and the tables: equal states
step alike (the explorer's visited set already relies on it). A generated mutant's tables
are the protocol's but for one row (`Site`). A step of the protocol that never fired that
row (from a source where the mutant's target differs) and never found its guard false made
every table call exactly as the mutant would: the same row chosen, the same next value. So
the mutant's step from that state equals the recorded one, and `SharingModel` returns it
instead of computing it again; any other step, and any state the unmutated search never
met, is computed on the mutant's own tables. The search is therefore the mutant's own,
state for state and in the same order (the same verdict, the same counterexample), at the
price of a dictionary look-up wherever the row plays no part.

Why it pays. Most generated mutants change a row that few states exercise, and the
expensive stage (exhaustive with one fault) otherwise re-computes the same 37,000
successors for every one of them; a mutant killed by `no_stall` must search its whole graph
before the cycle check runs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeGuard, TypeVar

from quiesce.check import Action
from quiesce.models.coverage import RowCoverage, recording_hooks
from quiesce.models.implementation import Hooks, ProtocolModel, ProtocolParams, PState

__all__ = ["RecordingModel", "SharingModel", "StepMemo"]

T = TypeVar("T")
Entry = tuple[T, RowCoverage]
"""A recorded result and the rows its computation touched."""


class StepMemo:
    """What one unmutated search computed: per state its `successors` and `actions`, per
    `(state, action)` its `next_state`, each with the rows it touched, and the `coverage`
    of the whole search (every row fired or refused, the initial state's included)."""

    def __init__(self) -> None:
        self.successors: dict[PState, Entry[list[tuple[Action, PState]]]] = {}
        self.actions: dict[PState, Entry[list[Action]]] = {}
        self.next_states: dict[tuple[PState, Action], Entry[PState | None]] = {}
        self.coverage = RowCoverage()


class RecordingModel(ProtocolModel):
    """The unmutated protocol model at `params`, noting in a `StepMemo` every step it
    computes and the rows each touched (`recorded()` returns it once the search is over)."""

    def __init__(self, params: ProtocolParams) -> None:
        hooks, self._recorder = recording_hooks(Hooks())
        # Unmemoised: a step the protocol model answered from its own memo would fire no
        # row, and be recorded as one the mutant may share.
        super().__init__(params, hooks=hooks, memoise=False)
        self._memo = StepMemo()
        # Steps touch few distinct row sets: one shared object each keeps the memo small.
        self._interned: dict[RowCoverage, RowCoverage] = {}

    def recorded(self) -> StepMemo:
        """The memo of every step so far, with the coverage of the whole search."""
        self._memo.coverage = self._recorder.coverage()
        return self._memo

    def _touched(self) -> RowCoverage:
        touched = self._recorder.take()
        return self._interned.setdefault(touched, touched)

    def successors(self, state: PState) -> list[tuple[Action, PState]]:
        self._recorder.take()
        moves = super().successors(state)
        self._memo.successors[state] = (moves, self._touched())
        return moves

    def actions(self, state: PState) -> list[Action]:
        self._recorder.take()
        enabled = list(super().actions(state))
        self._memo.actions[state] = (enabled, self._touched())
        return enabled

    def next_state(self, state: PState, action: Action) -> PState | None:
        self._recorder.take()
        following = super().next_state(state, action)
        self._memo.next_states[state, action] = (following, self._touched())
        return following


class SharingModel(ProtocolModel):
    """A mutant's protocol model (`params`, `hooks`) that takes each step from `memo`
    unless `changes(touched)` says the mutant's row took part in it."""

    def __init__(
        self,
        params: ProtocolParams,
        hooks: Hooks,
        name: str,
        memo: StepMemo,
        changes: Callable[[RowCoverage], bool],
    ) -> None:
        super().__init__(params, hooks=hooks, name=name)
        self._memo = memo
        self._changes = changes
        # Per distinct touched set (few, interned), whether the mutant steps differently.
        self._differs: dict[RowCoverage, bool] = {}

    def _reuse(self, entry: Entry[T] | None) -> TypeGuard[Entry[T]]:
        if entry is None:
            return False
        touched = entry[1]
        differs = self._differs.get(touched)
        if differs is None:
            differs = self._differs[touched] = self._changes(touched)
        return not differs

    def successors(self, state: PState) -> list[tuple[Action, PState]]:
        entry = self._memo.successors.get(state)
        return entry[0] if self._reuse(entry) else super().successors(state)

    def actions(self, state: PState) -> Iterable[Action]:
        entry = self._memo.actions.get(state)
        return entry[0] if self._reuse(entry) else super().actions(state)

    def next_state(self, state: PState, action: Action) -> PState | None:
        entry = self._memo.next_states.get((state, action))
        return entry[0] if self._reuse(entry) else super().next_state(state, action)
