"""`--memory DIR`: a project's past generations on this disk, for suffix drafts: one JSONL file
per target model (token ids mean nothing to another vocabulary), a generation's prompt and
answer tokens a line, newest last, appended under a file lock so processes can share it. The
operator's texts (`edgespec run`, a server's with --shared-memory) are DIR's own file; each
server client's are in `clients/`, under a digest of who it is, read by that client alone."""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import logging
import os
import queue
import tempfile
import threading
from collections.abc import Hashable
from pathlib import Path

from filelock import FileLock, Timeout

from edgespec.errors import ConfigError

MAX_TOKENS = 1 << 20  # about 7 MB of JSON
CLIENT_MAX_TOKENS = 1 << 18  # a client's own: what auto keeps of one client (auto/config.py)
PENDING = 256  # generations waiting to be written before more are dropped (a guess)
CLIENTS = "clients"  # the folder of the clients' own files; a DIR without it predates them
UNATTRIBUTED = "unattributed"  # where a server sets apart texts of clients it cannot tell apart
log = logging.getLogger(__name__)


class ProjectMemory:
    def __init__(self, folder: Path, model_key: str, max_tokens: int = MAX_TOKENS) -> None:
        if folder.exists() and not folder.is_dir():
            raise ConfigError(f"--memory {folder} is a file; give a folder")
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ConfigError(f"--memory {folder} cannot be created: {e.strerror}") from None
        if not any(folder.glob("*.jsonl")):  # a new DIR: clients' texts kept apart from the start
            with contextlib.suppress(OSError):
                (folder / CLIENTS).mkdir(exist_ok=True)
        self.folder = folder
        self.model_key = model_key[:24]
        self.path = folder / f"{self.model_key}.jsonl"
        self.max_tokens = max_tokens
        self._unwritable = False

    def client_path(self, client: Hashable) -> Path:
        """Where `client`'s own texts are (None: the operator's, DIR's own file); named by a
        digest of its repr, which must not change across runs (a server's: strings)."""
        if client is None:
            return self.path
        digest = hashlib.sha256(repr(client).encode()).hexdigest()[:32]
        return self.folder / CLIENTS / self.model_key / f"{digest}.jsonl"

    def load(self, client: Hashable = None) -> list[list[int]]:
        """The newest generations that fit the cap (a damaged line is skipped): the operator's,
        or `client`'s own."""
        return _load(self.client_path(client), self._cap(client))

    def _cap(self, client: Hashable) -> int:
        return self.max_tokens if client is None else min(self.max_tokens, CLIENT_MAX_TOKENS)

    def add(self, doc: list[int], client: Hashable = None) -> None:
        """Keep one more generation, the operator's or `client`'s. A memory that cannot be
        written is logged once, not raised: the answer is made already."""
        if self._unwritable:
            return
        path = self.client_path(client)
        line = json.dumps(doc, separators=(",", ":")) + "\n"
        try:
            if client is not None:
                path.parent.mkdir(parents=True, exist_ok=True)
            with FileLock(str(path) + ".lock", timeout=30):
                _append(path, line, self._cap(client))
        except (OSError, Timeout) as e:
            self._unwritable = True
            why = e.strerror if isinstance(e, OSError) else "its lock is held"
            log.warning("edgespec: --memory %s cannot be written (%s); not kept", path, why)


class Writer:
    """A memory's `add` on a thread of its own, in order: the engine hands a finished generation
    over within its pass's lock, and a write may wait 30 s for the file's lock or compact it.
    At most PENDING wait (more are dropped, logged once); `flush` waits for them, as exit does."""

    def __init__(self, memory: ProjectMemory) -> None:
        self.memory = memory
        self._pending: queue.Queue[tuple[list[int], Hashable] | threading.Event] = queue.Queue(
            PENDING
        )
        self._thread: threading.Thread | None = None
        self._starting = threading.Lock()
        self._dropped = False

    def add(self, doc: list[int], client: Hashable = None) -> None:
        self._start()
        try:
            self._pending.put_nowait((doc, client))
        except queue.Full:
            if not self._dropped:
                self._dropped = True
                log.warning(
                    "edgespec: --memory %s is behind; generations not kept", self.memory.path
                )

    def flush(self, timeout_s: float = 60.0) -> None:
        """Wait until what was added before is written (or `timeout_s` has passed)."""
        if self._thread is None:
            return
        written = threading.Event()
        self._pending.put(written)
        written.wait(timeout_s)

    def _start(self) -> None:
        with self._starting:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="edgespec-memory", daemon=True
                )
                self._thread.start()
                atexit.register(self.flush)

    def _run(self) -> None:
        while True:
            item = self._pending.get()
            if isinstance(item, threading.Event):
                item.set()
                continue
            try:
                self.memory.add(*item)
            except Exception:  # the answer is made already: logged, never raised
                log.exception("edgespec: --memory %s: a write failed", self.memory.path)


def _load(path: Path, cap: int) -> list[list[int]]:
    try:
        # Bytes: a line that is not UTF-8 is one damaged line, not a failed load.
        lines = path.read_bytes().splitlines()
    except FileNotFoundError:
        return []
    except OSError as e:
        raise ConfigError(f"--memory {path} cannot be read: {e.strerror}") from None
    docs: list[list[int]] = []
    total = 0
    for line in reversed(lines):
        doc = _parse(line)
        if doc is None:
            continue
        if total + len(doc) > cap:
            break
        docs.append(doc)
        total += len(doc)
    return docs[::-1]


def _append(path: Path, line: str, cap: int) -> None:
    with path.open("a+b") as f:
        # After a write cut short (a crash, a full disk), start a line of our own, or the
        # two would be one damaged line. (Appends go to the end wherever the file was read.)
        end = f.seek(0, os.SEEK_END)
        if end:
            f.seek(end - 1)
            if f.read(1) != b"\n":
                line = "\n" + line
        f.write(line.encode("utf-8"))
    if path.stat().st_size > 16 * cap:  # well over: compact
        text = "".join(json.dumps(d, separators=(",", ":")) + "\n" for d in _load(path, cap))
        # A fresh name, never a fixed one another user could plant as a link.
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise


def _parse(line: bytes) -> list[int] | None:
    try:
        doc = json.loads(line)
    except (ValueError, RecursionError):  # not JSON, not UTF-8, or nested too deeply
        return None
    if isinstance(doc, list) and all(isinstance(t, int) and t >= 0 for t in doc):
        return doc
    return None


def set_apart_unattributed(folder: Path) -> list[Path]:
    """Before a server keeps its clients apart in `folder`: the texts of a DIR from before
    (`clients/` missing), whose clients cannot be told apart, moved to `unattributed/`, which
    nobody drafts from, so that no client drafts from another's; the files moved. Moving one
    back into DIR shares it with every client."""
    if not folder.is_dir() or (folder / CLIENTS).exists():
        return []
    older = sorted(folder.glob("*.jsonl"))
    aside = folder / UNATTRIBUTED
    try:
        if older:
            aside.mkdir(exist_ok=True)
        for path in older:
            path.replace(aside / path.name)
        (folder / CLIENTS).mkdir()
    except OSError as e:
        raise ConfigError(f"--memory {folder} cannot be set apart: {e.strerror}") from None
    return [aside / p.name for p in older]
