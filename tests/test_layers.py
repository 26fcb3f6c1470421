"""The package's layers only point down: its rooms (a top-level module, or a top-level folder
taken whole) import each other without a loop, and only rooms below them in docs/design.md's
table of layers, counting every import, those made inside a function or only for type checking
too (a lazy import is still a dependency)."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import edgespec

PACKAGE = Path(edgespec.__file__).parent
DESIGN = Path(__file__).resolve().parents[1] / "docs" / "design.md"


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


def layers(text: str) -> dict[str, int]:
    """design.md's table of layers: each room (`cli/` -> cli, `api.py` -> api) and its layer."""
    rows = re.findall(r"^\| (\d+) \| `([\w.]+?)(?:/|\.py)` \|", text, re.M)
    return {room: int(layer) for layer, room in rows}


def upward(graph: dict[str, set[str]], layer: dict[str, int]) -> list[str]:
    """The imports that do not go to a room of a higher layer number (the table's rooms only)."""
    return [
        f"{room} (layer {layer[room]}) imports {other} (layer {layer[other]})"
        for room in sorted(graph)
        for other in sorted(graph[room])
        if room in layer and other in layer and layer[other] <= layer[room]
    ]


def test_every_import_goes_down_design_md_s_layers() -> None:
    graph = _graph({module: _room(module) for module in MODULES})
    layer = layers(DESIGN.read_text())
    assert sorted(layer) == sorted(graph), "design.md's table lists every room, and only those"
    assert upward(graph, layer) == []


def test_design_md_names_only_modules_that_exist() -> None:
    """A module design.md names in a room (`engine/generate.py`) is there: a split or a move
    that leaves the map behind fails here."""
    named = set(re.findall(r"`(\w+/\w+\.py)`", DESIGN.read_text()))
    inside = [path for path in named if (PACKAGE / path.split("/")[0]).is_dir()]
    assert inside and sorted(p for p in inside if not (PACKAGE / p).is_file()) == []


def test_the_layer_check_finds_an_import_that_climbs() -> None:
    table = (
        "| 1 | `cli/` | x |\n| 2 | `api.py` | y |\n| 2 | `server/` | z |\n| 3 | `errors.py` | e |\n"
    )
    layer = layers(table)
    assert layer == {"cli": 1, "api": 2, "server": 2, "errors": 3}
    graph = {"cli": {"api"}, "api": {"server", "errors"}, "server": set(), "errors": {"cli"}}
    assert upward(graph, layer) == [
        "api (layer 2) imports server (layer 2)",
        "errors (layer 3) imports cli (layer 1)",
    ]
