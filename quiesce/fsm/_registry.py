"""The registry of named tables that the CLI lists and draws.

Packages that declare tables (the protocol, the model examples) register them at import;
`registered()` imports those packages first, so a caller never sees a half-filled registry.
"""

from __future__ import annotations

import importlib
from typing import Any

from quiesce.fsm._errors import QuiesceError
from quiesce.fsm._table import Table

__all__ = ["UnknownTable", "get_table", "register", "registered"]

# Packages whose import registers tables, in listing order.
_PROVIDERS = ("quiesce.protocol",)
_TABLES: dict[str, Table[Any, Any]] = {}


class UnknownTable(QuiesceError):
    """No table is registered under `name`; `known` lists the names that are."""

    def __init__(self, name: str, known: list[str]) -> None:
        self.name = name
        self.known = known
        super().__init__(f"no table named {name!r}; known tables: {', '.join(known)}")


def register(table: Table[Any, Any]) -> Table[Any, Any]:
    """Register `table` under its name (a second table with the same name is an error)."""
    existing = _TABLES.get(table.name)
    if existing is not None and existing is not table:
        raise ValueError(f"a different table is already registered as {table.name!r}")
    _TABLES[table.name] = table
    return table


def registered() -> dict[str, Table[Any, Any]]:
    """Every registered table by name, in registration order."""
    for provider in _PROVIDERS:
        importlib.import_module(provider)
    return dict(_TABLES)


def get_table(name: str) -> Table[Any, Any]:
    """The registered table called `name`, or `UnknownTable` listing the known names."""
    tables = registered()
    if name not in tables:
        raise UnknownTable(name, list(tables))
    return tables[name]
