"""Lint, format and type checks run with the test suite, so CI enforces them."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import ROOT


@pytest.mark.parametrize(
    "command",
    [
        ["ruff", "check", "edgespec", "tests", "scripts"],
        ["ruff", "format", "--check", "edgespec", "tests", "scripts"],
        ["mypy"],
    ],
    ids=["ruff", "ruff-format", "mypy"],
)
def test_static_checks(command: list[str]) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", *command], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
