"""Random-weight GGUFs of the default pair's architecture (Qwen2), made where they run.

A device machine reaches no network and takes at most 64 MiB with it, so the GPU check cannot
bring the real 1 GB pair, let alone a 7B. Speed does not depend on what the weights are, and
losslessness is checkable on any weights, so the check writes models of the real shapes with
random weights, with the real pair's tokenizer (its metadata is a few MB, carried gzipped):

    python benchmarks/gpu/random_gguf.py tokenizer REAL.gguf OUT.json.gz   # here, from the pair
    python benchmarks/gpu/random_gguf.py write OUT.gguf --shape 1.5b --tokenizer OUT.json.gz

Matrices are Q4_0 (or Q8_0) blocks of random bytes with a chosen scale, written straight in
their quantized form: a 7B in F16 would be 15 GB to write and then quantize, these are
written at the speed of the disk. The scales keep every matrix product near unit size and make
the logits' spread `logit_scale`, so that the target's two best tokens are usually far apart
(a near-tie, where llama.cpp's batched and single-token kernels may disagree, stays rare).

A perturbed copy (`perturb` > 0) has the same weights except its output projection, whose
block scales are each multiplied by (1 + perturb * N(0, 1)): the hidden states are the
target's, only the last step's logits move, so its acceptance as a draft is high and the same
at any depth. It runs under any Python with numpy and the `gguf` package (llama.cpp's
gguf-py, vendored in llama-cpp-python's source, is used on the device machine).
"""

from __future__ import annotations

import argparse
import gzip
import json
import zlib
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import gguf
import numpy as np


@dataclass(frozen=True)
class Shape:
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int

    @property
    def kv_dim(self) -> int:
        return self.hidden // self.heads * self.kv_heads


# The default pair's shapes as its GGUFs give them (`shape_of`), and Qwen2.5-7B's from its
# config.json (hidden_size 3584, 28 layers, 28 heads, 4 KV heads, intermediate 18944, vocab
# 152064: padded past the tokenizer's 151936, as the real 7B GGUF is).
SHAPES = {
    "0.5b": Shape(layers=24, hidden=896, heads=14, kv_heads=2, ffn=4864, vocab=151936),
    "1.5b": Shape(layers=28, hidden=1536, heads=12, kv_heads=2, ffn=8960, vocab=151936),
    "7b": Shape(layers=28, hidden=3584, heads=28, kv_heads=4, ffn=18944, vocab=152064),
}
QTYPES = {"Q4_0": gguf.GGMLQuantizationType.Q4_0, "Q8_0": gguf.GGMLQuantizationType.Q8_0}
# llama.cpp's file types (general.file_type) for an all-Q4_0 or all-Q8_0 model.
FILE_TYPES = {"Q4_0": 2, "Q8_0": 7}
# Standard deviation of a random block's quants in units of its scale: uniform nibbles 0..15
# minus 8, or uniform int8.
QUANT_STD = {"Q4_0": float(np.arange(-8, 8).std()), "Q8_0": float(np.arange(-128, 128).std())}
TOKENIZER_KEYS = ("model", "pre", "bos_token_id", "eos_token_id", "padding_token_id")


def _field(reader: Any, key: str) -> Any:
    field = reader.fields.get(key)
    return None if field is None else field.contents()


def shape_of(path: Path) -> Shape:
    """A Qwen2 GGUF's shape, from its metadata."""
    r = gguf.GGUFReader(str(path))
    arch = _field(r, "general.architecture")
    tokens = r.fields["tokenizer.ggml.tokens"]
    return Shape(
        layers=int(_field(r, f"{arch}.block_count")),
        hidden=int(_field(r, f"{arch}.embedding_length")),
        heads=int(_field(r, f"{arch}.attention.head_count")),
        kv_heads=int(_field(r, f"{arch}.attention.head_count_kv")),
        ffn=int(_field(r, f"{arch}.feed_forward_length")),
        vocab=len(tokens.data),
    )


def tokenizer_of(path: Path) -> dict[str, Any]:
    """The tokenizer metadata of a GGUF (token list, types, merges, special ids, chat
    template), and its shape, as one JSON-able document."""
    r = gguf.GGUFReader(str(path))
    doc: dict[str, Any] = {k: _field(r, f"tokenizer.ggml.{k}") for k in TOKENIZER_KEYS}
    doc["add_bos_token"] = bool(_field(r, "tokenizer.ggml.add_bos_token"))
    doc["tokens"] = _field(r, "tokenizer.ggml.tokens")
    doc["token_type"] = [int(t) for t in _field(r, "tokenizer.ggml.token_type")]
    doc["merges"] = _field(r, "tokenizer.ggml.merges")
    doc["chat_template"] = _field(r, "tokenizer.chat_template")
    doc["source"] = {"file": path.name, "shape": asdict(shape_of(path))}
    return doc


