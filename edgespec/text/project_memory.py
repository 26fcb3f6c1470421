"""`--memory DIR`: a project's past generations on this disk, for suffix drafts: one JSONL file
per target model (token ids mean nothing to another vocabulary), a generation's prompt and
answer tokens a line, newest last, appended under a file lock so processes can share it."""

from __future__ import annotations

import json
import logging
import os
import tempfile
from pathlib import Path

from filelock import FileLock, Timeout

from edgespec.errors import ConfigError

MAX_TOKENS = 1 << 20  # about 7 MB of JSON
log = logging.getLogger(__name__)


class ProjectMemory:
    def __init__(self, folder: Path, model_key: str, max_tokens: int = MAX_TOKENS) -> None:
        if folder.exists() and not folder.is_dir():
            raise ConfigError(f"--memory {folder} is a file; give a folder")
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ConfigError(f"--memory {folder} cannot be created: {e.strerror}") from None
        self.path = folder / f"{model_key[:24]}.jsonl"
        self.max_tokens = max_tokens
        self._lock = FileLock(str(self.path) + ".lock", timeout=30)
        self._unwritable = False

    def load(self) -> list[list[int]]:
        """The newest generations that fit the cap (a damaged line is skipped)."""
        try:
            # Bytes: a line that is not UTF-8 is one damaged line, not a failed load.
            lines = self.path.read_bytes().splitlines()
        except FileNotFoundError:
            return []
        except OSError as e:
            raise ConfigError(f"--memory {self.path} cannot be read: {e.strerror}") from None
        docs: list[list[int]] = []
        total = 0
        for line in reversed(lines):
            doc = _parse(line)
            if doc is None:
                continue
            if total + len(doc) > self.max_tokens:
                break
            docs.append(doc)
            total += len(doc)
        return docs[::-1]

    def add(self, doc: list[int]) -> None:
        """Keep one more generation. A memory that cannot be written is logged once, not
        raised: the answer is made already."""
        if self._unwritable:
            return
        try:
            with self._lock:
                self._append(json.dumps(doc, separators=(",", ":")) + "\n")
        except (OSError, Timeout) as e:
            self._unwritable = True
            why = e.strerror if isinstance(e, OSError) else "its lock is held"
            log.warning("edgespec: --memory %s cannot be written (%s); not kept", self.path, why)

    def _append(self, line: str) -> None:
        with self.path.open("a+b") as f:
            # After a write cut short (a crash, a full disk), start a line of our own, or the
            # two would be one damaged line. (Appends go to the end wherever the file was read.)
            end = f.seek(0, os.SEEK_END)
            if end:
                f.seek(end - 1)
                if f.read(1) != b"\n":
                    line = "\n" + line
            f.write(line.encode("utf-8"))
        if self.path.stat().st_size > 16 * self.max_tokens:  # well over: compact
            kept = self.load()
            text = "".join(json.dumps(d, separators=(",", ":")) + "\n" for d in kept)
            # A fresh name, never a fixed one another user could plant as a link.
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=self.path.name, suffix=".tmp")
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as f:
                    f.write(text)
                os.replace(tmp, self.path)
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
