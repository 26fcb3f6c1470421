"""Whether the draft model can run beside the target's verification on this machine: the
target's batch of K tokens timed alone and with the draft decoding one token at a time in
another thread, and how many draft steps fit in that time. Draft and target overlapped
(PEARL-style pre-verification, Liu et al. 2024) pays only where a round overlapped, the
verification beside K draft steps, is shorter than the two in turn at the threads that are
fastest alone.

    PYTHONPATH=. python benchmarks/heavy/overlap.py TARGET DRAFT [--threads T:D ...] [--k 6]
        [--reps 8]

TARGET, DRAFT: GGUF paths (the pair `qwen2.5-coder-1.5b-f16`: `edgespec models` lists them).
`--threads T:D`: the target's and the draft's llama.cpp threads (repeatable; default 2:2 and
2:1). llama.cpp's decode releases the GIL, so the two threads run at once.
"""

from __future__ import annotations

import argparse
import statistics
import threading
from collections.abc import Callable
from pathlib import Path
from time import perf_counter

from edgespec.llamacpp.model import LlamaModel, LoadOptions

TEXT = 'def quicksort(items):\n    """Sort a list of numbers."""\n' * 8


def _timed(work: Callable[[], object]) -> float:
    started = perf_counter()
    work()
    return perf_counter() - started


def measure(
    target_path: Path, draft_path: Path, threads: tuple[int, int], k: int, reps: int
) -> str:
    target = LlamaModel(target_path, LoadOptions(n_ctx=1024, n_threads=threads[0]))
    draft = LlamaModel(draft_path, LoadOptions(n_ctx=1024, n_threads=threads[1]))
    try:
        # A short context, as in an answer's first rounds; enough tokens to feed 60 draft steps.
        tokens = target.tokenize(TEXT)[:120]
        target.decode(tokens)
        draft.decode(tokens)
        t_base, d_base = target.n_past, draft.n_past

        def verify() -> None:
            target.rewind(t_base)
            target.decode(tokens[:k], n_logits=k)

        def drafting(stop: threading.Event, done: list[int], limit: int) -> None:
            """One-token draft decodes until `stop` is set or `limit` ran, counted in `done`."""
            draft.rewind(d_base)
            while not stop.is_set() and done[0] < limit:
                draft.decode([tokens[done[0]]])
                done[0] += 1

        alone_t, alone_d, beside_t, beside_n = [], [], [], []
        for _ in range(reps):
            alone_t.append(_timed(verify))
            alone_d.append(_timed(lambda: drafting(threading.Event(), [0], 5)) / 5)
            stop, done = threading.Event(), [0]
            # 60: a bound far above the steps one verification fits
            worker = threading.Thread(target=drafting, args=(stop, done, 60))
            worker.start()
            beside_t.append(_timed(verify))
            beside_n.append(done[0])  # steps finished by the verification's end, not after it
            stop.set()
            worker.join()
    finally:
        target.close()
        draft.close()
    med = statistics.median
    t, d, b, n = med(alone_t), med(alone_d), med(beside_t), med(beside_n)
    return (
        f"threads {threads[0]}:{threads[1]}, K {k}: verification alone {t * 1e3:.1f} ms, beside "
        f"the draft {b * 1e3:.1f} ms ({b / t:.2f}x) with {n:.1f} draft steps done meanwhile; a "
        f"draft step alone {d * 1e3:.1f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("target", type=Path)
    parser.add_argument("draft", type=Path)
    parser.add_argument("--threads", action="append", help="T:D (default 2:2 and 2:1)")
    parser.add_argument("--k", type=int, default=6, help="tokens in the verified batch")
    parser.add_argument("--reps", type=int, default=8)
    args = parser.parse_args()
    for spec in args.threads or ["2:2", "2:1"]:
        t, d = (int(x) for x in spec.split(":"))
        print(measure(args.target, args.draft, (t, d), args.k, args.reps), flush=True)


if __name__ == "__main__":
    main()
