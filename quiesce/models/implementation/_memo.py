"""Hash-consing and memoised steps for the `protocol` model, one set per model instance.

What lives here: `Interner` (one canonical object per distinct value, its hash computed
once), `CanonicalSystems` (one object per distinct composed system, found by its parts'
identities), `MemoCoordinator` and `MemoSystem` (the coordinator's `step` and every
participant's `handle` memoised on canonical states, every request and input made from a
message made once), and `same`, the strict equality they rely on. What it does not know:
what the steps mean; it only remembers what they returned.

Why it pays: the explorer reaches the same controller state, with the same input, from
thousands of global states that differ only elsewhere (and likewise a participant and a
request), so each pure step runs once per distinct `(state, input)`, and its answer's
states are canonical: an unchanged part of a state is recognised by identity.

Why strictly: `==` is coarser than behaviour for some values (an `OpId` compares by epoch
and sequence only, not its kind or trainer step). Answering a step with the answer to a
merely equal input would change what the system does next (it did: a restore id taken for
a checkpoint id of the same sequence), so interning and the memos match values with `same`.

Why identity is sound: a canonical object is kept alive by its `Interner` for the model's
lifetime, so no other object can get its `id`; keys of canonical objects' `id`s are value
keys. Why per instance, never module-global: a mutant injects its variant by parameter
into its own model; a shared memo would answer a mutant's step with the protocol's (a
global memo once made a mutant survive).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import fields, is_dataclass
from enum import Enum
from typing import Any, Generic, TypeVar

from pydantic import BaseModel

from quiesce.check import replace
from quiesce.models.implementation._system import (
    InFlight,
    Store,
    System,
    SystemState,
    _Draft,
    parts_of,
)
from quiesce.protocol.controller import (
    ControllerEffect,
    ControllerInput,
    ControllerState,
    Coordinator,
)
from quiesce.protocol.participant import Answer, ParticipantState
from quiesce.protocol.wire import Message

__all__ = ["CanonicalSystems", "Interner", "MemoCoordinator", "MemoSystem", "same"]

T = TypeVar("T")
R = TypeVar("R")

_PLAIN = (str, int, float, bool, type(None), Enum)
_COMPARERS: dict[type, Callable[[Any, Any], bool]] = {}


def same(a: Any, b: Any) -> bool:
    """Strict equality: the same type and the same fields all the way down, including
    the fields `==` ignores (an `OpId`'s kind and step). Shared parts compare by identity
    first, so comparing a new value with the one it was built from is cheap.

    >>> from quiesce.protocol import OpId
    >>> OpId(2, 1, 0, "rs") == OpId(2, 1, 0, "ck"), same(OpId(2, 1, 0, "rs"), OpId(2, 1, 0, "ck"))
    (True, False)
    """
    if a is b:
        return True
    kind = type(a)
    if kind is not type(b):
        return False
    # The memos compare a few values per successor: deciding how to compare a type (the
    # isinstance tests, pydantic's metaclass check among them) once per type, not per
    # call, is most of what `same` costs.
    compare = _COMPARERS.get(kind)
    if compare is None:
        compare = _COMPARERS[kind] = _comparer_for(kind)
    return compare(a, b)


def _comparer_for(kind: type) -> Callable[[Any, Any], bool]:
    """How `same` compares two distinct values of type `kind`."""
    if issubclass(kind, _PLAIN):
        return _equal
    if kind is tuple:
        return _same_items
    if issubclass(kind, BaseModel):
        return _same_model_fields
    if is_dataclass(kind):
        return _same_fields_of(tuple(f.name for f in fields(kind)))
    # Sets, mappings and anything else: their members' reprs show every field.
    return _same_reprs


def _equal(a: Any, b: Any) -> bool:
    return bool(a == b)


def _same_items(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    return len(a) == len(b) and all(map(same, a, b))


def _same_model_fields(a: BaseModel, b: BaseModel) -> bool:
    mine, theirs = a.__dict__, b.__dict__
    return list(mine) == list(theirs) and all(map(same, mine.values(), theirs.values()))


def _same_fields_of(names: tuple[str, ...]) -> Callable[[Any, Any], bool]:
    """A comparer of the dataclass fields `names`, generated (one expression, no loop)."""
    terms = " and ".join(f"(a.{n} is b.{n} or same(a.{n}, b.{n}))" for n in names) or "True"
    scope: dict[str, Any] = {"same": same}
    exec(f"def compare(a, b):\n    return {terms}\n", scope)
    compare: Callable[[Any, Any], bool] = scope["compare"]
    return compare


def _same_reprs(a: Any, b: Any) -> bool:
    return bool(a == b) and sorted(map(repr, _members(a))) == sorted(map(repr, _members(b)))


def _members(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return list(value.items())
    if isinstance(value, frozenset | set | list):
        return list(value)
    return [value]


class Interner:
    """Hash-consing: `intern(value)` is the one canonical object `same` as `value`, and
    `hash_of(canonical)` its hash, computed once.

    A canonical object is recognised by its `id` without hashing it again, which is what
    makes interning an unchanged part of a state (the common case) cost one dict lookup.
    A value that cannot be hashed (a finish request's result mapping) is filed under the
    hash of its `repr` (strictly same values with mappings built in another order may get
    two canonical objects: a memo then misses, it never answers wrongly).
    """

    __slots__ = ("_canonical", "_hashes")

    def __init__(self) -> None:
        # The canonical values by hash (each strictly distinct from its kin): filed by the
        # hash itself, so a new value is hashed once, not again as a key.
        self._canonical: dict[int, list[Any]] = {}
        self._hashes: dict[int, int] = {}

    def __call__(self, value: T) -> T:
        if id(value) in self._hashes:
            return value
        try:
            digest = hash(value)
        except TypeError:
            digest = hash(repr(value))
        kin = self._canonical.setdefault(digest, [])
        for canonical in kin:
            if same(canonical, value):
                found: T = canonical
                return found
        kin.append(value)
        self._hashes[id(value)] = digest
        return value

    def hash_of(self, value: object) -> int:
        """The hash of `value`: computed once per canonical object. A value this interner
        has not seen is interned first (a mutant's model shares states the unmutated
        model's interner made, and its exception path builds a state from one)."""
        known = self._hashes.get(id(value))
        if known is None:
            known = self._hashes[id(self(value))]
        return known

    def __len__(self) -> int:
        return len(self._hashes)


class _Memo(Generic[R]):
    """Answers by `(id of a canonical state, id of the canonical input, *context)`: the
    input is interned first, so a remembered answer is found by identities alone (an
    input object met before is known by its `id`, without hashing or comparing it again:
    `MemoSystem` hands out the same request or input object for the same message). With
    `remember=False` every answer is computed."""

    __slots__ = ("_answers", "_intern", "_remember")

    def __init__(self, intern: Interner, remember: bool) -> None:
        self._intern = intern
        self._remember = remember
        self._answers: dict[tuple[Any, ...], R] = {}

    def answer(
        self, state: int, input: Any, context: tuple[Any, ...], compute: Callable[[], R]
    ) -> R:
        if not self._remember:
            return compute()
        key = (state, id(self._intern(input)), *context)
        found = self._answers.get(key)
        if found is None:
            found = self._answers[key] = compute()
        return found


class MemoCoordinator(Coordinator):
    """`inner` (same configuration, tables and policy) with `step` memoised: a step runs
    once per distinct `(state, now, input)` and its next state is interned in `intern`
    (and `initial` once per epoch).
    A step that raises (a mutant's core) is not remembered: it raises every time. With
    `remember=False` every step is computed (its next state still interned).
    """

    def __init__(self, inner: Coordinator, intern: Interner, *, remember: bool = True) -> None:
        # No super().__init__: the coordinator holds only its parameters, copied as they are.
        self.__dict__.update(inner.__dict__)
        self._intern = intern
        self._remember = remember
        self._steps: _Memo[tuple[ControllerState, tuple[ControllerEffect, ...]]] = _Memo(
            intern, remember
        )
        self._initial: dict[int, ControllerState] = {}

    def initial(self, epoch: int) -> ControllerState:
        found = self._initial.get(epoch)
        if found is None:
            found = self._intern(Coordinator.initial(self, epoch))
            if self._remember:
                self._initial[epoch] = found
        return found

    def step(
        self, state: ControllerState, now: float, input: ControllerInput
    ) -> tuple[ControllerState, tuple[ControllerEffect, ...]]:
        state = self._intern(state)

        def compute() -> tuple[ControllerState, tuple[ControllerEffect, ...]]:
            after, effects = Coordinator.step(self, state, now, input)
            return self._intern(after), effects

        return self._steps.answer(id(state), input, (now,), compute)


class MemoSystem(System):
    """`System` with every participant step memoised per distinct `(participant, op,
    request, now)`, the participant it returns interned in `intern` (`remember=False`: every
    step computed, still interned)."""

    def __init__(
        self,
        coordinator: Coordinator,
        intern: Interner,
        systems: CanonicalSystems,
        *,
        remember: bool = True,
        **options: Any,
    ) -> None:
        super().__init__(coordinator, **options)
        self._intern = intern
        self._systems = systems
        self._answers: _Memo[Answer] = _Memo(intern, remember)
        self._restarts: _Memo[ParticipantState] = _Memo(intern, remember)
        # What `_made` made, by its parts' identities; the entry keeps the parts alive, so
        # no other object can take an `id` its key names.
        self._made_of: dict[tuple[int, ...], tuple[tuple[object, ...], Any]] = {}

    def handle(
        self, participant: ParticipantState, op: Any, request: Message, now: float
    ) -> Answer:
        participant = self._intern(participant)

        def compute() -> Answer:
            after, reply, effects = System.handle(self, participant, op, request, now)
            return self._intern(after), reply, effects

        return self._answers.answer(id(participant), request, (op, now), compute)

    def restart(self, participant: ParticipantState, incarnation: str) -> ParticipantState:
        participant = self._intern(participant)
        return self._restarts.answer(
            id(participant),
            incarnation,
            (),
            lambda: self._intern(System.restart(self, participant, incarnation)),
        )

    def _freeze(self, draft: _Draft) -> SystemState:
        # The canonical system, found from the draft's parts: no frozen copy of a state
        # the model has already (an action that started from a canonical system changed
        # only the parts that are not the same objects as there).
        systems, origin = self._systems, draft.origin
        return systems.of(
            None,
            draft.controller,
            draft.participants,
            draft.messages,
            draft.timers,
            draft.store,
            draft.now,
            draft.anchor,
            before=origin if systems.knows(origin) else None,
        )

    def _made(self, parts: tuple[object, ...], build: Callable[[], T]) -> T:
        key = tuple(map(id, parts))
        found = self._made_of.get(key)
        if found is None:
            found = self._made_of[key] = (parts, build())
        made: T = found[1]
        return made


class CanonicalSystems:
    """One object per distinct composed system: `systems(state)` is the canonical system
    of `state`, every part interned in `intern`, without what carries no information
    (the per-phase seconds: time is abstract; the arrival order of in-flight messages:
    any one may be delivered next). `digest(canonical)` is its hash, computed once from
    its parts' hashes. A system's moves can then be remembered by its identity.
    """

    __slots__ = ("_digests", "_in_flight", "_intern", "_order", "_plain", "_systems", "_tuples")

    def __init__(self, intern: Interner) -> None:
        self._intern = intern
        # Per canonical part (by `id`): the controller without its per-phase seconds, the
        # canonical in-flight message of a (call, reply) pair, a canonical message's sort
        # key, and the canonical tuple of canonical participants, messages or timers.
        self._plain: dict[int, ControllerState] = {}
        self._in_flight: dict[tuple[int, int], InFlight] = {}
        self._order: dict[int, tuple[Any, ...]] = {}
        self._tuples: dict[tuple[int, ...], tuple[Any, ...]] = {}
        # The canonical systems by their parts' identities, and their hashes (by `id`).
        self._systems: dict[tuple[Any, ...], SystemState] = {}
        self._digests: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self._systems)

    def __call__(self, sys: SystemState, before: SystemState | None = None) -> SystemState:
        """The canonical system of `sys`. `before`, a canonical system `sys` was computed
        from: the parts a step left alone (the same objects) are its, canonical already,
        and are not looked at again."""
        if id(sys) in self._digests:
            return sys  # canonical already
        return self.of(sys, *parts_of(sys), before=before)

    def knows(self, sys: SystemState) -> bool:
        """Whether `sys` is a canonical system."""
        return id(sys) in self._digests

    def of(
        self,
        built: SystemState | None,
        controller: ControllerState,
        participants: tuple[ParticipantState, ...],
        messages: tuple[InFlight, ...],
        timers: tuple[Any, ...],
        store: Store,
        now: float,
        anchor: Any,
        *,
        before: SystemState | None,
    ) -> SystemState:
        """The canonical system with these parts (see `__call__`); `built`, a system with
        these very parts if there is one, is the canonical one if they are canonical."""
        intern = self._intern
        if before is None or controller is not before.controller:
            controller = self._without_seconds(intern(controller))
        if before is None or participants is not before.participants:
            participants = self._tuple_of(tuple(map(intern, participants)))
        if before is None or messages is not before.messages:
            messages = self._messages_of(messages)
        if before is None or timers is not before.timers:
            timers = self._tuple_of(tuple(map(intern, timers)))
        if before is None or store is not before.store:
            store = intern(store)
        if before is None or anchor is not before.anchor:
            anchor = intern(anchor)
        identity = (
            id(controller),
            id(participants),
            id(messages),
            id(timers),
            id(store),
            now,
            id(anchor),
        )
        found = self._systems.get(identity)
        if found is None:
            parts = (controller, participants, messages, timers, store, now, anchor)
            # Canonical parts already: no copy.
            reuse = built is not None and all(map(operator.is_, parts, parts_of(built)))
            found = built if reuse and built is not None else SystemState(*parts)
            # The entry keeps every part its identity names alive: no other object can
            # take one of those ids while it is filed.
            self._systems[identity] = found
            self._digests[id(found)] = self._hash(found)
        return found

    def digest(self, sys: SystemState) -> int:
        """The hash of `sys` (computed once if it is canonical)."""
        found = self._digests.get(id(sys))
        return self._hash(sys) if found is None else found

    def forget(self) -> None:
        """Drop the canonical systems and their hashes (a hash is dropped with the system
        that keeps its `id` from being reused); the parts stay canonical."""
        self._systems.clear()
        self._digests.clear()

    def _hash(self, sys: SystemState) -> int:
        """The hash of `sys` by value, from its parts' hashes the interner keeps."""
        hash_of = self._intern.hash_of
        return hash(
            (
                hash_of(sys.controller),
                tuple(map(hash_of, sys.participants)),
                tuple(map(hash_of, sys.messages)),
                hash_of(sys.timers),
                hash_of(sys.store),
                sys.now,
                sys.anchor,
            )
        )

    def _tuple_of(self, parts: tuple[T, ...]) -> tuple[T, ...]:
        """The one canonical tuple of the canonical `parts` (by their identities)."""
        key = tuple(map(id, parts))
        found = self._tuples.get(key)
        if found is None:
            found = self._tuples[key] = self._intern(parts)
        return found

    def _messages_of(self, messages: tuple[InFlight, ...]) -> tuple[InFlight, ...]:
        """The canonical tuple of `messages`: each one canonical, in `_message_order`."""
        order = self._order
        # A message with a sort key is canonical already (the key is filed by its `id`).
        canonical = [m if id(m) in order else self._message(m) for m in messages]
        if len(canonical) > 1:
            canonical.sort(key=lambda m: order[id(m)])
        return self._tuple_of(tuple(canonical))

    def _without_seconds(self, controller: ControllerState) -> ControllerState:
        found = self._plain.get(id(controller))
        if found is None:
            found = self._plain[id(controller)] = self._intern(_without_seconds(controller))
        return found

    def _message(self, message: InFlight) -> InFlight:
        """The canonical message of `message` (its call and reply canonical), with its
        sort key filed."""
        call = self._intern(message.call)
        reply = None if message.reply is None else self._intern(message.reply)
        pair = (id(call), id(reply))
        found = self._in_flight.get(pair)
        if found is None:
            found = self._in_flight[pair] = self._intern(InFlight(call, reply))
            self._order[id(found)] = _message_order(found)
        return found


def _message_order(message: InFlight) -> tuple[Any, ...]:
    """The sort key of an in-flight message: by value, so the order of a state's messages
    (hence of its actions) is the same in every run."""
    call = message.call
    op_id = call.op_id
    return (
        call.participant,
        call.op.value,
        (-1, -1) if op_id is None else (op_id.epoch, op_id.seq),
        repr(call.payload),
        message.reply is not None,
        repr(message.reply),
    )


def _without_seconds(controller: ControllerState) -> ControllerState:
    """`controller` without its attempt's per-phase seconds (they feed metrics only)."""
    attempt = controller.attempt
    if attempt is None or not attempt.phase_seconds:
        return controller
    data = replace(controller.checkpoint.data, attempt=replace(attempt, phase_seconds=()))
    return replace(controller, checkpoint=replace(controller.checkpoint, data=data))
