"""Every package's public face: each name in `__all__` is importable and exported once.

As in trio's export test: a public object has one home. A subpackage exports only what
it defines (its private modules), no two subpackages export the same object, and the
root package re-exports only objects some subpackage already exports.
"""

from __future__ import annotations

import importlib
import inspect
from types import ModuleType
from typing import Any

import pytest

SUBPACKAGES = ("quiesce.fsm", "quiesce.protocol", "quiesce.adapters", "quiesce.models")
PACKAGES = ("quiesce", *SUBPACKAGES)


def public_names(module: ModuleType) -> list[str]:
    names = getattr(module, "__all__", None)
    return [] if names is None else list(names)


def defined_in(obj: Any) -> str | None:
    """The module a class or function was defined in (None for plain values)."""
    if inspect.isclass(obj) or inspect.isfunction(obj):
        return obj.__module__
    return None


@pytest.mark.parametrize("package", PACKAGES)
def test_every_name_in_all_is_importable_once(package: str) -> None:
    module = importlib.import_module(package)
    names = public_names(module)
    assert len(names) == len(set(names)), f"{package}.__all__ lists a name twice"
    for name in names:
        assert hasattr(module, name), f"{package}.__all__ lists {name!r}, which is missing"
        exec(f"from {package} import {name}", {})
    # One name per object: an alias would be a second way to spell the same export.
    objects = [getattr(module, n) for n in names if defined_in(getattr(module, n)) is not None]
    assert len({id(o) for o in objects}) == len(objects), f"{package} exports an alias"


@pytest.mark.parametrize("package", SUBPACKAGES)
def test_a_subpackage_exports_only_what_it_defines(package: str) -> None:
    module = importlib.import_module(package)
    for name in public_names(module):
        home = defined_in(getattr(module, name))
        if home is not None:
            assert home.startswith(package + "."), (
                f"{package} exports {name}, defined in {home}: export it from its home only"
            )


def test_no_object_is_exported_by_two_subpackages() -> None:
    homes: dict[int, str] = {}
    clashes: list[str] = []
    for package in SUBPACKAGES:
        module = importlib.import_module(package)
        for name in public_names(module):
            obj = getattr(module, name)
            if defined_in(obj) is None:
                continue  # constants and aliases may coincide without being the same export
            first = homes.setdefault(id(obj), f"{package}.{name}")
            if first != f"{package}.{name}":
                clashes.append(f"{package}.{name} is {first}")
    assert not clashes, clashes


def test_the_root_reexports_only_subpackage_exports() -> None:
    root = importlib.import_module("quiesce")
    exported = {
        id(getattr(module, name))
        for module in map(importlib.import_module, SUBPACKAGES)
        for name in public_names(module)
    }
    for name in public_names(root):
        assert id(getattr(root, name)) in exported, f"quiesce.{name} has no subpackage home"
    assert "QuiesceError" in public_names(root)


@pytest.mark.parametrize("package", PACKAGES)
def test_every_package_has_a_public_face(package: str) -> None:
    module = importlib.import_module(package)
    # A package without `__all__` yet must at least import and say what it is.
    assert module.__doc__
    if package in ("quiesce", "quiesce.fsm", "quiesce.protocol"):
        assert public_names(module), f"{package} has no __all__"
