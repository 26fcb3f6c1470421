"""Whether the thread that calls llama.cpp matters: one pass carrying one token of each of two
sequences (the default target loaded with two), called 40 times from one thread, then 40 times
alternating between two threads, then one token of one sequence; medians in milliseconds,
three rounds. llama.cpp's CPU backend (built with OpenMP) keeps a team of threads per calling
thread.

    PYTHONPATH=. python benchmarks/serve/several/fair/callers.py [TARGET.gguf]
"""

from __future__ import annotations

import queue
import statistics
import sys
import threading
import time

from edgespec.llamacpp.model import LlamaModel, LoadOptions
from edgespec.models import files
from edgespec.models.registry import load_registry


def main() -> None:
    path = (
        sys.argv[1]
        if len(sys.argv) > 1
        else str(files.fetch(load_registry().default_pair.target).path)
    )
    model = LlamaModel(path, LoadOptions(n_ctx=2048, sequences=2))

    def prepare() -> None:
        for seq, base in ((0, 100), (1, 300)):
            model.seq_rewind(seq, 0)
            model.decode_batch([(seq, [base + i % 50 for i in range(30)], 1)])

    def timed(requests: list[tuple[int, list[int], int]]) -> float:
        started = time.perf_counter()
        model.decode_batch(requests)
        return time.perf_counter() - started

    two = [(0, [5], 1), (1, [7], 1)]

    def alternating(n: int) -> list[float]:
        jobs: list[queue.Queue[bool]] = [queue.Queue(), queue.Queue()]
        done: queue.Queue[float] = queue.Queue()

        def caller(i: int) -> None:
            while jobs[i].get():
                done.put(timed(two))

        threads = [threading.Thread(target=caller, args=(i,)) for i in (0, 1)]
        for t in threads:
            t.start()
        out = []
        for j in range(n):
            jobs[j % 2].put(True)
            out.append(done.get())
        for q in jobs:
            q.put(False)
        for t in threads:
            t.join()
        return out

    for _ in range(3):
        prepare()
        one = [timed(two) for _ in range(40)]
        prepare()
        alt = alternating(40)
        prepare()
        single = [timed([(0, [5], 1)]) for _ in range(40)]
        print(
            f"two sequences, one thread {1000 * statistics.median(one):.1f} ms; "
            f"alternating threads {1000 * statistics.median(alt):.1f} ms; "
            f"one sequence {1000 * statistics.median(single):.1f} ms",
            flush=True,
        )


if __name__ == "__main__":
    main()
