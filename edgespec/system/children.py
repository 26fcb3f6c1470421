"""The command lines of edgespec's own child processes (the target on RPC servers, the smoke
test)."""

from __future__ import annotations

import sys


def module_command(module: str, *args: str) -> list[str]:
    """`python -m module args` without the current folder on the child's import path: a
    `numpy.py` in the folder where the user runs edgespec must not run in place of numpy."""
    # -P (Python 3.11+) leaves out that folder only; 3.10 has -I, which also leaves out the
    # PYTHON* variables and the user's site-packages.
    isolated = "-P" if sys.version_info >= (3, 11) else "-I"
    return [sys.executable, isolated, "-m", module, *args]
