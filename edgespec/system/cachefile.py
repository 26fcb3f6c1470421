"""JSON files in edgespec's cache folder, which concurrent processes, hostile contents and
unwritable folders never stop: what cannot be read is None, writes go under a lock to a
temporary file renamed into place (`partial`, which the model store uses too), and an
unwritable folder is warned of once."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
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
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(path) + ".lock", timeout=LOCK_TIMEOUT_S), partial(path) as tmp:
            tmp.write_text(json.dumps(change(read(path)), indent=1), encoding="utf-8")
            os.replace(tmp, path)
        return True
    except (OSError, Timeout) as exc:
        _warn_once(path.parent, exc)
        return False


@contextmanager
def partial(target: Path) -> Iterator[Path]:
    """A temporary file beside `target` with a name of its own (`.NAME.*.incomplete`), moved
    into place by the caller or removed on failure."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".incomplete")
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def file_key(path: Path) -> str:
    """One version of a file, for a cache kept under it: its real path, size and mtime."""
    stat = path.stat()
    return f"{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}"


def _warn_once(folder: Path, exc: BaseException) -> None:
    if folder in _warned:
        return
    _warned.add(folder)
    reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
    sys.stderr.write(
        f"edgespec: warning: cannot write the cache in {folder} ({reason}); going on without it\n"
    )
