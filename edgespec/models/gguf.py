"""Reading GGUF metadata without loading weights (or llama.cpp).

The `gguf` package parses every array of the file (merges included), which takes seconds
for a 152k-token vocabulary; this reader keeps only the token texts and scalar fields, which is
all the compatibility check and the memory model need.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from edgespec.errors import FetchError

MAGIC = b"GGUF"
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
_NUMPY = {
    0: "<u1",
    1: "<i1",
    2: "<u2",
    3: "<i2",
    4: "<u4",
    5: "<i4",
    6: "<f4",
    7: "?",
    10: "<u8",
    11: "<i8",
    12: "<f8",
}
_STRING, _ARRAY = 8, 9
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
        count = int(self.get("split.count", 1) or 1)
        if count > 1:
            stem = self.path.name.rsplit("-00001-of-", 1)[0]
            for i in range(2, count + 1):
                part = self.path.with_name(f"{stem}-{i:05d}-of-{count:05d}.gguf")
                if part.exists():
                    total += part.stat().st_size
        return total


class _Cursor:
    def __init__(self, buf: mmap.mmap, path: Path) -> None:
        self.buf, self.pos, self.path = buf, 0, path

    def unpack(self, fmt: str) -> Any:
        try:
            (value,) = struct.unpack_from(fmt, self.buf, self.pos)
        except struct.error as exc:
            raise FetchError(f"truncated GGUF file: {self.path}") from exc
        self.pos += struct.calcsize(fmt)
        return value

    def string(self) -> bytes:
        n = self.unpack("<Q")
        end = self.pos + n
        if end > len(self.buf):
            raise FetchError(f"truncated GGUF file: {self.path}")
        data = self.buf[self.pos : end]
        self.pos = end
        return data

    def skip_string(self) -> None:
        self.pos += 8 + struct.unpack_from("<Q", self.buf, self.pos)[0]

    def value(self, vtype: int, key: str) -> Any:
        if vtype in _SCALARS:
            return self.unpack(_SCALARS[vtype])
        if vtype == _STRING:
            return self.string().decode("utf-8", errors="replace")
        if vtype != _ARRAY:
            raise FetchError(f"{self.path}: unknown GGUF value type {vtype} for {key}")
        etype, n = self.unpack("<I"), self.unpack("<Q")
        if etype in _NUMPY:
            width = np.dtype(_NUMPY[etype]).itemsize
            arr = np.frombuffer(self.buf, dtype=_NUMPY[etype], count=n, offset=self.pos).copy()
            self.pos += width * n
            return arr
        if etype == _STRING:
            if key in _KEEP_ARRAYS:
                return [self.string() for _ in range(n)]
            for _ in range(n):
                self.skip_string()
            return None
        return [self.value(etype, key) for _ in range(n)]


def check_gguf(path: Path) -> None:
    """Refuse missing or non-GGUF files before llama.cpp sees them."""
    if not path.exists():
        raise FetchError(f"model file not found: {path}")
    if not path.is_file():
        raise FetchError(f"not a file: {path}")
    with path.open("rb") as f:
        if f.read(4) != MAGIC:
            raise FetchError(f"not a GGUF file (bad magic number): {path}")


def read_gguf(path: str | Path) -> GGUFInfo:
    """Parse the header and metadata of a GGUF file; raise FetchError if it is not one."""
    path = Path(path)
    check_gguf(path)
    with path.open("rb") as f:
        f.seek(4)
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            cur = _Cursor(buf, path)
            cur.pos = 4
            version = cur.unpack("<I")
            if version < 2:
                raise FetchError(f"{path}: GGUF version {version} is too old")
            n_tensors, n_kv = cur.unpack("<Q"), cur.unpack("<Q")
            metadata: dict[str, Any] = {}
            for _ in range(n_kv):
                key = cur.string().decode("utf-8", errors="replace")
                metadata[key] = cur.value(cur.unpack("<I"), key)
            for _ in range(n_tensors):
                cur.skip_string()
                n_dims = cur.unpack("<I")
                cur.pos += 8 * n_dims + 4 + 8
            align = int(metadata.get("general.alignment", 32))
            header = -(-cur.pos // align) * align
            size = len(buf)
    tokens = metadata.pop("tokenizer.ggml.tokens", None) or []
    return GGUFInfo(path, version, metadata, tokens, n_tensors, header, size)
