"""JSON files in edgespec's cache folder, which concurrent processes, hostile contents and
unwritable folders never stop: what cannot be read is None, writes go under a lock to a
temporary file renamed into place, and an unwritable folder is warned of once."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

LOCK_TIMEOUT_S = 30.0
_warned: set[Path] = set()


def read(path: Path) -> Any | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None


def write(path: Path, doc: Any) -> bool:
    """Write `doc` as JSON; False (after one warning) when the folder cannot be written."""
    return update(path, lambda _: doc)


def update(path: Path, change: Callable[[Any | None], Any]) -> bool:
    """Read, change and write back under the lock, so concurrent updates are not lost."""
    tmp: str | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(path) + ".lock", timeout=LOCK_TIMEOUT_S):
            doc = change(read(path))
            with tempfile.NamedTemporaryFile(
                "w", encoding="utf-8", dir=path.parent, prefix=f".{path.name}.", delete=False
            ) as f:
                tmp = f.name
                json.dump(doc, f, indent=1)
            os.replace(tmp, path)
            tmp = None
        return True
    except (OSError, Timeout) as exc:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        _warn_once(path.parent, exc)
        return False


def _warn_once(folder: Path, exc: BaseException) -> None:
    if folder in _warned:
        return
    _warned.add(folder)
    reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
    sys.stderr.write(
        f"edgespec: warning: cannot write the cache in {folder} ({reason}); going on without it\n"
    )
