"""The package's layers only point down: its rooms (a top-level module, or a top-level folder
taken whole) import each other without a loop, counting every import, those made inside a
function or only for type checking too (a lazy import is still a dependency)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import edgespec

PACKAGE = Path(edgespec.__file__).parent


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def _imported(path: Path) -> Iterator[str]:
    """Every edgespec module that `path` imports, wherever the import stands."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from edgespec import paths` imports a module; `from edgespec import X` a name of
            # the package's face.
            inside = [f"{node.module}.{alias.name}" for alias in node.names]
            names = [name if name in MODULES else node.module for name in inside]
        else:
            continue
        yield from (name for name in names if name.split(".")[0] == "edgespec")


def _room(module: str) -> str:
    """`edgespec.planner.plan` -> `planner`; `edgespec.api` -> `api`; the face -> `__init__`."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _graph(room_of: dict[str, str]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {room: set() for room in room_of.values()}
    for module, path in MODULES.items():
        for imported in _imported(path):
            while imported not in MODULES:  # `edgespec.options.DrafterKind`: its module
                imported = imported.rpartition(".")[0]
            if room_of[imported] != room_of[module]:
                graph[room_of[module]].add(room_of[imported])
    return graph


def _loop(graph: dict[str, set[str]]) -> list[str] | None:
    """One loop of the graph (its rooms in order), or None."""
    done: set[str] = set()

    def visit(room: str, path: list[str]) -> list[str] | None:
        if room in path:
            return [*path[path.index(room) :], room]
        if room in done:
            return None
        for nxt in sorted(graph[room]):
            found = visit(nxt, [*path, room])
            if found is not None:
                return found
        done.add(room)
        return None

    for room in sorted(graph):
        found = visit(room, [])
        if found is not None:
            return found
    return None


def test_no_module_imports_another_in_a_loop() -> None:
    graph = _graph({module: module for module in MODULES})
    assert _loop(graph) is None


def test_the_packages_rooms_only_point_down() -> None:
    graph = _graph({module: _room(module) for module in MODULES})
    assert _loop(graph) is None


def test_the_low_rooms_know_nothing_of_the_high_ones() -> None:
    """The arrows that ran back up: `auto` priced rounds with the planner's cost model,
    llama.cpp's adapter took device facts from the planner, the models package made files
    through the adapter, and the doctor's report sat among the build checks that loading uses."""
    graph = _graph({module: _room(module) for module in MODULES})
    never = [
        ("auto", "planner"),
        ("engine", "auto"),
        ("llamacpp", "planner"),
        ("models", "llamacpp"),
        ("buildcheck", "planner"),
        ("planner", "__init__"),
        ("api", "__init__"),
    ]
    assert [pair for pair in never if pair[1] in graph[pair[0]]] == []
