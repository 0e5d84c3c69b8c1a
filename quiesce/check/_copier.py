"""A generated copier for frozen dataclasses: `dataclasses.replace`, several times cheaper.

What lives here: `replace(value, **changes)`, the same contract as `dataclasses.replace`
for the frozen dataclasses the models copy on every step (`SystemState`, `Env`, ...).
`dataclasses.replace` re-inspects the class on every call (its fields, which take part in
`__init__`) and runs the frozen `__init__` through keyword arguments; the model checker
calls it several times per successor. Here each class gets, once, a function generated
for its fields that builds the copy directly. A class without `__slots__` is copied by
its `__dict__` in one merge (a frozen class pays a costly `object.__setattr__` per field
otherwise, which is what a many-field value like the model's `Env` would spend its copy on).

A class with an `__post_init__`, a field outside `__init__` or no dataclass fields at all
is copied by `dataclasses.replace` itself: only its contract is reproduced, nothing else.

>>> from quiesce.protocol import OpId
>>> replace(OpId(1, 2, 0), seq=3)
OpId(epoch=1, seq=3, step=0, kind='ck')
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["replace"]

T = TypeVar("T")

_COPIERS: dict[type, Callable[[Any, dict[str, Any]], Any]] = {}


def replace(value: T, /, **changes: Any) -> T:
    """`value` with `changes` (field name -> new value), as `dataclasses.replace`."""
    copier = _COPIERS.get(type(value))
    if copier is None:
        copier = _COPIERS[type(value)] = _copier_for(type(value))
    copied: T = copier(value, changes)
    return copied


def _copier_for(cls: type) -> Callable[[Any, dict[str, Any]], Any]:
    fields = dataclasses.fields(cls)
    plain = (
        fields
        and not hasattr(cls, "__post_init__")
        and all(f.init and f._field_type is dataclasses._FIELD for f in fields)  # type: ignore[attr-defined]
    )
    if not plain:
        return lambda value, changes: dataclasses.replace(value, **changes)
    names = [f.name for f in fields]
    if "__slots__" not in cls.__dict__:
        return _dict_copier(cls, frozenset(names))
    # A frozen dataclass's own __setattr__ refuses; object.__setattr__ is what its
    # generated __init__ uses too.
    body = "\n".join(
        f"    set(new, {n!r}, changes.pop({n!r}) if {n!r} in changes else value.{n})" for n in names
    )
    source = (
        "def copy(value, changes):\n"
        "    new = new_object(cls)\n"
        f"{body}\n"
        "    if changes:\n"
        "        raise TypeError(f'{cls.__name__} has no fields {sorted(changes)}')\n"
        "    return new\n"
    )
    scope: dict[str, Any] = {"cls": cls, "new_object": object.__new__, "set": object.__setattr__}
    exec(source, scope)
    copier: Callable[[Any, dict[str, Any]], Any] = scope["copy"]
    return copier


def _dict_copier(cls: type, names: frozenset[str]) -> Callable[[Any, dict[str, Any]], Any]:
    """The copier of a dataclass whose fields live in its instances' `__dict__`."""
    new_object, set_attribute = object.__new__, object.__setattr__

    def copy(value: Any, changes: dict[str, Any]) -> Any:
        if not changes.keys() <= names:
            raise TypeError(f"{cls.__name__} has no fields {sorted(changes.keys() - names)}")
        new: Any = new_object(cls)
        set_attribute(new, "__dict__", {**value.__dict__, **changes})
        return new

    return copy
