"""The layout is the design: these tests walk every import of the project and hold it to it.

- one public face per package: nothing outside package `x` imports `quiesce.x._anything`
  (a test of `x`, under `tests/x/`, may);
- no import cycle between modules (imports under `TYPE_CHECKING` and inside functions count:
  a cycle hidden there is still a cycle in the design);
- no upward tie: a layer imports only the layers below it, and the controller and the
  participant never import each other;
- one meaning per public name: a name exported by two faces is the same object in both;
- a small face for the embedder: `quiesce.protocol.controller` keeps what one needs, and
  what drivers, checkers and mutants need is in `quiesce.protocol.controller.lowlevel`.
"""

from __future__ import annotations

import ast
import importlib
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "quiesce"

# Lower layers first; a module may import its own layer's package and any layer below.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("quiesce.fsm",),
    ("quiesce.check",),
    ("quiesce.protocol._vocabulary", "quiesce.protocol.wire"),
    ("quiesce.protocol.machines",),
    ("quiesce.protocol.controller", "quiesce.protocol.participant"),
    ("quiesce.protocol",),
    ("quiesce.adapters",),
    ("quiesce.models.projection", "quiesce.models.oracles", "quiesce.testing"),
    ("quiesce.models.design", "quiesce.models.implementation"),
    ("quiesce.models.scenarios",),
    ("quiesce.models.refinement",),
    ("quiesce.models.coverage",),
    ("quiesce.models",),
    ("quiesce.mutants",),
    ("quiesce.harness", "quiesce.explore"),
    ("quiesce.cli", "quiesce.__main__", "quiesce"),
)
# Rooms of one layer that must not know each other.
STRANGERS = {
    ("quiesce.protocol.controller", "quiesce.protocol.participant"),
    ("quiesce.models.design", "quiesce.models.implementation"),
}

