"""What a Batch's stepping costs per token, with the overhead benchmark's instant models (their
decode costs nothing), `none`, greedy: microseconds of wall time a token of the generation
driven directly (`Speculator.stream` without slots), of a lane of a Batch read alone, and of two
lanes read together from two threads (their tokens over the time both took), interleaved,
medians.

    PYTHONPATH=. python benchmarks/serve/several/fair/handoff.py [--tokens 256] [--repeats 9]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path

from edgespec.api import Speculator
from edgespec.engine.events import TokenEvent

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "overhead"))
import overhead


class _Sequences(overhead.InstantModel):
    """The instant model as a BatchModel: every sequence reads the same rows (what is timed is
    the stepping, not what the rows say)."""

    def seq_past(self, seq: int) -> int:
        return self.n_past

    def seq_rewind(self, seq: int, n_past: int) -> None:
        self.rewind(n_past)

    def decode_batch(self, requests):  # type: ignore[no-untyped-def]
        return [self.decode(tokens, n) for _, tokens, n in requests]


def per_token(spec: Speculator, tokens: int) -> float:
    spec.session.reset()
    started = time.perf_counter()
    made = sum(
        isinstance(e, TokenEvent) for e in spec.stream([1, 2, 3], drafter="none", max_tokens=tokens)
    )
    return (time.perf_counter() - started) * 1e6 / max(made, 1)


def two_lanes(lanes: list[Speculator], tokens: int) -> float:
    out: dict[int, int] = {}

    def read(i: int) -> None:
        lanes[i].session.reset()
        stream = lanes[i].stream([1, 2, 3 + i], drafter="none", max_tokens=tokens)
        out[i] = sum(isinstance(e, TokenEvent) for e in stream)

    started = time.perf_counter()
    threads = [threading.Thread(target=read, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return (time.perf_counter() - started) * 1e6 / max(sum(out.values()), 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args()
    bank = overhead.logit_bank(overhead.VOCAB, 16)
    direct = Speculator(overhead.InstantModel(bank), None)
    model = _Sequences(bank)
    lanes = Speculator(model, None).lanes(2)
    measures = {
        "direct": lambda: per_token(direct, args.tokens),
        "a lane alone": lambda: per_token(lanes[0], args.tokens),
        "two lanes in two threads": lambda: two_lanes(lanes, args.tokens),
    }
    runs: dict[str, list[float]] = {name: [] for name in measures}
    for r in range(args.repeats):
        order = list(measures.items())
        for name, measure in order if r % 2 == 0 else order[::-1]:
            runs[name].append(measure())
    for name, values in runs.items():
        print(f"{name}: {statistics.median(values):.1f} us a token (wall)")


if __name__ == "__main__":
    main()
