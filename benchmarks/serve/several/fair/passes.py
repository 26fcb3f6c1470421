"""What a target pass carrying several sequences costs against one sequence's, in plain steps:
the default target loaded with 4 sequences of ~200 cached tokens each, passes of one token,
of 4 and 8 tokens of one sequence, and of 1 and 2 tokens of each of the 4 sequences (each the
median of 15, the cache put back after each). Where 4 sequences' tokens cost as much as one
sequence's 4, slots pay only what the calibration's tau says a wider pass pays.

    PYTHONPATH=. python benchmarks/serve/several/fair/passes.py [TARGET.gguf] [--context 200]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Sequence

from edgespec.llamacpp.model import LlamaModel, LoadOptions
from edgespec.models import files
from edgespec.models.registry import load_registry

SEQUENCES = 4


def ms(model: LlamaModel, requests: Sequence[tuple[int, list[int], int]], n: int = 15) -> float:
    """The median milliseconds of `requests` decoded as one batch, each sequence cut back to
    where it was after every pass."""
    times = []
    for _ in range(n):
        before = [model.seq_past(seq) for seq, _, _ in requests]
        started = time.perf_counter()
        model.decode_batch(requests)
        times.append(time.perf_counter() - started)
        for (seq, _, _), past in zip(requests, before, strict=True):
            model.seq_rewind(seq, past)
    return 1000 * statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("target", nargs="?", help="a GGUF (default: the default pair's target)")
    parser.add_argument("--context", type=int, default=200, help="tokens cached per sequence")
    args = parser.parse_args()
    path = args.target or str(files.fetch(load_registry().default_pair.target).path)
    model = LlamaModel(path, LoadOptions(n_ctx=4096, sequences=SEQUENCES))
    for seq in range(SEQUENCES):
        model.decode_batch([(seq, list(range(100, 100 + args.context)), 1)])
    one = ms(model, [(0, [5], 1)])
    shapes = {
        "4 tokens of one sequence": [(0, [5, 6, 7, 8], 4)],
        "8 tokens of one sequence": [(0, list(range(5, 13)), 8)],
        "1 token of each of 4 sequences": [(s, [5], 1) for s in range(SEQUENCES)],
        "2 tokens of each of 4 sequences": [(s, [5, 6], 2) for s in range(SEQUENCES)],
    }
    print(f"1 token: {one:.1f} ms")
    for name, requests in shapes.items():
        t = ms(model, requests)
        print(f"{name}: {t:.1f} ms, {t / one:.2f} steps", flush=True)


if __name__ == "__main__":
    main()
