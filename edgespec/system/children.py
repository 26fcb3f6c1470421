"""The command lines of edgespec's child processes (the RPC target, the smoke test)."""

from __future__ import annotations

import sys


def module_command(module: str, *args: str) -> list[str]:
    """`python -m module args` without the current folder on the child's import path: a
    `numpy.py` in the folder where the user runs edgespec must not run in place of numpy."""
    # -P (3.11+) leaves out that folder only; 3.10's -I also PYTHON* and the user's site.
    isolated = "-P" if sys.version_info >= (3, 11) else "-I"
    return [sys.executable, isolated, "-m", module, *args]
