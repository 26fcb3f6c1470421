"""What the draft search and `edgespec models` need of many GGUF files, read once per file
version: the header's scalar fields, the vocabulary's size and digest, and the pair rule's
verdict for each pair it was asked about. Kept in edgespec's cache (gguf-index.json) under
path, size and mtime, so that a file changed since is read again; a second run reads no file.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgespec.errors import FetchError
from edgespec.models.compat import FIRST_CHECKED_TOKEN, incompatibility
from edgespec.models.gguf import GGUFInfo, read_gguf
from edgespec.system import cachefile, paths

INDEX_VERSION = 1
_LONGEST_TEXT = 200  # longer strings (chat templates, licences) are not kept

# llama.cpp's llama_ftype (general.file_type) by name.
FILE_TYPES = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K",
    11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S",
    17: "Q5_K_M", 18: "Q6_K", 19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S", 22: "IQ3_XS",
    23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL", 26: "IQ3_S", 27: "IQ3_M", 28: "IQ2_S",
    29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M", 32: "BF16", 36: "TQ1_0", 37: "TQ2_0",
    38: "MXFP4_MOE",
}  # fmt: skip


@dataclass(frozen=True)
class Summary:
    """A GGUF file's header as far as the search needs it (no token texts)."""

    path: Path
    key: str  # path, size and mtime: which version of the file this is
    version: int
    metadata: dict[str, Any]
    n_vocab: int
    vocab_digest: str  # of the tokens the pair rule compares
    n_tensors: int
    header_bytes: int
    file_bytes: int

    def info(self) -> GGUFInfo:
        """A GGUFInfo for the memory plan: the fields it reads, blank token texts."""
        return GGUFInfo(
            self.path,
            self.version,
            dict(self.metadata),
            [b""] * self.n_vocab,
            self.n_tensors,
            self.header_bytes,
            self.file_bytes,
        )

    @property
    def architecture(self) -> str:
        return str(self.metadata.get("general.architecture", ""))

    @property
    def basename(self) -> str:
        return str(self.metadata.get("general.basename") or self.metadata.get("general.name", ""))

    @property
    def quantization(self) -> str:
        kind = self.metadata.get("general.file_type")
        return FILE_TYPES.get(kind, f"type {kind}") if isinstance(kind, int) else "?"

    @property
    def size_label(self) -> str:
        return str(self.metadata.get("general.size_label", ""))

    @property
    def weights_bytes(self) -> int:
        return self.info().weights_bytes

    @property
    def parameters(self) -> float:
        """Weights counted from the shape the header gives (token embeddings, attention with
        grouped heads, the feed-forward and its experts); the file's bytes where it gives none.
        Ranks drafts by size whatever their quantization."""
        m, arch = self.metadata, self.architecture

        def field(name: str, default: float = 0) -> float:
            value = m.get(f"{arch}.{name}", default)
            return float(value) if isinstance(value, int | float) else default

        n_embd, n_layer = field("embedding_length"), field("block_count")
        if not n_embd or not n_layer:
            return float(self.file_bytes)
        n_head = field("attention.head_count", 1) or 1
        kv = n_embd * field("attention.head_count_kv", n_head) / n_head
        ffn = 3 * n_embd * field("feed_forward_length", 4 * n_embd) * max(field("expert_count"), 1)
        return self.n_vocab * n_embd + n_layer * (2 * n_embd * n_embd + 2 * n_embd * kv + ffn)


def _vocab_digest(tokens: list[bytes]) -> str:
    digest = hashlib.sha256()
    for token in tokens[FIRST_CHECKED_TOKEN:]:
        digest.update(len(token).to_bytes(4, "little"))
        digest.update(token)
    return digest.hexdigest()


def _summary(info: GGUFInfo, key: str) -> Summary:
    kept = {
        k: v
        for k, v in info.metadata.items()
        if isinstance(v, bool | int | float) or (isinstance(v, str) and len(v) <= _LONGEST_TEXT)
    }
    return Summary(
        info.path,
        key,
        info.version,
        kept,
        info.n_vocab,
        _vocab_digest(info.tokens),
        info.n_tensors,
        info.header_bytes,
        info.file_bytes,
    )


