"""Lint, format and type checks run with the test suite, so CI enforces them."""

from __future__ import annotations

import ast
import subprocess
import sys

import pytest

from tests.conftest import ROOT


@pytest.mark.parametrize(
    "command",
    [
        ["ruff", "check", "edgespec", "tests", "scripts", "benchmarks"],
        ["ruff", "format", "--check", "edgespec", "tests", "scripts", "benchmarks"],
        ["mypy"],
    ],
    ids=["ruff", "ruff-format", "mypy"],
)
def test_static_checks(command: list[str]) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", *command], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_no_function_is_longer_than_60_lines() -> None:
    """Past a screenful a function does several things; split it where the split says what."""
    long = []
    for path in sorted((ROOT / "edgespec").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                assert node.end_lineno is not None
                lines = node.end_lineno - node.lineno + 1
                if lines > 60:
                    long.append(f"{path.relative_to(ROOT)}:{node.name} {lines} lines")
    assert not long


def test_no_function_is_kept_short_by_packing_its_lines() -> None:
    """`# fmt: skip` may keep a data table aligned (a module-level literal), never pack a
    call's arguments so that a function passes the length rule above."""
    packed = []
    for path in sorted((ROOT / "edgespec").rglob("*.py")):
        for number, line in enumerate(path.read_text("utf-8").splitlines(), 1):
            if line.endswith("# fmt: skip") and not line.startswith(("}", "]")):
                packed.append(f"{path.relative_to(ROOT)}:{number}")
    assert not packed
