"""What the server's worker costs per generated token to hand a generation's events from its
thread to the event loop, with a generation that costs nothing.

    PYTHONPATH=. python benchmarks/overhead/worker_events.py [--tokens 4000] [--per-round 2]
        [--repeats 7]

The generation yields `--per-round` TokenEvents and a RoundEvent a round, then a DoneEvent, as
fast as a generator can; the request's side consumes them as the server's non-streaming path
does (text joined). Reported: the medians of CPU time (both threads: time.process_time) and of
wall time per token.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Generator, Sequence
from types import SimpleNamespace
from typing import Any

from edgespec.api import DoneEvent, Event, GenerationStats, RoundEvent, TokenEvent
from edgespec.server.worker import Worker


def generation(tokens: int, per_round: int) -> Generator[Event, None, None]:
    for i in range(tokens):
        yield TokenEvent(token=i, text="x", from_draft=i % per_round != per_round - 1)
        if i % per_round == per_round - 1 or i == tokens - 1:
            yield RoundEvent(drafter="model", k=per_round, drafted=per_round, accepted=1)
    yield DoneEvent(finish_reason="length", stats=GenerationStats(generated=tokens))


async def consume(worker: Worker, tokens: int, per_round: int) -> str:
    text = []
    async with worker.turn():
        async for event in worker.events(lambda: generation(tokens, per_round)):
            if isinstance(event, TokenEvent):
                text.append(event.text)
    return "".join(text)


def measure(tokens: int, per_round: int, repeats: int) -> dict[str, float]:
    spec: Any = SimpleNamespace(session=SimpleNamespace(last_stats=None))
    cpu, wall = [], []

    async def run() -> None:
        worker = Worker(spec, queue=4, finished=lambda stats: None)
        await consume(worker, 16, per_round)  # warm-up: the executor's thread
        for _ in range(repeats):
            started, clock = time.perf_counter(), time.process_time()
            text = await consume(worker, tokens, per_round)
            cpu.append((time.process_time() - clock) / tokens)
            wall.append((time.perf_counter() - started) / tokens)
            assert len(text) == tokens

    asyncio.run(run())
    return {"cpu_us_per_token": 1e6 * statistics.median(cpu),
            "wall_us_per_token": 1e6 * statistics.median(wall)}  # fmt: skip


def main(argv: Sequence[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=4000)
    parser.add_argument("--per-round", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args(argv)
    result = measure(args.tokens, args.per_round, args.repeats)
    print(", ".join(f"{k} {v:.1f}" for k, v in result.items()))
    return result


if __name__ == "__main__":
    main()