# A summary's fields in the index, each with the type a hostile or old index is checked by.
_DOC_FIELDS = {
    "version": int,
    "metadata": dict,
    "n_vocab": int,
    "vocab_digest": str,
    "n_tensors": int,
    "header_bytes": int,
    "file_bytes": int,
}


def _from_doc(path: Path, key: str, doc: Any) -> Summary | None:
    try:
        return Summary(path, key, **{name: kind(doc[name]) for name, kind in _DOC_FIELDS.items()})
    except (KeyError, TypeError, ValueError):
        return None


def _to_doc(s: Summary) -> dict[str, Any]:
    return {name: getattr(s, name) for name in _DOC_FIELDS}


class Index:
    """The cached summaries and verdicts; `save` writes back what was learnt."""

    def __init__(self) -> None:
        self.path = paths.home() / "gguf-index.json"
        self._files, self._pairs = _tables(cachefile.read(self.path))
        self._new_files: dict[str, Any] = {}
        self._new_pairs: dict[str, str] = {}

    def summary(self, path: Path) -> Summary | None:
        """The file's summary; None where it cannot be read as a GGUF file."""
        try:
            key = cachefile.file_key(path)
        except OSError:
            return None
        cached = self._files.get(key)
        found = _from_doc(path, key, cached) if isinstance(cached, dict) else None
        if found is not None:
            return found
        try:
            info = read_gguf(path)
        except (FetchError, OSError, ValueError):
            return None
        found = _summary(info, key)
        self._files[key] = self._new_files[key] = _to_doc(found)
        return found

    def verdict(self, target: Summary, draft: Summary) -> str | None:
        """The pair rule's reason against the pair (None: it may speculate): from the
        summaries where they settle it, else from both files read in full, once."""
        quick = quick_verdict(target, draft)
        if quick is not _UNSETTLED:
            return quick
        key = f"{target.key}|{draft.key}"
        cached = self._pairs.get(key)
        if isinstance(cached, str):
            return cached or None
        try:
            reason = incompatibility(read_gguf(target.path), read_gguf(draft.path))
        except (FetchError, OSError, ValueError) as exc:
            reason = str(exc)
        self._pairs[key] = self._new_pairs[key] = reason or ""
        return reason

    def save(self) -> None:
        if not self._new_files and not self._new_pairs:
            return
        new_files, new_pairs = self._new_files, self._new_pairs

        def merge(doc: Any) -> dict[str, Any]:
            files, pairs = _tables(doc)
            files.update(new_files)
            pairs.update(new_pairs)
            return {
                "version": INDEX_VERSION,
                "files": {k: v for k, v in files.items() if _alive(k)},
                "pairs": {k: v for k, v in pairs.items() if all(map(_alive, k.split("|", 1)))},
            }

        cachefile.update(self.path, merge)
        self._new_files, self._new_pairs = {}, {}


def _tables(doc: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """The index's file summaries and pair verdicts (empty where it is of another version)."""
    if not isinstance(doc, dict) or doc.get("version") != INDEX_VERSION:
        return {}, {}
    files, pairs = doc.get("files"), doc.get("pairs")
    return (
        dict(files) if isinstance(files, dict) else {},
        dict(pairs) if isinstance(pairs, dict) else {},
    )


def _alive(key: str) -> bool:
    """Whether the file version a key names is still on disk, unchanged."""
    where = key.rsplit(":", 2)[0]
    try:
        return cachefile.file_key(Path(where)) == key
    except OSError:
        return False


_UNSETTLED = "unsettled"


def quick_verdict(target: Summary, draft: Summary) -> str | None:
    """The pair rule from the summaries: a reason, None (the vocabularies are the same), or
    `_UNSETTLED` where token texts must be compared (sizes that differ, within the rule's
    margin)."""
    t, d = target.info(), draft.info()
    if (t.vocab_type, t.add_bos, t.add_eos) != (d.vocab_type, d.add_bos, d.add_eos):
        return incompatibility(t, d)  # one of these fields: named as the full rule names it
    if (t.add_bos and t.bos_id != d.bos_id) or (t.add_eos and t.eos_id != d.eos_id):
        return incompatibility(t, d)
    if target.n_vocab == draft.n_vocab:
        return None if target.vocab_digest == draft.vocab_digest else _UNSETTLED
    reason = incompatibility(t, d)  # blank texts: only the sizes can differ
    return reason or _UNSETTLED
