"""Text input read under a cap: stdin and the files options name (schemas, grammars), read in
chunks and refused at the first chunk past the cap or holding a NUL byte (read whole,
`yes | edgespec run hi` would fill the memory before any size check)."""

from __future__ import annotations

import codecs
from pathlib import Path
from typing import BinaryIO

from edgespec.errors import ConfigError

CHUNK = 1 << 16


def read_text(stream: BinaryIO, limit: int, what: str, raise_it: str = "") -> str:
    """At most `limit` characters of UTF-8 text from `stream`, or a ConfigError naming `what`
    and, past the cap, `raise_it` (how to allow more)."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    parts: list[str] = []
    chars = done = 0
    while True:
        chunk = stream.read(CHUNK)
        if not chunk:
            break
        if b"\x00" in chunk:
            raise ConfigError(f"{what} holds binary data (NUL bytes); give it text")
        pending = len(decoder.getstate()[0])  # the bytes of a character cut by the last chunk
        try:
            text = decoder.decode(chunk)
        except UnicodeDecodeError as exc:
            at = done - pending + exc.start
            raise ConfigError(f"{what} is not UTF-8 text (bad byte at offset {at})") from exc
        done += len(chunk)
        chars += len(text)
        if chars > limit:
            raise ConfigError(f"{what} holds more than {limit:,} characters{raise_it}")
        parts.append(text)
    try:
        parts.append(decoder.decode(b"", final=True))
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{what} is not UTF-8 text (it ends inside a character)") from exc
    return "".join(parts)


def read_file(path: Path, limit: int, what: str, raise_it: str = "") -> str:
    """A file's text under the cap (`read_text`); one that cannot be opened is a ConfigError."""
    try:
        with path.open("rb") as stream:
            return read_text(stream, limit, what, raise_it)
    except OSError as exc:
        raise ConfigError(f"{what}: cannot be read ({exc.strerror or exc})") from exc
