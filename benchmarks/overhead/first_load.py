"""Whether the first model loaded in a process decodes slower than a second copy of it loaded
after it: the same GGUF loaded twice through llama-cpp-python's own calls (as edgespec's
adapter loads it: read into memory, not mapped), each decoding 96 greedy tokens after the same
prompt, three times, alternating.

    PYTHONPATH=. python benchmarks/overhead/first_load.py [TARGET.gguf] [--threads 2]

Prints the median milliseconds a token of each. Run it several times: each run is a new
process, and the difference between the two copies is what it measures.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Sequence
from typing import Any

import llama_cpp
import numpy as np

from edgespec.models import files
from edgespec.models.registry import load_registry

PROMPT = "<|im_start|>user\nWrite a Python function that parses a CSV file.<|im_end|>\n"


def load(path: str, threads: int) -> tuple[Any, Any]:
    mparams = llama_cpp.llama_model_default_params()
    mparams.load_mode = llama_cpp.LLAMA_LOAD_MODE_NONE
    model = llama_cpp.llama_model_load_from_file(path.encode(), mparams)
    cparams = llama_cpp.llama_context_default_params()
    cparams.n_ctx, cparams.n_threads, cparams.n_threads_batch = 4096, threads, threads
    return model, llama_cpp.llama_init_from_model(model, cparams)


def ms_a_token(model: Any, ctx: Any, tokens: int = 96) -> float:
    """Greedy decoding after the prompt, from an empty cache: milliseconds a token."""
    vocab = llama_cpp.llama_model_get_vocab(model)
    n_vocab = llama_cpp.llama_vocab_n_tokens(vocab)
    text = PROMPT.encode()
    ids = (llama_cpp.llama_token * 256)()
    n = llama_cpp.llama_tokenize(vocab, text, len(text), ids, 256, True, True)
    batch = llama_cpp.llama_batch_init(512, 0, 1)

    def decode(chunk: Sequence[int], pos: int) -> None:
        batch.n_tokens = len(chunk)
        for i, tok in enumerate(chunk):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = tok, pos + i, 1
            batch.seq_id[i][0] = 0
            batch.logits[i] = i == len(chunk) - 1
        if llama_cpp.llama_decode(ctx, batch) != 0:
            raise SystemExit("llama_decode failed")

    llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(ctx), True)
    decode(list(ids[:n]), 0)
    pos, started = n, time.perf_counter()
    for _ in range(tokens):
        row = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ctx, -1), shape=(n_vocab,))
        decode([int(row.argmax())], pos)
        pos += 1
    llama_cpp.llama_batch_free(batch)
    return (time.perf_counter() - started) / tokens * 1e3


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("target", nargs="?", help="a GGUF (default: the default pair's target)")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    path = args.target or str(files.fetch(load_registry().default_pair.target).path)
    llama_cpp.llama_backend_init()
    first, second = load(path, args.threads), load(path, args.threads)
    runs: dict[str, list[float]] = {"first": [], "second": []}
    for _ in range(3):
        runs["first"].append(ms_a_token(*first))
        runs["second"].append(ms_a_token(*second))
    for name, values in runs.items():
        shown = ", ".join(f"{v:.1f}" for v in values)
        print(f"{name} copy: {statistics.median(values):.1f} ms a token ({shown})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
