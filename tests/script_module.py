"""The project's tools (scripts/*.py, benchmarks/**/*.py) loaded as modules, for their tests."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def load_script(name: str) -> ModuleType:
    return load_file(SCRIPTS / f"{name}.py")


def load_file(path: Path) -> ModuleType:
    """The script at `path` as a module named for its file, registered in sys.modules (its
    dataclasses look their module up there while they are defined), loaded as Python runs a
    script: with its own folder first on sys.path, for the modules beside it it imports."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    sys.path.insert(0, str(path.parent))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(path.parent))
    return module
