"""Reading GGUF metadata without loading weights (or llama.cpp): only the token texts and scalar
fields the compatibility check and the memory model need (the `gguf` package parses every
array, seconds for a large vocabulary)."""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from edgespec.errors import FetchError

MAGIC = b"GGUF"
MAX_DIMS = 4  # GGML_MAX_DIMS
MAX_SPLITS = 9999  # split file names carry the count in five digits; llama.cpp's is 16-bit


class GGUFError(FetchError):
    """A file that is not a well-formed GGUF file."""


# A value type's struct format, which numpy reads as the same dtype for arrays.
_SCALARS = {
    0: "<B",
    1: "<b",
    2: "<H",
    3: "<h",
    4: "<I",
    5: "<i",
    6: "<f",
    7: "<?",
    10: "<Q",
    11: "<q",
    12: "<d",
}
_STRING, _ARRAY = 8, 9
_LENGTH = struct.Struct("<Q")
_KEEP_ARRAYS = {"tokenizer.ggml.tokens"}


@dataclass(frozen=True)
class GGUFInfo:
    path: Path
    version: int
    metadata: dict[str, Any]
    tokens: list[bytes] = field(repr=False)
    n_tensors: int = 0
    header_bytes: int = 0
    file_bytes: int = 0

    def get(self, key: str, default: Any = None) -> Any:
        return self.metadata.get(key, default)

    @property
    def architecture(self) -> str:
        return str(self.get("general.architecture", ""))

    def arch(self, key: str, default: Any = None) -> Any:
        """An architecture-scoped field, e.g. arch("block_count") -> qwen2.block_count."""
        return self.get(f"{self.architecture}.{key}", default)

    @property
    def vocab_type(self) -> str:
        return str(self.get("tokenizer.ggml.model", ""))

    @property
    def n_vocab(self) -> int:
        return len(self.tokens)

    @property
    def add_bos(self) -> bool:
        # llama.cpp's defaults when the flag is absent: SentencePiece-style vocabularies add BOS.
        return bool(self.get("tokenizer.ggml.add_bos_token", self.vocab_type in ("llama", "bert")))

    @property
    def add_eos(self) -> bool:
        return bool(self.get("tokenizer.ggml.add_eos_token", self.vocab_type == "t5"))

    @property
    def bos_id(self) -> int | None:
        return self.get("tokenizer.ggml.bos_token_id")

    @property
    def eos_id(self) -> int | None:
        return self.get("tokenizer.ggml.eos_token_id")

    @property
    def weights_bytes(self) -> int:
        """Tensor data in this file and in the other parts of a split model."""
        total = self.file_bytes - self.header_bytes
        count = min(int(self.get("split.count", 1) or 1), MAX_SPLITS)
        if count > 1:
            stem = self.path.name.rsplit("-00001-of-", 1)[0]
            for i in range(2, count + 1):
                part = self.path.with_name(f"{stem}-{i:05d}-of-{count:05d}.gguf")
                if part.exists():
                    total += part.stat().st_size
        return total


