"""Sibling symmetry of the design model: one representative per relabelling of siblings.

What lives here: `canonical(state)`, which renames the siblings so that their views come in
a fixed order. No table, rule or property of §5 tells sibling 0 from sibling 1 (the group
waits for all, each is retried alike, I1/I2/I9 quantify over all), so a state and its
renamings have the same futures up to that renaming. What it does not know: anything but
where sibling indexes appear.

The representative sorts siblings by their *view* (ledger attempts, executions, refusal
key), ties keeping the current order: symmetric states whose tied siblings differ only
outside the view may keep two representatives, which costs a state, never a verdict.
"""

from __future__ import annotations

from typing import Any

from quiesce.models.design._state import (
    AGENT,
    NAMES,
    Attempt,
    Controller,
    DesignState,
    Execution,
    Key,
    Ledger,
    Participants,
    Snapshot,
    Store,
)

__all__ = ["canonical"]


def canonical(state: DesignState) -> DesignState:
    """`state` with its siblings renamed into the canonical order."""
    siblings = len(state.parts.refusals)
    if siblings == 2:  # the reference size: one comparison, no sort
        if _view(state, 1) < _view(state, 0):
            return _renamed(state, _SWAP)
        return state
    views = [_view(state, s) for s in range(siblings)]
    order = sorted(range(siblings), key=views.__getitem__)
    if order == list(range(siblings)):
        return state
    return _renamed(state, {old: new for new, old in enumerate(order)})


_SWAP = {0: 1, 1: 0}


def _view(state: DesignState, sibling: int) -> tuple[Any, ...]:
    """What tells `sibling` apart from the others, cheaply: its attempts in the ledger, its
    executions on the agent and its refusal key (the rest of its data rarely differs when
    these agree, and a tie only keeps two representatives)."""
    ledger = state.controller.ledger
    return (
        () if ledger is None else tuple(a[1:] for a in ledger.attempts if a.sibling == sibling),
        tuple(e[1:] for e in state.parts.executions if e.sibling == sibling),
        state.parts.refusals[sibling],
    )


def _renamed(state: DesignState, rename: dict[int, int]) -> DesignState:
    c, parts, store, world = state
    staged = c.staged
    if staged[AGENT] is not None:
        staged = tuple(_digest(d, rename) for d in staged)
    controller = Controller(
        *c[:6],
        staged,
        *c[7:11],
        _ledger(c.ledger, rename),
        _keys(c.outbox, rename),
        _keys(c.retires, rename),
        *c[14:16],
        _saved(c.continuations, rename),
    )
    # Only the agent's records name siblings (its commits and restores list continuations).
    fences = parts.fences
    agent = fences[AGENT]
    if agent.recorded:
        recorded = tuple((i, op, _digest(r, rename)) for i, op, r in agent.recorded)
        fences = (fences[0], agent._replace(recorded=recorded), fences[2])
    refusals = [parts.refusals[0]] * len(parts.refusals)
    for old, new in rename.items():
        refusals[new] = parts.refusals[old]
    participants = Participants(
        fences,
        (parts.policy[0], _keys(parts.policy[1], rename)),
        parts.resources,
        tuple(sorted(Execution(rename[e[0]], *e[1:]) for e in parts.executions)),
        tuple(refusals),
        _saved(parts.restored, rename),
    )
    published = store.published
    if any(s.cut is not None for s in published):
        published = tuple(
            s
            if s.cut is None
            else Snapshot(
                s.op_id,
                s.trainer_step,
                tuple(_digest(d, rename) for d in s.digests),
                _ledger(s.cut, rename),
            )
            for s in published
        )
        store = Store(store.intent, published)
    if world.unaccounted:
        world = world._replace(unaccounted=frozenset((rename[s], a) for s, a in world.unaccounted))
    return DesignState(controller, participants, store, world)


def _keys(keys: tuple[Key, ...], rename: dict[int, int]) -> tuple[Key, ...]:
    return tuple(sorted((rename[s], a) for s, a in keys)) if keys else keys


def _saved(
    saved: tuple[tuple[int, int, int], ...], rename: dict[int, int]
) -> tuple[tuple[int, int, int], ...]:
    return tuple(sorted((rename[s], a, t) for s, a, t in saved)) if saved else saved


def _ledger(ledger: Ledger | None, rename: dict[int, int]) -> Ledger | None:
    if ledger is None:
        return None
    sealed = sum(1 << rename[s] for s in rename if ledger.group.sealed >> s & 1)
    attempts = tuple(sorted(Attempt(rename[a[0]], *a[1:]) for a in ledger.attempts))
    return Ledger(ledger.group._replace(sealed=sealed), attempts)


def _digest(digest: Any, rename: dict[int, int]) -> Any:
    """A digest with the siblings it names renamed: the agent's commit names its saved
    continuations `(name, id, ((sibling, attempt, turn), ...))`."""
    if isinstance(digest, tuple) and len(digest) == 3 and digest[0] == NAMES[AGENT]:
        return (digest[0], digest[1], _saved(digest[2], rename))
    return digest
