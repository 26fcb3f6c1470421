"""Small GGUF files written by the tests (metadata only, no tensors)."""

from __future__ import annotations

from pathlib import Path

import gguf


def write_vocab_gguf(
    path: Path,
    tokens: list[bytes],
    *,
    vocab_type: str = "gpt2",
    bos: int = 1,
    eos: int = 2,
    add_bos: bool = False,
    add_eos: bool = False,
    arch: str = "llama",
) -> Path:
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_tokenizer_model(vocab_type)
    writer.add_token_list([t.decode("utf-8", "replace") for t in tokens])
    writer.add_bos_token_id(bos)
    writer.add_eos_token_id(eos)
    writer.add_add_bos_token(add_bos)
    writer.add_add_eos_token(add_eos)
    writer.add_context_length(2048)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
