"""Symmetry of the `protocol` model: the siblings of a prompt group are interchangeable.

What lives here: `canonical_key(params, state)`, the representative `--symmetry` stores for
a `PState`: the state rewritten under every permutation of the group's siblings (rollout
ids, receipts, sibling indexes, blocker texts), each turned into an order-free fingerprint
(sets and collections sorted), and the least of them kept. Two states that differ only by
which sibling is which get one key. What it does not know: the model's actions; the
properties are symmetric by construction (none of them names a sibling).
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import fields, is_dataclass
from enum import Enum
from typing import Any

from pydantic import BaseModel

from quiesce.models.implementation._state import GROUP, ProtocolParams, PState
from quiesce.protocol import rollout_id
from quiesce.protocol.participant import receipt_for

__all__ = ["canonical_key"]

# Tuples whose order is an accident of arrival, not meaning: sorted in the fingerprint.
_COLLECTIONS = frozenset(
    {
        "attempts",
        "executions",
        "refusal_keys",
        "messages",
        "receipts",
        "acknowledged",
        "unknown",
        "blockers",
        "digests",
        "recorded",
        "budgets",
        "timers",
        "restored",
    }
)


class _Renamer:
    """One permutation `perm` (old sibling -> new sibling) of group `group`."""

    def __init__(self, group: str, perm: tuple[int, ...], attempts: int) -> None:
        self.perm = perm
        self.rollouts = {rollout_id(group, i): rollout_id(group, j) for i, j in enumerate(perm)}
        self.receipts = {
            receipt_for(old, a, "{}"): receipt_for(new, a, "{}")
            for old, new in self.rollouts.items()
            for a in range(attempts + 4)
        }
        self.prefix = f"{group}/"

    def text(self, value: str) -> str:
        if self.prefix not in value:
            return value
        mapped = self.receipts.get(value)
        if mapped is not None:
            return mapped
        if value in self.rollouts:
            return self.rollouts[value]
        # Texts that embed a rollout id (blockers "running:g0/0#0"): rename every one.
        marks = {old: f"\0{n}\0" for n, old in enumerate(self.rollouts)}
        for old, mark in marks.items():
            value = value.replace(old + "#", mark + "#")
        for old, mark in marks.items():
            value = value.replace(mark, self.rollouts[old])
        return value

    def key(self, value: Any, name: str = "") -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, bool | int | float) or value is None:
            if name == "sibling" and isinstance(value, int):
                return self.perm[value]
            return value
        if isinstance(value, Enum):
            return value.value
        if isinstance(value, frozenset | set):
            items = [self.key(v) for v in value]
            if name == "sealed":
                items = [self.perm[v] for v in value]
            return ("set", tuple(sorted(items, key=repr)))
        if isinstance(value, tuple | list):
            items = [self.key(v) for v in value]
            if name in _COLLECTIONS:
                items.sort(key=repr)
            return tuple(items)
        if isinstance(value, BaseModel):
            return (
                type(value).__name__,
                tuple((f, self.key(getattr(value, f), f)) for f in type(value).model_fields),
            )
        if is_dataclass(value):
            return (
                type(value).__name__,
                tuple((f.name, self.key(getattr(value, f.name), f.name)) for f in fields(value)),
            )
        if isinstance(value, dict):
            return (
                "dict",
                tuple(sorted(((self.key(k), self.key(v)) for k, v in value.items()), key=repr)),
            )
        return repr(value)


@functools.cache
def _renamers(siblings: int, attempts: int) -> list[_Renamer]:
    return [_Renamer(GROUP, perm, attempts) for perm in itertools.permutations(range(siblings))]


def canonical_key(params: ProtocolParams, state: PState) -> Any:
    """The least fingerprint of `state` (a state of the model at `params`) over every
    permutation of the siblings."""
    keys = [r.key((state.system, state.env)) for r in _renamers(params.siblings, params.attempts)]
    return min(keys, key=repr)
