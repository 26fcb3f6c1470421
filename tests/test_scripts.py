"""Every maintained tool (each .py under benchmarks/ and scripts/) imports with nothing run but
its definitions and has a `main`, and keeps to edgespec's public face: from edgespec it takes
only the names in `edgespec.__all__` (the rest it gets from the `edgespec` command), and it
never inserts into sys.path, imports unittest.mock, patches, or writes into edgespec's objects.
The experiments are in the lab archive (lab/README.md), which nothing here checks."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import edgespec
from tests.script_module import load_file

ROOT = Path(__file__).resolve().parents[1]
TOOLS = sorted(
    path for folder in ("benchmarks", "scripts") for path in (ROOT / folder).rglob("*.py")
)
PUBLIC = set(edgespec.__all__)


def _name(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _main_guard(node: ast.stmt) -> bool:
    """`if __name__ == "__main__": ...` (with more conditions too), or `if TYPE_CHECKING:`."""
    if not isinstance(node, ast.If):
        return False
    test = ast.unparse(node.test)
    return "__name__ == '__main__'" in test or test == "TYPE_CHECKING"


DEFINITIONS = (
    *(ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef),
    *(ast.Assign, ast.AnnAssign),
)


def top_level_runs(source: str) -> list[str]:
    """The statements at a module's top level that are not a docstring, an import, a
    definition, an assignment or the `__main__` guard: what importing it would run."""
    body = ast.parse(source).body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    return [
        f"line {node.lineno}: {ast.unparse(node).splitlines()[0]}"
        for node in body
        if not isinstance(node, DEFINITIONS) and not _main_guard(node)
    ]


def _helper(path: Path) -> bool:
    """A module that a tool beside it imports (serve_load.py's clients): run through that tool,
    it has no `main` of its own."""
    imported = re.compile(rf"^\s*(import|from) {re.escape(path.stem)}\b", re.M)
    return any(
        imported.search(other.read_text()) for other in path.parent.glob("*.py") if other != path
    )


@pytest.mark.parametrize("path", TOOLS, ids=_name)
def test_every_tool_imports_runs_nothing_and_has_a_main(path: Path) -> None:
    """Imported as Python runs it (its own folder first on sys.path, for the modules beside
    it), nothing runs but its definitions, and `main` is what running it calls."""
    source = path.read_text()
    assert top_level_runs(source) == []
    module = load_file(path)
    if _helper(path) and 'if __name__ == "__main__":' not in source:
        return
    assert callable(getattr(module, "main", None)), f"{_name(path)} has no main()"
    assert 'if __name__ == "__main__":' in source


def _from_edgespec(tree: ast.AST) -> set[str]:
    """The names bound to edgespec's objects by imports (`from edgespec import Speculator`)
    and the names the package itself is bound to (`import edgespec as es`)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {
                (a.asname or a.name).split(".")[0]
                for a in node.names
                if a.name.split(".")[0] == "edgespec"
            }
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "edgespec":
            names |= {a.asname or a.name for a in node.names}
    return names


def not_public(source: str) -> list[str]:
    """Where `source` takes from edgespec a name its `__all__` does not hold: a submodule
    (`from edgespec.engine import x`, `import edgespec.api`), a name the face does not export,
    or a private attribute (`_x`) of anything edgespec made."""
    tree = ast.parse(source)
    package = set()
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("edgespec."):
                    found.append(f"line {node.lineno}: imports {a.name}")
                elif a.name == "edgespec":
                    package.add(a.asname or a.name)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "edgespec":
            if node.module != "edgespec":
                found.append(f"line {node.lineno}: imports from {node.module}")
            found += [
                f"line {node.lineno}: imports {a.name}" for a in node.names if a.name not in PUBLIC
            ]
    theirs = _theirs(tree)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        if isinstance(node.value, ast.Name) and node.value.id in package:
            if node.attr not in PUBLIC:
                found.append(f"line {node.lineno}: reads {ast.unparse(node)}")
        elif _hidden(node.attr) and set(_made_of(node.value)[:1]) & theirs:
            found.append(f"line {node.lineno}: reads {ast.unparse(node)}")
    return found


def _hidden(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _made_of(value: ast.expr) -> list[str]:
    """The names an expression's object comes out of: `a` for `a`, `a.b`, `a[i]`, `a.f(x)`
    and `a(x).y` (not the arguments: `Server(Config(app))` is uvicorn's, not the app's)."""
    if isinstance(value, (ast.Tuple, ast.List)):
        return [n for item in value.elts for n in _made_of(item)]
    while isinstance(value, (ast.Call, ast.Attribute, ast.Subscript, ast.Await)):
        value = value.func if isinstance(value, ast.Call) else value.value
    return [value.id] if isinstance(value, ast.Name) else []


def _bound(target: ast.expr) -> list[str]:
    """The names an assignment binds (not the objects whose attributes it sets)."""
    if isinstance(target, (ast.Tuple, ast.List)):
        return [n for item in target.elts for n in _bound(item)]
    return [target.id] if isinstance(target, ast.Name) else []


def _theirs(tree: ast.AST) -> set[str]:
    """The names that hold edgespec's classes and functions and the objects they made: what
    they return (`spec = Speculator.load(...)`), what is drawn from them (`for event in
    spec.stream(...)`) and parameters annotated with their types."""
    names = _from_edgespec(tree)
    grown = True
    while grown:  # until no assignment adds a name
        before = len(names)
        for node in ast.walk(tree):
            targets: list[ast.expr] = []
            if isinstance(node, ast.Assign) and set(_made_of(node.value)) & names:
                targets = node.targets
            elif isinstance(node, ast.For) and set(_made_of(node.iter)) & names:
                targets = [node.target]
            names |= {n for t in targets for n in _bound(t)}
            annotation = node.annotation if isinstance(node, ast.arg) else None
            if isinstance(node, ast.arg) and annotation and _names(annotation) & names:
                names.add(node.arg)
        grown = len(names) > before
    return names


def _names(expression: ast.expr) -> set[str]:
    return {n.id for n in ast.walk(expression) if isinstance(n, ast.Name)}


def _written(target: ast.expr) -> list[tuple[ast.Attribute, str]]:
    """The attributes an assignment to `target` writes into (`a.b = ...`, `a.b[i] = ...`,
    `a.b.c = ...`, in tuples of targets too), each with the name at its root."""
    if isinstance(target, (ast.Tuple, ast.List)):
        return [a for item in target.elts for a in _written(item)]
    if isinstance(target, ast.Starred):
        return _written(target.value)
    found, node = [], target
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        if isinstance(node, ast.Attribute):
            found.append(node)
        node = node.value
    return [(found[0], node.id)] if found and isinstance(node, ast.Name) else []


PATCHES = ("setattr", "delattr", "monkeypatch.setattr", "site.addsitedir")
SYS_PATH = re.compile(r"^sys\.path\.(insert|append|extend|__setitem__|__iadd__)$")


def _targets(node: ast.AST) -> list[ast.expr]:
    """What an assignment statement assigns to (nothing for another kind of node)."""
    if isinstance(node, ast.Assign):
        return node.targets
    if isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        return [node.target]
    return []


def attributes_assigned(node: ast.AST) -> list[tuple[ast.Attribute, str]]:
    """The attributes an assignment statement writes into, each with the name at its root
    (none for another kind of node)."""
    return [written for target in _targets(node) for written in _written(target)]


def patches(source: str) -> list[str]:
    """Where `source` changes what it did not make: an attribute of an edgespec object
    assigned, a patch (setattr, monkeypatch, unittest.mock), or sys.path."""
    tree = ast.parse(source)
    theirs = _theirs(tree)
    found = []
    for node in ast.walk(tree):
        for attribute, root in attributes_assigned(node):
            if root in theirs:
                found.append(f"line {attribute.lineno}: assigns {ast.unparse(attribute)}")
        found += [f"line {node.lineno}: changes sys.path" for t in _targets(node) if _sys_path(t)]
        if isinstance(node, ast.Call):
            found += [f"line {node.lineno}: {what}" for what in _patch_call(node, theirs)]
        if _imports_mock(node):
            found.append(f"line {getattr(node, 'lineno', 0)}: imports unittest.mock")
    return sorted(found, key=lambda what: int(what.split()[1].rstrip(":")))


def _patch_call(call: ast.Call, theirs: set[str]) -> list[str]:
    """A call that patches: setattr, monkeypatch, sys.path's insert or append, or a change to
    the `__dict__` of something edgespec made (`x.__dict__.pop(...)`)."""
    called = ast.unparse(call.func)
    if called in PATCHES or SYS_PATH.match(called):
        return [called]
    inner = call.func.value if isinstance(call.func, ast.Attribute) else None
    if isinstance(inner, ast.Attribute) and inner.attr == "__dict__":
        return [f"changes {ast.unparse(inner)}"] if set(_made_of(inner.value)) & theirs else []
    return []


def _imports_mock(node: ast.AST) -> bool:
    if isinstance(node, ast.Import):
        return any(a.name == "unittest.mock" for a in node.names)
    if isinstance(node, ast.ImportFrom):
        mock = node.module == "unittest" and any(a.name == "mock" for a in node.names)
        return mock or node.module == "unittest.mock"
    return False


def _sys_path(target: ast.expr) -> bool:
    """`sys.path = ...`, `sys.path[i:j] = ...`, `sys.path += ...`."""
    while isinstance(target, ast.Subscript):
        target = target.value
    return ast.unparse(target) == "sys.path"


@pytest.mark.parametrize("path", TOOLS, ids=_name)
def test_no_tool_takes_what_edgespec_does_not_export(path: Path) -> None:
    assert not_public(path.read_text()) == []


@pytest.mark.parametrize("path", TOOLS, ids=_name)
def test_no_tool_patches_or_writes_into_what_it_did_not_make(path: Path) -> None:
    assert patches(path.read_text()) == []


def test_the_checks_find_what_tools_once_did() -> None:
    # benchmarks/zen5/tau_all.py, overhead.py and compare_llamacpp.py before they were moved
    # out of the tree or onto the public face.
    assert not_public("from edgespec.planner import calibrate as C\nC._batch_costs(t, c)\n") == [
        "line 1: imports from edgespec.planner",
        "line 1: imports calibrate",
        "line 2: reads C._batch_costs",
    ]
    assert not_public("from edgespec import Speculator, _moved, top_two\n") == [
        "line 1: imports _moved",
        "line 1: imports top_two",
    ]
    assert not_public("import edgespec.api\n") == ["line 1: imports edgespec.api"]
    assert not_public("import edgespec as es\nes.Speculator\nes.options\n") == [
        "line 3: reads es.options"
    ]
    spec = "from edgespec import Speculator\nspec = Speculator.load()\n"
    assert not_public(spec + "spec._draft_cache.reset()\n") == ["line 3: reads spec._draft_cache"]
    assert not_public(spec + "spec.session.last_stats\n") == []
    assert not_public("class A:\n    def f(self) -> None:\n        self._x = 1\n") == []
    # benchmarks/serve/load.py, overhead.py and a replay script before them.
    assert patches("import sys\nsys.path.insert(0, here)\n") == ["line 2: sys.path.insert"]
    assert patches("sys.path.append(here)\nsys.path[:0] = [here]\nsys.path += [x]\n") == [
        "line 1: sys.path.append",
        "line 2: changes sys.path",
        "line 3: changes sys.path",
    ]
    assert patches("from unittest import mock\n") == ["line 1: imports unittest.mock"]
    assert patches("import unittest.mock\n") == ["line 1: imports unittest.mock"]
    assert patches("from unittest.mock import patch\n") == ["line 1: imports unittest.mock"]
    assert patches(spec + "spec.session.generate = timed\n") == [
        "line 3: assigns spec.session.generate"
    ]
    assert patches(spec + "spec.plan.calibration[0] = 1\n") == [
        "line 3: assigns spec.plan.calibration"
    ]
    assert patches("import edgespec\nedgespec.K_MAX = 64\n") == ["line 2: assigns edgespec.K_MAX"]
    assert patches("setattr(spec, 'target', x)\n") == ["line 1: setattr"]
    assert patches(spec + "spec.__dict__.pop('target')\n") == ["line 3: changes spec.__dict__"]
    typed = "from edgespec import Speculator\ndef f(spec: Speculator) -> None:\n"
    assert patches(typed + "    spec.target = None\n")
    drawn = "from edgespec import Speculator as S\nfor e in S.load().stream(p):\n"
    assert patches(drawn + "    e.token = 1\n")
    # Its own objects, its own dictionaries and argparse's namespace are the tool's.
    mine = "class A:\n    def f(self) -> None:\n        self.x = 1\nargs.suite = []\n"
    assert patches(mine + "sessions[p.session] = answer\nfound[s].x = 1\nprint(sys.path)\n") == []
    assert top_level_runs('"""doc"""\nimport x\nX = f()\nmain()\nif __name__ == "__main__":\n'
                          "    main()\n") == ["line 4: main()"]  # fmt: skip
