"""Issue 53's goal: no object of `auto` is written into by code outside `edgespec/auto/` once
it is built. Outside `auto/`, no attribute is assigned on a name that holds one of `auto`'s
objects: a name imported from `edgespec.auto`, what those make or hand out, and what a
Speculator holds for `auto` (`auto_learned`)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.test_scripts import _bound, _made_of, attributes_assigned

ROOT = Path(__file__).resolve().parents[1]
OUTSIDE = sorted(
    p for p in (ROOT / "edgespec").rglob("*.py") if "auto" not in p.relative_to(ROOT).parts
)
HOLDERS = {"auto_learned"}  # a Speculator's attribute that holds what `auto` learned


def _holds_auto(value: ast.expr, names: set[str]) -> bool:
    attrs = {n.attr for n in ast.walk(value) if isinstance(n, ast.Attribute)}
    return bool(set(_made_of(value)) & names or attrs & HOLDERS)


def auto_writes(source: str) -> list[str]:
    tree = ast.parse(source)
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("edgespec.auto"):
            names |= {a.asname or a.name for a in node.names}
    grown = True
    while grown:  # until no assignment adds a name
        before = len(names)
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and _holds_auto(node.value, names):
                names |= {n for t in node.targets for n in _bound(t)}
        grown = len(names) > before
    found = []
    for node in ast.walk(tree):
        for attribute, root in attributes_assigned(node):
            through = {n.attr for n in ast.walk(attribute) if isinstance(n, ast.Attribute)}
            if root in names or (through - {attribute.attr}) & HOLDERS:
                found.append(f"line {attribute.lineno}: assigns {ast.unparse(attribute)}")
    return found


@pytest.mark.parametrize("path", OUTSIDE, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_outside_auto_writes_into_autos_objects(path: Path) -> None:
    assert auto_writes(path.read_text()) == []


def test_the_check_sees_the_setters_that_were_removed() -> None:
    # What bench/runner.py did before issue 53: a policy's field set after `stream` returned.
    old = (
        "from edgespec.auto.policy import AdaptiveDraftLength\n"
        "policy = AdaptiveDraftLength(costs)\n"
        "policy.tree_width = 3\n"
        "spec.auto_learned.costs.step_s = 0.1\n"
    )
    assert auto_writes(old) == [
        "line 3: assigns policy.tree_width",
        "line 4: assigns spec.auto_learned.costs.step_s",
    ]