def save_tokenizer(doc: dict[str, Any], path: Path) -> None:
    with gzip.open(path, "wt", encoding="utf-8") as f:
        json.dump(doc, f)


def load_tokenizer(path: Path) -> dict[str, Any]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        doc: dict[str, Any] = json.load(f)
    return doc


def _metadata(w: gguf.GGUFWriter, shape: Shape, tok: dict[str, Any], qtype: str) -> None:
    arch = "qwen2"
    w.add_name(f"random qwen2 {shape.layers}x{shape.hidden}")
    w.add_uint32(f"{arch}.block_count", shape.layers)
    w.add_uint32(f"{arch}.context_length", 32768)
    w.add_uint32(f"{arch}.embedding_length", shape.hidden)
    w.add_uint32(f"{arch}.feed_forward_length", shape.ffn)
    w.add_uint32(f"{arch}.attention.head_count", shape.heads)
    w.add_uint32(f"{arch}.attention.head_count_kv", shape.kv_heads)
    w.add_float32(f"{arch}.rope.freq_base", 1e6)
    w.add_float32(f"{arch}.attention.layer_norm_rms_epsilon", 1e-6)
    w.add_uint32("general.file_type", FILE_TYPES[qtype])
    w.add_uint32("general.quantization_version", 2)
    _tokenizer_metadata(w, shape, tok)


def _tokenizer_metadata(w: gguf.GGUFWriter, shape: Shape, tok: dict[str, Any]) -> None:
    tokens, types = list(tok["tokens"]), list(tok["token_type"])
    # A vocabulary padded past the tokenizer (the 7B's): unused tokens, as its converter names them.
    pad = range(len(tokens), shape.vocab)
    tokens += [f"[PAD{i}]" for i in pad]
    types += [int(gguf.TokenType.UNUSED)] * len(pad)
    w.add_tokenizer_model(tok["model"])
    w.add_tokenizer_pre(tok["pre"])
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(tok["merges"])
    w.add_bos_token_id(tok["bos_token_id"])
    w.add_eos_token_id(tok["eos_token_id"])
    w.add_pad_token_id(tok["padding_token_id"])
    w.add_add_bos_token(tok["add_bos_token"])
    if tok.get("chat_template"):
        w.add_chat_template(tok["chat_template"])


@dataclass(frozen=True)
class Tensor:
    name: str
    rows: int  # numpy's first axis (ggml's ne1); 0 for a vector
    cols: int
    std: float  # of the weights; 0: a norm's ones


def tensors(shape: Shape, logit_scale: float) -> list[Tensor]:
    """Every tensor of a Qwen2 model, each matrix scaled so its product with a unit-RMS input
    has unit size (the output projection: `logit_scale`)."""
    h, f, kv = shape.hidden, shape.ffn, shape.kv_dim
    out = [
        Tensor("token_embd.weight", shape.vocab, h, 1.0),
        Tensor("output_norm.weight", 0, h, 0.0),
        Tensor("output.weight", shape.vocab, h, logit_scale / h**0.5),
    ]
    for i in range(shape.layers):
        b = f"blk.{i}"
        out += [
            Tensor(f"{b}.attn_norm.weight", 0, h, 0.0),
            Tensor(f"{b}.attn_q.weight", h, h, h**-0.5),
            Tensor(f"{b}.attn_q.bias", 0, h, 0.1),
            Tensor(f"{b}.attn_k.weight", kv, h, h**-0.5),
            Tensor(f"{b}.attn_k.bias", 0, kv, 0.1),
            Tensor(f"{b}.attn_v.weight", kv, h, h**-0.5),
            Tensor(f"{b}.attn_v.bias", 0, kv, 0.1),
            Tensor(f"{b}.attn_output.weight", h, h, h**-0.5),
            Tensor(f"{b}.ffn_norm.weight", 0, h, 0.0),
            Tensor(f"{b}.ffn_gate.weight", f, h, h**-0.5),
            Tensor(f"{b}.ffn_up.weight", f, h, h**-0.5),
            Tensor(f"{b}.ffn_down.weight", h, f, f**-0.5),
        ]
    return out


def _rng(seed: int, name: str) -> np.random.Generator:
    """One generator per tensor: a model and its perturbed copy draw the same weights."""
    return np.random.default_rng([seed, zlib.crc32(name.encode())])