class _Cursor:
    """Reads a GGUF header with llama.cpp's rules: every length is checked against the bytes
    left before anything is allocated, so a crafted file is refused, never obeyed."""

    def __init__(self, buf: mmap.mmap, path: Path) -> None:
        self.buf, self.pos, self.path = buf, 0, path

    def fail(self, what: str) -> GGUFError:
        return GGUFError(f"{self.path}: {what}")

    def need(self, n: int) -> None:
        if n < 0 or self.pos + n > len(self.buf):
            raise self.fail(f"truncated at byte {self.pos} (needs {n} more bytes)")

    def unpack(self, fmt: str) -> Any:
        size = struct.calcsize(fmt)
        self.need(size)
        (value,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += size
        return value

    def string(self) -> bytes:
        n = self.unpack("<Q")
        self.need(n)
        data = self.buf[self.pos : self.pos + n]
        self.pos += n
        return bytes(data)

    def strings(self, n: int, *, keep: bool) -> list[bytes] | None:
        """`n` strings, kept or skipped, in one tight loop (a vocabulary and its merges hold
        150,000 each: a `string()` call per item is several times slower)."""
        buf, pos, end = self.buf, self.pos, len(self.buf)
        length = _LENGTH.unpack_from
        out: list[bytes] = []
        for _ in range(n):
            if pos + 8 > end:
                self.pos = pos
                self.need(8)  # raises, naming where the file ends
            (size,) = length(buf, pos)
            start, pos = pos + 8, pos + 8 + size
            if pos > end:
                self.pos = start
                self.need(size)
            if keep:
                out.append(buf[start:pos])
        self.pos = pos
        return out if keep else None

    def value(self, vtype: int, key: str) -> Any:
        if vtype in _SCALARS:
            return self.unpack(_SCALARS[vtype])
        if vtype == _STRING:
            return self.string().decode("utf-8", errors="replace")
        if vtype != _ARRAY:
            raise self.fail(f"unknown value type {vtype} for {key!r}")
        etype, n = self.unpack("<I"), self.unpack("<Q")
        if etype in _SCALARS:
            dtype = np.dtype(_SCALARS[etype])
            self.need(dtype.itemsize * n)
            arr = np.frombuffer(self.buf, dtype=dtype, count=n, offset=self.pos).copy()
            self.pos += dtype.itemsize * n
            return arr
        if etype == _STRING:
            self.need(8 * n)  # each string has at least its length
            return self.strings(n, keep=key in _KEEP_ARRAYS)
        if etype == _ARRAY:
            raise self.fail(f"nested arrays are not allowed ({key!r})")
        raise self.fail(f"unknown array element type {etype} for {key!r}")

    def tensor_infos(self, n_tensors: int) -> None:
        self.need(n_tensors * (8 + 4 + 4 + 8))  # name length, n_dims, type, offset at least
        for _ in range(n_tensors):
            self.string()  # the tensor's name
            n_dims = self.unpack("<I")
            if n_dims > MAX_DIMS:
                raise self.fail(f"a tensor has {n_dims} dimensions (at most {MAX_DIMS})")
            self.need(8 * n_dims + 4 + 8)
            self.pos += 8 * n_dims + 4 + 8


def check_gguf(path: Path) -> None:
    """Refuse missing or non-GGUF files before llama.cpp sees them."""
    if not path.exists():
        raise FetchError(f"model file not found: {path}")
    if not path.is_file():
        raise FetchError(f"not a file: {path}")
    with path.open("rb") as f:
        if f.read(4) != MAGIC:
            raise GGUFError(f"not a GGUF file (bad magic number): {path}")


def _metadata(cur: _Cursor, n_kv: int) -> dict[str, Any]:
    cur.need(n_kv * (8 + 4))  # each entry has at least a key length and a type
    metadata: dict[str, Any] = {}
    for _ in range(n_kv):
        key = cur.string().decode("utf-8", errors="replace")
        if key in metadata:
            raise cur.fail(f"duplicate key {key!r}")
        metadata[key] = cur.value(cur.unpack("<I"), key)
    return metadata


def _checked(cur: _Cursor, metadata: dict[str, Any]) -> int:
    """The alignment, after checking the fields whose values steer the reading."""
    align = metadata.get("general.alignment", 32)
    if not isinstance(align, int) or align <= 0 or align & (align - 1):
        raise cur.fail(f"general.alignment {align!r} is not a power of two")
    count = metadata.get("split.count", 1)
    if not isinstance(count, int) or not 0 <= count <= MAX_SPLITS:
        raise cur.fail(f"split.count {count!r} is out of range (0..{MAX_SPLITS})")
    tokens = metadata.get("tokenizer.ggml.tokens")
    if tokens is not None and not isinstance(tokens, list):
        raise cur.fail("tokenizer.ggml.tokens is not an array of strings")
    return align


def read_gguf(path: str | Path) -> GGUFInfo:
    """Parse the header and metadata of a GGUF file; raise GGUFError (one line, naming the
    file and what is wrong) if it is not a well-formed one."""
    path = Path(path)
    check_gguf(path)
    with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        cur = _Cursor(buf, path)
        cur.pos = 4
        version = cur.unpack("<I")
        if version not in (2, 3):
            swapped = int.from_bytes(version.to_bytes(4, "little"), "big")
            if swapped in (2, 3):
                raise cur.fail("a big-endian GGUF file; only little-endian files are supported")
            raise cur.fail(f"GGUF version {version} is not supported (2 or 3)")
        n_tensors, n_kv = cur.unpack("<Q"), cur.unpack("<Q")
        metadata = _metadata(cur, n_kv)
        align = _checked(cur, metadata)
        cur.tensor_infos(n_tensors)
        header = -(-cur.pos // align) * align
        size = len(buf)
    tokens = metadata.pop("tokenizer.ggml.tokens", None) or []
    return GGUFInfo(path, version, metadata, tokens, n_tensors, header, size)
