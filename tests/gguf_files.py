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


def write_model_gguf(
    path: Path,
    *,
    n_layer: int,
    n_embd: int,
    n_head: int,
    n_head_kv: int,
    n_vocab: int,
    weights: int,
) -> Path:
    """A Qwen2-shaped model's header, as the planner reads it, then `weights` bytes where its
    tensors would be (a hole in the file: nothing is written to disk)."""
    writer = gguf.GGUFWriter(str(path), "qwen2")
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list([f"t{i}" for i in range(n_vocab)])
    writer.add_block_count(n_layer)
    writer.add_embedding_length(n_embd)
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_head_kv)
    writer.add_context_length(32768)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    header = -(-path.stat().st_size // 32) * 32  # tensor data starts aligned
    with path.open("r+b") as f:
        f.truncate(header + weights)
    return path