# Offences being removed; each fix deletes its line here, and nothing may be added.
PENDING_PRIVATE_IMPORTS: set[str] = set()
PENDING_CYCLES: list[list[str]] = []
PENDING_CLASHES: set[str] = set()


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _package_of(path: Path) -> str:
    """The package a file belongs to: its own name for an `__init__`, else its folder's."""
    name = _module_name(path)
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def _imports(path: Path) -> Iterator[tuple[int, str]]:
    """Every `quiesce` module `path` imports, with the line, at any depth of the file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] == "quiesce":
                yield node.lineno, node.module
                for alias in node.names:  # `from quiesce.x import _y` imports module `_y`
                    candidate = f"{node.module}.{alias.name}"
                    if (PACKAGE.parent / (candidate.replace(".", "/") + ".py")).exists():
                        yield node.lineno, candidate
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "quiesce":
                    yield node.lineno, alias.name


def _sources(*roots: str) -> list[Path]:
    return sorted(p for root in roots for p in (ROOT / root).rglob("*.py"))


def _private_owner(module: str) -> str | None:
    """`quiesce.a._b.c` -> `quiesce.a` (the package whose private part it is), else None."""
    parts = module.split(".")
    for index, part in enumerate(parts):
        if part.startswith("_") and not part.startswith("__"):
            return ".".join(parts[:index])
    return None


def _inside(package: str, owner: str) -> bool:
    return package == owner or package.startswith(owner + ".")


def test_no_module_imports_another_packages_private_module() -> None:
    offences: dict[str, int] = {}  # "file imports module" -> line
    for path in _sources("quiesce", "tests", "benchmarks"):
        relative = path.relative_to(ROOT)
        here = _package_of(path)
        if relative.parts[0] == "tests" and len(relative.parts) > 2:
            here = "quiesce." + ".".join(relative.parts[1:-1])  # tests/x/... test quiesce.x
        for line, module in _imports(path):
            owner = _private_owner(module)
            if owner is not None and not _inside(here, owner):
                offences.setdefault(f"{relative} imports {module}", line)
    unexpected = sorted(
        f"{o} (line {n})" for o, n in offences.items() if o not in PENDING_PRIVATE_IMPORTS
    )
    assert unexpected == [], "\n".join(unexpected)
    fixed = PENDING_PRIVATE_IMPORTS - set(offences)
    assert fixed == set(), f"fixed: delete them from PENDING_PRIVATE_IMPORTS: {fixed}"


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = defaultdict(set)
    for path in _sources("quiesce"):
        graph[_module_name(path)].update(module for _, module in _imports(path))
    return graph


def test_no_import_cycles() -> None:
    graph = _graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    assert sorted(cycles) == PENDING_CYCLES, cycles


def _layer(module: str) -> tuple[int, str]:
    """(rank, room) of a module: the deepest layer entry it falls under."""
    best: tuple[int, str] | None = None
    for rank, rooms in enumerate(LAYERS):
        for room in rooms:
            name = room.replace("._vocabulary", "")
            vocabulary = room.endswith("._vocabulary")
            if vocabulary:
                hit = module.startswith(name + "._") and module.count(".") == name.count(".") + 1
            else:
                hit = _inside(module, room)
            if hit and (best is None or len(room) > len(best[1])):
                best = (rank, room)
    assert best is not None, f"{module} is in no layer: add it to LAYERS"
    return best


def test_no_upward_ties_and_strangers_stay_apart() -> None:
    offences = []
    for source, targets in sorted(_graph().items()):
        rank, room = _layer(source)
        for target in sorted(targets):
            target_rank, target_room = _layer(target)
            if target_rank > rank:
                offences.append(f"{source} ({room}) imports {target} ({target_room}), above it")
            if (room, target_room) in STRANGERS or (target_room, room) in STRANGERS:
                offences.append(f"{source} imports {target}: {room} and {target_room} never meet")
    assert offences == [], "\n".join(offences)


def _faces() -> list[str]:
    """Every public module: packages and non-underscore modules, none below a private one."""
    names = []
    for path in _sources("quiesce"):
        name = _module_name(path)
        if _private_owner(name) is None and name != "quiesce.__main__":
            names.append(name)
    return names


def test_every_face_declares_all_and_exports_what_it_declares() -> None:
    for name in _faces():
        module = importlib.import_module(name)
        exported = getattr(module, "__all__", None)
        assert exported is not None, f"{name} has no __all__"
        missing = [item for item in exported if not hasattr(module, item)]
        assert missing == [], f"{name}.__all__ names what it lacks: {missing}"
        assert len(set(exported)) == len(exported), f"{name}.__all__ repeats a name"


def test_one_meaning_per_public_name() -> None:
    meanings: dict[str, dict[int, list[str]]] = defaultdict(lambda: defaultdict(list))
    for name in _faces():
        module = importlib.import_module(name)
        for item in getattr(module, "__all__", ()):
            value = getattr(module, item)
            if isinstance(value, type(module)):
                continue  # a submodule re-exported by its parent
            meanings[item][id(value)].append(name)
    clashes = {
        item: sorted(where for places in by_id.values() for where in places)
        for item, by_id in meanings.items()
        if len(by_id) > 1
    }
    assert set(clashes) == PENDING_CLASHES, clashes


@pytest.mark.parametrize("name", ["quiesce.fsm", "quiesce.protocol.machines"])
def test_lower_layers_import_nothing_of_the_layers_above(name: str) -> None:
    rank, _ = _layer(name)
    for source, targets in _graph().items():
        if _inside(source, name):
            assert all(_layer(target)[0] <= rank for target in targets), source


# The most names the controller's face may have: an embedder's handful, never the driver's.
CONTROLLER_FACE_LIMIT = 30


def test_the_controller_face_is_small_and_the_rest_is_low_level() -> None:
    face = importlib.import_module("quiesce.protocol.controller")
    lowlevel = importlib.import_module("quiesce.protocol.controller.lowlevel")
    assert "quiesce.protocol.controller.lowlevel" in _faces()
    assert face.lowlevel is lowlevel and "lowlevel" in face.__all__
    assert len(face.__all__) <= CONTROLLER_FACE_LIMIT, (
        f"quiesce.protocol.controller exports {len(face.__all__)} names: a name an embedder "
        "does not need belongs in quiesce.protocol.controller.lowlevel"
    )
    assert lowlevel.__doc__ and "less stable" in lowlevel.__doc__
    # One home each: a name is in the face or in the low-level face, never in both.
    assert set(face.__all__) & set(lowlevel.__all__) == set()
