"""Real clients of `serve` that cannot share the dev environment (their own pins): each gets a
virtual environment of its own under the user's cache folder, made once from the package index
as pip is configured here."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def client_environment(name: str, requirement: str) -> Path:
    """The environment's folder, with `requirement` installed (again only when it changes)."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    home = cache / "edgespec-tests" / name
    done = home / "installed.txt"
    if done.exists() and done.read_text() == requirement:
        return home
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(home)], check=True)
    pip = [str(home / "bin" / "python"), "-m", "pip", "install", "--quiet", requirement]
    proc = subprocess.run(pip, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, f"{requirement} did not install: {proc.stderr[-4000:]}"
    done.write_text(requirement)
    return home
