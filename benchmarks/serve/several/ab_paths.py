"""The two code paths in one process: the single-sequence path on a model loaded with one
sequence, against a lane of a Batch on a model loaded with four; wall and CPU seconds for N
greedy tokens (`drafter none`), interleaved, three rounds.

    PYTHONPATH=$PWD python benchmarks/serve/several/ab_paths.py MODEL.gguf N
"""

from __future__ import annotations

import sys
import time

from edgespec.api import Speculator
from edgespec.llamacpp.model import LlamaModel, LoadOptions

PROMPT = "Write a Python function that checks whether a number is prime."


def main() -> None:
    path, n = sys.argv[1], int(sys.argv[2])
    one = Speculator(LlamaModel(path, LoadOptions(n_ctx=4096, tree_width=4)), None)
    four = LlamaModel(path, LoadOptions(n_ctx=4096, tree_width=4, sequences=4))
    lane = Speculator(four, None).lanes(4)[0]
    for r in range(3):
        for name, spec in (("one sequence", one), ("lane of 4", lane)):
            spec.session.reset()
            wall, cpu = time.perf_counter(), time.process_time()
            events = spec.stream(PROMPT, drafter="none", max_tokens=n)
            text = "".join(e.text for e in events if hasattr(e, "text"))
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            print(f"{r} {name:12s} wall {wall:6.2f} s cpu {cpu:6.2f} s {text[:30]!r}", flush=True)


if __name__ == "__main__":
    main()
