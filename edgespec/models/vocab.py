"""Token bytes for llguidance's tokenizer, from a GGUF file's own vocabulary: the ordinary tokens
of a byte-level BPE vocabulary (GPT-2's spelling, used by Qwen, Llama 3 and most models)
decoded in bulk, where asking llama.cpp takes a ctypes call or two per token."""

from __future__ import annotations

from edgespec.models.gguf import GGUFInfo

NORMAL = 1  # llama.cpp's LLAMA_TOKEN_TYPE_NORMAL
# A character no byte-level token holds (GPT-2 spells 0x0a "Ċ"): the ordinary tokens joined on
# it decode in a few C-level string operations.
_JOIN = "\n"


def _byte_decoder() -> dict[int, int]:
    """GPT-2's byte-level alphabet: each byte written as one printable character (the
    printable Latin-1 bytes as themselves, the others from U+0100 on, in byte order)."""
    printable = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    others = [b for b in range(256) if b not in printable]
    return {**{b: b for b in printable}, **{0x100 + i: b for i, b in enumerate(others)}}


_DECODE = _byte_decoder()
_ALPHABET = frozenset(map(chr, _DECODE)) | {_JOIN}


def byte_level_pieces(info: GGUFInfo, n_vocab: int) -> list[bytes | None] | None:
    """Each token's bytes as llama.cpp's `token_to_piece` spells them, for the ordinary tokens
    of a byte-level BPE vocabulary; None for the tokens llama.cpp must be asked about: special
    ones, ones it may make special (it re-types tokens whose text looks like `</s>` or
    `<|im_end|>`: every such text holds a `<`), and the ids the metadata names (end of text,
    padding). None for the whole list where the vocabulary is of another kind."""
    types = info.get("tokenizer.ggml.token_type")
    if info.vocab_type != "gpt2" or types is None or not len(types) == info.n_vocab == n_vocab:
        return None
    named = {
        value
        for key, value in info.metadata.items()
        if key.startswith("tokenizer.ggml.") and key.endswith("_token_id")
    }
    ordinary = [
        token
        for token, (text, kind) in enumerate(zip(info.tokens, types.tolist(), strict=True))
        if kind == NORMAL and b"<" not in text and token not in named
    ]
    try:
        joined = _JOIN.encode().join(info.tokens[token] for token in ordinary).decode("utf-8")
    except UnicodeDecodeError:
        return None
    lengths = [len(text) for text in joined.split(_JOIN)]
    if len(lengths) != len(ordinary) or not _ALPHABET.issuperset(joined):
        return None  # a character outside the byte-level alphabet (the joining one included)
    raw = joined.translate(_DECODE).encode("latin-1")  # one character was one byte
    pieces: list[bytes | None] = [None] * n_vocab
    start = 0
    for token, length in zip(ordinary, lengths, strict=True):
        pieces[token] = raw[start : start + length]
        start += length + 1
    return pieces