def _vector(t: Tensor, seed: int) -> np.ndarray:
    if t.std == 0.0:
        return np.ones(t.cols, dtype=np.float32)
    return (_rng(seed, t.name).standard_normal(t.cols) * t.std).astype(np.float32)


def _matrix(t: Tensor, qtype: str, seed: int, perturb: float) -> np.ndarray:
    """Random quantized blocks as raw bytes, (rows, bytes per row), each block's scale set so
    the weights have `t.std`; with `perturb`, each scale jittered by that relative amount."""
    block, size = gguf.GGML_QUANT_SIZES[QTYPES[qtype]]
    n_blocks = t.rows * (t.cols // block)
    raw = np.frombuffer(_rng(seed, t.name).bytes(n_blocks * size), dtype=np.uint8).copy()
    blocks = raw.reshape(n_blocks, size)
    # Random signs: a block's quants have mean -0.5 (Q4_0's -8..7), and a common sign would
    # give every row of every matrix the same offset, making all tokens' states alike.
    signs = np.where(
        np.frombuffer(_rng(seed, t.name + "/sign").bytes(n_blocks), np.int8) < 0, -1, 1
    )
    scale = signs * (t.std / QUANT_STD[qtype])
    if perturb:
        jitter = np.random.default_rng([seed, zlib.crc32(t.name.encode()), 1])
        scale *= 1.0 + perturb * jitter.standard_normal(n_blocks)
    blocks[:, :2] = scale.astype(np.float16).view(np.uint8).reshape(n_blocks, 2)
    return raw.reshape(t.rows, -1)


def _data(
    ts: list[Tensor], qtype: str, seed: int, perturb: float
) -> Iterator[tuple[Tensor, np.ndarray]]:
    for t in ts:
        if t.rows == 0:
            yield t, _vector(t, seed)
        else:
            jitter = perturb if t.name == "output.weight" else 0.0
            yield t, _matrix(t, qtype, seed, jitter)


def write_model(
    path: Path,
    shape: Shape,
    tok: dict[str, Any],
    *,
    qtype: str = "Q4_0",
    seed: int = 0,
    perturb: float = 0.0,
    logit_scale: float = 30.0,
) -> Path:
    """A random-weight Qwen2 GGUF of `shape` with tokenizer `tok`, written tensor by tensor
    (one tensor in memory at a time)."""
    w = gguf.GGUFWriter(str(path), "qwen2")
    _metadata(w, shape, tok, qtype)
    ts = tensors(shape, logit_scale)
    block, size = gguf.GGML_QUANT_SIZES[QTYPES[qtype]]
    for t in ts:
        if t.rows == 0:
            w.add_tensor_info(t.name, (t.cols,), np.dtype(np.float32), 4 * t.cols)
        else:
            nbytes = t.rows * t.cols // block * size
            shape_bytes = (t.rows, t.cols // block * size)
            w.add_tensor_info(t.name, shape_bytes, np.dtype(np.uint8), nbytes, QTYPES[qtype])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for _, data in _data(ts, qtype, seed, perturb):
        w.write_tensor_data(data)
    w.close()
    return path


def sized(name: str, layers: int | None = None) -> Shape:
    """A named shape, optionally with fewer layers (for a quick run on a CPU)."""
    shape = SHAPES[name]
    return shape if layers is None else replace(shape, layers=layers)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    t = sub.add_parser("tokenizer", help="save a GGUF's tokenizer metadata (gzipped JSON)")
    t.add_argument("gguf", type=Path)
    t.add_argument("out", type=Path)
    m = sub.add_parser("write", help="write a random-weight model")
    m.add_argument("out", type=Path)
    m.add_argument("--shape", choices=sorted(SHAPES), default="1.5b")
    m.add_argument("--layers", type=int, default=None, help="fewer layers than the shape's")
    m.add_argument("--tokenizer", type=Path, required=True)
    m.add_argument("--qtype", choices=sorted(QTYPES), default="Q4_0")
    m.add_argument("--seed", type=int, default=0)
    m.add_argument("--perturb", type=float, default=0.0)
    args = parser.parse_args()
    if args.command == "tokenizer":
        save_tokenizer(tokenizer_of(args.gguf), args.out)
    else:
        shape = sized(args.shape, args.layers)
        tok = load_tokenizer(args.tokenizer)
        write_model(args.out, shape, tok, qtype=args.qtype, seed=args.seed, perturb=args.perturb)


if __name__ == "__main__":
    main()
