"""What a new client costs a server with a large `--memory`: the memory indexed once, then the
time and memory of starting each new client's session (issue 50, defect 1).

    .venv/bin/python benchmarks/serve/new_user.py

A memory of 1M tokens: 2,000 documents of 500 tokens drawn at random from 2,000 ids (random text
repeats fewer n-grams than real text, so this indexes more than real text of that length)."""

from __future__ import annotations

import random
import time

import psutil

from edgespec.auto.suffix import SuffixMemory


def main() -> None:
    rng = random.Random(0)
    past = [[rng.randrange(2000) for _ in range(500)] for _ in range(2000)]
    proc = psutil.Process()
    rss0 = proc.memory_info().rss
    start = time.perf_counter()
    memory = SuffixMemory(past=past)
    built = time.perf_counter() - start
    rss1 = proc.memory_info().rss
    times = []
    for i in range(10):
        start = time.perf_counter()
        memory.session(("key", f"user{i}"))
        times.append(time.perf_counter() - start)
    rss2 = proc.memory_info().rss
    print(
        f"memory indexed once: {built:.1f} s, {(rss1 - rss0) / 1e6:.0f} MB; "
        f"a new client: at most {max(times) * 1e3:.3f} ms; "
        f"10 new clients: {(rss2 - rss1) / 1e6:.1f} MB"
    )


if __name__ == "__main__":
    main()
